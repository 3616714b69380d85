"""The group coordinator's core: classic consumer groups and committed offsets, sans I/O.

Theory of operation. The broker coordinates the groups that hash to the `__consumer_offsets`
partitions it leads. For each such partition the core holds every group's state, rebuilt by
replaying the partition's log (`begin_load`, `load`, `complete_load`) and dropped when the
broker stops leading it (`unload`). Requests come in as method calls with a reply token and
`now_ms`; the core never blocks, reads a clock or touches the log. What it wants done comes
out of `ready()`:

- `replies`: answers to send now;
- `appends`: records to append to a partition, each with the replies to send once the
  records are committed (the high watermark passed them) — an OffsetCommit is answered only
  when its offsets are durable, SyncGroup only when the generation's assignment is;
- `wake_at_ms`: call `tick(now_ms)` again no later than this (session, rebalance and sync
  deadlines, the initial rebalance delay, offset expiration).

The core changes its memory before the shell appends, and the shell appends synchronously
after each call, so log order is decision order. When an append fails the shell unloads the
partition and reloads it from the log: the log, not memory, is the truth.

Classic protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup), as Kafka's ClassicGroup does it:
a new dynamic member is first told MEMBER_ID_REQUIRED with an id (KIP-394) and kept pending
until it rejoins with it; static members (KIP-345) are known by group.instance.id, and a
rejoin under a known instance id takes over the old member id (fencing the old one). A
rebalance waits until every member has rejoined (or the rebalance timeout: non-rejoined
dynamic members are dropped), then bumps the generation, picks the protocol every member
supports that most members prefer, and answers the joins — the leader with every member's
metadata. The leader's SyncGroup carries the assignment, which is persisted and handed out.

KIP-848 consumer groups (ConsumerGroupHeartbeat, ConsumerGroupDescribe) live in the same
table: a `Group` whose `consumer` is set is a consumer group (its classic fields stay empty),
so offsets, listing, deletion and expiry treat both kinds alike. The epochs, assignors and
reconciliation are in `consumer`, the records in `consumer_records`; the core feeds them the
metadata image's topics (`update_topics`), runs them on each heartbeat, fences members on
their session and rebalance deadlines, and appends what changed before it answers. A group
id is one kind or the other: a classic JoinGroup on a consumer group with members gets
INCONSISTENT_GROUP_PROTOCOL, a heartbeat on a classic group with members GROUP_ID_NOT_FOUND;
an empty group changes kind. A subscription regex new to the group is resolved by the
"cregex" timer right after the heartbeat that brought it, as Kafka resolves it in the
background: the member gets those partitions in a later heartbeat. Each resolution is logged
(ConsumerGroupRegularExpression) with the group epoch it bumps and replayed on load, so a
loaded group keeps its assignment and resolves again only after a heartbeat; a topic change
re-resolves the settled regexes at once. A group's GROUP config
resource (`update_group_configs`) overrides its session timeout and heartbeat interval.

Offset commits are checked as Kafka's ClassicGroup/ConsumerGroup.validateOffsetCommit
(`validate_offset_commit`): generation -1 may commit to an empty group whatever member id
it carries; a member commits with its generation (classic) or member epoch (consumer).

Invariants: a member id appears in at most one group; a static instance id maps to exactly
one member; a group with members has a leader among them; generations only increase.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.broker.group_coordinator import consumer_records
from pykraft.broker.group_coordinator.consumer import (
    ASSIGNORS,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
    ResolvedRegex,
    TopicInfo,
    compile_regex,
    owns_all,
    reconcile,
    resolve_regex,
)
from pykraft.broker.group_coordinator.records import (
    ConsumerGroupMetadataKey,
    CoordinatorRecord,
    CoordinatorValue,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
)
from pykraft.broker.group_coordinator.state import GroupState, check_transition
from pykraft.errors import invariant

log = logging.getLogger(__name__)

__all__ = [
    "Append",
    "CommitPartition",
    "CommitRequest",
    "GroupConfig",
    "GroupCoordinator",
    "HeartbeatRequest",
    "JoinRequest",
    "JoinResult",
    "LeaveMember",
    "Ready",
    "Reply",
    "SyncRequest",
    "SyncResult",
    "java_string_hash",
    "partition_for",
]

CONSUMER_PROTOCOL_TYPE: Final = "consumer"
NO_GENERATION: Final = -1
_NONE = ErrorCode.none


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    value = 0
    data = text.encode("utf-16-be")
    for index in range(0, len(data), 2):
        value = (31 * value + (data[index] << 8 | data[index + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def partition_for(group_id: str, partition_count: int) -> int:
    """Kafka's placement: Utils.abs(groupId.hashCode) % offsets.topic.num.partitions."""
    hashed = java_string_hash(group_id)
    return (0 if hashed == -(1 << 31) else abs(hashed)) % partition_count


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The group.* and offsets.* server settings the core obeys (Kafka's defaults)."""

    partition_count: int = 50
    session_timeout_ms_min: int = 6000
    session_timeout_ms_max: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    group_size_max: int = 0x7FFFFFFF
    offset_metadata_bytes_max: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    consumer_session_timeout_ms: int = 45_000
    consumer_session_timeout_ms_min: int = 45_000
    consumer_session_timeout_ms_max: int = 60_000
    consumer_heartbeat_interval_ms: int = 5000
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_group_size_max: int = 0x7FFFFFFF

    @classmethod
    def from_properties(cls, values: Mapping[str, str]) -> GroupConfig:
        def number(key: str, default: int) -> int:
            text = values.get(key)
            return default if text is None or not text.strip() else int(text)

        return cls(
            partition_count=number("offsets.topic.num.partitions", 50),
            session_timeout_ms_min=number("group.min.session.timeout.ms", 6000),
            session_timeout_ms_max=number("group.max.session.timeout.ms", 1_800_000),
            initial_rebalance_delay_ms=number("group.initial.rebalance.delay.ms", 3000),
            group_size_max=number("group.max.size", 0x7FFFFFFF),
            offset_metadata_bytes_max=number("offset.metadata.max.bytes", 4096),
            offsets_retention_ms=number("offsets.retention.minutes", 10080) * 60_000,
            offsets_retention_check_interval_ms=number(
                "offsets.retention.check.interval.ms", 600_000),
            consumer_session_timeout_ms=number("group.consumer.session.timeout.ms", 45_000),
            consumer_session_timeout_ms_min=number("group.consumer.min.session.timeout.ms",
                                                   45_000),
            consumer_session_timeout_ms_max=number("group.consumer.max.session.timeout.ms",
                                                   60_000),
            consumer_heartbeat_interval_ms=number("group.consumer.heartbeat.interval.ms", 5000),
            consumer_assignors=_assignor_names(values.get("group.consumer.assignors",
                                                          "uniform,range")),
            consumer_group_size_max=number("group.consumer.max.size", 0x7FFFFFFF),
        )

    def __post_init__(self) -> None:
        if not (self.consumer_session_timeout_ms_min <= self.consumer_session_timeout_ms
                <= self.consumer_session_timeout_ms_max):
            raise ValueError("group.consumer.session.timeout.ms must lie between "
                             "group.consumer.min.session.timeout.ms and "
                             "group.consumer.max.session.timeout.ms")
        if self.consumer_heartbeat_interval_ms >= self.consumer_session_timeout_ms:
            raise ValueError("group.consumer.heartbeat.interval.ms must be below "
                             "group.consumer.session.timeout.ms")
        unknown = [name for name in self.consumer_assignors if name not in ASSIGNORS]
        if unknown or not self.consumer_assignors:
            raise ValueError(f"group.consumer.assignors: unknown assignor(s) {unknown} "
                             f"(known: {', '.join(ASSIGNORS)})")


def _assignor_names(text: str) -> tuple[str, ...]:
    """Short names ("uniform") or Kafka's class names (...assignor.UniformAssignor)."""
    names = []
    for entry in text.split(","):
        name = entry.strip().rsplit(".", 1)[-1]
        if name:
            names.append(name.removesuffix("Assignor").lower())
    return tuple(names)


# -- requests and results (the edge translates kio entities to and from these) -------------


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    require_known_member_id: bool  # JoinGroup v4+ (KIP-394)
    supports_skip_assignment: bool  # JoinGroup v9+


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # (id, instance id, metadata)


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class LeaveMember:
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class CommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class CommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    partitions: tuple[CommitPartition, ...]
    retention_ms: int = -1  # OffsetCommit v2-v4's retention_time_ms; -1: the broker's
    api_version: int = 9  # OffsetCommit's (errors for an unknown group and old versions)


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: GroupState | ConsumerGroupState
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    error: ErrorCode
    group_id: str
    state: GroupState | ConsumerGroupState
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    message: str | None = None  # Kafka's error message (DescribeGroups v6)


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeat:
    """A ConsumerGroupHeartbeat (KIP-848); None fields did not change since the last."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int  # -1: unchanged
    subscribed_topic_names: tuple[str, ...] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: Assignment | None
    client_id: str = ""
    client_host: str = ""
    client_generates_member_id: bool = True  # v1+ (KIP-1082); v0: the coordinator does


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


@dataclass(frozen=True, slots=True)
class ConsumerMemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]
    target_assignment: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    error: ErrorCode
    message: str | None
    group_id: str
    state: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[ConsumerMemberDescription, ...] = ()


# -- outputs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    token: int
    result: Any


@dataclass(frozen=True, slots=True)
class Append:
    partition: int
    records: tuple[CoordinatorRecord, ...]
    replies: tuple[Reply, ...]  # to send once the records are committed
    producer_id: int = -1  # >= 0: a transactional batch of this producer (TxnOffsetCommit)
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class Ready:
    replies: tuple[Reply, ...]
    appends: tuple[Append, ...]
    wake_at_ms: int | None


# -- state --------------------------------------------------------------------------------


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_token: int | None = None  # a JoinGroup waiting for the rebalance to complete
    join_skip_assignment: bool = False
    sync_token: int | None = None  # a SyncGroup waiting for the leader's assignment

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str = ""
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: set[str] = field(default_factory=set)  # KIP-394: told their id
    pending_sync: set[str] = field(default_factory=set)
    initial_delay_remaining_ms: int = 0
    in_initial_delay: bool = False
    new_member_added: bool = False
    offsets: dict[tuple[str, int], OffsetCommitValue] = field(default_factory=dict)
    # TxnOffsetCommit: producer id -> offsets visible once its COMMIT marker is written
    pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetCommitValue]] = field(
        default_factory=dict)
    has_metadata_record: bool = False  # a GroupMetadata record exists in the log
    consumer: ConsumerGroup | None = None  # set: a KIP-848 consumer group, not a classic one

    def has_members(self) -> bool:
        return bool(self.members) or (self.consumer is not None and bool(self.consumer.members))

    def transition(self, target: GroupState, now_ms: int) -> None:
        self.state = check_transition(self.state, target)
        self.state_timestamp_ms = now_ms

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        members = iter(self.members.values())
        first = next(members, None)
        if first is None:
            return set()
        names = {name for name, _ in first.protocols}
        for member in members:
            names &= {name for name, _ in member.protocols}
        return names

    def supports(self, protocol_type: str, protocols: Sequence[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        invariant(bool(candidates), f"group {self.group_id}: no protocol all members support")
        votes: dict[str, int] = {}
        order: list[str] = []
        for member in self.members.values():
            vote = next(name for name, _ in member.protocols if name in candidates)
            if vote not in votes:
                order.append(vote)
            votes[vote] = votes.get(vote, 0) + 1
        return max(order, key=lambda name: votes[name])  # ties: the earliest voted

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_token is not None for m in self.members.values())

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol); None when unknowable."""
        if self.consumer is not None:
            return self.consumer.subscribed_topics(())
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = consumer_subscription_topics(member.metadata_for(self.protocol))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics

    def is_empty_shell(self) -> bool:
        """Nothing left worth keeping: no members, no offsets."""
        return (not self.has_members() and not self.offsets and not self.pending_members
                and not self.pending_txn_offsets)


class PartitionStatus(Enum):
    LOADING = "loading"
    ACTIVE = "active"


@dataclass(slots=True)
class PartitionState:
    index: int
    leader_epoch: int
    status: PartitionStatus = PartitionStatus.LOADING
    groups: dict[str, Group] = field(default_factory=dict)


def consumer_subscription_topics(metadata: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription (any version): int16 version, then an
    array of int16-length strings; None when the bytes are not one."""
    try:
        count = int.from_bytes(metadata[2:6], "big", signed=True)
        position = 6
        topics = []
        for _ in range(max(0, count)):
            length = int.from_bytes(metadata[position:position + 2], "big", signed=True)
            position += 2
            if length < 0 or position + length > len(metadata):
                return None
            topics.append(metadata[position:position + length].decode("utf-8"))
            position += length
        return topics if len(metadata) >= 6 else None
    except UnicodeDecodeError:
        return None


# Timer keys: ("heartbeat", partition, group, member), ("pending", partition, group, member),
# ("join", partition, group), ("sync", partition, group), ("expire", partition)
TimerKey = tuple[Any, ...]


class GroupCoordinator:
    def __init__(self, config: GroupConfig, rng: random.Random) -> None:
        self.config = config
        self.rng = rng
        self.partitions: dict[int, PartitionState] = {}
        self._replies: list[Reply] = []
        self._appends: list[Append] = []
        self._deadlines: dict[TimerKey, int] = {}
        self._timers: list[tuple[int, int, TimerKey]] = []
        self._sequence = itertools.count()
        self.topics: dict[str, TopicInfo] = {}  # the metadata image's topics (update_topics)
        # KIP-848 GROUP config resources: group id -> its overrides (update_group_configs)
        self.group_configs: dict[str, Mapping[str, str]] = {}
        self.topic_names: dict[uuid.UUID, str] = {}

    # -- outputs ------------------------------------------------------------------------

    def ready(self) -> Ready:
        """Everything decided since the last call; the caller must act on all of it."""
        ready = Ready(tuple(self._replies), tuple(self._appends), self.wake_at_ms())
        self._replies.clear()
        self._appends.clear()
        return ready

    def wake_at_ms(self) -> int | None:
        while self._timers:
            deadline, _, key = self._timers[0]
            if self._deadlines.get(key) == deadline:
                return deadline
            heapq.heappop(self._timers)  # cancelled or moved
        return None

    def _reply(self, token: int, result: Any) -> None:
        self._replies.append(Reply(token, result))

    def _set_timer(self, key: TimerKey, deadline_ms: int) -> None:
        self._deadlines[key] = deadline_ms
        heapq.heappush(self._timers, (deadline_ms, next(self._sequence), key))

    def _cancel_timer(self, key: TimerKey) -> None:
        self._deadlines.pop(key, None)

    # -- partitions: load and unload ------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.partition_count)

    def begin_load(self, partition: int, leader_epoch: int) -> None:
        """This broker now leads `partition`: its groups are loading until complete_load."""
        self.unload(partition)
        self.partitions[partition] = PartitionState(partition, leader_epoch)

    def load(self, partition: int, record: CoordinatorRecord, producer_id: int = -1) -> None:
        """Replay one record of the partition's log, in log order; `producer_id` >= 0 for a
        record of a transactional batch (a TxnOffsetCommit, pending until its marker)."""
        state = self.partitions[partition]
        invariant(state.status is PartitionStatus.LOADING, f"load into active {partition}")
        if isinstance(record.key, OffsetCommitKey):
            if producer_id >= 0 and isinstance(record.value, OffsetCommitValue):
                self._pend_txn_offset(state, producer_id, record.key, record.value)
                return
            self._replay_offset(state, record.key, record.value)
            return
        if not isinstance(record.key, GroupMetadataKey):
            self._replay_consumer(state, record)
            return
        group_id = record.key.group
        value = record.value
        if value is None:
            group = state.groups.get(group_id)
            if group is not None:
                group.members.clear()
                group.static_members.clear()
                group.has_metadata_record = False
                group.state, group.generation_id, group.leader = GroupState.EMPTY, 0, None
                if group.is_empty_shell():
                    del state.groups[group_id]
            return
        invariant(isinstance(value, GroupMetadataValue), "a group key holds group metadata")
        assert isinstance(value, GroupMetadataValue)
        group = state.groups.get(group_id) or Group(group_id)
        state.groups[group_id] = group
        offsets = group.offsets
        group = Group(
            group_id,
            state=GroupState.STABLE if value.members else GroupState.EMPTY,
            state_timestamp_ms=value.current_state_timestamp,
            generation_id=value.generation,
            protocol_type=value.protocol_type,
            protocol=value.protocol,
            leader=value.leader,
            offsets=offsets,
            has_metadata_record=True,
        )
        for stored in value.members:
            group.members[stored.member_id] = Member(
                member_id=stored.member_id,
                group_instance_id=stored.group_instance_id,
                client_id=stored.client_id,
                client_host=stored.client_host,
                rebalance_timeout_ms=(stored.rebalance_timeout if stored.rebalance_timeout >= 0
                                      else stored.session_timeout),
                session_timeout_ms=stored.session_timeout,
                protocol_type=value.protocol_type,
                protocols=((value.protocol or "", stored.subscription),),
                assignment=stored.assignment,
            )
            if stored.group_instance_id is not None:
                group.static_members[stored.group_instance_id] = stored.member_id
        state.groups[group_id] = group

    def _replay_consumer(self, state: PartitionState, record: CoordinatorRecord) -> None:
        key, value = record.key, record.value
        assert not isinstance(key, OffsetCommitKey | GroupMetadataKey)
        invariant(value is None or not isinstance(value, OffsetCommitValue | GroupMetadataValue),
                  f"a consumer group key holds a consumer group value: {record!r}")
        assert not isinstance(value, OffsetCommitValue | GroupMetadataValue)
        group = state.groups.get(key.group_id)
        if value is None and (group is None or group.consumer is None):
            return
        if group is None:
            group = state.groups[key.group_id] = Group(key.group_id)
        if group.consumer is None:
            group.consumer = ConsumerGroup(key.group_id)
        consumer_records.replay(group.consumer, key, value)
        if value is None and isinstance(key, ConsumerGroupMetadataKey):
            group.consumer = None  # the group was deleted (or became classic)
            if group.is_empty_shell() and not group.has_metadata_record:
                del state.groups[key.group_id]

    def complete_load(self, partition: int, now_ms: int) -> None:
        state = self.partitions[partition]
        state.status = PartitionStatus.ACTIVE
        for group in state.groups.values():
            for member in group.members.values():
                self._schedule_heartbeat(partition, group, member, now_ms)
        for group in [g for g in state.groups.values() if g.consumer is not None]:
            self._load_consumer_group(state, group, now_ms)
        self._set_timer(("expire", partition),
                        now_ms + self.config.offsets_retention_check_interval_ms)

    def _load_consumer_group(self, state: PartitionState, group: Group, now_ms: int) -> None:
        """A replayed consumer group: its members get a fresh session (and a member that was
        revoking, a fresh rebalance timeout); topics that changed while no one led the
        partition make a new group epoch at once."""
        consumer = group.consumer
        assert consumer is not None
        # the regexes' resolutions come from the log; one a member uses that the log does
        # not resolve (written by an older pykraft) is resolved now. All are resolved again
        # after the next heartbeat (refresh_regexes).
        used = consumer.used_regexes()
        self._resolve(consumer, used - consumer.resolved_regexes.keys(), now_ms)
        consumer.refresh_regexes = bool(used)
        if consumer.members and self._refresh_subscription(consumer):
            consumer.group_epoch += 1
            log.info("consumer group %s: subscribed topics changed while unloaded; group "
                     "epoch %d", consumer.group_id, consumer.group_epoch)
            self._compute_target(consumer)
            self._persist_consumer(state, group)
        for each in consumer.members.values():
            self._set_timer(("csession", state.index, group.group_id, each.member_id),
                            now_ms + self.session_timeout_ms(group.group_id))
            if each.state is MemberState.UNREVOKED_PARTITIONS:
                self._set_timer(("crevoke", state.index, group.group_id, each.member_id),
                                now_ms + each.rebalance_timeout_ms)

    def unload(self, partition: int) -> None:
        """This broker no longer leads `partition`: forget it, answer whoever waits."""
        state = self.partitions.pop(partition, None)
        if state is None:
            return
        for group in state.groups.values():
            for member in group.members.values():
                self._fail_waiting(member, ErrorCode.not_coordinator)
        for key in [key for key in self._deadlines if key[1] == partition]:
            del self._deadlines[key]

    def leader_epoch(self, partition: int) -> int | None:
        state = self.partitions.get(partition)
        return None if state is None else state.leader_epoch

    def _active(self, group_id: str) -> tuple[PartitionState | None, ErrorCode]:
        state = self.partitions.get(self.partition_for(group_id))
        if state is None:
            return None, ErrorCode.not_coordinator
        if state.status is PartitionStatus.LOADING:
            return None, ErrorCode.coordinator_load_in_progress
        return state, _NONE

    # -- JoinGroup ----------------------------------------------------------------------

    def join_group(self, token: int, request: JoinRequest, now_ms: int) -> None:
        state, error = self._active(request.group_id)
        if not request.group_id:
            error = ErrorCode.invalid_group_id
        elif state is not None and not (
            self.config.session_timeout_ms_min <= request.session_timeout_ms
            <= self.config.session_timeout_ms_max
        ):
            error = ErrorCode.invalid_session_timeout
        if state is None or error is not _NONE:
            self._reply(token, JoinResult(error, request.member_id))
            return
        group = state.groups.get(request.group_id)
        if group is None:
            if request.member_id:
                self._reply(token, JoinResult(ErrorCode.unknown_member_id, request.member_id))
                return
            group = state.groups[request.group_id] = Group(request.group_id,
                                                           state_timestamp_ms=now_ms)
        if group.consumer is not None and group.consumer.members:
            self._reply(token, JoinResult(ErrorCode.inconsistent_group_protocol,
                                          request.member_id))
            return
        if group.consumer is not None:  # an empty consumer group becomes a classic one
            self._drop_consumer_group(state, group)
        if not group.supports(request.protocol_type, request.protocols):
            self._reply(token, JoinResult(ErrorCode.inconsistent_group_protocol,
                                          request.member_id))
        elif not request.member_id:
            self._join_new_member(state, group, token, request, now_ms)
        else:
            self._join_known_member(state, group, token, request, now_ms)
        if group.is_empty_shell() and not group.has_metadata_record:
            if group.state is GroupState.EMPTY:
                del state.groups[group.group_id]

    def _new_member_id(self, prefix: str) -> str:
        return f"{prefix}-{uuid.UUID(int=self.rng.getrandbits(128), version=4)}"

    def _join_new_member(self, state: PartitionState, group: Group, token: int,
                         request: JoinRequest, now_ms: int) -> None:
        instance = request.group_instance_id
        if instance is not None and instance in group.static_members:
            self._rejoin_static_member(state, group, token, request, now_ms)
            return
        if len(group.members) + len(group.pending_members) >= self.config.group_size_max:
            self._reply(token, JoinResult(ErrorCode.group_max_size_reached, ""))
            return
        member_id = self._new_member_id(instance if instance is not None else request.client_id)
        if instance is None and request.require_known_member_id:
            group.pending_members.add(member_id)
            self._set_timer(("pending", state.index, group.group_id, member_id),
                            now_ms + request.session_timeout_ms)
            self._reply(token, JoinResult(ErrorCode.member_id_required, member_id))
            return
        self._add_member_and_rebalance(state, group, member_id, token, request, now_ms)

    def _join_known_member(self, state: PartitionState, group: Group, token: int,
                           request: JoinRequest, now_ms: int) -> None:
        member_id = request.member_id
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._cancel_timer(("pending", state.index, group.group_id, member_id))
            self._add_member_and_rebalance(state, group, member_id, token, request, now_ms)
            return
        error = self._validate_member(group, member_id, request.group_instance_id)
        if error is not _NONE:
            self._reply(token, JoinResult(error, member_id))
            return
        member = group.members[member_id]
        if group.state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(state, group, member, token, request, now_ms)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            if member.protocols == request.protocols:
                self._reply(token, self._join_result(group, member, False))
            else:
                self._update_member_and_rebalance(state, group, member, token, request, now_ms)
        elif group.state is GroupState.STABLE:
            if member_id == group.leader or member.protocols != request.protocols:
                self._update_member_and_rebalance(state, group, member, token, request, now_ms)
            else:
                self._schedule_heartbeat(state.index, group, member, now_ms)
                self._reply(token, self._join_result(group, member, False))
        else:
            self._reply(token, JoinResult(ErrorCode.unknown_member_id, member_id))

    def _rejoin_static_member(self, state: PartitionState, group: Group, token: int,
                              request: JoinRequest, now_ms: int) -> None:
        """A static member came back without its member id (KIP-345): it takes over the old
        one's place under a new id, keeping its assignment; the old id is fenced (its
        waiting requests are answered FENCED_INSTANCE_ID, and FENCED_INSTANCE_ID or
        UNKNOWN_MEMBER_ID hereafter). As Kafka's updateStaticMemberThenRebalanceOrCompleteJoin:
        in a stable group it is answered from the current generation unless the protocol the
        group would select changes, whether it led the group or not; during a rebalance it
        joins it, and after the join phase (the leader may hold the old id) it restarts it."""
        instance = request.group_instance_id
        assert instance is not None
        current_leader = group.leader
        old_id = group.static_members[instance]
        old = group.members.pop(old_id)
        self._fail_waiting(old, ErrorCode.fenced_instance_id)
        self._cancel_timer(("heartbeat", state.index, group.group_id, old_id))
        group.pending_sync.discard(old_id)
        new_id = self._new_member_id(instance)
        member = Member(new_id, instance, old.client_id, old.client_host,
                        request.rebalance_timeout_ms, request.session_timeout_ms,
                        old.protocol_type, request.protocols, assignment=old.assignment,
                        join_token=token)
        group.members[new_id] = member
        group.static_members[instance] = new_id
        if group.leader == old_id:
            group.leader = new_id
        self._schedule_heartbeat(state.index, group, member, now_ms)
        if group.state is GroupState.STABLE:
            if group.select_protocol() != group.protocol:
                self._maybe_prepare_rebalance(
                    state, group, now_ms, f"static member {instance} rejoined as {new_id} with "
                    "a change of the group's protocol")
                return
            member.join_token = None
            if request.supports_skip_assignment:  # v9+: a leader learns the members, no more
                result = self._join_result(group, member, True)
            else:
                # Before v9 a leader told it leads would compute a new assignment the group
                # never asked for: it is named the old leader id and syncs as a follower.
                result = JoinResult(_NONE, new_id, group.generation_id, group.protocol_type,
                                    group.protocol, current_leader or "")
            self._append(state.index, [self._group_record(group, now_ms)], [Reply(token, result)])
        elif group.state is GroupState.COMPLETING_REBALANCE:
            self._prepare_rebalance(state, group, now_ms,
                                    f"static member {instance} rejoined as {new_id}")
        else:
            self._try_complete_join(state, group, now_ms)

    def _add_member_and_rebalance(self, state: PartitionState, group: Group, member_id: str,
                                  token: int, request: JoinRequest, now_ms: int) -> None:
        member = Member(member_id, request.group_instance_id, request.client_id,
                        request.client_host, request.rebalance_timeout_ms,
                        request.session_timeout_ms, request.protocol_type, request.protocols,
                        join_token=token)
        if not group.members:
            group.protocol_type = request.protocol_type
        group.members[member_id] = member
        if request.group_instance_id is not None:
            group.static_members[request.group_instance_id] = member_id
        if group.leader is None:
            group.leader = member_id
        group.new_member_added = True
        self._maybe_prepare_rebalance(state, group, now_ms, f"member {member_id} joined")

    def _update_member_and_rebalance(self, state: PartitionState, group: Group, member: Member,
                                     token: int, request: JoinRequest, now_ms: int) -> None:
        if member.join_token is not None:  # a duplicate join: the newer one is answered
            self._reply(member.join_token, JoinResult(ErrorCode.unknown_member_id,
                                                      member.member_id))
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.join_token = token
        self._maybe_prepare_rebalance(state, group, now_ms,
                                      f"member {member.member_id} rejoined")

    def _maybe_prepare_rebalance(self, state: PartitionState, group: Group, now_ms: int,
                                 reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(state, group, now_ms, reason)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(state, group, now_ms)

    def _prepare_rebalance(self, state: PartitionState, group: Group, now_ms: int,
                           reason: str) -> None:
        log.info("preparing to rebalance group %s in state %s with old generation %d (%s)",
                 group.group_id, group.state.value, group.generation_id, reason)
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                member.assignment = b""
                if member.sync_token is not None:
                    self._reply(member.sync_token, SyncResult(ErrorCode.rebalance_in_progress))
                    member.sync_token = None
            group.pending_sync.clear()
            self._cancel_timer(("sync", state.index, group.group_id))
        key = ("join", state.index, group.group_id)
        rebalance_timeout_ms = group.rebalance_timeout_ms()
        if group.state is GroupState.EMPTY:
            delay = min(self.config.initial_rebalance_delay_ms, rebalance_timeout_ms)
            group.in_initial_delay = delay > 0
            group.initial_delay_remaining_ms = rebalance_timeout_ms - delay
            group.new_member_added = False
            self._set_timer(key, now_ms + delay)
        else:
            group.in_initial_delay = False
            self._set_timer(key, now_ms + rebalance_timeout_ms)
        group.transition(GroupState.PREPARING_REBALANCE, now_ms)
        self._try_complete_join(state, group, now_ms)

    def _try_complete_join(self, state: PartitionState, group: Group, now_ms: int) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if not group.members or (not group.in_initial_delay and group.all_members_joined()):
            self._complete_join(state, group, now_ms)

    def _join_deadline(self, state: PartitionState, group: Group, now_ms: int) -> None:
        if group.in_initial_delay and group.new_member_added and (
                group.initial_delay_remaining_ms > 0):
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
            group.initial_delay_remaining_ms -= delay
            group.new_member_added = False
            self._set_timer(("join", state.index, group.group_id), now_ms + delay)
            return
        self._complete_join(state, group, now_ms)

    def _complete_join(self, state: PartitionState, group: Group, now_ms: int) -> None:
        self._cancel_timer(("join", state.index, group.group_id))
        group.in_initial_delay = False
        for member in list(group.members.values()):
            if member.join_token is None and member.group_instance_id is None:
                log.info("member %s of group %s did not rejoin in time; removed",
                         member.member_id, group.group_id)
                self._remove_member(state, group, member)
        leader = group.members.get(group.leader or "")
        if group.members and (leader is None or leader.join_token is None):
            # The leader did not rejoin (a static one stays a member): a member that did
            # leads; if none did, wait another rebalance timeout (Kafka's
            # maybeElectNewJoinedLeader) until their sessions expire or they come back.
            joined = next((m.member_id for m in group.members.values()
                           if m.join_token is not None), None)
            if joined is None:
                log.warning("group %s could not complete its rebalance: no member rejoined",
                            group.group_id)
                self._set_timer(("join", state.index, group.group_id),
                                now_ms + group.rebalance_timeout_ms())
                return
            group.leader = joined
        group.generation_id += 1
        if not group.members:
            group.protocol = None
            group.leader = None
            group.transition(GroupState.EMPTY, now_ms)
            self._append(state.index, [self._group_record(group, now_ms)], [])
            return
        group.protocol = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        log.info("stabilized group %s generation %d with %d member(s), leader %s",
                 group.group_id, group.generation_id, len(group.members), group.leader)
        for member in group.members.values():
            if member.join_token is not None:
                self._reply(member.join_token, self._join_result(group, member, False))
                member.join_token = None
            self._schedule_heartbeat(state.index, group, member, now_ms)
        group.pending_sync = set(group.members)
        self._set_timer(("sync", state.index, group.group_id),
                        now_ms + group.rebalance_timeout_ms())

    def _join_result(self, group: Group, member: Member, skip_assignment: bool) -> JoinResult:
        is_leader = member.member_id == group.leader
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if is_leader:
            members = tuple((m.member_id, m.group_instance_id, m.metadata_for(group.protocol))
                            for m in group.members.values())
        return JoinResult(_NONE, member.member_id, group.generation_id, group.protocol_type,
                          group.protocol, group.leader or "", skip_assignment and is_leader,
                          members)

    # -- SyncGroup ----------------------------------------------------------------------

    def sync_group(self, token: int, request: SyncRequest, now_ms: int) -> None:
        state, error = self._active(request.group_id)
        group = state.groups.get(request.group_id) if state is not None else None
        if error is _NONE and not request.group_id:
            error = ErrorCode.invalid_group_id
        elif error is _NONE and (group is None or group.state is GroupState.DEAD):
            error = ErrorCode.unknown_member_id
        if error is _NONE:
            assert group is not None
            error = self._validate_member(group, request.member_id, request.group_instance_id)
            if error is _NONE and request.generation_id != group.generation_id:
                error = ErrorCode.illegal_generation
            elif error is _NONE and (
                (request.protocol_type is not None
                 and request.protocol_type != group.protocol_type)
                or (request.protocol_name is not None and request.protocol_name != group.protocol)
            ):
                error = ErrorCode.inconsistent_group_protocol
            elif error is _NONE and group.state is GroupState.PREPARING_REBALANCE:
                error = ErrorCode.rebalance_in_progress
            elif error is _NONE and group.state is GroupState.EMPTY:
                error = ErrorCode.unknown_member_id
        if error is not _NONE:
            self._reply(token, SyncResult(error))
            return
        assert state is not None and group is not None
        member = group.members[request.member_id]
        group.pending_sync.discard(member.member_id)
        if not group.pending_sync:  # everyone synced: no one to drop at the deadline
            self._cancel_timer(("sync", state.index, group.group_id))
        self._schedule_heartbeat(state.index, group, member, now_ms)
        if group.state is GroupState.STABLE:
            self._reply(token, self._sync_result(group, member))
            return
        if member.sync_token is not None:
            self._reply(member.sync_token, SyncResult(ErrorCode.unknown_member_id))
        member.sync_token = token
        if member.member_id != group.leader:
            return
        assignments = dict(request.assignments)
        for each in group.members.values():
            each.assignment = assignments.get(each.member_id, b"")
        group.transition(GroupState.STABLE, now_ms)
        log.info("assignment received from leader %s for group %s generation %d",
                 member.member_id, group.group_id, group.generation_id)
        replies = []
        for each in group.members.values():
            if each.sync_token is not None:
                replies.append(Reply(each.sync_token, self._sync_result(group, each)))
                each.sync_token = None
        self._append(state.index, [self._group_record(group, now_ms)], replies)

    @staticmethod
    def _sync_result(group: Group, member: Member) -> SyncResult:
        return SyncResult(_NONE, member.assignment, group.protocol_type, group.protocol)

    # -- Heartbeat and LeaveGroup ---------------------------------------------------------

    def heartbeat(self, token: int, request: HeartbeatRequest, now_ms: int) -> None:
        state, error = self._active(request.group_id)
        group = state.groups.get(request.group_id) if state is not None else None
        if error is _NONE:
            if group is None or group.state is GroupState.EMPTY:
                error = ErrorCode.unknown_member_id
            elif group.state is GroupState.DEAD:
                error = ErrorCode.coordinator_not_available
            else:
                error = self._validate_member(group, request.member_id,
                                              request.group_instance_id)
                if error is _NONE and request.generation_id != group.generation_id:
                    error = ErrorCode.illegal_generation
        if error is _NONE:
            assert state is not None and group is not None
            self._schedule_heartbeat(state.index, group, group.members[request.member_id],
                                     now_ms)
            if group.state is GroupState.PREPARING_REBALANCE:
                error = ErrorCode.rebalance_in_progress
        self._reply(token, error)

    def leave_group(self, token: int, group_id: str, members: Sequence[LeaveMember],
                    now_ms: int) -> None:
        """Reply: (top-level error, per-member errors in request order)."""
        state, error = self._active(group_id)
        if error is not _NONE or state is None:
            self._reply(token, (error, [error] * len(members)))
            return
        group = state.groups.get(group_id)
        results: list[ErrorCode] = []
        removed = False
        for leaving in members:
            if group is None or group.state is GroupState.DEAD:
                results.append(ErrorCode.unknown_member_id)
                continue
            member_id = leaving.member_id
            if leaving.group_instance_id is not None and not member_id:
                member_id = group.static_members.get(leaving.group_instance_id, "")
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self._cancel_timer(("pending", state.index, group_id, member_id))
                results.append(_NONE)
                removed = True
                continue
            member_error = self._validate_member(group, member_id, leaving.group_instance_id)
            results.append(member_error)
            if member_error is _NONE:
                self._remove_member(state, group, group.members[member_id])
                removed = True
        if removed and group is not None:
            self._after_member_removed(state, group, now_ms, "members left the group")
        self._reply(token, (_NONE, results))

    def _validate_member(self, group: Group, member_id: str, instance: str | None) -> ErrorCode:
        if instance is not None:
            known = group.static_members.get(instance)
            if known is None:
                return ErrorCode.unknown_member_id
            if known != member_id:
                return ErrorCode.fenced_instance_id
            return _NONE
        return _NONE if member_id in group.members else ErrorCode.unknown_member_id

    def _remove_member(self, state: PartitionState, group: Group, member: Member) -> None:
        self._fail_waiting(member, ErrorCode.unknown_member_id)
        del group.members[member.member_id]
        if member.group_instance_id is not None:
            group.static_members.pop(member.group_instance_id, None)
        group.pending_sync.discard(member.member_id)
        self._cancel_timer(("heartbeat", state.index, group.group_id, member.member_id))
        if group.leader == member.member_id:
            group.leader = next(iter(group.members), None)

    def _after_member_removed(self, state: PartitionState, group: Group, now_ms: int,
                              reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(state, group, now_ms, reason)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(state, group, now_ms)

    def _fail_waiting(self, member: Member, error: ErrorCode) -> None:
        if member.join_token is not None:
            self._reply(member.join_token, JoinResult(error, member.member_id))
            member.join_token = None
        if member.sync_token is not None:
            self._reply(member.sync_token, SyncResult(error))
            member.sync_token = None

    def _schedule_heartbeat(self, partition: int, group: Group, member: Member,
                            now_ms: int) -> None:
        self._set_timer(("heartbeat", partition, group.group_id, member.member_id),
                        now_ms + member.session_timeout_ms)

    # -- timers -------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Act on every deadline at or before `now_ms`."""
        while self._timers and self._timers[0][0] <= now_ms:
            deadline, _, key = heapq.heappop(self._timers)
            if self._deadlines.get(key) != deadline:
                continue
            del self._deadlines[key]
            self._fire(key, now_ms)

    def _fire(self, key: TimerKey, now_ms: int) -> None:
        kind, partition = key[0], key[1]
        state = self.partitions.get(partition)
        if state is None:
            return
        if kind == "expire":
            self._expire_offsets(state, now_ms)
            self._set_timer(key, now_ms + self.config.offsets_retention_check_interval_ms)
            return
        group = state.groups.get(key[2])
        if group is None:
            return
        if kind in ("csession", "crevoke"):
            self._consumer_timer(state, group, kind, key[3], now_ms)
        elif kind == "cregex":
            self._resolve_regexes(state, group, now_ms)
        elif kind == "heartbeat":
            member = group.members.get(key[3])
            if member is not None and member.join_token is None and member.sync_token is None:
                self._remove_member(state, group, member)
                self._after_member_removed(state, group, now_ms,
                                           f"member {member.member_id} session expired")
            elif member is not None:  # waiting in a rebalance: the rebalance timeout rules
                # (Kafka's hasSatisfiedHeartbeat: a member awaiting its join or sync answer)
                self._schedule_heartbeat(partition, group, member, now_ms)
        elif kind == "pending":
            if key[3] in group.pending_members:
                group.pending_members.discard(key[3])
                self._try_complete_join(state, group, now_ms)
        elif kind == "join" and group.state is GroupState.PREPARING_REBALANCE:
            self._join_deadline(state, group, now_ms)
        elif kind == "sync" and group.pending_sync and group.state in (
                GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            # Kafka's expirePendingSync: who has not sent SyncGroup by the rebalance timeout
            # is removed, even once the leader's assignment made the group stable.
            for member_id in list(group.pending_sync):
                member = group.members.get(member_id)
                if member is not None:
                    self._remove_member(state, group, member)
            self._prepare_rebalance(state, group, now_ms,
                                    "members did not sync before the rebalance timeout")

    # -- offsets ------------------------------------------------------------------------

    def commit_offsets(self, token: int, request: CommitRequest, now_ms: int) -> None:
        """Reply: a per-partition error list in request order (or one error for all)."""
        state, error = self._active(request.group_id)
        if state is None or error is not _NONE:
            self._reply(token, [error] * len(request.partitions))
            return
        group = state.groups.get(request.group_id)
        error = validate_offset_commit(group, request, transactional=False)
        if error is not _NONE:
            self._reply(token, [error] * len(request.partitions))
            return
        if group is None:
            group = state.groups[request.group_id] = Group(request.group_id,
                                                           state_timestamp_ms=now_ms)
        if request.member_id in group.members and group.state is GroupState.STABLE:
            self._schedule_heartbeat(state.index, group, group.members[request.member_id],
                                     now_ms)
        results: list[ErrorCode] = []
        records = []
        expire = now_ms + request.retention_ms if request.retention_ms > 0 else -1
        for wanted in request.partitions:
            metadata = wanted.metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_bytes_max:
                results.append(ErrorCode.offset_metadata_too_large)
                continue
            results.append(_NONE)
            key = OffsetCommitKey(group=request.group_id, topic=wanted.topic,
                                  partition=wanted.partition)
            value = OffsetCommitValue(offset=wanted.offset, leader_epoch=wanted.leader_epoch,
                                      metadata=metadata, commit_timestamp=now_ms,
                                      expire_timestamp=expire)
            records.append(CoordinatorRecord(key, value))
            self._replay_offset(state, key, value)
        if group.is_empty_shell() and not group.has_metadata_record:
            state.groups.pop(group.group_id, None)
        if records:
            self._append(state.index, records, [Reply(token, results)])
        else:
            self._reply(token, results)

    def _replay_offset(self, state: PartitionState, key: OffsetCommitKey,
                       value: CoordinatorValue | None) -> None:
        group = state.groups.get(key.group)
        if value is None:
            if group is not None:
                group.offsets.pop((key.topic, key.partition), None)
                if group.is_empty_shell() and not group.has_metadata_record:
                    del state.groups[key.group]
            return
        invariant(isinstance(value, OffsetCommitValue), "an offset key holds an offset")
        assert isinstance(value, OffsetCommitValue)
        if group is None:
            group = state.groups[key.group] = Group(key.group)
        group.offsets[(key.topic, key.partition)] = value

    # -- transactional offsets (TxnOffsetCommit) ---------------------------------------------

    def txn_commit_offsets(self, token: int, request: CommitRequest, producer_id: int,
                           producer_epoch: int, now_ms: int) -> None:
        """TxnOffsetCommit: the offsets are written in a transactional batch of the producer
        and stay pending until the transaction's COMMIT marker on this partition
        (`complete_txn_offsets`); an ABORT drops them. Reply as commit_offsets."""
        state, error = self._active(request.group_id)
        if state is None or error is not _NONE:
            self._reply(token, [error] * len(request.partitions))
            return
        group = state.groups.get(request.group_id)
        error = validate_offset_commit(group, request, transactional=True)
        if error is not _NONE:
            self._reply(token, [error] * len(request.partitions))
            return
        if group is None:
            group = state.groups[request.group_id] = Group(request.group_id,
                                                           state_timestamp_ms=now_ms)
        results: list[ErrorCode] = []
        records = []
        for wanted in request.partitions:
            metadata = wanted.metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_bytes_max:
                results.append(ErrorCode.offset_metadata_too_large)
                continue
            results.append(_NONE)
            key = OffsetCommitKey(group=request.group_id, topic=wanted.topic,
                                  partition=wanted.partition)
            value = OffsetCommitValue(offset=wanted.offset, leader_epoch=wanted.leader_epoch,
                                      metadata=metadata, commit_timestamp=now_ms)
            records.append(CoordinatorRecord(key, value))
            self._pend_txn_offset(state, producer_id, key, value)
        if records:
            self._appends.append(Append(state.index, tuple(records), (Reply(token, results),),
                                        producer_id, producer_epoch))
        else:
            if group.is_empty_shell() and not group.has_metadata_record:
                state.groups.pop(group.group_id, None)
            self._reply(token, results)

    def _pend_txn_offset(self, state: PartitionState, producer_id: int, key: OffsetCommitKey,
                         value: OffsetCommitValue) -> None:
        group = state.groups.get(key.group)
        if group is None:
            group = state.groups[key.group] = Group(key.group)
        group.pending_txn_offsets.setdefault(producer_id, {})[(key.topic, key.partition)] = value

    def complete_txn_offsets(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT or ABORT marker of `producer_id` is in the partition's log (committed, or
        replayed while loading): its pending offsets become visible, or are dropped."""
        state = self.partitions.get(partition)
        if state is None:
            return
        for group in list(state.groups.values()):
            pending = group.pending_txn_offsets.pop(producer_id, None)
            if pending is None:
                continue
            if commit:
                group.offsets.update(pending)
            if group.is_empty_shell() and not group.has_metadata_record:
                del state.groups[group.group_id]

    def unstable_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """The partitions with transactional offsets not yet committed or aborted (OffsetFetch
        with require_stable answers UNSTABLE_OFFSET_COMMIT for them)."""
        state = self.partitions.get(self.partition_for(group_id))
        group = None if state is None else state.groups.get(group_id)
        if group is None:
            return set()
        return {each for pending in group.pending_txn_offsets.values() for each in pending}

    def fetch_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, int]] | None,
        member_id: str | None = None, member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict[tuple[str, int], CommittedOffset]]:
        """Committed offsets of `partitions` (all of the group's when None); a partition
        without one is absent from the result. `member_id`/`member_epoch`: OffsetFetch v9's,
        checked against a consumer group's member as Kafka's validateOffsetFetch does (an
        admin sends neither; a classic group checks nothing)."""
        state, error = self._active(group_id)
        if state is None:
            return error, {}
        group = state.groups.get(group_id)
        if group is None:
            return _NONE, {}
        if group.consumer is not None and (member_id is not None or member_epoch >= 0):
            member = group.consumer.members.get(member_id or "")
            if member is None:
                return ErrorCode.unknown_member_id, {}
            if member.member_epoch != member_epoch:
                return ErrorCode.stale_member_epoch, {}
        wanted: Iterable[tuple[str, int]] = (
            group.offsets.keys() if partitions is None else partitions)
        found = {}
        for topic_partition in wanted:
            value = group.offsets.get(topic_partition)
            if value is not None:
                found[topic_partition] = CommittedOffset(value.offset, value.leader_epoch,
                                                         value.metadata)
        return _NONE, found

    def _expire_offsets(self, state: PartitionState, now_ms: int) -> None:
        """KIP-211: an empty group's offsets expire `offsets.retention` after it became
        empty (or after their commit, for groups without a protocol); an active consumer
        group's offsets expire only for topics no member subscribes to."""
        retention = self.config.offsets_retention_ms
        records = []
        for group in list(state.groups.values()):
            subscribed = group.subscribed_topics() if group.has_members() else set()
            if group.has_members() and subscribed is None:
                continue
            assert subscribed is not None
            for (topic, partition), value in list(group.offsets.items()):
                if value.expire_timestamp >= 0:
                    expired = now_ms >= value.expire_timestamp
                elif group.has_members():
                    expired = topic not in subscribed and (
                        now_ms - value.commit_timestamp >= retention)
                else:
                    base = max(value.commit_timestamp, group.state_timestamp_ms
                               if group.protocol_type else -1)
                    expired = now_ms - base >= retention
                if expired:
                    key = OffsetCommitKey(group=group.group_id, topic=topic, partition=partition)
                    records.append(CoordinatorRecord(key, None))
                    del group.offsets[(topic, partition)]
            if group.is_empty_shell() and group.state is GroupState.EMPTY:
                if group.consumer is not None:
                    records.extend(consumer_records.tombstones(group.consumer))
                if group.has_metadata_record:
                    records.append(CoordinatorRecord(GroupMetadataKey(group=group.group_id),
                                                     None))
                del state.groups[group.group_id]
        if records:
            self._append(state.index, records, [])

    # -- admin: list, describe, delete ------------------------------------------------------

    def list_groups(self, states: Iterable[str] = (),
                    types: Iterable[str] = ()) -> list[GroupListing]:
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        found = []
        for state in self.partitions.values():
            if state.status is not PartitionStatus.ACTIVE:
                continue
            for group in state.groups.values():
                listing = self._listing(group)
                if listing.state in (GroupState.DEAD, ConsumerGroupState.DEAD):
                    continue
                if wanted_states and listing.state.value.lower() not in wanted_states:
                    continue
                if wanted_types and listing.group_type not in wanted_types:
                    continue
                found.append(listing)
        return found

    @staticmethod
    def _listing(group: Group) -> GroupListing:
        if group.consumer is not None:
            return GroupListing(group.group_id, CONSUMER_PROTOCOL_TYPE, group.consumer.state(),
                                "consumer")
        return GroupListing(group.group_id, group.protocol_type, group.state)

    def describe_group(self, group_id: str) -> GroupDescription:
        state, error = self._active(group_id)
        group = state.groups.get(group_id) if state is not None else None
        if group is None:
            if error is _NONE:
                error = ErrorCode.group_id_not_found
            return GroupDescription(error, group_id, GroupState.DEAD, "", "", ())
        if group.consumer is not None:
            # Kafka 4.0 describes only classic groups here (the consumer protocol's groups
            # answer ConsumerGroupDescribe): "not a classic group", Dead
            return GroupDescription(ErrorCode.group_id_not_found, group_id, GroupState.DEAD,
                                    "", "", (), f"Group {group_id} is not a classic group.")
        stable = group.state is GroupState.STABLE
        members = tuple(
            MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                              m.metadata_for(group.protocol) if stable else b"",
                              m.assignment if stable else b"")
            for m in group.members.values())
        return GroupDescription(_NONE, group_id, group.state, group.protocol_type,
                                (group.protocol or "") if stable else "", members)

    def delete_group(self, token: int, group_id: str, now_ms: int) -> None:
        """Reply: the group's error code."""
        state, error = self._active(group_id)
        group = state.groups.get(group_id) if state is not None else None
        if error is _NONE and (group is None or group.state is GroupState.DEAD):
            error = ErrorCode.group_id_not_found
        elif error is _NONE and group is not None and (
                group.state is not GroupState.EMPTY or group.has_members()):
            error = ErrorCode.non_empty_group
        if error is not _NONE or state is None or group is None:
            self._reply(token, error)
            return
        records = [CoordinatorRecord(OffsetCommitKey(group=group_id, topic=t, partition=p), None)
                   for t, p in group.offsets]
        if group.consumer is not None:
            records.extend(consumer_records.tombstones(group.consumer))
        else:
            records.append(CoordinatorRecord(GroupMetadataKey(group=group_id), None))
        group.transition(GroupState.DEAD, now_ms)
        del state.groups[group_id]
        for key in [k for k in self._deadlines if k[1] == state.index and len(k) > 2
                    and k[2] == group_id]:
            del self._deadlines[key]
        self._append(state.index, records, [Reply(token, _NONE)])

    def delete_offsets(self, token: int, group_id: str,
                       partitions: Sequence[tuple[str, int]], now_ms: int) -> None:
        """Reply: (group error, per-partition errors in request order)."""
        state, error = self._active(group_id)
        group = state.groups.get(group_id) if state is not None else None
        if error is _NONE and (group is None or group.state is GroupState.DEAD):
            error = ErrorCode.group_id_not_found
        subscribed: set[str] | None = set()
        if error is _NONE and group is not None and group.has_members():
            subscribed = group.subscribed_topics()
            if subscribed is None:
                error = ErrorCode.non_empty_group
        if error is not _NONE or state is None or group is None or subscribed is None:
            self._reply(token, (error, []))
            return
        results = []
        records = []
        for topic, partition in partitions:
            if topic in subscribed:
                results.append(ErrorCode.group_subscribed_to_topic)
                continue
            results.append(_NONE)
            if (topic, partition) in group.offsets:
                key = OffsetCommitKey(group=group_id, topic=topic, partition=partition)
                records.append(CoordinatorRecord(key, None))
                self._replay_offset(state, key, None)
        if records:
            self._append(state.index, records, [Reply(token, (_NONE, results))])
        else:
            self._reply(token, (_NONE, results))

    # -- KIP-848 consumer groups ------------------------------------------------------------

    def update_topics(self, topics: Mapping[str, TopicInfo], now_ms: int) -> None:
        """The metadata image's topics changed (created, deleted, partitions added): every
        consumer group whose subscribed topics changed gets a new group epoch and target."""
        self.topics = dict(topics)
        self.topic_names = {info.topic_id: name for name, info in topics.items()}
        for state in self.partitions.values():
            if state.status is not PartitionStatus.ACTIVE:
                continue
            for group in list(state.groups.values()):
                consumer = group.consumer
                if consumer is None or not consumer.members:
                    continue
                # settled regexes follow the topics at once (a pending one waits its timer)
                self._resolve(consumer, consumer.used_regexes() - consumer.pending_regexes,
                              now_ms)
                if self._refresh_subscription(consumer):
                    consumer.group_epoch += 1
                    log.info("consumer group %s: subscribed topic metadata changed; group "
                             "epoch %d", consumer.group_id, consumer.group_epoch)
                    self._compute_target(consumer)
                    self._persist_consumer(state, group)

    def update_group_configs(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """The metadata image's GROUP config resources (consumer.session.timeout.ms,
        consumer.heartbeat.interval.ms) changed: they rule each group's next heartbeats and
        session deadlines."""
        self.group_configs = dict(configs)

    def _group_int(self, group_id: str, key: str, default: int) -> int:
        text = self.group_configs.get(group_id, {}).get(key)
        try:  # checked by the controller; a bad record still never breaks the coordinator
            value = default if text is None else int(text)
        except ValueError:
            return default
        return value if value > 0 else default

    def session_timeout_ms(self, group_id: str) -> int:
        """A consumer group's session timeout: its consumer.session.timeout.ms, else
        group.consumer.session.timeout.ms."""
        return self._group_int(group_id, "consumer.session.timeout.ms",
                               self.config.consumer_session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._group_int(group_id, "consumer.heartbeat.interval.ms",
                               self.config.consumer_heartbeat_interval_ms)

    def consumer_group_heartbeat(self, token: int, request: ConsumerHeartbeat,
                                 now_ms: int) -> None:
        """Reply: a ConsumerHeartbeatResult."""
        state, error = self._active(request.group_id)
        message = None
        if error is _NONE:
            error, message = self._check_heartbeat(request)
        if state is None or error is not _NONE:
            self._reply(token, ConsumerHeartbeatResult(error, message))
            return
        group = state.groups.get(request.group_id)
        if group is not None and group.consumer is None:
            if group.members or group.pending_members:
                self._reply(token, ConsumerHeartbeatResult(
                    ErrorCode.group_id_not_found,
                    f"group {request.group_id} is not a consumer group"))
                return
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            self._consumer_leave(state, group, token, request, now_ms)
            return
        if request.member_epoch != 0 and (group is None or group.consumer is None):
            self._reply(token, ConsumerHeartbeatResult(ErrorCode.unknown_member_id,
                                                       "unknown member"))
            return
        if group is None:
            group = state.groups[request.group_id] = Group(request.group_id,
                                                           state_timestamp_ms=now_ms)
        if group.consumer is None:
            group.consumer = ConsumerGroup(request.group_id)
            if group.has_metadata_record:  # an empty classic group becomes a consumer group
                group.has_metadata_record = False
                self._append(state.index, [CoordinatorRecord(
                    GroupMetadataKey(group=group.group_id), None)], [])
        consumer = group.consumer
        if request.member_epoch == 0:
            result = self._consumer_join(consumer, request)
        else:
            result = self._consumer_member(consumer, request)
        if isinstance(result, ConsumerHeartbeatResult):
            if not consumer.members and group.is_empty_shell():
                state.groups.pop(group.group_id, None)
            self._reply(token, result)
            return
        self._consumer_heartbeat(state, consumer, result, request, token, now_ms)

    def _check_heartbeat(self, request: ConsumerHeartbeat) -> tuple[ErrorCode, str | None]:
        """Kafka's request validation: an error code and its message."""
        invalid = ErrorCode.invalid_request
        if not request.group_id:
            return invalid, "GroupId can't be empty"
        if request.instance_id is not None and not request.instance_id:
            return invalid, "InstanceId can't be empty"
        if request.rack_id is not None and not request.rack_id:
            return invalid, "RackId can't be empty"
        if request.member_epoch < STATIC_LEAVE_EPOCH:
            return invalid, f"MemberEpoch {request.member_epoch} is invalid"
        if not request.member_id and (request.client_generates_member_id
                                      or request.member_epoch != 0):
            return invalid, "MemberId can't be empty"
        if request.member_epoch == 0:
            if request.rebalance_timeout_ms == -1:
                return invalid, "RebalanceTimeoutMs must be provided in first request"
            if request.owned is None or any(request.owned.values()):
                return invalid, "TopicPartitions must be empty when (re-)joining"
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                return invalid, ("SubscribedTopicNames or SubscribedTopicRegex must be set in "
                                 "first request")
        if request.server_assignor is not None and (
                request.server_assignor not in self.config.consumer_assignors):
            return (ErrorCode.unsupported_assignor,
                    f"assignor {request.server_assignor} is not one of "
                    f"{', '.join(self.config.consumer_assignors)}")
        if request.subscribed_topic_regex and compile_regex(
                request.subscribed_topic_regex) is None:
            return (ErrorCode.invalid_regular_expression,
                    f"SubscribedTopicRegex {request.subscribed_topic_regex!r} does not compile")
        return _NONE, None

    def _consumer_join(self, consumer: ConsumerGroup,
                       request: ConsumerHeartbeat) -> ConsumerMember | ConsumerHeartbeatResult:
        member_id = request.member_id or self._new_member_id("consumer")
        instance = request.instance_id
        member = consumer.members.get(member_id)
        if instance is not None:
            holder_id = consumer.static_members.get(instance)
            holder = None if holder_id is None else consumer.members.get(holder_id)
            if holder is not None and holder_id != member_id:
                if not holder.left_temporarily:
                    return ConsumerHeartbeatResult(
                        ErrorCode.unreleased_instance_id,
                        f"static member {instance} is still in use by {holder_id}")
                return self._replace_static_member(consumer, holder, member_id)
        if member is not None:  # a rejoin: it owns nothing now (its heartbeat says so)
            consumer.set_owned(member, {}, {})
            member.member_epoch = member.previous_member_epoch = 0
            member.state = MemberState.STABLE
            member.left_temporarily = False
            return member
        if len(consumer.members) >= self.config.consumer_group_size_max:
            return ConsumerHeartbeatResult(ErrorCode.group_max_size_reached,
                                           f"group {consumer.group_id} is full")
        member = ConsumerMember(member_id, instance_id=instance)
        consumer.members[member_id] = member
        if instance is not None:
            consumer.static_members[instance] = member_id
        consumer.group_epoch += 1  # a new member
        return member

    @staticmethod
    def _replace_static_member(consumer: ConsumerGroup, old: ConsumerMember,
                               member_id: str) -> ConsumerMember:
        """A static member back under a new member id takes over its predecessor's place:
        same epoch, same partitions, no rebalance."""
        assigned, pending = old.assigned, old.pending_revocation
        consumer.set_owned(old, {}, {})
        del consumer.members[old.member_id]
        target = consumer.target.pop(old.member_id, None)
        member = ConsumerMember(member_id, instance_id=old.instance_id, rack_id=old.rack_id,
                                rebalance_timeout_ms=old.rebalance_timeout_ms,
                                subscribed_topic_names=old.subscribed_topic_names,
                                subscribed_topic_regex=old.subscribed_topic_regex,
                                server_assignor=old.server_assignor, state=old.state,
                                member_epoch=old.member_epoch,
                                previous_member_epoch=old.previous_member_epoch)
        consumer.members[member_id] = member
        consumer.set_owned(member, assigned, pending)
        if target is not None:
            consumer.target[member_id] = target
        assert old.instance_id is not None
        consumer.static_members[old.instance_id] = member_id
        return member

    @staticmethod
    def _consumer_member(consumer: ConsumerGroup,
                         request: ConsumerHeartbeat) -> ConsumerMember | ConsumerHeartbeatResult:
        member = consumer.members.get(request.member_id)
        if member is None:
            return ConsumerHeartbeatResult(ErrorCode.unknown_member_id,
                                           f"member {request.member_id} is not in the group")
        if request.instance_id is not None and member.instance_id != request.instance_id:
            return ConsumerHeartbeatResult(ErrorCode.fenced_instance_id,
                                           "the instance id does not match the member")
        if request.member_epoch != member.member_epoch:
            owned = request.owned
            previous_ok = (request.member_epoch == member.previous_member_epoch
                           and owned is not None and owns_all(member.assigned, owned))
            if not previous_ok:
                return ConsumerHeartbeatResult(
                    ErrorCode.fenced_member_epoch,
                    f"member epoch {request.member_epoch} is not the current "
                    f"{member.member_epoch}")
        return member

    def _consumer_heartbeat(self, state: PartitionState, consumer: ConsumerGroup,
                            member: ConsumerMember, request: ConsumerHeartbeat, token: int,
                            now_ms: int) -> None:
        before = (dict(member.assigned), member.member_epoch)
        regex_before = member.subscribed_topic_regex
        before_names = member.subscribed_topic_names
        assignor_changed = (request.server_assignor is not None
                            and request.server_assignor != member.server_assignor)
        changed = self._update_member(member, request)
        regex = member.subscribed_topic_regex
        if consumer.refresh_regexes and consumer.used_regexes():
            # the group was loaded: its regexes are resolved again (after this heartbeat)
            # against the image this coordinator follows, as Kafka does with a newer image
            self._set_timer(("cregex", state.index, consumer.group_id), now_ms)
        if regex != regex_before and regex and regex not in consumer.resolved_regexes:
            # A regex the group has not resolved: Kafka resolves it in the background and
            # bumps the group epoch when done; the member gets those partitions in a later
            # heartbeat. Until then it matches nothing (and alone changes no epoch).
            consumer.pending_regexes.add(regex)
            self._set_timer(("cregex", state.index, consumer.group_id), now_ms)
            changed = (request.subscribed_topic_names is not None
                       and tuple(sorted(set(request.subscribed_topic_names)))
                       != before_names) or assignor_changed
        changed |= self._refresh_subscription(consumer)
        if changed and consumer.group_epoch == consumer.assignment_epoch:
            consumer.group_epoch += 1  # (a join has bumped it already)
        everyone = request.member_epoch == 0 or consumer.group_epoch > consumer.assignment_epoch
        if consumer.group_epoch > consumer.assignment_epoch:
            log.info("consumer group %s: computing the assignment of group epoch %d (%s)",
                     consumer.group_id, consumer.group_epoch,
                     f"member {member.member_id} joined" if request.member_epoch == 0
                     else f"member {member.member_id} changed its subscription")
            self._compute_target(consumer)
        was_revoking = member.state is MemberState.UNREVOKED_PARTITIONS
        reconcile(consumer, member, request.owned)
        revoking = member.state is MemberState.UNREVOKED_PARTITIONS
        key = ("crevoke", state.index, consumer.group_id, member.member_id)
        if revoking and not was_revoking:
            self._set_timer(key, now_ms + member.rebalance_timeout_ms)
        elif not revoking:
            self._cancel_timer(key)
        self._set_timer(("csession", state.index, consumer.group_id, member.member_id),
                        now_ms + self.session_timeout_ms(consumer.group_id))
        send_assignment = (request.member_epoch == 0 or before != (member.assigned,
                                                                   member.member_epoch)
                           or (request.owned is not None
                               and {t: p for t, p in request.owned.items() if p}
                               != member.assigned))
        result = ConsumerHeartbeatResult(
            _NONE, None, member.member_id, member.member_epoch,
            self.heartbeat_interval_ms(consumer.group_id),
            dict(member.assigned) if send_assignment else None)
        self._persist_consumer(state, state.groups[consumer.group_id], [Reply(token, result)],
                               None if everyone else (member.member_id,))

    def _persist_consumer(self, state: PartitionState, group: Group,
                          replies: Sequence[Reply] = (),
                          member_ids: Sequence[str] | None = None) -> None:
        """Append what changed in the consumer group (see consumer_records; `member_ids`:
        only they can have changed); the replies go out once it is committed. An empty
        group without offsets is deleted."""
        consumer = group.consumer
        assert consumer is not None
        if not consumer.members and not group.offsets:
            records = consumer_records.tombstones(consumer)
            state.groups.pop(group.group_id, None)
        else:
            records = consumer_records.changes(consumer, member_ids)
        if records:
            self._append(state.index, records, replies)
        else:
            self._replies.extend(replies)

    @staticmethod
    def _update_member(member: ConsumerMember, request: ConsumerHeartbeat) -> bool:
        """Take the heartbeat's non-null fields; True if the subscription changed."""
        changed = False
        if request.subscribed_topic_names is not None:
            names = tuple(sorted(set(request.subscribed_topic_names)))
            changed |= names != member.subscribed_topic_names
            member.subscribed_topic_names = names
        if request.subscribed_topic_regex is not None:
            regex = request.subscribed_topic_regex or None
            changed |= regex != member.subscribed_topic_regex
            member.subscribed_topic_regex = regex
        if request.server_assignor is not None:
            changed |= request.server_assignor != member.server_assignor
            member.server_assignor = request.server_assignor
        if request.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        member.client_id = request.client_id or member.client_id
        member.client_host = request.client_host or member.client_host
        member.left_temporarily = False
        return changed

    def _refresh_subscription(self, consumer: ConsumerGroup) -> bool:
        """Record the subscribed topics' ids and partition counts; True if they changed."""
        names = consumer.subscribed_topics(self.topics)
        metadata = {name: (self.topics[name].topic_id, self.topics[name].partition_count)
                    for name in names if name in self.topics}
        if metadata == consumer.subscription_metadata:
            return False
        consumer.subscription_metadata = metadata
        return True

    def _compute_target(self, consumer: ConsumerGroup) -> None:
        self._refresh_subscription(consumer)
        subscriptions = {}
        for member in consumer.members.values():
            topics = set(member.subscribed_topic_names)
            topics.update(consumer.regex_topics(member.subscribed_topic_regex))
            subscriptions[member.member_id] = topics & consumer.subscription_metadata.keys()
        topics_info = {name: self.topics[name] for name in consumer.subscription_metadata}
        consumer.assignor = self._choose_assignor(consumer)
        consumer.target = ASSIGNORS[consumer.assignor](subscriptions, topics_info,
                                                       consumer.target)
        consumer.assignment_epoch = consumer.group_epoch
        log.info("consumer group %s: target assignment of epoch %d by %s: %s",
                 consumer.group_id, consumer.assignment_epoch, consumer.assignor,
                 {m: sum(len(p) for p in a.values()) for m, a in consumer.target.items()})

    def _choose_assignor(self, consumer: ConsumerGroup) -> str:
        """The assignor most members ask for (ties: the configured order); else the first
        of group.consumer.assignors."""
        votes: dict[str, int] = {}
        for member in consumer.members.values():
            if member.server_assignor is not None:
                votes[member.server_assignor] = votes.get(member.server_assignor, 0) + 1
        if not votes:
            return self.config.consumer_assignors[0]
        order = self.config.consumer_assignors
        return max(votes, key=lambda name: (votes[name], -order.index(name)))

    def _consumer_leave(self, state: PartitionState, group: Group | None, token: int,
                        request: ConsumerHeartbeat, now_ms: int) -> None:
        consumer = None if group is None else group.consumer
        member = None if consumer is None else consumer.members.get(request.member_id)
        if consumer is None or member is None:
            self._reply(token, ConsumerHeartbeatResult(ErrorCode.unknown_member_id,
                                                       "unknown member"))
            return
        if request.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            member.left_temporarily = True  # keeps its partitions until its session expires
            self._reply(token, ConsumerHeartbeatResult(
                _NONE, None, member.member_id, STATIC_LEAVE_EPOCH,
                self.heartbeat_interval_ms(consumer.group_id)))
            return
        self._fence_consumer_member(state, consumer, member, "left the group")
        assert group is not None
        self._persist_consumer(state, group, [Reply(token, ConsumerHeartbeatResult(
            _NONE, None, request.member_id, LEAVE_EPOCH,
            self.heartbeat_interval_ms(consumer.group_id)))])

    def _fence_consumer_member(self, state: PartitionState, consumer: ConsumerGroup,
                               member: ConsumerMember, reason: str) -> None:
        consumer.remove_member(member.member_id)
        for kind in ("csession", "crevoke"):
            self._cancel_timer((kind, state.index, consumer.group_id, member.member_id))
        consumer.group_epoch += 1
        log.info("consumer group %s: member %s %s; group epoch %d", consumer.group_id,
                 member.member_id, reason, consumer.group_epoch)
        if consumer.members:
            self._compute_target(consumer)
        else:
            consumer.target.clear()
            consumer.assignment_epoch = consumer.group_epoch

    def _consumer_timer(self, state: PartitionState, group: Group, kind: str, member_id: str,
                        now_ms: int) -> None:
        consumer = group.consumer
        member = None if consumer is None else consumer.members.get(member_id)
        if consumer is None or member is None:
            return
        if kind == "csession":
            self._fence_consumer_member(state, consumer, member, "session expired")
        elif member.state is MemberState.UNREVOKED_PARTITIONS:
            self._fence_consumer_member(state, consumer, member,
                                        "did not revoke its partitions within the rebalance "
                                        "timeout")
        else:
            return
        self._persist_consumer(state, group)

    def _resolve_regexes(self, state: PartitionState, group: Group, now_ms: int) -> None:
        """The background resolution of the regexes members brought since the last one
        (and, after a load, of all of them): a new group epoch (and target) if a member
        still uses one that is new or now matches other topics, whose next heartbeat then
        carries the partitions. The resolutions are logged with that epoch."""
        consumer = group.consumer
        if consumer is None or not (consumer.pending_regexes or consumer.refresh_regexes):
            return
        used = consumer.used_regexes()
        wanted = used if consumer.refresh_regexes else consumer.pending_regexes & used
        consumer.pending_regexes.clear()
        consumer.refresh_regexes = False
        resolved = self._resolve(consumer, wanted, now_ms)
        if not resolved:
            return
        self._refresh_subscription(consumer)
        consumer.group_epoch += 1
        log.info("consumer group %s: resolved regex(es) %s; group epoch %d", consumer.group_id,
                 sorted(r for r in resolved if r), consumer.group_epoch)
        self._compute_target(consumer)
        self._persist_consumer(state, group)

    def _resolve(self, consumer: ConsumerGroup, regexes: Iterable[str], now_ms: int,
                 ) -> set[str]:
        """Resolve `regexes` against the image's topics; the ones that are new to the group
        or now match other topics (their resolution replaced)."""
        changed = set()
        for regex in regexes:
            topics = resolve_regex(regex, self.topics)
            before = consumer.resolved_regexes.get(regex)
            if before is None or before.topics != topics:
                consumer.resolved_regexes[regex] = ResolvedRegex(topics, -1, now_ms)
                changed.add(regex)
        return changed

    def _drop_consumer_group(self, state: PartitionState, group: Group) -> None:
        """An empty consumer group turns classic (a classic member joins it)."""
        assert group.consumer is not None
        records = consumer_records.tombstones(group.consumer)
        group.consumer = None
        if records:
            self._append(state.index, records, [])

    def consumer_group_describe(self, group_id: str) -> ConsumerGroupDescription:
        state, error = self._active(group_id)
        group = None if state is None else state.groups.get(group_id)
        if state is None:
            return ConsumerGroupDescription(error, None, group_id, "Dead")
        if group is None or group.consumer is None:
            return ConsumerGroupDescription(
                ErrorCode.group_id_not_found,
                f"group {group_id} not found" if group is None
                else f"group {group_id} is not a consumer group", group_id, "Dead")
        consumer = group.consumer
        members = tuple(
            ConsumerMemberDescription(
                m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id,
                m.client_host, m.subscribed_topic_names, m.subscribed_topic_regex,
                self._named(m.assigned), self._named(consumer.target.get(m.member_id, {})))
            for m in consumer.members.values())
        return ConsumerGroupDescription(_NONE, None, group_id, consumer.state().value,
                                        consumer.group_epoch, consumer.assignment_epoch,
                                        consumer.assignor or self.config.consumer_assignors[0],
                                        members)

    def _named(self, assignment: Assignment) -> tuple[tuple[uuid.UUID, str, tuple[int, ...]],
                                                      ...]:
        return tuple((topic_id, self.topic_names.get(topic_id, ""), tuple(sorted(indexes)))
                     for topic_id, indexes in sorted(
                         assignment.items(), key=lambda kv: self.topic_names.get(kv[0], "")))

    # -- records ------------------------------------------------------------------------

    def _append(self, partition: int, records: Sequence[CoordinatorRecord],
                replies: Sequence[Reply]) -> None:
        self._appends.append(Append(partition, tuple(records), tuple(replies)))

    @staticmethod
    def _group_record(group: Group, now_ms: int) -> CoordinatorRecord:
        group.has_metadata_record = True
        members = tuple(
            MemberMetadata(member_id=m.member_id, group_instance_id=m.group_instance_id,
                           client_id=m.client_id, client_host=m.client_host,
                           rebalance_timeout=m.rebalance_timeout_ms,
                           session_timeout=m.session_timeout_ms,
                           subscription=m.metadata_for(group.protocol),
                           assignment=m.assignment)
            for m in group.members.values())
        value = GroupMetadataValue(protocol_type=group.protocol_type,
                                   generation=group.generation_id, protocol=group.protocol,
                                   leader=group.leader, current_state_timestamp=now_ms,
                                   members=members)
        return CoordinatorRecord(GroupMetadataKey(group=group.group_id), value)


def validate_offset_commit(group: Group | None, request: CommitRequest, *,
                           transactional: bool) -> ErrorCode:
    """Kafka's OffsetMetadataManager.validate(Transactional)OffsetCommit: who may commit
    offsets of `group` (None: no such group) with this generation (a member epoch for a
    consumer group). Generation -1 is an admin or a consumer without group management
    (assign()): it may commit to an empty group, whatever member id it sends."""
    generation = request.generation_id
    if group is None:
        if generation < 0:
            return _NONE  # a "simple" group is created
        if not transactional and request.api_version >= 9:
            return ErrorCode.group_id_not_found
        return ErrorCode.illegal_generation
    if group.consumer is not None:
        return _validate_consumer_commit(group.consumer, request, transactional)
    if group.state is GroupState.DEAD:
        return ErrorCode.coordinator_not_available
    if generation < 0 and group.state is GroupState.EMPTY:
        return _NONE
    if generation >= 0 or request.member_id or request.group_instance_id is not None:
        if request.group_instance_id is not None:
            known = group.static_members.get(request.group_instance_id)
            if known is None:
                return ErrorCode.unknown_member_id
            if known != request.member_id:
                return ErrorCode.fenced_instance_id
        if request.member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation != group.generation_id:
            return ErrorCode.illegal_generation
    elif not transactional and group.state is not GroupState.EMPTY:
        return ErrorCode.unknown_member_id  # a v0-style commit to a group in use
    # A member with a valid generation that has not synced yet: it should retry once it has
    # its assignment. TxnOffsetCommit does not look at the group's state.
    if not transactional and group.state is GroupState.COMPLETING_REBALANCE:
        return ErrorCode.rebalance_in_progress
    return _NONE


def _validate_consumer_commit(consumer: ConsumerGroup, request: CommitRequest,
                              transactional: bool) -> ErrorCode:
    """Kafka's ConsumerGroup.validateOffsetCommit: the generation is the member epoch."""
    if request.generation_id < 0 and not consumer.members:
        return _NONE
    # TxnOffsetCommit does not require the member fields: checked only when one is given.
    if transactional and request.generation_id == NO_GENERATION and not request.member_id \
            and request.group_instance_id is None:
        return _NONE
    member = consumer.members.get(request.member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    if not transactional and request.api_version < 9:
        return ErrorCode.unsupported_version  # KIP-848 members commit with v9+
    if request.generation_id != member.member_epoch:
        # TxnOffsetCommit has no STALE_MEMBER_EPOCH: producers understand ILLEGAL_GENERATION
        return ErrorCode.illegal_generation if transactional else ErrorCode.stale_member_epoch
    return _NONE
