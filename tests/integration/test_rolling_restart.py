"""A rolling restart of a whole cluster under load (issue 4, done-when 2): 3 controllers and
3 brokers as separate processes; each in turn gets SIGTERM (a broker's controlled shutdown
moves its leaderships away first), is started again and rejoins before the next one goes.
A confluent-kafka producer (acks=all) and a group consumer run throughout: every
acknowledged record is in the log afterwards, and neither client sees an error that is not
retriable."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from pykraft.testing import LocalCluster
from tests.integration.tool_helpers import eventually

PARTITIONS = 3
CONFIGS = {
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "100",
    "replica.fetch.wait.max.ms": "200",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}


class Load:
    """A producer and a consumer on their own threads, recording what they saw."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.acked: set[int] = set()
        self.consumed: set[int] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                             "enable.idempotence": False, "retries": 1_000_000,
                             "message.timeout.ms": 120_000, "linger.ms": 5})

        def delivered(error: KafkaError | None, message: Any) -> None:
            if error is None:
                self.acked.add(int(message.value()))
            elif not error.retriable():
                self.errors.append(f"produce: {error}")

        sequence = 0
        while not self._stop.is_set():
            producer.produce(self.topic, str(sequence).encode(), on_delivery=delivered)
            sequence += 1
            producer.poll(0.002)
        remaining = producer.flush(120)
        if remaining:
            self.errors.append(f"produce: {remaining} records never answered")

    def _consume(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "rolling",
                             "auto.offset.reset": "earliest", "session.timeout.ms": 10_000})
        consumer.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                message = consumer.poll(0.1)
                if message is None:
                    continue
                error = message.error()
                if error is None:
                    self.consumed.add(int(message.value()))
                elif error.fatal() or not (error.retriable() or _transient(error)):
                    self.errors.append(f"consume: {error}")
        finally:
            consumer.close()


def _transient(error: KafkaError) -> bool:
    """Consumer events librdkafka reports while a broker restarts: informational."""
    return error.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                            KafkaError._PARTITION_EOF)


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(controllers=3, brokers=3, configs=CONFIGS,
                      startup_timeout_s=60) as running:
        yield running


def _in_sync(admin: AdminClient, topic: str, brokers: list[int]) -> None:
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    assert len(partitions) == PARTITIONS
    for partition in partitions.values():
        assert partition.leader in brokers, partition
        assert sorted(partition.isrs) == sorted(brokers), partition


def _quorum_whole(cluster: LocalCluster) -> None:
    leader = cluster.active_controller()
    assert leader in cluster.controller_ids
    try:
        offsets = {cluster.metadata_image(node_id) for node_id in cluster.nodes}
    except OSError as error:  # a node just restarted: its /metrics may not listen yet
        raise AssertionError(f"a node's /metrics is not up yet: {error}") from error
    assert len(offsets) == 1, offsets  # every node at the same image


def _all_records(bootstrap: str, topic: str, count_min: int) -> set[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and len(seen) < count_min:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.add(int(message.value()))
    finally:
        consumer.close()
    return seen


@pytest.mark.slow
def test_a_rolling_restart_of_every_process_loses_no_acknowledged_record(
    cluster: LocalCluster,
) -> None:
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"rolling-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3,
                                  config={"min.insync.replicas": "2"})])[topic].result(30)
    brokers = cluster.broker_ids
    eventually(lambda: _in_sync(admin, topic, brokers), timeout_s=30)
    with Load(bootstrap, topic) as load:
        eventually(lambda: _more(load, 200), timeout_s=30)
        for node_id in [*cluster.controller_ids, *brokers]:
            before = len(load.acked)
            cluster.kill_node(node_id, signal.SIGTERM)
            cluster.restart_node(node_id)
            eventually(lambda: _in_sync(admin, topic, brokers), timeout_s=60)
            eventually(lambda: _quorum_whole(cluster), timeout_s=60)
            # the load goes on: more records acknowledged since this node went down
            eventually(lambda b=before: _more(load, b), timeout_s=60)
    assert load.errors == []
    assert len(load.acked) > 1_000
    logged = _all_records(bootstrap, topic, len(load.acked))
    assert load.acked <= logged, sorted(load.acked - logged)[:20]
    assert load.consumed and load.consumed <= logged


def _more(load: Load, before: int) -> None:
    assert len(load.acked) > before + 50, (len(load.acked), load.errors)
