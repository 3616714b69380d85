"""Options of the "pykraft" data source, parsed and checked the way Spark's Kafka source does.

Pure: no Spark, no network. Spark hands a data source its options with lower-cased keys (a
case-insensitive map), so every lookup here is by the lower-cased name; `kafka.*` options lose
their prefix and go to the client unchanged (librdkafka's names are Kafka's, lower case).

Offsets JSON is Spark's: {"topicA": {"0": 23, "1": -1}, "topicB": {"0": -2}}, where -2 means
earliest and -1 latest. Timestamps JSON has the same shape with epoch milliseconds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "EARLIEST",
    "LATEST",
    "Assign",
    "EarliestOffsets",
    "GlobalTimestamp",
    "InvalidOptionError",
    "LatestOffsets",
    "OffsetSpec",
    "Partition",
    "ReadOptions",
    "SpecificOffsets",
    "SpecificTimestamps",
    "Strategy",
    "Subscribe",
    "SubscribePattern",
    "WriteOptions",
    "kafka_params",
    "parse_read_options",
    "parse_write_options",
]

EARLIEST: Final = -2  # Spark's (and ListOffsets') sentinel offsets in offsets JSON
LATEST: Final = -1

Partition = tuple[str, int]  # (topic, partition)

OFFSETS_EXAMPLE: Final = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
TIMESTAMPS_EXAMPLE: Final = '{"topicA":{"0":1700000000000,"1":1700000000000}}'
STRATEGY_KEYS: Final = ("assign", "subscribe", "subscribepattern")
STRATEGY_NAMES: Final = "'assign', 'subscribe', 'subscribePattern'"
# client settings the source decides itself: keys and values are always bytes, and offsets
# are planned by Spark and kept in its checkpoint, never committed or reset by the client
FORBIDDEN_KAFKA_PARAMS: Final = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "enable.auto.commit": "the source never commits offsets; they live in Spark's checkpoint",
    "key.deserializer": "keys are always read as bytes; cast them with DataFrame operations",
    "value.deserializer": "values are always read as bytes; cast them with DataFrame operations",
    "key.serializer": "write keys as a string or binary column",
    "value.serializer": "write values as a string or binary column",
    "interceptor.classes": "the client is librdkafka, which has no interceptors",
}


class InvalidOptionError(ValueError):
    """A data source option that is missing, malformed or not allowed for this query."""


@dataclass(frozen=True, slots=True)
class Subscribe:
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubscribePattern:
    pattern: str  # matched against the whole topic name, like Java's Pattern.matches


@dataclass(frozen=True, slots=True)
class Assign:
    partitions: tuple[Partition, ...]


Strategy = Subscribe | SubscribePattern | Assign


@dataclass(frozen=True, slots=True)
class EarliestOffsets:
    pass


@dataclass(frozen=True, slots=True)
class LatestOffsets:
    pass


@dataclass(frozen=True, slots=True)
class SpecificOffsets:
    offsets: Mapping[Partition, int]  # an offset, or EARLIEST / LATEST


@dataclass(frozen=True, slots=True)
class GlobalTimestamp:
    timestamp_ms: int  # every partition starts at its first record at or after this time


@dataclass(frozen=True, slots=True)
class SpecificTimestamps:
    timestamps_ms: Mapping[Partition, int]


OffsetSpec = EarliestOffsets | LatestOffsets | SpecificOffsets | GlobalTimestamp | \
    SpecificTimestamps


@dataclass(frozen=True, slots=True)
class ReadOptions:
    strategy: Strategy
    kafka_params: Mapping[str, str]  # for the client, without the "kafka." prefix
    starting: OffsetSpec
    ending: OffsetSpec | None  # batch queries only
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    # a trigger with fewer new offsets is skipped, unless max_trigger_delay_ms has passed
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_ms: int = 120_000
    group_id_prefix: str = "spark-pykraft-source"
    # what to do when no record is at or after a starting timestamp: fail, or start at latest
    timestamp_strategy: Literal["error", "latest"] = "error"


@dataclass(frozen=True, slots=True)
class WriteOptions:
    kafka_params: Mapping[str, str]
    topic: str | None  # overrides the topic column when set
    # each task of a micro-batch writes in one Kafka transaction that also records the
    # batch id, so a replayed batch is not written twice (streaming writes only)
    exactly_once: bool = False
    # transactional.id = "<prefix>-<query id>-<Spark partition id>"; the group recording
    # the batches has the same name
    transactional_id_prefix: str = "pykraft-sink"


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {key.lower(): value for key, value in options.items()}


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """The `kafka.*` options without their prefix, checked for what the source decides."""
    params = {key[len("kafka."):]: value for key, value in _lower(options).items()
              if key.startswith("kafka.")}
    for key, why in FORBIDDEN_KAFKA_PARAMS.items():
        if key in params:
            raise InvalidOptionError(f"Kafka option 'kafka.{key}' is not supported: {why}.")
    if not params.get("bootstrap.servers", "").strip():
        raise InvalidOptionError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring the Kafka client.")
    return params


def parse_read_options(options: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
    """Parse and check read options; streaming=None checks only what both kinds share."""
    lowered = _lower(options)
    strategy = _strategy(lowered)
    params = kafka_params(lowered)
    starting = _offset_spec(lowered, "starting", default=LatestOffsets() if streaming
                            else EarliestOffsets())
    ending: OffsetSpec | None = _offset_spec(lowered, "ending", default=LatestOffsets())
    if streaming:
        ending = None
        for key in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if key in lowered:
                raise InvalidOptionError(
                    f"Option '{_spark_name(key)}' is not valid for streaming queries.")
    elif streaming is not None and ending is not None:
        _check_batch_bounds(starting, ending)
    min_offsets = _positive(lowered, "minoffsetspertrigger")
    max_offsets = _positive(lowered, "maxoffsetspertrigger")
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise InvalidOptionError(
            f"The value of minOffsetPerTrigger({min_offsets}) is higher than the "
            f"maxOffsetsPerTrigger({max_offsets}).")
    max_trigger_delay_ms = _duration_ms(lowered, "maxtriggerdelay", default=15 * 60_000)
    if streaming and "maxrecordsperpartition" in lowered:
        raise InvalidOptionError("Option 'maxRecordsPerPartition' is for batch queries; "
                                 "use 'maxOffsetsPerTrigger' to bound micro-batches.")
    strategy_name = lowered.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy_name not in ("error", "latest"):
        raise InvalidOptionError("Option 'startingOffsetsByTimestampStrategy' must be 'error' "
                                 f"or 'latest', got '{strategy_name}'.")
    timestamp_strategy: Literal["error", "latest"] = \
        "error" if strategy_name == "error" else "latest"
    return ReadOptions(
        strategy=strategy,
        kafka_params=params,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_boolean(lowered, "failondataloss", default=True),
        include_headers=_boolean(lowered, "includeheaders", default=False),
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=max_trigger_delay_ms,
        min_partitions=_positive(lowered, "minpartitions"),
        max_records_per_partition=_positive(lowered, "maxrecordsperpartition"),
        poll_timeout_ms=_positive(lowered, "kafkaconsumer.polltimeoutms") or 120_000,
        group_id_prefix=lowered.get("groupidprefix", "spark-pykraft-source"),
        timestamp_strategy=timestamp_strategy,
    )


def parse_write_options(options: Mapping[str, str], *, streaming: bool = True) -> WriteOptions:
    lowered = _lower(options)
    topic = lowered.get("topic")
    if topic is not None and not topic.strip():
        raise InvalidOptionError("Option 'topic' must name a topic when it is set.")
    params = kafka_params(lowered)
    if "transactional.id" in params:
        raise InvalidOptionError(
            "Kafka option 'kafka.transactional.id' is not supported: set the option "
            "'exactlyOnce' to 'true' and the sink derives one transactional.id per task "
            "(prefix: option 'transactionalIdPrefix').")
    exactly_once = _boolean(lowered, "exactlyonce", default=False)
    prefix = lowered.get("transactionalidprefix", "pykraft-sink").strip()
    if not prefix:
        raise InvalidOptionError("Option 'transactionalIdPrefix' must not be empty.")
    if "transactionalidprefix" in lowered and not exactly_once:
        raise InvalidOptionError(
            "Option 'transactionalIdPrefix' is only used with option 'exactlyOnce' = 'true'.")
    if exactly_once and not streaming:
        raise InvalidOptionError(
            "Option 'exactlyOnce' is for streaming writes (df.writeStream), whose micro-batch "
            "ids let a replayed batch be recognised; a batch write (df.write) is at-least-once.")
    if exactly_once and params.get("enable.idempotence", "true").lower() == "false":
        raise InvalidOptionError(
            "Kafka option 'kafka.enable.idempotence' cannot be 'false' with option "
            "'exactlyOnce': transactional producers are idempotent.")
    if exactly_once and params.get("acks", "all").lower() not in ("all", "-1"):
        raise InvalidOptionError(
            f"Kafka option 'kafka.acks' must be 'all' with option 'exactlyOnce', got "
            f"'{params['acks']}': transactions need every in-sync replica's acknowledgement.")
    return WriteOptions(kafka_params=params, topic=topic, exactly_once=exactly_once,
                        transactional_id_prefix=prefix)


def _spark_name(lowered_key: str) -> str:
    names = {
        "endingoffsets": "endingOffsets", "endingtimestamp": "endingTimestamp",
        "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
        "startingoffsets": "startingOffsets", "startingtimestamp": "startingTimestamp",
        "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
        "subscribepattern": "subscribePattern",
    }
    return names.get(lowered_key, lowered_key)


def _strategy(lowered: Mapping[str, str]) -> Strategy:
    given = [key for key in STRATEGY_KEYS if key in lowered]
    if not given:
        raise InvalidOptionError(
            f"One of the options {STRATEGY_NAMES} must be specified for the pykraft source.")
    if len(given) > 1:
        names = ", ".join(f"'{_spark_name(key)}'" for key in given)
        raise InvalidOptionError(f"Only one of the options {STRATEGY_NAMES} can be specified "
                                 f"for the pykraft source; got {names}.")
    key = given[0]
    value = lowered[key].strip()
    if key == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise InvalidOptionError(
                f"No topics to subscribe to: option 'subscribe' is '{lowered[key]}'.")
        return Subscribe(topics)
    if key == "subscribepattern":
        if not value:
            raise InvalidOptionError("Pattern to subscribe is empty: option 'subscribePattern'.")
        try:
            re.compile(value)
        except re.error as error:
            raise InvalidOptionError(
                f"Option 'subscribePattern' is not a valid regular expression: {error}.") from None
        return SubscribePattern(value)
    partitions = _assign_json(value)
    if not partitions:
        raise InvalidOptionError("Option 'assign' names no partitions.")
    return Assign(partitions)


def _assign_json(text: str) -> tuple[Partition, ...]:
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not all(
            isinstance(topic, str) and isinstance(partitions, list)
            and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                    for p in partitions)
            for topic, partitions in parsed.items()):
        raise InvalidOptionError(
            f"Option 'assign' must be JSON like {example}, got: {text}")
    return tuple(sorted({(topic, p) for topic, ps in parsed.items() for p in ps}))


def _offset_spec(lowered: Mapping[str, str], side: str, *, default: OffsetSpec) -> OffsetSpec:
    """Spark's precedence: {side}Timestamp, then {side}OffsetsByTimestamp, then {side}Offsets."""
    key = f"{side}timestamp"
    if key in lowered:
        return GlobalTimestamp(_timestamp(lowered[key], _spark_name(key)))
    key = f"{side}offsetsbytimestamp"
    if key in lowered:
        table = _partition_table(lowered[key], _spark_name(key), TIMESTAMPS_EXAMPLE)
        for (topic, partition), timestamp_ms in table.items():
            if timestamp_ms < 0:
                raise InvalidOptionError(f"Option '{_spark_name(key)}': timestamp "
                                         f"{timestamp_ms} for {topic}-{partition} is negative.")
        return SpecificTimestamps(table)
    key = f"{side}offsets"
    if key not in lowered:
        return default
    text = lowered[key].strip()
    if text.lower() == "earliest":
        return EarliestOffsets()
    if text.lower() == "latest":
        return LatestOffsets()
    offsets = _partition_table(text, _spark_name(key), OFFSETS_EXAMPLE, keywords=True)
    for (topic, partition), offset in offsets.items():
        if offset < EARLIEST:
            raise InvalidOptionError(
                f"Option '{_spark_name(key)}': offset {offset} for {topic}-{partition} is not "
                "an offset, -2 (earliest) or -1 (latest).")
    return SpecificOffsets(offsets)


def _partition_table(text: str, name: str, example: str, *,
                     keywords: bool = False) -> dict[Partition, int]:
    words = '"earliest", "latest" or ' if keywords else ""
    message = f"Option '{name}' must be {words}JSON like {example}, got: {text}"
    try:
        parsed = json.loads(text)
    except ValueError:
        raise InvalidOptionError(message) from None
    if not isinstance(parsed, dict):
        raise InvalidOptionError(message)
    table: dict[Partition, int] = {}
    for topic, per_partition in parsed.items():
        if not isinstance(per_partition, dict):
            raise InvalidOptionError(message)
        for partition, value in per_partition.items():
            if not (isinstance(partition, str) and partition.isdigit()
                    and isinstance(value, int) and not isinstance(value, bool)):
                raise InvalidOptionError(message)
            table[(topic, int(partition))] = value
    if not table:
        raise InvalidOptionError(message)
    return table


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec) -> None:
    if isinstance(starting, LatestOffsets):
        raise InvalidOptionError(
            "Option 'startingOffsets' cannot be 'latest' for batch queries.")
    if isinstance(starting, SpecificOffsets) and LATEST in starting.offsets.values():
        raise InvalidOptionError(
            "Option 'startingOffsets' cannot use -1 (latest) for batch queries.")
    if isinstance(ending, EarliestOffsets):
        raise InvalidOptionError("Option 'endingOffsets' cannot be 'earliest' for batch queries.")
    if isinstance(ending, SpecificOffsets) and EARLIEST in ending.offsets.values():
        raise InvalidOptionError(
            "Option 'endingOffsets' cannot use -2 (earliest) for batch queries.")


def _timestamp(text: str, name: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidOptionError(
            f"Option '{name}' must be epoch milliseconds, got: {text}") from None
    if value < 0:
        raise InvalidOptionError(f"Option '{name}' must not be negative, got: {text}")
    return value


def _boolean(lowered: Mapping[str, str], key: str, *, default: bool) -> bool:
    text = lowered.get(key)
    if text is None:
        return default
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    names = {"failondataloss": "failOnDataLoss", "includeheaders": "includeHeaders",
             "exactlyonce": "exactlyOnce"}
    raise InvalidOptionError(f"Option '{names.get(key, key)}' must be true or false, got: {text}")


def _positive(lowered: Mapping[str, str], key: str) -> int | None:
    text = lowered.get(key)
    if text is None:
        return None
    names = {"maxoffsetspertrigger": "maxOffsetsPerTrigger", "minpartitions": "minPartitions",
             "minoffsetspertrigger": "minOffsetsPerTrigger",
             "maxrecordsperpartition": "maxRecordsPerPartition",
             "kafkaconsumer.polltimeoutms": "kafkaConsumer.pollTimeoutMs"}
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise InvalidOptionError(
            f"Option '{names.get(key, key)}' must be a positive integer, got: {text}")
    return value


_DURATION_UNITS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000,
                   "h": 3_600_000, "d": 86_400_000}


def _duration_ms(lowered: Mapping[str, str], key: str, *, default: int) -> int:
    """A Spark time string ("15m", "10s", "500ms", "2h"; a bare number is milliseconds)."""
    text = lowered.get(key)
    if text is None:
        return default
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if match is None or match.group(2) not in ("", *_DURATION_UNITS):
        names = {"maxtriggerdelay": "maxTriggerDelay"}
        raise InvalidOptionError(
            f"Option '{names.get(key, key)}' must be a duration such as 15m, 30s or 500ms, "
            f"got: {text}")
    return int(int(match.group(1)) * _DURATION_UNITS.get(match.group(2), 1))
