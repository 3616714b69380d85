"""The transactional workload: producers commit (or, one time in five, abort) transactions of
1-4 values over the partitions of topic T; a read-process-write pipeline consumes T with
read_committed and writes each value, transformed into a new one keyed by its source, to T2
in a transaction that also carries the consumer's offsets; a read_committed consumer reads
T and T2 from the beginning; the drain reads both topics at both isolation levels.

The checker finds aborted reads (a read_committed reader sees a value of an aborted
transaction), committed transactions that are partly or wholly missing, and cycles between
transactions (G1c).

Outcome of a transaction, as librdkafka's transactional API documents it:
- commit_transaction() returned: `ok`, with the offset of each send from its delivery report;
- we chose to abort and abort_transaction() returned: `fail`;
- an error before the commit returned: a retriable one is retried (commit again, bounded), an
  abortable one (or retries exhausted) aborts, and a returned abort is `fail`;
- a fatal error, or an abort that raises: `info`, and the producer is re-created, whose
  init_transactions() fences the old one and aborts whatever it left open.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from confluent_kafka import (
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
    SETUP_RETRY_S,
    ClientThread,
    Pending,
    Restart,
    client_config,
    create_topics,
    decode_value,
    describe,
    error_of,
    log,
    stop_threads,
)
from pykraft.testing.chaos.workloads.drain import drain_topics
from pykraft.testing.chaos.workloads.queue import AssignConsumerThread

# One call of the transactional API. A transaction's calls together (send offsets, flush,
# two commit attempts, an abort) stay near the coordinator's transaction.timeout.ms, so a
# stuck one is settled (info, and a re-created producer) rather than left to the stop bound.
TXN_TIMEOUT_S = 10.0
COMMIT_ATTEMPTS_MAX = 2
PIPELINE_RECORDS_MAX = 5  # "every few records"
# A transaction the coordinator never hears of again is aborted after this: an abandoned one
# cannot hold back the last stable offset (and the drain) for long. librdkafka requires
# message.timeout.ms <= transaction.timeout.ms.
TRANSACTION_CONFIG: dict[str, Any] = {"transaction.timeout.ms": 30000,
                                      "message.timeout.ms": 30000}


class TransactionFailed(Restart):
    """The transaction was aborted (`fail`) and the thread's client must start over."""


class TransactionalThread(ClientThread):
    """A transactional producer with a stable transactional.id; the transaction protocol
    shared by the producers and the pipeline."""

    def __init__(self, process: str, pending: Pending, stopping: threading.Event, *,
                 bootstrap: str, transactional_id: str, seed: int) -> None:
        super().__init__(process, pending, stopping)
        self.bootstrap, self.transactional_id = bootstrap, transactional_id
        self.rng = random.Random(seed)
        self.producer: Producer | None = None
        self.fatal: KafkaError | None = None

    def on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal = error
        log.debug("%s: %s", self.process, error)

    def create_producer(self) -> None:
        self.fatal = None
        self.producer = Producer(client_config(
            self.bootstrap, PRODUCER_CONFIG, TRANSACTION_CONFIG,
            {"transactional.id": self.transactional_id}, error_cb=self.on_error))
        self.new_instance()
        self.producer.init_transactions(self.call_timeout())

    def transact(self, invocation: Event, sends: list[dict[str, Any]], abort: bool,
                 offsets_of: Any = None) -> bool:
        """Run one transaction and complete `invocation`; True when it committed.
        `offsets_of()`, if given, returns (offsets, group metadata) to send to it."""
        producer = self.producer
        assert producer is not None
        offsets: list[int | None] = [None] * len(sends)

        def delivered(i: int) -> Any:
            def report(error: KafkaError | None, message: Message) -> None:
                if error is None:
                    offsets[i] = message.offset()
            return report

        try:
            producer.begin_transaction()
            for i, send in enumerate(sends):
                producer.produce(send["topic"], value=str(send["value"]).encode(),
                                 key=send["key"].encode(), partition=send["partition"],
                                 on_delivery=delivered(i))
            if offsets_of is not None:
                positions, group_metadata = offsets_of()
                producer.send_offsets_to_transaction(positions, group_metadata,
                                                     self.call_timeout())
            if abort:
                # written first, so an aborted transaction leaves records in the log for
                # read_committed readers to skip (abort alone purges what is unsent)
                producer.flush(self.call_timeout())
                self.abort(producer)
                self.pending.complete(invocation, "fail", {"error": "aborted by choice"})
                return False
            producer.flush(self.call_timeout())  # serves the delivery reports: the offsets
            self.commit(producer)
        except (KafkaException, BufferError) as exception:
            self.abort_after(invocation, exception)
            return False
        producer.poll(0)
        self.pending.complete(invocation, "ok", {"offsets": offsets})
        return True

    def commit(self, producer: Producer) -> None:
        for attempt in range(1, COMMIT_ATTEMPTS_MAX + 1):
            try:
                producer.commit_transaction(self.call_timeout())
                return
            except KafkaException as exception:
                error = error_of(exception)
                if (error is None or not error.retriable() or error.txn_requires_abort()
                        or attempt == COMMIT_ATTEMPTS_MAX or self.stopping.is_set()):
                    raise
                log.info("%s: commit again after %s", self.process, describe(exception))

    def abort_after(self, invocation: Event, exception: BaseException) -> None:
        """An error inside the transaction: abort it unless the producer is unusable."""
        error = error_of(exception)
        if self.producer is not None and (error is None or not error.fatal()):
            try:
                self.abort(self.producer)
            except KafkaException as abort_error:
                self.pending.complete(invocation, "info", {
                    "error": f"{describe(exception)}; abort: {describe(abort_error)}"})
                raise abort_error from exception
            self.pending.complete(invocation, "fail", {"error": describe(exception)})
            raise TransactionFailed(describe(exception)) from exception
        self.pending.complete(invocation, "info", {"error": describe(exception)})
        raise exception

    def call_timeout(self) -> float:
        """TXN_TIMEOUT_S, or less once the workload is stopping: what is left of its bound."""
        if not self.stopping.is_set():
            return TXN_TIMEOUT_S
        return max(0.5, min(TXN_TIMEOUT_S, self.finish_by - time.monotonic()))

    def abort(self, producer: Producer) -> None:
        """abort_transaction() waits until every outstanding record's delivery report was
        served, which only this thread does: purge them (what the abort does anyway) and
        serve their reports first, or the abort times out with records 'remaining'."""
        producer.purge(in_queue=True, in_flight=True, blocking=False)
        producer.flush(self.call_timeout())
        producer.abort_transaction(self.call_timeout())

    def close_producer(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            try:
                producer.purge(in_queue=True, in_flight=True, blocking=False)
                producer.flush(0.5)
            except (KafkaException, RuntimeError) as exception:
                log.debug("%s: closing: %s", self.process, describe(exception))


class TransactionalProducerThread(TransactionalThread):
    def __init__(self, process: str, pending: Pending, stopping: threading.Event, *,
                 bootstrap: str, transactional_id: str, seed: int, topic: str,
                 partitions: int, interval_s: float, abort_probability: float) -> None:
        super().__init__(process, pending, stopping, bootstrap=bootstrap,
                         transactional_id=transactional_id, seed=seed)
        self.topic, self.partitions = topic, partitions
        self.interval_s, self.abort_probability = interval_s, abort_probability

    def create(self) -> None:
        self.create_producer()

    def step(self) -> None:
        if self.fatal is not None:
            raise KafkaException(self.fatal)
        if self.stopping.wait(self.interval_s):
            return
        sends = []
        for _ in range(self.rng.randint(1, 4)):
            value = self.history.next_value()
            sends.append({"topic": self.topic, "partition": self.rng.randrange(self.partitions),
                          "key": str(value), "value": value})
        abort = self.rng.random() < self.abort_probability
        invocation = self.pending.invoke(self.process, "txn", {
            "producer": self.instance, "transactional_id": self.transactional_id,
            "sends": sends, "reads": []})
        try:
            self.transact(invocation, sends, abort)
        except TransactionFailed:
            pass  # aborted cleanly: the producer goes on with the next transaction

    def close_client(self) -> None:
        self.close_producer()


class PipelineThread(TransactionalThread):
    """Read-process-write: consume a few records of the source (read_committed, in a
    group), write a new value for each to the sink keyed by its source value, and commit the
    consumer's offsets in the same transaction. An aborted transaction rewinds the consumer
    by re-creating it (it resumes from the group's committed offsets)."""

    def __init__(self, process: str, pending: Pending, stopping: threading.Event, *,
                 bootstrap: str, transactional_id: str, seed: int, source: str, sink: str,
                 sink_partitions: int, group: str) -> None:
        super().__init__(process, pending, stopping, bootstrap=bootstrap,
                         transactional_id=transactional_id, seed=seed)
        self.source, self.sink, self.sink_partitions = source, sink, sink_partitions
        self.group = group
        self.consumer: Consumer | None = None

    def create(self) -> None:
        self.consumer = Consumer(client_config(
            self.bootstrap, CONSUMER_CONFIG,
            {"group.id": self.group, "isolation.level": "read_committed"}))
        self.consumer.subscribe([self.source])
        self.create_producer()

    def step(self) -> None:
        assert self.consumer is not None
        if self.fatal is not None:
            raise KafkaException(self.fatal)
        reads: list[list[Any]] = []
        for message in self.consumer.consume(num_messages=PIPELINE_RECORDS_MAX, timeout=0.5):
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise KafkaException(error)
                continue
            reads.append([message.topic(), message.partition(), message.offset(),
                          decode_value(message.value())])
        if not reads:
            return
        sends = []
        for _, _, _, source_value in reads:
            value = self.history.next_value()
            sends.append({"topic": self.sink, "key": str(source_value), "value": value,
                          "partition": self.rng.randrange(self.sink_partitions)})
        next_offsets: dict[tuple[str, int], int] = {}
        for topic, partition, offset, _ in reads:
            next_offsets[(topic, partition)] = max(next_offsets.get((topic, partition), 0),
                                                   offset + 1)
        consumer = self.consumer

        def offsets_of() -> tuple[list[TopicPartition], Any]:
            positions = [TopicPartition(t, p, o) for (t, p), o in sorted(next_offsets.items())]
            return positions, consumer.consumer_group_metadata()

        invocation = self.pending.invoke(self.process, "txn", {
            "producer": self.instance, "transactional_id": self.transactional_id,
            "sends": sends, "reads": reads})
        self.transact(invocation, sends, False, offsets_of)  # TransactionFailed rewinds

    def close_client(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as exception:
                log.debug("%s: closing: %s", self.process, describe(exception))
        self.close_producer()


class TransactionsWorkload:
    """Options: partitions (4, of T and of T2), producers (2), interval_s (between one
    producer's transactions, 0.2), abort_probability (0.2)."""

    name = "transactions"

    def __init__(self, bootstrap: str, history: History, rng: random.Random, round_: int,
                 *, partitions: int = 4, producers: int = 2, interval_s: float = 0.2,
                 abort_probability: float = 0.2, setup_timeout_s: float = 60.0) -> None:
        self.bootstrap, self.history, self.rng, self.round = bootstrap, history, rng, round_
        self.source = f"chaos-txn-r{round_}"
        self.sink = f"chaos-txn-out-r{round_}"
        self.topics = [self.source, self.sink]
        self.partitions, self.producers = partitions, producers
        self.interval_s, self.abort_probability = interval_s, abort_probability
        self.setup_timeout_s = setup_timeout_s
        self.pending = Pending(history)
        self.stopping = threading.Event()
        self.threads: list[ClientThread] = []

    @property
    def topic_partitions(self) -> dict[str, int]:
        return {self.source: self.partitions, self.sink: self.partitions}

    def setup(self) -> None:
        deadline = time.monotonic() + self.setup_timeout_s
        create_topics(self.bootstrap, self.topic_partitions, self.setup_timeout_s)
        self.wait_for_coordinator(deadline)

    def wait_for_coordinator(self, deadline: float) -> None:
        """A transactional producer of the set-up's own initialises: the round's clock then
        starts with the transaction coordinator answering. The first transactions round of
        a cluster otherwise spends its warm-up while `__transaction_state` is created
        (CI, 2026-11-27: 3 commits before the fault, of the 5 a round is to show)."""
        producer = Producer(client_config(self.bootstrap, PRODUCER_CONFIG, TRANSACTION_CONFIG, {
            "transactional.id": f"chaos-txn-r{self.round}-setup"}))
        while True:
            try:
                producer.init_transactions(max(1.0, deadline - time.monotonic()))
                return
            except KafkaException as exception:
                error = error_of(exception)
                if (error is None or not error.retriable()
                        or time.monotonic() + SETUP_RETRY_S >= deadline):
                    raise RuntimeError(f"no transaction coordinator: {describe(exception)}"
                                       ) from None
                time.sleep(SETUP_RETRY_S)

    def start(self) -> None:
        for i in range(1, self.producers + 1):
            self.threads.append(TransactionalProducerThread(
                f"txn-producer-{i}", self.pending, self.stopping, bootstrap=self.bootstrap,
                transactional_id=f"chaos-txn-r{self.round}-{i}",
                seed=self.rng.getrandbits(64), topic=self.source, partitions=self.partitions,
                interval_s=self.interval_s, abort_probability=self.abort_probability))
        self.threads.append(PipelineThread(
            "txn-pipeline", self.pending, self.stopping, bootstrap=self.bootstrap,
            transactional_id=f"chaos-txn-r{self.round}-pipeline",
            seed=self.rng.getrandbits(64), source=self.source, sink=self.sink,
            sink_partitions=self.partitions, group=f"chaos-txn-pipeline-r{self.round}"))
        self.threads.append(AssignConsumerThread(
            "txn-consumer-1", self.pending, self.stopping, bootstrap=self.bootstrap,
            topics=self.topic_partitions, isolation="read_committed"))
        for thread in self.threads:
            thread.start()

    def stop(self, timeout_s: float) -> None:
        stop_threads(self.threads, self.stopping, self.pending, timeout_s)

    def drain(self, timeout_s: float) -> None:
        drain_topics(self.bootstrap, self.history, self.topic_partitions,
                     ["read_committed", "read_uncommitted"], timeout_s)

