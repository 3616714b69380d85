"""A KIP-848 consumer group as `__consumer_offsets` records, and back by replay.

The coordinator persists a consumer group by difference: `records_of(group)` is the full set
of records (key -> value) that describes the group now; `changes(group)` compares it with
`group.persisted` (what the log holds, written or replayed) and returns the records to
append — new or changed values in Kafka's write order (member subscriptions, resolved
regexes, group epoch, subscription metadata, target assignment, assignment epoch, current
assignments), then tombstones for keys that disappeared (current assignment, target, member,
a regex no member uses any more, then the group's own keys) — and makes `persisted` match.
A regex's resolution (ConsumerGroupRegularExpression) is replayed as it was logged, so a
coordinator that loads the group does not resolve it again. `replay(group, key, value)`
applies one record of the log, so loading a partition rebuilds the same group (members then
heartbeat again).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

from pykraft.broker.group_coordinator.consumer import (
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    ResolvedRegex,
)
from pykraft.broker.group_coordinator.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    CoordinatorRecord,
    TopicMetadata,
    TopicPartitions,
)

__all__ = ["changes", "records_of", "replay", "tombstones"]

# Kafka's MemberState bytes
STATE_CODES: Final = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1,
                      MemberState.UNRELEASED_PARTITIONS: 2}
STATES_BY_CODE: Final = {code: state for state, code in STATE_CODES.items()}
# tombstones go out in this order: a member's assignment before the member, the group last
TOMBSTONE_ORDER: Final[dict[type[Any], int]] = {
    ConsumerGroupCurrentMemberAssignmentKey: 0,
    ConsumerGroupTargetAssignmentMemberKey: 1,
    ConsumerGroupMemberMetadataKey: 2,
    ConsumerGroupRegularExpressionKey: 3,
    ConsumerGroupTargetAssignmentMetadataKey: 4,
    ConsumerGroupPartitionMetadataKey: 5,
    ConsumerGroupMetadataKey: 6,
}


def _partitions(assignment: Assignment) -> tuple[TopicPartitions, ...]:
    return tuple(TopicPartitions(topic_id=topic_id, partitions=tuple(sorted(indexes)))
                 for topic_id, indexes in sorted(assignment.items(), key=lambda kv: kv[0].int)
                 if indexes)


def _assignment(partitions: tuple[TopicPartitions, ...]) -> Assignment:
    return {p.topic_id: frozenset(p.partitions) for p in partitions if p.partitions}


def records_of(group: ConsumerGroup, member_ids: Collection[str] | None = None,
               ) -> dict[ConsumerGroupKey, ConsumerGroupValue]:
    """Every record that describes `group` now, in Kafka's write order; with `member_ids`,
    only the group's own records and those of these members."""
    gid = group.group_id
    wanted: dict[ConsumerGroupKey, ConsumerGroupValue] = {}
    members = list(group.members.values()) if member_ids is None else [
        group.members[m] for m in member_ids if m in group.members]
    targets = list(group.target.items()) if member_ids is None else [
        (m, group.target[m]) for m in member_ids if m in group.target]
    for m in members:
        wanted[ConsumerGroupMemberMetadataKey(group_id=gid, member_id=m.member_id)] = (
            ConsumerGroupMemberMetadataValue(
                instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id,
                client_host=m.client_host, subscribed_topic_names=m.subscribed_topic_names,
                subscribed_topic_regex=m.subscribed_topic_regex,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                server_assignor=m.server_assignor))
    used = group.used_regexes()
    for regex, resolved in sorted(group.resolved_regexes.items()):
        if regex in used:  # (one no member uses any more is tombstoned)
            wanted[ConsumerGroupRegularExpressionKey(group_id=gid, regular_expression=regex)] = (
                ConsumerGroupRegularExpressionValue(
                    topics=tuple(sorted(resolved.topics)), version=resolved.version,
                    timestamp=resolved.timestamp_ms))
    wanted[ConsumerGroupMetadataKey(group_id=gid)] = ConsumerGroupMetadataValue(
        epoch=group.group_epoch)
    wanted[ConsumerGroupPartitionMetadataKey(group_id=gid)] = (
        ConsumerGroupPartitionMetadataValue(topics=tuple(
            TopicMetadata(topic_id=topic_id, topic_name=name, num_partitions=count)
            for name, (topic_id, count) in sorted(group.subscription_metadata.items()))))
    for member_id, target in targets:
        wanted[ConsumerGroupTargetAssignmentMemberKey(group_id=gid, member_id=member_id)] = (
            ConsumerGroupTargetAssignmentMemberValue(topic_partitions=_partitions(target)))
    wanted[ConsumerGroupTargetAssignmentMetadataKey(group_id=gid)] = (
        ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=group.assignment_epoch))
    for m in members:
        wanted[ConsumerGroupCurrentMemberAssignmentKey(group_id=gid, member_id=m.member_id)] = (
            ConsumerGroupCurrentMemberAssignmentValue(
                member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch,
                state=STATE_CODES[m.state], assigned_partitions=_partitions(m.assigned),
                partitions_pending_revocation=_partitions(m.pending_revocation)))
    return wanted


def _diff(group: ConsumerGroup,
          wanted: dict[ConsumerGroupKey, ConsumerGroupValue]) -> list[CoordinatorRecord]:
    records = [CoordinatorRecord(key, value) for key, value in wanted.items()
               if group.persisted.get(key) != value]
    gone = sorted((key for key in group.persisted if key not in wanted),
                  key=lambda key: TOMBSTONE_ORDER[type(key)])
    records.extend(CoordinatorRecord(key, None) for key in gone)
    group.persisted = dict(wanted)
    return records


def changes(group: ConsumerGroup, member_ids: Collection[str] | None = None,
            ) -> list[CoordinatorRecord]:
    """The records that bring the log from `group.persisted` to the group as it is now.
    With `member_ids` (a heartbeat that changed no one else: no new target, nobody added or
    removed) only the group's and these members' records are compared — O(their size)
    instead of O(group). A regex no member uses any more is forgotten (and tombstoned)."""
    used = group.used_regexes()
    for regex in [r for r in group.resolved_regexes if r not in used]:
        del group.resolved_regexes[regex]
    if member_ids is None:
        return _diff(group, records_of(group))
    records = []
    wanted = records_of(group, member_ids)
    for key, value in wanted.items():
        if group.persisted.get(key) != value:
            records.append(CoordinatorRecord(key, value))
            group.persisted[key] = value
    # a member that moved to a new regex may have been the last user of its old one
    for key in [k for k in group.persisted
                if isinstance(k, ConsumerGroupRegularExpressionKey) and k not in wanted]:
        del group.persisted[key]
        records.append(CoordinatorRecord(key, None))
    return records


def tombstones(group: ConsumerGroup) -> list[CoordinatorRecord]:
    """The records that delete the whole group from the log."""
    return _diff(group, {})


def _member(group: ConsumerGroup, member_id: str) -> ConsumerMember:
    member = group.members.get(member_id)
    if member is None:
        member = group.members[member_id] = ConsumerMember(member_id)
    return member


def replay(group: ConsumerGroup, key: ConsumerGroupKey,
           value: ConsumerGroupValue | None) -> None:
    """Apply one record of the log to `group` (which `key.group_id` names)."""
    if value is None:
        group.persisted.pop(key, None)
        _replay_tombstone(group, key)
        return
    group.persisted[key] = value
    match key, value:
        case ConsumerGroupMetadataKey(), ConsumerGroupMetadataValue(epoch=epoch):
            group.group_epoch = epoch
        case ConsumerGroupPartitionMetadataKey(), ConsumerGroupPartitionMetadataValue():
            group.subscription_metadata = {t.topic_name: (t.topic_id, t.num_partitions)
                                           for t in value.topics}
        case ConsumerGroupMemberMetadataKey(member_id=member_id), \
                ConsumerGroupMemberMetadataValue():
            member = _member(group, member_id)
            member.instance_id, member.rack_id = value.instance_id, value.rack_id
            member.client_id, member.client_host = value.client_id, value.client_host
            member.subscribed_topic_names = tuple(value.subscribed_topic_names)
            member.subscribed_topic_regex = value.subscribed_topic_regex
            member.rebalance_timeout_ms = value.rebalance_timeout_ms
            member.server_assignor = value.server_assignor
            if value.instance_id is not None:
                group.static_members[value.instance_id] = member_id
        case ConsumerGroupTargetAssignmentMetadataKey(), \
                ConsumerGroupTargetAssignmentMetadataValue():
            group.assignment_epoch = value.assignment_epoch
        case ConsumerGroupTargetAssignmentMemberKey(member_id=member_id), \
                ConsumerGroupTargetAssignmentMemberValue():
            group.target[member_id] = _assignment(value.topic_partitions)
        case ConsumerGroupRegularExpressionKey(regular_expression=regex), \
                ConsumerGroupRegularExpressionValue():
            group.resolved_regexes[regex] = ResolvedRegex(
                frozenset(value.topics), value.version, value.timestamp)
        case ConsumerGroupCurrentMemberAssignmentKey(member_id=member_id), \
                ConsumerGroupCurrentMemberAssignmentValue():
            member = _member(group, member_id)
            member.member_epoch = value.member_epoch
            member.previous_member_epoch = value.previous_member_epoch
            member.state = STATES_BY_CODE.get(value.state, MemberState.STABLE)
            group.set_owned(member, _assignment(value.assigned_partitions),
                            _assignment(value.partitions_pending_revocation))
        case _:
            raise ValueError(f"{type(key).__name__} does not hold a {type(value).__name__}")


def _replay_tombstone(group: ConsumerGroup, key: ConsumerGroupKey) -> None:
    match key:
        case ConsumerGroupMemberMetadataKey(member_id=member_id):
            member = group.members.get(member_id)
            if member is not None:
                group.set_owned(member, {}, {})
                del group.members[member_id]
                if member.instance_id is not None and group.static_members.get(
                        member.instance_id) == member_id:
                    del group.static_members[member.instance_id]
        case ConsumerGroupTargetAssignmentMemberKey(member_id=member_id):
            group.target.pop(member_id, None)
        case ConsumerGroupCurrentMemberAssignmentKey(member_id=member_id):
            member = group.members.get(member_id)
            if member is not None:
                group.set_owned(member, {}, {})
        case ConsumerGroupPartitionMetadataKey():
            group.subscription_metadata = {}
        case ConsumerGroupRegularExpressionKey(regular_expression=regex):
            group.resolved_regexes.pop(regex, None)
        case _:
            pass  # the group's epoch keys: the caller drops the group on its metadata's

