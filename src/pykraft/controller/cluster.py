"""Broker lifecycle (KIP-631): registration, heartbeats, fencing and controlled shutdown.

Theory of operation. A broker registers (RegisterBrokerRecord, fenced), then heartbeats.
Its state as the active controller sees it is one of:

    FENCED --(heartbeat, caught up)--> UNFENCED --(heartbeat wants shutdown)--> CONTROLLED_SHUTDOWN
    UNFENCED --(heartbeat wants fence, or session expired)--> FENCED
    any --(wants shutdown, nothing left to move)--> SHUTDOWN_NOW (fenced, told to stop)

- Caught up: the broker's metadata offset has reached the offset of its own registration
  record, so it knows at least what the cluster knew when it joined.
- Session: a broker not heard from for `broker.session.timeout.ms` is fenced by `tick`.
- Controlled shutdown: the broker leaves every ISR and its leaderships move; it may stop
  once it leads nothing and every other active broker has seen those changes (their
  metadata offsets reached the offset of the last record the controlled shutdown wrote).

Fencing (and controlled shutdown) emits, for every partition whose ISR holds the broker, a
PartitionChangeRecord removing it from the ISR and electing another in-sync leader if it
led (or none, keeping the ISR as it was, when it was the last in-sync replica); then the
fence itself. Unfencing emits the unfence, then elects the broker leader of every
leaderless partition whose ISR holds it.

The fence/unfence/shutdown records follow metadata.version as Kafka does:
BrokerRegistrationChangeRecord from 3.3-IV2 on, FenceBrokerRecord/UnfenceBrokerRecord
before; the in-controlled-shutdown flag exists from 3.3-IV3 on.

Replicated state (registrations, fencing) changes only through records. `BrokerSessions`
is the controller's soft state, as in Kafka's BrokerHeartbeatManager: last contact times,
last reported metadata offsets and controlled-shutdown offsets. It is not in the log; it is
rebuilt when a controller becomes active (every registered broker gets a fresh session).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final

from pykraft.controller import configs
from pykraft.controller.config import ControllerConfig
from pykraft.controller.features import (
    METADATA_VERSION_FEATURE,
    MINIMUM_KRAFT_METADATA_VERSION,
    has_controlled_shutdown_state,
    has_directory_assignment,
    uses_broker_registration_change,
)
from pykraft.controller.partitions import Election, build_partition_change
from pykraft.controller.requests import BrokerFeatureRange, Listener
from pykraft.controller.state import ControllerState, PartitionKey, fold
from pykraft.errors import (
    DuplicateBrokerRegistration,
    InconsistentClusterId,
    InvalidRegistration,
    StaleBrokerEpoch,
    UnsupportedVersion,
    invariant,
)
from pykraft.metadata.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from pykraft.metadata.registrations import BrokerRegistration

__all__ = [
    "BrokerControlState",
    "BrokerSessions",
    "Registration",
    "check_broker_epoch",
    "decide_registration",
    "fence_records",
    "unfence_records",
    "controlled_shutdown_records",
    "unregister_records",
    "next_broker_state",
]

_FENCE: Final = 1
_UNFENCE: Final = -1
_IN_CONTROLLED_SHUTDOWN: Final = 1


class BrokerControlState(Enum):
    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"

    @property
    def fenced(self) -> bool:
        return self in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW)


# -- soft state -------------------------------------------------------------------------


@dataclass(slots=True)
class _Session:
    last_contact_ms: int
    metadata_offset: int = -1
    controlled_shutdown_offset: int = -1  # >= 0 while in controlled shutdown
    connection_lost_ms: int | None = None  # its heartbeat connection closed then

    @property
    def shutting_down(self) -> bool:
        return self.controlled_shutdown_offset >= 0


class BrokerSessions:
    """Heartbeat bookkeeping of the active controller (not replicated)."""

    def __init__(self, session_timeout_ms: int, connection_grace_ms: int | None = None) -> None:
        self.session_timeout_ms = session_timeout_ms
        # after its heartbeat connection closed, a broker has this long to heartbeat again
        # (a live broker reconnects at its next heartbeat) before its session ends
        self.connection_grace_ms = (session_timeout_ms if connection_grace_ms is None
                                    else min(connection_grace_ms, session_timeout_ms))
        self._sessions: dict[int, _Session] = {}

    def reset(self, broker_ids: Iterable[int], now_ms: int) -> None:
        """A new term as active controller: every registered broker gets a fresh session."""
        self._sessions = {broker_id: _Session(now_ms) for broker_id in broker_ids}

    def ensure(self, broker_ids: Iterable[int], now_ms: int) -> None:
        """Give a session starting now to any registered broker without one."""
        for broker_id in broker_ids:
            self._sessions.setdefault(broker_id, _Session(now_ms))

    def clear(self) -> None:
        self._sessions = {}

    def remove(self, broker_id: int) -> None:
        self._sessions.pop(broker_id, None)

    def touch(self, broker_id: int, now_ms: int, metadata_offset: int, *, fenced: bool) -> None:
        session = self._sessions.setdefault(broker_id, _Session(now_ms))
        session.last_contact_ms = max(session.last_contact_ms, now_ms)
        session.metadata_offset = metadata_offset
        session.connection_lost_ms = None
        if fenced:  # a fenced broker is out of controlled shutdown: it may stop at once
            session.controlled_shutdown_offset = -1

    def heard_from(self, broker_id: int, at_ms: int) -> None:
        """A heartbeat of the broker arrived at `at_ms` and waits its turn behind other
        operations: the broker is alive then, whatever the heartbeat will say."""
        session = self._sessions.get(broker_id)
        if session is None:
            return
        session.last_contact_ms = max(session.last_contact_ms, at_ms)
        if session.connection_lost_ms is not None and at_ms >= session.connection_lost_ms:
            session.connection_lost_ms = None  # it came on a new connection

    def begin_controlled_shutdown(self, broker_id: int, offset: int) -> None:
        session = self._sessions[broker_id]
        if session.controlled_shutdown_offset < 0:
            session.controlled_shutdown_offset = offset

    def shutting_down(self, broker_id: int) -> bool:
        session = self._sessions.get(broker_id)
        return session is not None and session.shutting_down

    def controlled_shutdown_offset(self, broker_id: int) -> int:
        return self._sessions[broker_id].controlled_shutdown_offset

    def connection_lost(self, broker_id: int, now_ms: int) -> None:
        """The connection the broker heartbeats on closed (its process is gone, or it is
        reconnecting): its session now ends `connection_grace_ms` from now unless it
        heartbeats again first."""
        session = self._sessions.get(broker_id)
        if session is not None and session.connection_lost_ms is None:
            session.connection_lost_ms = now_ms

    def _last_valid_ms(self, session: _Session) -> int:
        last = session.last_contact_ms + self.session_timeout_ms
        if session.connection_lost_ms is not None:
            last = min(last, session.connection_lost_ms + self.connection_grace_ms)
        return last

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        session = self._sessions.get(broker_id)
        return session is not None and now_ms <= self._last_valid_ms(session)

    def expiry_ms(self, broker_id: int) -> int | None:
        """The first time at which the broker's session counts as expired."""
        session = self._sessions.get(broker_id)
        return None if session is None else self._last_valid_ms(session) + 1

    def lowest_active_offset(self, state: ControllerState) -> int | None:
        """The lowest metadata offset among unfenced brokers not shutting down."""
        offsets = [  # (a copy: the node's loop reads it while a decision may add to it)
            session.metadata_offset
            for broker_id, session in list(self._sessions.items())
            if not session.shutting_down
            and broker_id in state.image.cluster.brokers
            and not state.image.cluster.brokers[broker_id].fenced
        ]
        return min(offsets) if offsets else None


# -- registration -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Registration:
    broker_id: int
    incarnation_id: uuid.UUID
    listeners: Sequence[Listener]
    features: Sequence[BrokerFeatureRange]
    rack: str | None
    log_dirs: Sequence[uuid.UUID] = ()
    cluster_id: str | None = None


def _reserved_directory(directory: uuid.UUID) -> bool:
    most, least = directory.int >> 64, directory.int & ((1 << 64) - 1)
    signed_least = least - (1 << 64) if least >= 1 << 63 else least
    return most == 0 and signed_least < 100


def _check_log_dirs(state: ControllerState, request: Registration) -> None:
    if not request.log_dirs:
        raise InvalidRegistration("No directories specified in request")
    if any(_reserved_directory(directory) for directory in request.log_dirs):
        raise InvalidRegistration("Reserved directory ID in request")
    if len(set(request.log_dirs)) != len(request.log_dirs):
        raise InvalidRegistration("Duplicate directory ID in request")
    for broker in state.image.cluster.brokers.values():
        if broker.id == request.broker_id:
            continue
        for directory in request.log_dirs:
            if directory in broker.log_dirs:
                raise InvalidRegistration(
                    f"Broker {broker.id} is already registered with directory {directory}"
                )


def _check_features(state: ControllerState, request: Registration) -> list[BrokerFeatureRange]:
    """The broker must support every finalized feature level; returns what it supports,
    with metadata.version filled in (a broker that does not say supports only level 1)."""
    features = list(request.features)
    if all(feature.name != METADATA_VERSION_FEATURE for feature in features):
        minimum = MINIMUM_KRAFT_METADATA_VERSION
        features.append(BrokerFeatureRange(METADATA_VERSION_FEATURE, minimum, minimum))
    finalized = dict(state.image.features.finalized.items())
    finalized[METADATA_VERSION_FEATURE] = state.image.features.metadata_version
    for feature in features:
        level = finalized.pop(feature.name, 0)
        if not feature.min_supported_version <= level <= feature.max_supported_version:
            raise UnsupportedVersion(
                f"Unable to register because the broker does not support finalized version "
                f"{level} of {feature.name}. The broker wants a version between "
                f"{feature.min_supported_version} and {feature.max_supported_version}, "
                "inclusive."
            )
    for name, level in finalized.items():
        if level != 0:
            raise UnsupportedVersion(
                f"Unable to register because the broker does not support finalized version "
                f"{level} of {name}. The broker wants a version between 0 and 0, inclusive."
            )
    return features


def decide_registration(
    state: ControllerState,
    config: ControllerConfig,
    sessions: BrokerSessions,
    request: Registration,
    *,
    new_broker_epoch: int,
    now_ms: int,
) -> RegisterBrokerRecord:
    """The RegisterBrokerRecord for a registration request, or a KafkaError.

    A new incarnation gets `new_broker_epoch` (the offset its record will have) and starts
    fenced; the same incarnation again amends its registration and keeps its epoch and
    fencing state.
    """
    if config.cluster_id is not None and request.cluster_id != config.cluster_id:
        raise InconsistentClusterId(
            f"Expected cluster ID {config.cluster_id}, but got cluster ID {request.cluster_id}"
        )
    existing = state.image.cluster.brokers.get(request.broker_id)
    if (
        existing is not None
        and existing.incarnation_id != request.incarnation_id
        and not existing.fenced
        and sessions.has_valid_session(request.broker_id, now_ms)
    ):
        raise DuplicateBrokerRegistration("Another broker is registered with that broker id.")
    metadata_version = state.image.features.metadata_version
    if has_directory_assignment(metadata_version):
        _check_log_dirs(state, request)
    features = _check_features(state, request)
    amend = existing is not None and existing.incarnation_id == request.incarnation_id
    return RegisterBrokerRecord(
        broker_id=request.broker_id,
        incarnation_id=request.incarnation_id,
        broker_epoch=existing.epoch if amend and existing else new_broker_epoch,
        end_points=tuple(
            RegisterBrokerRecord.BrokerEndpoint(
                name=listener.name,
                host=listener.host,
                port=listener.port,
                security_protocol=listener.security_protocol,
            )
            for listener in request.listeners
        ),
        features=tuple(
            RegisterBrokerRecord.BrokerFeature(
                name=feature.name,
                min_supported_version=feature.min_supported_version,
                max_supported_version=feature.max_supported_version,
            )
            for feature in features
        ),
        rack=request.rack,
        fenced=existing.fenced if amend and existing else True,
        in_controlled_shutdown=existing.in_controlled_shutdown if amend and existing else False,
        log_dirs=tuple(request.log_dirs) if has_directory_assignment(metadata_version) else (),
    )


def check_broker_epoch(state: ControllerState, broker_id: int, broker_epoch: int) -> None:
    registration = state.image.cluster.brokers.get(broker_id)
    if registration is None or broker_id not in state.registration_offsets:
        raise StaleBrokerEpoch(f"No broker registration found for broker id {broker_id}")
    if registration.epoch != broker_epoch:
        raise StaleBrokerEpoch(
            f"Expected broker epoch {registration.epoch}, but got broker epoch {broker_epoch}"
        )


# -- state transitions ------------------------------------------------------------------


def current_broker_state(
    registration: BrokerRegistration, sessions: BrokerSessions
) -> BrokerControlState:
    if sessions.shutting_down(registration.id):
        return BrokerControlState.CONTROLLED_SHUTDOWN
    if registration.fenced:
        return BrokerControlState.FENCED
    return BrokerControlState.UNFENCED


def next_broker_state(
    current: BrokerControlState,
    *,
    want_fence: bool,
    want_shut_down: bool,
    caught_up: bool,
    has_leaderships: Callable[[], bool],
    shutdown_complete: Callable[[], bool],
) -> BrokerControlState:
    """Kafka's heartbeat state table (BrokerHeartbeatManager.calculateNextBrokerState)."""
    state = BrokerControlState
    match current:
        case state.FENCED:
            if want_shut_down:
                return state.SHUTDOWN_NOW
            if not want_fence and caught_up:
                return state.UNFENCED
            return state.FENCED
        case state.UNFENCED:
            if want_fence:
                return state.SHUTDOWN_NOW if want_shut_down else state.FENCED
            if want_shut_down:
                return state.CONTROLLED_SHUTDOWN if has_leaderships() else state.SHUTDOWN_NOW
            return state.UNFENCED
        case state.CONTROLLED_SHUTDOWN:
            if has_leaderships() or not shutdown_complete():
                return state.CONTROLLED_SHUTDOWN
            return state.SHUTDOWN_NOW
        case state.SHUTDOWN_NOW:
            return state.SHUTDOWN_NOW


# -- records of the transitions ---------------------------------------------------------


def _is_active(state: ControllerState, broker_id: int) -> bool:
    registration = state.image.cluster.brokers.get(broker_id)
    return (
        registration is not None
        and not registration.fenced
        and not registration.in_controlled_shutdown
    )


def _election(state: ControllerState, config: ControllerConfig, key: PartitionKey) -> Election:
    topic = state.image.topics.by_id[key[0]]
    value = configs.effective_topic_config(
        state, config, topic.name, "unclean.leader.election.enable"
    )
    return Election.UNCLEAN if (value or "").strip().lower() == "true" else Election.ONLINE


def _leader_and_isr_updates(
    state: ControllerState,
    config: ControllerConfig,
    keys: Iterable[PartitionKey],
    *,
    broker_to_remove: int | None,
    broker_to_add: int | None,
) -> list[PartitionChangeRecord]:
    """One change per partition that needs one: `broker_to_remove` leaves the ISR and may not
    lead; `broker_to_add` may lead although the image does not show it active yet."""

    def acceptable(replica: int) -> bool:
        if replica == broker_to_remove:
            return False
        return replica == broker_to_add or _is_active(state, replica)

    records = []
    metadata_version = state.image.features.metadata_version
    elections: dict[uuid.UUID, Election] = {}  # per topic: its config decides
    for key in keys:
        partition = state.partition(key)
        target_isr = tuple(replica for replica in partition.isr if replica != broker_to_remove)
        election = elections.get(key[0])
        if election is None:
            election = elections[key[0]] = _election(state, config, key)
        record = build_partition_change(
            partition,
            key[0],
            key[1],
            target_isr=target_isr,
            is_acceptable_leader=acceptable,
            metadata_version=metadata_version,
            election=election,
        )
        if record is not None:
            records.append(record)
    return records


def _leave_every_isr(
    state: ControllerState, config: ControllerConfig, broker_id: int
) -> list[MetadataRecord]:
    """The partition changes that take `broker_id` out of every ISR, moving its
    leaderships (fencing and unregistration both start with these)."""
    return list(_leader_and_isr_updates(
        state, config, state.partitions_with_isr_member_led_first(broker_id),
        broker_to_remove=broker_id, broker_to_add=None))


def fence_records(
    state: ControllerState, config: ControllerConfig, broker_id: int
) -> list[MetadataRecord]:
    """Take `broker_id` out of every ISR (moving its leaderships), then fence it."""
    registration = state.image.cluster.brokers[broker_id]
    records = _leave_every_isr(state, config, broker_id)
    if uses_broker_registration_change(state.image.features.metadata_version):
        records.append(
            BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=registration.epoch, fenced=_FENCE
            )
        )
    else:
        records.append(FenceBrokerRecord(id=broker_id, epoch=registration.epoch))
    return records


def unregister_records(
    state: ControllerState, config: ControllerConfig, broker_id: int
) -> list[MetadataRecord]:
    """Take `broker_id` out of every ISR (moving its leaderships), then unregister it
    (Kafka's handleBrokerUnregistered)."""
    registration = state.image.cluster.brokers[broker_id]
    records = _leave_every_isr(state, config, broker_id)
    records.append(UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=registration.epoch))
    return records


def unfence_records(
    state: ControllerState, config: ControllerConfig, broker_id: int
) -> list[MetadataRecord]:
    """Unfence `broker_id`, then elect leaders for leaderless partitions it may now lead."""
    registration = state.image.cluster.brokers[broker_id]
    records: list[MetadataRecord] = []
    if uses_broker_registration_change(state.image.features.metadata_version):
        records.append(
            BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=registration.epoch, fenced=_UNFENCE
            )
        )
    else:
        records.append(UnfenceBrokerRecord(id=broker_id, epoch=registration.epoch))
    records.extend(
        _leader_and_isr_updates(
            state,
            config,
            state.leaderless_partitions(),
            broker_to_remove=None,
            broker_to_add=broker_id,
        )
    )
    return records


def controlled_shutdown_records(
    state: ControllerState, config: ControllerConfig, broker_id: int
) -> list[MetadataRecord]:
    """Mark `broker_id` as shutting down, take it out of every ISR, move its leaderships."""
    registration = state.image.cluster.brokers[broker_id]
    records: list[MetadataRecord] = []
    if (
        has_controlled_shutdown_state(state.image.features.metadata_version)
        and not registration.in_controlled_shutdown
    ):
        records.append(
            BrokerRegistrationChangeRecord(
                broker_id=broker_id,
                broker_epoch=registration.epoch,
                in_controlled_shutdown=_IN_CONTROLLED_SHUTDOWN,
            )
        )
    records.extend(
        _leader_and_isr_updates(
            state,
            config,
            state.partitions_with_isr_member_led_first(broker_id),
            broker_to_remove=broker_id,
            broker_to_add=None,
        )
    )
    return records


def fence_stale_brokers(
    state: ControllerState,
    config: ControllerConfig,
    sessions: BrokerSessions,
    now_ms: int,
) -> tuple[list[MetadataRecord], list[int]]:
    """Fence every unfenced broker whose session expired, one after the other: each
    decision sees the previous fences applied (a leadership moved to a broker fenced next
    moves on again)."""
    stale = sorted(
        broker.id
        for broker in state.image.cluster.brokers.values()
        if not broker.fenced and not sessions.has_valid_session(broker.id, now_ms)
    )
    records: list[MetadataRecord] = []
    scratch = state
    for position, broker_id in enumerate(stale):
        fenced = fence_records(scratch, config, broker_id)
        invariant(bool(fenced), "fencing always writes the fence itself")
        records.extend(fenced)
        if position + 1 < len(stale):
            scratch = fold(scratch, fenced, scratch.image.offset + 1, scratch.image.epoch)
    return records, stale
