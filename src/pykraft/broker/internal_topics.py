"""How the internal topics are made, whichever path makes them.

`__consumer_offsets` and `__transaction_state` come to exist in three ways, as in Kafka: the
first FindCoordinator for a group or a transactional id, a client's Metadata request that
auto-creates them, and an administrator's CreateTopics. Each way must give them the settings
their coordinators rely on, as Kafka's AutoTopicCreationManager does: a coordinator finds the
partition of a group by hashing its id over `offsets.topic.num.partitions`, so a topic made
with `num.partitions` partitions leaves the groups that hash past them with no coordinator
(silently), and one made without compaction grows without end.

An administrator may choose the replication factor and extra configs, as in Kafka; a
partition count other than the configured one, or a cleanup policy other than compact, is
refused with the reason (a deviation: Kafka creates what it is asked and the coordinator then
fails for some groups, see docs/deviations.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kio.schema.errors import ErrorCode

from pykraft.controller.requests import CreatableTopic
from pykraft.topic_names import CONSUMER_OFFSETS_TOPIC, RESERVED_TOPICS, TRANSACTION_STATE_TOPIC

__all__ = [
    "COORDINATED_TOPICS",
    "OFFSETS_TOPIC_CONFIGS",
    "TRANSACTION_STATE_CONFIGS",
    "UNCREATABLE_TOPICS",
    "InternalTopicRefused",
    "internal_topic",
]

OFFSETS_TOPIC_CONFIGS: Final = {"cleanup.policy": "compact", "compression.type": "producer"}
TRANSACTION_STATE_CONFIGS: Final = {"cleanup.policy": "compact",
                                    "compression.type": "uncompressed",
                                    "unclean.leader.election.enable": "false"}


@dataclass(frozen=True, slots=True)
class _Settings:
    partitions_key: str
    replication_key: str
    segment_bytes_key: str
    configs: Mapping[str, str]


_SETTINGS: Final[Mapping[str, _Settings]] = {
    CONSUMER_OFFSETS_TOPIC: _Settings("offsets.topic.num.partitions",
                                      "offsets.topic.replication.factor",
                                      "offsets.topic.segment.bytes", OFFSETS_TOPIC_CONFIGS),
    TRANSACTION_STATE_TOPIC: _Settings("transaction.state.log.num.partitions",
                                       "transaction.state.log.replication.factor",
                                       "transaction.state.log.segment.bytes",
                                       TRANSACTION_STATE_CONFIGS),
}
COORDINATED_TOPICS: Final = frozenset(_SETTINGS)
# no coordinator of ours uses __share_group_state yet, and __cluster_metadata is no topic
UNCREATABLE_TOPICS: Final = RESERVED_TOPICS - COORDINATED_TOPICS
_DEFAULTS: Final = {"offsets.topic.num.partitions": "50", "offsets.topic.replication.factor": "3",
                    "offsets.topic.segment.bytes": "104857600",
                    "transaction.state.log.num.partitions": "50",
                    "transaction.state.log.replication.factor": "3",
                    "transaction.state.log.segment.bytes": "104857600",
                    "transaction.state.log.min.isr": "2"}


class InternalTopicRefused(Exception):
    """An administrator asked for an internal topic its coordinator could not use."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _number(server_configs: Mapping[str, str], key: str) -> int:
    return int(server_configs.get(key, _DEFAULTS[key]))


def internal_topic(name: str, server_configs: Mapping[str, str], live_brokers: int,
                   requested: CreatableTopic | None = None) -> CreatableTopic:
    """The CreatableTopic that makes internal topic `name` usable by its coordinator.

    `requested` is an administrator's CreateTopics entry (None when a coordinator or a
    Metadata auto-creation asks). The replication factor defaults to the configured one,
    capped by the live brokers (a deviation kept from the coordinators: Kafka refuses until
    enough brokers are up, and a one-broker cluster with the default 3 has no groups).
    Raises InternalTopicRefused for a request the coordinator could not use."""
    settings = _SETTINGS[name]
    partitions = _number(server_configs, settings.partitions_key)
    configs: dict[str, str | None] = {
        **settings.configs,
        "segment.bytes": str(_number(server_configs, settings.segment_bytes_key)),
    }
    replication = max(1, min(_number(server_configs, settings.replication_key),
                             max(1, live_brokers)))
    if name == TRANSACTION_STATE_TOPIC:
        # capped by the replication factor, as above: Kafka keeps 2
        configs["min.insync.replicas"] = str(
            min(_number(server_configs, "transaction.state.log.min.isr"), replication))
    if requested is None:
        return CreatableTopic(name=name, num_partitions=partitions,
                              replication_factor=replication, configs=configs)
    asked = requested.num_partitions
    if requested.assignments:
        asked = len(requested.assignments)
    if asked not in (-1, partitions):
        raise InternalTopicRefused(
            ErrorCode.invalid_partitions,
            f"{name} must have {settings.partitions_key}={partitions} partitions: its "
            f"coordinator hashes ids over that many (asked for {asked}).")
    policy = requested.configs.get("cleanup.policy")
    if policy is not None and policy != "compact":
        raise InternalTopicRefused(
            ErrorCode.invalid_config,
            f"{name} must have cleanup.policy=compact (asked for {policy}).")
    if requested.replication_factor != -1 or requested.assignments:
        replication = requested.replication_factor
        if name == TRANSACTION_STATE_TOPIC and replication > 0:
            configs["min.insync.replicas"] = str(
                min(_number(server_configs, "transaction.state.log.min.isr"), replication))
    return CreatableTopic(name=name, num_partitions=-1 if requested.assignments else partitions,
                          replication_factor=replication, assignments=requested.assignments,
                          configs={**configs, **requested.configs})
