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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from pykraft.errors import ErrorCode, UnsupportedVersion
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
    "UpgradeType",
    "FeatureUpdate",
    "UpdateFeaturesResult",
    "SUPPORTED_FEATURES",
    "api_versions_features",
    "metadata_version_changed",
    "metadata_version_name",
    "metadata_version_level",
    "update_features",
]

METADATA_VERSION_FEATURE: Final = "metadata.version"

MV_3_0_IV1: Final = 1  # the first KRaft level
MV_3_2_IV0: Final = 3
MV_3_3_IV0: Final = 4  # the first level that can be stored in the log (bootstrap minimum)
MV_3_3_IV2: Final = 6  # BrokerRegistrationChangeRecord replaces Fence/UnfenceBrokerRecord
MV_3_3_IV3: Final = 7  # brokers have an in-controlled-shutdown state in the log
MV_3_4_IV0: Final = 8  # RegisterBrokerRecord v2 (is_migrating_zk_broker)
MV_3_6_IV0: Final = 12  # ISR shrinks no longer bump the leader epoch (KAFKA-15021)
MV_3_7_IV2: Final = 17  # replicas are assigned to log directories (KIP-858)
MV_3_9_IV0: Final = 21
MV_4_0_IV0: Final = 22

# Kafka's MetadataVersion enum from 3.0-IV1 on: level -> (name, whether the metadata format
# changed at that level). A downgrade across a level that changed the metadata could lose
# information and is refused (MetadataVersion.checkIfMetadataChanged).
_METADATA_VERSIONS: Final[dict[int, tuple[str, bool]]] = {
    1: ("3.0-IV1", True), 2: ("3.1-IV0", False), 3: ("3.2-IV0", True), 4: ("3.3-IV0", False),
    5: ("3.3-IV1", True), 6: ("3.3-IV2", True), 7: ("3.3-IV3", True), 8: ("3.4-IV0", True),
    9: ("3.5-IV0", False), 10: ("3.5-IV1", False), 11: ("3.5-IV2", True),
    12: ("3.6-IV0", False), 13: ("3.6-IV1", True), 14: ("3.6-IV2", True),
    15: ("3.7-IV0", True), 16: ("3.7-IV1", False), 17: ("3.7-IV2", True),
    18: ("3.7-IV3", False), 19: ("3.7-IV4", False), 20: ("3.8-IV0", False),
    21: ("3.9-IV0", False), 22: ("4.0-IV0", False),
}

MINIMUM_KRAFT_METADATA_VERSION: Final = MV_3_0_IV1
MINIMUM_BOOTSTRAP_METADATA_VERSION: Final = MV_3_3_IV0
LATEST_METADATA_VERSION: Final = MV_4_0_IV0
BOOTSTRAP_METADATA_VERSION: Final = MV_3_9_IV0


# what every pykraft node supports (BrokerRegistration, ApiVersions, and the controller's
# own check of UpdateFeatures): feature -> (min, max). A feature not listed: 0 to 0 only.
SUPPORTED_FEATURES: Final[Mapping[str, tuple[int, int]]] = {
    METADATA_VERSION_FEATURE: (MV_3_0_IV1, MV_4_0_IV0),
}


def api_versions_features(
    metadata_version: int, finalized: Mapping[str, int], offset: int
) -> tuple[tuple[tuple[str, int, int], ...], tuple[tuple[str, int], ...], int]:
    """What ApiVersions v3+ reports (KIP-584): the supported features (name, min, max), the
    finalized ones (name, level) and their epoch -- in KRaft the offset of the image they
    come from, as Kafka's brokers report it. Nothing is finalized (epoch -1) before the
    bootstrap records set metadata.version."""
    supported = tuple((name, low, high) for name, (low, high) in SUPPORTED_FEATURES.items())
    if metadata_version <= 0:
        return supported, (), -1
    levels = ((METADATA_VERSION_FEATURE, metadata_version),
              *sorted((name, level) for name, level in finalized.items() if level > 0))
    return supported, levels, offset


def metadata_version_name(level: int) -> str:
    """Kafka's name of a metadata.version level ("3.9-IV0"), or the level itself."""
    known = _METADATA_VERSIONS.get(level)
    return known[0] if known is not None else str(level)


def metadata_version_level(text: str) -> int | None:
    """The level of a metadata.version given by name: "3.9-IV0" exactly, or a release
    ("3.7"), which means its latest level (Kafka's MetadataVersion.fromVersionString)."""
    wanted = text.strip().upper()
    exact = [level for level, (name, _) in _METADATA_VERSIONS.items() if name.upper() == wanted]
    if exact:
        return exact[0]
    of_release = [level for level, (name, _) in _METADATA_VERSIONS.items()
                  if name.split("-")[0] == wanted]
    return max(of_release) if of_release else None


def metadata_version_changed(source: int, target: int) -> bool:
    """Whether moving between the two levels crosses a change of the metadata format
    (Kafka's MetadataVersion.checkIfMetadataChanged): walking down from the higher level,
    a level that changed the metadata is met before the lower one is reached."""
    high, low = max(source, target), min(source, target)
    level = high
    while level != low and not _METADATA_VERSIONS.get(level, ("", True))[1]:
        level -= 1
    return level != low


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


# -- UpdateFeatures (KIP-584, KIP-778) ----------------------------------------------------


class UpgradeType(IntEnum):
    """UpdateFeatures' UpgradeType (v1+; v0's AllowDowngrade true means SAFE_DOWNGRADE)."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3

    @classmethod
    def from_code(cls, code: int) -> UpgradeType:
        return cls(code) if code in (1, 2, 3) else cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    feature: str
    max_version_level: int
    upgrade_type: UpgradeType = UpgradeType.UPGRADE


@dataclass(frozen=True, slots=True)
class UpdateFeaturesResult:
    """One outcome for the whole request (Kafka 3.9+: one failed update fails them all)."""

    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


class _Refused(Exception):
    pass


def _invalid(feature: str, level: int, reason: str) -> _Refused:
    return _Refused(f"Invalid update version {level} for feature {feature}. {reason}")


def _not_supported(level: int, what: str, supported: tuple[int, int]) -> str | None:
    low, high = supported
    if low <= level <= high:
        return None
    if high == 0:
        return f"{what} does not support this feature."
    return f"{what} only supports versions [min_version:{low}, max_version:{high}]"


# the features Kafka 4.x knows besides metadata.version (its Feature enum)
KAFKA_FEATURES: Final = frozenset({"kraft.version", "transaction.version", "group.version",
                                   "eligible.leader.replicas.version", "share.version",
                                   "streams.version"})


def _check_update(feature: str, level: int, upgrade_type: UpgradeType, current: int,
                  node_id: int,
                  brokers: Iterable[tuple[int, Mapping[str, tuple[int, int]]]]) -> None:
    if upgrade_type is UpgradeType.UNKNOWN:
        raise _invalid(feature, level, "The controller does not support the given upgrade type.")
    if level < 0:
        raise _invalid(feature, level, "A feature version cannot be less than 0.")
    reason = _not_supported(level, f"Local controller {node_id}",
                            SUPPORTED_FEATURES.get(feature, (0, 0)))
    for broker_id, supported in brokers:
        if reason is not None:
            break
        reason = _not_supported(level, f"Broker {broker_id}", supported.get(feature, (0, 0)))
    if reason is not None:
        raise _invalid(feature, level, reason)
    if level < current and upgrade_type is UpgradeType.UPGRADE:
        raise _invalid(feature, level, "Can't downgrade the version of this feature without "
                       "setting the upgrade type to either safe or unsafe downgrade.")
    if level > current and upgrade_type is not UpgradeType.UPGRADE:
        raise _invalid(feature, level, "Can't downgrade to a newer version.")
    if feature != METADATA_VERSION_FEATURE and feature not in KAFKA_FEATURES:
        # level 0 is "supported" by every node; Kafka's controller then looks the name up in
        # its Feature enum, which knows what this build does not support yet
        raise _invalid(feature, level, f"Feature {feature} not found.")
    if feature != METADATA_VERSION_FEATURE:
        return
    if level < MINIMUM_BOOTSTRAP_METADATA_VERSION:
        raise _Refused(f"Invalid metadata.version {level}. Unable to set a metadata.version "
                       f"less than {metadata_version_name(MINIMUM_BOOTSTRAP_METADATA_VERSION)}")
    if level < current and metadata_version_changed(current, level):
        if upgrade_type is UpgradeType.UNSAFE_DOWNGRADE:
            raise _Refused(f"Invalid metadata.version {level}. Unsafe metadata downgrade is "
                           "not supported in this version.")
        raise _Refused(f"Invalid metadata.version {level}. Refusing to perform the requested "
                       "downgrade because it might delete metadata information.")


def update_features(
    finalized: Mapping[str, int],
    brokers: Iterable[tuple[int, Mapping[str, tuple[int, int]]]],
    updates: Iterable[FeatureUpdate],
    *,
    node_id: int,
    validate_only: bool,
) -> tuple[tuple[FeatureLevelRecord, ...], UpdateFeaturesResult]:
    """UpdateFeatures, as Kafka's FeatureControlManager decides it: each update is checked
    against this controller's and every registered broker's supported range (fenced brokers
    included: a broker that is gone for good must be unregistered first), against the
    upgrade type, and for metadata.version against the levels that changed the metadata
    format. The first refused update refuses the whole request (INVALID_UPDATE_VERSION);
    otherwise one FeatureLevelRecord per update (none when `validate_only`).

    `finalized`: feature -> level, metadata.version included; `brokers`: (id, feature ->
    (min, max) supported). A later update of the same feature replaces an earlier one."""
    wanted: dict[str, FeatureUpdate] = {}
    for update in updates:
        wanted[update.feature] = update
    broker_ranges = list(brokers)
    records = []
    for name, update in wanted.items():
        current = finalized.get(name, 0)
        try:
            _check_update(name, update.max_version_level, update.upgrade_type, current,
                          node_id, broker_ranges)
        except _Refused as refused:
            return (), UpdateFeaturesResult(
                ErrorCode.invalid_update_version,
                "The update failed for all features since the following feature had an "
                f"error: {refused}")
        records.append(FeatureLevelRecord(name=name, feature_level=update.max_version_level))
    return (() if validate_only else tuple(records)), UpdateFeaturesResult()
