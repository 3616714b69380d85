"""The Kafka client side of the "pykraft" source and sink: confluent-kafka (librdkafka).

`ClusterView` runs where Spark plans (the driver's Python planner process): it lists the
partitions of the subscribed topics and their earliest, latest or by-timestamp offsets, one
batched ListOffsets per kind. `read_range` runs in a Spark task: it assigns one partition,
seeks to the planned start and reads up to the planned end, never further, as Arrow record
batches. `write_batches` runs in a Spark task of a write: it produces every row and waits for
every acknowledgement before the task may succeed (at-least-once: a retried task resends).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from pykraft.spark.options import (
    Assign,
    InvalidOptionError,
    Partition,
    ReadOptions,
    Strategy,
    Subscribe,
)
from pykraft.spark.planning import DataLossError, OffsetRange, report_data_loss

__all__ = ["PRODUCERS", "ClusterView", "DeliveryErrors", "Produced", "ProducerPool",
           "kafka_cause", "produce_rows", "read_range", "write_batches"]

log = logging.getLogger("pykraft.spark")

READ_BATCH_RECORDS: Final = 10_000  # records per Arrow batch: bounds a task's memory
PRODUCE_POLL_S: Final = 0.05
UNKNOWN_PARTITION_CODES: Final = frozenset({
    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC})


def _isolation(params: Mapping[str, str]) -> IsolationLevel:
    if params.get("isolation.level", "read_uncommitted") == "read_committed":
        return IsolationLevel.READ_COMMITTED
    return IsolationLevel.READ_UNCOMMITTED


class ClusterView:
    """Metadata and offset lookups for planning; one AdminClient, closed with the view."""

    def __init__(self, params: Mapping[str, str], *, timeout_s: float = 30.0) -> None:
        self.params = dict(params)
        # librdkafka's timeout for network requests, when set, bounds each lookup too
        socket_timeout_ms = self.params.get("socket.timeout.ms", "")
        self.timeout_s = min(timeout_s, int(socket_timeout_ms) / 1000) \
            if socket_timeout_ms.isdigit() else timeout_s
        config = dict[str, str | int | float | bool](self.params)
        config.setdefault("log_level", 5)  # notices and worse; not the info lines of shutdown
        try:
            self._admin = AdminClient(config)
        except KafkaException as error:
            raise InvalidOptionError(f"Bad Kafka client option: {error.args[0]}") from None

    def topic_partitions(self, strategy: Strategy) -> tuple[set[Partition], list[str]]:
        """The partitions the strategy names that exist, and the named topics that do not."""
        try:
            metadata = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as error:
            raise ConnectionError(
                f"pykraft source: no metadata from kafka.bootstrap.servers="
                f"{self.params.get('bootstrap.servers')} within {self.timeout_s:g}s: "
                f"{error.args[0].str()}") from None
        existing = {name: {p for p in topic.partitions}
                    for name, topic in metadata.topics.items() if topic.error is None}
        if isinstance(strategy, Subscribe):
            missing = [t for t in strategy.topics if t not in existing]
            return {(t, p) for t in strategy.topics for p in existing.get(t, ())}, missing
        if isinstance(strategy, Assign):
            missing = sorted({f"{t}-{p}" for t, p in strategy.partitions
                              if p not in existing.get(t, set())})
            return {(t, p) for t, p in strategy.partitions if p in existing.get(t, set())}, \
                missing
        pattern = re.compile(strategy.pattern)
        # like Kafka's pattern subscription, internal topics never match
        return {(t, p) for t, ps in existing.items()
                if not t.startswith("__") and pattern.fullmatch(t) for p in ps}, []

    def earliest(self, partitions: Sequence[Partition]) -> dict[Partition, int]:
        return self._list({tp: OffsetSpec.earliest() for tp in partitions})  # type: ignore[no-untyped-call]

    def latest(self, partitions: Sequence[Partition]) -> dict[Partition, int]:
        return self._list({tp: OffsetSpec.latest() for tp in partitions})  # type: ignore[no-untyped-call]

    def for_times(self, timestamps_ms: Mapping[Partition, int]) -> dict[Partition, int]:
        """The first offset at or after each time; -1 where no record is that late."""
        return self._list({tp: OffsetSpec.for_timestamp(ts) for tp, ts in timestamps_ms.items()})

    def _list(self, specs: Mapping[Partition, Any]) -> dict[Partition, int]:
        if not specs:
            return {}
        request = {TopicPartition(t, p): spec for (t, p), spec in specs.items()}
        futures = self._admin.list_offsets(request, isolation_level=_isolation(self.params),
                                           request_timeout=self.timeout_s)
        offsets: dict[Partition, int] = {}
        for tp, future in futures.items():
            try:
                offsets[(tp.topic, tp.partition)] = int(future.result().offset)
            except KafkaException as error:
                if error.args[0].code() not in UNKNOWN_PARTITION_CODES:
                    raise
        return offsets  # a partition that is gone has no entry


def arrow_read_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of the source schema (pyspark's to_arrow_schema of it, timezone UTC)."""
    fields = [
        pa.field("key", pa.binary()), pa.field("value", pa.binary()),
        pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


HEADERS_TYPE: Final = pa.list_(pa.field("element", pa.struct(
    [pa.field("key", pa.string()), pa.field("value", pa.binary())])))


class ConsumerPool:
    """Idle consumers of one Python worker process, kept between the tasks it runs (Spark
    reuses Python workers), so a micro-batch's tasks skip connecting and fetching metadata.
    Bounded: at most `idle_max` idle consumers per client configuration."""

    def __init__(self, idle_max: int = 4) -> None:
        self.idle_max = idle_max
        self._idle: dict[tuple[tuple[str, str], ...], list[Consumer]] = {}

    @staticmethod
    def key(options: ReadOptions) -> tuple[tuple[str, str], ...]:
        return (("groupIdPrefix", options.group_id_prefix),
                *sorted(options.kafka_params.items()))

    def borrow(self, options: ReadOptions) -> Consumer:
        idle = self._idle.get(self.key(options))
        if idle:
            return idle.pop()
        config: dict[str, Any] = {
            "group.id": f"{options.group_id_prefix}-{uuid.uuid4()}",
            # a task reads its range as fast as it can: librdkafka's default 1 s pause
            # whenever its prefetch queue is full cuts a task's throughput threefold
            "fetch.queue.backoff.ms": 0,
            **options.kafka_params,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",  # out-of-range is data loss, decided here
            "enable.partition.eof": True,
        }
        return Consumer(config)

    def give_back(self, options: ReadOptions, consumer: Consumer) -> None:
        """Keep a consumer that finished its range cleanly; its prefetched records go."""
        consumer.unassign()
        idle = self._idle.setdefault(self.key(options), [])
        if len(idle) < self.idle_max:
            idle.append(consumer)
        else:
            consumer.close()


    def close(self) -> None:
        for idle in self._idle.values():
            for consumer in idle:
                consumer.close()
        self._idle.clear()


CONSUMERS: Final = ConsumerPool()


def read_range(options: ReadOptions, offset_range: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Every record of [from_offset, until_offset) of one partition, as Arrow batches."""
    schema = arrow_read_schema(options.include_headers)
    consumer = CONSUMERS.borrow(options)
    try:
        yield from _read(consumer, options, offset_range, schema)
    except BaseException:  # failed or abandoned mid-range: its state is unknown
        consumer.close()
        raise
    CONSUMERS.give_back(options, consumer)


def _read(consumer: Consumer, options: ReadOptions, r: OffsetRange,
          schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    tp = TopicPartition(r.topic, r.partition)
    timeout_s = options.poll_timeout_ms / 1000
    from_offset, until_offset = _check_bounds(consumer, options, r, timeout_s)
    if from_offset >= until_offset:
        return
    consumer.assign([TopicPartition(r.topic, r.partition, from_offset)])
    next_offset = from_offset
    deadline = time.monotonic() + timeout_s
    while next_offset < until_offset:
        messages = consumer.consume(min(READ_BATCH_RECORDS, until_offset - next_offset), 1.0)
        records: list[Message] = []
        for message in messages:
            error = message.error()
            if error is None:
                if message.partition() != r.partition or message.topic() != r.topic:
                    continue  # never expected: a pooled consumer purges its old assignment
                offset = message.offset()
                if offset is not None and next_offset <= offset < until_offset:
                    records.append(message)
                    next_offset = offset + 1
                elif offset is not None and offset >= until_offset:
                    next_offset = until_offset
                continue
            next_offset = _on_error(consumer, options, r, tp, error, message, next_offset,
                                    until_offset, timeout_s)
        if records:
            deadline = time.monotonic() + timeout_s
            yield _to_arrow(records, r, schema, options.include_headers)
        elif next_offset < until_offset and time.monotonic() > deadline:
            raise TimeoutError(f"pykraft source: no record of {r.topic}-{r.partition} at "
                               f"offset {next_offset} within kafkaConsumer.pollTimeoutMs="
                               f"{options.poll_timeout_ms} (planned range {r.from_offset}-"
                               f"{r.until_offset - 1})")


def _check_bounds(consumer: Consumer, options: ReadOptions, r: OffsetRange,
                  timeout_s: float) -> tuple[int, int]:
    """Clip the planned range to what the log holds now, reporting what is lost."""
    tp = TopicPartition(r.topic, r.partition)
    try:
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
    except KafkaException as error:
        if error.args[0].code() not in UNKNOWN_PARTITION_CODES:
            raise
        # a pooled consumer's metadata may predate the partition: refresh it, ask again
        consumer.list_topics(r.topic, timeout=timeout_s)
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
    from_offset, until_offset = r.from_offset, r.until_offset
    losses = []
    if from_offset < low:
        losses.append(f"Partition {r.topic}-{r.partition}: offsets {from_offset} to "
                      f"{min(low, until_offset) - 1} were deleted before they were read "
                      f"(log start offset {low}).")
        from_offset = min(low, until_offset)
    if until_offset > high:
        losses.append(f"Partition {r.topic}-{r.partition}: offsets {max(high, from_offset)} to "
                      f"{until_offset - 1} are no longer in the log (log end offset {high}).")
        until_offset = max(high, from_offset)
    report_data_loss(losses, fail=options.fail_on_data_loss)
    return from_offset, until_offset


def _on_error(consumer: Consumer, options: ReadOptions, r: OffsetRange, tp: TopicPartition,
              error: KafkaError, message: Message, next_offset: int, until_offset: int,
              timeout_s: float) -> int:
    """Handle one error event while reading; returns the next offset to expect."""
    code = error.code()
    if code == KafkaError._PARTITION_EOF:
        log_end = message.offset() or 0
        if log_end >= until_offset:
            return until_offset
        if log_end > next_offset:
            return next_offset  # the end moved on since: more to come
        # caught up with the log end below the planned end: the log lost its tail
        report_data_loss([f"Partition {r.topic}-{r.partition}: offsets {next_offset} to "
                          f"{until_offset - 1} are no longer in the log (log end offset "
                          f"{log_end})."], fail=options.fail_on_data_loss)
        return until_offset
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        low, _ = consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
        if low <= next_offset:
            raise DataLossError(f"pykraft source: offset {next_offset} of {r.topic}-"
                                f"{r.partition} is out of range: {error.str()}")
        skip_to = min(low, until_offset)
        report_data_loss([f"Partition {r.topic}-{r.partition}: offsets {next_offset} to "
                          f"{skip_to - 1} were deleted while being read (log start offset "
                          f"{low})."], fail=options.fail_on_data_loss)
        if skip_to < until_offset:
            consumer.assign([TopicPartition(r.topic, r.partition, skip_to)])
        return skip_to
    raise KafkaException(error)


def _to_arrow(records: list[Message], r: OffsetRange, schema: pa.Schema,
              include_headers: bool) -> pa.RecordBatch:
    count = len(records)
    timestamps = [m.timestamp() for m in records]
    timestamp_ms = pa.array([t[1] for t in timestamps], pa.int64())
    columns = [
        pa.array([m.key() for m in records], pa.binary()),
        pa.array([m.value() for m in records], pa.binary()),
        pa.array([r.topic] * count, pa.string()),
        pa.array([r.partition] * count, pa.int32()),
        pa.array([m.offset() for m in records], pa.int64()),
        pc.multiply(timestamp_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
        # librdkafka: 0 none, 1 CreateTime, 2 LogAppendTime; Kafka's ids are -1, 0, 1
        pa.array([t[0] - 1 for t in timestamps], pa.int32()),
    ]
    if include_headers:
        columns.append(pa.array([m.headers() or None for m in records], HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def kafka_cause(failure: BaseException) -> KafkaException | None:
    """The Kafka error behind a SystemError: confluent-kafka raises one when a fatal error
    (such as being fenced) is pending while it calls a delivery callback, with the
    KafkaException as its context."""
    seen: BaseException | None = failure
    for _ in range(8):  # a chain of causes is short; never loop on a cycle
        if seen is None:
            return None
        if isinstance(seen, KafkaException):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class DeliveryErrors:
    def __init__(self) -> None:
        self.count = 0
        self.first: KafkaError | None = None

    def __call__(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self.count += 1
            self.first = self.first or error


class ProducerPool:
    """Producers of one Python worker process, kept between the tasks it runs, as Spark's
    Kafka sink caches its producers: a task skips connecting and fetching metadata. One
    producer per client configuration; a worker runs one task at a time, so a producer is
    never shared by two tasks at once. A producer that saw a failure is purged and dropped,
    not kept; one idle for longer than `idle_timeout_s` (Spark's
    spark.kafka.producer.cache.timeout, 10 minutes) is dropped on the next borrow (the client
    library closes a producer when it is released)."""

    def __init__(self, idle_timeout_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._idle: dict[tuple[tuple[str, str], ...], tuple[Producer, float]] = {}

    def borrow(self, params: Mapping[str, str]) -> Producer:
        now = self._clock()
        for key, (producer, since) in list(self._idle.items()):
            if now - since > self.idle_timeout_s:
                del self._idle[key]
                producer.flush(0)
        idle = self._idle.pop(tuple(sorted(params.items())), None)
        return idle[0] if idle is not None else Producer(dict(params))

    def give_back(self, params: Mapping[str, str], producer: Producer) -> None:
        """Keep a producer whose every record was acknowledged."""
        key = tuple(sorted(params.items()))
        previous = self._idle.get(key)
        if previous is not None and previous[0] is not producer:
            previous[0].flush(0)
        self._idle[key] = (producer, self._clock())

    def __len__(self) -> int:
        return len(self._idle)


PRODUCERS: Final = ProducerPool()


def write_batches(params: Mapping[str, str], topic_option: str | None,
                  batches: Iterator[pa.RecordBatch], *, flush_timeout_s: float = 120.0) -> int:
    """Produce every row of the batches; return the count once all are acknowledged."""
    producer = PRODUCERS.borrow(params)
    try:
        written = _write(producer, topic_option, batches, flush_timeout_s)
    except BaseException as failure:
        producer.purge()  # what it still holds belongs to a failed task: never send it
        cause = kafka_cause(failure) if isinstance(failure, SystemError) else None
        if cause is not None:
            raise cause from failure
        raise
    PRODUCERS.give_back(params, producer)
    return written


def _write(producer: Producer, topic_option: str | None, batches: Iterator[pa.RecordBatch],
           flush_timeout_s: float) -> int:
    errors = DeliveryErrors()
    written = produce_rows(producer, topic_option, batches, errors).count
    remaining = producer.flush(flush_timeout_s)
    if errors.first is not None:
        raise KafkaException(errors.first)
    if remaining:
        raise TimeoutError(f"pykraft sink: {remaining} records not acknowledged within "
                           f"{flush_timeout_s}s")
    return written


@dataclass(frozen=True, slots=True)
class Produced:
    count: int
    first_topic: str | None  # the topic of the first row, None when there was no row


def produce_rows(producer: Producer, topic_option: str | None,
                 batches: Iterator[pa.RecordBatch], errors: DeliveryErrors) -> Produced:
    """Hand every row to the producer (acknowledgements are the caller's to wait for); stops
    early once a delivery has failed."""
    written = 0
    first_topic: str | None = None
    for batch in batches:
        names = set(batch.schema.names)
        values = batch.column("value").to_pylist()
        keys = batch.column("key").to_pylist() if "key" in names else [None] * len(values)
        topics = [topic_option] * len(values) if topic_option is not None \
            else batch.column("topic").to_pylist()
        partitions = batch.column("partition").to_pylist() if "partition" in names else None
        headers = batch.column("headers").to_pylist() if "headers" in names else None
        for i, value in enumerate(values):
            topic = topics[i]
            if topic is None:
                raise ValueError("pykraft sink: null topic present in the data. Use the "
                                 "option 'topic' to set a topic for every row.")
            kwargs: dict[str, Any] = {"key": keys[i], "on_delivery": errors}
            if partitions is not None and partitions[i] is not None:
                kwargs["partition"] = partitions[i]
            if headers is not None and headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            _produce(producer, topic, value, kwargs)
        if first_topic is None and values:
            first_topic = topics[0]
        written += len(values)
        producer.poll(0)
        if errors.first is not None:
            break
    return Produced(written, first_topic)


def _produce(producer: Producer, topic: str, value: Any, kwargs: dict[str, Any]) -> None:
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:  # the local queue is full: wait for acknowledgements
            producer.poll(PRODUCE_POLL_S)
