"""What the workloads share: client settings that outlive a fault, the registry that gives
every invocation exactly one completion, and the client thread that never dies silently.

Exactly one completion per invocation is the checker's premise. Three parties can complete
an operation: the client thread (a poll, a commit, a transaction), librdkafka's delivery
callback (a send) and `stop()` (whatever is still open when its bound runs out, as `info`).
They race, so every completion goes through `Pending.complete`, which records only the first.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from pykraft.testing.chaos.history import Event, EventType, History

log = logging.getLogger("pykraft.testing.chaos.workloads")
# librdkafka logs every refused connection of a fault at its error level, by the thousand;
# they go to their own logger, quiet unless someone lowers its level to look. The campaign
# writes all of it, with the `eos` debug context (producer ids, epoch bumps, sequence
# errors), to each round's librdkafka.log: what an idempotence anomaly is explained from.
librdkafka_log = logging.getLogger("pykraft.testing.chaos.librdkafka")
if librdkafka_log.level == logging.NOTSET:
    librdkafka_log.setLevel(logging.CRITICAL)

REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
SETUP_RETRY_S = 0.5
# the admin results' errors carry no retriable flag: the codes a topic creation is asked
# again after (Kafka's RetriableException subclasses among CreateTopics' answers)
_SETUP_RETRIABLE = frozenset({KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_CONTROLLER,
                              KafkaError._TIMED_OUT, KafkaError._TRANSPORT})
RECREATE_BACKOFF_S = 0.5  # after a fatal error, so a client that cannot start does not spin

# librdkafka gives up on a record after message.timeout.ms, so faults of 10-30 s are ridden
# out by retries; the short socket, reconnect and metadata settings find a moved leader fast.
COMMON_CONFIG: dict[str, Any] = {
    "socket.connection.setup.timeout.ms": 3000,
    "socket.timeout.ms": 10000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
    "topic.metadata.refresh.interval.ms": 5000,
    "metadata.max.age.ms": 15000,
    "debug": "eos",  # idempotence and transactions: a few lines per producer id change
    "log_level": 7,  # the logger's level decides what is kept
}
PRODUCER_CONFIG: dict[str, Any] = {
    "acks": "all",
    "message.timeout.ms": 60000,
    "request.timeout.ms": 10000,
    "linger.ms": 5,
    "queue.buffering.max.messages": 20000,  # bounded: a full queue fails the send at once
}
CONSUMER_CONFIG: dict[str, Any] = {
    "session.timeout.ms": 10000,
    "heartbeat.interval.ms": 1000,
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "fetch.wait.max.ms": 200,
    "queued.max.messages.kbytes": 8192,
}


def client_config(bootstrap: str, *parts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    config = {"bootstrap.servers": bootstrap, **COMMON_CONFIG}
    for part in parts:
        config.update(part)
    config.update(extra)
    config["logger"] = librdkafka_log  # to logging, not stderr
    return config


def decode_value(raw: bytes | None) -> int | None:
    """A record value as the history writes it: the integer, None when not one of ours."""
    if raw is None:
        return None
    try:
        return int(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


def error_of(exception: BaseException) -> KafkaError | None:
    if isinstance(exception, KafkaException) and exception.args:
        error = exception.args[0]
        if isinstance(error, KafkaError):
            return error
    return None


def describe(exception: BaseException) -> str:
    error = error_of(exception)
    if error is not None:
        return f"{error.name()}: {error.str()}"
    return f"{type(exception).__name__}: {exception}"


class Stopped(Exception):
    """The workload stopped: a thread that outlived `stop()` may not invoke anything."""


class Pending:
    """Open invocations of one workload. The first completion of an invocation is recorded,
    later ones are dropped (a delivery report that arrives after `stop()` gave up on it).
    After `close()` nothing new is recorded: the history of the workload is final."""

    def __init__(self, history: History) -> None:
        self.history = history
        self._open: dict[int, Event] = {}
        self._lock = threading.Lock()
        self._closed = False

    def invoke(self, process: str, f: str, value: dict[str, Any]) -> Event:
        with self._lock:  # under the lock: a completion cannot overtake its own invocation
            if self._closed:
                raise Stopped(f"{process}: {f} after the workload stopped")
            event = self.history.invoke(process, f, value)
            self._open[event.index] = event
            return event

    def record_ok(self, process: str, f: str, value: dict[str, Any]) -> None:
        with self._lock:
            if not self._closed:
                self.history.record_ok(process, f, value)

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def complete(self, invocation: Event, type_: EventType,
                 results: dict[str, Any] | None = None) -> bool:
        with self._lock:
            if self._open.pop(invocation.index, None) is None:
                return False
            self.history.complete(invocation, type_, results)
            return True

    def open_of(self, process: str) -> list[Event]:
        with self._lock:
            return [event for event in self._open.values() if event.process == process]

    def give_up(self, events: list[Event] | None = None, reason: str = "") -> int:
        """Complete as `info` the given open invocations (default: all); returns how many."""
        with self._lock:
            chosen = list(self._open.values()) if events is None else events
            count = 0
            for event in chosen:
                if self._open.pop(event.index, None) is not None:
                    results = {"error": reason} if reason else None
                    self.history.complete(event, "info", results)
                    count += 1
            return count

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)


class Restart(Exception):
    """Raised out of `step()` to re-create the thread's client on purpose (not a failure)."""


class ClientThread(threading.Thread):
    """One `process` of the history. `step()` does one unit of work; an exception out of it
    is logged, the thread's open operations become `info`, its client is re-created and the
    loop goes on, so a thread ends only when the workload stops it."""

    def __init__(self, process: str, pending: Pending, stopping: threading.Event) -> None:
        super().__init__(name=f"chaos-{process}", daemon=True)  # a hung client cannot
        self.process = process  # keep the campaign process alive; stop() bounds the join
        self.pending = pending
        self.history = pending.history
        self.stopping = stopping
        self.generation = -1
        self.instance = ""
        self.failures = 0
        self.finish_by = 0.0  # monotonic time by which finish() must be done; set at stop

    def new_instance(self) -> str:
        self.generation += 1
        self.instance = f"{self.process}#{self.generation}"
        return self.instance

    def run(self) -> None:
        created = False
        while not self.stopping.is_set():
            try:
                if not created:
                    self.create()
                    created = True
                    continue  # creating may have taken long: look at `stopping` again
                self.step()
            except Stopped:
                break
            except Restart as restart:
                log.info("%s: %s; re-creating its client", self.process, restart)
                self.close_quietly()
                self.pending.give_up(self.pending.open_of(self.process), str(restart))
                created = False
                continue
            except Exception as exception:  # noqa: BLE001 - a thread must not die silently
                self.failures += 1
                log.warning("%s: %s; re-creating its client", self.process,
                            describe(exception), exc_info=error_of(exception) is None)
                self.close_quietly()
                self.pending.give_up(self.pending.open_of(self.process), describe(exception))
                created = False
                self.stopping.wait(RECREATE_BACKOFF_S)
        try:
            self.finish()
        except Exception as exception:  # noqa: BLE001
            log.warning("%s: while stopping: %s", self.process, describe(exception))
        finally:
            self.close_quietly()

    def close_quietly(self) -> None:
        try:
            self.close_client()
        except Exception as exception:  # noqa: BLE001 - closing must not end the thread
            log.warning("%s: closing its client: %s", self.process, describe(exception))

    def create(self) -> None:
        raise NotImplementedError

    def step(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """After the stop signal: settle what is in flight (bounded), before close_client."""

    def close_client(self) -> None:
        raise NotImplementedError


def stop_threads(threads: list[ClientThread], stopping: threading.Event, pending: Pending,
                 timeout_s: float) -> None:
    """Signal, join within the bound, then complete whatever is still open as `info`."""
    deadline = time.monotonic() + timeout_s
    for thread in threads:  # leave a margin for closing the client after finish()
        thread.finish_by = deadline - min(2.0, timeout_s / 4)
    stopping.set()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [thread.process for thread in threads if thread.is_alive()]
    if stuck:
        log.warning("threads still running after %.1f s: %s", timeout_s, stuck)
    pending.close()
    count = pending.give_up(reason="not completed when the workload stopped")
    if count:
        log.info("%d operations completed as info at stop", count)


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient(client_config(bootstrap, {"request.timeout.ms": 10000}))


def create_topics(bootstrap: str, topics: dict[str, int], timeout_s: float,
                  configs: dict[str, str] | None = None) -> None:
    """Create the topics (RF 3, min.insync.replicas 2 unless `configs` say otherwise) and
    wait until every partition has a leader; an existing topic is taken as it is. A
    retriable refusal (REQUEST_TIMED_OUT when the controller lost its leadership before the
    topic committed, NOT_CONTROLLER) is asked again, as a Kafka user would, until the
    bound: the round before may have left the quorum electing."""
    deadline = time.monotonic() + timeout_s
    admin = admin_client(bootstrap)
    topic_configs = {"min.insync.replicas": str(MIN_INSYNC_REPLICAS), **(configs or {})}
    pending = dict(topics)
    while pending:
        new = [NewTopic(name, partitions, REPLICATION_FACTOR, config=topic_configs)
               for name, partitions in pending.items()]
        left = max(0.1, deadline - time.monotonic())
        for name, future in admin.create_topics(new, request_timeout=left).items():
            try:
                future.result(timeout=max(0.1, deadline - time.monotonic()))
            except KafkaException as exception:
                error = error_of(exception)
                if error is not None and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    pending.pop(name)
                elif (error is not None
                        and (error.retriable() or error.code() in _SETUP_RETRIABLE)
                        and time.monotonic() + SETUP_RETRY_S < deadline):
                    log.info("creating topic %s: %s; asking again", name,
                             describe(exception))
                else:
                    raise RuntimeError(f"creating topic {name}: {describe(exception)}"
                                       ) from None
            else:
                pending.pop(name)
        if pending:
            time.sleep(SETUP_RETRY_S)
    wait_for_leaders(admin, topics, deadline)


def wait_for_leaders(admin: AdminClient, topics: dict[str, int], deadline: float) -> None:
    missing: dict[str, str] = dict.fromkeys(topics, "not asked yet")
    while time.monotonic() < deadline:
        missing = {}
        for name, partitions in topics.items():
            try:
                cluster = admin.list_topics(topic=name, timeout=2)
                metadata = cluster.topics.get(name)
                answered_by = f"broker {cluster.orig_broker_id}"
            except KafkaException as exception:
                metadata, answered_by = None, describe(exception)
            if metadata is None or metadata.error is not None:
                missing[name] = f"{answered_by}: {metadata.error if metadata else 'no answer'}"
            elif (len(metadata.partitions) != partitions
                    or any(p.leader < 0 for p in metadata.partitions.values())):
                leaders = {p.id: p.leader for p in metadata.partitions.values()}
                missing[name] = f"{answered_by}: leaders {leaders}"
        if not missing:
            return
        time.sleep(0.2)
    raise RuntimeError(f"partitions without a leader after setup's bound: {missing}")


def partitions_of(topics: dict[str, int]) -> list[TopicPartition]:
    return [TopicPartition(name, p) for name, count in topics.items() for p in range(count)]


def flush_producer(producer: Producer, timeout_s: float) -> int:
    """Serve delivery reports until none is outstanding or the bound runs out."""
    deadline = time.monotonic() + timeout_s
    remaining = len(producer)
    while remaining and time.monotonic() < deadline:
        remaining = producer.flush(min(0.5, max(0.0, deadline - time.monotonic())))
    return remaining
