"""`pykraft verifiable-producer` and `pykraft verifiable-consumer`: Kafka's system-test tools
(VerifiableProducer, VerifiableConsumer), which print one JSON event per line on stdout so a
test harness can check which records were acked, consumed and committed.

    pykraft verifiable-producer --bootstrap-server H:P --topic T [--max-messages N]
        [--throughput N] [--acks -1|0|1] [--value-prefix P] [--repeating-keys N]
    pykraft verifiable-consumer --bootstrap-server H:P --topic T --group-id G
        [--group-protocol classic|consumer] [--enable-autocommit] [--max-messages N] ...

The producer sends the integers 0, 1, 2, ... as string values (`P.i` with a prefix), keys
null or cycling 0..N-1, with retries off, and prints `startup_complete`, one
`producer_send_success` (key, value, topic, partition, offset) or `producer_send_error`
(exception, message) per record, then at the end or on SIGTERM/SIGINT `shutdown_complete`
and `tool_data` (sent, acked, target_throughput, avg_throughput). The consumer prints
`startup_complete`, `partitions_assigned` / `partitions_revoked`, one `records_consumed`
per non-empty poll (per-partition count, minOffset, maxOffset), `record_data` per record
with --verbose, `offsets_committed` after each synchronous commit (unless auto-commit), and
`shutdown_complete` after it closes. Event fields come in the order Kafka's tools print them.
Both run on confluent-kafka (librdkafka); Java-only settings are mapped as the other tools
map them.
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from pykraft.cli.args import (
    INT32,
    INT64,
    ArgumentParser,
    UsageError,
    load_properties,
    parse_bootstrap_servers,
)
from pykraft.cli.client_config import client_config, producer_defaults, warn
from pykraft.cli.protocol_client import check_login

__all__ = ["add_parsers", "exception_class"]

_ASSIGNORS: Final = {  # Kafka's classic assignors by class name -> librdkafka's names
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
    "range": "range",
    "roundrobin": "roundrobin",
    "cooperative-sticky": "cooperative-sticky",
}
_POLL_S: Final = 0.2  # how often the loops look at the stop flag
_CONSUME_BATCH: Final = 500  # Kafka's max.poll.records default
_ERRORS: Final = "org.apache.kafka.common.errors."
# librdkafka error codes -> the exception Kafka's producer would report for the same failure
_EXCEPTIONS: Final = {
    KafkaError._MSG_TIMED_OUT: "TimeoutException",
    KafkaError._TIMED_OUT: "TimeoutException",
    KafkaError.REQUEST_TIMED_OUT: "TimeoutException",
    KafkaError.UNKNOWN_TOPIC_OR_PART: "UnknownTopicOrPartitionException",
    KafkaError._UNKNOWN_TOPIC: "UnknownTopicOrPartitionException",
    KafkaError._UNKNOWN_PARTITION: "UnknownTopicOrPartitionException",
    KafkaError.MSG_SIZE_TOO_LARGE: "RecordTooLargeException",
    KafkaError.NOT_ENOUGH_REPLICAS: "NotEnoughReplicasException",
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "NotEnoughReplicasAfterAppendException",
    KafkaError.NOT_LEADER_FOR_PARTITION: "NotLeaderOrFollowerException",
    KafkaError.INVALID_RECORD: "InvalidRecordException",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "TopicAuthorizationException",
}


def add_parsers(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    producer = commands.add_parser(
        "verifiable-producer", help="produce integers and print JSON events (system tests)",
        description="This tool produces increasing integers to the specified topic and prints "
                    "JSON metadata to stdout on each \"send\" request, making externally "
                    "visible which messages have been acked and which have not.")
    producer.add_argument("--topic", required=True, metavar="TOPIC",
                          help="Produce messages to this topic.")
    producer.add_argument("--bootstrap-server", required=True,
                          metavar="HOST1:PORT1[,HOST2:PORT2[...]]",
                          help="REQUIRED: The server(s) to connect to.")
    producer.add_argument("--max-messages", type=INT32, default=-1, metavar="MAX-MESSAGES",
                          help="Produce this many messages. If -1, produce messages until the "
                               "process is killed externally.")
    producer.add_argument("--throughput", type=INT32, default=-1, metavar="THROUGHPUT",
                          help="If set >= 0, throttle maximum message throughput to "
                               "*approximately* THROUGHPUT messages/sec.")
    producer.add_argument("--acks", type=int, default=-1, choices=(0, 1, -1), metavar="ACKS",
                          help="Acks required on each produced message (0, 1 or -1).")
    producer.add_argument("--producer.config", dest="producer_config", metavar="CONFIG_FILE",
                          help="Producer config properties file (security settings "
                               "included).")
    producer.add_argument("--message-create-time", type=INT64, default=-1, metavar="CREATETIME",
                          help="Send messages with creation time starting at the arguments "
                               "value, in milliseconds since epoch")
    producer.add_argument("--value-prefix", type=INT32, metavar="VALUE-PREFIX",
                          help="If specified, each produced value will have this prefix with a "
                               "dot separator")
    producer.add_argument("--repeating-keys", type=INT32, metavar="REPEATING-KEYS",
                          help="If specified, each produced record will have a key starting at "
                               "0 increment by 1 up to the number specified (exclusive), then "
                               "the key is set to 0 again")
    producer.set_defaults(handler=_run_producer)

    consumer = commands.add_parser(
        "verifiable-consumer", help="consume and print JSON events (system tests)",
        description="This tool consumes messages from a specific topic and emits consumer "
                    "events (e.g. group rebalances, received messages, and offsets committed) "
                    "as JSON objects to STDOUT.")
    consumer.add_argument("--bootstrap-server", required=True,
                          metavar="HOST1:PORT1[,HOST2:PORT2[...]]",
                          help="The server(s) to connect to.")
    consumer.add_argument("--topic", required=True, metavar="TOPIC",
                          help="Consumes messages from this topic.")
    consumer.add_argument("--group-protocol", default="classic", metavar="GROUP_PROTOCOL",
                          help="Group protocol (must be one of classic, consumer)")
    consumer.add_argument("--group-remote-assignor", metavar="GROUP_REMOTE_ASSIGNOR",
                          help="Group remote assignor (uniform or range); only used if the "
                               "group protocol is CONSUMER")
    consumer.add_argument("--group-id", required=True, metavar="GROUP_ID",
                          help="The groupId shared among members of the consumer group")
    consumer.add_argument("--group-instance-id", metavar="GROUP_INSTANCE_ID",
                          help="A unique identifier of the consumer instance")
    consumer.add_argument("--max-messages", type=INT32, default=-1, metavar="MAX-MESSAGES",
                          help="Consume this many messages. If -1 (the default), the consumer "
                               "will consume until the process is killed externally")
    consumer.add_argument("--session-timeout", type=INT32, default=30000, metavar="TIMEOUT_MS",
                          help="Set the consumer's session timeout (classic protocol)")
    consumer.add_argument("--verbose", action="store_true",
                          help="Enable to log individual consumed records")
    consumer.add_argument("--enable-autocommit", action="store_true",
                          help="Enable offset auto-commit on consumer")
    consumer.add_argument("--reset-policy", default="earliest", metavar="POLICY",
                          help="Set reset policy (must be either 'earliest', 'latest', or "
                               "'none')")
    consumer.add_argument("--assignment-strategy",
                          default="org.apache.kafka.clients.consumer.RangeAssignor",
                          metavar="CLASS",
                          help="Set assignment strategy (Kafka's RangeAssignor, "
                               "RoundRobinAssignor or CooperativeStickyAssignor class name); "
                               "only used if the group protocol is CLASSIC")
    consumer.add_argument("--consumer.config", dest="consumer_config", metavar="CONFIG_FILE",
                          help="Consumer config properties file (config options shared with "
                               "command line parameters will be overridden; security settings "
                               "included).")
    consumer.set_defaults(handler=_run_consumer)


def _print_event(name: str, **fields: Any) -> None:
    event = {"timestamp": int(time.time() * 1000), "name": name, **fields}
    print(json.dumps(event, separators=(",", ":")), flush=True)


class _StopFlag:
    """SIGTERM and SIGINT ask the loop to stop; it then closes and prints its last events,
    as Kafka's tools do from their shutdown hooks."""

    def __init__(self) -> None:
        self.stopped = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopFlag:
        for number in (signal.SIGTERM, signal.SIGINT):
            self._previous[number] = signal.signal(number, self._stop)
        return self

    def _stop(self, number: int, frame: FrameType | None) -> None:
        self.stopped = True

    def __exit__(self, *exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)


def exception_class(error: KafkaError | None) -> str:
    """What Kafka's producer_send_error shows as `exception`: its exception's class."""
    simple = _EXCEPTIONS.get(error.code()) if error is not None else None
    if simple is None:
        return "class org.apache.kafka.common.KafkaException"
    return f"class {_ERRORS}{simple}"


# -- producer -------------------------------------------------------------------------------


def _run_producer(args: argparse.Namespace) -> int:
    properties = load_properties(args.producer_config) if args.producer_config else {}
    # Kafka's tool sets acks and retries=0 first and lets the config file override them
    # (and keys land where Kafka's producer puts them: librdkafka's murmur2 partitioner is
    # the Java client's)
    settings = {"acks": str(args.acks), "retries": "0", "partitioner": "murmur2_random",
                **properties}
    config = producer_defaults(client_config(args.bootstrap_server, settings, warn=warn))
    if args.repeating_keys is not None and args.repeating_keys <= 0:
        raise UsageError("--repeating-keys must be positive")
    check_login(config, settings)
    producer = Producer({**config, "error_cb": lambda error: None, "log_level": 0})
    tool = _VerifiableProducer(producer, args)
    with _StopFlag() as stop:
        start_s = time.monotonic()
        tool.run(stop)
        remaining = producer.flush(_flush_timeout_s(config))
        _print_event("shutdown_complete")
        elapsed_s = max(time.monotonic() - start_s, 1e-3)
        _print_event("tool_data", sent=tool.sent, acked=tool.acked,
                     target_throughput=args.throughput, avg_throughput=tool.acked / elapsed_s)
    return 1 if remaining else 0


def _flush_timeout_s(config: dict[str, Any]) -> float:
    timeout_ms = config.get("delivery.timeout.ms", config.get("message.timeout.ms", 120_000))
    return int(timeout_ms) / 1000 + 5


class _VerifiableProducer:
    def __init__(self, producer: Producer, args: argparse.Namespace) -> None:
        self.producer = producer
        self.topic: str = args.topic
        self.max_messages: int = args.max_messages
        self.throughput: int = args.throughput
        self.value_prefix: int | None = args.value_prefix
        self.repeating_keys: int | None = args.repeating_keys
        self.create_time_ms: int | None = (None if args.message_create_time == -1
                                           else args.message_create_time)
        self.sent = 0
        self.acked = 0
        self._key_counter = 0

    def run(self, stop: _StopFlag) -> None:
        _print_event("startup_complete")
        start_s = time.monotonic()
        index = 0
        while not stop.stopped and (self.max_messages < 0 or index < self.max_messages):
            self._send(self._key(), self._value(index))
            index += 1
            self.producer.poll(0)
            self._throttle(index, start_s, stop)

    def _key(self) -> str | None:
        if self.repeating_keys is None:
            return None
        key = str(self._key_counter)
        self._key_counter = (self._key_counter + 1) % self.repeating_keys
        return key

    def _value(self, index: int) -> str:
        return str(index) if self.value_prefix is None else f"{self.value_prefix}.{index}"

    def _send(self, key: str | None, value: str) -> None:
        self.sent += 1
        extra: dict[str, Any] = {}
        if self.create_time_ms is not None:
            extra["timestamp"] = self.create_time_ms

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is None:
                self.acked += 1
                _print_event("producer_send_success", key=key, value=value,
                              topic=message.topic(), partition=message.partition(),
                              offset=message.offset())
            else:
                _print_event("producer_send_error", key=key, value=value, topic=self.topic,
                             exception=exception_class(error), message=error.str())

        while True:
            try:
                self.producer.produce(self.topic, value=value.encode(),
                                      key=None if key is None else key.encode(),
                                      on_delivery=delivered, **extra)
                return
            except BufferError:  # librdkafka's queue is full: serve callbacks, then retry
                self.producer.poll(_POLL_S)
            except KafkaException as exception:
                error = exception.args[0] if exception.args else None
                _print_event("producer_send_error", key=key, value=value, topic=self.topic,
                             exception=exception_class(error if isinstance(error, KafkaError)
                                                       else None),
                             message=error.str() if isinstance(error, KafkaError)
                             else str(exception))
                return

    def _throttle(self, sent: int, start_s: float, stop: _StopFlag) -> None:
        """Kafka's ThroughputThrottler: at most `throughput` records a second on average
        (0 pauses until stopped; a negative value does not throttle)."""
        if self.throughput < 0:
            return
        while not stop.stopped:
            if self.throughput == 0:
                wait_s = _POLL_S
            else:
                wait_s = sent / self.throughput - (time.monotonic() - start_s)
                if wait_s <= 0:
                    return
            self.producer.poll(min(wait_s, _POLL_S))


# -- consumer -------------------------------------------------------------------------------


def _run_consumer(args: argparse.Namespace) -> int:
    properties = load_properties(args.consumer_config) if args.consumer_config else {}
    protocol = args.group_protocol.lower()
    if protocol not in ("classic", "consumer"):
        raise UsageError(f"--group-protocol must be one of classic, consumer, "
                         f"got '{args.group_protocol}'")
    if args.reset_policy not in ("earliest", "latest", "none"):
        raise UsageError("--reset-policy must be either 'earliest', 'latest', or 'none', "
                         f"got '{args.reset_policy}'")
    settings = dict(properties)
    if protocol == "consumer":
        settings["group.protocol"] = "consumer"
        if args.group_remote_assignor is not None:
            settings["group.remote.assignor"] = args.group_remote_assignor
    else:
        strategy = _ASSIGNORS.get(args.assignment_strategy)
        if strategy is None:
            names = sorted(set(_ASSIGNORS) - set(_ASSIGNORS.values()))
            raise UsageError(f"unsupported --assignment-strategy {args.assignment_strategy} "
                             f"(one of {', '.join(names)})")
        settings["partition.assignment.strategy"] = strategy
        settings["session.timeout.ms"] = str(args.session_timeout)
    settings["group.id"] = args.group_id
    if args.group_instance_id is not None:
        settings["group.instance.id"] = args.group_instance_id
    settings["enable.auto.commit"] = "true" if args.enable_autocommit else "false"
    settings["auto.offset.reset"] = "error" if args.reset_policy == "none" else args.reset_policy
    config = client_config(parse_bootstrap_servers(args.bootstrap_server), settings, warn=warn)
    check_login(config, settings)
    consumer = Consumer({**config, "error_cb": lambda error: None, "log_level": 0})
    tool = _VerifiableConsumer(consumer, args.topic, args.max_messages,
                               auto_commit=args.enable_autocommit, verbose=args.verbose)
    with _StopFlag() as stop:
        tool.run(stop)
    return 0


def _partitions(partitions: Sequence[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]


class _VerifiableConsumer:
    def __init__(self, consumer: Consumer, topic: str, max_messages: int, *,
                 auto_commit: bool, verbose: bool) -> None:
        self.consumer = consumer
        self.topic = topic
        self.max_messages = max_messages
        self.auto_commit = auto_commit
        self.verbose = verbose
        self.consumed = 0

    def _finished(self) -> bool:
        return 0 <= self.max_messages <= self.consumed

    def run(self, stop: _StopFlag) -> None:
        _print_event("startup_complete")
        try:
            self.consumer.subscribe(
                [self.topic],
                on_assign=lambda _, partitions: _print_event(
                    "partitions_assigned", partitions=_partitions(partitions)),
                on_revoke=lambda _, partitions: _print_event(
                    "partitions_revoked", partitions=_partitions(partitions)))
            while not stop.stopped and not self._finished():
                messages = self.consumer.consume(_CONSUME_BATCH, _POLL_S)
                records = [m for m in messages if m.error() is None]
                for failed in messages:
                    error = failed.error()
                    if error is None:
                        continue
                    if error.fatal():
                        raise KafkaException(error)
                    warn(f"WARN: {error.str()}")
                if records:
                    offsets = self._on_records(records)
                    if not self.auto_commit:
                        self._commit(offsets)
        finally:
            self.consumer.close()
            _print_event("shutdown_complete")

    def _on_records(self, records: list[Message]) -> list[TopicPartition]:
        """One records_consumed event for a poll, cut at --max-messages (Kafka's order:
        partitions as they first appear)."""
        by_partition: dict[tuple[str, int], list[Message]] = {}
        for record in records:
            by_partition.setdefault((str(record.topic()), int(record.partition() or 0)),
                                    []).append(record)
        summaries, offsets = [], []
        for (topic, partition), batch in by_partition.items():
            if self.max_messages >= 0:
                batch = batch[:self.max_messages - self.consumed]
            if not batch:
                continue
            low, high = int(batch[0].offset() or 0), int(batch[-1].offset() or 0)
            offsets.append(TopicPartition(topic, partition, high + 1))
            summaries.append({"topic": topic, "partition": partition, "count": len(batch),
                              "minOffset": low, "maxOffset": high})
            if self.verbose:
                for record in batch:
                    _print_event("record_data", key=_text(record.key()),
                                 value=_text(record.value()), topic=topic,
                                 partition=partition, offset=record.offset())
            self.consumed += len(batch)
            if self._finished():
                break
        _print_event("records_consumed", count=len(records), partitions=summaries)
        return offsets

    def _commit(self, offsets: list[TopicPartition]) -> None:
        committed = [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset}
                     for tp in offsets]
        if not offsets:
            _print_event("offsets_committed", offsets=committed, success=True)
            return
        try:
            results = self.consumer.commit(offsets=offsets, asynchronous=False) or []
        except KafkaException as exception:
            error = exception.args[0] if exception.args else None
            message = error.str() if isinstance(error, KafkaError) else str(exception)
            _print_event("offsets_committed", offsets=committed, error=message, success=False)
            return
        failed = [tp.error.str() for tp in results if tp.error is not None]
        if failed:
            _print_event("offsets_committed", offsets=committed, error=failed[0], success=False)
        else:
            _print_event("offsets_committed", offsets=committed, success=True)


def _text(data: bytes | str | None) -> str | None:
    if data is None or isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")

