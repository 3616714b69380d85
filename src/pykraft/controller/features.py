"""Finalized features: `metadata.version` levels and the bootstrap records.

`metadata.version` is a feature level (an int16) that says which metadata records, and
which record versions, the cluster writes. The levels are Kafka's MetadataVersion feature
levels; the ones whose behaviour this controller depends on are named here.

Bootstrap level: 3.9-IV0 (21), the metadata.version of a freshly formatted Kafka 3.9 cluster.
Every record the controller writes at that level has a schema we implement: PartitionRecord
and PartitionChangeRecord v1 (with per-replica `directories`, since 3.7-IV2),
RegisterBrokerRecord v3 (with `log_dirs`), BrokerRegistrationChangeRecord for fencing,
unfencing and controlled shutdown. Level 22 (4.0-IV0, Kafka 4.0's bootstrap level) writes the
same records and is accepted too; from 23 (4.0-IV1) on, Kafka writes eligible leader replicas
(KIP-966), which we do not, so those levels are refused.
"""

from __future__ import annotations

from typing import Final

from pykraft.errors import UnsupportedVersion
from pykraft.metadata.records import (
    BrokerRegistrationChangeRecord,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
)

__all__ = [
    "METADATA_VERSION_FEATURE",
    "MV_3_3_IV0",
    "MV_3_3_IV2",
    "MV_3_3_IV3",
    "MV_3_6_IV0",
    "MV_3_7_IV2",
    "MV_3_9_IV0",
    "MV_4_0_IV0",
    "MINIMUM_KRAFT_METADATA_VERSION",
    "MINIMUM_BOOTSTRAP_METADATA_VERSION",
    "LATEST_METADATA_VERSION",
    "BOOTSTRAP_METADATA_VERSION",
    "bootstrap_records",
    "check_metadata_version",
    "uses_broker_registration_change",
    "has_controlled_shutdown_state",
    "has_directory_assignment",
    "bumps_leader_epoch_on_isr_shrink",
    "record_version",
]

METADATA_VERSION_FEATURE: Final = "metadata.version"

MV_3_0_IV1: Final = 1  # the first KRaft level
MV_3_3_IV0: Final = 4  # the first level that can be stored in the log (bootstrap minimum)
MV_3_3_IV2: Final = 6  # BrokerRegistrationChangeRecord replaces Fence/UnfenceBrokerRecord
MV_3_3_IV3: Final = 7  # brokers have an in-controlled-shutdown state in the log
MV_3_4_IV0: Final = 8  # RegisterBrokerRecord v2 (is_migrating_zk_broker)
MV_3_6_IV0: Final = 12  # ISR shrinks no longer bump the leader epoch (KAFKA-15021)
MV_3_7_IV2: Final = 17  # replicas are assigned to log directories (KIP-858)
MV_3_9_IV0: Final = 21
MV_4_0_IV0: Final = 22

MINIMUM_KRAFT_METADATA_VERSION: Final = MV_3_0_IV1
MINIMUM_BOOTSTRAP_METADATA_VERSION: Final = MV_3_3_IV0
LATEST_METADATA_VERSION: Final = MV_4_0_IV0
BOOTSTRAP_METADATA_VERSION: Final = MV_3_9_IV0


def check_metadata_version(level: int) -> None:
    """Raise `UnsupportedVersion` unless this controller can write records at `level`."""
    if not MINIMUM_BOOTSTRAP_METADATA_VERSION <= level <= LATEST_METADATA_VERSION:
        raise UnsupportedVersion(
            f"metadata.version {level} is not supported: this controller writes levels "
            f"{MINIMUM_BOOTSTRAP_METADATA_VERSION} to {LATEST_METADATA_VERSION}"
        )


def bootstrap_records(
    metadata_version: int = BOOTSTRAP_METADATA_VERSION,
) -> tuple[FeatureLevelRecord, ...]:
    """The records a freshly formatted cluster's metadata log starts with."""
    check_metadata_version(metadata_version)
    return (FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=metadata_version),)


def uses_broker_registration_change(level: int) -> bool:
    return level >= MV_3_3_IV2


def has_controlled_shutdown_state(level: int) -> bool:
    return level >= MV_3_3_IV3


def has_directory_assignment(level: int) -> bool:
    return level >= MV_3_7_IV2


def bumps_leader_epoch_on_isr_shrink(level: int) -> bool:
    return level < MV_3_6_IV0


def record_version(record: MetadataRecord, metadata_version: int) -> int:
    """The version to encode `record` at under `metadata_version`, as Kafka chooses it:
    a reader at that level must understand every record the controller writes."""
    match record:
        case PartitionRecord() | PartitionChangeRecord():
            return 1 if has_directory_assignment(metadata_version) else 0
        case RegisterBrokerRecord():
            if has_directory_assignment(metadata_version):
                return 3
            if metadata_version >= MV_3_4_IV0:
                return 2
            return 1 if has_controlled_shutdown_state(metadata_version) else 0
        case BrokerRegistrationChangeRecord():
            if record.log_dirs:
                return 2
            return 1 if record.in_controlled_shutdown else 0
        case _:
            return type(record).LATEST_VERSION
