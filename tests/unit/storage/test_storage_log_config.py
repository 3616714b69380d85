"""Topic configs: Kafka's keys, defaults, validation and server-default resolution."""

from __future__ import annotations

import dataclasses

import pytest

from pykraft.errors import InvalidConfig
from pykraft.storage.log_config import (
    TOPIC_CONFIGS,
    ConfigSource,
    LogConfig,
    server_default,
    validate_topic_config,
    validate_topic_configs,
)


def test_every_default_is_valid_and_matches_the_dataclass_defaults() -> None:
    """from_configs with nothing set equals LogConfig(): the two default tables agree."""
    for definition in TOPIC_CONFIGS.values():
        if definition.default is not None:
            definition.parse(definition.default)
    assert LogConfig.from_configs({}, {}) == LogConfig()


def test_every_public_key_has_a_typed_field_and_round_trips_through_strings() -> None:
    """as_strings() covers every non-internal key and parses back to the same config."""
    config = LogConfig()
    names = {name for name, d in TOPIC_CONFIGS.items() if not d.internal}
    assert set(config.as_strings()) == names
    custom = LogConfig.from_configs(
        {"cleanup.policy": "compact,delete", "retention.ms": "-1", "segment.bytes": "2000000",
         "min.cleanable.dirty.ratio": "0.25", "preallocate": "TRUE"},
        {},
    )
    assert LogConfig.from_configs(custom.as_strings(), {}) == dataclasses.replace(
        custom, overridden=frozenset(names)
    )
    assert custom.compact and custom.delete and custom.preallocate


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("retention.ms", "-2"),
        ("retention.ms", "abc"),
        ("retention.ms", "1_000"),
        ("segment.bytes", "1048575"),
        ("segment.bytes", "2147483648"),
        ("cleanup.policy", "compact,forever"),
        ("compression.type", "brotli"),
        ("compression.type", "GZIP"),
        ("message.timestamp.type", "createtime"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "nan"),
        ("unclean.leader.election.enable", "yes"),
        ("leader.replication.throttled.replicas", "1-2"),
        ("compression.zstd.level", "23"),
        ("compression.gzip.level", "0"),
        ("remote.storage.enable", "true"),
        ("min.insync.replicas", "0"),
        ("flush.messages", "0"),
    ],
)
def test_invalid_values_raise_invalid_config_naming_the_key(name: str, value: str) -> None:
    """Every validator refuses what Kafka refuses, and the message names key and value."""
    with pytest.raises(InvalidConfig) as raised:
        validate_topic_config(name, value)
    assert name in str(raised.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("retention.ms", "-1"),
        ("retention.ms", " 86400000 "),
        ("segment.bytes", "1048576"),
        ("cleanup.policy", ""),
        ("cleanup.policy", "delete, compact"),
        ("leader.replication.throttled.replicas", "*"),
        ("follower.replication.throttled.replicas", "0:1,1:2"),
        ("compression.gzip.level", "-1"),
        ("compression.zstd.level", "-5"),
        ("unclean.leader.election.enable", "False"),
        ("retention.bytes", "-1"),
        ("message.downconversion.enable", "false"),
        ("retention.ms", None),
    ],
)
def test_valid_values_pass(name: str, value: str | None) -> None:
    """Values Kafka accepts (trimmed numbers, empty lists, '*', None = reset) are accepted."""
    validate_topic_config(name, value)


def test_unknown_key_is_invalid_config() -> None:
    """An unknown name is refused with Kafka's message."""
    with pytest.raises(InvalidConfig, match="Unknown topic config name: retention.mss"):
        validate_topic_config("retention.mss", "1")


def test_retention_precedence_ms_over_minutes_over_hours() -> None:
    """log.retention.ms wins over minutes, minutes over hours; units become milliseconds."""
    assert server_default("retention.ms", {}) == ("604800000", ConfigSource.DEFAULT_CONFIG)
    hours = {"log.retention.hours": "2"}
    assert server_default("retention.ms", hours) == ("7200000", ConfigSource.STATIC_BROKER_CONFIG)
    minutes = {**hours, "log.retention.minutes": "3"}
    assert server_default("retention.ms", minutes)[0] == "180000"
    millis = {**minutes, "log.retention.ms": "1234"}
    assert server_default("retention.ms", millis)[0] == "1234"
    assert server_default("retention.ms", {"log.retention.minutes": "-1"})[0] == "-1"


def test_other_server_synonyms() -> None:
    """segment.ms from log.roll.hours, flush.ms from the scheduler interval, renamed keys."""
    assert server_default("segment.ms", {"log.roll.hours": "1"})[0] == "3600000"
    assert server_default("segment.ms", {"log.roll.hours": "1", "log.roll.ms": "5"})[0] == "5"
    assert server_default("flush.ms", {"log.flush.scheduler.interval.ms": "99"})[0] == "99"
    assert server_default("max.message.bytes", {"message.max.bytes": "500"})[0] == "500"
    assert server_default("segment.index.bytes", {"log.index.size.max.bytes": "64"})[0] == "64"
    assert TOPIC_CONFIGS["delete.retention.ms"].server_key == "log.cleaner.delete.retention.ms"
    assert TOPIC_CONFIGS["file.delete.delay.ms"].server_key == "log.segment.delete.delay.ms"
    assert TOPIC_CONFIGS["min.cleanable.dirty.ratio"].server_key == (
        "log.cleaner.min.cleanable.ratio"
    )


def test_invalid_server_value_names_the_server_key() -> None:
    """A bad server property is reported under its own name."""
    with pytest.raises(InvalidConfig, match="log.segment.bytes"):
        server_default("segment.bytes", {"log.segment.bytes": "12"})


def test_from_configs_layers_override_server_default() -> None:
    """Topic override > server synonym > default, and `overridden` lists the topic's keys."""
    config = LogConfig.from_configs(
        {"retention.ms": "1000", "no.such.key": "ignored"},
        {"log.retention.hours": "1", "log.segment.bytes": "2097152", "min.insync.replicas": "2"},
    )
    assert config.retention_ms == 1000
    assert config.segment_bytes == 2_097_152
    assert config.min_insync_replicas == 2
    assert config.overridden == frozenset({"retention.ms"})


def test_cross_key_rule_and_internal_segment_bytes() -> None:
    """min.compaction.lag.ms may not exceed max; internal.segment.bytes bypasses the 1 MiB floor."""
    with pytest.raises(InvalidConfig, match="min.compaction.lag.ms"):
        validate_topic_configs({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert LogConfig.from_configs({"internal.segment.bytes": "100"}, {}).segment_bytes == 100


def test_max_segment_ms_is_capped_by_compaction_lag_on_compacted_topics() -> None:
    """A compacted topic rolls by max.compaction.lag.ms when that is shorter than segment.ms."""
    config = LogConfig.from_configs(
        {"cleanup.policy": "compact", "max.compaction.lag.ms": "1000"}, {}
    )
    assert config.max_segment_ms == 1000
    assert dataclasses.replace(config, cleanup_policy=("delete",)).max_segment_ms == (
        config.segment_ms
    )
