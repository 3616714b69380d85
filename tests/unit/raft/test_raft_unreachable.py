"""RaftCore and the transport's `Unreachable` reports, message by message: a follower whose
fetches to its leader fail twice in a row stops vouching for it and runs a pre-vote after a
random jitter instead of fetch.timeout.ms; one failure, a stale report, or an answer from the
leader in the meantime change nothing lasting; fetch timeouts are spread by a jitter too."""

from __future__ import annotations

import random

from kio.schema.errors import ErrorCode

from pykraft.raft.core import RaftConfig, RaftCore
from pykraft.raft.log_store import MemoryLogStore
from pykraft.raft.messages import (
    BeginQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    InboundMessage,
    OutboundMessage,
    RaftMessage,
    Unreachable,
    VoteRequest,
    VoteResponse,
)
from pykraft.raft.state import (
    Candidate,
    EpochState,
    Follower,
    Prospective,
    QuorumStateData,
)

TRIO = frozenset({1, 2, 3})
CONFIG = RaftConfig(
    election_timeout_ms=1_000,
    election_backoff_max_ms=200,  # jitter up to 100 ms
    fetch_timeout_ms=2_000,
    request_timeout_ms=1_000,
    retry_backoff_ms=20,
    fetch_max_wait_ms=500,
)
LEADER = 2
EPOCH = 4


class Node:
    """One core over a MemoryLogStore, with the shell's steps done at once."""

    def __init__(self, node_id: int = 1, *, seed: int = 1, voters: frozenset[int] = TRIO) -> None:
        self.store = MemoryLogStore()
        self.now_ms = 0
        self.core = RaftCore(node_id, voters, self.store, QuorumStateData(),
                             random.Random(seed), 0, config=CONFIG)

    def turn(self) -> list[OutboundMessage]:
        ready = self.core.ready()
        for batch in ready.batches:
            self.store.append(batch)
        self.store.flush()
        self.core.advance(ready)
        self.core.flushed(self.store.flushed_offset)
        return list(ready.messages)

    def at(self, now_ms: int) -> list[OutboundMessage]:
        self.now_ms = now_ms
        self.core.tick(now_ms)
        return self.turn()

    def receive(self, source: int, body: RaftMessage | Unreachable,
                correlation_id: int = 1) -> list[OutboundMessage]:
        self.core.step(InboundMessage(source, correlation_id, body), self.now_ms)
        return self.turn()

    def follow(self) -> OutboundMessage:
        """Follow LEADER in EPOCH; the first fetch to it."""
        sent = self.receive(LEADER, BeginQuorumEpochRequest(leader_id=LEADER, leader_epoch=EPOCH))
        assert self.core.state == Follower(EPOCH, LEADER)
        return self._the_fetch(sent)

    def fetch(self) -> OutboundMessage:
        """Let the clock reach now_ms: the fetch that goes out."""
        return self._the_fetch(self.at(self.now_ms))

    def _the_fetch(self, sent: list[OutboundMessage]) -> OutboundMessage:
        (fetch,) = [m for m in sent if isinstance(m.body, FetchRequest)]
        assert fetch.destination_id == LEADER
        return fetch

    def answer(self, fetch: OutboundMessage) -> OutboundMessage:
        """The leader answers `fetch`: the next fetch, which goes out at once."""
        return self._the_fetch(self.receive(
            LEADER, FetchResponse(ErrorCode.none, LEADER, EPOCH, -1), fetch.correlation_id))

    def report(self, request: OutboundMessage) -> None:
        self.receive(request.destination_id, Unreachable(), request.correlation_id)


def state_of(node: Node) -> EpochState:
    return node.core.state  # (unnarrowed, for mypy)


def pre_votes(messages: list[OutboundMessage]) -> list[OutboundMessage]:
    return [m for m in messages if isinstance(m.body, VoteRequest) and m.body.pre_vote]


def test_two_failed_fetches_in_a_row_start_a_pre_vote_within_the_jitter() -> None:
    """The leader's process died: its connection closes (report 1), the retry after
    retry.backoff.ms is refused (report 2); within election.backoff.max.ms / 2 the follower
    asks the other voters for pre-votes -- not fetch.timeout.ms (2 s) later."""
    node = Node()
    first = node.follow()
    node.now_ms = 5
    node.report(first)
    assert node.core.state == Follower(EPOCH, LEADER)
    assert node.at(10) == []  # not before retry.backoff.ms
    node.now_ms = 25
    second = node.fetch()
    assert second.correlation_id != first.correlation_id
    node.now_ms = 26
    node.report(second)
    assert node.core.state == Follower(EPOCH, LEADER)
    wake_at_ms = node.core.ready().wake_at_ms
    assert 26 <= wake_at_ms <= 26 + CONFIG.election_jitter_ms
    sent = node.at(26 + CONFIG.election_jitter_ms)
    assert isinstance(node.core.state, Prospective) and node.core.state.epoch == EPOCH
    assert sorted(m.destination_id for m in pre_votes(sent)) == [2, 3]


def test_one_failure_then_an_answer_changes_nothing() -> None:
    """A refused connect to a leader that is only restarting its listener: the retry is
    answered, the count starts over, and the follower still waits fetch.timeout.ms."""
    node = Node()
    node.now_ms = 5
    node.report(node.follow())
    node.now_ms = 30
    next_fetch = node.answer(node.fetch())
    node.now_ms = 40
    node.report(next_fetch)  # a first failure again, not a second
    node.at(40 + CONFIG.election_jitter_ms + 1)
    assert node.core.state == Follower(EPOCH, LEADER)
    assert node.core.ready().wake_at_ms > 1_000


def test_a_report_of_another_request_is_ignored() -> None:
    """Only the fetch in flight counts: a late report of an older fetch, or of a request
    to another node, neither clears the fetch in flight nor counts as a failure."""
    node = Node()
    fetch = node.follow()
    node.now_ms = 5
    node.receive(LEADER, Unreachable(), fetch.correlation_id + 1)
    node.receive(3, Unreachable(), fetch.correlation_id)
    assert [m for m in node.at(50) if isinstance(m.body, FetchRequest)] == []  # still waits
    node.report(fetch)
    node.now_ms = 100
    node.report(node.fetch())
    node.at(100 + CONFIG.election_jitter_ms)
    assert isinstance(node.core.state, Prospective)  # these two were the ones that counted


def test_a_suspected_leader_no_longer_keeps_the_follower_from_granting_pre_votes() -> None:
    """Before the reports the follower refuses a pre-vote (its leader is alive); after two
    it grants one: the other follower heard the same reports and must be able to win."""
    node = Node()
    fetch = node.follow()
    node.now_ms = 5
    request = VoteRequest(EPOCH + 1, 3, last_offset_epoch=0, last_offset=0, pre_vote=True)
    (refusal,) = node.receive(3, request, 70)
    assert isinstance(refusal.body, VoteResponse) and not refusal.body.vote_granted
    node.report(fetch)
    node.now_ms = 30
    node.report(node.fetch())
    (grant,) = node.receive(3, request, 71)
    assert isinstance(grant.body, VoteResponse) and grant.body.vote_granted
    assert node.core.state == Follower(EPOCH, LEADER)  # nothing persisted for a pre-vote


def test_an_answer_from_the_leader_within_the_jitter_cancels_the_suspicion() -> None:
    for seed in range(100):  # one whose jitter leaves time for a fetch after the backoff
        node = Node(seed=seed)
        node.now_ms = 5
        node.report(node.follow())
        node.now_ms = 30
        node.report(node.fetch())
        node.now_ms = 30 + CONFIG.retry_backoff_ms
        fetch = node.fetch()
        if node.core.ready().wake_at_ms > node.now_ms + 1:
            break
    node.now_ms += 1
    node.answer(fetch)
    node.at(30 + CONFIG.election_jitter_ms + 1)
    assert node.core.state == Follower(EPOCH, LEADER)
    request = VoteRequest(EPOCH + 1, 3, last_offset_epoch=0, last_offset=0, pre_vote=True)
    (refusal,) = node.receive(3, request, 72)
    assert isinstance(refusal.body, VoteResponse) and not refusal.body.vote_granted


def test_a_prospective_whose_leader_answers_follows_it_again() -> None:
    """A false report went all the way to a pre-vote; the leader's next answer ends it."""
    node = Node()
    node.now_ms = 5
    node.report(node.follow())
    node.now_ms = 30
    node.report(node.fetch())
    node.at(30 + CONFIG.election_jitter_ms)
    assert isinstance(node.core.state, Prospective)
    node.now_ms = 200
    node.answer(node.fetch())
    assert state_of(node) == Follower(EPOCH, LEADER)


def fetches(sent: list[OutboundMessage]) -> list[OutboundMessage]:
    return [m for m in sent if isinstance(m.body, FetchRequest)]


def observer_following() -> tuple[Node, OutboundMessage]:
    """Observer 4, which has found LEADER through a voter; its first fetch to LEADER."""
    node = Node(4)
    (search,) = node.at(0)  # an observer with no leader asks any voter who leads
    sent = node.receive(search.destination_id,
                        FetchResponse(ErrorCode.not_leader_or_follower, LEADER, EPOCH, -1),
                        search.correlation_id)
    assert node.core.state == Follower(EPOCH, LEADER)
    return node, node._the_fetch(sent)


def test_an_observer_whose_leader_died_keeps_it_and_asks_any_voter() -> None:
    """Kafka's observers: a broker whose leader is unreachable still names it (its heartbeats
    and AlterPartitions keep their destination), fetches from voters drawn at random, and
    follows the new leader as soon as one of them names it."""
    node, first = observer_following()
    node.now_ms = 5
    node.report(first)
    node.now_ms = 30
    assert node.core.hears_leader
    node.report(node.fetch())  # the second failure: no jitter, no vote to split
    asked, now = set(), 30 + CONFIG.retry_backoff_ms
    while len(asked) < 3:
        (fetch,) = fetches(node.at(now))
        asked.add(fetch.destination_id)
        assert node.core.state == Follower(EPOCH, LEADER)
        assert not node.core.hears_leader  # (a controlled shutdown does not wait for it)
        assert node.core.ready().wake_at_ms > now  # waits for the answer, no busy loop
        if fetch.destination_id == LEADER:
            node.report(fetch)
        else:  # the voters have not elected anyone yet
            node.receive(fetch.destination_id,
                         FetchResponse(ErrorCode.not_leader_or_follower, LEADER, EPOCH, -1),
                         fetch.correlation_id)
        now += CONFIG.retry_backoff_ms
    (fetch,) = fetches(node.at(now))
    while fetch.destination_id == LEADER:
        node.report(fetch)
        now += CONFIG.retry_backoff_ms
        (fetch,) = fetches(node.at(now))
    node.receive(fetch.destination_id,
                 FetchResponse(ErrorCode.not_leader_or_follower, 3, EPOCH + 1, -1),
                 fetch.correlation_id)
    assert state_of(node) == Follower(EPOCH + 1, 3)


def test_an_observer_whose_leader_is_slow_goes_back_to_it_when_it_answers() -> None:
    """No answer within fetch.timeout.ms from a leader that is alive but busy: the observer
    still follows it, asks the other voters meanwhile, and fetches from the leader alone
    again once it has answered."""
    node, _ = observer_following()  # its fetch is never answered
    now = CONFIG.fetch_timeout_ms + CONFIG.request_timeout_ms
    elsewhere = None
    while elsewhere is None:
        sent = fetches(node.at(now))
        assert node.core.state == Follower(EPOCH, LEADER)
        if sent and sent[0].destination_id != LEADER:
            elsewhere = sent[0]
        elif sent:  # drawn: the leader again, which does not answer this one either
            now += CONFIG.request_timeout_ms
        else:
            now += CONFIG.retry_backoff_ms
    node.receive(elsewhere.destination_id,
                 FetchResponse(ErrorCode.not_leader_or_follower, LEADER, EPOCH, -1),
                 elsewhere.correlation_id)
    while True:
        now += CONFIG.retry_backoff_ms
        sent = fetches(node.at(now))
        if sent and sent[0].destination_id == LEADER:
            break
        if sent:
            node.receive(sent[0].destination_id,
                         FetchResponse(ErrorCode.not_leader_or_follower, LEADER, EPOCH, -1),
                         sent[0].correlation_id)
    assert node.core.hears_leader  # late, not unreachable: a controlled shutdown goes on
    next_fetch = node.answer(sent[0])  # the leader answers: back to fetching from it alone
    assert node.core.hears_leader
    for later in range(1, 4):
        node.now_ms = now + later * CONFIG.retry_backoff_ms
        next_fetch = node.answer(next_fetch)
    assert node.core.state == Follower(EPOCH, LEADER)


def test_fetch_timeouts_are_spread_by_the_jitter() -> None:
    """Followers that last heard from their leader at the same instant give up on it at
    different times, each within [fetch.timeout.ms, + election.backoff.max.ms / 2]."""
    given_up = []
    for seed in range(20):
        node = Node(seed=seed)
        node.follow()
        now = CONFIG.fetch_timeout_ms - 1
        while node.core.state == Follower(EPOCH, LEADER):
            now += 1
            node.at(now)
        given_up.append(now)
    assert all(
        CONFIG.fetch_timeout_ms <= t <= CONFIG.fetch_timeout_ms + CONFIG.election_jitter_ms
        for t in given_up
    )
    assert len(set(given_up)) > 10


def test_a_lost_pre_vote_round_is_retried_after_a_short_backoff() -> None:
    """Node 1 found the leader dead first and asks for pre-votes; node 3 still hears from it
    and refuses, and the dead leader says nothing: with node 2's own vote that is no
    majority left. Node 1 asks again after retry.backoff.ms x 1..2 -- not after a whole
    election timeout (1-2 s) -- and by then node 3 grants."""
    node = Node()
    node.now_ms = 5
    node.report(node.follow())
    node.now_ms = 30
    node.report(node.fetch())
    sent = node.at(30 + CONFIG.election_jitter_ms)
    assert isinstance(node.core.state, Prospective)
    (to_3,) = [m for m in pre_votes(sent) if m.destination_id == 3]
    lost_at = node.now_ms
    node.receive(3, VoteResponse(ErrorCode.none, LEADER, EPOCH, False, EPOCH + 1, pre_vote=True),
                 to_3.correlation_id)
    node.receive(3, VoteResponse(ErrorCode.none, LEADER, EPOCH, False, EPOCH + 1, pre_vote=True),
                 to_3.correlation_id)  # a duplicate changes nothing
    wake_at_ms = node.core.ready().wake_at_ms
    assert lost_at + CONFIG.retry_backoff_ms <= wake_at_ms <= lost_at + 2 * CONFIG.retry_backoff_ms
    again = pre_votes(node.at(wake_at_ms))
    assert sorted(m.destination_id for m in again) == [2, 3]
    (to_3,) = [m for m in again if m.destination_id == 3]
    node.receive(3, VoteResponse(ErrorCode.none, LEADER, EPOCH, True, EPOCH + 1, pre_vote=True),
                 to_3.correlation_id)
    assert state_of(node) == Candidate(EPOCH + 1, frozenset({1}))


def test_a_round_is_lost_only_once_no_majority_is_left() -> None:
    """Five voters, node 1 pre-votes against leader 2 (who never grants: alive it leads,
    dead it is silent): node 3's refusal leaves 1, 4, 5, still a majority; node 4's loses
    the round."""
    voters = frozenset({1, 2, 3, 4, 5})
    node = Node(voters=voters)
    node.receive(LEADER, BeginQuorumEpochRequest(leader_id=LEADER, leader_epoch=EPOCH))
    sent = node.at(CONFIG.fetch_timeout_ms + CONFIG.election_jitter_ms)
    assert isinstance(node.core.state, Prospective)
    by_voter = {m.destination_id: m for m in pre_votes(sent)}
    refusal = VoteResponse(ErrorCode.none, LEADER, EPOCH, False, EPOCH + 1, pre_vote=True)
    deadline_ms = node.core.ready().wake_at_ms
    node.receive(3, refusal, by_voter[3].correlation_id)
    assert node.core.ready().wake_at_ms == deadline_ms
    node.receive(4, refusal, by_voter[4].correlation_id)
    assert node.core.ready().wake_at_ms <= node.now_ms + 2 * CONFIG.retry_backoff_ms


def test_a_split_vote_is_retried_at_once_when_the_third_voter_is_unreachable() -> None:
    """Nodes 1 and 3 both ran for epoch 5 after leader 2 died; 3 refuses 1's vote (it voted
    for itself) and 1's request to 2 is reported unreachable: no majority is left, so 1
    pre-votes again within retry.backoff.ms x 1..2, not after a whole election timeout."""
    node = Node()
    node.now_ms = 5
    node.report(node.follow())
    node.now_ms = 30
    node.report(node.fetch())
    sent = node.at(30 + CONFIG.election_jitter_ms)
    (to_3,) = [m for m in pre_votes(sent) if m.destination_id == 3]
    sent = node.receive(3, VoteResponse(ErrorCode.none, -1, EPOCH, True, EPOCH + 1,
                                        pre_vote=True), to_3.correlation_id)
    assert state_of(node) == Candidate(EPOCH + 1, frozenset({1}))
    votes = {m.destination_id: m for m in sent if isinstance(m.body, VoteRequest)}
    assert sorted(votes) == [2, 3]
    assert not any(isinstance(m.body, VoteRequest) and m.body.pre_vote for m in votes.values())
    deadline_ms = node.core.ready().wake_at_ms
    node.receive(3, VoteResponse(ErrorCode.none, -1, EPOCH + 1, False, EPOCH + 1),
                 votes[3].correlation_id)
    assert node.core.ready().wake_at_ms == deadline_ms  # node 2 might still grant
    node.report(votes[2])
    wake_at_ms = node.core.ready().wake_at_ms
    assert wake_at_ms <= node.now_ms + 2 * CONFIG.retry_backoff_ms
    again = pre_votes(node.at(wake_at_ms))
    assert sorted(m.destination_id for m in again) == [2, 3]
    assert all(m.body.candidate_epoch == EPOCH + 2 for m in again
               if isinstance(m.body, VoteRequest))
