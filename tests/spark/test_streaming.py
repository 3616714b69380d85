"""Streaming reads and writes through format("pykraft") with real Spark local[2] against a
real pykraft node: offsets in Spark's checkpoint, exact resumption, admission control, new
partitions and topics, at-least-once sink."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from pykraft.testing import LocalCluster
from tests.spark.helpers import (
    consume_all,
    create_topic,
    produce,
    stream,
    to_parquet_per_batch,
)

TopicName = Callable[[str], str]


def produce_keyed(bootstrap: str, topic: str, partitions: int, start: int, count: int) -> None:
    produce(bootstrap, topic, ((i % partitions, f"key-{i}".encode(), f"value-{i}".encode())
                               for i in range(start, start + count)), linger_ms=20)


def test_restart_resumes_exactly_from_the_checkpoint(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName,
        tmp_path: Path) -> None:
    """100,000 records over 6 partitions, stopped mid-stream, more produced, restarted from
    the checkpoint: over both runs every record arrives exactly once."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("stream-restart")
    create_topic(bootstrap, topic, partitions=6)
    produce_keyed(bootstrap, topic, 6, 0, 100_000)
    df = stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest",
                maxOffsetsPerTrigger="15000")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = to_parquet_per_batch(df, out, checkpoint, available_now=False,
                                 processing_time="100 milliseconds")
    deadline = time.monotonic() + 120
    while (query.lastProgress or {}).get("batchId", -1) < 2 and time.monotonic() < deadline:
        assert query.exception() is None
        time.sleep(0.2)
    query.stop()
    first_run = spark.read.parquet(str(out)).count()
    assert 0 < first_run < 100_000, "the first run must stop mid-stream"

    produce_keyed(bootstrap, topic, 6, 100_000, 20_000)
    to_parquet_per_batch(df, out, checkpoint).awaitTermination(180)

    rows = spark.read.parquet(str(out))
    assert rows.count() == 120_000
    assert rows.select("partition", "offset").distinct().count() == 120_000
    assert rows.select("key").distinct().count() == 120_000
    per_partition = {r.partition: (r.low, r.high, r.n) for r in rows.groupBy("partition").agg(
        F.min("offset").alias("low"), F.max("offset").alias("high"),
        F.count("*").alias("n")).collect()}
    assert per_partition == {p: (0, 19_999, 20_000) for p in range(6)}
    assert rows.where(F.col("value") != F.concat(F.lit(b"value-"),
                                                 F.substring("key", 5, 10))).count() == 0


def test_max_offsets_per_trigger_bounds_every_batch(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName,
        tmp_path: Path) -> None:
    """maxOffsetsPerTrigger=3000 over 10,000 records: four batches, none above 3000."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("stream-limit")
    create_topic(bootstrap, topic, partitions=3)
    produce_keyed(bootstrap, topic, 3, 0, 10_000)
    df = stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest",
                maxOffsetsPerTrigger="3000", minPartitions="4")
    out = tmp_path / "out"
    to_parquet_per_batch(df, out, tmp_path / "checkpoint").awaitTermination(120)
    sizes = {r.batch: r.n for r in spark.read.parquet(str(out)).groupBy("batch").agg(
        F.count("*").alias("n")).collect()}
    assert sorted(sizes.values()) == [1000, 3000, 3000, 3000]
    assert spark.read.parquet(str(out)).select("partition", "offset").distinct().count() == 10_000


def test_new_partitions_and_topics_are_picked_up(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName,
        tmp_path: Path) -> None:
    """subscribePattern: a partition added to a topic and a new matching topic are read from
    their first offset between micro-batches."""
    bootstrap = pykraft_cluster.bootstrap_servers
    prefix = topic_name("pattern")
    first, second = f"{prefix}-a", f"{prefix}-b"
    create_topic(bootstrap, first, partitions=1)
    df = stream(spark, bootstrap, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
    out = tmp_path / "out"
    query = to_parquet_per_batch(df, out, tmp_path / "checkpoint", available_now=False)
    try:
        produce(bootstrap, first, ((0, b"a0", b"x") for _ in range(100)))
        _wait_rows(spark, query, out, 100)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_partitions([NewPartitions(first, 2)])[first].result(30)
        create_topic(bootstrap, second, partitions=2)
        time.sleep(1)  # the client's metadata must see the new partition before producing
        produce(bootstrap, first, ((1, b"a1", b"y") for _ in range(50)))
        produce(bootstrap, second, ((i % 2, b"b", b"z") for i in range(70)))
        _wait_rows(spark, query, out, 220)
    finally:
        query.stop()
    rows = spark.read.parquet(str(out))
    got = {(r.topic, r.partition): (r.n, r.low) for r in rows.groupBy("topic", "partition").agg(
        F.count("*").alias("n"), F.min("offset").alias("low")).collect()}
    assert got == {(first, 0): (100, 0), (first, 1): (50, 0), (second, 0): (35, 0),
                   (second, 1): (35, 0)}


def _wait_rows(spark: SparkSession, query: StreamingQuery, out: Path, count: int) -> None:
    deadline = time.monotonic() + 60
    seen = 0
    while time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        if out.exists() and any(out.glob("batch=*/_SUCCESS")):
            seen = spark.read.parquet(str(out)).count()
            if seen >= count:
                return
        time.sleep(0.3)
    raise AssertionError(f"saw {seen} rows, expected {count}")


def test_unknown_topic_fails_the_query_at_start(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName,
        tmp_path: Path) -> None:
    """subscribe to a topic that does not exist, with failOnDataLoss: the query fails."""
    df = stream(spark, pykraft_cluster.bootstrap_servers, subscribe=topic_name("missing"))
    query = to_parquet_per_batch(df, tmp_path / "out", tmp_path / "checkpoint")
    with pytest.raises(StreamingQueryException, match="does not exist"):
        query.awaitTermination(60)


def test_stream_write_mirrors_keys_values_headers_partitions(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName,
        tmp_path: Path) -> None:
    """readStream -> writeStream: the copy has the same partition, key, value and headers."""
    bootstrap = pykraft_cluster.bootstrap_servers
    source, sink = topic_name("mirror-in"), topic_name("mirror-out")
    create_topic(bootstrap, source, partitions=3)
    create_topic(bootstrap, sink, partitions=3)
    produce(bootstrap, source, ((i % 3, f"k{i}".encode(), f"v{i}".encode())
                                for i in range(3000)), headers=True)
    df = stream(spark, bootstrap, subscribe=source, startingOffsets="earliest",
                includeHeaders="true", maxOffsetsPerTrigger="1000")
    query = (df.select("key", "value", "partition", "headers").writeStream.format("pykraft")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None

    def records(topic: str) -> list[tuple[int, bytes | None, bytes | None, tuple]]:
        return sorted((r.partition, r.key, r.value, r.headers)
                      for r in consume_all(bootstrap, topic, 3))
    assert records(sink) == records(source)
    assert len(records(sink)) == 3000


def test_latest_starts_after_what_is_there_and_assign_limits_partitions(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName,
        tmp_path: Path) -> None:
    """startingOffsets=latest (the streaming default) skips records already in the topic;
    assign reads only the partitions it names."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("stream-latest")
    create_topic(bootstrap, topic, partitions=3)
    produce_keyed(bootstrap, topic, 3, 0, 300)  # before the query: not read
    df = stream(spark, bootstrap, assign=f'{{"{topic}":[0,2]}}')
    out = tmp_path / "out"
    query = to_parquet_per_batch(df, out, tmp_path / "checkpoint", available_now=False)
    try:
        deadline = time.monotonic() + 60
        while query.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.2)  # the first batch has fixed the starting offsets
        produce_keyed(bootstrap, topic, 3, 300, 300)
        _wait_rows(spark, query, out, 200)
    finally:
        query.stop()
    rows = spark.read.parquet(str(out)).collect()
    assert sorted((r.partition, r.offset) for r in rows) == \
        [(p, o) for p in (0, 2) for o in range(100, 200)]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_deleted_topic_fails_or_is_dropped(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName,
        tmp_path: Path, fail_on_data_loss: str) -> None:
    """A subscribed topic deleted between runs: failOnDataLoss=true stops the query with a
    clear message; false goes on with the topics that remain."""
    bootstrap = pykraft_cluster.bootstrap_servers
    prefix = topic_name("deleted")
    keep, drop = f"{prefix}-keep", f"{prefix}-drop"
    for topic in (keep, drop):
        create_topic(bootstrap, topic)
        produce(bootstrap, topic, ((0, b"k", b"v") for _ in range(10)))
    df = stream(spark, bootstrap, subscribePattern=f"{prefix}-.*",
                startingOffsets="earliest", failOnDataLoss=fail_on_data_loss)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    to_parquet_per_batch(df, out, checkpoint).awaitTermination(60)
    assert spark.read.parquet(str(out)).count() == 20
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    admin.delete_topics([drop])[drop].result(30)
    time.sleep(1)
    produce(bootstrap, keep, ((0, b"k", b"v") for _ in range(5)))
    query = to_parquet_per_batch(df, out, checkpoint)
    if fail_on_data_loss == "true":
        with pytest.raises(StreamingQueryException, match=f"Partition {drop}-0 is gone"):
            query.awaitTermination(60)
    else:
        query.awaitTermination(60)
        assert query.exception() is None
        assert spark.read.parquet(str(out)).count() == 25


def _wait_first_trigger(query: StreamingQuery) -> None:
    deadline = time.monotonic() + 60
    while not query.recentProgress and time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        time.sleep(0.1)
    assert query.recentProgress, "the query ran no trigger"


def test_min_offsets_per_trigger_waits_for_enough_records_or_the_delay(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName,
        tmp_path: Path) -> None:
    """minOffsetsPerTrigger=500 (maxTriggerDelay 1h): 100 new records plan no batch over many
    triggers; 450 more make one batch of all 550. With maxTriggerDelay=2s, 20 records (far
    below the minimum) are read once the delay has passed."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("stream-min")
    create_topic(bootstrap, topic, partitions=2)
    df = stream(spark, bootstrap, subscribe=topic, startingOffsets="latest",
                minOffsetsPerTrigger="500", maxTriggerDelay="1h")
    out = tmp_path / "out"
    query = to_parquet_per_batch(df, out, tmp_path / "checkpoint", available_now=False)
    try:
        _wait_first_trigger(query)
        produce(bootstrap, topic, ((i % 2, b"k", b"v") for i in range(100)))
        time.sleep(3)  # about fifteen 200 ms triggers
        assert query.exception() is None, query.exception()
        if out.exists() and any(out.glob("batch=*/_SUCCESS")):  # an empty first batch
            assert spark.read.parquet(str(out)).count() == 0, "not enough records yet"
        produce(bootstrap, topic, ((i % 2, b"k", b"v") for i in range(450)))
        _wait_rows(spark, query, out, 550)
    finally:
        query.stop()
    sizes = [r.n for r in spark.read.parquet(str(out)).groupBy("batch").agg(
        F.count("*").alias("n")).collect()]
    assert sizes == [550]

    delayed = stream(spark, bootstrap, subscribe=topic, startingOffsets="latest",
                     minOffsetsPerTrigger="1000", maxTriggerDelay="2s")
    out2 = tmp_path / "out2"
    query = to_parquet_per_batch(delayed, out2, tmp_path / "checkpoint2", available_now=False)
    try:
        _wait_first_trigger(query)
        produce(bootstrap, topic, ((i % 2, b"k", b"late") for i in range(20)))
        _wait_rows(spark, query, out2, 20)
    finally:
        query.stop()
    assert spark.read.parquet(str(out2)).where(F.col("value") == b"late").count() == 20
