"""RaftCore with one voter: election on start, group commit, commit only after fsync, replay."""

from __future__ import annotations

import random

import pytest

from pykraft.errors import (
    InvalidConfig,
    InvariantViolation,
    KafkaStorageError,
    MessageTooLarge,
    NotLeaderError,
    RequestTimedOut,
)
from pykraft.raft.control import decode_leader_change
from pykraft.raft.core import CommittedBatch, RaftConfig, RaftCore
from pykraft.raft.log_store import MemoryLogStore
from pykraft.raft.state import Candidate, EpochState, Leader, LeaderAndEpoch, QuorumStateData
from pykraft.records.batch import read_header
from pykraft.records.record import ControlRecordType, iter_records, read_control_record_type
from tests.unit.raft.raft_shell import NODE_ID, Shell


def elected() -> Shell:
    shell = Shell()
    shell.settle()
    return shell


def test_start_votes_for_itself_then_leads_after_the_vote_is_durable() -> None:
    """The candidacy is persisted first, the leadership only after that write is reported."""
    shell = Shell()
    assert shell.core.state == Candidate(epoch=1, granting_voters=frozenset({NODE_ID}))
    first = shell.core.ready()
    assert first.quorum_state == QuorumStateData(
        leader_epoch=1, leader_id=-1, voted_id=NODE_ID, current_voters=frozenset({NODE_ID})
    )
    assert first.batches == ()
    assert first.leader_change == LeaderAndEpoch(-1, 1)
    assert shell.core.ready() == first  # repeating ready() changes nothing
    with pytest.raises(NotLeaderError) as error:
        shell.core.propose([b"x"], shell.now_ms)
    assert (error.value.leader_id, error.value.leader_epoch) == (-1, 1)

    shell.core.advance(first)
    state: EpochState = shell.core.state  # (not narrowed by the assert above)
    assert state == Leader(1, 0, frozenset({NODE_ID}))
    second = shell.core.ready()
    assert second.quorum_state is not None
    assert (second.quorum_state.leader_id, second.quorum_state.voted_id) == (NODE_ID, -1)
    assert second.leader_change is None  # the LeaderChangeMessage is not committed yet


def test_leader_writes_a_leader_change_control_batch_first_in_its_epoch() -> None:
    """Offset 0 holds a control batch of epoch 1 whose value names this node the leader."""
    shell = elected()
    (batch,) = shell.store.batches
    header = read_header(batch)
    assert (header.base_offset, header.partition_leader_epoch, header.is_control) == (0, 1, True)
    (record,) = iter_records(batch)
    assert read_control_record_type(record.key) is ControlRecordType.LEADER_CHANGE
    assert record.value is not None
    message = decode_leader_change(record.value)
    assert message.leader_id == NODE_ID
    assert [voter.voter_id for voter in message.voters] == [NODE_ID]
    assert [voter.voter_id for voter in message.granting_voters] == [NODE_ID]
    assert shell.core.high_watermark == 1
    assert shell.events == [
        LeaderAndEpoch(-1, 1),
        LeaderAndEpoch(NODE_ID, 1),
        CommittedBatch(0, 0, 1, header.max_timestamp, (), is_control=True),
    ]


def test_entries_commit_only_after_fsync() -> None:
    """An appended but unflushed entry is neither committed nor delivered; flushing it is."""
    shell = elected()
    offset = shell.core.propose([b"a"], shell.now_ms)
    shell.advance_time(25)
    ready = shell.step(flush=False)
    assert len(ready.batches) == 1 and shell.store.log_end_offset == offset + 1
    for _ in range(3):
        shell.step(flush=False)
    assert shell.core.high_watermark == 1
    assert shell.data_records() == []

    shell.store.flush()
    shell.core.flushed(shell.store.flushed_offset)
    assert shell.core.high_watermark == offset + 1
    shell.settle()
    assert shell.data_records() == [(offset, b"a")]


def test_a_new_leader_commits_nothing_before_its_leader_change_is_durable() -> None:
    """Even entries of an earlier epoch wait for the new epoch's first entry to be flushed."""
    shell = elected()
    shell.core.propose([b"old"], shell.now_ms)
    shell.advance_time(25)
    shell.settle()
    restarted = Shell(store=shell.store, persisted=shell.persisted, now_ms=shell.now_ms)
    restarted.step(flush=False)  # candidacy persisted
    restarted.step(flush=False)  # leadership persisted, leader change appended, not flushed
    assert restarted.core.high_watermark is None
    assert restarted.delivered == []
    restarted.settle()
    assert restarted.data_records() == [(1, b"old")]


def test_flushed_past_the_appended_end_is_a_bug() -> None:
    """The shell cannot report durable what it never appended."""
    shell = elected()
    with pytest.raises(InvariantViolation):
        shell.core.flushed(shell.store.log_end_offset + 1)


def test_proposals_within_the_linger_are_appended_as_one_batch_and_one_fsync() -> None:
    """Group commit: five proposals, one batch of five records, one flush."""
    shell = elected()
    flushes_before = shell.store.flush_count
    offsets = [shell.core.propose([f"r{i}".encode()], shell.now_ms + i) for i in range(5)]
    assert offsets == [1, 2, 3, 4, 5]
    ready = shell.core.ready()
    assert ready.batches == ()
    assert ready.wake_at_ms == shell.now_ms + 25  # the first proposal's linger
    shell.advance_time(25)
    shell.settle()
    assert len(shell.store.batches) == 2
    header = read_header(shell.store.batches[1])
    assert (header.base_offset, header.records_count) == (1, 5)
    assert shell.store.flush_count == flushes_before + 1
    assert shell.data_records() == [(i + 1, f"r{i}".encode()) for i in range(5)]


def test_a_full_batch_is_sealed_and_one_proposal_is_never_split() -> None:
    """Records of one proposal share a batch; a proposal that does not fit starts the next."""
    shell = Shell(config=RaftConfig(append_linger_ms=25, batch_bytes_max=1024))
    shell.settle()
    first = shell.core.propose([b"a" * 300, b"b" * 300], shell.now_ms)
    second = shell.core.propose([b"c" * 300, b"d" * 300], shell.now_ms)
    ready = shell.core.ready()
    assert len(ready.batches) == 1  # the first batch sealed at once: it was full
    shell.advance_time(25)
    shell.settle()
    bounds = [(h.base_offset, h.last_offset) for h in map(read_header, shell.store.batches[1:])]
    assert bounds == [(1, first), (first + 1, second)]


def test_proposals_join_a_batch_up_to_apply_bytes_max_and_a_larger_one_stays_whole() -> None:
    """A batch is applied in one turn: proposals stop joining it at apply_bytes_max, while
    one proposal larger than that (atomic) still makes one batch."""
    shell = Shell(config=RaftConfig(append_linger_ms=25, apply_bytes_max=1024))
    shell.settle()
    first = shell.core.propose([b"a" * 400], shell.now_ms)
    second = shell.core.propose([b"b" * 400], shell.now_ms)
    third = shell.core.propose([b"c" * 400], shell.now_ms)  # past 1024 with the two before
    big = shell.core.propose([b"d" * 900, b"e" * 900], shell.now_ms)
    shell.advance_time(25)
    shell.settle()
    bounds = [(h.base_offset, h.last_offset) for h in map(read_header, shell.store.batches[1:])]
    assert bounds == [(1, second), (third, third), (third + 1, big)]
    assert first == 1


def test_a_proposal_larger_than_a_batch_is_refused() -> None:
    shell = Shell(config=RaftConfig(batch_bytes_max=1024))
    shell.settle()
    with pytest.raises(MessageTooLarge):
        shell.core.propose([b"x" * 2000], shell.now_ms)
    assert shell.core.next_offset == 1  # no offset was promised


def test_proposals_beyond_the_pending_limit_are_refused_until_written() -> None:
    """Backpressure: a bounded amount waits for the log; once written, appends go on."""
    config = RaftConfig(append_linger_ms=25, batch_bytes_max=1024, pending_batches_max=2)
    shell = Shell(config=config)
    shell.settle()
    shell.core.propose([b"a" * 900], shell.now_ms)
    with pytest.raises(RequestTimedOut):
        for _ in range(3):
            shell.core.propose([b"b" * 900], shell.now_ms)
    shell.advance_time(25)
    shell.settle()
    shell.core.propose([b"c" * 900], shell.now_ms)


def test_a_ready_hands_out_at_most_write_bytes_max_of_batches_and_at_least_one() -> None:
    """The shell writes and flushes a Ready's batches while its loop answers no fetch: a
    large backlog goes out a bounded slice per Ready, every batch in order; a batch larger
    than the bound still goes, alone."""
    config = RaftConfig(append_linger_ms=0, batch_bytes_max=4096, apply_bytes_max=1024,
                        write_bytes_max=2500)
    shell = Shell(config=config)
    shell.settle()
    for i in range(6):
        shell.core.propose([bytes([i]) * 900], shell.now_ms)  # six batches of ~1 KB
    shell.core.propose([b"z" * 3000], shell.now_ms)  # one past the bound
    shell.core.tick(shell.now_ms)  # the linger is over: every draft is sealed
    written = []
    for _ in range(10):
        ready = shell.step()
        if ready.batches:
            written.append(len(ready.batches))
            assert sum(map(len, ready.batches)) <= 2500 or len(ready.batches) == 1
    assert written == [2, 2, 2, 1]
    shell.settle()
    assert [value for _, value in shell.data_records()] == [
        *(bytes([i]) * 900 for i in range(6)), b"z" * 3000]


def test_restart_replays_the_same_committed_batches_then_announces_leadership() -> None:
    """After a restart, listeners get every batch again, identical and in order, and only
    then learn that this node leads the new epoch."""
    shell = elected()
    for round_index in range(4):
        for i in range(3):
            shell.core.propose([f"{round_index}-{i}".encode()], shell.now_ms, timestamp_ms=77)
        shell.advance_time(30)
        shell.settle()
    before = shell.delivered

    restarted = Shell(store=shell.store, persisted=shell.persisted, now_ms=shell.now_ms)
    restarted.settle()
    replayed = restarted.delivered
    assert replayed[: len(before)] == before
    assert [batch.epoch for batch in before if not batch.is_control] == [1] * 4
    assert all(batch.append_timestamp == 77 for batch in before if not batch.is_control)
    leader_index = restarted.events.index(LeaderAndEpoch(NODE_ID, 2))
    assert restarted.events[1:leader_index] == before  # after the (-1, 2) of the candidacy
    assert restarted.events[leader_index + 1 :] == replayed[len(before) :]
    (new_control,) = replayed[len(before) :]
    assert new_control.is_control and new_control.epoch == 2


def test_epoch_bumps_on_every_restart_whatever_the_node_was() -> None:
    """Leader, candidate (crashed before leading) or fresh: the next start is a new epoch."""
    shell = Shell()
    assert shell.core.state.epoch == 1
    shell.step()  # the candidacy is durable; crash before the leadership is
    assert shell.persisted.voted_id == NODE_ID and shell.persisted.leader_id == -1
    for expected_epoch in (2, 3, 4):
        shell.start()
        shell.settle()
        assert shell.core.leader_and_epoch == LeaderAndEpoch(NODE_ID, expected_epoch)
        assert shell.persisted.leader_epoch == expected_epoch
    epochs = [read_header(batch).partition_leader_epoch for batch in shell.store.batches]
    assert epochs == [2, 3, 4]


def test_a_crash_loses_only_unflushed_entries_and_they_were_never_committed() -> None:
    """What was flushed replays after the crash; the unflushed tail is gone and no listener
    ever saw it."""
    shell = elected()
    shell.core.propose([b"kept"], shell.now_ms)
    shell.advance_time(25)
    shell.settle()
    shell.core.propose([b"lost"], shell.now_ms)
    shell.advance_time(25)
    shell.step(flush=False)
    assert b"lost" not in [value for _, value in shell.data_records()]
    shell.store.crash()
    restarted = Shell(store=shell.store, persisted=shell.persisted, now_ms=shell.now_ms)
    restarted.settle()
    assert restarted.data_records() == [(1, b"kept")]
    assert restarted.core.next_offset == 3  # offset 2 is reused, in a newer epoch


def test_a_log_newer_than_its_quorum_state_refuses_to_start() -> None:
    """A lost or stale quorum-state file must not let the node reuse an epoch."""
    shell = elected()
    shell.start()
    shell.settle()
    with pytest.raises(KafkaStorageError):
        Shell(store=shell.store, persisted=QuorumStateData())


def test_a_voter_of_several_waits_for_the_election_timeout_before_pre_voting() -> None:
    """With other voters the node neither bumps its epoch at start nor campaigns at once:
    it waits a randomized election timeout, then asks for pre-votes (KIP-996)."""
    config = RaftConfig(election_timeout_ms=1_000)
    core = RaftCore(1, frozenset({1, 2, 3}), MemoryLogStore(), QuorumStateData(),
                    random.Random(3), 0, config=config)
    ready = core.ready()
    assert core.state.epoch == 0 and ready.messages == ()
    core.tick(999)
    assert core.ready().messages == ()
    core.tick(2_000)
    ready = core.ready()
    assert ready.quorum_state is None or ready.quorum_state.leader_epoch == 0
    assert sorted(message.destination_id for message in ready.messages) == [2, 3]
    assert all(getattr(m.body, "pre_vote", False) for m in ready.messages)


def test_bad_membership_is_refused() -> None:
    with pytest.raises(InvalidConfig):
        RaftCore(1, frozenset(), MemoryLogStore(), QuorumStateData(), random.Random(), 0)


def test_time_going_backwards_is_a_bug() -> None:
    shell = elected()
    with pytest.raises(InvariantViolation):
        shell.core.tick(shell.now_ms - 1)


def test_delivery_is_bounded_per_ready_and_resumes_without_waiting() -> None:
    """A large replay is read back in bounded slices, each Ready asking to be called at once."""
    config = RaftConfig(append_linger_ms=0, apply_bytes_max=200)
    shell = Shell(config=config)
    shell.settle()
    for i in range(10):
        shell.core.propose([bytes(100) + bytes([i])], shell.now_ms)
        shell.settle()
    restarted = Shell(store=shell.store, persisted=shell.persisted, config=config)
    restarted.step()
    restarted.step()
    readies = []
    for _ in range(30):
        ready = restarted.step()
        readies.append(ready)
        if not ready.has_work:
            break
    committed_per_ready = [len(ready.committed) for ready in readies if ready.committed]
    assert len(committed_per_ready) > 3 and max(committed_per_ready) <= 2
    assert [ready.wake_at_ms for ready in readies[:3]] == [restarted.now_ms] * 3
    assert restarted.data_records() == shell.data_records()
