"""The queue workload of Jepsen's Kafka test: producers with and without idempotence send
unique integers to random partitions; consumers read them back in a group (subscribe, manual
commits) and alone (assign from the beginning); the drain reads every partition at the end.

The checker finds lost writes (an ok send missing from the drain), duplicates (a value at two
offsets, forbidden for idempotent producers), reordering, offsets holding two values, and
consumers that skip or go back within their assignment.

Outcome of a send: a delivery report without error is `ok` with its offset; a `produce()`
call that raises (the record never entered the client's queue) is `fail`; every delivery
error is `info`, since librdkafka reports _MSG_TIMED_OUT, _PURGE_INFLIGHT and even
_PURGE_QUEUE (a retried record goes back to the queue) for records that may be in the log.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from pykraft.testing.chaos.history import Event, History
from pykraft.testing.chaos.workloads.common import (
    CONSUMER_CONFIG,
    PRODUCER_CONFIG,
    ClientThread,
    Pending,
    client_config,
    create_topics,
    decode_value,
    describe,
    error_of,
    flush_producer,
    log,
    stop_threads,
)
from pykraft.testing.chaos.workloads.drain import drain_topics

POLL_RECORDS_MAX = 200
POLL_TIMEOUT_S = 0.5
# The coordinator rejected the commit: it certainly did not happen.
COMMIT_REJECTED = frozenset({
    KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID,
    KafkaError._NO_OFFSET, KafkaError._INVALID_ARG,
})


class ProducerThread(ClientThread):
    """Sends at `rate` per second to random partitions of `topic`; completes each send in
    its delivery report (served by this thread's poll())."""

    def __init__(self, process: str, pending: Pending, stopping: threading.Event, *,
                 bootstrap: str, topic: str, partitions: int, rate: float, idempotent: bool,
                 seed: int) -> None:
        super().__init__(process, pending, stopping)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.interval_s = 1.0 / rate
        self.idempotent = idempotent
        self.rng = random.Random(seed)
        self.producer: Producer | None = None
        self.fatal: KafkaError | None = None
        self.next_send = 0.0

    def create(self) -> None:
        self.fatal = None
        settings: dict[str, Any] = (
            {"enable.idempotence": True} if self.idempotent else
            {"enable.idempotence": False, "retries": 1_000_000,
             "max.in.flight.requests.per.connection": 5})
        self.producer = Producer(client_config(self.bootstrap, PRODUCER_CONFIG, settings,
                                               error_cb=self.on_error))
        self.new_instance()
        self.next_send = time.monotonic()

    def on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal = error
        log.debug("%s: %s", self.process, error)

    def step(self) -> None:
        assert self.producer is not None
        if self.fatal is not None:
            raise KafkaException(self.fatal)
        now = time.monotonic()
        if now >= self.next_send:
            self.send()
            # no catching up after a stall: the rate is a ceiling, not a quota
            self.next_send = max(self.next_send + self.interval_s, now)
        self.producer.poll(max(0.0, min(0.05, self.next_send - time.monotonic())))

    def send(self) -> None:
        assert self.producer is not None
        value = self.history.next_value()
        partition = self.rng.randrange(self.partitions)
        key = str(value)
        invocation = self.pending.invoke(self.process, "send", {
            "topic": self.topic, "partition": partition, "key": key, "value": value,
            "producer": self.instance, "idempotent": self.idempotent})
        try:
            self.producer.produce(
                self.topic, value=str(value).encode(), key=key.encode(), partition=partition,
                on_delivery=lambda error, message: self.delivered(invocation, error, message))
        except (BufferError, KafkaException) as exception:
            # raised by produce() itself: the record never entered the client
            self.pending.complete(invocation, "fail", {"error": describe(exception)})
            if (error := error_of(exception)) is not None and error.fatal():
                raise

    def delivered(self, invocation: Event, error: KafkaError | None,
                  message: Message) -> None:
        if error is None:
            self.pending.complete(invocation, "ok", {"offset": message.offset()})
        else:
            self.pending.complete(invocation, "info", {"error": error.name()})

    def finish(self) -> None:
        if self.producer is not None:
            flush_producer(self.producer, self.finish_by - time.monotonic())

    def close_client(self) -> None:
        producer, self.producer = self.producer, None
        if producer is None:
            return
        try:  # no waiting for message.timeout.ms: purged records report at once (as info)
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            producer.flush(0.5)
        except (KafkaException, RuntimeError) as exception:
            log.debug("%s: closing: %s", self.process, describe(exception))
        self.pending.give_up(self.pending.open_of(self.process), "producer closed")


class ConsumerThread(ClientThread):
    """Records every non-empty poll as one `poll` op (invoked and completed at once: only an
    answer is worth recording). Subclasses choose subscribe or assign."""

    group: str | None = None

    def __init__(self, process: str, pending: Pending, stopping: threading.Event, *,
                 bootstrap: str, isolation: str) -> None:
        super().__init__(process, pending, stopping)
        self.bootstrap, self.isolation = bootstrap, isolation
        self.consumer: Consumer | None = None
        self.fatal: KafkaError | None = None

    def on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal = error
        log.debug("%s: %s", self.process, error)

    def make_consumer(self, group_id: str) -> Consumer:
        self.fatal = None
        consumer = Consumer(client_config(
            self.bootstrap, CONSUMER_CONFIG, {"group.id": group_id,
                                              "isolation.level": self.isolation},
            error_cb=self.on_error))
        self.new_instance()
        return consumer

    def poll_records(self) -> list[list[Any]]:
        assert self.consumer is not None
        if self.fatal is not None:
            raise KafkaException(self.fatal)
        messages = self.consumer.consume(num_messages=POLL_RECORDS_MAX, timeout=POLL_TIMEOUT_S)
        records: list[list[Any]] = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise KafkaException(error)
                log.debug("%s: %s", self.process, error)
                continue
            records.append([message.topic(), message.partition(), message.offset(),
                            decode_value(message.value())])
        if records:
            invocation = self.pending.invoke(self.process, "poll", {
                "consumer": self.instance, "group": self.group, "isolation": self.isolation})
            self.pending.complete(invocation, "ok", {"records": records})
        return records

    def record_assignment(self, mode: str, partitions: list[TopicPartition]) -> None:
        self.pending.record_ok(self.process, "assign", {
            "consumer": self.instance, "mode": mode,
            "partitions": sorted([tp.topic, tp.partition] for tp in partitions)})

    def close_client(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as exception:
                log.debug("%s: closing: %s", self.process, describe(exception))


class SubscribeConsumerThread(ConsumerThread):
    """A member of `group`: records each new assignment, commits what it read after each
    poll (synchronously, so the commit op completes with the coordinator's answer)."""

    def __init__(self, process: str, pending: Pending, stopping: threading.Event, *,
                 bootstrap: str, topics: list[str], group: str, isolation: str,
                 group_protocol: str = "classic") -> None:
        super().__init__(process, pending, stopping, bootstrap=bootstrap, isolation=isolation)
        self.topics = topics
        self.group = group
        self.group_protocol = group_protocol
        self.assignment: set[tuple[str, int]] = set()

    def make_consumer(self, group_id: str) -> Consumer:
        if self.group_protocol == "classic":
            return super().make_consumer(group_id)
        # KIP-848: the broker drives the group; the classic protocol's session and heartbeat
        # settings are refused by librdkafka under group.protocol=consumer
        self.fatal = None
        settings = {key: value for key, value in CONSUMER_CONFIG.items()
                    if key not in ("session.timeout.ms", "heartbeat.interval.ms")}
        consumer = Consumer(client_config(
            self.bootstrap, settings, {"group.id": group_id, "group.protocol": "consumer",
                                       "isolation.level": self.isolation},
            error_cb=self.on_error))
        self.new_instance()
        return consumer

    def create(self) -> None:
        assert self.group is not None
        self.assignment = set()
        self.consumer = self.make_consumer(self.group)
        # Eager rebalancing (classic, range assignor) revokes everything and assigns the
        # whole assignment; KIP-848 assigns and revokes increments. Keeping the set covers
        # both, and the history always gets the whole assignment.
        self.consumer.subscribe(
            self.topics,
            on_assign=lambda _, partitions: self.change_assignment(partitions, []),
            on_revoke=lambda _, partitions: self.change_assignment([], partitions),
            on_lost=lambda _, partitions: self.change_assignment([], partitions))

    def change_assignment(self, added: list[TopicPartition],
                          removed: list[TopicPartition]) -> None:
        self.assignment |= {(tp.topic, tp.partition) for tp in added}
        self.assignment -= {(tp.topic, tp.partition) for tp in removed}
        self.record_assignment("subscribe", [TopicPartition(topic, partition)
                                             for topic, partition in sorted(self.assignment)])

    def step(self) -> None:
        records = self.poll_records()
        if records:
            self.commit(records)

    def commit(self, records: list[list[Any]]) -> None:
        assert self.consumer is not None
        next_offsets: dict[tuple[str, int], int] = {}
        for topic, partition, offset, _ in records:
            next_offsets[(topic, partition)] = max(next_offsets.get((topic, partition), 0),
                                                   offset + 1)
        chosen = sorted(next_offsets.items())
        invocation = self.pending.invoke(self.process, "commit", {
            "consumer": self.instance, "group": self.group,
            "offsets": [[t, p, o] for (t, p), o in chosen]})
        try:
            self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in chosen],
                                 asynchronous=False)
        except KafkaException as exception:
            error = error_of(exception)
            rejected = error is not None and error.code() in COMMIT_REJECTED
            self.pending.complete(invocation, "fail" if rejected else "info",
                                  {"error": describe(exception)})
            if error is not None and error.fatal():
                raise
            return
        self.pending.complete(invocation, "ok")


class AssignConsumerThread(ConsumerThread):
    """Reads every partition of `topics` from the beginning with assign(); a re-created
    client resumes where the last one stopped (and records that as a new assignment)."""

    def __init__(self, process: str, pending: Pending, stopping: threading.Event, *,
                 bootstrap: str, topics: dict[str, int], isolation: str) -> None:
        super().__init__(process, pending, stopping, bootstrap=bootstrap, isolation=isolation)
        self.positions = {(t, p): OFFSET_BEGINNING for t, n in topics.items() for p in range(n)}

    def create(self) -> None:
        self.consumer = self.make_consumer(f"chaos-unused-{self.process}")
        partitions = [TopicPartition(t, p, o) for (t, p), o in sorted(self.positions.items())]
        self.consumer.assign(partitions)
        self.record_assignment("assign", partitions)

    def step(self) -> None:
        for topic, partition, offset, _ in self.poll_records():
            self.positions[(topic, partition)] = offset + 1


class QueueWorkload:
    """Options: partitions (4), producers (4, half idempotent), consumers (2 in a group,
    plus one assign consumer), rate (sends per second per producer, 50), group_protocol
    ("classic" or KIP-848's "consumer"; by default odd rounds use KIP-848)."""

    name = "queue"

    def __init__(self, bootstrap: str, history: History, rng: random.Random, round_: int,
                 *, partitions: int = 4, producers: int = 4, consumers: int = 2,
                 rate: float = 50.0, setup_timeout_s: float = 60.0,
                 group_protocol: str | None = None) -> None:
        self.bootstrap, self.history, self.rng, self.round = bootstrap, history, rng, round_
        self.group_protocol = group_protocol or ("consumer" if round_ % 2 else "classic")
        self.topic = f"chaos-queue-r{round_}"
        self.topics = [self.topic]
        self.partitions, self.producers, self.consumers = partitions, producers, consumers
        self.rate, self.setup_timeout_s = rate, setup_timeout_s
        self.pending = Pending(history)
        self.stopping = threading.Event()
        self.threads: list[ClientThread] = []

    def setup(self) -> None:
        create_topics(self.bootstrap, {self.topic: self.partitions}, self.setup_timeout_s)

    def start(self) -> None:
        for i in range(1, self.producers + 1):
            self.threads.append(ProducerThread(
                f"producer-{i}", self.pending, self.stopping, bootstrap=self.bootstrap,
                topic=self.topic, partitions=self.partitions, rate=self.rate,
                idempotent=i % 2 == 1, seed=self.rng.getrandbits(64)))
        group = f"chaos-queue-r{self.round}"
        for i in range(1, self.consumers + 1):
            self.threads.append(SubscribeConsumerThread(
                f"consumer-{i}", self.pending, self.stopping, bootstrap=self.bootstrap,
                topics=[self.topic], group=group, isolation="read_uncommitted",
                group_protocol=self.group_protocol))
        self.threads.append(AssignConsumerThread(
            f"consumer-{self.consumers + 1}", self.pending, self.stopping,
            bootstrap=self.bootstrap, topics={self.topic: self.partitions},
            isolation="read_uncommitted"))
        for thread in self.threads:
            thread.start()

    def stop(self, timeout_s: float) -> None:
        stop_threads(self.threads, self.stopping, self.pending, timeout_s)

    def drain(self, timeout_s: float) -> None:
        drain_topics(self.bootstrap, self.history, {self.topic: self.partitions},
                     ["read_uncommitted"], timeout_s)
