"""The group coordinator core, driven without I/O: the classic protocol's state machine,
offset commits and their validation, timers, and rebuilding state by replaying the log."""

from __future__ import annotations

import random
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from pykraft.broker.group_coordinator.core import (
    CommitPartition,
    CommitRequest,
    GroupConfig,
    GroupCoordinator,
    HeartbeatRequest,
    JoinRequest,
    JoinResult,
    LeaveMember,
    SyncRequest,
    SyncResult,
    java_string_hash,
    partition_for,
)
from pykraft.broker.group_coordinator.records import CoordinatorRecord, OffsetCommitKey
from pykraft.broker.group_coordinator.state import (
    TRANSITIONS,
    GroupState,
    IllegalTransition,
    check_transition,
)

GROUP = "group-a"
SESSION_MS = 1000
REBALANCE_MS = 5000


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, null user data."""
    body = b"\x00\x00" + len(topics).to_bytes(4, "big")
    for topic in topics:
        body += len(topic).to_bytes(2, "big") + topic.encode()
    return body + b"\xff\xff\xff\xff"


class Harness:
    """A coordinator leading every partition, a virtual clock, and a log of what it wrote."""

    def __init__(self, *, initial_delay_ms: int = 100, partitions: int = 1,
                 **config: Any) -> None:
        self.config = GroupConfig(partition_count=partitions, session_timeout_ms_min=100,
                                  initial_rebalance_delay_ms=initial_delay_ms, **config)
        self.core = GroupCoordinator(self.config, random.Random(7))
        self.now_ms = 1_000_000
        self.tokens = 0
        self.results: dict[int, Any] = {}
        self.log: list[CoordinatorRecord] = []
        for index in range(partitions):
            self.core.begin_load(index, 0)
            self.core.complete_load(index, self.now_ms)

    def token(self) -> int:
        self.tokens += 1
        return self.tokens

    def drain(self) -> None:
        ready = self.core.ready()
        for reply in ready.replies:
            self.results[reply.token] = reply.result
        for append in ready.appends:
            self.log.extend(append.records)
            for reply in append.replies:  # committed at once: one replica
                self.results[reply.token] = reply.result

    def advance(self, ms: int) -> None:
        """Move the clock, firing each deadline at its own time, in order."""
        target = self.now_ms + ms
        while (wake_at := self.core.wake_at_ms()) is not None and wake_at <= target:
            self.now_ms = max(self.now_ms, wake_at)
            self.core.tick(self.now_ms)
            self.drain()
        self.now_ms = target
        self.core.tick(self.now_ms)
        self.drain()

    def join(self, member_id: str = "", *, instance: str | None = None,
             protocols: tuple[tuple[str, bytes], ...] = (("range", subscription("t")),),
             client_id: str = "client", version: int = 9, group: str = GROUP) -> int:
        token = self.token()
        self.core.join_group(token, JoinRequest(
            group, member_id, instance, "consumer", protocols, SESSION_MS, REBALANCE_MS,
            client_id, "/127.0.0.1", version >= 4, version >= 9), self.now_ms)
        self.drain()
        return token

    def join_new(self, **kwargs: Any) -> int:
        """The KIP-394 dance: join, get MEMBER_ID_REQUIRED and an id, join again with it."""
        first = self.results[self.join(**kwargs)]
        assert first.error == ErrorCode.member_id_required
        return self.join(first.member_id, **kwargs)

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             *, instance: str | None = None) -> int:
        token = self.token()
        self.core.sync_group(token, SyncRequest(GROUP, generation, member_id, instance,
                                                "consumer", None,
                                                tuple((assignments or {}).items())), self.now_ms)
        self.drain()
        return token

    def heartbeat(self, member_id: str, generation: int, instance: str | None = None) -> Any:
        token = self.token()
        self.core.heartbeat(token, HeartbeatRequest(GROUP, generation, member_id, instance),
                            self.now_ms)
        self.drain()
        return self.results[token]

    def commit(self, generation: int = -1, member_id: str = "", *, metadata: str = "m",
               offsets: dict[tuple[str, int], int] | None = None, group: str = GROUP,
               version: int = 9) -> Any:
        token = self.token()
        partitions = tuple(CommitPartition(t, p, o, 3, metadata)
                           for (t, p), o in (offsets or {("t", 0): 42}).items())
        self.core.commit_offsets(token, CommitRequest(group, generation, member_id, None,
                                                      partitions, api_version=version),
                                 self.now_ms)
        self.drain()
        return self.results[token]

    def state(self, group: str = GROUP) -> GroupState:
        return self.core.partitions[0].groups[group].state

    def reloaded(self) -> GroupCoordinator:
        """A fresh coordinator that replayed this one's log."""
        core = GroupCoordinator(self.config, random.Random(1))
        core.begin_load(0, 1)
        for record in self.log:
            core.load(0, record)
        core.complete_load(0, self.now_ms)
        return core

    def stable_group(self, size: int) -> list[str]:
        """`size` members through join and sync; return their ids (leader first)."""
        tokens = [self.join_new(client_id=f"c{i}") for i in range(size)]
        self.advance(2 * self.config.initial_rebalance_delay_ms)
        results = [self.results[t] for t in tokens]
        leader = next(r for r in results if r.members)
        members = [leader.member_id] + [r.member_id for r in results
                                        if r.member_id != leader.member_id]
        plan = {m: m.encode() for m in members}
        syncs = [self.sync(m, leader.generation_id, plan if m == leader.member_id else None)
                 for m in members]
        assert all(self.results[s].error == ErrorCode.none for s in syncs)
        return members


# -- the transition table ---------------------------------------------------------------------


def test_every_state_has_a_row_and_only_listed_moves_are_legal() -> None:
    """Walk the whole table: each listed edge passes, every other edge raises."""
    assert set(TRANSITIONS) == set(GroupState)
    for source in GroupState:
        for target in GroupState:
            if target in TRANSITIONS[source]:
                assert check_transition(source, target) is target
            else:
                with pytest.raises(IllegalTransition):
                    check_transition(source, target)


def test_group_placement_uses_javas_string_hash() -> None:
    """Kafka's placement is abs(String.hashCode) % partitions; values from the JVM."""
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # abs() would overflow
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("my-group", 50) == abs(java_string_hash("my-group")) % 50


# -- JoinGroup / SyncGroup ----------------------------------------------------------------


def test_a_new_member_must_rejoin_with_the_id_it_was_given() -> None:
    h = Harness(initial_delay_ms=0)
    first = h.results[h.join()]
    assert first.error == ErrorCode.member_id_required
    assert first.member_id.startswith("client-")
    second = h.results[h.join(first.member_id)]
    assert second.error == ErrorCode.none
    assert second.generation_id == 1 and second.leader == first.member_id
    assert second.members == ((first.member_id, None, subscription("t")),)
    assert h.state() is GroupState.COMPLETING_REBALANCE


def test_join_v3_gets_an_id_at_once() -> None:
    h = Harness(initial_delay_ms=0)
    result = h.results[h.join(version=3)]
    assert result.error == ErrorCode.none and result.generation_id == 1


def test_three_members_one_generation_each_gets_its_assignment() -> None:
    h = Harness()
    members = h.stable_group(3)
    assert h.state() is GroupState.STABLE
    group = h.core.partitions[0].groups[GROUP]
    assert group.generation_id == 1 and group.leader == members[0]
    assert {m.assignment for m in group.members.values()} == {m.encode() for m in members}
    assert h.log[-1].value is not None  # the generation's assignment was persisted


def test_a_follower_syncing_before_the_leader_waits_for_the_assignment() -> None:
    h = Harness()
    a_token = h.join_new(client_id="a")
    b_token = h.join_new(client_id="b")
    h.advance(200)
    a, b = h.results[a_token], h.results[b_token]
    assert a.generation_id == b.generation_id == 1
    leader, follower = (a, b) if a.member_id == b.leader else (b, a)
    generation = b.generation_id
    pending = h.sync(follower.member_id, generation)
    assert pending not in h.results
    h.sync(leader.member_id, generation, {follower.member_id: b"F", leader.member_id: b"L"})
    assert h.results[pending] == SyncResult(ErrorCode.none, b"F", "consumer", "range")


def test_initial_rebalance_delay_holds_the_first_generation() -> None:
    h = Harness(initial_delay_ms=300)
    first = h.join_new(client_id="a")
    assert first not in h.results
    h.advance(200)
    second = h.join_new(client_id="b")
    h.advance(399)  # b joined during the delay: it runs once more (up to the rebalance timeout)
    assert first not in h.results
    h.advance(1)
    assert h.results[first].generation_id == h.results[second].generation_id == 1


def test_protocol_selection_prefers_what_most_members_vote_for_among_common_ones() -> None:
    h = Harness(initial_delay_ms=10)
    both = (("roundrobin", b"r"), ("range", b"g"))
    a = h.join_new(protocols=both)
    b = h.join_new(protocols=(("range", b"g2"), ("roundrobin", b"r2")))
    c = h.join_new(protocols=both)
    h.advance(20)
    assert {h.results[t].protocol_name for t in (a, b, c)} == {"roundrobin"}


def test_a_member_without_a_common_protocol_is_refused() -> None:
    h = Harness()
    h.stable_group(1)
    result = h.results[h.join(protocols=(("sticky", b""),))]
    assert result.error == ErrorCode.inconsistent_group_protocol


def test_session_timeout_out_of_bounds_is_refused() -> None:
    h = Harness()
    token = h.token()
    h.core.join_group(token, JoinRequest(GROUP, "", None, "consumer", (("range", b""),), 50,
                                         50, "c", "h", True, True), h.now_ms)
    h.drain()
    assert h.results[token].error == ErrorCode.invalid_session_timeout


def test_sync_with_a_stale_generation_or_unknown_member_is_refused() -> None:
    h = Harness()
    [member] = h.stable_group(1)
    assert h.results[h.sync(member, 0)].error == ErrorCode.illegal_generation
    assert h.results[h.sync("nobody", 1)].error == ErrorCode.unknown_member_id


# -- Heartbeat, LeaveGroup, expiry -------------------------------------------------------------


def test_heartbeats_keep_a_member_and_silence_removes_it() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    for _ in range(5):
        h.advance(SESSION_MS // 2)
        assert h.heartbeat(a, 1) == ErrorCode.none
        assert h.heartbeat(b, 1) == ErrorCode.none
    h.advance(SESSION_MS // 2)
    assert h.heartbeat(a, 1) == ErrorCode.none
    h.advance(SESSION_MS // 2)  # b has been silent for a whole session
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(b, 1) == ErrorCode.unknown_member_id
    assert h.heartbeat(a, 1) == ErrorCode.rebalance_in_progress
    rejoin = h.join(a)
    assert h.results[rejoin].generation_id == 2 and h.results[rejoin].members[0][0] == a


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    token = h.join(a, protocols=(("range", subscription("t", "u")),))  # new metadata
    assert token not in h.results
    for _ in range(9):  # b keeps heartbeating but never rejoins
        h.advance(500)
        assert h.heartbeat(b, 1) == ErrorCode.rebalance_in_progress
    h.advance(499)
    assert token not in h.results
    h.advance(1)
    result = h.results[token]
    assert result.generation_id == 2 and [m[0] for m in result.members] == [a]


def test_leave_group_triggers_a_rebalance_and_unknown_members_are_reported() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    token = h.token()
    h.core.leave_group(token, GROUP, [LeaveMember(b, None), LeaveMember("ghost", None)],
                       h.now_ms)
    h.drain()
    assert h.results[token] == (ErrorCode.none, [ErrorCode.none, ErrorCode.unknown_member_id])
    assert h.state() is GroupState.PREPARING_REBALANCE


def test_the_last_member_leaving_empties_the_group_and_persists_it() -> None:
    h = Harness()
    [a] = h.stable_group(1)
    token = h.token()
    h.core.leave_group(token, GROUP, [LeaveMember(a, None)], h.now_ms)
    h.drain()
    assert h.state() is GroupState.EMPTY
    value = h.log[-1].value
    assert value is not None and value.members == ()


# -- static membership ----------------------------------------------------------------------


def test_a_static_member_rejoining_takes_its_place_without_a_rebalance() -> None:
    h = Harness()
    dynamic = h.join_new(client_id="dyn")
    static = h.join(instance="instance-1")
    h.advance(200)
    leader = h.results[dynamic]
    generation = h.results[static].generation_id
    old_id = h.results[static].member_id
    assert old_id.startswith("instance-1-")
    h.sync(leader.member_id, generation, {old_id: b"S", leader.member_id: b"D"})
    h.sync(old_id, generation, instance="instance-1")
    assert h.state() is GroupState.STABLE
    again = h.results[h.join(instance="instance-1")]  # restarted: no member id
    assert again.error == ErrorCode.none and again.member_id != old_id
    assert again.generation_id == generation and h.state() is GroupState.STABLE
    assert h.heartbeat(old_id, generation, "instance-1") == ErrorCode.fenced_instance_id
    synced = h.results[h.sync(again.member_id, generation, instance="instance-1")]
    assert synced.assignment == b"S"


# -- offsets --------------------------------------------------------------------------------


def test_simple_consumer_commits_and_fetches() -> None:
    h = Harness()
    assert h.commit(offsets={("t", 0): 10, ("t", 1): 20}) == [ErrorCode.none] * 2
    code, found = h.core.fetch_offsets(GROUP, [("t", 0), ("t", 1), ("t", 2)])
    assert code == ErrorCode.none
    assert {k: v.offset for k, v in found.items()} == {("t", 0): 10, ("t", 1): 20}
    assert found[("t", 0)].leader_epoch == 3 and found[("t", 0)].metadata == "m"
    assert h.state() is GroupState.EMPTY


def test_commit_validation_errors_write_nothing() -> None:
    h = Harness(offset_metadata_bytes_max=10)
    [member] = h.stable_group(1)
    written = len(h.log)
    assert h.commit(0, member) == [ErrorCode.illegal_generation]
    assert h.commit(1, "stranger") == [ErrorCode.unknown_member_id]
    assert h.commit(-1, "") == [ErrorCode.unknown_member_id]  # simple commit, active group
    assert h.commit(1, member, metadata="x" * 11) == [ErrorCode.offset_metadata_too_large]
    assert h.commit(5, "m", group="no-such-group", version=8) == [ErrorCode.illegal_generation]
    assert h.commit(5, "m", group="no-such-group") == [ErrorCode.group_id_not_found]  # v9+
    assert len(h.log) == written
    assert h.core.fetch_offsets(GROUP, None) == (ErrorCode.none, {})
    assert h.commit(1, member) == [ErrorCode.none]
    assert len(h.log) == written + 1


def test_only_the_oversized_partition_of_a_commit_is_refused() -> None:
    h = Harness(offset_metadata_bytes_max=4)
    token = h.token()
    h.core.commit_offsets(token, CommitRequest(GROUP, -1, "", None, (
        CommitPartition("t", 0, 1, -1, "ok"), CommitPartition("t", 1, 2, -1, "too long"))),
        h.now_ms)
    h.drain()
    assert h.results[token] == [ErrorCode.none, ErrorCode.offset_metadata_too_large]
    assert [r.key for r in h.log] == [OffsetCommitKey(group=GROUP, topic="t", partition=0)]


def test_commit_during_completing_rebalance_is_refused() -> None:
    h = Harness(initial_delay_ms=0)
    member = h.results[h.join_new()].member_id
    assert h.commit(1, member) == [ErrorCode.rebalance_in_progress]


def test_offsets_expire_after_retention_once_the_group_is_empty() -> None:
    h = Harness(offsets_retention_ms=10_000, offsets_retention_check_interval_ms=1000)
    h.commit(offsets={("t", 0): 1})
    h.advance(9_000)
    assert h.core.fetch_offsets(GROUP, None)[1]
    h.advance(1_000)
    assert h.core.fetch_offsets(GROUP, None)[1] == {}
    assert GROUP not in h.core.partitions[0].groups
    assert h.log[-1].value is None  # a tombstone


# -- replay, unload, admin -------------------------------------------------------------------


def test_replaying_the_log_rebuilds_groups_and_offsets() -> None:
    h = Harness()
    members = h.stable_group(2)
    h.commit(1, members[0], offsets={("t", 0): 7, ("t", 1): 8})
    h.commit(offsets={("t", 0): 3}, group="simple")
    core = h.reloaded()
    groups = core.partitions[0].groups
    assert set(groups) == {GROUP, "simple"}
    group = groups[GROUP]
    assert group.state is GroupState.STABLE and group.generation_id == 1
    assert list(group.members) == members and group.leader == members[0]
    assert {k: v.offset for k, v in group.offsets.items()} == {("t", 0): 7, ("t", 1): 8}
    assert core.fetch_offsets("simple", None)[1][("t", 0)].offset == 3


def test_a_deleted_group_stays_deleted_after_replay() -> None:
    h = Harness()
    h.commit(offsets={("t", 0): 1})
    token = h.token()
    h.core.delete_group(token, GROUP, h.now_ms)
    h.drain()
    assert h.results[token] == ErrorCode.none
    assert GROUP not in h.reloaded().partitions[0].groups


def test_deleting_a_group_with_members_is_refused() -> None:
    h = Harness()
    h.stable_group(1)
    token = h.token()
    h.core.delete_group(token, GROUP, h.now_ms)
    h.drain()
    assert h.results[token] == ErrorCode.non_empty_group


def test_unloading_answers_waiting_joins_not_coordinator() -> None:
    h = Harness(initial_delay_ms=1000)
    token = h.join_new()
    h.core.unload(0)
    h.drain()
    assert isinstance(h.results[token], JoinResult)
    assert h.results[token].error == ErrorCode.not_coordinator
    assert h.commit() == [ErrorCode.not_coordinator]


def test_requests_during_load_are_told_to_retry() -> None:
    h = Harness()
    h.core.begin_load(0, 2)
    assert h.commit() == [ErrorCode.coordinator_load_in_progress]


def test_offset_delete_refuses_subscribed_topics_of_an_active_group() -> None:
    h = Harness()
    [member] = h.stable_group(1)  # subscribed to "t"
    h.commit(1, member, offsets={("t", 0): 1, ("u", 0): 2})
    token = h.token()
    h.core.delete_offsets(token, GROUP, [("t", 0), ("u", 0)], h.now_ms)
    h.drain()
    assert h.results[token] == (ErrorCode.none,
                                [ErrorCode.group_subscribed_to_topic, ErrorCode.none])
    assert set(h.core.fetch_offsets(GROUP, None)[1]) == {("t", 0)}


def test_list_and_describe() -> None:
    h = Harness()
    members = h.stable_group(2)
    h.commit(offsets={("t", 0): 1}, group="simple")
    listed = {g.group_id: g.state for g in h.core.list_groups()}
    assert listed == {GROUP: GroupState.STABLE, "simple": GroupState.EMPTY}
    assert [g.group_id for g in h.core.list_groups(states=["empty"])] == ["simple"]
    described = h.core.describe_group(GROUP)
    assert described.protocol == "range"
    assert [m.member_id for m in described.members] == members
    assert described.members[0].assignment == members[0].encode()
    assert h.core.describe_group("nope").error == ErrorCode.group_id_not_found
