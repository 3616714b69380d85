"""`pykraft console-producer`: lines from stdin become records, like kafka-console-producer.sh.

Each line is one record. With `parse.key=true` the line is split at the first
`key.separator` (default a tab) into key and value; with `parse.headers=true` a leading
`h1:v1,h2:v2` part, ended by `headers.delimiter` (default a tab), becomes the headers. A
field equal to `null.marker`, when that is set, is sent as null. A line that does not
split as asked is an error unless `ignore.error=true` (then it is sent whole as the value).
At EOF the producer flushes; any record that was not acknowledged makes the exit code 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import BinaryIO, Final

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from pykraft.cli.args import (
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
    producer_defaults,
    warn,
)
from pykraft.cli.protocol_client import check_login

__all__ = ["LineReader", "ProducerRecord", "add_parser", "line_reader", "run"]

COMPRESSION_CODECS: Final = ("none", "gzip", "snappy", "lz4", "zstd")
_READER_PROPERTIES: Final = frozenset(
    {
        "parse.key",
        "key.separator",
        "ignore.error",
        "parse.headers",
        "headers.delimiter",
        "headers.separator",
        "headers.key.separator",
        "null.marker",
    }
)
_FLUSH_TIMEOUT_S: Final = 300.0  # a bound on waiting for acks at EOF; message.timeout.ms rules


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class LineReader:
    """Splits input lines (bytes, line ending removed) into records, Kafka's LineMessageReader
    rules."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    ignore_error: bool = False
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None

    def read(self, line: bytes, line_number: int) -> ProducerRecord:
        headers: tuple[tuple[str, bytes | None], ...] = ()
        rest = line
        if self.parse_headers:
            head, found, tail = line.partition(self.headers_delimiter)
            if found:
                headers, rest = self._headers(head, line_number), tail
            elif not self.ignore_error:
                raise CommandError(
                    f"No headers delimiter found on line number {line_number}: '{_text(line)}'"
                )
        key: bytes | None = None
        if self.parse_key:
            key_part, found, value_part = rest.partition(self.key_separator)
            if found:
                key, rest = self._nullable(key_part), value_part
            elif not self.ignore_error:
                raise CommandError(
                    f"No key separator found on line number {line_number}: '{_text(line)}'"
                )
        return ProducerRecord(key=key, value=self._nullable(rest), headers=headers)

    def _headers(self, text: bytes, line_number: int) -> tuple[tuple[str, bytes | None], ...]:
        headers: list[tuple[str, bytes | None]] = []
        for pair in text.split(self.headers_separator) if text else ():
            name, found, value = pair.partition(self.headers_key_separator)
            if self.null_marker is not None and name == self.null_marker:
                raise CommandError(
                    f"Header keys should not be equal to the null marker '{_text(name)}' "
                    f"as they can't be null (line number {line_number})"
                )
            headers.append((_text(name), self._nullable(value) if found else None))
        return tuple(headers)

    def _nullable(self, field: bytes) -> bytes | None:
        return None if self.null_marker is not None and field == self.null_marker else field


def line_reader(properties: Mapping[str, str]) -> LineReader:
    unknown = sorted(set(properties) - _READER_PROPERTIES)
    if unknown:
        known = ", ".join(sorted(_READER_PROPERTIES))
        raise UsageError(f"unknown --property {unknown[0]} (known: {known})")

    def flag(name: str) -> bool:
        return parse_bool(properties[name], name) if name in properties else False

    def separator(name: str, default: bytes) -> bytes:
        value = properties.get(name)
        if value is None:
            return default
        if not value:
            raise UsageError(f"--property {name} must not be empty")
        return _argument_bytes(value)

    null_marker = properties.get("null.marker")
    if null_marker == "":
        raise UsageError("--property null.marker must not be empty")
    return LineReader(
        parse_key=flag("parse.key"),
        key_separator=separator("key.separator", b"\t"),
        ignore_error=flag("ignore.error"),
        parse_headers=flag("parse.headers"),
        headers_delimiter=separator("headers.delimiter", b"\t"),
        headers_separator=separator("headers.separator", b","),
        headers_key_separator=separator("headers.key.separator", b":"),
        null_marker=None if null_marker is None else _argument_bytes(null_marker),
    )


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "console-producer",
        help="send lines from standard input as records (kafka-console-producer.sh)",
    )
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the broker(s) to connect to, host:port[,host:port]")
    parser.add_argument("--topic", required=True, help="REQUIRED: the topic to produce to")
    parser.add_argument(
        "--property",
        action="append",
        metavar="NAME=VALUE",
        help="line reader settings: parse.key, key.separator, parse.headers, "
        "headers.delimiter, headers.separator, headers.key.separator, "
        "null.marker, ignore.error",
    )
    parser.add_argument("--producer-property", action="append", metavar="NAME=VALUE",
                        help="a producer setting (Kafka's Java name; repeatable; overrides "
                             "--producer.config)")
    parser.add_argument("--producer.config", dest="producer_config", metavar="FILE",
                        help="producer properties file (Java client keys, security settings "
                             "included: security.protocol, sasl.*, ssl.*)")
    parser.add_argument("--compression-codec", nargs="?", const="gzip", choices=COMPRESSION_CODECS,
                        help="compress batches with this codec (gzip if given without one)")
    parser.add_argument(
        "--request-required-acks",
        metavar="ACKS",
        help="acks: -1/all, 0 or 1 (the producer's default: all)",
    )
    parser.add_argument("--sync", action="store_true", help="wait for each record's ack")
    parser.set_defaults(handler=_run_args)


def _run_args(args: argparse.Namespace) -> int:
    properties = merge_properties(
        load_properties(args.producer_config) if args.producer_config else {},
        parse_key_values(args.producer_property, "--producer-property"),
    )
    if args.compression_codec is not None:
        properties["compression.type"] = args.compression_codec
    if args.request_required_acks is not None:
        properties["acks"] = args.request_required_acks
    reader = line_reader(parse_key_values(args.property, "--property"))
    return run(args.bootstrap_server, args.topic, properties, reader, sync=args.sync)


class _Deliveries:
    """Counts acknowledgements; reports each failed record as Kafka's ErrorLoggingCallback."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.failed = 0

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            return
        self.failed += 1
        key, value = message.key(), message.value()
        key_text = "null" if key is None else f"{len(key)} bytes"
        value_text = "null" if value is None else f"{len(value)} bytes"
        print(
            f"Error when sending message to topic {self.topic} with key: {key_text}, "
            f"value: {value_text} with error: {error.str()}",
            file=sys.stderr,
        )


def run(
    bootstrap_servers: str | None,
    topic: str,
    properties: Mapping[str, str],
    reader: LineReader,
    *,
    sync: bool = False,
    lines: Iterable[bytes] | None = None,
) -> int:
    errors = ErrorReporter()
    config = producer_defaults(client_config(bootstrap_servers, properties, warn=warn))
    check_login(config, properties)
    config["error_cb"] = errors
    config.setdefault("log_level", 0)  # errors reach the user through error_cb, once each
    try:
        producer = Producer(config)
    except KafkaException as exception:
        raise CommandError(kafka_error_message(exception)) from None
    deliveries = _Deliveries(topic)
    source: Iterable[bytes] = lines if lines is not None else _stdin_lines(sys.stdin.buffer)
    try:
        _send_lines(producer, topic, reader, source, deliveries, sync=sync)
    except KeyboardInterrupt:
        pass  # Ctrl-C ends the input as EOF does: what was typed is still delivered
    except CommandError:
        producer.flush(_FLUSH_TIMEOUT_S)  # the lines before the bad one still go out
        raise
    remaining = producer.flush(_FLUSH_TIMEOUT_S)
    if remaining:
        print(
            f"{remaining} records were not acknowledged in time{errors.describe_last()}",
            file=sys.stderr,
        )
        return 1
    return 1 if deliveries.failed else 0


def _send_lines(
    producer: Producer,
    topic: str,
    reader: LineReader,
    lines: Iterable[bytes],
    deliveries: _Deliveries,
    *,
    sync: bool,
) -> None:
    for line_number, line in enumerate(lines, start=1):
        record = reader.read(_strip_line_ending(line), line_number)
        _produce(producer, topic, record, deliveries)
        if sync:
            producer.flush(_FLUSH_TIMEOUT_S)


def _produce(
    producer: Producer, topic: str, record: ProducerRecord, deliveries: _Deliveries
) -> None:
    while True:
        try:
            producer.produce(
                topic,
                value=record.value,
                key=record.key,
                headers=list(record.headers) if record.headers else None,
                on_delivery=deliveries,
            )
        except BufferError:  # the local queue is full: serve acks, then try again
            producer.poll(0.1)
            continue
        except KafkaException as exception:
            raise CommandError(kafka_error_message(exception)) from None
        producer.poll(0)
        return


def _stdin_lines(stream: BinaryIO) -> Iterable[bytes]:
    # readline, not iteration over the stream: an interactive user sees each line sent as it
    # is typed, not when a read-ahead buffer fills
    while line := stream.readline():
        yield line


def _strip_line_ending(line: bytes) -> bytes:
    if line.endswith(b"\n"):
        line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
    return line


def _argument_bytes(value: str) -> bytes:
    """The bytes a command-line argument was given as: Python decodes argv with
    surrogateescape, so a byte that is not UTF-8 (a separator of 0xff) survives, and plain
    encode() would fail on it."""
    return value.encode("utf-8", "surrogateescape")


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")
