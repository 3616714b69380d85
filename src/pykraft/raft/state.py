"""Raft epoch states, the only place they change, and the `quorum-state` file.

Theory of operation. A node's place in the quorum is one value of `EpochState`:

    Unattached(epoch)                 knows the epoch, has neither voted nor seen a leader
    Voted(epoch, voted_id)            granted its vote in `epoch` to another voter
    Candidate(epoch, granting_voters) asked for votes in `epoch`; it always votes for itself
    Follower(epoch, leader_id)        replicates from the leader of `epoch`
    Leader(epoch, epoch_start_offset) the leader of `epoch`; its first entry in the epoch is
                                      the LeaderChangeMessage at `epoch_start_offset`
    Resigned(epoch)                   was leader of `epoch` and gave it up (or restarted:
                                      a restarted leader never resumes, see `restore`)

Invariants:
- the epoch never decreases; a node leads at most one epoch and votes at most once per epoch;
- every state the node may act on is persisted (`to_quorum_state`) before it acts: a vote,
  or a candidacy (which is a vote for itself), counts only once durable, and a leader's
  entries are appended only after its leadership is;
- a node never leads an epoch below the last epoch in its log.

Legal transitions built so far (the single-voter path; the multi-voter protocol adds the
rest in this module):

    Unattached | Voted | Candidate | Follower | Resigned  --become_candidate-->  Candidate
    Candidate (majority of voters granted)                --become_leader----->  Leader

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
    "become_leader",
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


EpochState = Unattached | Voted | Candidate | Follower | Leader | Resigned


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

    Legal from every state but Leader: a leader resigns first, so that it never votes
    against the entries it wrote in its own epoch.
    """
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
