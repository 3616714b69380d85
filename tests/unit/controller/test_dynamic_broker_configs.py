"""Dynamic broker configs as Kafka defines them: which keys may change at run time, their
synonyms and defaults, how layers overlay, and what DescribeConfigs reports for them."""

from __future__ import annotations

import pytest

from pykraft.broker.admin_apis import _broker_keys_refusal, _synonyms
from pykraft.controller.configs import (
    DYNAMIC_UPDATABLE_BROKER_KEYS,
    broker_config_synonyms,
    broker_default_values,
    effective_server_configs,
)

BROKER, TOPIC = 4, 2
DYNAMIC, DEFAULT_DYNAMIC, STATIC, DEFAULT = 2, 3, 4, 5


def test_kafkas_dynamic_keys_and_read_only_ones() -> None:
    for key in ("log.retention.ms", "log.segment.bytes", "message.max.bytes",
                "num.io.threads", "log.cleaner.threads", "max.connections",
                "listeners", "ssl.keystore.location", "leader.replication.throttled.rate"):
        assert key in DYNAMIC_UPDATABLE_BROKER_KEYS, key
    for key in ("log.dirs", "node.id", "process.roles", "log.retention.hours",
                "log.message.format.version", "controller.quorum.voters", "num.partitions"):
        assert key not in DYNAMIC_UPDATABLE_BROKER_KEYS, key


@pytest.mark.parametrize(("keys", "message"), [
    (["log.dirs"], "Cannot update these configs dynamically: Set(log.dirs)"),
    (["node.id", "log.dirs", "num.io.threads"],
     "Cannot update these configs dynamically: Set(log.dirs, node.id)"),
    (["ssl.truststore.location"], "These security configs can be dynamically updated only "
     "per-listener using the listener prefix: Set(ssl.truststore.location)"),
    (["num.io.threads", "my.plugin.key", "listener.name.external.ssl.keystore.location"],
     None),
])
def test_read_only_broker_keys_are_refused_at_the_edge(keys: list[str],
                                                      message: str | None) -> None:
    assert _broker_keys_refusal(BROKER, keys) == message
    assert _broker_keys_refusal(TOPIC, keys) is None  # topic keys are checked elsewhere


def test_synonyms_defaults_and_overlay() -> None:
    assert broker_config_synonyms("log.retention.hours") == \
        ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
    assert broker_config_synonyms("log.flush.interval.ms") == \
        ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    assert broker_config_synonyms("num.io.threads") == ["num.io.threads"]
    defaults = broker_default_values()
    assert defaults["log.retention.hours"] == "168" and "log.retention.ms" not in defaults
    assert defaults["log.roll.hours"] == "168" and defaults["log.segment.bytes"] == "1073741824"
    assert effective_server_configs({"a": "static", "b": "static"}, {"a": "cluster", "c": "x"},
                                    {"a": "broker"}) == {"a": "broker", "b": "static", "c": "x"}


def test_described_synonyms_follow_kafkas_order_and_quirk() -> None:
    """Layer by layer, from the first entry that is the key itself: an unset finer key
    names no coarser synonym (Kafka's ConfigHelper)."""
    layers = [({"log.retention.ms": "1"}, DYNAMIC), ({"log.retention.hours": "2"}, STATIC),
              ({"log.retention.hours": "168"}, DEFAULT)]
    assert _synonyms("log.retention.ms", layers) == [
        ("log.retention.ms", "1", DYNAMIC), ("log.retention.hours", "2", STATIC),
        ("log.retention.hours", "168", DEFAULT)]
    assert _synonyms("log.retention.hours", layers) == [
        ("log.retention.hours", "2", STATIC), ("log.retention.hours", "168", DEFAULT)]
    assert _synonyms("log.retention.ms", layers[1:]) == []
