"""Incremental fetch sessions (KIP-227): the broker's cache, and what each Fetch asks of it.

A fetcher of many partitions -- a follower of thousands -- would otherwise name every
partition in every request and get every partition back, caught up or not. With a session
the broker keeps the partitions and their fetch positions; each later request names only
what changed (a new fetch offset, a new partition) and what to drop (ForgottenTopicsData),
and the response carries only partitions with something to say.

The (SessionId, SessionEpoch) of a request:

    (0, -1)          a full fetch, no session (every client that knows no better)
    (0 or id, 0)     a full fetch that opens a session (an old `id` is closed first); the
                     response names the new session id, or 0 when the cache has no room
    (id, -1)         closes `id`, then a full fetch without a session
    (id, n > 0)      an incremental fetch in session `id` at epoch `n`: unknown id gives
                     FETCH_SESSION_ID_NOT_FOUND, another epoch than the session expects
                     INVALID_FETCH_SESSION_EPOCH (then the fetcher opens a new session)

An incremental response holds a partition when it has records, an error or a diverging
epoch, or when its high watermark, last stable offset or log start offset differs from what
the session last told. Partitions that returned records move to the end of the session's
order, so that a response cut short by max_bytes does not starve the ones behind them.

The cache holds at most max.incremental.fetch.session.cache.slots sessions. When it is
full, a new session takes the place of the least recently used one that has been idle for
min.incremental.fetch.session.eviction.ms -- or of any consumer's session when the new one
is a follower's (Kafka's privileged sessions); otherwise it is not made (session id 0), and
the fetcher goes on with full fetches.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.protocol.entities import field

ZERO_TOPIC_ID: Final = uuid.UUID(int=0)  # no topic: what kio reads as None

INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
NO_SESSION: Final = 0
DEFAULT_SLOTS: Final = 1000  # max.incremental.fetch.session.cache.slots
DEFAULT_EVICTION_MS: Final = 120_000  # min.incremental.fetch.session.eviction.ms

Key = tuple[Any, int]  # (topic id, or the name before Fetch v13; partition)


@dataclass(slots=True)
class SessionPartition:
    """One partition of a session: what the fetcher last asked (the attribute names of a
    FetchPartition, so a request's handler reads either) and what the broker last told."""

    topic: str
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1
    told: tuple[int, int, int] | None = None  # (high watermark, LSO, log start) last sent
    # the partition's state when it was last read and had nothing to return (the Fetch
    # handler's to compare; its first item is the replica manager's Partition): while the
    # state and this fetch position stay the same, a read would again return nothing, so
    # an incremental fetch passes the partition by -- a follower's idle fetch of 33,000
    # partitions looks in full only at those that changed. Set through FetchSession.mark.
    idle: tuple[Any, ...] | None = None

    @property
    def key(self) -> Key:
        return (self.topic_id if self.topic_id is not None else self.topic, self.partition)

    def must_answer(self, has_records: bool, error: bool, high_watermark: int,
                    last_stable_offset: int, log_start_offset: int) -> bool:
        """Whether an incremental response includes this partition (and remember it)."""
        now = (high_watermark, last_stable_offset, log_start_offset)
        changed = now != self.told
        self.told = now
        return has_records or error or changed


@dataclass(slots=True)
class FetchSession:
    session_id: int
    follower: bool
    partitions: OrderedDict[Key, SessionPartition]
    epoch: int = 1  # the epoch the next request must carry
    last_used_ms: int = 0
    # the Fetch handler's: how many partition changes (ReplicaManager.changes) it had
    # seen at its last look at the session's partitions, and when it looks at all of them
    # again (for a change that did not wake anyone: retention moving a log start; and to
    # record an idle follower as still caught up)
    changes_seen: int = -1
    full_look_ms: int = 0
    # a follower's session: the broker it is of, and when the last look at its partitions
    # began (the fetch's arrival); each partition still marked idle was at this leader's
    # log end then, so the follower counts as caught up on it as of that time
    replica_id: int = -1
    looked_ms: int = -1
    # partitions whose topic id was unknown when they were named (the leader had not yet
    # applied the topic): looked up again at each request, as Kafka's sessions do
    unresolved: set[Key] = dataclasses.field(default_factory=set)
    # the partitions an incremental look reads each time (not idle), in the session's
    # order; the idle ones by the Partition they were read from, for the few of them that
    # changed to be found without going through the rest (300,000 partitions: 100,000 per
    # follower's session, looked at on every request, took most of a broker's time)
    busy: dict[Key, SessionPartition] = dataclasses.field(default_factory=dict)
    idle_of: dict[Any, SessionPartition] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.busy.update(self.partitions)

    def mark(self, partition: SessionPartition, idle: tuple[Any, ...] | None) -> None:
        """Record `partition` (of this session) as idle in state `idle`, or as busy."""
        if partition.idle is not None and self.idle_of.get(partition.idle[0]) is partition:
            del self.idle_of[partition.idle[0]]
        partition.idle = idle
        if idle is None:
            self.busy[partition.key] = partition
        else:
            self.busy.pop(partition.key, None)
            self.idle_of[idle[0]] = partition

    def add(self, key: Key, partition: SessionPartition) -> None:
        self.partitions[key] = partition
        self.busy[key] = partition
        self.note_unresolved(key, partition)

    def forget(self, key: Key) -> None:
        partition = self.partitions.pop(key, None)
        if partition is not None:
            self.mark(partition, None)
            del self.busy[key]

    def incremental_look(self, changed: set[Any]) -> list[SessionPartition]:
        """What an incremental look reads: the busy partitions, then the idle ones whose
        Partition is in `changed`."""
        idle_of = self.idle_of
        return [*self.busy.values(),
                *(found for each in changed if (found := idle_of.get(each)) is not None)]

    def note_unresolved(self, key: Key, partition: SessionPartition) -> None:
        if not partition.topic and partition.topic_id is not None:
            self.unresolved.add(key)

    def resolve_names(self, name_of: Callable[[uuid.UUID], str]) -> None:
        """Name the partitions whose topic id has become known since."""
        for key in list(self.unresolved):
            partition = self.partitions.get(key)
            if partition is None or partition.topic_id is None:
                self.unresolved.discard(key)
                continue
            name = name_of(partition.topic_id)
            if name:
                partition.topic = name
                self.unresolved.discard(key)


@dataclass(frozen=True, slots=True)
class FetchContext:
    """What one Fetch works on: the partitions to read, in order, and how to answer."""

    requested: list[SessionPartition]  # the request's own (not an incremental one's)
    session: FetchSession | None  # the session this request belongs to, if any
    incremental: bool  # answer only the partitions that must be answered
    response_session_id: int
    error: ErrorCode = ErrorCode.none

    @property
    def partitions(self) -> list[SessionPartition]:
        """Every partition the fetch is of, in order: an incremental one's whole session
        (built on each call: the Fetch handler reads the session's instead)."""
        if self.incremental and self.session is not None:
            return list(self.session.partitions.values())
        return self.requested


class FetchSessionCache:
    def __init__(self, *, slots: int = DEFAULT_SLOTS, eviction_ms: int = DEFAULT_EVICTION_MS,
                 rng: random.Random | None = None) -> None:
        self.slots = slots
        self.eviction_ms = eviction_ms
        self._rng = rng or random.Random()
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recent first

    def __len__(self) -> int:
        return len(self._sessions)

    def context(self, request: Any, names: dict[Any, tuple[str, uuid.UUID | None]],
                now_ms: int, follower: bool,
                name_of: Callable[[uuid.UUID], str] = lambda _: "",
                replica_id: int = -1) -> FetchContext:
        """The FetchContext of `request`; `names` maps each topic key of the request (and of
        its forgotten topics) to the topic's name and id ("" for an unknown id); `name_of`
        gives the current name of a topic id, for the session's partitions named while
        their id was unknown."""
        session_id = field(request, "session_id", NO_SESSION) or NO_SESSION
        epoch = field(request, "session_epoch", FINAL_EPOCH)
        requested = self._requested(request, names)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != NO_SESSION:
                self._sessions.pop(session_id, None)
            partitions = list(requested.values())
            if epoch == FINAL_EPOCH:
                return FetchContext(partitions, None, False, NO_SESSION)
            session = self._open(OrderedDict(requested), now_ms, follower, replica_id)
            if session is None:
                return FetchContext(partitions, None, False, NO_SESSION)
            return FetchContext(partitions, session, False, session.session_id)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext([], None, False, NO_SESSION,
                                ErrorCode.fetch_session_id_not_found)
        if epoch != session.epoch:
            return FetchContext([], None, False, NO_SESSION,
                                ErrorCode.invalid_fetch_session_epoch)
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        self._sessions.move_to_end(session_id)
        cached = session.partitions
        for key, wanted in requested.items():
            known = cached.get(key)
            if known is None:
                session.add(key, wanted)
            else:
                session.mark(known, None)  # named again: read it
                known.topic = wanted.topic
                known.fetch_offset = wanted.fetch_offset
                known.partition_max_bytes = wanted.partition_max_bytes
                known.current_leader_epoch = wanted.current_leader_epoch
                known.last_fetched_epoch = wanted.last_fetched_epoch
                known.log_start_offset = wanted.log_start_offset
        for topic in field(request, "forgotten_topics_data", ()) or ():
            key = topic_key(topic)
            for index in topic.partitions:
                session.forget((key, index))
        if session.unresolved:
            session.resolve_names(name_of)
        return FetchContext([], session, True, session.session_id)

    def returned_records(self, session: FetchSession, partitions: list[SessionPartition]
                         ) -> None:
        """`partitions` returned records: they go to the end of the session's order."""
        for each in partitions:
            key = each.key
            if key in session.partitions:
                session.partitions.move_to_end(key)
                if key in session.busy:
                    session.busy[key] = session.busy.pop(key)

    def _requested(self, request: Any, names: dict[Any, tuple[str, uuid.UUID | None]]
                   ) -> dict[Key, SessionPartition]:
        requested: dict[Key, SessionPartition] = {}
        for topic in request.topics:
            key = topic_key(topic)
            name, topic_id = names[key]
            for wanted in topic.partitions:
                requested[(key, wanted.partition)] = SessionPartition(
                    name, topic_id, wanted.partition, wanted.fetch_offset,
                    wanted.partition_max_bytes,
                    field(wanted, "current_leader_epoch", -1),
                    field(wanted, "last_fetched_epoch", -1),
                    field(wanted, "log_start_offset", -1))
        return requested

    def idle_follower_ms(self, partition: Any, replica_id: int) -> int:
        """When a session of follower `replica_id` last looked at its partitions while
        `partition` (the replica manager's) was marked idle there -- the follower at this
        leader's log end -- or -1: what its idle partitions are not looked at to record."""
        seen = -1
        for session in self._sessions.values():
            if session.replica_id == replica_id:
                found = session.idle_of.get(partition)
                if found is not None and found.idle is not None:
                    seen = max(seen, session.looked_ms)
        return seen

    def _open(self, partitions: OrderedDict[Key, SessionPartition], now_ms: int,
              follower: bool, replica_id: int = -1) -> FetchSession | None:
        if len(self._sessions) >= self.slots and not self._evict_one(now_ms, follower):
            return None
        session_id = self._rng.randint(1, 0x7FFFFFFF)
        while session_id in self._sessions:
            session_id = self._rng.randint(1, 0x7FFFFFFF)
        session = FetchSession(session_id, follower, partitions, last_used_ms=now_ms,
                               replica_id=replica_id if follower else -1)
        for key, partition in partitions.items():
            session.note_unresolved(key, partition)
        self._sessions[session_id] = session
        return session

    def _evict_one(self, now_ms: int, follower: bool) -> bool:
        for session_id, session in self._sessions.items():  # least recently used first
            idle = now_ms - session.last_used_ms >= self.eviction_ms
            if idle or (follower and not session.follower):
                del self._sessions[session_id]
                return True
        return False


def next_epoch(epoch: int) -> int:
    """The session epoch after `epoch`: it wraps from the largest int32 to 1."""
    return 1 if epoch == 0x7FFFFFFF else epoch + 1


def topic_key(topic: Any) -> Any:
    """How a request's topic (or forgotten topic) is keyed: by id from Fetch v13, else name.
    kio reads the zero id as None: it stays the zero id (unknown), it does not mean "by name"
    (those versions have no name; found by tests/fuzz)."""
    if hasattr(topic, "topic_id"):
        return topic.topic_id if topic.topic_id is not None else ZERO_TOPIC_ID
    return topic.topic
