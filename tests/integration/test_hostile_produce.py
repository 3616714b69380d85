"""A careless or hostile client against a real node: reserved topic names, writes to internal
topics, and batches whose CRC is valid but whose records are garbage (uncompressed and under
every codec, decompression bombs included). Each is refused with Kafka's error code, nothing
of it is stored, consumers read every good record around it, and the node restarts clean."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from kio.schema.create_topics.v7.request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.list_offsets.v9.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from pykraft.records.batch import CONTROL_BIT, DELETE_HORIZON_BIT, TIMESTAMP_TYPE_BIT
from pykraft.records.codecs import CompressionType
from pykraft.records.record import build_batch
from pykraft.testing import LocalCluster
from pykraft.testing.batches import frame_batch, raw_record, varint
from pykraft.testing.wire import WireClient

TOPIC = "hostile"
COMPACTED = "hostile-compacted"
HOUR_MS = 3_600_000
DECOMPRESSED_MAX = 4 << 20  # the node's bound on a produced batch's decompressed size
ONE_SECOND = datetime.timedelta(seconds=1)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(configs={
        "auto.create.topics.enable": "true",
        "pykraft.produce.decompressed.batch.max.bytes": str(DECOMPRESSED_MAX),
    }) as node:
        with WireClient(node.bootstrap_servers) as client:
            response = client.request(19, 7, CreateTopicsRequest(topics=(
                _creatable(TOPIC, {"message.timestamp.before.max.ms": str(HOUR_MS),
                                   "message.timestamp.after.max.ms": str(HOUR_MS)}),
                _creatable(COMPACTED, {"cleanup.policy": "compact"}),
            ), timeout=ONE_SECOND, validate_only=False))
            assert [t.error_code for t in response.topics] == [ErrorCode.none] * 2
        yield node


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[WireClient]:
    with WireClient(cluster.bootstrap_servers) as wire:
        yield wire


def _creatable(name: str, configs: dict[str, str] | None = None) -> CreatableTopic:
    return CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=(),
                          configs=tuple(CreatableTopicConfig(name=k, value=v)
                                        for k, v in (configs or {}).items()))


def _produce(client: WireClient, records: bytes, topic: str = TOPIC) -> Any:
    request = ProduceRequest(acks=-1, timeout=ONE_SECOND, topic_data=(TopicProduceData(
        name=topic, partition_data=(PartitionProduceData(index=0, records=records),)),))
    return client.request(0, 9, request).responses[0].partition_responses[0]


def _end_offset(client: WireClient, topic: str = TOPIC) -> int:
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(
        name=topic, partitions=(ListOffsetsPartition(partition_index=0, timestamp=-1),)),))
    partition = client.request(2, 9, request).topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    return int(partition.offset)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _good(tag: str, count: int = 2) -> bytes:
    return build_batch([(f"{tag}-{i}".encode(), b"v", (), _now_ms()) for i in range(count)])


_RECORD = raw_record(0, b"k", b"v")
# name -> (records bytes, error code, index of the record named in record_errors, or None)
HOSTILE: dict[str, tuple[bytes, ErrorCode, int | None]] = {
    "record length overruns": (frame_batch(raw_record(0, b"k", b"v", length_adjust=4), 1),
                               ErrorCode.invalid_record, 0),
    "record length short of its fields": (frame_batch(raw_record(0, b"k", b"vv", length_adjust=-1),
                                                      1), ErrorCode.invalid_record, 0),
    "overlong varint": (frame_batch(b"\xff\xff\xff\xff\x7f" + b"\0" * 8, 1),
                        ErrorCode.invalid_record, 0),
    "offset deltas out of order": (frame_batch(_RECORD + raw_record(3, b"k", b"v"), 2),
                                   ErrorCode.invalid_record, 1),
    "fewer records than counted": (frame_batch(_RECORD, 2), ErrorCode.invalid_record, 1),
    "bytes after the records": (frame_batch(_RECORD + b"\0\0\0", 1),
                                ErrorCode.invalid_record, None),
    "negative header count": (frame_batch(varint(6) + b"\0" * 5 + varint(-1), 1),
                              ErrorCode.invalid_record, 0),
    "count disagrees with offsets": (frame_batch(_RECORD, 1, last_offset_delta=4),
                                     ErrorCode.invalid_record, None),
    "unknown codec": (frame_batch(_RECORD, 1, attributes=6, compress_section=False),
                      ErrorCode.corrupt_message, None),
    "control batch": (frame_batch(_RECORD, 1, attributes=CONTROL_BIT),
                      ErrorCode.invalid_record, None),
    "delete horizon": (frame_batch(_RECORD, 1, attributes=DELETE_HORIZON_BIT),
                       ErrorCode.invalid_record, None),
    "producer id without a sequence": (frame_batch(_RECORD, 1, producer_id=5, producer_epoch=0),
                                       ErrorCode.invalid_record, None),
    "LogAppendTime from a producer": (frame_batch(_RECORD, 1, attributes=TIMESTAMP_TYPE_BIT),
                                      ErrorCode.invalid_timestamp, 0),
    "a record two hours old": (frame_batch(
        _RECORD + raw_record(1, b"k", b"v", timestamp_delta=-2 * HOUR_MS), 2),
        ErrorCode.invalid_timestamp, 1),
    "two batches": (_good("a") + _good("b"), ErrorCode.invalid_record, None),
    "no batch": (b"", ErrorCode.invalid_record, None),
}
for _codec in (CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
               CompressionType.ZSTD):
    _name = _codec.name.lower()
    HOSTILE[f"{_name}: garbage records"] = (frame_batch(_RECORD + b"\x09\x09", 1, codec=_codec),
                                            ErrorCode.invalid_record, None)
    HOSTILE[f"{_name}: bytes no decoder takes"] = (frame_batch(
        b"\0\0\0\x10this is not compressed", 1, codec=_codec, compress_section=False),
        ErrorCode.corrupt_message, None)
    HOSTILE[f"{_name}: decompression bomb"] = (frame_batch(
        raw_record(0, b"k", b"\0" * (4 * DECOMPRESSED_MAX)), 1, codec=_codec),
        ErrorCode.message_too_large, None)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_batches_are_refused_and_nothing_is_stored(client: WireClient,
                                                           name: str) -> None:
    records, code, index = HOSTILE[name]
    before = _end_offset(client)
    result = _produce(client, records)
    assert result.error_code == code, result.error_message
    assert [e.batch_index for e in result.record_errors] == ([] if index is None else [index])
    assert _end_offset(client) == before
    # the same connection and the node go on taking good batches
    assert _produce(client, _good(name)).error_code == ErrorCode.none
    assert _end_offset(client) == before + 2


def test_keyless_records_of_a_compacted_topic_are_named(client: WireClient) -> None:
    section = _RECORD + raw_record(1, None, b"v") + raw_record(2, b"k", b"v")
    for codec in (CompressionType.NONE, CompressionType.ZSTD):
        result = _produce(client, frame_batch(section, 3, codec=codec), COMPACTED)
        assert result.error_code == ErrorCode.invalid_record
        assert [e.batch_index for e in result.record_errors] == [1]
    assert _end_offset(client, COMPACTED) == 0


def test_consumers_read_every_good_record_and_a_restart_keeps_them(
        cluster: LocalCluster, client: WireClient) -> None:
    for name in sorted(HOSTILE):  # garbage between good batches, as a careless client sends
        assert _produce(client, HOSTILE[name][0]).error_code != ErrorCode.none
        assert _produce(client, _good(f"after {name}", 1)).error_code == ErrorCode.none
    expected = _end_offset(client)
    assert _consume_keys(cluster, expected) == _consume_keys(cluster, expected)
    keys = _consume_keys(cluster, expected)
    assert [key for key in keys if key.startswith("after ")] == \
        [f"after {name}-0" for name in sorted(HOSTILE)]
    cluster.stop()
    cluster.start()
    assert _consume_keys(cluster, expected) == keys


def _consume_keys(cluster: LocalCluster, count: int) -> list[str]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": f"reader-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    keys: list[str] = []
    deadline = time.monotonic() + 30
    try:
        while len(keys) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None or message.error().code() == \
                KafkaError._PARTITION_EOF, message.error()
            if message.error() is None:
                keys.append(message.key().decode())
    finally:
        consumer.close()
    assert len(keys) == count, f"read {len(keys)} of {count} records"
    return keys


# -- reserved names and internal topics -------------------------------------------------------


# __consumer_offsets and __transaction_state are made with their own settings instead
# (tests/integration/test_internal_topics.py)
@pytest.mark.parametrize("name", ["__cluster_metadata", "__share_group_state"])
def test_reserved_topic_names_cannot_be_created(client: WireClient, name: str) -> None:
    response = client.request(19, 7, CreateTopicsRequest(
        topics=(_creatable(name), _creatable(f"ok-beside{name}")), timeout=ONE_SECOND,
        validate_only=True))
    codes = {t.name: (t.error_code, t.error_message) for t in response.topics}
    assert codes == {
        name: (ErrorCode.invalid_request, f"Creation of internal topic {name} is prohibited."),
        f"ok-beside{name}": (ErrorCode.none, None),
    }


def test_metadata_never_auto_creates_the_metadata_topic(
        cluster: LocalCluster, client: WireClient) -> None:
    request = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None,
                                                           name="__cluster_metadata"),),
                              allow_auto_topic_creation=True,
                              include_topic_authorized_operations=False)
    for _ in range(2):
        (topic,) = client.request(3, 12, request).topics
        assert topic.error_code == ErrorCode.unknown_topic_or_partition
        time.sleep(0.5)
    assert (cluster.log_dir / "__cluster_metadata-0").is_dir()  # the Raft log's, alone
    assert not list(cluster.log_dir.glob("__cluster_metadata-0-*"))


def test_clients_cannot_write_to_internal_topics(client: WireClient) -> None:
    # a group coordinator lookup creates __consumer_offsets, as a consumer's first use does
    lookup = FindCoordinatorRequest(key_type=0, coordinator_keys=("hostile-group",))
    deadline = time.monotonic() + 20
    while client.request(10, 4, lookup).coordinators[0].error_code != ErrorCode.none:
        assert time.monotonic() < deadline, "no group coordinator"
        time.sleep(0.2)
    for topic in ("__consumer_offsets", "__cluster_metadata", "__transaction_state"):
        result = _produce(client, _good("sneaky"), topic)
        assert result.error_code == ErrorCode.invalid_topic_exception, topic
        assert result.error_message == f"Cannot append to internal topic {topic}"


def test_a_real_client_is_told_it_cannot_write_to_an_internal_topic(
        cluster: LocalCluster) -> None:
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "message.send.max.retries": 0})
    producer.produce("__consumer_offsets", b"v", b"k", partition=0,
                     on_delivery=lambda error, _message: errors.append(error))
    producer.flush(15)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.TOPIC_EXCEPTION
