"""Batch reads and writes through format("pykraft") with real Spark local[2] against a real
pykraft node: exact offset ranges, round trips of keys, values and headers, clear errors."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from pykraft.testing import LocalCluster
from tests.spark.helpers import consume_all, create_topic, produce

TopicName = Callable[[str], str]


def _read(spark: SparkSession, bootstrap: str, **options: str) -> DataFrame:
    reader = spark.read.format("pykraft").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _fill(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    produce(bootstrap, topic, ((p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode())
                               for p in range(partitions) for i in range(per_partition)))


def test_offsets_json_selects_exactly_that_range(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName) -> None:
    """startingOffsets/endingOffsets JSON (with -2 and -1) select exactly those offsets."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("batch-range")
    create_topic(bootstrap, topic, partitions=3)
    _fill(bootstrap, topic, 3, 100)
    starting = {topic: {"0": 10, "1": -2, "2": 50}}
    ending = {topic: {"0": 20, "1": 5, "2": -1}}
    rows = _read(spark, bootstrap, subscribe=topic, startingOffsets=json.dumps(starting),
                 endingOffsets=json.dumps(ending)).collect()
    got = sorted((r.partition, r.offset, r.key, r.value, r.topic, r.timestampType) for r in rows)
    wanted = sorted((p, i, f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), topic, 0)
                    for p, (low, high) in {0: (10, 20), 1: (0, 5), 2: (50, 100)}.items()
                    for i in range(low, high))
    assert got == wanted


def test_default_batch_read_is_whole_topic_with_schema(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName) -> None:
    """Defaults earliest..latest read everything; the schema is Spark's Kafka source's."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("batch-all")
    create_topic(bootstrap, topic, partitions=2)
    _fill(bootstrap, topic, 2, 1000)
    df = _read(spark, bootstrap, subscribe=topic)
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>")
    counts = {r.partition: (r.n, r.low, r.high) for r in df.groupBy("partition").agg(
        F.count("*").alias("n"), F.min("offset").alias("low"),
        F.max("offset").alias("high")).collect()}
    assert counts == {0: (1000, 0, 999), 1: (1000, 0, 999)}


def test_min_partitions_splits_without_overlap_or_gap(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName) -> None:
    """minPartitions cuts one large partition into several tasks; every offset once."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("batch-split")
    create_topic(bootstrap, topic, partitions=1)
    _fill(bootstrap, topic, 1, 5000)
    df = _read(spark, bootstrap, subscribe=topic, minPartitions="5")
    assert df.rdd.getNumPartitions() == 5
    per_task = df.select(F.spark_partition_id().alias("task"), "offset").groupBy("task").agg(
        F.min("offset").alias("low"), F.max("offset").alias("high"),
        F.count("*").alias("n")).orderBy("low").collect()
    assert [r.n for r in per_task] == [1000] * 5
    assert [(r.low, r.high) for r in per_task] == [(i * 1000, i * 1000 + 999) for i in range(5)]
    capped = _read(spark, bootstrap, subscribe=topic, maxRecordsPerPartition="1500")
    assert capped.rdd.getNumPartitions() == 4  # ceil(5000 / 1500) pieces of 1250
    assert capped.select("offset").distinct().count() == 5000


def test_write_then_read_round_trips_keys_values_headers(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName) -> None:
    """df.write to a topic (topic, partition, headers columns) and read back: same records."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("batch-write")
    create_topic(bootstrap, topic, partitions=3)
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType([
        StructField("topic", StringType()), StructField("partition", IntegerType()),
        StructField("key", BinaryType()), StructField("value", StringType()),
        StructField("headers", ArrayType(header)),
    ])
    rows = [(topic, i % 3, f"key-{i}".encode() if i % 7 else None, f"value-{i}",
             [("n", str(i).encode()), ("tag", b"\x00\xff")] if i % 2 else None)
            for i in range(600)]
    spark.createDataFrame(rows, schema).repartition(2).write.format("pykraft") \
        .option("kafka.bootstrap.servers", bootstrap).mode("append").save()

    wanted = sorted(((i % 3, f"key-{i}".encode() if i % 7 else None, f"value-{i}".encode(),
                     (("n", str(i).encode()), ("tag", b"\x00\xff")) if i % 2 else ())
                    for i in range(600)), key=repr)
    plain = consume_all(bootstrap, topic, 3)
    assert sorted(((r.partition, r.key, r.value, r.headers) for r in plain), key=repr) == wanted
    read_back = _read(spark, bootstrap, subscribe=topic, includeHeaders="true")
    assert dict(read_back.dtypes)["headers"] == "array<struct<key:string,value:binary>>"
    got = sorted(((r.partition, r.key, r.value,
                  tuple((h.key, h.value) for h in r.headers) if r.headers else ())
                 for r in read_back.collect()), key=repr)
    assert got == wanted


def test_write_with_topic_option_and_string_key(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName) -> None:
    """The 'topic' option sends every row to one topic; string keys are written as UTF-8."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("batch-write-option")
    create_topic(bootstrap, topic, partitions=1)
    df = spark.range(100).select(F.col("id").cast("string").alias("key"),
                                 F.concat(F.lit("v"), F.col("id")).cast("binary").alias("value"))
    df.write.format("pykraft").option("kafka.bootstrap.servers", bootstrap) \
        .option("topic", topic).mode("append").save()
    got = sorted((r.key, r.value) for r in consume_all(bootstrap, topic, 1))
    assert got == sorted((str(i).encode(), f"v{i}".encode()) for i in range(100))


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the options"),
    ({}, "must be specified"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":oops}}'},
     "Option 'startingOffsets' must be"),
    ({"subscribe": "a", "endingOffsets": '["a", 0]'}, "Option 'endingOffsets' must be"),
    ({"assign": '{"a": "0"}'}, "Option 'assign' must be JSON"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "'failOnDataLoss' must be true or false"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
])
def test_bad_options_fail_when_the_dataframe_is_defined(
        spark: SparkSession, pykraft_cluster: LocalCluster, options: dict[str, str],
        message: str) -> None:
    """Malformed or conflicting options fail at load(), before any data is read."""
    with pytest.raises(Exception, match=message):
        _read(spark, pykraft_cluster.bootstrap_servers, **options)


def test_batch_only_rules_fail_at_query_start(
        spark: SparkSession, pykraft_cluster: LocalCluster) -> None:
    """startingOffsets=latest makes no sense for a batch query: it fails when it starts."""
    df = _read(spark, pykraft_cluster.bootstrap_servers, subscribe="a",
               startingOffsets="latest")
    with pytest.raises(Exception, match="cannot be 'latest' for batch queries"):
        df.count()


def test_unknown_topic_fails_with_fail_on_data_loss(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName) -> None:
    """A subscribed topic that does not exist fails the query (failOnDataLoss=true, the
    default) and reads nothing with failOnDataLoss=false."""
    bootstrap = pykraft_cluster.bootstrap_servers
    missing = topic_name("no-such-topic")
    with pytest.raises(Exception, match=f"Topic or partition {missing} does not exist"):
        _read(spark, bootstrap, subscribe=missing).count()
    assert _read(spark, bootstrap, subscribe=missing, failOnDataLoss="false").count() == 0


def test_write_needs_value_and_a_topic(
        spark: SparkSession, pykraft_cluster: LocalCluster) -> None:
    """The sink's contract is checked before anything is written."""
    bootstrap = pykraft_cluster.bootstrap_servers
    no_value = spark.range(3).select(F.col("id").cast("string").alias("key"))
    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        no_value.write.format("pykraft").option("kafka.bootstrap.servers", bootstrap) \
            .option("topic", "t").mode("append").save()
    no_topic = spark.range(3).select(F.col("id").cast("string").alias("value"))
    with pytest.raises(Exception, match="Use the option 'topic'"):
        no_topic.write.format("pykraft").option("kafka.bootstrap.servers", bootstrap) \
            .mode("append").save()


def _produce_timed(bootstrap: str, topic: str, base_ms: int, count: int) -> None:
    """Record i goes to partition i % 2 with timestamp base + i seconds."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, str(i).encode(), partition=i % 2, timestamp=base_ms + i * 1000)
    assert producer.flush(30) == 0


def test_timestamps_select_the_first_records_at_or_after(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName) -> None:
    """startingTimestamp / endingTimestamp and startingOffsetsByTimestamp resolve through
    ListOffsets by time; a time after the last record fails unless the strategy is latest."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("batch-times")
    create_topic(bootstrap, topic, partitions=2)
    base = 1_700_000_000_000
    _produce_timed(bootstrap, topic, base, 100)

    def values(**options: str) -> list[int]:
        rows = _read(spark, bootstrap, subscribe=topic, **options).select("value").collect()
        return sorted(int(r.value) for r in rows)

    assert values(startingTimestamp=str(base + 10_500),
                  endingTimestamp=str(base + 40_000)) == list(range(11, 40))
    by_partition = json.dumps({topic: {"0": base + 10_500, "1": base}})
    assert values(startingOffsetsByTimestamp=by_partition,
                  endingOffsets=json.dumps({topic: {"0": 10, "1": 3}})) == [1, 3, 5, 12, 14,
                                                                           16, 18]
    later = str(base + 10_000_000)
    with pytest.raises(Exception, match="no record at or after the timestamp"):
        values(startingTimestamp=later)
    assert values(startingTimestamp=later, startingOffsetsByTimestampStrategy="latest") == []
    with pytest.raises(Exception, match="must give every subscribed partition"):
        values(startingOffsetsByTimestamp=json.dumps({topic: {"0": base}}))


def test_assign_reads_only_the_assigned_partitions(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName) -> None:
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("batch-assign")
    create_topic(bootstrap, topic, partitions=3)
    _fill(bootstrap, topic, 3, 20)
    rows = _read(spark, bootstrap, assign=json.dumps({topic: [2, 0]})).collect()
    assert sorted((r.partition, r.offset) for r in rows) == \
        [(p, o) for p in (0, 2) for o in range(20)]


def test_unreachable_cluster_is_named_in_the_error(spark: SparkSession) -> None:
    from pykraft.testing import free_port
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    df = _read(spark, bootstrap, subscribe="t", **{"kafka.socket.timeout.ms": "2000"})
    with pytest.raises(Exception, match=f"no metadata from kafka.bootstrap.servers={bootstrap}"):
        df.count()


def test_write_failure_fails_the_write(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName) -> None:
    """A record the cluster refuses (a partition the topic does not have) fails the job
    instead of being dropped."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("batch-write-bad-partition")
    create_topic(bootstrap, topic, partitions=1)
    df = spark.range(10).select(F.col("id").cast("string").alias("value"),
                                F.lit(7).alias("partition"))
    with pytest.raises(Exception, match="(?i)unknown partition"):
        df.write.format("pykraft").option("kafka.bootstrap.servers", bootstrap) \
            .option("topic", topic).mode("append").save()
