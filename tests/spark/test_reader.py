"""The task-side reader alone (no Spark): pooled consumers read exact ranges, one after
another, in one process, as a reused Spark Python worker does."""

from __future__ import annotations

from collections.abc import Callable

from pykraft.spark.client import CONSUMERS, read_range
from pykraft.spark.options import parse_read_options
from pykraft.spark.planning import OffsetRange
from pykraft.testing import LocalCluster
from tests.spark.helpers import create_topic, produce


def test_pooled_consumers_read_exact_ranges_in_turn(
        pykraft_cluster: LocalCluster, topic_name: Callable[[str], str]) -> None:
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("reader-pool")
    create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, ((i % 2, None, f"{i % 2}:{i // 2}".encode())
                               for i in range(40_000)))
    options = parse_read_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic},
                                 streaming=True)
    key = CONSUMERS.key(options)
    plan = [OffsetRange(topic, 0, 100, 5_000), OffsetRange(topic, 1, 0, 20_000),
            OffsetRange(topic, 0, 19_990, 20_000), OffsetRange(topic, 1, 7, 8)]
    for r in plan:
        values = [v.decode() for batch in read_range(options, r)
                  for v in batch.column("value").to_pylist()]
        assert values == [f"{r.partition}:{o}" for o in range(r.from_offset, r.until_offset)]
        assert len(CONSUMERS._idle[key]) == 1  # the same consumer served every range
    abandoned = read_range(options, OffsetRange(topic, 0, 0, 20_000))
    next(abandoned)
    abandoned.close()  # stopped mid-range: closed, not pooled
    assert len(CONSUMERS._idle[key]) == 0


def test_pooled_consumer_reads_a_partition_added_after_it_was_created(
        pykraft_cluster: LocalCluster, topic_name: Callable[[str], str]) -> None:
    """A pooled consumer's metadata predates a new partition: it refreshes and reads it."""
    import time

    from confluent_kafka.admin import AdminClient, NewPartitions

    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("reader-grown")
    create_topic(bootstrap, topic, partitions=1)
    produce(bootstrap, topic, ((0, None, b"old") for _ in range(10)))
    options = parse_read_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic},
                                 streaming=True)
    assert sum(b.num_rows for b in read_range(options, OffsetRange(topic, 0, 0, 10))) == 10
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
    time.sleep(0.5)
    produce(bootstrap, topic, ((1, None, b"new") for _ in range(5)))
    started = time.monotonic()
    rows = [v for b in read_range(options, OffsetRange(topic, 1, 0, 5))
            for v in b.column("value").to_pylist()]
    assert rows == [b"new"] * 5
    assert time.monotonic() - started < 5
