"""Group semantics to the letter of Kafka 4.0's coordinator, without I/O: who may commit
offsets in which group state (ClassicGroup / ConsumerGroup.validateOffsetCommit, the
transactional variant), OffsetFetch's member epoch, a static member rejoining (KIP-345:
leader or not, any JoinGroup version), and a rebalance no member rejoined."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from pykraft.broker.group_coordinator.core import (
    CommitPartition,
    CommitRequest,
    JoinResult,
    LeaveMember,
)
from pykraft.broker.group_coordinator.state import GroupState
from tests.unit.groups.test_consumer_group_core import GROUP as CONSUMER_GROUP
from tests.unit.groups.test_consumer_group_core import Harness as ConsumerHarness
from tests.unit.groups.test_group_core import GROUP, REBALANCE_MS, Harness, subscription


def commit(h: Harness | ConsumerHarness, group: str, generation: int, member_id: str, *,
           instance: str | None = None, version: int = 9) -> ErrorCode:
    h.tokens += 1
    h.core.commit_offsets(h.tokens, CommitRequest(
        group, generation, member_id, instance, (CommitPartition("t", 0, 7, -1, ""),),
        api_version=version), h.now_ms)
    h.drain()
    codes = h.results[h.tokens]
    assert isinstance(codes, list)
    return codes[0]  # type: ignore[no-any-return]


def txn_commit(h: Harness | ConsumerHarness, group: str, generation: int, member_id: str,
               instance: str | None = None) -> ErrorCode:
    h.tokens += 1
    h.core.txn_commit_offsets(h.tokens, CommitRequest(
        group, generation, member_id, instance, (CommitPartition("t", 0, 7, -1, ""),)),
        producer_id=5, producer_epoch=0, now_ms=h.now_ms)
    h.drain()
    codes = h.results[h.tokens]
    assert isinstance(codes, list)
    return codes[0]  # type: ignore[no-any-return]


# -- OffsetCommit on classic groups ---------------------------------------------------------


def test_generation_minus_one_commits_to_an_empty_group_whatever_member_id_it_sends() -> None:
    """Kafka accepts generation -1 on an Empty group with or without a member id or an
    instance id (an assign() consumer: librdkafka with group.protocol=consumer sends its
    member id on the second commit)."""
    h = Harness()
    assert commit(h, GROUP, -1, "") == ErrorCode.none  # creates the simple group
    assert h.state() is GroupState.EMPTY
    assert commit(h, GROUP, -1, "rdkafka-member-1") == ErrorCode.none
    assert commit(h, GROUP, -1, "", instance="i-1") == ErrorCode.none
    assert commit(h, GROUP, 3, "rdkafka-member-1") == ErrorCode.unknown_member_id


def test_commits_to_a_group_in_use_need_a_member_and_its_generation() -> None:
    """A group with members: generation -1 with a member id is checked as a member (unknown
    here), without one it is a v0-style commit, refused; a member of the right generation
    commits; a stale instance id is fenced."""
    h = Harness()
    token = h.join(instance="i-1")
    h.advance(200)
    member = h.results[token].member_id
    generation = h.results[h.sync(member, 1, {member: b"a"}, instance="i-1")]
    assert generation.error == ErrorCode.none and h.state() is GroupState.STABLE
    assert commit(h, GROUP, -1, "stranger") == ErrorCode.unknown_member_id
    assert commit(h, GROUP, -1, "") == ErrorCode.unknown_member_id
    assert commit(h, GROUP, 1, "stranger", instance="i-1") == ErrorCode.fenced_instance_id
    assert commit(h, GROUP, 1, member, instance="i-2") == ErrorCode.unknown_member_id
    assert commit(h, GROUP, 0, member, instance="i-1") == ErrorCode.illegal_generation
    assert commit(h, GROUP, 1, member, instance="i-1") == ErrorCode.none


def test_txn_offset_commit_ignores_the_group_state_and_checks_only_what_is_given() -> None:
    """TxnOffsetCommit: no REBALANCE_IN_PROGRESS while the group completes a rebalance; no
    member fields (a pre-KIP-447 producer) pass on a group in use; given fields are
    checked; an unknown group with a generation is ILLEGAL_GENERATION."""
    h = Harness(initial_delay_ms=0)
    member = h.results[h.join_new()].member_id
    assert h.state() is GroupState.COMPLETING_REBALANCE
    assert commit(h, GROUP, 1, member) == ErrorCode.rebalance_in_progress
    assert txn_commit(h, GROUP, 1, member) == ErrorCode.none
    assert txn_commit(h, GROUP, -1, "") == ErrorCode.none
    assert txn_commit(h, GROUP, -1, "stranger") == ErrorCode.unknown_member_id
    assert txn_commit(h, GROUP, 2, member) == ErrorCode.illegal_generation
    assert txn_commit(h, "no-such-group", 4, "m") == ErrorCode.illegal_generation
    assert txn_commit(h, "no-such-group", -1, "") == ErrorCode.none


# -- OffsetCommit / OffsetFetch on KIP-848 consumer groups ----------------------------------


def test_consumer_group_commits_check_epoch_version_and_transactions() -> None:
    """ConsumerGroup.validateOffsetCommit: a member commits with its epoch over OffsetCommit
    v9 (older: UNSUPPORTED_VERSION); another epoch is STALE_MEMBER_EPOCH, or
    ILLEGAL_GENERATION in a TxnOffsetCommit, where no member fields at all pass."""
    h = ConsumerHarness()
    h.beat("a", 0)
    assert commit(h, CONSUMER_GROUP, 1, "a") == ErrorCode.none
    assert commit(h, CONSUMER_GROUP, 1, "a", version=8) == ErrorCode.unsupported_version
    assert commit(h, CONSUMER_GROUP, 2, "a") == ErrorCode.stale_member_epoch
    assert commit(h, CONSUMER_GROUP, -1, "a") == ErrorCode.stale_member_epoch
    assert commit(h, CONSUMER_GROUP, -1, "") == ErrorCode.unknown_member_id
    assert txn_commit(h, CONSUMER_GROUP, 2, "a") == ErrorCode.illegal_generation
    assert txn_commit(h, CONSUMER_GROUP, 1, "a") == ErrorCode.none
    assert txn_commit(h, CONSUMER_GROUP, -1, "") == ErrorCode.none
    h.beat("a", -1)
    assert commit(h, CONSUMER_GROUP, -1, "gone") == ErrorCode.none  # empty: anyone with -1


def test_offset_fetch_checks_a_consumer_members_epoch() -> None:
    """OffsetFetch v9: an admin (no member id, epoch -1) reads; a member must give its own
    epoch (STALE_MEMBER_EPOCH) and be known (UNKNOWN_MEMBER_ID); classic groups check
    nothing."""
    h = ConsumerHarness()
    h.beat("a", 0)
    assert h.commit("a", 1) == ErrorCode.none
    assert h.core.fetch_offsets(CONSUMER_GROUP, None)[1][("t", 0)].offset == 5
    assert h.core.fetch_offsets(CONSUMER_GROUP, None, "a", 1)[0] == ErrorCode.none
    assert h.core.fetch_offsets(CONSUMER_GROUP, None, "a", 0) == (
        ErrorCode.stale_member_epoch, {})
    assert h.core.fetch_offsets(CONSUMER_GROUP, None, "b", 1) == (
        ErrorCode.unknown_member_id, {})
    classic = Harness()
    commit(classic, GROUP, -1, "")
    assert classic.core.fetch_offsets(GROUP, None, "whoever", 9)[0] == ErrorCode.none


# -- static membership (KIP-345) ---------------------------------------------------------------


def static_leader_group(h: Harness) -> tuple[str, str]:
    """A stable group: static leader i-1 (assignment b"L") and a dynamic follower."""
    leader_token = h.join(instance="i-1")
    follower_token = h.join_new(client_id="dyn")
    h.advance(200)
    leader = h.results[leader_token].member_id
    follower = h.results[follower_token].member_id
    assert h.results[leader_token].leader == leader
    h.sync(leader, 1, {leader: b"L", follower: b"F"}, instance="i-1")
    h.sync(follower, 1)
    assert h.state() is GroupState.STABLE
    return leader, follower


def test_a_static_leader_rejoining_below_v9_gets_no_rebalance() -> None:
    """JoinGroup v5 (librdkafka) from a restarted static leader: answered from generation 1
    at once, named the old leader id so it syncs as a follower and gets its assignment; the
    old id is fenced; the group never leaves Stable."""
    h = Harness()
    leader, follower = static_leader_group(h)
    again: JoinResult = h.results[h.join(instance="i-1", version=5)]
    assert again.error == ErrorCode.none and again.member_id != leader
    assert (again.generation_id, again.leader, again.members) == (1, leader, ())
    assert not again.skip_assignment and h.state() is GroupState.STABLE
    synced = h.results[h.sync(again.member_id, 1, instance="i-1")]
    assert synced.error == ErrorCode.none and synced.assignment == b"L"
    assert h.heartbeat(follower, 1) == ErrorCode.none  # no rebalance for the follower
    assert h.heartbeat(leader, 1, "i-1") == ErrorCode.fenced_instance_id
    assert h.core.partitions[0].groups[GROUP].leader == again.member_id


def test_a_static_leader_rejoining_with_v9_skips_the_assignment() -> None:
    """JoinGroup v9: the rejoining leader learns it leads, with the members, and is told to
    skip the assignment (KIP-814)."""
    h = Harness()
    static_leader_group(h)
    again: JoinResult = h.results[h.join(instance="i-1", version=9)]
    assert again.leader == again.member_id and again.skip_assignment
    assert {m[0] for m in again.members} == set(h.core.partitions[0].groups[GROUP].members)
    assert h.state() is GroupState.STABLE


def test_a_static_member_changing_the_groups_protocol_rebalances() -> None:
    """A rejoin whose protocols change what the group would select starts a rebalance."""
    h = Harness()
    token = h.join(instance="i-1")
    h.advance(200)
    h.sync(h.results[token].member_id, 1, {h.results[token].member_id: b"L"}, instance="i-1")
    h.join(instance="i-1", version=5, protocols=(("range", subscription("t", "u")),
                                                 ("roundrobin", subscription("t"))))
    assert h.state() is GroupState.STABLE  # new metadata alone: range is still the choice
    changed = h.results[h.join(instance="i-1", version=5, protocols=(
        ("roundrobin", subscription("t")), ("range", subscription("t"))))]
    assert (changed.generation_id, changed.protocol_name) == (2, "roundrobin")
    assert changed.leader == changed.member_id  # the only member: it joined, so it leads


def test_leave_by_instance_id_and_a_fenced_duplicate() -> None:
    """LeaveGroup v3+ names a static member by instance id alone (an admin removing it);
    an old member id under that instance id is FENCED_INSTANCE_ID."""
    h = Harness()
    leader, _ = static_leader_group(h)
    h.join(instance="i-1", version=5)
    token = h.token()
    h.core.leave_group(token, GROUP, [LeaveMember(leader, "i-1"), LeaveMember("", "i-1"),
                                      LeaveMember("", "i-9")], h.now_ms)
    h.drain()
    assert h.results[token] == (ErrorCode.none, [ErrorCode.fenced_instance_id, ErrorCode.none,
                                                 ErrorCode.unknown_member_id])
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert "i-1" not in h.core.partitions[0].groups[GROUP].static_members


def test_a_rebalance_no_member_rejoined_waits_for_one() -> None:
    """Only static members, none rejoined by the rebalance timeout: the generation does not
    move on without a leader that joined (Kafka's maybeElectNewJoinedLeader); a member
    rejoining then leads it."""
    h = Harness()
    leader, follower = static_leader_group(h)
    token = h.token()
    h.core.leave_group(token, GROUP, [LeaveMember(follower, None)], h.now_ms)
    h.drain()
    assert h.state() is GroupState.PREPARING_REBALANCE
    for _ in range(12):  # heartbeats keep the static leader, which does not rejoin
        h.advance(REBALANCE_MS // 10)
        assert h.heartbeat(leader, 1, "i-1") == ErrorCode.rebalance_in_progress
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.core.partitions[0].groups[GROUP].generation_id == 1
    rejoined: JoinResult = h.results[h.join(leader, instance="i-1")]
    assert rejoined.error == ErrorCode.none and rejoined.generation_id == 2
    assert rejoined.leader == leader


# -- KIP-848 regex subscriptions ---------------------------------------------------------------


def test_a_new_regex_is_resolved_after_the_heartbeat_that_brought_it() -> None:
    """As Kafka 4.0: the heartbeat that brings a regex is answered without its partitions
    (the group resolves it in the background); the resolution bumps the group epoch and the
    next heartbeat carries the assignment. A second member with the same, resolved regex
    needs no new resolution."""
    h = ConsumerHarness()
    first = h.beat("a", 0, regex="t.*")
    assert first.error == ErrorCode.none
    assert first.member_epoch == 1 and first.assignment == {}
    assert h.core.wake_at_ms() == h.now_ms  # the resolution is due at once
    h.advance(0)
    second = h.beat("a", 1, owned={})
    assert second.member_epoch == 2 and second.assignment is not None
    assert set(second.assignment[next(iter(second.assignment))]) == set(range(6))
    joined = h.beat("b", 0, regex="t.*")
    assert joined.member_epoch == 3 and h.core.wake_at_ms() != h.now_ms


def test_a_member_leaving_while_its_regex_is_pending_leaves_nothing_behind() -> None:
    """The only member leaves before its regex is resolved: the group is deleted and the
    resolution finds nothing to do; the same member id joining again with the regex gets
    its partitions after a fresh resolution (no group left deleted under a waiting
    client)."""
    h = ConsumerHarness()
    h.beat("a", 0, regex="t.*")
    left = h.beat("a", -1)
    assert left.error == ErrorCode.none and left.member_epoch == -1
    assert CONSUMER_GROUP not in h.core.partitions[0].groups
    h.advance(0)
    assert CONSUMER_GROUP not in h.core.partitions[0].groups
    again = h.beat("a", 0, regex="t.*")
    assert again.error == ErrorCode.none and again.assignment == {}
    h.advance(0)
    given = h.beat("a", again.member_epoch, owned={})
    assert given.member_epoch == again.member_epoch + 1
    assert given.assignment is not None and sum(len(p) for p in given.assignment.values()) == 6


def test_a_regex_no_member_uses_any_more_is_dropped_without_a_new_epoch() -> None:
    """A member switches from a pending regex to topic names before the resolution: the
    resolution bumps nothing."""
    h = ConsumerHarness()
    h.beat("a", 0, topics=("t",))
    h.beat("a", 1, owned={}, regex="t.*")
    h.beat("a", 1, owned={}, regex="")
    consumer = h.core.partitions[0].groups[CONSUMER_GROUP].consumer
    assert consumer is not None
    epoch = consumer.group_epoch
    h.advance(0)
    assert consumer.group_epoch == epoch and not consumer.pending_regexes


def test_a_member_waiting_for_its_sync_answer_outlives_its_session() -> None:
    """Kafka's hasSatisfiedHeartbeat: a member awaiting its SyncGroup answer (the leader is
    slow to assign) is not expired by its session timeout; the sync deadline (the rebalance
    timeout) rules."""
    h = Harness(initial_delay_ms=0)
    leader = h.results[h.join_new(client_id="a")].member_id
    follower_token = h.join_new(client_id="b")
    h.join(leader)  # the leader rejoins the rebalance b started
    follower = h.results[follower_token]
    assert follower.error == ErrorCode.none and h.state() is GroupState.COMPLETING_REBALANCE
    waiting = h.sync(follower.member_id, follower.generation_id)
    assert waiting not in h.results
    for _ in range(6):  # three of its sessions, within the rebalance timeout
        h.advance(500)
        assert h.heartbeat(leader, follower.generation_id) == ErrorCode.none
    assert waiting not in h.results
    h.sync(leader, follower.generation_id, {leader: b"A", follower.member_id: b"B"})
    assert h.results[waiting].error == ErrorCode.none and h.results[waiting].assignment == b"B"


@pytest.mark.parametrize("version", [5, 6, 7, 8, 9])
def test_a_static_follower_rejoins_at_every_version_without_a_rebalance(version: int) -> None:
    """JoinGroup v5-v9 (group.instance.id exists from v5): a restarted static follower is
    answered from the current generation, the leader unchanged, and syncs its assignment."""
    h = Harness()
    leader_token = h.join_new(client_id="dyn")
    static_token = h.join(instance="i-2")
    h.advance(200)
    leader = h.results[leader_token].member_id
    static = h.results[static_token].member_id
    h.sync(leader, 1, {leader: b"L", static: b"S"})
    h.sync(static, 1, instance="i-2")
    again: JoinResult = h.results[h.join(instance="i-2", version=version)]
    assert (again.error, again.generation_id, again.leader) == (ErrorCode.none, 1, leader)
    assert not again.skip_assignment and again.members == ()
    assert h.results[h.sync(again.member_id, 1, instance="i-2")].assignment == b"S"
    assert h.state() is GroupState.STABLE


def test_static_members_removed_by_instance_id_then_the_group_deleted() -> None:
    """DeleteGroups refuses a group with static members (NON_EMPTY_GROUP); an admin removes
    them by instance id (LeaveGroup v3+), the group turns Empty and can be deleted, offsets
    and all."""
    h = Harness()
    leader, follower = static_leader_group(h)
    commit(h, GROUP, 1, leader, instance="i-1")

    def delete() -> ErrorCode:
        token = h.token()
        h.core.delete_group(token, GROUP, h.now_ms)
        h.drain()
        return h.results[token]  # type: ignore[no-any-return]

    assert delete() == ErrorCode.non_empty_group
    token = h.token()
    h.core.leave_group(token, GROUP, [LeaveMember("", "i-1"), LeaveMember(follower, None)],
                       h.now_ms)
    h.drain()
    assert h.results[token] == (ErrorCode.none, [ErrorCode.none, ErrorCode.none])
    assert h.state() is GroupState.EMPTY
    assert delete() == ErrorCode.none
    assert GROUP not in h.core.partitions[0].groups
    assert h.core.fetch_offsets(GROUP, None) == (ErrorCode.none, {})


def test_a_member_that_never_syncs_is_removed_at_the_rebalance_timeout() -> None:
    """Kafka's pending-sync expiry: the leader's assignment makes the group stable, but a
    follower that heartbeats and never sends SyncGroup is removed when the rebalance timeout
    passes, and the group rebalances without it."""
    h = Harness(initial_delay_ms=0)
    leader = h.results[h.join_new(client_id="a")].member_id
    follower_token = h.join_new(client_id="b")
    h.join(leader)
    follower = h.results[follower_token].member_id
    h.sync(leader, 2, {leader: b"A", follower: b"B"})
    assert h.state() is GroupState.STABLE
    for _ in range(REBALANCE_MS // 500 + 1):
        h.advance(500)
        h.heartbeat(follower, 2)
        h.heartbeat(leader, 2)
    assert follower not in h.core.partitions[0].groups[GROUP].members
    assert h.state() is GroupState.PREPARING_REBALANCE
