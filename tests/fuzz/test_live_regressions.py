"""Frames the live fuzz (test_live.py) found mishandled, each sent as it was to a real node."""

from __future__ import annotations

import datetime
import socket

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v15.request import FetchPartition, FetchRequest, FetchTopic

from pykraft.protocol.api import ApiKey
from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient
from tests.fuzz.test_decode import BROKER_REGISTRATION_NULL_LISTENERS

# Metadata v11 asking for a topic by id, its name null: the error entry for it had a null
# name, which v11 cannot encode; the node closed the connection with a traceback (case 1215)
METADATA_V11_BY_ID = bytes.fromhex(
    "000000240003000b3e0437a6ffff0002a54c8eb0fdffcb8a9f90691fa1f05f950000010100000100")


def test_metadata_v11_by_topic_id_is_answered(pykraft_cluster: LocalCluster) -> None:
    with WireClient(pykraft_cluster.bootstrap_servers) as client:
        client.send_raw(METADATA_V11_BY_ID)
        correlation_id, response = client.receive(ApiKey.METADATA, 11)
    assert correlation_id == 0x3E0437A6
    assert [(topic.name, topic.error_code) for topic in response.topics] == [
        ("", ErrorCode.invalid_request)]


def test_null_in_a_non_nullable_field_closes_the_connection(
        pykraft_cluster: LocalCluster) -> None:
    address = ("127.0.0.1", pykraft_cluster.controller_port)
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(BROKER_REGISTRATION_NULL_LISTENERS)
        assert sock.recv(1) == b""
    log = pykraft_cluster.log_path.read_text(errors="replace")
    assert "null in a non-nullable field" in log
    assert "TypeError: 'NoneType' object is not iterable" not in log


def test_fetch_of_the_zero_topic_id_is_answered(pykraft_cluster: LocalCluster) -> None:
    """Fetch v13+ naming the zero topic id, which kio reads as None: the handler took it for
    a topic named by name, which those versions lack (AttributeError, case 2738 of the live
    fuzz). Kafka answers UNKNOWN_TOPIC_ID."""
    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=10), min_bytes=1,
        topics=(FetchTopic(topic_id=None, partitions=(FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="")
    with WireClient(pykraft_cluster.bootstrap_servers) as client:
        response = client.request(ApiKey.FETCH, 15, request)
    assert [[p.error_code for p in topic.partitions] for topic in response.responses] == [
        [ErrorCode.unknown_topic_id]]
