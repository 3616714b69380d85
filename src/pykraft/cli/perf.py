"""`pykraft perf produce|consume`: Kafka's producer and consumer performance tests.

This is the project's benchmark tool, so its own cost per record must stay far below the
broker's. The produce loop therefore does as little Python per record as it can:

- one payload of `--record-size` random capital letters, built once and sent every time;
- records go out in chunks; only the first record of a chunk carries a delivery callback,
  which stands for the whole chunk (librdkafka acks a partition's records in order, so the
  chunk's first ack arrives when its records' acks do, to within one request);
- `poll(0)`, which serves those callbacks, runs once per chunk, not once per record.

Latency is measured from the `produce()` call to the delivery callback of sampled records
only. The report lines follow kafka-producer-perf-test.sh: a progress line every 5 s over
the last window, and a final line with the average, maximum and percentile latencies.

A failure is seen only when it hits a sampled record. librdkafka fails records per batch
(timeouts, a broker refusing a partition), so a failed batch almost surely contains a
sampled record; each failed sample counts its whole chunk as failed, and failed records are
neither "sent" nor part of the latency statistics (Kafka's tool counts them in both).

`perf consume` follows kafka-consumer-perf-test.sh: it reads `--messages` records (without
`--group` by assign()ing every partition from the start) and prints one CSV line of start
and end time, MB and records consumed, and their rates.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, TextIO

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from pykraft.cli.args import (
    ArgumentParser,
    CommandError,
    UsageError,
    load_properties,
    merge_properties,
    parse_key_values,
)
from pykraft.cli.client_config import (
    ErrorReporter,
    client_config,
    kafka_error_message,
    producer_defaults,
    timeout_seconds,
    warn,
)
from pykraft.cli.console_consumer import wait_for_partitions
from pykraft.cli.protocol_client import check_login

__all__ = [
    "ConsumeOptions",
    "LatencyStats",
    "ProduceOptions",
    "add_parser",
    "chunk_size",
    "consume_report",
    "percentile",
    "run_consume",
    "run_produce",
]

MB: Final = 1024 * 1024
CHUNK_RECORDS_MAX: Final = 64  # records per sampled callback and per poll(0)
SAMPLES_MAX: Final = 500_000  # latency samples kept for the percentiles, like Kafka's tool
REPORT_INTERVAL_S: Final = 5.0
DEFAULT_PRODUCER_PROPERTIES: Final = {"batch.size": "1048576", "linger.ms": "5"}
_QUEUE_FULL_WAIT_S: Final = 0.01
_FLUSH_TIMEOUT_S: Final = 600.0
LIBRDKAFKA_MESSAGE_MAX_BYTES: Final = 1_000_000  # its default for message.max.bytes
CONSUME_HEADER: Final = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    perf = commands.add_parser("perf", help="producer and consumer performance tests")
    tests = perf.add_subparsers(dest="perf_test", required=True, metavar="{produce,consume}")

    produce = tests.add_parser("produce", help="kafka-producer-perf-test.sh")
    produce.add_argument("--bootstrap-server", metavar="HOST:PORT",
                         help="the broker(s) to connect to (or bootstrap.servers in the "
                              "producer properties)")
    produce.add_argument("--topic", required=True, help="REQUIRED: the topic to produce to")
    produce.add_argument("--num-records", type=int, required=True, metavar="N",
                         help="REQUIRED: how many records to send")
    produce.add_argument("--record-size", type=int, required=True, metavar="BYTES",
                         help="REQUIRED: the size of each record's value")
    produce.add_argument(
        "--throughput",
        type=float,
        default=-1.0,
        metavar="RECORDS_PER_SEC",
        help="throttle to this rate; -1 (the default) is unlimited",
    )
    produce.add_argument("--producer-props", nargs="+", action="extend", metavar="NAME=VALUE",
                         help="producer settings (Kafka's Java names; override "
                              "--producer.config)")
    produce.add_argument("--producer.config", dest="producer_config", metavar="FILE",
                         help="producer properties file (security settings included)")
    produce.set_defaults(handler=lambda args: run_produce(produce_options(args)))

    consume = tests.add_parser("consume", help="kafka-consumer-perf-test.sh")
    consume.add_argument("--bootstrap-server", metavar="HOST:PORT",
                         help="the broker(s) to connect to (or bootstrap.servers in the "
                              "consumer properties)")
    consume.add_argument("--topic", required=True, help="REQUIRED: the topic to consume")
    consume.add_argument("--messages", type=int, required=True, metavar="N",
                         help="REQUIRED: how many records to consume")
    consume.add_argument(
        "--timeout-ms",
        "--timeout",
        dest="timeout_ms",
        type=int,
        default=10_000,
        metavar="MS",
        help="the longest wait between records (default 10000)",
    )
    consume.add_argument("--group", help="consume as this consumer group (subscribe)")
    consume.add_argument("--from-latest", action="store_true",
                         help="start at the end of the log (default: the beginning)")
    consume.add_argument("--hide-header", action="store_true",
                         help="print the statistics line without its header")
    consume.add_argument("--consumer-props", nargs="+", action="extend", metavar="NAME=VALUE",
                         help="consumer settings (Kafka's Java names; override "
                              "--consumer.config)")
    consume.add_argument("--consumer.config", dest="consumer_config", metavar="FILE",
                         help="consumer properties file (security settings included)")
    consume.set_defaults(handler=lambda args: run_consume(consume_options(args)))


# -- produce -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProduceOptions:
    bootstrap_servers: str | None
    topic: str
    num_records: int
    record_size: int
    throughput: float  # records per second; <= 0 means unlimited
    properties: tuple[tuple[str, str], ...]


def produce_options(args: argparse.Namespace) -> ProduceOptions:
    if args.num_records < 1:
        raise UsageError(f"--num-records must be positive, got {args.num_records}")
    if args.record_size < 0:
        raise UsageError(f"--record-size must not be negative, got {args.record_size}")
    if args.throughput == 0:
        raise UsageError("--throughput must be positive, or -1 for unlimited")
    properties = merge_properties(
        DEFAULT_PRODUCER_PROPERTIES,
        load_properties(args.producer_config) if args.producer_config else {},
        parse_key_values(args.producer_props, "--producer-props"),
    )
    # librdkafka refuses a record larger than message.max.bytes before sending it; checked
    # here, a mistyped size fails at once instead of building a payload of many gigabytes
    message_max_bytes = properties.get("message.max.bytes", str(LIBRDKAFKA_MESSAGE_MAX_BYTES))
    if not message_max_bytes.strip().isdigit():
        raise UsageError(f"message.max.bytes must be an integer, got '{message_max_bytes}'")
    if args.record_size > int(message_max_bytes):
        raise UsageError(f"--record-size {args.record_size} is larger than message.max.bytes "
                         f"({int(message_max_bytes)}): every record would be refused")
    return ProduceOptions(
        bootstrap_servers=args.bootstrap_server,
        topic=args.topic,
        num_records=args.num_records,
        record_size=args.record_size,
        throughput=args.throughput,
        properties=tuple(properties.items()),
    )


def chunk_size(throughput: float) -> int:
    """Records per chunk: small enough under a low --throughput to throttle smoothly."""
    if throughput <= 0:
        return CHUNK_RECORDS_MAX
    return max(1, min(CHUNK_RECORDS_MAX, int(throughput / 100)))


def percentile(sorted_samples: list[float], fraction: float) -> float:
    """Kafka's tool's percentile: the sample at index fraction * count (0 when none)."""
    if not sorted_samples:
        return 0.0
    return sorted_samples[min(len(sorted_samples) - 1, int(fraction * len(sorted_samples)))]


@dataclass(slots=True)
class _Window:
    records: int = 0
    latency_sum_ms: float = 0.0
    latency_max_ms: float = 0.0
    samples: int = 0

    def add(self, records: int, latency_ms: float) -> None:
        self.records += records
        self.samples += 1
        self.latency_sum_ms += latency_ms
        self.latency_max_ms = max(self.latency_max_ms, latency_ms)

    @property
    def latency_avg_ms(self) -> float:
        return self.latency_sum_ms / self.samples if self.samples else 0.0


@dataclass(slots=True)
class LatencyStats:
    """What the sampled delivery callbacks saw: a window for progress lines, and totals.

    Each sample stands for the chunk of `records` it was the first of. At most SAMPLES_MAX
    latencies are kept for percentiles (every `keep_every`-th sample), so memory is bounded
    whatever --num-records is.
    """

    record_size: int
    keep_every: int
    started_at: float
    out: TextIO
    window: _Window = field(default_factory=_Window)
    window_started_at: float = 0.0
    total: _Window = field(default_factory=_Window)
    kept: list[float] = field(default_factory=list)
    failed_samples: int = 0
    failed_records: int = 0  # estimated: each failed sample stands for its chunk
    first_failure: str | None = None

    def callback(
        self, records: int, produced_at: float
    ) -> Callable[[KafkaError | None, Message], None]:
        def on_delivery(error: KafkaError | None, message: Message) -> None:
            latency_ms = (time.perf_counter() - produced_at) * 1000
            if error is not None:
                self.failed_samples += 1
                self.failed_records += records
                if self.first_failure is None:
                    self.first_failure = error.str()
                    warn(f"ERROR: a record failed: {error.str()}")
                return  # a failure's "latency" is a timeout: not part of the statistics
            self.window.add(records, latency_ms)
            self.total.add(records, latency_ms)
            if self.total.samples % self.keep_every == 0:
                self.kept.append(latency_ms)

        return on_delivery

    def maybe_report(self, now: float) -> None:
        if now - self.window_started_at < REPORT_INTERVAL_S:
            return
        elapsed_s = now - self.window_started_at
        window = self.window
        rate = window.records / elapsed_s
        print(
            f"{window.records} records sent, {rate:.1f} records/sec "
            f"({rate * self.record_size / MB:.2f} MB/sec), {window.latency_avg_ms:.1f} ms avg "
            f"latency, {window.latency_max_ms:.1f} ms max latency.",
            file=self.out,
            flush=True,
        )
        self.window = _Window()
        self.window_started_at = now

    def final_line(self, records: int, elapsed_s: float) -> str:
        rate = records / elapsed_s if elapsed_s > 0 else 0.0
        ordered = sorted(self.kept)
        p50, p95, p99, p999 = (int(percentile(ordered, f)) for f in (0.5, 0.95, 0.99, 0.999))
        return (
            f"{records} records sent, {rate:f} records/sec "
            f"({rate * self.record_size / MB:.2f} MB/sec), {self.total.latency_avg_ms:.2f} ms "
            f"avg latency, {self.total.latency_max_ms:.2f} ms max latency, {p50} ms 50th, "
            f"{p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th."
        )


def make_payload(record_size: int, rng: random.Random) -> bytes:
    """Random capital letters, as Kafka's tool sends (they compress like text, not zeros)."""
    return bytes(rng.randrange(65, 91) for _ in range(record_size))


def run_produce(options: ProduceOptions, out: TextIO | None = None) -> int:
    stream = out if out is not None else sys.stdout
    errors = ErrorReporter()
    config = producer_defaults(
        client_config(options.bootstrap_servers, dict(options.properties), warn=warn))
    check_login(config, dict(options.properties))
    config["error_cb"] = errors
    config.setdefault("log_level", 0)  # errors reach the user through error_cb, once each
    try:
        producer = Producer(config)
    except KafkaException as exception:
        raise CommandError(kafka_error_message(exception)) from None
    payload = make_payload(options.record_size, random.Random())
    chunk = chunk_size(options.throughput)
    expected_samples = math.ceil(options.num_records / chunk)
    started_at = time.perf_counter()
    stats = LatencyStats(
        record_size=options.record_size,
        keep_every=max(1, math.ceil(expected_samples / SAMPLES_MAX)),
        started_at=started_at,
        window_started_at=started_at,
        out=stream,
    )
    _produce_all(producer, options, payload, chunk, stats)
    remaining = producer.flush(_FLUSH_TIMEOUT_S)
    elapsed_s = time.perf_counter() - started_at
    acknowledged = max(0, options.num_records - remaining - stats.failed_records)
    print(stats.final_line(acknowledged, elapsed_s), file=stream, flush=True)
    if remaining:
        warn(f"ERROR: {remaining} records were not acknowledged{errors.describe_last()}")
    if stats.failed_samples:
        warn(
            f"ERROR: about {stats.failed_records} records failed ({stats.failed_samples} "
            f"sampled failures): {stats.first_failure}"
        )
    return 1 if remaining or stats.failed_samples else 0


def _produce_all(
    producer: Producer, options: ProduceOptions, payload: bytes, chunk: int, stats: LatencyStats
) -> None:
    """The hot loop: per chunk, one sampled record, chunk - 1 plain ones, one poll(0)."""
    produce, poll, clock = producer.produce, producer.poll, time.perf_counter
    topic, total, throughput = options.topic, options.num_records, options.throughput
    sent = 0
    while sent < total:
        size = min(chunk, total - sent)
        while True:
            try:
                produce(topic, payload, on_delivery=stats.callback(size, clock()))
                break
            except BufferError:  # the local queue is full: serve acks to make room
                poll(_QUEUE_FULL_WAIT_S)
        produced = 1
        while produced < size:
            try:
                produce(topic, payload)
            except BufferError:
                poll(_QUEUE_FULL_WAIT_S)
                continue
            produced += 1
        sent += size
        poll(0)
        now = clock()
        if throughput > 0:
            _throttle(poll, stats.started_at + sent / throughput, clock)
        stats.maybe_report(now)


def _throttle(poll: Callable[[float], int], until: float, clock: Callable[[], float]) -> None:
    """Wait until `until` (a perf_counter time), serving callbacks meanwhile."""
    while (left := until - clock()) > 0:
        poll(min(left, 0.1))


# -- consume -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumeOptions:
    bootstrap_servers: str | None
    topic: str
    messages: int
    timeout_ms: int
    group: str | None
    from_latest: bool
    hide_header: bool
    properties: tuple[tuple[str, str], ...]


def consume_options(args: argparse.Namespace) -> ConsumeOptions:
    if args.messages < 1:
        raise UsageError(f"--messages must be positive, got {args.messages}")
    if args.timeout_ms <= 0:
        raise UsageError(f"--timeout-ms must be positive, got {args.timeout_ms}")
    properties = merge_properties(
        load_properties(args.consumer_config) if args.consumer_config else {},
        parse_key_values(args.consumer_props, "--consumer-props"),
    )
    return ConsumeOptions(
        bootstrap_servers=args.bootstrap_server,
        topic=args.topic,
        messages=args.messages,
        timeout_ms=args.timeout_ms,
        group=args.group,
        from_latest=args.from_latest,
        hide_header=args.hide_header,
        properties=tuple(properties.items()),
    )


@dataclass(slots=True)
class _ConsumeProgress:
    records: int = 0
    bytes: int = 0
    assigned_at: float | None = None  # perf_counter time the group assigned partitions
    last_record_at: float = 0.0


def run_consume(options: ConsumeOptions, out: TextIO | None = None) -> int:
    stream = out if out is not None else sys.stdout
    errors = ErrorReporter()
    consumer = _perf_consumer(options, errors)
    progress = _ConsumeProgress()
    start_wall = time.time()
    started_at = time.perf_counter()
    try:
        _start_consumer(consumer, options, errors, progress)
        timed_out = _consume_all(consumer, options, progress, errors)
    finally:
        consumer.close()
    ended_at = time.perf_counter() if not timed_out else progress.last_record_at or started_at
    if timed_out:
        warn(
            f"WARNING: Exiting before consuming the expected number of messages: timeout "
            f"({options.timeout_ms} ms) exceeded. You can use the --timeout-ms option to "
            "increase the timeout."
        )
    rebalance_s = 0.0 if progress.assigned_at is None else progress.assigned_at - started_at
    end_wall = start_wall + (ended_at - started_at)
    if not options.hide_header:
        print(CONSUME_HEADER, file=stream)
    print(
        consume_report(start_wall, end_wall, progress.records, progress.bytes, rebalance_s),
        file=stream,
        flush=True,
    )
    return 0


def consume_report(
    start_wall: float, end_wall: float, records: int, size_bytes: int, rebalance_s: float
) -> str:
    """The CSV line under CONSUME_HEADER; times in seconds since the epoch."""
    elapsed_s = max(end_wall - start_wall, 1e-9)
    fetch_s = max(elapsed_s - rebalance_s, 1e-9)
    megabytes = size_bytes / MB
    return (
        f"{_wall_time(start_wall)}, {_wall_time(end_wall)}, {megabytes:.4f}, "
        f"{megabytes / elapsed_s:.4f}, {records}, {records / elapsed_s:.4f}, "
        f"{int(rebalance_s * 1000)}, {int(fetch_s * 1000)}, {megabytes / fetch_s:.4f}, "
        f"{records / fetch_s:.4f}"
    )


def _wall_time(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds)
    return moment.strftime("%Y-%m-%d %H:%M:%S:") + f"{moment.microsecond // 1000:03d}"


def _perf_consumer(options: ConsumeOptions, errors: ErrorReporter) -> Consumer:
    config = client_config(options.bootstrap_servers, dict(options.properties), warn=warn)
    check_login(config, dict(options.properties))
    config["error_cb"] = errors
    config.setdefault("log_level", 0)
    # librdkafka stops fetching a partition whose local queue holds queued.min.messages and
    # then waits fetch.queue.backoff.ms (1 s) before fetching again; a consumer draining
    # 100,000 records in ~50 ms would idle most of that second, so a throughput test
    # measures the client's pause instead of the broker. Java's consumer has no such pause.
    config.setdefault("fetch.queue.backoff.ms", "0")
    # and prefetch deeper than librdkafka's default 100,000 records per partition, as a
    # throughput test should: a consumer this fast empties that queue between fetches
    config.setdefault("queued.min.messages", "1000000")
    if options.group is not None:
        config["group.id"] = options.group
        config.setdefault("auto.offset.reset", "latest" if options.from_latest else "earliest")
    else:
        # librdkafka wants a group.id even for assign(); nothing joins or commits to it
        config.setdefault("group.id", f"perf-consumer-{random.randrange(100000)}")
        config["enable.auto.commit"] = False
    try:
        return Consumer(config)
    except KafkaException as exception:
        raise CommandError(kafka_error_message(exception)) from None


def _start_consumer(
    consumer: Consumer, options: ConsumeOptions, errors: ErrorReporter, progress: _ConsumeProgress
) -> None:
    if options.group is not None:

        def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            if progress.assigned_at is None:
                progress.assigned_at = time.perf_counter()

        consumer.subscribe([options.topic], on_assign=on_assign)
        return
    partitions = wait_for_partitions(
        consumer,
        options.topic,
        wait_ms=options.timeout_ms,
        metadata_timeout_s=timeout_seconds(dict(options.properties)),
        errors=errors,
    )
    offset = OFFSET_END if options.from_latest else OFFSET_BEGINNING
    consumer.assign([TopicPartition(options.topic, partition, offset) for partition in partitions])


def _consume_all(
    consumer: Consumer, options: ConsumeOptions, progress: _ConsumeProgress, errors: ErrorReporter
) -> bool:
    """Consume until --messages records; True when --timeout-ms passed without a record."""
    consume, clock = consumer.consume, time.perf_counter
    progress.last_record_at = clock()
    while progress.records < options.messages:
        wanted = min(1000, options.messages - progress.records)
        batch = consume(num_messages=wanted, timeout=0.5)
        now = clock()
        records_before = progress.records
        for message in batch:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    errors(error)
                continue
            progress.records += 1
            progress.bytes += len(message.value() or b"") + len(message.key() or b"")
        if progress.records > records_before:
            progress.last_record_at = now
        elif (now - progress.last_record_at) * 1000 >= options.timeout_ms:
            return True
    return False
