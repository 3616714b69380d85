"""Raft epoch states, the only place they change, and the `quorum-state` file.

Theory of operation. A node's place in the quorum is one value of `EpochState`:

    Unattached(epoch)                 knows the epoch, has neither voted nor seen a leader
    Voted(epoch, voted_id)            granted its vote in `epoch` to another voter
    Prospective(epoch, ...)           asks for pre-votes (KIP-996) before it runs in epoch + 1;
                                      it keeps the leader and vote it had in `epoch`
    Candidate(epoch, granting_voters) asked for votes in `epoch`; it always votes for itself
    Follower(epoch, leader_id)        replicates from the leader of `epoch`
    Leader(epoch, epoch_start_offset) the leader of `epoch`; its first entry in the epoch is
                                      the LeaderChangeMessage at `epoch_start_offset`
    Resigned(epoch)                   was leader of `epoch` and gave it up (or restarted:
                                      a restarted leader never resumes, see `restore`)

Observers (nodes that are not voters) are only ever Unattached or Follower.

Invariants:
- the epoch never decreases; a node leads at most one epoch and votes at most once per epoch;
- every state the node may act on is persisted (`to_quorum_state`) before it acts: a vote,
  or a candidacy (which is a vote for itself), counts only once durable, and a leader's
  entries are appended only after its leadership is;
- a node never leads an epoch below the last epoch in its log.

Legal transitions (E is the current epoch; any state moves to a higher epoch as
Unattached, or as Follower when the message names the leader):

    Unattached | Voted | Follower | Candidate | Resigned | Prospective (E)
                                                   --become_prospective--> Prospective(E)
    Prospective (majority of pre-votes), or any non-leader of a single-voter quorum
                                                   --become_candidate-->   Candidate(E + 1)
    Candidate (majority of durable votes)          --become_leader----->   Leader(E)
    Unattached(E) | Prospective(E, no leader, no vote)
                                                   --become_voted------>   Voted(E)
    Unattached | Voted | Candidate | Prospective (E), a Follower of the same leader
                                                   --become_follower--->   Follower(E)
    Leader(E)                                      --become_resigned--->   Resigned(E)
    an observer's Follower(E)                      --become_unattached->   Unattached(E)

`restore` rebuilds the state from the quorum-state file at startup.

The file `__cluster_metadata-0/quorum-state` is Kafka's: the JSON form of QuorumStateData
plus a `data_version` key naming the schema version, e.g.

    {"clusterId":"","leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1}],"data_version":0}

We write version 0 (static voters, kraft.version 0) and read versions 0 and 1.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple, assert_never

from pykraft.errors import (
    InconsistentVoterSet,
    InvariantViolation,
    KafkaStorageError,
    invariant,
)

__all__ = [
    "NO_LEADER",
    "NO_VOTE",
    "Unattached",
    "Voted",
    "Prospective",
    "Candidate",
    "Follower",
    "Leader",
    "Resigned",
    "EpochState",
    "IllegalTransition",
    "LeaderAndEpoch",
    "QuorumStateData",
    "QuorumStateStore",
    "become_candidate",
    "become_follower",
    "become_leader",
    "become_prospective",
    "become_resigned",
    "become_unattached",
    "become_voted",
    "has_majority",
    "leader_and_epoch",
    "restore",
    "to_quorum_state",
]

NO_LEADER: Final = -1
NO_VOTE: Final = -1
QUORUM_STATE_VERSION: Final = 0  # the data_version we write
READABLE_VERSIONS: Final = frozenset({0, 1})
DATA_VERSION_KEY: Final = "data_version"
QUORUM_STATE_BYTES_MAX: Final = 1 << 20  # the file holds a handful of ints; refuse absurd ones


class IllegalTransition(InvariantViolation):
    """A transition the protocol forbids was attempted: a bug, so it stops the node."""


@dataclass(frozen=True, slots=True)
class Unattached:
    epoch: int


@dataclass(frozen=True, slots=True)
class Voted:
    epoch: int
    voted_id: int


@dataclass(frozen=True, slots=True)
class Prospective:
    """Pre-voting (KIP-996) for a candidacy in `epoch + 1`. It keeps the leader it followed
    and the vote it cast in `epoch`, so its quorum-state is unchanged and a fetch answered
    by that leader takes it back to following."""

    epoch: int
    leader_id: int = -1
    voted_id: int = -1
    granting_voters: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Candidate:
    epoch: int
    granting_voters: frozenset[int]


@dataclass(frozen=True, slots=True)
class Follower:
    epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class Leader:
    epoch: int
    epoch_start_offset: int
    granting_voters: frozenset[int]  # who elected it: the LeaderChangeMessage records them


@dataclass(frozen=True, slots=True)
class Resigned:
    epoch: int


EpochState = Unattached | Voted | Prospective | Candidate | Follower | Leader | Resigned


class LeaderAndEpoch(NamedTuple):
    leader_id: int  # NO_LEADER when unknown
    epoch: int


@dataclass(frozen=True, slots=True)
class QuorumStateData:
    """What the quorum-state file holds; field names are Kafka's, in snake_case."""

    leader_epoch: int = 0
    leader_id: int = NO_LEADER
    voted_id: int = NO_VOTE
    current_voters: frozenset[int] | None = None  # version 0 only
    voted_directory_id: uuid.UUID | None = None  # version 1 only
    cluster_id: str = ""  # version 0 only; Kafka always writes ""
    applied_offset: int = 0  # version 0 only; Kafka always writes 0


# transitions ------------------------------------------------------------------------------


def has_majority(granting_voters: frozenset[int], voters: frozenset[int]) -> bool:
    return 2 * len(granting_voters & voters) > len(voters)


def become_candidate(
    current: EpochState, *, local_id: int, voters: frozenset[int], log_last_epoch: int
) -> Candidate:
    """Start an election in the next epoch, voting for ourselves.

    With other voters only a Prospective that a majority pre-voted for runs; a single
    voter runs from any state but Leader: a leader resigns first, so that it never votes
    against the entries it wrote in its own epoch.
    """
    if voters != frozenset({local_id}) and not (
        isinstance(current, Prospective) and has_majority(current.granting_voters, voters)
    ):
        raise IllegalTransition(f"{current!r} -> Candidate: no majority of pre-votes")
    invariant(local_id in voters, f"node {local_id} is not a voter in {sorted(voters)}")
    if isinstance(current, Leader):
        raise IllegalTransition(f"{current!r} -> Candidate: a leader resigns first")
    epoch = current.epoch + 1
    if epoch <= log_last_epoch:
        raise IllegalTransition(
            f"{current!r} -> Candidate(epoch={epoch}): the log already holds epoch {log_last_epoch}"
        )
    return Candidate(epoch=epoch, granting_voters=frozenset({local_id}))


def become_leader(current: EpochState, *, voters: frozenset[int], log_end_offset: int) -> Leader:
    """Take the leadership a durable majority of votes granted; the epoch stays the same."""
    if not isinstance(current, Candidate):
        raise IllegalTransition(f"{current!r} -> Leader: only a candidate is elected")
    if not has_majority(current.granting_voters, voters):
        raise IllegalTransition(
            f"{current!r} -> Leader: {sorted(current.granting_voters)} is no majority of "
            f"{sorted(voters)}"
        )
    return Leader(
        epoch=current.epoch,
        epoch_start_offset=log_end_offset,
        granting_voters=current.granting_voters,
    )


def become_prospective(
    current: EpochState, *, local_id: int, voters: frozenset[int]
) -> Prospective:
    """Start asking for pre-votes, in the same epoch, keeping its leader and vote.

    A Resigned leader keeps itself as the epoch's leader, so that its quorum-state still
    says it led the epoch and it never votes in it, even after a restart.
    """
    invariant(local_id in voters, f"node {local_id} is not a voter in {sorted(voters)}")
    epoch = current.epoch
    match current:
        case Leader():
            raise IllegalTransition(f"{current!r} -> Prospective: a leader resigns first")
        case Unattached():
            return Prospective(epoch)
        case Voted(voted_id=voted_id):
            return Prospective(epoch, voted_id=voted_id)
        case Candidate():
            return Prospective(epoch, voted_id=local_id)
        case Follower(leader_id=leader_id):
            return Prospective(epoch, leader_id=leader_id)
        case Resigned():
            return Prospective(epoch, leader_id=local_id)
        case Prospective(leader_id=leader_id, voted_id=voted_id):
            return Prospective(epoch, leader_id=leader_id, voted_id=voted_id)  # a new round
        case _:
            assert_never(current)


def become_unattached(current: EpochState, *, epoch: int, is_voter: bool) -> Unattached:
    """Enter a higher epoch with no leader known; an observer may also drop a leader it
    can no longer reach, in the same epoch, to look for the current one."""
    same_epoch_allowed = not is_voter and isinstance(current, Follower | Unattached)
    if epoch < current.epoch or (epoch == current.epoch and not same_epoch_allowed):
        raise IllegalTransition(f"{current!r} -> Unattached(epoch={epoch})")
    return Unattached(epoch)


def become_voted(current: EpochState, *, candidate_id: int, local_id: int) -> Voted:
    """Grant the vote of this epoch; the caller moved to the candidate's epoch first."""
    invariant(candidate_id != local_id, "a node votes for itself only as a candidate")
    free = isinstance(current, Unattached) or (
        isinstance(current, Prospective) and current.leader_id == NO_LEADER
        and current.voted_id == NO_VOTE
    )
    if not free:
        raise IllegalTransition(f"{current!r} -> Voted(voted_id={candidate_id})")
    return Voted(current.epoch, candidate_id)


def become_follower(
    current: EpochState, *, epoch: int, leader_id: int, local_id: int
) -> Follower:
    """Follow the leader of `epoch`. In the current epoch only a node that has no leader
    yet (or follows this one) may; a node never follows itself, and there is one leader
    per epoch, so a leader or resigned leader of `epoch` seeing another is a bug."""
    invariant(leader_id != local_id, "a node never follows itself")
    invariant(leader_id != NO_LEADER, "a follower follows somebody")
    if epoch < current.epoch:
        raise IllegalTransition(f"{current!r} -> Follower(epoch={epoch}, leader_id={leader_id})")
    if epoch == current.epoch:
        match current:
            case Leader() | Resigned():
                raise IllegalTransition(
                    f"{current!r} -> Follower(epoch={epoch}, leader_id={leader_id}): "
                    "two leaders in one epoch"
                )
            case Follower(leader_id=known) | Prospective(leader_id=known) if known not in (
                NO_LEADER,
                leader_id,
            ):
                raise IllegalTransition(
                    f"{current!r} -> Follower(epoch={epoch}, leader_id={leader_id}): "
                    f"the epoch's leader is {known}"
                )
            case _:
                pass
    return Follower(epoch, leader_id)


def become_resigned(current: EpochState) -> Resigned:
    if not isinstance(current, Leader):
        raise IllegalTransition(f"{current!r} -> Resigned: only a leader resigns")
    return Resigned(current.epoch)


def restore(persisted: QuorumStateData, *, local_id: int, voters: frozenset[int]) -> EpochState:
    """The state a node restarts in, from its quorum-state file.

    A node that was leader restarts Resigned in the same epoch: it may have lost unflushed
    entries of that epoch, and leading the epoch again could give two different entries the
    same (offset, epoch). A leader that is no longer a voter cannot be followed.
    """
    epoch = persisted.leader_epoch
    if epoch < 0:
        raise KafkaStorageError(f"quorum-state holds a negative epoch {epoch}")
    if persisted.current_voters and persisted.current_voters != voters:
        raise InconsistentVoterSet(
            f"the configured voters {sorted(voters)} differ from {sorted(persisted.current_voters)}"
            " in quorum-state: check controller.quorum.voters, or remove the file"
        )
    if persisted.leader_id == local_id:
        return Resigned(epoch=epoch)
    if persisted.leader_id != NO_LEADER and persisted.leader_id in voters:
        return Follower(epoch=epoch, leader_id=persisted.leader_id)
    if persisted.voted_id == local_id:
        return Candidate(epoch=epoch, granting_voters=frozenset({local_id}))
    if persisted.voted_id != NO_VOTE:
        return Voted(epoch=epoch, voted_id=persisted.voted_id)
    return Unattached(epoch=epoch)


def to_quorum_state(state: EpochState, *, local_id: int, voters: frozenset[int]) -> QuorumStateData:
    """What must be durable before the node acts in `state`."""
    match state:
        case Unattached(epoch=epoch):
            leader_id, voted_id = NO_LEADER, NO_VOTE
        case Resigned(epoch=epoch):
            leader_id, voted_id = local_id, NO_VOTE  # it led this epoch: it never votes in it
        case Voted(epoch=epoch, voted_id=voted_id):
            leader_id = NO_LEADER
        case Prospective(epoch=epoch, leader_id=leader_id, voted_id=voted_id):
            pass
        case Candidate(epoch=epoch):
            leader_id, voted_id = NO_LEADER, local_id
        case Follower(epoch=epoch, leader_id=leader_id):
            voted_id = NO_VOTE
        case Leader(epoch=epoch):
            leader_id, voted_id = local_id, NO_VOTE
        case _:
            assert_never(state)
    return QuorumStateData(
        leader_epoch=epoch, leader_id=leader_id, voted_id=voted_id, current_voters=voters
    )


def leader_and_epoch(state: EpochState, *, local_id: int) -> LeaderAndEpoch:
    match state:
        case Leader(epoch=epoch):
            return LeaderAndEpoch(local_id, epoch)
        case Follower(epoch=epoch, leader_id=leader_id):
            return LeaderAndEpoch(leader_id, epoch)
        case Unattached(epoch=epoch) | Voted(epoch=epoch) | Candidate(epoch=epoch):
            return LeaderAndEpoch(NO_LEADER, epoch)
        case Prospective(epoch=epoch, leader_id=leader_id):
            # its leader may be alive still (a lost fetch is enough to start pre-voting)
            return LeaderAndEpoch(NO_LEADER if leader_id == local_id else leader_id, epoch)
        case Resigned(epoch=epoch):
            # it stepped down: nobody is known to lead, although the epoch is still its own
            return LeaderAndEpoch(NO_LEADER, epoch)
        case _:
            assert_never(state)


# the quorum-state file --------------------------------------------------------------------


def encode_quorum_state(data: QuorumStateData) -> bytes:
    """Version 0 JSON, keys in the schema's order, as Kafka writes it."""
    voters = sorted(data.current_voters or ())
    document = {
        "clusterId": data.cluster_id,
        "leaderId": data.leader_id,
        "leaderEpoch": data.leader_epoch,
        "votedId": data.voted_id,
        "appliedOffset": data.applied_offset,
        "currentVoters": [{"voterId": voter_id} for voter_id in voters],
        DATA_VERSION_KEY: QUORUM_STATE_VERSION,
    }
    return json.dumps(document, separators=(",", ":")).encode()


def decode_quorum_state(raw: bytes) -> QuorumStateData:
    """Parse a quorum-state file of version 0 or 1; anything malformed is a storage error."""
    try:
        document = json.loads(raw)
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        version = _integer(document, DATA_VERSION_KEY)
        if version not in READABLE_VERSIONS:
            raise ValueError(f"unsupported data_version {version}")
        return _decode_version_0(document) if version == 0 else _decode_version_1(document)
    except (ValueError, TypeError) as error:  # json.JSONDecodeError is a ValueError
        raise KafkaStorageError(f"unreadable quorum-state: {error}") from error


def _decode_version_0(document: dict[str, Any]) -> QuorumStateData:
    voters = document.get("currentVoters")
    if voters is not None and not isinstance(voters, list):
        raise ValueError("currentVoters is not a list")
    cluster_id = document.get("clusterId", "")
    if not isinstance(cluster_id, str):
        raise ValueError("clusterId is not a string")
    return QuorumStateData(
        leader_epoch=_integer(document, "leaderEpoch"),
        leader_id=_integer(document, "leaderId"),
        voted_id=_integer(document, "votedId"),
        current_voters=(
            None if voters is None else frozenset(_integer(voter, "voterId") for voter in voters)
        ),
        cluster_id=cluster_id,
        applied_offset=_integer(document, "appliedOffset"),
    )


def _decode_version_1(document: dict[str, Any]) -> QuorumStateData:
    directory_id = document.get("votedDirectoryId")
    return QuorumStateData(
        leader_epoch=_integer(document, "leaderEpoch"),
        leader_id=_integer(document, "leaderId"),
        voted_id=_integer(document, "votedId"),
        voted_directory_id=None if directory_id is None else _decode_uuid(directory_id),
    )


def _integer(document: object, key: str) -> int:
    if not isinstance(document, dict):
        raise ValueError(f"expected an object holding {key!r}")
    value = document.get(key)
    if isinstance(value, bool) or not isinstance(value, int):  # bool is an int in Python
        raise ValueError(f"{key!r} is {value!r}, not an integer")
    return value


def _decode_uuid(text: object) -> uuid.UUID:
    """Kafka writes a Uuid as 22 characters of URL-safe base64 without padding."""
    if not isinstance(text, str) or len(text) != 22:
        raise ValueError(f"{text!r} is not a Kafka Uuid")
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


class QuorumStateStore:
    """The quorum-state file, replaced atomically: tmp file, fsync, rename, fsync dir.

    A crash at any point leaves either the old file or the new one, never a mix; a stale
    `quorum-state.tmp` from an interrupted write is ignored and overwritten.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tmp_path = path.with_name(path.name + ".tmp")

    def read(self) -> QuorumStateData | None:
        """The stored state, or None when the file does not exist (a fresh node)."""
        try:
            with open(self.path, "rb") as file:
                raw = file.read(QUORUM_STATE_BYTES_MAX + 1)
        except FileNotFoundError:
            return None
        if len(raw) > QUORUM_STATE_BYTES_MAX:
            raise KafkaStorageError(f"{self.path} is larger than {QUORUM_STATE_BYTES_MAX} bytes")
        return decode_quorum_state(raw)

    def write(self, data: QuorumStateData) -> None:
        raw = encode_quorum_state(data)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        descriptor = os.open(self._tmp_path, flags, 0o644)
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(descriptor, view) :]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(self._tmp_path, self.path)
        _fsync_directory(self.path.parent)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
