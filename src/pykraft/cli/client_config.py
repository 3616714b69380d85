"""Client configuration for the tools: Kafka (Java client) property names in, librdkafka out.

The tools run on confluent-kafka, whose librdkafka core understands most Java client
property names (`acks`, `linger.ms`, `batch.size`, `compression.type`, `group.id`,
`auto.offset.reset`, the security settings). People paste their Java client files into
`--producer.config` and friends, so the few Java-only names are translated or dropped with
a warning instead of failing with librdkafka's "No such configuration property".
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, Final, TextIO, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from pykraft.cli.args import UsageError, parse_bootstrap_servers

__all__ = [
    "DEFAULT_API_TIMEOUT_MS",
    "ErrorReporter",
    "admin_client",
    "client_config",
    "producer_defaults",
    "result_of",
    "kafka_error_message",
    "timeout_seconds",
    "warn",
]

T = TypeVar("T")

DEFAULT_API_TIMEOUT_MS: Final = 30_000
# An admin call is given the request timeout; waiting a little longer for its future lets
# librdkafka's own error (which says what timed out) arrive before a bare TimeoutError.
RESULT_GRACE_S: Final = 5.0

# Settings of the Java clients that mean nothing to librdkafka (serialisation is the tool's
# business here; blocking and batching limits are librdkafka's own).
_DROPPED: Final = frozenset(
    {
        "key.serializer",
        "value.serializer",
        "key.deserializer",
        "value.deserializer",
        "max.block.ms",
        "max.poll.records",
        "interceptor.classes",
        "default.api.timeout.ms",  # read by the tools themselves, see timeout_seconds
    }
)


def client_config(
    bootstrap_servers: str | None,
    properties: Mapping[str, str],
    *,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """librdkafka configuration from Java-style properties; `bootstrap_servers` wins.

    Raises UsageError when no bootstrap server is given either way, as Kafka's tools do.
    """
    config: dict[str, Any] = {}
    for key, value in properties.items():
        if key in _DROPPED:
            if key != "default.api.timeout.ms" and warn is not None:
                warn(f"WARN: ignoring Java client property {key} (no librdkafka equivalent)")
            continue
        if key == "buffer.memory":
            config["queue.buffering.max.kbytes"] = str(max(1, _int_property(key, value) // 1024))
            continue
        config[key] = value
    if bootstrap_servers:
        config["bootstrap.servers"] = parse_bootstrap_servers(bootstrap_servers)
    if not config.get("bootstrap.servers"):
        raise UsageError("--bootstrap-server must be specified")
    return config


# Kafka's producer gives up on a record after delivery.timeout.ms (2 minutes); librdkafka's
# message.timeout.ms (the same setting) defaults to 5 minutes. The tools keep Kafka's bound,
# so a producer tool facing an unreachable cluster reports it as Kafka's would.
KAFKA_DELIVERY_TIMEOUT_MS: Final = 120_000


def producer_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with Kafka's producer defaults where librdkafka's differ and none is set."""
    if "delivery.timeout.ms" not in config and "message.timeout.ms" not in config:
        config["message.timeout.ms"] = KAFKA_DELIVERY_TIMEOUT_MS
    return config


def timeout_seconds(properties: Mapping[str, str]) -> float:
    """How long an admin or metadata call may take: Kafka's `default.api.timeout.ms`."""
    raw = properties.get("default.api.timeout.ms")
    timeout_ms = DEFAULT_API_TIMEOUT_MS if raw is None else _int_property("timeout", raw)
    if timeout_ms <= 0:
        raise UsageError(f"default.api.timeout.ms must be positive, got {timeout_ms}")
    return timeout_ms / 1000


def _int_property(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{key} must be an integer, got '{value}'") from None


class ErrorReporter:
    """librdkafka `error_cb`: one warning line per kind of error, and the last one kept.

    librdkafka retries a refused connection every second and calls back each time; a user
    needs to see "connection refused" once, and again only if something else goes wrong.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._reported: set[int] = set()
        self.last: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        self.last = error
        if error.code() in self._reported:
            return
        self._reported.add(error.code())
        stream = self._stream if self._stream is not None else sys.stderr
        print(f"WARN: {error.str()}", file=stream, flush=True)

    def describe_last(self) -> str:
        return "" if self.last is None else f" (last client error: {self.last.str()})"


def admin_client(config: Mapping[str, Any]) -> tuple[AdminClient, ErrorReporter]:
    """An AdminClient whose connection errors reach the user once each, as WARN lines.

    Without `error_cb` and `log_level` 0, librdkafka logs every failed reconnect (one line a
    second) until the call's timeout: thirty lines for one unreachable bootstrap server.
    """
    errors = ErrorReporter()
    settings = dict(config)
    settings["error_cb"] = errors
    settings.setdefault("log_level", 0)
    return AdminClient(settings), errors


def result_of(future: Future[T], timeout_s: float) -> T:
    """An admin call's result, waiting past its request timeout of `timeout_s`."""
    return future.result(timeout_s + RESULT_GRACE_S)


def kafka_error_message(exception: KafkaException) -> str:
    """The readable part of a confluent-kafka exception (its KafkaError's text)."""
    error = exception.args[0] if exception.args else None
    return error.str() if isinstance(error, KafkaError) else str(exception)


def warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
