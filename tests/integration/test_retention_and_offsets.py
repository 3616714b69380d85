"""Retention by time and by size deletes old segments and moves the earliest offset;
ListOffsets by timestamp finds the first record at or after a time."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykraft.testing import LocalCluster

RETENTION_CHECK_MS = 300


@pytest.fixture(scope="module")
def fast_retention_cluster() -> LocalCluster:
    with LocalCluster(configs={"log.retention.check.interval.ms": str(RETENTION_CHECK_MS)}
                      ) as cluster:
        yield cluster


def _create(bootstrap: str, name: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1,
                                  config=config)])[name].result(30)


def _produce(bootstrap: str, topic: str, count: int, timestamp_ms: int | None = None,
             step_ms: int = 0, size: int = 100) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "batch.num.messages": 1})
    for i in range(count):
        kwargs = {}
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms + i * step_ms
        producer.produce(topic, bytes([65 + i % 26]) * size, partition=0, **kwargs)
        producer.poll(0)
    assert producer.flush(30) == 0


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()


def _wait_for(condition: object, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


SEGMENT_BYTES = 1_048_576  # Kafka 4's smallest segment.bytes
RECORD_BYTES = 10_000  # one record per batch: ~104 batches fill a segment


def test_retention_by_time_deletes_old_segments(fast_retention_cluster: LocalCluster) -> None:
    bootstrap = fast_retention_cluster.bootstrap_servers
    _create(bootstrap, "old-data", {"retention.ms": "60000",
                                    "segment.bytes": str(SEGMENT_BYTES)})
    two_hours_ago = int(time.time() * 1000) - 7_200_000
    _produce(bootstrap, "old-data", 300, timestamp_ms=two_hours_ago, size=RECORD_BYTES)
    _produce(bootstrap, "old-data", 30, size=RECORD_BYTES)  # recent records: kept
    # segments holding only old records go; the one where old and recent records meet
    # stays, as does everything after it
    _wait_for(lambda: _watermarks(bootstrap, "old-data")[0] >= 150)
    low, high = _watermarks(bootstrap, "old-data")
    assert high == 330
    assert 150 <= low <= 300, "no segment holding a recent record may be deleted"


def test_retention_by_size_keeps_the_newest_bytes(fast_retention_cluster: LocalCluster) -> None:
    bootstrap = fast_retention_cluster.bootstrap_servers
    retention_bytes = 3 * SEGMENT_BYTES
    _create(bootstrap, "big-data", {"retention.bytes": str(retention_bytes),
                                    "segment.bytes": str(SEGMENT_BYTES)})
    _produce(bootstrap, "big-data", 700, size=RECORD_BYTES)

    def kept_bytes() -> int:
        low, high = _watermarks(bootstrap, "big-data")
        assert high == 700
        return (high - low) * RECORD_BYTES

    # retention runs every check interval, so a pass during the produce may already have
    # deleted some segments: wait for a pass after the last record. What it leaves is at
    # most retention.bytes plus the active segment...
    _wait_for(lambda: kept_bytes() <= retention_bytes + SEGMENT_BYTES)
    settled = kept_bytes()
    # ...and later passes delete nothing more: deletion stops before dropping below
    # retention.bytes by more than one segment
    time.sleep(5 * RETENTION_CHECK_MS / 1000)
    assert kept_bytes() == settled
    assert settled >= retention_bytes - SEGMENT_BYTES


def test_list_offsets_by_timestamp(fast_retention_cluster: LocalCluster) -> None:
    bootstrap = fast_retention_cluster.bootstrap_servers
    _create(bootstrap, "timed", {})
    base = int(time.time() * 1000) - 100_000
    _produce(bootstrap, "timed", 50, timestamp_ms=base, step_ms=1000)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "times"})
    try:
        wanted = [TopicPartition("timed", 0, base + 5500),  # between records 5 and 6
                  TopicPartition("timed", 0, base)]         # exactly record 0
        found = [consumer.offsets_for_times([tp], timeout=10)[0].offset for tp in wanted]
        assert found == [6, 0]
        future = consumer.offsets_for_times([TopicPartition("timed", 0, base + 10**9)],
                                            timeout=10)
        assert future[0].offset == -1  # no record that late: Kafka answers -1
    finally:
        consumer.close()
    low, high = _watermarks(bootstrap, "timed")
    assert (low, high) == (0, 50)
