"""Random and mutated frames thrown at a live node: it answers or closes the connection,
never crashes, and afterwards still serves a real client correctly."""

from __future__ import annotations

import datetime
import socket
import struct
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v9.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from pykraft.protocol.framing import encode_request
from pykraft.records.record import build_batch
from pykraft.testing import LocalCluster
from tests.integration.test_clients_round_trip import create_topic

TOPIC = "fuzz-target"


def _seed_requests() -> list[bytes]:
    batch = build_batch([(b"k", b"v" * 50, (("h", b"1"),), 1_700_000_000_000)] * 3)
    timeout = datetime.timedelta(seconds=1)
    requests = [
        encode_request(18, 3, 1, "fuzz", ApiVersionsRequest(
            client_software_name="fuzz", client_software_version="1")),
        encode_request(3, 12, 2, "fuzz", MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=TOPIC),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)),
        encode_request(0, 9, 3, "fuzz", ProduceRequest(
            acks=1, timeout=timeout, topic_data=(TopicProduceData(
                name=TOPIC, partition_data=(PartitionProduceData(index=0, records=batch),)),))),
        encode_request(1, 12, 4, "fuzz", FetchRequest(
            max_wait=datetime.timedelta(milliseconds=10), min_bytes=1, topics=(FetchTopic(
                topic=TOPIC, partitions=(FetchPartition(
                    partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=())),
        encode_request(2, 9, 5, "fuzz", ListOffsetsRequest(
            replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(
                name=TOPIC, partitions=(ListOffsetsPartition(partition_index=0,
                                                             timestamp=-1),)),))),
        encode_request(19, 7, 6, "fuzz", CreateTopicsRequest(
            topics=(CreatableTopic(name="fuzz-created", num_partitions=2, replication_factor=1,
                                   assignments=(), configs=()),),
            timeout=timeout, validate_only=True)),
    ]
    return requests


SEEDS = _seed_requests()


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["random", "flip", "truncate", "size", "splice"]))
    if kind == "random":
        body = draw(st.binary(min_size=0, max_size=300))
        return struct.pack(">i", len(body)) + body
    seed = bytearray(draw(st.sampled_from(SEEDS)))
    if kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            position = draw(st.integers(4, len(seed) - 1))
            seed[position] ^= 1 << draw(st.integers(0, 7))
        return bytes(seed)
    if kind == "truncate":
        cut = draw(st.integers(4, len(seed) - 1))
        body = seed[4:cut]
        return struct.pack(">i", len(body)) + bytes(body)
    if kind == "size":
        size = draw(st.sampled_from([-1, 0, 2**31 - 1, 200 * 2**20, len(seed) + 10]))
        return struct.pack(">i", size) + bytes(seed[4:])
    position = draw(st.integers(4, len(seed)))
    insert = draw(st.binary(min_size=1, max_size=40))
    body = bytes(seed[4:position]) + insert + bytes(seed[position:])
    return struct.pack(">i", len(body)) + body


def _send(bootstrap: str, frame: bytes) -> None:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2) as sock:
        sock.settimeout(0.3)
        try:
            sock.sendall(frame)
            sock.recv(1 << 16)  # a response, an orderly close, or a timeout: all fine
        except (TimeoutError, ConnectionError):
            pass


def test_node_survives_garbage_and_still_serves(pykraft_cluster: LocalCluster) -> None:
    bootstrap = pykraft_cluster.bootstrap_servers
    create_topic(bootstrap, TOPIC, partitions=1)

    @settings(max_examples=400, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(frames())
    def throw(frame: bytes) -> None:
        _send(bootstrap, frame)

    throw()
    marker = uuid.uuid4().hex.encode()
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(TOPIC, marker, b"after-fuzz", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values = []
    for _ in range(30):
        for message in consumer.consume(num_messages=1000, timeout=1):
            assert message.error() is None
            values.append(message.value())
        if marker in values:
            break
    consumer.close()
    assert marker in values
