"""KIP-848 consumer groups in the coordinator core, without I/O: the assignors, epochs,
reconciliation (revocation before assignment), fencing, leaving, static members, metadata
changes, offset commits with member epochs, and the group's kind (classic or consumer)."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from pykraft.broker.group_coordinator.consumer import (
    ConsumerGroupState,
    TopicInfo,
    assign_range,
    assign_uniform,
)
from pykraft.broker.group_coordinator.core import (
    CommitPartition,
    CommitRequest,
    ConsumerHeartbeat,
    ConsumerHeartbeatResult,
    GroupConfig,
    GroupCoordinator,
    JoinRequest,
)
from pykraft.broker.group_coordinator.records import (
    CoordinatorRecord,
    decode_record,
    encode_record,
)
from pykraft.broker.group_coordinator.state import GroupState

GROUP = "cg"
T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
SESSION_MS = 2000
INTERVAL_MS = 100


class Harness:
    def __init__(self, **config: Any) -> None:
        self.config = GroupConfig(partition_count=1, consumer_session_timeout_ms=SESSION_MS,
                                  consumer_session_timeout_ms_min=100,
                                  consumer_heartbeat_interval_ms=INTERVAL_MS, **config)
        self.core = GroupCoordinator(self.config, random.Random(3))
        self.now_ms = 1_000_000
        self.tokens = 0
        self.results: dict[int, Any] = {}
        self.log: list[CoordinatorRecord] = []
        self.core.update_topics({"t": TopicInfo(T, "t", 6)}, self.now_ms)
        self.core.begin_load(0, 0)
        self.core.complete_load(0, self.now_ms)

    def drain(self) -> None:
        ready = self.core.ready()
        for reply in ready.replies:
            self.results[reply.token] = reply.result
        for append in ready.appends:
            self.log.extend(append.records)
            for reply in append.replies:
                self.results[reply.token] = reply.result

    def advance(self, ms: int) -> None:
        target = self.now_ms + ms
        while (wake_at := self.core.wake_at_ms()) is not None and wake_at <= target:
            self.now_ms = max(self.now_ms, wake_at)
            self.core.tick(self.now_ms)
            self.drain()
        self.now_ms = target

    def beat(self, member_id: str, epoch: int, *, owned: dict[uuid.UUID, set[int]] | None = None,
             topics: tuple[str, ...] | None = None, instance: str | None = None,
             assignor: str | None = None, rebalance_timeout_ms: int = -1,
             regex: str | None = None) -> ConsumerHeartbeatResult:
        if epoch == 0:
            owned = owned or {}
            if topics is None and regex is None:
                topics = ("t",)
            rebalance_timeout_ms = 5000 if rebalance_timeout_ms < 0 else rebalance_timeout_ms
        self.tokens += 1
        self.core.consumer_group_heartbeat(self.tokens, ConsumerHeartbeat(
            GROUP, member_id, epoch, instance, None, rebalance_timeout_ms, topics, regex,
            assignor, None if owned is None else {t: frozenset(p) for t, p in owned.items()},
            "client", "/127.0.0.1"), self.now_ms)
        self.drain()
        result = self.results[self.tokens]
        assert isinstance(result, ConsumerHeartbeatResult)
        return result

    def commit(self, member_id: str, epoch: int) -> ErrorCode:
        self.tokens += 1
        self.core.commit_offsets(self.tokens, CommitRequest(
            GROUP, epoch, member_id, None, (CommitPartition("t", 0, 5, -1, ""),)), self.now_ms)
        self.drain()
        codes = self.results[self.tokens]
        assert isinstance(codes, list)
        return codes[0]  # type: ignore[no-any-return]

    def state(self) -> ConsumerGroupState:
        consumer = self.core.partitions[0].groups[GROUP].consumer
        assert consumer is not None
        return consumer.state()


def parts(result: ConsumerHeartbeatResult, topic: uuid.UUID = T) -> set[int]:
    assert result.assignment is not None, result
    return set(result.assignment.get(topic, ()))


# -- assignors ----------------------------------------------------------------------------


def test_range_gives_consecutive_ranges_the_first_members_one_more() -> None:
    """range: per topic, subscribers sorted by id take consecutive ranges."""
    topics = {"t": TopicInfo(T, "t", 7)}
    result = assign_range({"b": {"t"}, "a": {"t"}, "c": {"t"}}, topics, {})
    assert result["a"][T] == {0, 1, 2}
    assert result["b"][T] == {3, 4}
    assert result["c"][T] == {5, 6}


@pytest.mark.parametrize("members", [1, 2, 3, 4, 5, 7])
def test_uniform_is_balanced_and_covers_every_partition_once(members: int) -> None:
    """uniform: every partition once, counts differ by at most one."""
    topics = {"t": TopicInfo(T, "t", 6), "u": TopicInfo(U, "u", 5)}
    result = assign_uniform({f"m{i}": {"t", "u"} for i in range(members)}, topics, {})
    every = [(t, p) for a in result.values() for t, ps in a.items() for p in ps]
    assert sorted(every) == sorted([(T, p) for p in range(6)] + [(U, p) for p in range(5)])
    counts = [sum(len(ps) for ps in a.values()) for a in result.values()]
    assert max(counts) - min(counts) <= 1


def test_uniform_is_sticky_when_a_member_joins() -> None:
    """A member joining takes partitions only from the others' surplus: nothing else moves."""
    topics = {"t": TopicInfo(T, "t", 6)}
    before = assign_uniform({"a": {"t"}, "b": {"t"}}, topics, {})
    after = assign_uniform({"a": {"t"}, "b": {"t"}, "c": {"t"}}, topics, before)
    assert after["a"][T] <= before["a"][T] and after["b"][T] <= before["b"][T]
    assert len(after["c"][T]) == 2


def test_uniform_respects_subscriptions() -> None:
    """A member only gets partitions of topics it subscribes to."""
    topics = {"t": TopicInfo(T, "t", 4), "u": TopicInfo(U, "u", 4)}
    result = assign_uniform({"a": {"t"}, "b": {"t", "u"}}, topics, {})
    assert U not in result["a"]
    assert result["b"][U] == {0, 1, 2, 3}


# -- epochs and reconciliation ------------------------------------------------------------


def test_a_first_member_gets_everything_at_epoch_one() -> None:
    """Join with epoch 0: member epoch 1 (the group's first epoch), all partitions."""
    h = Harness()
    result = h.beat("a", 0)
    assert result.error == ErrorCode.none
    assert result.member_epoch == 1 and result.heartbeat_interval_ms == INTERVAL_MS
    assert parts(result) == set(range(6))
    assert h.state() is ConsumerGroupState.STABLE


def test_revocation_comes_before_assignment() -> None:
    """b joins a's group: b gets nothing a still owns; a is told to revoke first (its epoch
    stays); once a reports the revocation, b receives the partitions."""
    h = Harness()
    h.beat("a", 0)
    joined = h.beat("b", 0)
    assert joined.member_epoch == 2 and parts(joined) == set()  # all unreleased
    assert h.state() is ConsumerGroupState.RECONCILING
    told = h.beat("a", 1, owned={T: set(range(6))})
    assert told.member_epoch == 1  # revoking: still at its epoch
    kept = parts(told)
    assert len(kept) == 3
    waiting = h.beat("b", 2, owned={})
    assert waiting.assignment is None or parts(waiting) == set()  # a has not revoked yet
    assert h.commit("a", 1) == ErrorCode.none  # a may commit while it revokes
    done = h.beat("a", 1, owned={T: kept})
    assert done.member_epoch == 2
    given = h.beat("b", 2, owned={})
    assert parts(given) == set(range(6)) - kept
    assert h.state() is ConsumerGroupState.STABLE


def test_a_stale_or_future_epoch_is_fenced_and_unknown_members_are_refused() -> None:
    """FENCED_MEMBER_EPOCH for an epoch that is not the member's; UNKNOWN_MEMBER_ID for a
    member the group does not know; the previous epoch is accepted with a subset owned."""
    h = Harness()
    h.beat("a", 0)
    assert h.beat("a", 7, owned={}).error == ErrorCode.fenced_member_epoch
    assert h.beat("nobody", 1, owned={}).error == ErrorCode.unknown_member_id
    h.beat("b", 0)
    h.beat("a", 1, owned={T: set(range(6))})
    a = h.core.partitions[0].groups[GROUP].consumer.members["a"]  # type: ignore[union-attr]
    h.beat("a", 1, owned={T: set(a.assigned[T])})
    assert a.member_epoch == 2 and a.previous_member_epoch == 1
    lost_response = h.beat("a", 1, owned={T: set(a.assigned[T])})
    assert lost_response.error == ErrorCode.none and lost_response.member_epoch == 2


def test_a_silent_member_is_fenced_after_the_session_timeout() -> None:
    """No heartbeat for group.consumer.session.timeout.ms: the member is removed, the group
    epoch bumped, and its partitions go to the survivor."""
    h = Harness()
    h.beat("a", 0)
    h.beat("b", 0)
    kept = parts(h.beat("a", 1, owned={T: set(range(6))}))
    h.beat("a", 1, owned={T: kept})
    h.beat("b", 2, owned={})
    for _ in range(SESSION_MS // 500 + 1):
        h.advance(500)
        h.beat("a", 2, owned={T: kept})
    consumer = h.core.partitions[0].groups[GROUP].consumer
    assert consumer is not None and "b" not in consumer.members
    assert consumer.group_epoch == 3
    assert parts(h.beat("a", 2, owned={T: kept})) == set(range(6))
    assert h.beat("b", 2, owned={}).error == ErrorCode.unknown_member_id


def test_a_member_that_does_not_revoke_is_fenced_after_its_rebalance_timeout() -> None:
    """A member told to revoke that keeps reporting the partitions is removed once its
    rebalance timeout passes, and the joiner gets everything."""
    h = Harness()
    h.beat("a", 0, rebalance_timeout_ms=1000)
    h.beat("b", 0)
    for _ in range(4):  # told to revoke at 400 ms; fenced at 1400 ms
        h.advance(400)
        h.beat("a", 1, owned={T: set(range(6))})  # never revokes
        h.beat("b", 2, owned={})
    consumer = h.core.partitions[0].groups[GROUP].consumer
    assert consumer is not None and set(consumer.members) == {"b"}
    assert parts(h.beat("b", consumer.members["b"].member_epoch, owned={})) == set(range(6))


def test_leaving_with_epoch_minus_one_moves_partitions_at_once() -> None:
    """Epoch -1 leaves: the answer carries epoch -1 and the other member gets everything."""
    h = Harness()
    h.beat("a", 0)
    h.beat("b", 0)
    kept = parts(h.beat("a", 1, owned={T: set(range(6))}))
    h.beat("a", 1, owned={T: kept})
    h.beat("b", 2, owned={})
    assert h.beat("a", -1).member_epoch == -1
    result = h.beat("b", 2, owned={T: set(range(6)) - kept})
    assert result.member_epoch == 3 and parts(result) == set(range(6))


def test_a_static_member_is_replaced_without_rebalance_and_an_active_one_is_unreleased() -> None:
    """Instance id in use by a live member: UNRELEASED_INSTANCE_ID; after it leaves with
    epoch -2, a new member id under the same instance id takes its place, epoch and
    partitions, without a new group epoch."""
    h = Harness()
    first = h.beat("a", 0, instance="i1")
    assert h.beat("a2", 0, instance="i1").error == ErrorCode.unreleased_instance_id
    assert h.beat("a", -2, instance="i1").member_epoch == -2
    back = h.beat("a2", 0, instance="i1")
    assert back.error == ErrorCode.none
    assert back.member_epoch == first.member_epoch and parts(back) == set(range(6))
    consumer = h.core.partitions[0].groups[GROUP].consumer
    assert consumer is not None and set(consumer.members) == {"a2"}
    assert consumer.group_epoch == 1


def test_new_partitions_bump_the_group_epoch_and_reach_the_members() -> None:
    """A subscribed topic growing from 6 to 8 partitions: a new group epoch, the member
    receives the two new partitions; a topic created that matches a regex joins too."""
    h = Harness()
    h.beat("a", 0, regex="t.*")
    h.advance(0)  # the regex is resolved after the heartbeat (see test_group_semantics)
    assert h.beat("a", 1, owned={}).member_epoch == 2
    h.core.update_topics({"t": TopicInfo(T, "t", 8)}, h.now_ms)
    result = h.beat("a", 2, owned={T: set(range(6))})
    assert result.member_epoch == 3 and parts(result) == set(range(8))
    h.core.update_topics({"t": TopicInfo(T, "t", 8), "tx": TopicInfo(U, "tx", 2)}, h.now_ms)
    result = h.beat("a", 3, owned={T: set(range(8))})
    assert result.member_epoch == 4 and parts(result, U) == {0, 1}


def test_the_configured_assignor_and_a_members_choice() -> None:
    """The first of group.consumer.assignors by default; a member may ask for another; an
    unknown one is UNSUPPORTED_ASSIGNOR."""
    h = Harness(consumer_assignors=("range", "uniform"))
    h.beat("a", 0)
    consumer = h.core.partitions[0].groups[GROUP].consumer
    assert consumer is not None and consumer.assignor == "range"
    h.beat("b", 0, assignor="uniform")
    assert consumer.assignor == "uniform"
    assert h.beat("c", 0, assignor="sticky").error == ErrorCode.unsupported_assignor


def test_first_heartbeat_validation() -> None:
    """Kafka's INVALID_REQUEST cases of a join."""
    h = Harness()
    assert h.beat("", 0).error == ErrorCode.invalid_request  # v1: the client's id
    assert h.beat("a", 0, owned={T: {1}}).error == ErrorCode.invalid_request
    assert h.beat("a", -3).error == ErrorCode.invalid_request
    assert h.beat("a", 0, regex="(").error == ErrorCode.invalid_regular_expression


# -- offsets and the group's kind -----------------------------------------------------------


def test_offset_commits_check_the_member_epoch() -> None:
    """OffsetCommit's generation is the member epoch: another epoch is STALE_MEMBER_EPOCH,
    an unknown member UNKNOWN_MEMBER_ID, a simple commit on a non-empty group too."""
    h = Harness()
    h.beat("a", 0)
    assert h.commit("a", 1) == ErrorCode.none
    assert h.commit("a", 2) == ErrorCode.stale_member_epoch
    assert h.commit("x", 1) == ErrorCode.unknown_member_id
    assert h.commit("", -1) == ErrorCode.unknown_member_id
    h.beat("a", -1)
    assert h.commit("", -1) == ErrorCode.none


def test_classic_and_consumer_groups_do_not_mix() -> None:
    """A classic JoinGroup on a consumer group with members: INCONSISTENT_GROUP_PROTOCOL; a
    ConsumerGroupHeartbeat on a classic group with members: GROUP_ID_NOT_FOUND; the
    consumer group is listed and described as Kafka does."""
    h = Harness()
    h.beat("a", 0)
    h.tokens += 1
    h.core.join_group(h.tokens, JoinRequest(GROUP, "", None, "consumer", (("range", b""),),
                                            6000, 6000, "c", "/h", True, True), h.now_ms)
    h.drain()
    assert h.results[h.tokens].error == ErrorCode.inconsistent_group_protocol
    h.tokens += 1
    h.core.join_group(h.tokens, JoinRequest("classic", "", None, "consumer",
                                            (("range", b""),), 6000, 6000, "c", "/h", False,
                                            True), h.now_ms)
    h.drain()
    h.tokens += 1
    h.core.consumer_group_heartbeat(h.tokens, ConsumerHeartbeat(
        "classic", "z", 0, None, None, 5000, ("t",), None, None, {}), h.now_ms)
    h.drain()
    assert h.results[h.tokens].error == ErrorCode.group_id_not_found
    listed = {g.group_id: g for g in h.core.list_groups()}
    assert listed[GROUP].group_type == "consumer" and listed[GROUP].protocol_type == "consumer"
    assert [g.group_id for g in h.core.list_groups(types=["consumer"])] == [GROUP]
    described = h.core.describe_group(GROUP)  # Kafka 4.0: DescribeGroups is classic only
    assert (described.error, described.state) == (ErrorCode.group_id_not_found,
                                                      GroupState.DEAD)
    cgd = h.core.consumer_group_describe(GROUP)
    assert cgd.error == ErrorCode.none and cgd.group_epoch == 1
    assert cgd.members[0].assignment == ((T, "t", (0, 1, 2, 3, 4, 5)),)
    assert h.core.consumer_group_describe("classic").error == ErrorCode.group_id_not_found


# -- persistence: __consumer_offsets records and replay ---------------------------------------


def reloaded(h: Harness) -> GroupCoordinator:
    """A fresh coordinator that replayed `h`'s log (through the byte codec)."""
    core = GroupCoordinator(h.config, random.Random(9))
    core.update_topics(dict(h.core.topics), h.now_ms)
    core.begin_load(0, 1)
    for record in h.log:
        decoded = decode_record(*encode_record(record))
        assert decoded is not None
        core.load(0, decoded)
    core.complete_load(0, h.now_ms)
    return core


def snapshot(core: GroupCoordinator) -> Any:
    group = core.partitions[0].groups.get(GROUP)
    if group is None or group.consumer is None:
        return None
    c = group.consumer
    return (c.group_epoch, c.assignment_epoch, dict(c.target), dict(c.owners),
            dict(c.subscription_metadata), dict(c.static_members),
            {m.member_id: (m.member_epoch, m.previous_member_epoch, m.state, m.assigned,
                           m.pending_revocation, m.subscribed_topic_names, m.instance_id,
                           m.client_id, m.rebalance_timeout_ms)
             for m in c.members.values()})


def test_replay_rebuilds_the_group_mid_reconciliation_and_members_carry_on() -> None:
    """The log holds epochs, subscriptions, target and current assignments (partitions
    pending revocation included); a reloaded coordinator has the same group, and its
    members' next heartbeats continue the reconciliation where it stood."""
    h = Harness()
    h.beat("a", 0, instance="ia")
    h.beat("b", 0)
    kept = parts(h.beat("a", 1, owned={T: set(range(6))}))  # a is revoking now
    assert snapshot(h.core) is not None
    h.core = reloaded(h)
    assert snapshot(h.core) == snapshot(reloaded(h))
    before = snapshot(h.core)
    assert before[0] == 2 and before[6]["a"][2].value == "unrevoked_partitions"
    assert h.beat("a", 1, owned={T: kept}).member_epoch == 2
    assert parts(h.beat("b", 2, owned={})) == set(range(6)) - kept
    assert snapshot(reloaded(h)) == snapshot(h.core)


def test_left_members_and_deleted_groups_stay_gone_after_replay() -> None:
    """A member that left is absent after replay; a group whose last member left (and
    that has no offsets) leaves nothing behind; a group with offsets keeps its epoch."""
    h = Harness()
    h.beat("a", 0)
    h.beat("b", 0)
    h.beat("b", -1)
    members = snapshot(reloaded(h))[6]
    assert set(members) == {"a"}
    h.beat("a", -1)
    assert snapshot(reloaded(h)) is None and GROUP not in reloaded(h).partitions[0].groups
    h.beat("c", 0)
    assert h.commit("c", snapshot(h.core)[6]["c"][0]) == ErrorCode.none
    h.beat("c", -1)
    replayed = reloaded(h)
    group = replayed.partitions[0].groups[GROUP]
    assert group.consumer is not None and not group.consumer.members
    assert group.consumer.group_epoch == snapshot(h.core)[0]
    assert replayed.fetch_offsets(GROUP, None)[1][("t", 0)].offset == 5


def test_a_replayed_member_that_never_returns_is_fenced_by_its_session() -> None:
    """Members loaded from the log get a fresh session; one that does not heartbeat again
    is removed when it expires."""
    h = Harness()
    h.beat("a", 0)
    h.core = reloaded(h)
    h.advance(SESSION_MS + 1)
    assert GROUP not in h.core.partitions[0].groups  # no members, no offsets: deleted
    assert h.log[-1].value is None and type(h.log[-1].key).__name__ == (
        "ConsumerGroupMetadataKey")
    assert GROUP not in reloaded(h).partitions[0].groups


class Client:
    """A well-behaved member: it owns what the coordinator last gave it, and gives it all
    up once its session has lapsed without a successful heartbeat (as librdkafka does)."""

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self.epoch = 0
        self.owned: dict[uuid.UUID, set[int]] = {}
        self.last_ok_ms = 0

    def check_session(self, now_ms: int) -> None:
        if now_ms - self.last_ok_ms >= SESSION_MS:
            self.epoch, self.owned = 0, {}

    def beat(self, h: Harness) -> None:
        self.check_session(h.now_ms)
        result = h.beat(self.member_id, self.epoch, owned=self.owned)
        if result.error != ErrorCode.none:
            self.epoch, self.owned = 0, {}  # fenced or unknown: rejoin from scratch
            return
        self.last_ok_ms = h.now_ms
        self.epoch = result.member_epoch
        if result.assignment is not None:
            self.owned = {t: set(p) for t, p in result.assignment.items()}


@pytest.mark.parametrize("seed", range(30))
def test_random_members_never_share_a_partition_and_the_log_always_matches(seed: int) -> None:
    """Members join, heartbeat, leave, stall and come back at random: no partition is ever
    owned by two clients, every replay of the log equals the live group, and once everyone
    heartbeats steadily the group is stable with every partition owned once."""
    rng = random.Random(seed)
    h = Harness()
    clients = [Client(f"m{i}") for i in range(rng.randint(2, 5))]
    for _ in range(60):
        client = rng.choice(clients)
        action = rng.random()
        if action < 0.1:
            h.beat(client.member_id, -1)
            client.epoch, client.owned = 0, {}
        elif action < 0.2:
            h.advance(rng.choice([100, SESSION_MS + 1]))
        else:
            client.beat(h)
        for each in clients:
            each.check_session(h.now_ms)
        held = [(t, p) for c in clients for t, ps in c.owned.items() for p in ps]
        assert len(held) == len(set(held)), held
        assert snapshot(reloaded(h)) == snapshot(h.core)
    for _ in range(10):
        for client in clients:
            client.beat(h)
    assert h.state() is ConsumerGroupState.STABLE
    held = sorted(p for c in clients for ps in c.owned.values() for p in ps)
    assert held == list(range(6))


def test_a_deleted_topic_is_revoked_and_an_empty_group_can_turn_classic() -> None:
    """A subscribed topic deleted: new group epoch, its partitions are revoked; once the
    member leaves, the group (kept for its offsets) accepts a classic member, and its
    consumer-group records are tombstoned so a replay has a classic group."""
    h = Harness()
    h.core.update_topics({"t": TopicInfo(T, "t", 6), "u": TopicInfo(U, "u", 2)}, h.now_ms)
    h.beat("a", 0, topics=("t", "u"))
    h.core.update_topics({"t": TopicInfo(T, "t", 6)}, h.now_ms)
    result = h.beat("a", 1, owned={T: set(range(6)), U: {0, 1}})
    assert result.member_epoch == 1 and U not in (result.assignment or {})  # revoking u
    result = h.beat("a", 1, owned={T: set(range(6))})
    assert result.member_epoch == 2
    assert h.commit("a", 2) == ErrorCode.none
    h.beat("a", -1)
    h.tokens += 1
    h.core.join_group(h.tokens, JoinRequest(GROUP, "", None, "consumer", (("range", b""),),
                                            6000, 6000, "c", "/h", False, True), h.now_ms)
    h.drain()
    assert h.results.get(h.tokens) is None or h.results[h.tokens].error == ErrorCode.none
    group = h.core.partitions[0].groups[GROUP]
    assert group.consumer is None and group.members
    replayed = reloaded(h).partitions[0].groups[GROUP]
    assert replayed.consumer is None
    assert replayed.offsets[("t", 0)].offset == 5


def test_a_topic_grown_while_unloaded_makes_a_new_epoch_on_load() -> None:
    """The subscribed topic gained partitions while another broker (or none) led the group's
    partition: loading bumps the group epoch, so the member gets the new partitions."""
    h = Harness()
    h.beat("a", 0)
    h.core.topics = {}
    grown = GroupCoordinator(h.config, random.Random(4))
    grown.update_topics({"t": TopicInfo(T, "t", 8)}, h.now_ms)
    grown.begin_load(0, 1)
    for record in h.log:
        grown.load(0, record)
    grown.complete_load(0, h.now_ms)
    h.core = grown
    h.drain()
    result = h.beat("a", 1, owned={T: set(range(6))})
    assert result.member_epoch == 2 and parts(result) == set(range(8))
    assert snapshot(reloaded(h)) == snapshot(h.core)


def test_group_config_refuses_inconsistent_consumer_settings() -> None:
    """As Kafka at start-up: the session timeout within its min/max, the heartbeat interval
    below the session timeout, known assignors (short or class names)."""
    with pytest.raises(ValueError, match="session.timeout"):
        GroupConfig.from_properties({"group.consumer.session.timeout.ms": "1000"})
    with pytest.raises(ValueError, match="heartbeat.interval"):
        GroupConfig.from_properties({"group.consumer.heartbeat.interval.ms": "50000"})
    with pytest.raises(ValueError, match="assignor"):
        GroupConfig.from_properties({"group.consumer.assignors": "sticky"})
    config = GroupConfig.from_properties({"group.consumer.assignors": (
        "org.apache.kafka.coordinator.group.assignor.RangeAssignor, uniform")})
    assert config.consumer_assignors == ("range", "uniform")


def test_a_full_group_refuses_new_members_but_not_their_heartbeats() -> None:
    """group.consumer.max.size: a join beyond it gets GROUP_MAX_SIZE_REACHED; members in
    the group keep heartbeating."""
    h = Harness(consumer_group_size_max=2)
    h.beat("a", 0)
    h.beat("b", 0)
    assert h.beat("c", 0).error == ErrorCode.group_max_size_reached
    assert h.beat("b", 2, owned={}).error == ErrorCode.none


def test_a_heartbeat_of_an_unknown_member_does_not_convert_an_offsets_only_group() -> None:
    """A group holding only offsets (classic, empty) stays as it is when a stranger
    heartbeats with an epoch; a join (epoch 0) turns it into a consumer group."""
    h = Harness()
    assert h.commit("", -1) == ErrorCode.none
    written = len(h.log)
    assert h.beat("x", 3, owned={}).error == ErrorCode.unknown_member_id
    assert h.core.partitions[0].groups[GROUP].consumer is None and len(h.log) == written
    assert h.beat("x", 0).error == ErrorCode.none
    assert h.core.partitions[0].groups[GROUP].consumer is not None
