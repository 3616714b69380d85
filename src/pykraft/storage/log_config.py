"""Topic-level configuration: every key Kafka defines for a topic, as data.

Each topic config has a type, a default, a validator and, for most, server ("broker")
synonyms: `retention.ms` falls back to `log.retention.ms`, then `log.retention.minutes`, then
`log.retention.hours` (converted to milliseconds), then to the topic default. The effective
value of a key for one topic is therefore, first to last:

    topic override  >  first server synonym that is set  >  the topic config's own default

`server_default` resolves the last two and says which one won (the `ConfigSource` values are
DescribeConfigs' wire values), and `LogConfig.from_configs` resolves all three into typed
fields. Values are strings everywhere outside `LogConfig`, as they are in metadata records and
on the wire; parsing follows Kafka's ConfigDef (trimmed input, Java integer ranges, booleans
case-insensitive, lists comma-separated).

The key set follows Kafka 4.x. `message.downconversion.enable` is accepted and ignored, as
in Kafka 4.x. Tiered storage is not supported: `remote.storage.enable=true` is refused with
the message Kafka gives when the broker has tiered storage off.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Final, Literal, Protocol

from pykraft.errors import InvalidConfig

__all__ = [
    "ConfigDef",
    "ConfigSource",
    "ConfigType",
    "LogConfig",
    "ServerSynonym",
    "TOPIC_CONFIGS",
    "parse_value",
    "server_default",
    "validate_topic_config",
    "validate_topic_configs",
]

ConfigType = Literal["long", "int", "short", "double", "boolean", "string", "list", "password"]
Value = int | float | bool | str | tuple[str, ...]

LONG_MAX: Final = (1 << 63) - 1
_RANGES: Final = {"long": 1 << 63, "int": 1 << 31, "short": 1 << 15}
_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_DOUBLE: Final = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_HOURS_MS: Final = 3_600_000
_MINUTES_MS: Final = 60_000


class ConfigSource(IntEnum):
    """Where an effective value came from (DescribeConfigs `config_source` values)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


# DescribeConfigs `config_type` values (KIP-569) for each of our types.
_DESCRIBE_TYPE: Final[Mapping[str, int]] = {
    "boolean": 1,
    "string": 2,
    "int": 3,
    "short": 4,
    "long": 5,
    "double": 6,
    "list": 7,
    "password": 9,
}


class Validator(Protocol):
    def check(self, name: str, value: Value) -> None: ...


@dataclass(frozen=True, slots=True)
class Range:
    """Numbers in [minimum, maximum]; either bound may be open (None)."""

    minimum: float | None = None
    maximum: float | None = None

    def check(self, name: str, value: Value) -> None:
        assert isinstance(value, int | float)
        if self.minimum is not None and value < self.minimum:
            raise _invalid(name, value, f"Value must be at least {_number(self.minimum)}")
        if self.maximum is not None and value > self.maximum:
            raise _invalid(name, value, f"Value must be no more than {_number(self.maximum)}")

    def __str__(self) -> str:
        low = "..." if self.minimum is None else _number(self.minimum)
        high = "..." if self.maximum is None else _number(self.maximum)
        return f"[{low},...,{high}]" if self.maximum is not None else f"[{low},...]"


@dataclass(frozen=True, slots=True)
class OneOf:
    """A string among `allowed` (case-sensitive, as Kafka's ValidString)."""

    allowed: tuple[str, ...]

    def check(self, name: str, value: Value) -> None:
        if value not in self.allowed:
            raise _invalid(name, value, f"String must be one of: {', '.join(self.allowed)}")

    def __str__(self) -> str:
        return "[" + ", ".join(self.allowed) + "]"


@dataclass(frozen=True, slots=True)
class EachOf:
    """A list whose every item is among `allowed` (an empty list is accepted)."""

    allowed: tuple[str, ...]

    def check(self, name: str, value: Value) -> None:
        assert isinstance(value, tuple)
        for item in value:
            if item not in self.allowed:
                message = f"String must be one of: {', '.join(self.allowed)}"
                raise _invalid(name, ",".join(value), message)

    def __str__(self) -> str:
        return "[" + ", ".join(self.allowed) + "]"


@dataclass(frozen=True, slots=True)
class LevelRange:
    """A compression level in [minimum, maximum], or the codec's `default_level` marker."""

    minimum: int
    maximum: int
    default_level: int | None = None

    def check(self, name: str, value: Value) -> None:
        if value == self.default_level:
            return
        Range(self.minimum, self.maximum).check(name, value)

    def __str__(self) -> str:
        extra = "" if self.default_level is None else f" or {self.default_level}"
        return f"[{self.minimum},...,{self.maximum}]{extra}"


@dataclass(frozen=True, slots=True)
class ThrottledReplicas:
    """`*`, or a list of `partition:broker` pairs of non-negative integers."""

    def check(self, name: str, value: Value) -> None:
        assert isinstance(value, tuple)
        if value == ("*",) or not value:
            return
        for item in value:
            partition, sep, broker = item.partition(":")
            if not (sep and partition.strip().isdigit() and broker.strip().isdigit()):
                message = (
                    "must be the literal '*' or a list of replicas in the format "
                    "[PartitionId]:[BrokerId]"
                )
                raise _invalid(name, ",".join(value), message)

    def __str__(self) -> str:
        return "[partitionId]:[brokerId],[partitionId]:[brokerId],..."


@dataclass(frozen=True, slots=True)
class RemoteStorageOff:
    """Tiered storage is not built: only `false` is accepted."""

    def check(self, name: str, value: Value) -> None:
        if value is True:
            message = (
                "Tiered Storage functionality is disabled in the broker. "
                "Topic cannot be configured with remote log storage."
            )
            raise _invalid(name, "true", message)

    def __str__(self) -> str:
        return "[false]"


@dataclass(frozen=True, slots=True)
class ServerSynonym:
    """A server key a topic config inherits from; its value times `scale` is the topic value."""

    name: str
    scale: int = 1


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: str | None
    synonyms: tuple[ServerSynonym, ...]  # in precedence order
    validator: Validator | None
    documentation: str
    internal: bool = False  # accepted, but not listed by DescribeConfigs

    @property
    def server_key(self) -> str | None:
        """The highest-precedence server synonym (Kafka's "Server Default Property")."""
        return self.synonyms[0].name if self.synonyms else None

    @property
    def describe_type(self) -> int:
        return _DESCRIBE_TYPE[self.type]

    @property
    def valid_values(self) -> str:
        return "" if self.validator is None else str(self.validator)

    def parse(self, value: str, *, key: str | None = None) -> Value:
        """Parse and validate `value`; errors name `key` (default: this config's name)."""
        parsed = parse_value(key or self.name, self.type, value)
        if self.validator is not None:
            self.validator.check(key or self.name, parsed)
        return parsed


def parse_value(name: str, type_: ConfigType, value: str) -> Value:
    """Parse a config string as Kafka's ConfigDef does; InvalidConfig names `name`."""
    text = value.strip()
    if type_ in _RANGES:
        if not _INTEGER.fullmatch(text):
            raise _invalid(name, value, f"Not a number of type {type_.upper()}")
        number = int(text)
        bound = _RANGES[type_]
        if not -bound <= number < bound:
            raise _invalid(name, value, f"Not a number of type {type_.upper()}")
        return number
    if type_ == "double":
        if not _DOUBLE.fullmatch(text) or not math.isfinite(float(text)):
            raise _invalid(name, value, "Not a number of type DOUBLE")
        return float(text)
    if type_ == "boolean":
        if text.lower() not in ("true", "false"):
            raise _invalid(name, value, "Expected value to be either true or false")
        return text.lower() == "true"
    if type_ == "list":
        return tuple(item.strip() for item in text.split(",")) if text else ()
    return text


def _invalid(name: str, value: object, message: str) -> InvalidConfig:
    return InvalidConfig(f"Invalid value {value} for configuration {name}: {message}")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _log(*names: str) -> tuple[ServerSynonym, ...]:
    return tuple(ServerSynonym(name) for name in names)


_COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_MS_SYNONYMS_RETENTION: Final = (
    ServerSynonym("log.retention.ms"),
    ServerSynonym("log.retention.minutes", _MINUTES_MS),
    ServerSynonym("log.retention.hours", _HOURS_MS),
)
_LONG_MAX_TEXT: Final = str(LONG_MAX)

_DEFINITIONS: Final = (
    ConfigDef(
        "cleanup.policy", "list", "delete", _log("log.cleanup.policy"),
        EachOf(("compact", "delete")),
        "How old segments are cleaned: 'delete' drops them once past retention, 'compact' "
        "keeps only the latest record per key; both may be given. An empty list keeps "
        "everything.",
    ),
    ConfigDef(
        "compression.type", "string", "producer", _log("compression.type"),
        OneOf(_COMPRESSION_TYPES),
        "The codec batches are stored with. 'producer' keeps whatever the producer used.",
    ),
    ConfigDef(
        "compression.gzip.level", "int", "-1", _log("compression.gzip.level"),
        LevelRange(1, 9, default_level=-1),
        "The gzip level used when compression.type is gzip (-1: the codec's default).",
    ),
    ConfigDef(
        "compression.lz4.level", "int", "9", _log("compression.lz4.level"), LevelRange(1, 17),
        "The lz4 level used when compression.type is lz4.",
    ),
    ConfigDef(
        "compression.zstd.level", "int", "3", _log("compression.zstd.level"),
        LevelRange(-131072, 22),
        "The zstd level used when compression.type is zstd.",
    ),
    ConfigDef(
        "delete.retention.ms", "long", "86400000", _log("log.cleaner.delete.retention.ms"),
        Range(0),
        "How long tombstones stay in a compacted topic, and so how long a consumer reading "
        "from the start has to finish before a deletion can vanish unseen.",
    ),
    ConfigDef(
        "file.delete.delay.ms", "long", "60000", _log("log.segment.delete.delay.ms"), Range(0),
        "How long a deleted segment's files linger (renamed .deleted) before removal.",
    ),
    ConfigDef(
        "flush.messages", "long", _LONG_MAX_TEXT, _log("log.flush.interval.messages"), Range(1),
        "Force an fsync after this many appended records; by default the OS decides and "
        "durability comes from replication.",
    ),
    ConfigDef(
        "flush.ms", "long", _LONG_MAX_TEXT,
        _log("log.flush.interval.ms", "log.flush.scheduler.interval.ms"), Range(0),
        "Force an fsync when data has waited this long since the last one.",
    ),
    ConfigDef(
        "follower.replication.throttled.replicas", "list", "", (), ThrottledReplicas(),
        "Replicas whose follower-side replication is throttled: '*' or partition:broker pairs.",
    ),
    ConfigDef(
        "index.interval.bytes", "int", "4096", _log("log.index.interval.bytes"), Range(0),
        "Bytes of log between two offset index entries: a denser index costs space and saves "
        "scanning on reads.",
    ),
    ConfigDef(
        "leader.replication.throttled.replicas", "list", "", (), ThrottledReplicas(),
        "Replicas whose leader-side replication is throttled: '*' or partition:broker pairs.",
    ),
    ConfigDef(
        "local.retention.bytes", "long", "-2", _log("log.local.retention.bytes"), Range(-2),
        "Tiered storage only: bytes kept locally (-2: same as retention.bytes).",
    ),
    ConfigDef(
        "local.retention.ms", "long", "-2", _log("log.local.retention.ms"), Range(-2),
        "Tiered storage only: time kept locally (-2: same as retention.ms).",
    ),
    ConfigDef(
        "max.compaction.lag.ms", "long", _LONG_MAX_TEXT,
        _log("log.cleaner.max.compaction.lag.ms"), Range(1),
        "The longest a record may stay uncompacted; also caps segment.ms on compacted topics.",
    ),
    ConfigDef(
        "max.message.bytes", "int", "1048588", _log("message.max.bytes"), Range(0),
        "The largest record batch (after compression) this topic accepts.",
    ),
    ConfigDef(
        "message.downconversion.enable", "boolean", "true",
        _log("log.message.downconversion.enable"), None,
        "Accepted for compatibility and ignored: old message formats are never served.",
    ),
    ConfigDef(
        "message.timestamp.after.max.ms", "long", _LONG_MAX_TEXT,
        _log("log.message.timestamp.after.max.ms"), Range(0),
        "With CreateTime, how far in the future (relative to the broker's clock) a batch "
        "timestamp may be before the batch is rejected.",
    ),
    ConfigDef(
        "message.timestamp.before.max.ms", "long", _LONG_MAX_TEXT,
        _log("log.message.timestamp.before.max.ms"), Range(0),
        "With CreateTime, how far in the past a batch timestamp may be before the batch is "
        "rejected.",
    ),
    ConfigDef(
        "message.timestamp.type", "string", "CreateTime", _log("log.message.timestamp.type"),
        OneOf(("CreateTime", "LogAppendTime")),
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches with the "
        "broker's clock on append.",
    ),
    ConfigDef(
        "min.cleanable.dirty.ratio", "double", "0.5", _log("log.cleaner.min.cleanable.ratio"),
        Range(0, 1),
        "Compaction starts when the uncompacted share of the log exceeds this ratio.",
    ),
    ConfigDef(
        "min.compaction.lag.ms", "long", "0", _log("log.cleaner.min.compaction.lag.ms"),
        Range(0),
        "The shortest time a record stays uncompacted.",
    ),
    ConfigDef(
        "min.insync.replicas", "int", "1", _log("min.insync.replicas"), Range(1),
        "With acks=all, the fewest in-sync replicas that must hold a write for it to succeed.",
    ),
    ConfigDef(
        "preallocate", "boolean", "false", _log("log.preallocate"), None,
        "Preallocate segment files on creation (accepted; pykraft does not preallocate).",
    ),
    ConfigDef(
        "remote.log.copy.disable", "boolean", "false", (), None,
        "Tiered storage only: stop copying segments to remote storage.",
    ),
    ConfigDef(
        "remote.log.delete.on.disable", "boolean", "false", (), None,
        "Tiered storage only: delete remote data when tiering is turned off.",
    ),
    ConfigDef(
        "remote.storage.enable", "boolean", "false", (), RemoteStorageOff(),
        "Tiered storage for this topic; not supported by pykraft, so only false is valid.",
    ),
    ConfigDef(
        "retention.bytes", "long", "-1", _log("log.retention.bytes"), None,
        "Delete the oldest segments while the partition is larger than this (-1: no limit).",
    ),
    ConfigDef(
        "retention.ms", "long", "604800000", _MS_SYNONYMS_RETENTION, Range(-1),
        "Delete a segment once its newest record is older than this (-1: no limit).",
    ),
    ConfigDef(
        "segment.bytes", "int", str(1 << 30), _log("log.segment.bytes"), Range(1 << 20),
        "Roll to a new segment file when the active one would grow past this size.",
    ),
    ConfigDef(
        "segment.index.bytes", "int", str(10 << 20), _log("log.index.size.max.bytes"), Range(4),
        "The largest an offset or time index file may grow; a full index rolls the segment.",
    ),
    ConfigDef(
        "segment.jitter.ms", "long", "0",
        (ServerSynonym("log.roll.jitter.ms"), ServerSynonym("log.roll.jitter.hours", _HOURS_MS)),
        Range(0),
        "At most this much is taken off segment.ms per segment, so partitions created "
        "together do not all roll at once.",
    ),
    ConfigDef(
        "segment.ms", "long", "604800000",
        (ServerSynonym("log.roll.ms"), ServerSynonym("log.roll.hours", _HOURS_MS)), Range(1),
        "Roll to a new segment when the active one's first batch is this old, so retention "
        "and compaction can act on it.",
    ),
    ConfigDef(
        "unclean.leader.election.enable", "boolean", "false",
        _log("unclean.leader.election.enable"), None,
        "Allow an out-of-sync replica to become leader as a last resort, at the cost of "
        "losing acknowledged data.",
    ),
    ConfigDef(
        "internal.segment.bytes", "int", None, (), Range(1),
        "Testing only: overrides segment.bytes without its 1 MiB minimum.",
        internal=True,
    ),
)

TOPIC_CONFIGS: Final[Mapping[str, ConfigDef]] = {d.name: d for d in _DEFINITIONS}


def validate_topic_config(name: str, value: str | None) -> None:
    """Check one topic config; `None` (reset to default) is valid for every known key."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise InvalidConfig(f"Unknown topic config name: {name}")
    if value is not None:
        definition.parse(value)


def validate_topic_configs(
    overrides: Mapping[str, str | None], server_configs: Mapping[str, str] | None = None
) -> LogConfig:
    """Check a topic's whole set of overrides, cross-key rules included; return the result."""
    for name, value in overrides.items():
        validate_topic_config(name, value)
    present = {name: value for name, value in overrides.items() if value is not None}
    return LogConfig.from_configs(present, server_configs or {})


def server_default(
    name: str, server_configs: Mapping[str, str]
) -> tuple[str | None, ConfigSource]:
    """The value a topic without an override gets, and whether the server or Kafka set it."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise InvalidConfig(f"Unknown topic config name: {name}")
    for synonym in definition.synonyms:
        raw = server_configs.get(synonym.name)
        if raw is None:
            continue
        if synonym.scale == 1:
            definition.parse(raw, key=synonym.name)
            return raw.strip(), ConfigSource.STATIC_BROKER_CONFIG
        number = parse_value(synonym.name, "long", raw)
        assert isinstance(number, int)
        millis = number * synonym.scale
        if name == "retention.ms" and millis < 0:
            millis = -1  # any negative server retention means "forever", as in Kafka
        definition.parse(str(millis), key=synonym.name)
        return str(millis), ConfigSource.STATIC_BROKER_CONFIG
    return definition.default, ConfigSource.DEFAULT_CONFIG


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The typed, effective topic configuration one partition log runs with."""

    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    delete_retention_ms: int = 86_400_000
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    follower_replication_throttled_replicas: tuple[str, ...] = ()
    index_interval_bytes: int = 4096
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    local_retention_bytes: int = -2
    local_retention_ms: int = -2
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_downconversion_enable: bool = True
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_type: str = "CreateTime"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    preallocate: bool = False
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    remote_storage_enable: bool = False
    retention_bytes: int = -1
    retention_ms: int = 604_800_000
    segment_bytes: int = 1 << 30
    segment_index_bytes: int = 10 << 20
    segment_jitter_ms: int = 0
    segment_ms: int = 604_800_000
    unclean_leader_election_enable: bool = False
    overridden: frozenset[str] = frozenset()  # keys the topic set itself

    @classmethod
    def from_configs(
        cls, topic_overrides: Mapping[str, str], server_configs: Mapping[str, str]
    ) -> LogConfig:
        """Resolve every key (override > server synonym > default); unknown keys are ignored."""
        values: dict[str, Value] = {}
        for name, definition in TOPIC_CONFIGS.items():
            raw = topic_overrides.get(name)
            if raw is not None:
                values[name] = definition.parse(raw)
                continue
            default, _ = server_default(name, server_configs)
            if default is not None:
                values[name] = definition.parse(default)
        internal_segment_bytes = values.pop("internal.segment.bytes", None)
        if internal_segment_bytes is not None:
            values["segment.bytes"] = internal_segment_bytes
        overridden = frozenset(n for n in topic_overrides if n in TOPIC_CONFIGS)
        config = cls(
            **{name.replace(".", "_"): value for name, value in values.items()},  # type: ignore[arg-type]
            overridden=overridden,
        )
        config._check_cross_key_rules()
        return config

    def _check_cross_key_rules(self) -> None:
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfig(
                f"conflict topic config setting min.compaction.lag.ms "
                f"({self.min_compaction_lag_ms}) > max.compaction.lag.ms "
                f"({self.max_compaction_lag_ms})"
            )

    @property
    def compact(self) -> bool:
        return "compact" in (policy.lower() for policy in self.cleanup_policy)

    @property
    def delete(self) -> bool:
        return "delete" in (policy.lower() for policy in self.cleanup_policy)

    @property
    def is_log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def max_segment_ms(self) -> int:
        """segment.ms, capped by max.compaction.lag.ms on compacted topics."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    def as_strings(self) -> dict[str, str]:
        """Every non-internal key's effective value, in Kafka's string form."""
        result: dict[str, str] = {}
        for field in fields(self):
            name = field.name.replace("_", ".")
            if name not in TOPIC_CONFIGS:
                continue
            value = getattr(self, field.name)
            if isinstance(value, bool):
                result[name] = "true" if value else "false"
            elif isinstance(value, tuple):
                result[name] = ",".join(value)
            else:
                result[name] = str(value)
        return result
