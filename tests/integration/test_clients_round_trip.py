"""Real Kafka clients against a real pykraft node: 100,000 keyed records with headers per
codec, produced and consumed back by confluent-kafka, kafka-python, aiokafka and kcat."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykraft.testing import LocalCluster
from tests.integration.workload import (
    CODECS,
    PARTITIONS,
    Received,
    Sent,
    check_round_trip,
    workload,
)

RECORDS = 100_000


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=1)])
    futures[name].result(timeout=30)


# -- confluent-kafka (librdkafka) ---------------------------------------------------------


def confluent_produce(bootstrap: str, topic: str, codec: str, records: list[Sent]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                         "linger.ms": 20, "batch.size": 1_000_000, "acks": "all"})
    errors: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            errors.append(str(error))

    for record in records:
        while True:
            try:
                producer.produce(topic, record.value, record.key, partition=record.partition,
                                 headers=list(record.headers), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []


def confluent_consume(bootstrap: str, topic: str, count: int) -> list[Received]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "round-trip",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    received: list[Received] = []
    deadline = time.monotonic() + 120
    try:
        while len(received) < count and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=1):
                assert message.error() is None, message.error()
                received.append(Received(message.partition(), message.offset(), message.key(),
                                         message.value(), tuple(message.headers() or ())))
    finally:
        consumer.close()
    return received


# -- kafka-python -------------------------------------------------------------------------


def kafka_python_produce(bootstrap: str, topic: str, codec: str, records: list[Sent]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap,
                             compression_type=None if codec == "none" else codec,
                             linger_ms=20, batch_size=1_000_000, acks=1)
    futures = [producer.send(topic, key=r.key, value=r.value, partition=r.partition,
                             headers=list(r.headers)) for r in records]
    producer.flush(timeout=120)
    for future in futures:
        future.get(timeout=10)
    producer.close()


def kafka_python_consume(bootstrap: str, topic: str, count: int) -> list[Received]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    consumer.assign([KTopicPartition(topic, p) for p in range(PARTITIONS)])
    received: list[Received] = []
    deadline = time.monotonic() + 120
    try:
        while len(received) < count and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=1000, max_records=10_000).items():
                for m in messages:
                    received.append(Received(tp.partition, m.offset, m.key, m.value,
                                             tuple(m.headers)))
    finally:
        consumer.close()
    return received


# -- aiokafka -----------------------------------------------------------------------------


def aiokafka_produce(bootstrap: str, topic: str, codec: str, records: list[Sent]) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap,
                                    compression_type=None if codec == "none" else codec,
                                    linger_ms=20, max_batch_size=1_000_000, acks=1)
        await producer.start()
        try:
            futures = [await producer.send(topic, key=r.key, value=r.value,
                                           partition=r.partition, headers=list(r.headers))
                       for r in records]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    asyncio.run(run())


def aiokafka_consume(bootstrap: str, topic: str, count: int) -> list[Received]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def run() -> list[Received]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        received: list[Received] = []
        try:
            consumer.assign([ATopicPartition(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + 120
            while len(received) < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=1000, max_records=10_000)
                for tp, messages in batches.items():
                    for m in messages:
                        received.append(Received(tp.partition, m.offset, m.key, m.value,
                                                 tuple(m.headers)))
        finally:
            await consumer.stop()
        return received

    return asyncio.run(run())


# -- kcat ---------------------------------------------------------------------------------


def kcat_produce(bootstrap: str, topic: str, codec: str, records: list[Sent]) -> None:
    """kcat gives every record of a run the same headers (-H), so kcat records carry only
    the workload's common 'tag' header; one run per partition (-p) keeps partitions exact."""
    for partition in range(PARTITIONS):
        lines = "".join(f"{r.key.decode()}\t{r.value.decode()}\n"
                        for r in records if r.partition == partition)
        subprocess.run(
            ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-K", "\t",
             "-z", codec, "-H", f"tag={records[0].headers[0][1].decode()}",
             "-X", "linger.ms=20", "-X", "batch.size=1000000"],
            input=lines.encode(), check=True, timeout=300,
        )


def kcat_consume(bootstrap: str, topic: str, count: int) -> list[Received]:
    result = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
         "-f", "%p\t%o\t%k\t%s\t%h\n"],
        capture_output=True, check=True, timeout=300,
    )
    received = []
    for line in result.stdout.decode().splitlines():
        partition, offset, key, value, headers = line.split("\t")
        parsed = tuple((h.split("=", 1)[0], h.split("=", 1)[1].encode())
                       for h in headers.split(",") if h)
        received.append(Received(int(partition), int(offset), key.encode(), value.encode(),
                                 parsed))
    return received


CLIENTS = {
    "confluent-kafka": (confluent_produce, confluent_consume),
    "kafka-python": (kafka_python_produce, kafka_python_consume),
    "aiokafka": (aiokafka_produce, aiokafka_consume),
    "kcat": (kcat_produce, kcat_consume),
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", list(CLIENTS))
def test_round_trip(pykraft_cluster: LocalCluster, client: str, codec: str) -> None:
    if client == "kcat" and shutil.which("kcat") is None:
        # CI=true: ./scripts/test installed kcat, so its absence is a failure there, not a skip
        missing = pytest.fail if os.environ.get("CI") == "true" else pytest.skip
        missing("kcat is not installed (./scripts/test installs it)")
    produce, consume = CLIENTS[client]
    topic = f"round-trip-{client}-{codec}"
    create_topic(pykraft_cluster.bootstrap_servers, topic)
    records = workload(RECORDS, f"{client}-{codec}")
    if client == "kcat":
        records = [Sent(r.partition, r.key, r.value, (r.headers[1],)) for r in records]
    produce(pykraft_cluster.bootstrap_servers, topic, codec, records)
    received = consume(pykraft_cluster.bootstrap_servers, topic, len(records))
    check_round_trip(records, received)
