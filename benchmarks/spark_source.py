"""Spark source and sink throughput: format("pykraft") on local[2] against one pykraft node.

A 6-partition topic holds N 100-byte records (produced with confluent-kafka, timed too).
Measured, each after a warm-up query so Python workers are started:
  1. plain confluent-kafka: one consumer assigned all partitions reads every record;
  2. Spark streaming read: readStream (Trigger.AvailableNow, maxOffsetsPerTrigger N/4) into
     the no-op sink, records/s from the queries' progress reports and from wall time;
  3. Spark batch read: spark.read into the no-op sink, one task per partition;
  4. Spark sink: the topic read once into a cached DataFrame, then written to another
     6-partition topic with df.write.format("pykraft") (keeping partitions).
The Spark overhead ratio is (1) / (2).

    .venv/bin/python benchmarks/spark_source.py [--records 1000000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pykraft.spark import local_session  # noqa: E402
from pykraft.testing import LocalCluster  # noqa: E402

PARTITIONS = 6
RECORD_BYTES = 100


def create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                  replication_factor=1)])[topic].result(30)


def produce(bootstrap: str, topic: str, records: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000})
    payload = b"x" * RECORD_BYTES
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payload, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("records not acknowledged")
    return records / (time.perf_counter() - started)


def plain_consume(bootstrap: str, topic: str, records: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.queue.backoff.ms": 0, "queued.min.messages": 1_000_000})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    started = time.perf_counter()
    seen, done = 0, 0
    while done < PARTITIONS:
        for message in consumer.consume(10_000, 1.0):
            error = message.error()
            if error is None:
                seen += 1
                message.value()
            elif error.code() == KafkaError._PARTITION_EOF:
                done += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    if seen != records:
        raise RuntimeError(f"read {seen} records, expected {records}")
    return records / elapsed


def spark_stream(spark: object, bootstrap: str, topic: str, records: int,
                 checkpoint: str) -> tuple[float, float]:
    df = (spark.readStream.format("pykraft")  # type: ignore[attr-defined]
          .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", str(max(1, records // 4))).load())
    started = time.perf_counter()
    query = (df.writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    wall = time.perf_counter() - started
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    busy_s = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
    if rows != records:
        raise RuntimeError(f"streamed {rows} records, expected {records}")
    return rows / busy_s, records / wall


def spark_batch(spark: object, bootstrap: str, topic: str, records: int) -> float:
    df = (spark.read.format("pykraft")  # type: ignore[attr-defined]
          .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load())
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return records / (time.perf_counter() - started)


def spark_sink(spark: object, bootstrap: str, topic: str, target: str, records: int) -> float:
    df = (spark.read.format("pykraft")  # type: ignore[attr-defined]
          .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
          .select("partition", "key", "value").cache())
    if df.count() != records:
        raise RuntimeError("cached read is short")
    started = time.perf_counter()
    df.write.format("pykraft").option("kafka.bootstrap.servers", bootstrap) \
        .option("topic", target).mode("append").save()
    elapsed = time.perf_counter() - started
    df.unpersist()
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    with LocalCluster() as cluster, tempfile.TemporaryDirectory() as scratch:
        bootstrap = cluster.bootstrap_servers
        create(bootstrap, "bench-source")
        create(bootstrap, "bench-sink")
        create(bootstrap, "bench-warmup")
        produce(bootstrap, "bench-warmup", 60_000)
        produce_rate = produce(bootstrap, "bench-source", args.records)
        plain_rate = plain_consume(bootstrap, "bench-source", args.records)
        spark = local_session("spark-source-benchmark", master="local[2]")
        spark_stream(spark, bootstrap, "bench-warmup", 60_000, f"{scratch}/warmup")
        busy_rate, wall_rate = spark_stream(spark, bootstrap, "bench-source", args.records,
                                            f"{scratch}/stream")
        batch_rate = spark_batch(spark, bootstrap, "bench-source", args.records)
        sink_rate = spark_sink(spark, bootstrap, "bench-source", "bench-sink", args.records)
        spark.stop()
    print(f"records: {args.records:,} x {RECORD_BYTES} B in {PARTITIONS} partitions, "
          "Spark local[2]")
    print(f"plain confluent-kafka produce       {produce_rate:12,.0f} records/s")
    print(f"plain confluent-kafka consume       {plain_rate:12,.0f} records/s")
    print(f"Spark streaming read (in batches)   {busy_rate:12,.0f} records/s")
    print(f"Spark streaming read (wall clock)   {wall_rate:12,.0f} records/s")
    print(f"Spark batch read (no-op sink)       {batch_rate:12,.0f} records/s")
    print(f"Spark sink (cached DataFrame)       {sink_rate:12,.0f} records/s")
    print(f"Spark overhead ratio (plain / in-batch read) {plain_rate / busy_rate:.2f}")


if __name__ == "__main__":
    main()
