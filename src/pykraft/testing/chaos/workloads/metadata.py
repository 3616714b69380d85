"""The metadata workload: a producer and a consumer on one stable topic (RF 3, 3 partitions)
while an admin thread creates topics, deletes earlier ones, moves a partition of the stable
topic to another three brokers and elects preferred leaders, during the faults.

The checker finds lost or reordered writes on the stable topic across its moves, and admin
operations whose outcome the final `describe-topics` contradicts (a topic whose creation was
acknowledged but which is missing, one acknowledged as deleted that is still there).

Outcome of an admin operation: the client's answer without error is `ok`; an error that
says the request was refused as such (a bad replica set, no such topic) is `fail`; a timeout,
a lost connection or a coordinator that moved is `info`.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from pykraft.testing.chaos.history import Event, History
from pykraft.testing.chaos.workloads.common import (
    REPLICATION_FACTOR,
    ClientThread,
    Pending,
    admin_client,
    create_topics,
    describe,
    error_of,
    log,
    stop_threads,
)
from pykraft.testing.chaos.workloads.drain import drain_topics
from pykraft.testing.chaos.workloads.queue import ProducerThread, SubscribeConsumerThread

# Short enough that a fault of 10-30 s sees several admin operations, each bounded.
ADMIN_TIMEOUT_S = 8.0
# Errors with which the controller refuses a request: nothing was changed.
REFUSED = frozenset({
    KafkaError.INVALID_REPLICATION_FACTOR, KafkaError.INVALID_PARTITIONS,
    KafkaError.TOPIC_EXCEPTION, KafkaError.INVALID_CONFIG,
    KafkaError.POLICY_VIOLATION, KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.INVALID_REPLICA_ASSIGNMENT, KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
})
# The same for kafka-python's errors (by Kafka's error name), used for reassignments.
REFUSED_NAMES = frozenset({
    "InvalidReplicaAssignmentError", "UnknownTopicOrPartitionError",
    "InvalidReplicationFactorError", "NoReassignmentInProgressError",
    "ClusterAuthorizationFailedError",
})


class AdminThread(ClientThread):
    """One admin operation every `interval_s`: create a topic, delete one it created,
    reassign a partition of the stable topic, or elect its preferred leaders."""

    def __init__(self, process: str, pending: Pending, stopping: threading.Event, *,
                 bootstrap: str, stable_topic: str, stable_partitions: int, round_: int,
                 interval_s: float, seed: int) -> None:
        super().__init__(process, pending, stopping)
        self.bootstrap = bootstrap
        self.stable_topic, self.stable_partitions = stable_topic, stable_partitions
        self.round, self.interval_s = round_, interval_s
        self.rng = random.Random(seed)
        self.admin: AdminClient | None = None
        self.reassigner: Any = None  # kafka-python's admin client, made when first needed
        self.created: list[str] = []  # every topic whose creation was invoked
        self.deletable: list[str] = []  # created ok and not yet chosen for deletion
        self.lock = threading.Lock()

    def create(self) -> None:
        self.admin = admin_client(self.bootstrap)
        self.new_instance()

    def step(self) -> None:
        if self.stopping.wait(self.interval_s):
            return
        roll = self.rng.random()
        if roll < 0.35 or (roll < 0.6 and not self.deletable):
            self.create_topic()
        elif roll < 0.6:
            self.delete_topic()
        elif roll < 0.8:
            self.reassign()
        else:
            self.elect_leaders()

    def invoke(self, value: dict[str, Any]) -> Event:
        return self.pending.invoke(self.process, "admin", value)

    def complete_error(self, invocation: Event, exception: BaseException) -> None:
        error = error_of(exception)
        refused = error is not None and error.code() in REFUSED
        self.pending.complete(invocation, "fail" if refused else "info",
                              {"error": describe(exception)})

    def create_topic(self) -> None:
        assert self.admin is not None
        with self.lock:
            name = f"chaos-meta-r{self.round}-t{len(self.created)}"
            self.created.append(name)
        partitions = self.rng.randint(1, 3)
        invocation = self.invoke({"action": "create-topic", "topic": name,
                                  "partitions": partitions,
                                  "replication_factor": REPLICATION_FACTOR})
        futures = self.admin.create_topics(
            [NewTopic(name, partitions, REPLICATION_FACTOR)],
            operation_timeout=ADMIN_TIMEOUT_S, request_timeout=ADMIN_TIMEOUT_S)
        if self.settle(invocation, futures[name]):
            self.deletable.append(name)

    def delete_topic(self) -> None:
        assert self.admin is not None
        name = self.deletable.pop(self.rng.randrange(len(self.deletable)))
        invocation = self.invoke({"action": "delete-topic", "topic": name})
        futures = self.admin.delete_topics([name], operation_timeout=ADMIN_TIMEOUT_S,
                                           request_timeout=ADMIN_TIMEOUT_S)
        self.settle(invocation, futures[name])

    def settle(self, invocation: Event, future: Future[None]) -> bool:
        """Completes `invocation` with an admin future's outcome; True when it is ok."""
        try:
            future.result(timeout=ADMIN_TIMEOUT_S + 5)
        except (KafkaException, TimeoutError) as exception:  # TimeoutError: no answer
            self.complete_error(invocation, exception)
            return False
        self.pending.complete(invocation, "ok")
        return True

    def reassign(self) -> None:
        assert self.admin is not None
        try:
            brokers = sorted(self.admin.list_topics(timeout=5).brokers)
        except KafkaException as exception:
            log.debug("%s: no broker list for a reassignment: %s", self.process,
                      describe(exception))
            return
        if len(brokers) < REPLICATION_FACTOR:
            return
        partition = self.rng.randrange(self.stable_partitions)
        replicas = self.rng.sample(brokers, REPLICATION_FACTOR)
        invocation = self.invoke({"action": "reassign", "topic": self.stable_topic,
                                  "partition": partition, "replicas": replicas})
        try:
            if self.reassigner is None:
                self.reassigner = _kafka_python_admin(self.bootstrap)
            results = self.reassigner.alter_partition_reassignments(
                {_kafka_python_partition(self.stable_topic, partition): replicas},
                timeout_ms=int(ADMIN_TIMEOUT_S * 1000))
        except Exception as exception:  # noqa: BLE001 - kafka-python raises many kinds
            self.pending.complete(invocation, "info", {"error": describe(exception)})
            self.close_reassigner()
            return
        errors = [error for error in results.values() if error is not None]
        if not results:
            self.pending.complete(invocation, "info", {"error": "no answer for the partition"})
        elif not errors:
            self.pending.complete(invocation, "ok")
        else:
            name = getattr(errors[0], "__name__", str(errors[0]))
            self.pending.complete(invocation, "fail" if name in REFUSED_NAMES else "info",
                                  {"error": name})

    def elect_leaders(self) -> None:
        assert self.admin is not None
        partitions = list(range(self.stable_partitions))
        invocation = self.invoke({"action": "elect-leaders", "election_type": "preferred",
                                  "topic": self.stable_topic, "partitions": partitions})
        try:
            results = self.admin.elect_leaders(
                ElectionType.PREFERRED,
                [TopicPartition(self.stable_topic, p) for p in partitions],
                # no timeout arguments: confluent-kafka 2.16's binding raises SystemError on
                # any; the default is socket.timeout.ms (10 s)
            ).result(timeout=ADMIN_TIMEOUT_S + 5)
        except (KafkaException, TimeoutError) as exception:  # TimeoutError: no answer
            self.complete_error(invocation, exception)
            return
        errors = {str(tp.partition): None if error is None else describe(error)
                  for tp, error in results.items()}
        self.pending.complete(invocation, "ok", {"errors": errors})

    def close_reassigner(self) -> None:
        reassigner, self.reassigner = self.reassigner, None
        if reassigner is not None:
            try:
                reassigner.close()
            except Exception as exception:  # noqa: BLE001
                log.debug("%s: closing: %s", self.process, describe(exception))

    def close_client(self) -> None:
        self.admin = None  # an AdminClient has no close(); dropping it destroys it
        self.close_reassigner()


def _kafka_python_admin(bootstrap: str) -> Any:
    """confluent-kafka has no AlterPartitionReassignments; kafka-python (a dev dependency,
    like every client the tests use) has."""
    from kafka import KafkaAdminClient  # type: ignore[import-untyped]

    return KafkaAdminClient(bootstrap_servers=bootstrap.split(","),
                            request_timeout_ms=int(ADMIN_TIMEOUT_S * 1000),
                            reconnect_backoff_max_ms=1000, client_id="chaos-meta-admin")


def _kafka_python_partition(topic: str, partition: int) -> Any:
    from kafka import TopicPartition as KafkaPythonTopicPartition

    return KafkaPythonTopicPartition(topic, partition)


class MetadataWorkload:
    """Options: partitions (3, of the stable topic), rate (sends per second, 50),
    interval_s (between admin operations, 1.0)."""

    name = "metadata"

    def __init__(self, bootstrap: str, history: History, rng: random.Random, round_: int,
                 *, partitions: int = 3, rate: float = 50.0, interval_s: float = 1.0,
                 setup_timeout_s: float = 60.0) -> None:
        self.bootstrap, self.history, self.rng, self.round = bootstrap, history, rng, round_
        self.topic = f"chaos-meta-r{round_}"
        self.topics = [self.topic]
        self.partitions, self.rate, self.interval_s = partitions, rate, interval_s
        self.setup_timeout_s = setup_timeout_s
        self.pending = Pending(history)
        self.stopping = threading.Event()
        self.admin_thread = AdminThread(
            "meta-admin", self.pending, self.stopping, bootstrap=bootstrap,
            stable_topic=self.topic, stable_partitions=partitions, round_=round_,
            interval_s=interval_s, seed=rng.getrandbits(64))
        self.threads: list[ClientThread] = []

    def setup(self) -> None:
        create_topics(self.bootstrap, {self.topic: self.partitions}, self.setup_timeout_s)

    def start(self) -> None:
        self.threads = [
            ProducerThread("meta-producer-1", self.pending, self.stopping,
                           bootstrap=self.bootstrap, topic=self.topic,
                           partitions=self.partitions, rate=self.rate, idempotent=True,
                           seed=self.rng.getrandbits(64)),
            SubscribeConsumerThread("meta-consumer-1", self.pending, self.stopping,
                                    bootstrap=self.bootstrap, topics=[self.topic],
                                    group=f"chaos-meta-r{self.round}",
                                    isolation="read_uncommitted"),
            self.admin_thread,
        ]
        for thread in self.threads:
            thread.start()

    def stop(self, timeout_s: float) -> None:
        stop_threads(self.threads, self.stopping, self.pending, timeout_s)

    def drain(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        self.describe_topics(min(20.0, timeout_s / 3))
        drain_topics(self.bootstrap, self.history, {self.topic: self.partitions},
                     ["read_uncommitted"], max(1.0, deadline - time.monotonic()))

    def describe_topics(self, timeout_s: float) -> None:
        """Which of the topics it ever touched exist now, with their partition counts. The
        answer is taken once two listings a second apart agree (metadata settling)."""
        with self.admin_thread.lock:
            names = sorted({self.topic, *self.admin_thread.created})
        invocation = self.history.invoke("meta-describe", "admin", {
            "action": "describe-topics", "asked": names})
        deadline = time.monotonic() + timeout_s
        admin = admin_client(self.bootstrap)
        previous: dict[str, int] | None = None
        failure = "no listing in time"
        while time.monotonic() < deadline:
            try:
                listed = admin.list_topics(timeout=max(0.5, min(5.0,
                                                                deadline - time.monotonic())))
            except KafkaException as exception:
                failure = describe(exception)
                time.sleep(0.5)
                continue
            found = {name: len(listed.topics[name].partitions) for name in names
                     if name in listed.topics and not _unknown(listed.topics[name].error)}
            if found == previous:
                self.history.complete(invocation, "ok", {"topics": found})
                return
            previous = found
            time.sleep(1.0)
        self.history.complete(invocation, "info", {"error": failure})


def _unknown(error: KafkaError | None) -> bool:
    return error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
