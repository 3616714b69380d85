"""KIP-848 consumer groups: state, server-side assignors and reconciliation, sans I/O.

Theory of operation (Kafka's ConsumerGroup / CurrentAssignmentBuilder, written from KIP-848).
A consumer group has a *group epoch*, bumped whenever something the assignment depends on
changes: a member joins or leaves, a subscription changes, a subscribed topic is created,
deleted or gains partitions. When the group epoch runs ahead of the *assignment epoch*, the
coordinator recomputes the *target assignment* with the group's server-side assignor and sets
the assignment epoch to the group epoch. Each member then converges on its target through
heartbeats, one step at a time:

1. Revocation first: partitions the member owns but its target no longer holds are taken
   out of its assignment at once and held as *pending revocation*; the member stays at its
   epoch (UNREVOKED_PARTITIONS) until a heartbeat reports (owned partitions) that it released
   them, or its rebalance timeout fences it.
2. Then assignment: the member moves to the assignment epoch and receives the target
   partitions nobody else still owns; a partition still held by its previous owner (which has
   not yet revoked it) is withheld (UNRELEASED_PARTITIONS) and given on a later heartbeat.

Invariants: a partition is owned (assigned or pending revocation) by at most one member at a
time — `owners` is the index and is changed only through `set_owned`; a member's epoch is
never above the assignment epoch; the assignment epoch is never above the group epoch.

Worked example: members A and B, topic t with partitions 0-3; A owns {0,1}, B owns {2,3}. C
joins: group epoch 3 -> 4, the uniform assignor targets A {0,1}, B {2}, C {3}. B's next
heartbeat gets assignment {2} (3 pending revocation, B stays at epoch 3); C's heartbeats get
epoch 4 and an empty assignment (3 is unreleased) until B reports owned {2}, after which B is
at epoch 4 and C's next heartbeat receives {3}.
"""

from __future__ import annotations

import heapq
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "ConsumerGroup",
    "ConsumerGroupState",
    "ConsumerMember",
    "MemberState",
    "ResolvedRegex",
    "TopicInfo",
    "assign_range",
    "assign_uniform",
    "reconcile",
]

# topic id -> partition indexes
Assignment = dict[uuid.UUID, frozenset[int]]

LEAVE_EPOCH: Final = -1
STATIC_LEAVE_EPOCH: Final = -2
MOVES_PER_PARTITION_MAX: Final = 4  # bound on the uniform assignor's balancing loop


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """What an assignor needs of a topic (from the metadata image the shell follows)."""

    topic_id: uuid.UUID
    name: str
    partition_count: int


class MemberState(Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    state: MemberState = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    left_temporarily: bool = False  # a static member that sent epoch -2


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """A regex's resolution, as the group's ConsumerGroupRegularExpression record holds it:
    the topics it matched, and when (`version`: -1, pykraft does not read it back; see
    consumer_records)."""

    topics: frozenset[str]
    version: int = -1
    timestamp_ms: int = -1


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> partitions
    owners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)
    subscription_metadata: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    assignor: str = ""
    # the latest value per record key in the log (written or replayed): see consumer_records
    persisted: dict[Any, Any] = field(default_factory=dict)
    # Regexes a member brought that the group has not resolved yet: as Kafka, resolution
    # runs after the heartbeat (the "cregex" timer), so they match nothing until then.
    pending_regexes: set[str] = field(default_factory=set)
    # The last resolution of each regex a member uses (logged, and replayed on load: a
    # coordinator that loads the group takes it from the log instead of resolving again).
    resolved_regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    # set on load: the next heartbeat schedules a resolution, as Kafka refreshes a loaded
    # group's regexes against a newer metadata image on its next heartbeat
    refresh_regexes: bool = False

    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def subscribed_topics(self, topic_names: Iterable[str]) -> set[str]:
        """Names (among `topic_names`, the image's) that some member subscribes to: by
        name, or through a regex's last resolution."""
        names: set[str] = set()
        for member in self.members.values():
            names.update(member.subscribed_topic_names)
            names.update(self.regex_topics(member.subscribed_topic_regex))
        return names.intersection(topic_names)

    def regex_topics(self, regex: str | None) -> frozenset[str]:
        """The topics `regex` matched when last resolved (none while it is pending)."""
        resolved = None if not regex else self.resolved_regexes.get(regex)
        return frozenset() if resolved is None else resolved.topics

    def used_regexes(self) -> set[str]:
        return {m.subscribed_topic_regex for m in self.members.values()
                if m.subscribed_topic_regex}

    def set_owned(self, member: ConsumerMember, assigned: Assignment,
                  pending_revocation: Assignment) -> None:
        """Change what `member` owns, keeping `owners` exact."""
        for partitions in (member.assigned, member.pending_revocation):
            for topic_id, indexes in partitions.items():
                for index in indexes:
                    if self.owners.get((topic_id, index)) == member.member_id:
                        del self.owners[(topic_id, index)]
        member.assigned = {t: p for t, p in assigned.items() if p}
        member.pending_revocation = {t: p for t, p in pending_revocation.items() if p}
        for partitions in (member.assigned, member.pending_revocation):
            for topic_id, indexes in partitions.items():
                for index in indexes:
                    self.owners[(topic_id, index)] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.set_owned(member, {}, {})
        self.target.pop(member_id, None)
        if member.instance_id is not None and self.static_members.get(
                member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        return member


def resolve_regex(pattern: str, topic_names: Iterable[str]) -> frozenset[str]:
    """The topics a subscription regex matches whole (none if it does not compile)."""
    compiled = compile_regex(pattern)
    if compiled is None:
        return frozenset()
    return frozenset(n for n in topic_names if compiled.fullmatch(n))


def compile_regex(pattern: str) -> re.Pattern[str] | None:
    """A subscription regex (Kafka takes RE2/J syntax; Python's `re` reads the common
    subset); None when it does not compile."""
    try:
        return re.compile(pattern)
    except re.error:
        return None


# -- assignors ----------------------------------------------------------------------------


def _subscribers(members: Mapping[str, set[str]], topic: str) -> list[str]:
    return sorted(m for m, topics in members.items() if topic in topics)


def assign_range(members: Mapping[str, set[str]], topics: Mapping[str, TopicInfo],
                 current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Per topic, its subscribers (by member id) take consecutive ranges; the first
    `partitions % subscribers` take one more. `current` is unused (range is not sticky)."""
    result: dict[str, Assignment] = {m: {} for m in members}
    for name in sorted(topics):
        info = topics[name]
        subscribers = _subscribers(members, name)
        if not subscribers:
            continue
        quota, extra = divmod(info.partition_count, len(subscribers))
        start = 0
        for position, member_id in enumerate(subscribers):
            count = quota + (1 if position < extra else 0)
            if count:
                result[member_id][info.topic_id] = frozenset(range(start, start + count))
            start += count
    return result


def assign_uniform(members: Mapping[str, set[str]], topics: Mapping[str, TopicInfo],
                   current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Balanced and sticky: a partition stays with its current target owner while that member
    still subscribes to its topic; the rest go to the least-loaded subscriber; then partitions
    move from the most loaded member to a subscriber holding at least two fewer until no such
    move exists, so among members with the same subscriptions counts differ by at most one.

    Cost: O(P log M) to place P partitions among M members, O(M log M + T·M + P/M) per move;
    a member joining an even group moves about P/M partitions."""
    subscribers = {name: _subscribers(members, name) for name in topics}
    owned: dict[str, set[tuple[str, int]]] = {m: set() for m in members}
    by_id = {info.topic_id: name for name, info in topics.items()}
    taken: set[tuple[str, int]] = set()
    for member_id in sorted(current):
        if member_id not in members:
            continue
        for topic_id, indexes in current[member_id].items():
            name = by_id.get(topic_id)
            if name is None or name not in members[member_id]:
                continue
            for index in indexes:
                if index < topics[name].partition_count and (name, index) not in taken:
                    taken.add((name, index))
                    owned[member_id].add((name, index))
    for name in sorted(topics):
        if not subscribers[name]:
            continue
        lightest = [(len(owned[m]), m) for m in subscribers[name]]
        heapq.heapify(lightest)
        for index in range(topics[name].partition_count):
            if (name, index) in taken:
                continue
            while True:  # entries go stale as other topics' partitions land: refresh them
                load, member_id = heapq.heappop(lightest)
                if load == len(owned[member_id]):
                    break
                heapq.heappush(lightest, (len(owned[member_id]), member_id))
            owned[member_id].add((name, index))
            heapq.heappush(lightest, (load + 1, member_id))
    _balance(owned, subscribers, MOVES_PER_PARTITION_MAX * max(1, len(taken)))
    result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for member_id, partitions in owned.items():
        for name, index in partitions:
            result[member_id].setdefault(topics[name].topic_id, set()).add(index)
    return {m: {t: frozenset(p) for t, p in a.items()} for m, a in result.items()}


def _balance(owned: dict[str, set[tuple[str, int]]], subscribers: Mapping[str, list[str]],
             moves_max: int) -> None:
    """Move partitions from heavier members to subscribers holding two or more fewer."""
    for _ in range(moves_max):
        lightest = {name: min(subs, key=lambda m: (len(owned[m]), m))
                    for name, subs in subscribers.items() if subs}
        move = None
        for heavy in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for name, index in sorted(owned[heavy]):
                light = lightest[name]
                if len(owned[light]) + 1 < len(owned[heavy]):
                    move = (heavy, light, (name, index))
                    break
            if move is not None:
                break
        if move is None:
            return
        heavy, light, partition = move
        owned[heavy].discard(partition)
        owned[light].add(partition)


ASSIGNORS: Final = {"uniform": assign_uniform, "range": assign_range}


# -- reconciliation -----------------------------------------------------------------------


def _subtract(left: Assignment, right: Assignment) -> Assignment:
    return {t: p - right.get(t, frozenset()) for t, p in left.items()
            if p - right.get(t, frozenset())}


def _intersect(left: Assignment, right: Assignment) -> Assignment:
    return {t: p & right[t] for t, p in left.items() if t in right and p & right[t]}


def _union(left: Assignment, right: Assignment) -> Assignment:
    merged = dict(left)
    for topic_id, indexes in right.items():
        merged[topic_id] = merged.get(topic_id, frozenset()) | indexes
    return {t: p for t, p in merged.items() if p}


def owns_all(owned: Assignment, wanted: Assignment) -> bool:
    return all(p <= owned.get(t, frozenset()) for t, p in wanted.items())


def reconcile(group: ConsumerGroup, member: ConsumerMember,
              owned: Assignment | None) -> None:
    """Move `member` one step towards its target (see the module's theory of operation).
    `owned` is what the heartbeat reports the member owns (None: unchanged since the last)."""
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or any(owned.get(t, frozenset()) & p
                                for t, p in member.pending_revocation.items()):
            return  # still revoking
        group.set_owned(member, member.assigned, {})
        member.state = MemberState.STABLE
    target = group.target.get(member.member_id, {})
    if member.member_epoch == group.assignment_epoch and member.state is MemberState.STABLE:
        return
    kept = _intersect(member.assigned, target)
    revoking = _subtract(member.assigned, target)
    if revoking:
        group.set_owned(member, kept, revoking)
        member.state = MemberState.UNREVOKED_PARTITIONS
        return
    wanted = _subtract(target, kept)
    free = {t: frozenset(i for i in p if group.owners.get((t, i)) in (None, member.member_id))
            for t, p in wanted.items()}
    group.set_owned(member, _union(kept, free), {})
    if member.member_epoch != group.assignment_epoch:
        member.previous_member_epoch = member.member_epoch
        member.member_epoch = group.assignment_epoch
    member.state = (MemberState.STABLE if owns_all(member.assigned, target)
                    else MemberState.UNRELEASED_PARTITIONS)
