"""RaftCore between voters, message by message: vote rules, pre-vote, DivergingEpoch and
truncation, the current-epoch commit rule. (The simulator in tests/sim covers the rest.)"""

from __future__ import annotations

import random

from kio.schema.errors import ErrorCode

from pykraft.raft.core import RaftConfig, RaftCore
from pykraft.raft.log_store import MemoryLogStore
from pykraft.raft.messages import (
    BeginQuorumEpochRequest,
    DivergingEpoch,
    FetchRequest,
    FetchResponse,
    InboundMessage,
    OutboundMessage,
    RaftMessage,
    VoteRequest,
    VoteResponse,
)
from pykraft.raft.state import EpochState, Follower, Leader, QuorumStateData, Unattached, Voted
from pykraft.records.record import build_batch

TRIO = frozenset({1, 2, 3})
CONFIG = RaftConfig(election_timeout_ms=100, fetch_timeout_ms=200, request_timeout_ms=100,
                    fetch_max_wait_ms=50)


class Node:
    """One core over a MemoryLogStore, with the shell's steps done at once."""

    def __init__(self, node_id: int, store: MemoryLogStore | None = None,
                 persisted: QuorumStateData | None = None) -> None:
        self.store = store or MemoryLogStore()
        self.persisted = persisted or QuorumStateData()
        self.now_ms = 0
        self.core = RaftCore(node_id, TRIO, self.store, self.persisted, random.Random(node_id),
                             0, config=CONFIG)

    def turn(self) -> list[OutboundMessage]:
        ready = self.core.ready()
        if ready.quorum_state is not None:
            self.persisted = ready.quorum_state
        if ready.truncate_to is not None:
            self.store.truncate_to(ready.truncate_to)
        for batch in ready.batches:
            self.store.append(batch)
        self.store.flush()
        self.core.advance(ready)
        self.core.flushed(self.store.flushed_offset)
        return list(ready.messages)

    def receive(
        self, source: int, body: RaftMessage, correlation_id: int = 1
    ) -> list[OutboundMessage]:
        self.core.step(InboundMessage(source, correlation_id, body), self.now_ms)
        return self.turn()


def log_of(*epochs: int) -> MemoryLogStore:
    """A log with one single-record batch per given epoch, at offsets 0, 1, ..."""
    store = MemoryLogStore()
    for offset, epoch in enumerate(epochs):
        store.append(build_batch([(None, b"e%d" % epoch, (), 0)], base_offset=offset,
                                 partition_leader_epoch=epoch))
    store.flush()
    return store


def test_a_vote_goes_to_an_up_to_date_log_once_per_epoch_and_is_durable_first() -> None:
    """Candidate 2 with a shorter log is refused; 3 gets the vote, persisted in the same
    Ready as the grant; 2 asking again in that epoch is refused."""
    voter = Node(1, log_of(1, 1, 2), QuorumStateData(leader_epoch=2))
    (refusal,) = voter.receive(2, VoteRequest(3, 2, last_offset_epoch=2, last_offset=2))
    assert isinstance(refusal.body, VoteResponse) and not refusal.body.vote_granted
    assert voter.core.state == Unattached(3)
    ready = voter.core.ready()
    assert ready.messages == ()
    voter.core.step(InboundMessage(3, 7, VoteRequest(3, 3, last_offset_epoch=2, last_offset=3)),
                    0)
    ready = voter.core.ready()
    assert ready.quorum_state is not None and ready.quorum_state.voted_id == 3
    (grant,) = ready.messages
    assert isinstance(grant.body, VoteResponse) and grant.body.vote_granted
    assert grant.correlation_id == 7
    voter.turn()
    after_grant: EpochState = voter.core.state
    assert after_grant == Voted(3, 3)
    (again,) = voter.receive(2, VoteRequest(3, 2, last_offset_epoch=5, last_offset=9))
    assert isinstance(again.body, VoteResponse) and not again.body.vote_granted


def test_a_follower_of_a_live_leader_refuses_pre_votes_and_keeps_its_epoch() -> None:
    """KIP-996: a rejoining node cannot unseat a leader its peers still hear from."""
    voter = Node(1)
    voter.receive(2, BeginQuorumEpochRequest(leader_id=2, leader_epoch=4))
    assert voter.core.state == Follower(4, 2)
    (answer,) = [m for m in voter.receive(3, VoteRequest(5, 3, 9, 100, pre_vote=True))
                 if isinstance(m.body, VoteResponse)]
    assert isinstance(answer.body, VoteResponse)
    assert not answer.body.vote_granted and answer.body.leader_epoch == 4
    assert voter.core.state == Follower(4, 2)


def test_the_leader_answers_a_divergence_and_the_follower_truncates_to_it() -> None:
    """Follower log epochs [1, 1, 3, 3]; leader [1, 1, 2, 2, 5...]: the follower's fetch at
    (4, epoch 3) gets DivergingEpoch(2, 4); it truncates to offset 2, where its epoch 1
    ends, then fetches (2, epoch 1), which matches."""
    leader_store = log_of(1, 1, 2, 2)
    leader = Node(2, leader_store, QuorumStateData(leader_epoch=4, voted_id=2))
    assert leader.core.end_offset_for_epoch(3) == (2, 4)
    assert leader.core.end_offset_for_epoch(1) == (1, 2)
    assert leader.core.end_offset_for_epoch(0) == (0, 0)

    follower = Node(1, log_of(1, 1, 3, 3), QuorumStateData(leader_epoch=5, leader_id=2))
    follower.core.tick(0)
    (fetch,) = follower.turn()
    assert fetch.body == FetchRequest(1, 5, fetch_offset=4, last_fetched_epoch=3)
    response = FetchResponse(ErrorCode.none, 2, 5, -1,
                             diverging_epoch=DivergingEpoch(epoch=2, end_offset=4))
    follower.core.step(InboundMessage(2, fetch.correlation_id, response), 0)
    assert follower.core.ready().truncate_to == 2
    assert follower.turn() == []  # the truncation is done before the next fetch is sent
    (next_fetch,) = follower.turn()
    assert follower.store.log_end_offset == 2
    assert next_fetch.body == FetchRequest(1, 5, fetch_offset=2, last_fetched_epoch=1)


def test_a_stale_or_duplicated_fetch_response_is_ignored() -> None:
    follower = Node(1, persisted=QuorumStateData(leader_epoch=5, leader_id=2))
    follower.core.tick(0)
    (fetch,) = follower.turn()
    records = build_batch([(None, b"x", (), 0)], base_offset=0, partition_leader_epoch=5)
    follower.receive(2, FetchResponse(ErrorCode.none, 2, 5, 1, records=records),
                     fetch.correlation_id + 100)
    assert follower.store.log_end_offset == 0
    follower.receive(2, FetchResponse(ErrorCode.none, 2, 5, 1, records=records),
                     fetch.correlation_id)
    assert follower.store.log_end_offset == 1 and follower.core.high_watermark == 1
    follower.receive(2, FetchResponse(ErrorCode.none, 2, 5, 1, records=records),
                     fetch.correlation_id)  # the duplicate
    assert follower.store.log_end_offset == 1


def test_a_new_leader_commits_old_entries_only_with_one_of_its_own_epoch() -> None:
    """Raft's figure 8: a majority holding an entry of an earlier epoch commits nothing;
    once a majority holds the leader's LeaderChangeMessage, everything below commits."""
    leader = Node(1, log_of(1, 1, 2), QuorumStateData(leader_epoch=3, voted_id=1))
    leader.now_ms = 1_000
    leader.core.tick(1_000)
    leader.turn()
    pre_vote = VoteResponse(ErrorCode.none, -1, 3, True, candidate_epoch=4, pre_vote=True)
    leader.core.step(InboundMessage(2, 1, pre_vote), 1_000)
    prevote_done = leader.core.state
    assert prevote_done.epoch == 4  # a candidate now, after a majority of pre-votes
    leader.turn()
    leader.core.step(InboundMessage(2, 2, VoteResponse(ErrorCode.none, -1, 4, True, 4)), 1_000)
    leader.turn()
    leader.turn()
    assert isinstance(leader.core.state, Leader) and leader.core.state.epoch_start_offset == 3
    leader.receive(2, FetchRequest(2, 4, fetch_offset=3, last_fetched_epoch=2))
    assert leader.core.high_watermark is None  # offsets 0-2 are on a majority, not enough
    leader.receive(2, FetchRequest(2, 4, fetch_offset=4, last_fetched_epoch=4))
    assert leader.core.high_watermark == 4


def test_a_follower_lacking_the_leaders_epoch_truncates_to_its_own_epoch_end() -> None:
    """Follower batches [0: epoch 1], [1-3: epoch 1], [4: epoch 3]; the leader answers
    DivergingEpoch(2, 2), an epoch the follower never had, ending inside the follower's
    second batch. As Kafka's truncateToEndOffset, the follower truncates to where its own
    largest epoch below 2 ends (offset 4), a batch boundary, then asks again from there."""
    store = MemoryLogStore()
    store.append(build_batch([(None, b"a", (), 0)], base_offset=0, partition_leader_epoch=1))
    store.append(build_batch([(None, b"b", (), 0), (None, b"c", (), 0), (None, b"d", (), 0)],
                             base_offset=1, partition_leader_epoch=1))
    store.append(build_batch([(None, b"e", (), 0)], base_offset=4, partition_leader_epoch=3))
    store.flush()
    follower = Node(1, store, QuorumStateData(leader_epoch=5, leader_id=2))
    follower.core.tick(0)
    (fetch,) = follower.turn()
    assert fetch.body == FetchRequest(1, 5, fetch_offset=5, last_fetched_epoch=3)
    response = FetchResponse(ErrorCode.none, 2, 5, -1,
                             diverging_epoch=DivergingEpoch(epoch=2, end_offset=2))
    follower.core.step(InboundMessage(2, fetch.correlation_id, response), 0)
    assert follower.core.ready().truncate_to == 4
    follower.turn()
    (next_fetch,) = follower.turn()
    assert next_fetch.body == FetchRequest(1, 5, fetch_offset=4, last_fetched_epoch=1)


def test_a_timer_driven_change_of_state_says_why_once() -> None:
    """The shell logs why a node stopped following (fetch timeout) or leading (check
    quorum): the core keeps the reason until it is taken; message-driven changes have none."""
    follower = Node(1)
    follower.receive(2, BeginQuorumEpochRequest(leader_id=2, leader_epoch=4))
    assert follower.core.take_transition_reason() is None
    follower.core.tick(10_000)
    assert follower.core.state.epoch == 4 and not isinstance(follower.core.state, Follower)
    reason = follower.core.take_transition_reason()
    assert reason is not None and reason.startswith("no fetch answered by leader 2 for ")
    assert follower.core.take_transition_reason() is None

    leader = leader_of_epoch_2()
    leader.core.take_transition_reason()
    leader.now_ms = 1_100
    leader.receive(3, FetchRequest(3, 2, fetch_offset=1, last_fetched_epoch=1))
    leader.core.tick(1_000 + CONFIG.check_quorum_timeout_ms + 200)
    assert not isinstance(leader.core.state, Leader)
    reason = leader.core.take_transition_reason()
    assert reason == (f"no majority of voters fetched within {CONFIG.check_quorum_timeout_ms}"
                      " ms (last fetches: 2 500 ms ago, 3 400 ms ago)")


def leader_of_epoch_2() -> Node:
    """Node 1 leading epoch 2 at t=1,000 ms, voted in by voter 2."""
    leader = Node(1, log_of(1), QuorumStateData(leader_epoch=1, voted_id=1))
    leader.core.tick(1_000)
    leader.turn()
    leader.core.step(InboundMessage(2, 1, VoteResponse(
        ErrorCode.none, -1, 1, True, candidate_epoch=2, pre_vote=True)), 1_000)
    leader.turn()
    leader.core.step(InboundMessage(2, 2, VoteResponse(ErrorCode.none, -1, 2, True, 2)), 1_000)
    leader.turn()
    assert isinstance(leader.core.state, Leader)
    return leader


def test_a_stall_of_its_own_is_left_out_of_the_timeouts() -> None:
    """A leader whose loop was held 1 s judges check-quorum on the time it could hear:
    a voter that fetched just before the stall still counts, until it has been silent for
    the timeout outside it. A follower's fetch deadline moves by the stall as well, by at
    most fetch.timeout.ms."""
    timeout = CONFIG.check_quorum_timeout_ms
    stall = 1_000
    for told in (False, True):  # the same silence, with and without the stall told
        leader = leader_of_epoch_2()
        leader.now_ms = 1_100
        leader.receive(2, FetchRequest(2, 2, fetch_offset=1, last_fetched_epoch=1))
        if told:
            leader.core.stalled(stall)
        leader.core.tick(1_100 + stall + timeout - 10)
        assert isinstance(leader.core.state, Leader) is told
    silence = timeout + timeout // 4 + 10  # past the timeout, at the next check
    leader.core.tick(1_100 + stall + silence)  # silent for the timeout while listening
    assert not isinstance(leader.core.state, Leader)
    reason = leader.core.take_transition_reason()
    assert reason is not None and f"2 {stall + silence} ms ago" in reason

    def gives_up_at(stall: int) -> int:
        """When a follower (same jitter each time) gives up on a silent leader."""
        follower = Node(1)
        follower.receive(2, BeginQuorumEpochRequest(leader_id=2, leader_epoch=4))
        follower.core.stalled(stall)
        for now in range(0, 10_000, 5):
            follower.core.tick(now)
            if not isinstance(follower.core.state, Follower):
                return now
        raise AssertionError("never gave up")

    silent = gives_up_at(0)
    assert gives_up_at(100) - silent in range(100, 105)  # the stall is left out
    # but at most fetch.timeout.ms of stalls is: a loop always late still finds a dead leader
    assert gives_up_at(5_000) - silent in range(CONFIG.fetch_timeout_ms,
                                               CONFIG.fetch_timeout_ms + 5)


def test_a_follower_s_own_time_writing_an_answer_is_not_counted_against_its_leader() -> None:
    """The fetch timeout is the leader's to answer: a follower that took longer than the
    timeout to write and flush what the leader sent (42 MB of a controlled shutdown at
    1,000,000 partitions took 2-4 s) fetches again instead of starting an election, and
    the leader then has a full timeout from that fetch; if it stays silent the follower
    still gives up on it."""
    follower = Node(1)
    sent = follower.receive(2, BeginQuorumEpochRequest(leader_id=2, leader_epoch=4))
    (fetch,) = [m for m in sent if isinstance(m.body, FetchRequest)]
    records = build_batch([(None, b"x", (), 0)], base_offset=0, partition_leader_epoch=4)
    follower.core.step(InboundMessage(2, fetch.correlation_id, FetchResponse(
        error=ErrorCode.none, leader_id=2, leader_epoch=4, high_watermark=0,
        records=bytes(records))), 10)
    ready = follower.core.ready()  # the shell writes the batch ...
    assert ready.batches
    slow = 10 + 5 * CONFIG.fetch_timeout_ms  # ... and takes far longer than the timeout
    follower.store.append(ready.batches[0])
    follower.store.flush()
    follower.core.advance(ready, now_ms=slow)
    follower.core.flushed(follower.store.flushed_offset)
    assert isinstance(follower.core.state, Follower)
    sent = [m for m in follower.turn() if isinstance(m.body, FetchRequest)]
    assert [m.body.fetch_offset for m in sent] == [1]  # it fetched again instead
    for now in range(slow, slow + 10_000, 5):  # no answer from now on
        follower.core.tick(now)
        follower.turn()
        if not isinstance(follower.core.state, Follower):
            break
    assert now - slow in range(CONFIG.fetch_timeout_ms,
                               CONFIG.fetch_timeout_ms + CONFIG.election_jitter_ms + 10)
