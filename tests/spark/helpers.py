"""Plain confluent-kafka helpers for the Spark tests: the reference the source is checked by."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


def create_topic(bootstrap: str, name: str, partitions: int = 1,
                 config: Mapping[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=1, config=dict(config or {}))])
    futures[name].result(timeout=30)


def produce(bootstrap: str, topic: str, records: Iterable[tuple[int, bytes | None, bytes | None]],
            *, headers: bool = False, linger_ms: int = 5) -> None:
    """records: (partition, key, value); headers=True adds two headers derived from the key."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000})
    errors: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            errors.append(str(error))

    for partition, key, value in records:
        extra = {"headers": [("h1", key), ("h2", b"x" + (key or b""))]} if headers else {}
        while True:
            try:
                producer.produce(topic, value, key, partition=partition, on_delivery=delivered,
                                 **extra)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    assert errors == []


def consume_all(bootstrap: str, topic: str, partitions: int, *,
                timeout_s: float = 30) -> list[Rec]:
    """Every record of every partition, up to the high watermarks seen at the start."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-test-reference",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, low) for p, (low, _high) in ends.items()])
        todo = {p for p, (low, high) in ends.items() if high > low}
        found: list[Rec] = []
        deadline = time.monotonic() + timeout_s
        while todo and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.5):
                error = message.error()
                partition = message.partition()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        todo.discard(partition)
                        continue
                    raise AssertionError(str(error))
                found.append(Rec(partition, message.offset(), message.key(), message.value(),
                                 tuple(message.headers() or ())))
                if message.offset() + 1 >= ends[partition][1]:
                    todo.discard(partition)
        assert not todo, f"partitions {todo} not read to their end"
        return found
    finally:
        consumer.close()


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-test-watermarks"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def stream(spark: SparkSession, bootstrap: str, **options: str) -> DataFrame:
    reader = spark.readStream.format("pykraft").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def to_parquet_per_batch(df: DataFrame, out: Path, checkpoint: Path, *,
                         available_now: bool = True,
                         processing_time: str | None = None) -> StreamingQuery:
    """A foreachBatch collector: batch N goes to out/batch=N, replacing any earlier attempt of
    the same batch, so what is left is exactly what the committed batches held."""
    def collect(batch: DataFrame, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    writer = df.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=processing_time or "200 milliseconds")
    return writer.start()
