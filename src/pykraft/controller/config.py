"""The quorum controller's own configuration, read from the node's server properties."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pykraft.controller.features import BOOTSTRAP_METADATA_VERSION
from pykraft.errors import InvalidConfig
from pykraft.metadata.records import MetadataRecord

__all__ = ["ControllerConfig"]


def _int(properties: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    text = properties.get(key)
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidConfig(f"Invalid value {text} for configuration {key}") from None
    if value < minimum:
        raise InvalidConfig(f"Invalid value {value} for configuration {key}: below {minimum}")
    return value


def _bool(properties: Mapping[str, str], key: str, default: bool) -> bool:
    text = properties.get(key)
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidConfig(f"Invalid value {text} for configuration {key}: expected a boolean")
    return lowered == "true"


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """What the controller's decisions depend on besides the metadata image.

    `server_configs` are the node's static properties: the source of topic config defaults
    (`log.retention.ms` for `retention.ms`, ...) reported as STATIC_BROKER_CONFIG.
    `controller_ids` are the quorum voters, which may carry BROKER config resources too.
    `cluster_id`, when set, must match the cluster id a registering broker sends.
    `bootstrap_metadata_version` is what an empty metadata log starts at: the level
    `storage format --release-version` wrote into bootstrap.checkpoint, as Kafka's
    BootstrapDirectory reads it (pykraft's default when the dir has no such file).
    """

    node_id: int
    cluster_id: str | None = None
    num_partitions: int = 1
    default_replication_factor: int = 1
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 2000
    delete_topic_enable: bool = True
    controller_ids: frozenset[int] = frozenset()
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    leader_imbalance_per_broker_percentage: int = 10
    unclean_leader_election_interval_ms: int = 300_000
    server_configs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    bootstrap_metadata_version: int = BOOTSTRAP_METADATA_VERSION
    # what bootstrap.checkpoint holds besides the level: `storage format --add-scram`'s
    # UserScramCredentialRecords, written after the metadata.version at bootstrap
    bootstrap_records: tuple[MetadataRecord, ...] = ()

    @classmethod
    def from_properties(
        cls,
        properties: Mapping[str, str],
        *,
        cluster_id: str | None = None,
        controller_ids: frozenset[int] = frozenset(),
        bootstrap_metadata_version: int = BOOTSTRAP_METADATA_VERSION,
    ) -> ControllerConfig:
        """Kafka's keys: node.id, num.partitions, default.replication.factor,
        broker.session.timeout.ms, delete.topic.enable, auto.leader.rebalance.enable,
        leader.imbalance.check.interval.seconds, leader.imbalance.per.broker.percentage,
        unclean.leader.election.interval.ms (internal in Kafka)."""
        return cls(
            node_id=_int(properties, "node.id", -1, -1),
            cluster_id=cluster_id,
            num_partitions=_int(properties, "num.partitions", 1, 1),
            default_replication_factor=_int(properties, "default.replication.factor", 1, 1),
            broker_session_timeout_ms=_int(properties, "broker.session.timeout.ms", 9000, 1),
            broker_heartbeat_interval_ms=_int(properties, "broker.heartbeat.interval.ms", 2000,
                                              1),
            delete_topic_enable=_bool(properties, "delete.topic.enable", True),
            auto_leader_rebalance_enable=_bool(properties, "auto.leader.rebalance.enable", True),
            leader_imbalance_check_interval_ms=1000
            * _int(properties, "leader.imbalance.check.interval.seconds", 300, 1),
            leader_imbalance_per_broker_percentage=_int(
                properties, "leader.imbalance.per.broker.percentage", 10, 0
            ),
            unclean_leader_election_interval_ms=_int(
                properties, "unclean.leader.election.interval.ms", 300_000, 1
            ),
            controller_ids=controller_ids,
            server_configs=MappingProxyType(dict(properties)),
            bootstrap_metadata_version=bootstrap_metadata_version,
        )
