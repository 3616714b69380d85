"""TxnOffsetCommit in the group coordinator core: offsets written in the producer's
transactional batch, pending (not fetched, reported unstable) until the COMMIT marker, dropped
at ABORT; replay of the log keeps them pending until the marker is replayed."""

from __future__ import annotations

import random
from typing import Any

from kio.schema.errors import ErrorCode

from pykraft.broker.group_coordinator.core import (
    CommitPartition,
    CommitRequest,
    GroupConfig,
    GroupCoordinator,
)
from pykraft.broker.group_coordinator.records import CoordinatorRecord

GROUP = "eos-group"
NOW = 1_000_000


def coordinator() -> GroupCoordinator:
    core = GroupCoordinator(GroupConfig(partition_count=1), random.Random(1))
    core.begin_load(0, 0)
    core.complete_load(0, NOW)
    return core


def txn_commit(core: GroupCoordinator, offsets: dict[tuple[str, int], int], pid: int = 7,
               epoch: int = 2, **member: Any) -> tuple[Any, list[CoordinatorRecord]]:
    request = CommitRequest(
        group_id=GROUP, generation_id=member.get("generation", -1),
        member_id=member.get("member", ""), group_instance_id=None,
        partitions=tuple(CommitPartition(t, p, o, -1, "m") for (t, p), o in offsets.items()))
    core.txn_commit_offsets(1, request, pid, epoch, NOW)
    ready = core.ready()
    records: list[CoordinatorRecord] = []
    for append in ready.appends:
        assert (append.producer_id, append.producer_epoch) == (pid, epoch)
        records.extend(append.records)
        return append.replies[0].result, records
    return ready.replies[0].result, records


def fetched(core: GroupCoordinator) -> dict[tuple[str, int], int]:
    error, found = core.fetch_offsets(GROUP, None)
    assert error is ErrorCode.none
    return {key: value.offset for key, value in found.items()}


def test_offsets_are_pending_until_the_commit_marker() -> None:
    core = coordinator()
    result, records = txn_commit(core, {("t", 0): 10, ("t", 1): 20})
    assert result == [ErrorCode.none, ErrorCode.none] and len(records) == 2
    assert fetched(core) == {}
    assert core.unstable_offsets(GROUP) == {("t", 0), ("t", 1)}
    core.complete_txn_offsets(0, 99, True)  # another producer's marker changes nothing
    assert fetched(core) == {}
    core.complete_txn_offsets(0, 7, True)
    assert fetched(core) == {("t", 0): 10, ("t", 1): 20}
    assert core.unstable_offsets(GROUP) == set()


def test_abort_drops_the_pending_offsets_and_keeps_committed_ones() -> None:
    core = coordinator()
    txn_commit(core, {("t", 0): 10})
    core.complete_txn_offsets(0, 7, True)
    txn_commit(core, {("t", 0): 50})
    core.complete_txn_offsets(0, 7, False)
    assert fetched(core) == {("t", 0): 10}
    assert core.unstable_offsets(GROUP) == set()


def test_a_group_with_only_pending_offsets_is_dropped_after_abort() -> None:
    core = coordinator()
    txn_commit(core, {("t", 0): 10})
    core.complete_txn_offsets(0, 7, False)
    assert core.partitions[0].groups == {}


def test_members_are_validated_when_the_request_names_one() -> None:
    core = coordinator()
    result, records = txn_commit(core, {("t", 0): 1}, generation=3, member="nobody")
    assert result == [ErrorCode.illegal_generation] and records == []  # no such group
    txn_commit(core, {("t", 0): 1})  # an old client names no member: not checked
    core.complete_txn_offsets(0, 7, True)
    result, records = txn_commit(core, {("t", 0): 2}, generation=3, member="nobody")
    assert result == [ErrorCode.unknown_member_id] and records == []
    assert fetched(core) == {("t", 0): 1}


def test_replay_keeps_transactional_offsets_pending_until_their_marker() -> None:
    core = coordinator()
    _, records = txn_commit(core, {("t", 0): 10})
    replayed = GroupCoordinator(GroupConfig(partition_count=1), random.Random(1))
    replayed.begin_load(0, 1)
    for record in records:
        replayed.load(0, record, producer_id=7)
    replayed.complete_load(0, NOW)
    assert fetched(replayed) == {}
    assert replayed.unstable_offsets(GROUP) == {("t", 0)}
    again = GroupCoordinator(GroupConfig(partition_count=1), random.Random(1))
    again.begin_load(0, 1)
    for record in records:
        again.load(0, record, producer_id=7)
    again.complete_txn_offsets(0, 7, True)  # the marker, replayed
    again.complete_load(0, NOW)
    assert fetched(again) == {("t", 0): 10}


def test_not_coordinator() -> None:
    core = GroupCoordinator(GroupConfig(partition_count=1), random.Random(1))
    result, records = txn_commit(core, {("t", 0): 1})
    assert result == [ErrorCode.not_coordinator] and records == []
