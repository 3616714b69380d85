"""DeleteRecords through confluent-kafka's AdminClient and `pykraft delete-records`: the low
watermark moves, ListOffsets earliest agrees, fetches below it get OFFSET_OUT_OF_RANGE, whole
segments below it leave the disk, and the new start survives a kill -9. Also: a keyless record
produced to a compacted topic is refused with INVALID_RECORD and nothing is appended."""

from __future__ import annotations

import datetime
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.delete_records.v2.request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from pykraft.records.record import build_batch
from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient

SEGMENT_BYTES = 1_048_576
RECORD_BYTES = 10_000  # ~104 one-record batches fill a segment


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster() as node:
        yield node


def _create(bootstrap: str, name: str, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1,
                                  config=config or {})])[name].result(30)


def _produce(bootstrap: str, topic: str, count: int, size: int = RECORD_BYTES) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "batch.num.messages": 1})
    for i in range(count):
        producer.produce(topic, bytes([65 + i % 26]) * size, key=str(i).encode(), partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def _delete(bootstrap: str, topic: str, offset: int) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, offset)])
    return next(iter(futures.values())).result(30)


def _fetch_error(bootstrap: str, topic: str, offset: int) -> ErrorCode:
    request = FetchRequest(
        max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=())
    with WireClient(bootstrap) as client:
        return ErrorCode(client.request(1, 12, request).responses[0].partitions[0].error_code)


def _segment_files(cluster: LocalCluster, topic: str) -> list[str]:
    return sorted(path.name for path in (cluster.log_dir / f"{topic}-0").glob("*.log"))


def test_delete_records_moves_the_low_watermark(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    _create(bootstrap, "dr-basic", {"segment.bytes": str(SEGMENT_BYTES)})
    _produce(bootstrap, "dr-basic", 300)
    assert len(_segment_files(cluster, "dr-basic")) >= 3
    deleted = _delete(bootstrap, "dr-basic", 250)
    assert deleted.low_watermark == 250
    assert _watermarks(bootstrap, "dr-basic") == (250, 300)
    # every segment wholly below 250 has gone from the disk at once
    first = _segment_files(cluster, "dr-basic")[0]
    assert int(first.split(".")[0]) <= 250
    assert len(_segment_files(cluster, "dr-basic")) <= 2
    assert _fetch_error(bootstrap, "dr-basic", 10) == ErrorCode.offset_out_of_range
    assert _fetch_error(bootstrap, "dr-basic", 249) == ErrorCode.offset_out_of_range
    assert _fetch_error(bootstrap, "dr-basic", 250) == ErrorCode.none
    # a consumer starting from the beginning starts at the low watermark
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dr-basic",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("dr-basic", 0, -2)])
        message = consumer.poll(20)
        assert message is not None and message.error() is None
        assert message.offset() == 250 and message.key() == b"250"
    finally:
        consumer.close()
    # deleting below the current start changes nothing and still answers the low watermark
    assert _delete(bootstrap, "dr-basic", 5).low_watermark == 250


def test_delete_records_to_the_high_watermark_with_minus_one(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    _create(bootstrap, "dr-all")
    _produce(bootstrap, "dr-all", 20, size=10)
    assert _delete(bootstrap, "dr-all", -1).low_watermark == 20
    assert _watermarks(bootstrap, "dr-all") == (20, 20)
    _produce(bootstrap, "dr-all", 5, size=10)
    assert _watermarks(bootstrap, "dr-all") == (20, 25)


def test_delete_records_errors(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    _create(bootstrap, "dr-errors")
    _create(bootstrap, "dr-compacted", {"cleanup.policy": "compact"})
    _produce(bootstrap, "dr-errors", 10, size=10)
    with pytest.raises(KafkaException) as above:
        _delete(bootstrap, "dr-errors", 11)
    assert above.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    with pytest.raises(KafkaException) as compacted:
        _delete(bootstrap, "dr-compacted", 0)
    assert compacted.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert _watermarks(bootstrap, "dr-errors") == (0, 10)
    request = DeleteRecordsRequest(
        topics=(DeleteRecordsTopic(name="dr-errors", partitions=(
                    DeleteRecordsPartition(partition_index=0, offset=-7),
                    DeleteRecordsPartition(partition_index=3, offset=0))),
                DeleteRecordsTopic(name="dr-no-such-topic", partitions=(
                    DeleteRecordsPartition(partition_index=0, offset=0),))),
        timeout=datetime.timedelta(seconds=5))
    with WireClient(bootstrap) as client:
        response = client.request(21, 2, request)
    results = {(topic.name, p.partition_index): (p.error_code, p.low_watermark)
               for topic in response.topics for p in topic.partitions}
    assert results == {
        ("dr-errors", 0): (ErrorCode.offset_out_of_range, -1),
        ("dr-errors", 3): (ErrorCode.unknown_topic_or_partition, -1),
        ("dr-no-such-topic", 0): (ErrorCode.unknown_topic_or_partition, -1),
    }


def test_delete_records_cli(cluster: LocalCluster, tmp_path: Path) -> None:
    bootstrap = cluster.bootstrap_servers
    _create(bootstrap, "dr-cli")
    _produce(bootstrap, "dr-cli", 30, size=10)
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps(
        {"partitions": [{"topic": "dr-cli", "partition": 0, "offset": 12}], "version": 1}))
    result = subprocess.run(
        [sys.executable, "-m", "pykraft", "delete-records", "--bootstrap-server", bootstrap,
         "--offset-json-file", str(offsets)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "partition: dr-cli-0\tlow_watermark: 12" in result.stdout
    assert _watermarks(bootstrap, "dr-cli") == (12, 30)
    offsets.write_text(json.dumps(
        {"partitions": [{"topic": "dr-cli", "partition": 0, "offset": 99}], "version": 1}))
    failed = subprocess.run(
        [sys.executable, "-m", "pykraft", "delete-records", "--bootstrap-server", bootstrap,
         "--offset-json-file", str(offsets)], capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1
    assert "partition: dr-cli-0\terror:" in failed.stdout


def test_low_watermark_survives_kill_9() -> None:
    with LocalCluster() as node:
        bootstrap = node.bootstrap_servers
        _create(bootstrap, "dr-restart", {"segment.bytes": str(SEGMENT_BYTES)})
        _produce(bootstrap, "dr-restart", 150)
        assert _delete(bootstrap, "dr-restart", 130).low_watermark == 130
        node.kill(signal.SIGKILL)
        node.start()
        assert _watermarks(bootstrap, "dr-restart") == (130, 150)
        assert _fetch_error(bootstrap, "dr-restart", 129) == ErrorCode.offset_out_of_range


def test_keyless_record_to_compacted_topic_is_refused(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    _create(bootstrap, "compacted-keys", {"cleanup.policy": "compact"})
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
    producer.produce("compacted-keys", b"keyed", key=b"k", partition=0)
    assert producer.flush(30) == 0
    producer.produce("compacted-keys", b"no key", partition=0,
                     on_delivery=lambda error, _: errors.append(error))
    assert producer.flush(30) == 0
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.INVALID_RECORD
    assert _watermarks(bootstrap, "compacted-keys") == (0, 1), "nothing was appended"
    # on the wire: each keyless record of the batch is named by its index (KIP-467)
    batch = build_batch([(b"k", b"a", (), 0), (None, b"b", (), 0), (b"k", b"c", (), 0),
                         (None, b"d", (), 0)])
    request = ProduceRequest(acks=1, timeout=datetime.timedelta(seconds=5),
                             topic_data=(TopicProduceData(name="compacted-keys", partition_data=(
                                 PartitionProduceData(index=0, records=batch),)),))
    with WireClient(bootstrap) as client:
        answer = client.request(0, 9, request).responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.invalid_record and answer.base_offset == -1
    assert [e.batch_index for e in answer.record_errors] == [1, 3]
    assert all("without key" in (e.batch_index_error_message or "")
               for e in answer.record_errors)
    assert answer.error_message.startswith(  # Kafka's processRecordErrors wording
        "One or more records have been rejected due to 2 record errors in total")
    assert _watermarks(bootstrap, "compacted-keys") == (0, 1), "nothing was appended"
    # a topic that is not compacted still takes keyless records
    _create(bootstrap, "plain-keys")
    producer.produce("plain-keys", b"no key", partition=0)
    assert producer.flush(30) == 0
    assert _watermarks(bootstrap, "plain-keys") == (0, 1)


def test_offset_json_file_format_is_checked() -> None:
    from pykraft.cli.args import CommandError
    from pykraft.cli.delete_records import parse_offset_json

    parsed = parse_offset_json(json.dumps({"partitions": [
        {"topic": "a", "partition": 0, "offset": 5},
        {"topic": "b", "partition": 2, "offset": -1}], "version": 1}))
    assert [(tp.topic, tp.partition, tp.offset) for tp in parsed] == [("a", 0, 5), ("b", 2, -1)]
    bad = [
        ("not json", "not valid JSON"),
        ("[]", "'partitions'"),
        ('{"partitions": [], "version": 2}', "Not supported version field value 2"),
        ('{"partitions": [{"topic": "a", "partition": "0", "offset": 1}]}', "'partition'"),
        ('{"partitions": [{"partition": 0, "offset": 1}]}', "'topic'"),
        ('{"partitions": [{"topic": "a", "partition": 0, "offset": 1}, '
         '{"topic": "a", "partition": 0, "offset": 2}]}', "duplicate topic partitions: a-0"),
    ]
    for text, message in bad:
        with pytest.raises(CommandError, match=message):
            parse_offset_json(text)
