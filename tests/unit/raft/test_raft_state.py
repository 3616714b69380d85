"""Epoch state transitions and the quorum-state file."""

from __future__ import annotations

import base64
import json
import os
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykraft.errors import InconsistentVoterSet, InvariantViolation, KafkaStorageError
from pykraft.raft.state import (
    Candidate,
    EpochState,
    Follower,
    IllegalTransition,
    Leader,
    LeaderAndEpoch,
    Prospective,
    QuorumStateData,
    QuorumStateStore,
    Resigned,
    Unattached,
    Voted,
    become_candidate,
    become_follower,
    become_leader,
    become_prospective,
    become_resigned,
    become_unattached,
    become_voted,
    decode_quorum_state,
    encode_quorum_state,
    leader_and_epoch,
    restore,
    to_quorum_state,
)

ME = 1
SOLO = frozenset({ME})
TRIO = frozenset({1, 2, 3})
NOT_LEADER: list[EpochState] = [
    Unattached(4),
    Voted(4, 2),
    Candidate(4, frozenset({ME})),
    Follower(4, 2),
    Resigned(4),
]


@pytest.mark.parametrize("current", NOT_LEADER, ids=lambda state: type(state).__name__)
def test_become_candidate_votes_for_itself_in_the_next_epoch(current: EpochState) -> None:
    """A single voter may start an election from every state but Leader, one epoch up."""
    assert become_candidate(current, local_id=ME, voters=SOLO, log_last_epoch=4) == Candidate(
        5, frozenset({ME})
    )


@pytest.mark.parametrize("current", NOT_LEADER, ids=lambda state: type(state).__name__)
def test_with_other_voters_only_a_prospective_with_a_pre_vote_majority_runs(
    current: EpochState,
) -> None:
    """KIP-996: no candidacy (no epoch bump) without a majority of pre-votes first."""
    with pytest.raises(IllegalTransition):
        become_candidate(current, local_id=ME, voters=TRIO, log_last_epoch=4)
    prospective = become_prospective(current, local_id=ME, voters=TRIO)
    assert prospective.epoch == 4
    with pytest.raises(IllegalTransition):
        become_candidate(
            replace(prospective, granting_voters=frozenset({ME})),
            local_id=ME, voters=TRIO, log_last_epoch=4,
        )
    granted = replace(prospective, granting_voters=frozenset({ME, 3}))
    assert become_candidate(granted, local_id=ME, voters=TRIO, log_last_epoch=4) == Candidate(
        5, frozenset({ME})
    )


def test_prospective_keeps_the_leader_and_vote_of_its_epoch_in_quorum_state() -> None:
    """Pre-voting persists nothing new; a resigned leader still says it led the epoch, so
    that after a restart it never votes in it."""
    for current in NOT_LEADER:
        before = to_quorum_state(current, local_id=ME, voters=TRIO)
        after = become_prospective(current, local_id=ME, voters=TRIO)
        assert to_quorum_state(after, local_id=ME, voters=TRIO) == before
    resigned = become_prospective(Resigned(4), local_id=ME, voters=TRIO)
    assert restore(to_quorum_state(resigned, local_id=ME, voters=TRIO), local_id=ME,
                   voters=TRIO) == Resigned(4)


def test_a_vote_is_granted_once_per_epoch_and_never_by_a_follower() -> None:
    assert become_voted(Unattached(4), candidate_id=2, local_id=ME) == Voted(4, 2)
    assert become_voted(Prospective(4), candidate_id=2, local_id=ME) == Voted(4, 2)
    taken: list[EpochState] = [Voted(4, 3), Follower(4, 2), Candidate(4, frozenset({ME})),
                               Resigned(4), Prospective(4, voted_id=3),
                               Prospective(4, leader_id=2)]
    for state in taken:
        with pytest.raises(IllegalTransition):
            become_voted(state, candidate_id=2, local_id=ME)


def test_one_leader_per_epoch_is_enforced_on_follow() -> None:
    """Following another node in the epoch this node leads (or led), or a second leader of
    an epoch, is a bug; a higher epoch is always followed."""
    led: list[EpochState] = [Leader(4, 0, TRIO), Resigned(4), Follower(4, 3),
                             Prospective(4, leader_id=3)]
    for state in led:
        with pytest.raises(IllegalTransition):
            become_follower(state, epoch=4, leader_id=2, local_id=ME)
        assert become_follower(state, epoch=5, leader_id=2, local_id=ME) == Follower(5, 2)
    with pytest.raises(IllegalTransition):
        become_follower(Unattached(5), epoch=4, leader_id=2, local_id=ME)
    with pytest.raises(InvariantViolation):
        become_follower(Unattached(5), epoch=5, leader_id=ME, local_id=ME)


def test_unattached_needs_a_higher_epoch_except_for_an_observer() -> None:
    with pytest.raises(IllegalTransition):
        become_unattached(Follower(4, 2), epoch=4, is_voter=True)
    assert become_unattached(Follower(4, 2), epoch=4, is_voter=False) == Unattached(4)
    assert become_unattached(Leader(4, 0, TRIO), epoch=5, is_voter=True) == Unattached(5)
    assert become_resigned(Leader(4, 0, TRIO)) == Resigned(4)
    with pytest.raises(IllegalTransition):
        become_resigned(Follower(4, 2))


def test_a_leader_resigns_before_it_may_become_candidate() -> None:
    with pytest.raises(IllegalTransition):
        become_candidate(Leader(4, 10, SOLO), local_id=ME, voters=SOLO, log_last_epoch=4)


def test_a_candidacy_below_the_log_epoch_is_rejected() -> None:
    """The log holds epoch 7: campaigning in epoch 5 could reuse (offset, epoch) pairs."""
    with pytest.raises(IllegalTransition):
        become_candidate(Unattached(4), local_id=ME, voters=SOLO, log_last_epoch=7)


def test_a_non_voter_never_campaigns() -> None:
    with pytest.raises(InvariantViolation):
        become_candidate(Unattached(0), local_id=9, voters=TRIO, log_last_epoch=0)


def test_only_a_candidate_with_a_majority_becomes_leader() -> None:
    """One vote of three is no majority; two is; a non-candidate is never elected."""
    with pytest.raises(IllegalTransition):
        become_leader(Candidate(3, frozenset({ME})), voters=TRIO, log_end_offset=0)
    with pytest.raises(IllegalTransition):
        become_leader(Voted(3, ME), voters=TRIO, log_end_offset=0)
    leader = become_leader(Candidate(3, frozenset({1, 3})), voters=TRIO, log_end_offset=42)
    assert leader == Leader(epoch=3, epoch_start_offset=42, granting_voters=frozenset({1, 3}))


@pytest.mark.parametrize(
    ("persisted", "expected"),
    [
        (QuorumStateData(), Unattached(0)),
        (QuorumStateData(leader_epoch=5, leader_id=ME), Resigned(5)),
        (QuorumStateData(leader_epoch=5, leader_id=2), Follower(5, 2)),
        (QuorumStateData(leader_epoch=5, leader_id=9), Unattached(5)),  # 9 is no voter
        (QuorumStateData(leader_epoch=5, voted_id=ME), Candidate(5, frozenset({ME}))),
        (QuorumStateData(leader_epoch=5, voted_id=3), Voted(5, 3)),
    ],
)
def test_restore_from_the_quorum_state_file(
    persisted: QuorumStateData, expected: EpochState
) -> None:
    """A former leader restarts resigned; a vote is remembered; an unknown leader is not."""
    assert restore(persisted, local_id=ME, voters=TRIO) == expected


def test_restore_rejects_a_voter_set_other_than_the_configured_one() -> None:
    persisted = QuorumStateData(leader_epoch=2, current_voters=frozenset({1, 2}))
    with pytest.raises(InconsistentVoterSet):
        restore(persisted, local_id=ME, voters=TRIO)


@pytest.mark.parametrize(
    "state",
    [*NOT_LEADER, Leader(4, 0, SOLO)],
    ids=lambda state: type(state).__name__,
)
def test_persisted_states_restore_to_what_is_safe(state: EpochState) -> None:
    """What a node persists before acting brings it back to the same epoch and vote; a
    leader comes back resigned, never leading again by itself."""
    restored = restore(to_quorum_state(state, local_id=ME, voters=TRIO), local_id=ME, voters=TRIO)
    expected = Resigned(4) if isinstance(state, Leader) else state
    assert restored == expected


def test_leader_and_epoch() -> None:
    assert leader_and_epoch(Leader(3, 0, SOLO), local_id=ME) == LeaderAndEpoch(ME, 3)
    assert leader_and_epoch(Follower(3, 2), local_id=ME) == LeaderAndEpoch(2, 3)
    assert leader_and_epoch(Resigned(3), local_id=ME) == LeaderAndEpoch(-1, 3)
    assert leader_and_epoch(Candidate(3, SOLO), local_id=ME) == LeaderAndEpoch(-1, 3)


# the quorum-state file --------------------------------------------------------------------


def test_the_file_is_kafkas_version_0_json_byte_for_byte() -> None:
    data = QuorumStateData(leader_epoch=5, leader_id=1, voted_id=-1, current_voters=TRIO)
    assert encode_quorum_state(data) == (
        b'{"clusterId":"","leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,'
        b'"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )


def test_a_file_written_by_kafka_is_read() -> None:
    raw = (
        b'{"clusterId":"","leaderId":2,"leaderEpoch":4,"votedId":-1,"appliedOffset":0,'
        b'"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )
    assert decode_quorum_state(raw) == QuorumStateData(
        leader_epoch=4, leader_id=2, voted_id=-1, current_voters=TRIO
    )


def test_version_1_with_a_voted_directory_id_is_read() -> None:
    directory_id = uuid.UUID("4f0bd7a5-6b3c-4e2f-9a1d-0c7e5b8f3a21")
    text = base64.urlsafe_b64encode(directory_id.bytes).rstrip(b"=").decode()
    raw = json.dumps(
        {
            "leaderId": -1,
            "leaderEpoch": 9,
            "votedId": 2,
            "votedDirectoryId": text,
            "data_version": 1,
        }
    ).encode()
    assert decode_quorum_state(raw) == QuorumStateData(
        leader_epoch=9, leader_id=-1, voted_id=2, voted_directory_id=directory_id
    )


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"[]",
        b'{"leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,"data_version":7}',
        b'{"leaderId":"1","leaderEpoch":5,"votedId":-1,"appliedOffset":0,"data_version":0}',
        b'{"leaderId":true,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,"data_version":0}',
        b'{"leaderEpoch":5,"votedId":-1,"appliedOffset":0,"data_version":0}',
        b'{"leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,"currentVoters":7,'
        b'"data_version":0}',
        b'{"leaderId":1,"leaderEpoch":5,"votedId":-1,"votedDirectoryId":"xyz","data_version":1}',
    ],
)
def test_a_malformed_file_is_a_storage_error(raw: bytes) -> None:
    with pytest.raises(KafkaStorageError):
        decode_quorum_state(raw)


quorum_states = st.builds(
    QuorumStateData,
    leader_epoch=st.integers(0, 2**31 - 1),
    leader_id=st.integers(-1, 2**31 - 1),
    voted_id=st.integers(-1, 2**31 - 1),
    current_voters=st.frozensets(st.integers(0, 2**31 - 1), min_size=1, max_size=7),
)


@given(quorum_states)
def test_encode_then_decode_is_the_identity(data: QuorumStateData) -> None:
    assert decode_quorum_state(encode_quorum_state(data)) == data


def test_store_round_trip_and_absent_file(tmp_path: Path) -> None:
    """No file reads as None (a fresh node); a write reads back; a rewrite replaces it."""
    store = QuorumStateStore(tmp_path / "quorum-state")
    assert store.read() is None
    first = QuorumStateData(leader_epoch=1, voted_id=ME, current_voters=SOLO)
    second = QuorumStateData(leader_epoch=1, leader_id=ME, current_voters=SOLO)
    store.write(first)
    assert store.read() == first
    store.write(second)
    assert QuorumStateStore(tmp_path / "quorum-state").read() == second
    assert sorted(os.listdir(tmp_path)) == ["quorum-state"]


def test_a_leftover_tmp_file_from_an_interrupted_write_is_ignored(tmp_path: Path) -> None:
    """A crash between writing the tmp file and the rename leaves the old state in force."""
    store = QuorumStateStore(tmp_path / "quorum-state")
    old = QuorumStateData(leader_epoch=3, leader_id=ME, current_voters=SOLO)
    store.write(old)
    (tmp_path / "quorum-state.tmp").write_bytes(b'{"leaderId": 1, "lea')
    assert store.read() == old
    new = QuorumStateData(leader_epoch=4, voted_id=ME, current_voters=SOLO)
    store.write(new)
    assert store.read() == new
    assert not (tmp_path / "quorum-state.tmp").exists()
