"""`pykraft console-consumer`: print a topic's records, like kafka-console-consumer.sh.

Without `--group` the consumer assign()s itself every partition of the topic (or the one
`--partition`), so no consumer group or coordinator is involved; it starts at the log end,
at the log start with `--from-beginning`, or at `--offset`. With `--group` it subscribe()s
and lets the group coordinator assign partitions and keep committed offsets.

Records are printed one per line by `MessageFormatter`, Kafka's DefaultMessageFormatter
layout: optional `CreateTime:<ts>`, `Partition:<p>`, `Offset:<o>`, headers and key columns,
each followed by `key.separator`, then the value and `line.separator`. The tool stops after
`--max-messages`, after `--timeout-ms` without a record, or on Ctrl-C, and then prints
"Processed a total of N messages" on stderr.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, BinaryIO, Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from pykraft.cli.args import (
    INT32,
    ArgumentParser,
    CommandError,
    UsageError,
    load_properties,
    merge_properties,
    parse_bool,
    parse_key_values,
)
from pykraft.cli.client_config import (
    ErrorReporter,
    client_config,
    kafka_error_message,
    timeout_seconds,
    warn,
)
from pykraft.cli.protocol_client import check_login

__all__ = [
    "ConsumerOptions",
    "MessageFormatter",
    "add_parser",
    "consumer_options",
    "message_formatter",
    "parse_offset",
    "run",
    "wait_for_partitions",
]

_FORMATTER_PROPERTIES: Final = frozenset(
    {
        "print.timestamp",
        "print.key",
        "print.value",
        "print.partition",
        "print.offset",
        "print.headers",
        "key.separator",
        "line.separator",
        "headers.separator",
        "headers.key.separator",
        "null.literal",
    }
)
UNDECODABLE_HEADERS: Final = b"UNDECODABLE_HEADERS"  # a header key that is not UTF-8
_POLL_BATCH_MAX: Final = 500
_POLL_INTERVAL_S: Final = 0.2
_TOPIC_WAIT_INTERVAL_S: Final = 0.5


@dataclass(frozen=True, slots=True)
class MessageFormatter:
    print_timestamp: bool = False
    print_key: bool = False
    print_value: bool = True
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_literal: bytes = b"null"

    def format(
        self,
        *,
        timestamp: tuple[int, int],
        partition: int,
        offset: int,
        headers: Sequence[tuple[str, str | bytes | None]] | bytes | None,
        key: bytes | None,
        value: bytes | None,
    ) -> bytes:
        """One record as Kafka prints it: the chosen columns, separated, then the newline."""
        columns: list[bytes] = []
        if self.print_timestamp:
            columns.append(_timestamp_column(timestamp))
        if self.print_partition:
            columns.append(b"Partition:%d" % partition)
        if self.print_offset:
            columns.append(b"Offset:%d" % offset)
        if self.print_headers:
            columns.append(self._headers_column(headers))
        if self.print_key:
            columns.append(self._field(key))
        if self.print_value:
            columns.append(self._field(value))
        # Kafka ends the line only after a value; ending it always keeps print.value=false
        # output one record per line.
        return self.key_separator.join(columns) + self.line_separator

    def format_message(self, message: Message) -> bytes:
        headers = self._headers_of(message) if self.print_headers else None
        return self.format(
            timestamp=message.timestamp(),
            partition=message.partition() or 0,
            offset=message.offset() or 0,
            headers=list(headers.items()) if isinstance(headers, dict) else headers,
            key=message.key(),
            value=message.value(),
        )

    def _headers_of(self, message: Message) -> Any:
        try:
            return message.headers()
        except (SystemError, UnicodeDecodeError):
            # confluent-kafka decodes header keys as UTF-8 and fails on any other bytes
            # (a SystemError from its C code); the raw keys are out of reach, so the record
            # is printed with this marker for its headers instead of ending the consumer
            return UNDECODABLE_HEADERS

    def _headers_column(
        self, headers: Sequence[tuple[str, str | bytes | None]] | bytes | None
    ) -> bytes:
        if isinstance(headers, bytes):
            return headers
        if not headers:
            return b"NO_HEADERS"
        return self.headers_separator.join(
            name.encode() + self.headers_key_separator + self._field(value)
            for name, value in headers
        )

    def _field(self, data: bytes | str | None) -> bytes:
        if data is None:
            return self.null_literal
        return data.encode() if isinstance(data, str) else data


def _timestamp_column(timestamp: tuple[int, int]) -> bytes:
    kind, value = timestamp
    if kind == TIMESTAMP_CREATE_TIME:
        return b"CreateTime:%d" % value
    if kind == TIMESTAMP_LOG_APPEND_TIME:
        return b"LogAppendTime:%d" % value
    return b"NO_TIMESTAMP"


def message_formatter(properties: Mapping[str, str]) -> MessageFormatter:
    unknown = sorted(set(properties) - _FORMATTER_PROPERTIES)
    if unknown:
        known = ", ".join(sorted(_FORMATTER_PROPERTIES))
        raise UsageError(f"unknown --property {unknown[0]} (known: {known})")

    def flag(name: str, default: bool) -> bool:
        return parse_bool(properties[name], name) if name in properties else default

    def text(name: str, default: bytes) -> bytes:
        value = properties.get(name)
        # surrogateescape: the bytes given in argv, even those that are not UTF-8
        return default if value is None else _unescape(value).encode("utf-8", "surrogateescape")

    return MessageFormatter(
        print_timestamp=flag("print.timestamp", False),
        print_key=flag("print.key", False),
        print_value=flag("print.value", True),
        print_partition=flag("print.partition", False),
        print_offset=flag("print.offset", False),
        print_headers=flag("print.headers", False),
        key_separator=text("key.separator", b"\t"),
        line_separator=text("line.separator", b"\n"),
        headers_separator=text("headers.separator", b","),
        headers_key_separator=text("headers.key.separator", b":"),
        null_literal=text("null.literal", b"null"),
    )


def _unescape(value: str) -> str:
    # Shells make a literal tab or newline awkward to pass; Kafka users write \t and \n.
    return value.replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r")


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    bootstrap_servers: str | None
    topic: str
    group: str | None
    partition: int | None
    offset: int  # an absolute offset, or OFFSET_BEGINNING / OFFSET_END
    max_messages: int | None
    timeout_ms: int | None
    properties: tuple[tuple[str, str], ...]
    formatter: MessageFormatter


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "console-consumer", help="print records of a topic (kafka-console-consumer.sh)"
    )
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the broker(s) to connect to, host:port[,host:port]")
    parser.add_argument("--topic", required=True, help="REQUIRED: the topic to consume")
    parser.add_argument("--group", help="consume as this consumer group (subscribe)")
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the earliest offset (with --group: when the group has "
                             "no committed offset); default: only new records")
    parser.add_argument("--partition", type=INT32, metavar="P",
                        help="read only this partition (assigned, without a group)")
    parser.add_argument(
        "--offset",
        metavar="OFFSET",
        help="'earliest', 'latest' (the default) or an offset; needs --partition",
    )
    parser.add_argument("--max-messages", type=int, metavar="N",
                        help="exit after printing this many records (default: run until "
                             "stopped)")
    parser.add_argument(
        "--timeout-ms", type=int, metavar="MS", help="exit when no record arrives for this long"
    )
    parser.add_argument(
        "--property",
        action="append",
        metavar="NAME=VALUE",
        help="formatter settings: print.key, print.value, print.timestamp, "
        "print.partition, print.offset, print.headers, key.separator, "
        "line.separator, headers.separator, headers.key.separator, "
        "null.literal",
    )
    parser.add_argument("--consumer-property", action="append", metavar="NAME=VALUE",
                        help="a consumer setting (Kafka's Java name; repeatable; overrides "
                             "--consumer.config)")
    parser.add_argument("--consumer.config", dest="consumer_config", metavar="FILE",
                        help="consumer properties file (Java client keys, security settings "
                             "included: security.protocol, sasl.*, ssl.*)")
    parser.add_argument("--isolation-level", choices=("read_committed", "read_uncommitted"),
                        help="read_committed hides records of open and aborted transactions "
                             "(default: read_uncommitted)")
    parser.set_defaults(handler=lambda args: run(consumer_options(args)))


def consumer_options(args: argparse.Namespace) -> ConsumerOptions:
    if args.offset is not None and args.partition is None:
        raise UsageError("The partition is required when offset is specified.")
    if args.offset is not None and args.from_beginning:
        raise UsageError("Options --from-beginning and --offset cannot be specified together.")
    if args.group is not None and args.partition is not None:
        raise UsageError("Options --group and --partition cannot be specified together.")
    if args.partition is not None and args.partition < 0:
        raise UsageError(f"--partition must not be negative, got {args.partition}")
    if args.max_messages is not None and args.max_messages < 1:
        raise UsageError(f"--max-messages must be positive, got {args.max_messages}")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise UsageError(f"--timeout-ms must not be negative, got {args.timeout_ms}")
    if args.from_beginning:
        offset = OFFSET_BEGINNING
    else:
        offset = parse_offset(args.offset) if args.offset is not None else OFFSET_END
    properties = merge_properties(
        load_properties(args.consumer_config) if args.consumer_config else {},
        parse_key_values(args.consumer_property, "--consumer-property"),
    )
    if args.isolation_level is not None:
        properties["isolation.level"] = args.isolation_level
    return ConsumerOptions(
        bootstrap_servers=args.bootstrap_server,
        topic=args.topic,
        group=args.group,
        partition=args.partition,
        offset=offset,
        max_messages=args.max_messages,
        timeout_ms=args.timeout_ms,
        properties=tuple(properties.items()),
        formatter=message_formatter(parse_key_values(args.property, "--property")),
    )


def parse_offset(text: str) -> int:
    lowered = text.strip().lower()
    if lowered == "earliest":
        return OFFSET_BEGINNING
    if lowered == "latest":
        return OFFSET_END
    try:
        offset = int(lowered)
    except ValueError:
        offset = -1
    if not 0 <= offset < 1 << 63:  # "a non-negative long"
        raise UsageError(
            f"The provided offset value '{text}' is incorrect. Valid values are "
            "'earliest', 'latest', or a non-negative long."
        )
    return offset


# -- consuming -----------------------------------------------------------------------------


def run(options: ConsumerOptions, output: BinaryIO | None = None) -> int:
    out = output if output is not None else sys.stdout.buffer
    errors = ErrorReporter()
    consumer = _consumer(options, errors)
    processed = 0
    previous_sigterm = signal.signal(signal.SIGTERM, _interrupt)
    try:
        _start(consumer, options, errors)
        processed = _consume(consumer, options, out, errors)
    except KeyboardInterrupt:
        pass  # Ctrl-C (or SIGTERM) is the ordinary way to stop; the summary still prints
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)
        _flush(out)
        consumer.close()
        print(f"Processed a total of {processed} messages", file=sys.stderr, flush=True)
    return 0


def _consumer(options: ConsumerOptions, errors: ErrorReporter) -> Consumer:
    properties = dict(options.properties)
    config = client_config(options.bootstrap_servers, properties, warn=warn)
    check_login(config, properties)
    config["error_cb"] = errors
    config.setdefault("log_level", 0)  # errors reach the user through error_cb, once each
    if options.group is not None:
        config["group.id"] = options.group
        reset = "earliest" if options.offset == OFFSET_BEGINNING else "latest"
        config.setdefault("auto.offset.reset", reset)
    else:
        # librdkafka insists on a group.id even for assign(); with no commits and no
        # subscribe() the group is never joined. Kafka's tool names its groups like this.
        config.setdefault("group.id", f"console-consumer-{random.randrange(100000)}")
        config["enable.auto.commit"] = False
    try:
        return Consumer(config)
    except KafkaException as exception:
        raise CommandError(kafka_error_message(exception)) from None


def _start(consumer: Consumer, options: ConsumerOptions, errors: ErrorReporter) -> None:
    if options.group is not None:
        consumer.subscribe([options.topic])
        return
    partitions = wait_for_partitions(
        consumer,
        options.topic,
        wait_ms=options.timeout_ms,
        metadata_timeout_s=timeout_seconds(dict(options.properties)),
        errors=errors,
    )
    if options.partition is not None:
        # without this check an unknown partition would be waited on in silence until
        # --timeout-ms (or for ever): the topic exists, so the partition never will
        if options.partition not in partitions:
            raise CommandError(f"Partition {options.topic}-{options.partition} does not exist "
                               f"(topic {options.topic} has partitions 0-{max(partitions)})")
        partitions = [options.partition]
    consumer.assign([TopicPartition(options.topic, p, options.offset) for p in partitions])


def wait_for_partitions(
    consumer: Consumer,
    topic: str,
    *,
    wait_ms: int | None,
    metadata_timeout_s: float,
    errors: ErrorReporter,
) -> list[int]:
    """The topic's partitions. A topic that does not exist yet is waited for (for `wait_ms`,
    or for ever when None), as a subscribed consumer would wait for it."""
    deadline = None if wait_ms is None else time.monotonic() + wait_ms / 1000
    warned = False
    while True:
        try:
            metadata = consumer.list_topics(topic, timeout=metadata_timeout_s)
        except KafkaException as exception:
            raise CommandError(kafka_error_message(exception) + errors.describe_last()) from None
        found = metadata.topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return sorted(found.partitions)
        if deadline is not None and time.monotonic() >= deadline:
            raise CommandError(f"Topic {topic} not present in metadata")
        if not warned:
            reason = "no partitions" if found is None or found.error is None else found.error.str()
            warn(f"WARN: waiting for topic {topic} ({reason})")
            warned = True
        time.sleep(_TOPIC_WAIT_INTERVAL_S)


def _consume(
    consumer: Consumer, options: ConsumerOptions, out: BinaryIO, errors: ErrorReporter
) -> int:
    processed = 0
    last_record_at = time.monotonic()
    format_message = options.formatter.format_message
    while options.max_messages is None or processed < options.max_messages:
        wanted = _POLL_BATCH_MAX
        if options.max_messages is not None:
            wanted = min(wanted, options.max_messages - processed)
        messages = consumer.consume(num_messages=wanted, timeout=_POLL_INTERVAL_S)
        now = time.monotonic()
        for message in messages:
            error = message.error()
            if error is not None:
                _report(error, errors)
                continue
            out.write(format_message(message))
            processed += 1
        if processed and messages:
            out.flush()
        if any(message.error() is None for message in messages):
            last_record_at = now
        elif options.timeout_ms is not None and (now - last_record_at) * 1000 >= options.timeout_ms:
            break
    return processed


def _report(error: KafkaError, errors: ErrorReporter) -> None:
    if error.code() == KafkaError._PARTITION_EOF:
        return
    if error.fatal():
        raise CommandError(error.str())
    errors(error)  # a warning, once per kind: librdkafka keeps retrying


def _flush(out: BinaryIO) -> None:
    try:
        out.flush()
    except BrokenPipeError:
        pass  # the reader (say `head`) has gone; main() deals with stdout


def _interrupt(signal_number: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
