"""Replica fetchers: a follower's side of partition replication.

One fetcher task per source broker (the leader of the partitions it carries) batches every
partition this broker follows from that leader into one Fetch (v15: replica id and broker
epoch in ReplicaState, topic ids, the current leader epoch, the fetch offset = the follower's
log end offset, the epoch of its last batch, its log start offset). For each partition of
the answer, as Kafka's fetcher does with truncation on fetch (KIP-320, KIP-595 data plane):

- records: appended as they are (`Log.append_as_follower`: the leader's offsets and epochs,
  the epochs recorded in leader-epoch-checkpoint); then the high watermark becomes
  min(leader's high watermark, own log end) and the log start follows the leader's;
- DivergingEpoch (epoch E ended at offset X on the leader): the follower truncates to
  `truncation_offset` (the end of its own largest epoch <= E, capped by X) and fetches
  again, with its new last epoch, until the leader accepts it;
- OFFSET_OUT_OF_RANGE: the leader's log start and high watermark are read (ListOffsets with
  the replica id): a log that ends below the leader's start is emptied and restarted there;
  one that ends above the leader's high watermark is cut back to it;
- FENCED_LEADER_EPOCH: the follower is behind the metadata: the partition waits until the
  metadata moves it (a new leader epoch makes the replica manager call `follow` again);
- NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH and other errors, and a broken connection:
  the partition (or the whole fetcher) backs off replica.fetch.backoff.ms and retries.

The fetcher keeps an incremental fetch session with its leader (KIP-227,
broker.fetch_sessions): after the full fetch that opens it, a request names only the
partitions whose position moved (and the ones to forget), and the leader answers only
partitions with news, so that following thousands of caught-up partitions costs little. A
session error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH) or a broken
connection opens a new one with the next, full, fetch.

A fetcher never becomes follower by truncating to its high watermark: the first fetch from
a new leader starts at the log end with the last epoch, and the leader's diverging-epoch
answer says how much to cut (Kafka's KRaft-mode makeFollower does the same).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import heapq
import itertools
import logging
import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v15 import request as fetch_request
from kio.schema.list_offsets.v7 import request as list_offsets_request

from pykraft.broker.fetch_sessions import INITIAL_EPOCH, NO_SESSION, next_epoch
from pykraft.broker.partition_events import PartitionEvents
from pykraft.broker.replica_manager import Partition
from pykraft.errors import KafkaError
from pykraft.net.connect import ClientSecurity, open_connection
from pykraft.protocol.api import ApiKey
from pykraft.protocol.entities import make
from pykraft.protocol.framing import FrameError, decode_response, encode_request
from pykraft.records.batch import iter_headers
from pykraft.storage.leader_epoch import UNDEFINED_EPOCH
from pykraft.storage.log import Log

log = logging.getLogger(__name__)

FETCH_VERSION: Final = 15
LIST_OFFSETS_VERSION: Final = 7
EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1
_SIZE: Final = struct.Struct(">i")
RESPONSE_BYTES_MAX: Final = 200 * 1024 * 1024
_SESSION_ERRORS: Final = (ErrorCode.fetch_session_id_not_found,
                          ErrorCode.invalid_fetch_session_epoch)
# errors after which the partition waits for the metadata to move it
_WAIT_FOR_METADATA: Final = frozenset({ErrorCode.fenced_leader_epoch})


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    wait_max_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1024 * 1024  # per partition
    response_max_bytes: int = 10 * 1024 * 1024
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30_000

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> FetcherConfig:
        def get(key: str, default: int) -> int:
            value = configs.get(key)
            return int(value) if value not in (None, "") else default

        default = cls()
        return cls(
            wait_max_ms=get("replica.fetch.wait.max.ms", default.wait_max_ms),
            min_bytes=get("replica.fetch.min.bytes", default.min_bytes),
            max_bytes=get("replica.fetch.max.bytes", default.max_bytes),
            response_max_bytes=get("replica.fetch.response.max.bytes",
                                   default.response_max_bytes),
            backoff_ms=get("replica.fetch.backoff.ms", default.backoff_ms),
            socket_timeout_ms=get("replica.socket.timeout.ms", default.socket_timeout_ms),
        )


# -- the follower's decisions (no I/O) ---------------------------------------------------


def truncation_offset(log_: Log, diverging_epoch: int, diverging_end_offset: int) -> int:
    """Where a follower cuts its log when the leader says "epoch E ended at X" (Kafka's
    getOffsetTruncationState): no offset known -> the high watermark; no epoch -> min(X,
    log end); else the follower's own end of its largest epoch <= E, and X too when that
    epoch is E itself (a smaller one means the next fetch checks again, from there)."""
    end = log_.log_end_offset
    if diverging_end_offset < 0:
        return min(log_.high_watermark, end)
    if diverging_epoch == UNDEFINED_EPOCH:
        return min(diverging_end_offset, end)
    own_epoch, own_end = log_.end_offset_for_epoch(diverging_epoch)
    if own_epoch == UNDEFINED_EPOCH:
        return min(diverging_end_offset, end)
    if own_epoch != diverging_epoch:
        return min(own_end, end)
    return min(diverging_end_offset, own_end, end)


def append_from_leader(log_: Log, records: bytes, now_ms: int) -> int:
    """Append the whole batches of a fetch answer at the log end; return the bytes written.
    Batches wholly below the log end are skipped; one that straddles it (the log was cut
    inside a batch) replaces what is left of it."""
    end = log_.log_end_offset
    start = None
    for position, header in iter_headers(records):
        if header.last_offset >= end:
            if header.base_offset < end:
                log_.truncate_to(header.base_offset)
            start = position
            break
    if start is None:
        return 0
    data = memoryview(records)[start:]
    consumed = 0
    for position, header in iter_headers(data):
        consumed = position + header.size
    if consumed == 0:
        return 0
    log_.append_as_follower(bytes(data[:consumed]), now_ms=now_ms)
    return consumed


def learn_from_leader(log_: Log, high_watermark: int, log_start_offset: int) -> None:
    """The leader's high watermark (capped by our log end) and log start."""
    if high_watermark >= 0:
        log_.update_high_watermark(high_watermark)
    if log_start_offset > log_.log_start_offset:
        log_.maybe_increment_log_start_offset(min(log_start_offset, log_.high_watermark))


# -- the connection ---------------------------------------------------------------------


class BrokerConnection:
    """One TCP connection to a broker listener; one request at a time."""

    def __init__(self, address: Callable[[], tuple[str, int] | None], client_id: str,
                 timeout_ms: int, security: ClientSecurity | None = None) -> None:
        self.address = address
        self.security = security  # the inter-broker listener's TLS / SASL, None: plaintext
        self.client_id = client_id
        self.timeout_ms = timeout_ms
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0

    async def request(self, api_key: int, api_version: int, request: Any,
                      extra_timeout_ms: int = 0) -> Any:
        try:
            async with asyncio.timeout((self.timeout_ms + extra_timeout_ms) / 1000):
                return await self._exchange(api_key, api_version, request)
        except BaseException:
            self.close()
            raise

    async def _exchange(self, api_key: int, api_version: int, request: Any) -> Any:
        if self._writer is None:
            address = self.address()
            if address is None:
                raise ConnectionError("the leader has no known address")
            self._reader, self._writer = await open_connection(*address, self.security)
        reader, writer = self._reader, self._writer
        assert reader is not None
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        writer.write(encode_request(api_key, api_version, self._correlation_id,
                                    self.client_id, request))
        await writer.drain()
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        if not 4 <= size <= RESPONSE_BYTES_MAX:
            raise FrameError(f"response of {size} bytes")
        frame = await reader.readexactly(size)
        correlation_id, answer = decode_response(api_key, api_version, frame)
        if correlation_id != self._correlation_id:
            raise FrameError(f"correlation id {correlation_id}, expected {self._correlation_id}")
        return answer

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


# -- one fetcher per leader -----------------------------------------------------------


_IdKey = tuple[Any, int]  # (topic id, partition)
_Position = tuple[int, int, int, int]  # (fetch offset, leader epoch, last epoch, log start)


@dataclass(slots=True, eq=False)
class FetchState:
    partition: Partition
    leader_epoch: int  # the epoch this state follows; answers for another are dropped
    delayed_until: float = 0.0  # loop time; math.inf: until the metadata moves it
    reset_needed: bool = False  # OFFSET_OUT_OF_RANGE: ask the leader where its log lies


def _id_key(state: FetchState) -> _IdKey:
    return (state.partition.topic_id, state.partition.index)


@dataclass(frozen=True, slots=True)
class FetchRound:
    """What one request told the leader: per partition the position it asks from, or None
    for one its session forgets; `full` when it opened a session with all of them."""

    full: bool
    told: dict[_IdKey, _Position | None]


class ReplicaFetcher:
    """A round costs what changed, not what is followed: the partitions whose position
    may have moved since the leader was last told (`_dirty`: added, removed, answered,
    delayed or back from a delay, reset) are the only ones looked at when the request is
    built, and only the answered ones when the answer is read. Every FULL_LOOK_S all of
    them are looked at, for a position that moved without this fetcher (retention moving a
    log start): a list of their keys, taken after the dirty ones a round at a time (marking
    all 666,000 that a broker followed at 1,000,000 partitions dirty at once, each key
    hashed twice, was 11% of its time over a controlled shutdown, py-spy). A follower of
    33,000 caught-up partitions spent 48 ms a round looking at
    each of them (py-spy: 22% of a broker's busy time while leaderships moved); looking at
    its 200,000 every 5 s, as it did, was most of the 18% of a broker's time that building
    its requests took during a controlled shutdown at 300,000 partitions (py-spy), once
    the leader no longer looked at its sessions' idle partitions that often
    (apis.FULL_LOOK_MS).

    A round is bounded too: it looks at LOOKED_PER_ROUND_MAX of the dirty partitions and
    tells the leader of TOLD_PER_ROUND_MAX; the rest wait for the next rounds, which then
    ask the leader not to wait for data (max_wait 0). A first fetch of the 100,000
    partitions a broker follows at 300,000 held its event loop 2 s to build, and its
    leader's as long to read. A partition left out of a full fetch joins the session in a
    later round (KIP-227: an incremental fetch adds the partitions it names). Without a
    session (the leader has no room for one), every round is full: it takes the next
    partitions each time, so that all of them are fetched in turn."""

    FULL_LOOK_S: Final = 60.0
    LOOKED_PER_ROUND_MAX: Final = 10_000  # an unchanged partition costs a tuple compare
    TOLD_PER_ROUND_MAX: Final = 2_000  # a told one, an entity here and a read there
    # the partitions a round asks the leader's session to forget: apart from the two
    # bounds above, and far more of them, since each costs an int here and a dict pop
    # there, while each one the session still holds and no longer has here (led here
    # now, or led elsewhere) comes back in every response with an error. Counted among
    # the 2,000 told a round, the 120,000 partitions whose leadership a preferred
    # election moved here at 1,000,000 partitions took 60 rounds to forget, each with a
    # 5 MB response the leader took 1-2 s to build: the last 80,000 of the restarted
    # follower's ISR rejoins waited 5 minutes behind them.
    FORGOTTEN_PER_ROUND_MAX: Final = 100_000

    def __init__(
        self, node_id: int, leader_id: int, connection: BrokerConnection,
        config: FetcherConfig, broker_epoch: Callable[[], int], now_ms: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.leader_id = leader_id
        self.connection = connection
        self.config = config
        self.broker_epoch = broker_epoch
        self.now_ms = now_ms
        self.states: dict[tuple[str, int], FetchState] = {}
        self._by_id: dict[_IdKey, FetchState] = {}
        # the partitions to look at again, oldest first (one marked again keeps its place:
        # an OrderedDict's assignment). Taken in a set's order, a partition could wait
        # behind later ones round after round while leaderships kept moving to its leader
        # (a controlled shutdown at 300,000 partitions), until the leader dropped this
        # follower from its ISR 30 s on.
        self._dirty: collections.OrderedDict[_IdKey, None] = collections.OrderedDict()
        # the partitions the leader's session may hold that are not to be fetched now
        # (dropped, or delayed): forgotten by the next rounds unless fetched again by then
        self._forget: collections.OrderedDict[_IdKey, None] = collections.OrderedDict()
        self._refill = True  # the next full fetch takes every partition as dirty
        self._full_look: list[_IdKey] = []  # the full look's keys not yet looked at
        self._delayed: dict[_IdKey, FetchState] = {}  # delayed_until still to come
        # (delayed_until, tie, key) of each finite delay, soonest first; an entry whose
        # state was delayed again or dropped since is passed over when it comes up
        self._delay_ends: list[tuple[float, int, _IdKey]] = []
        self._delay_ties = itertools.count()
        self._resets: dict[_IdKey, FetchState] = {}  # reset_needed
        self._full_look_at = 0.0  # loop time
        self._backoff_until = 0.0  # loop time: no request before it (`_back_off`)
        self._wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        # the incremental fetch session with the leader (KIP-227, broker.fetch_sessions):
        # its id and the epoch of the next request (INITIAL_EPOCH: open one, full fetch),
        # and per partition in it what the leader was last told
        self.session_id = NO_SESSION
        self.session_epoch = INITIAL_EPOCH
        self._in_session: dict[_IdKey, _Position] = {}
        self._event_logs: dict[str, PartitionEvents] = {}

    def reset_session(self, *, refill: bool = True) -> None:
        """Open a new session with the next request (a full fetch), which takes every
        partition again unless `refill` is false (it goes on with those not yet taken)."""
        self.session_id, self.session_epoch = NO_SESSION, INITIAL_EPOCH
        self._in_session = {}
        self._refill = self._refill or refill

    def add(self, partition: Partition) -> None:
        old = self.states.get((partition.topic, partition.index))
        if old is not None:
            self._drop(old)
        state = FetchState(partition, partition.leader_epoch)
        self.states[(partition.topic, partition.index)] = state
        self._by_id[_id_key(state)] = state
        self._dirty[_id_key(state)] = None
        self._wake.set()

    def remove(self, partition: Partition) -> None:
        state = self.states.get((partition.topic, partition.index))
        if state is not None and state.partition is partition:
            del self.states[(partition.topic, partition.index)]
            self._drop(state)

    def _drop(self, state: FetchState) -> None:
        key = _id_key(state)
        if self._by_id.get(key) is state:
            del self._by_id[key]
            self._delayed.pop(key, None)
            self._resets.pop(key, None)
            self._forget[key] = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            if now < self._backoff_until:
                await asyncio.sleep(self._backoff_until - now)
                continue
            self._end_delays(now)
            if len(self._delayed) == len(self._by_id):  # nothing to fetch now
                wake_at = self._next_delay_end()
                await self._sleep(None if wake_at == math.inf else max(0.0, wake_at - now))
                continue
            try:
                for state in list(self._resets.values()):
                    if _id_key(state) not in self._delayed:
                        await self._reset_offset(state)
                if not await self._fetch():  # nothing in the session, nor to add to it
                    await self._sleep(self.config.backoff_ms / 1000)
            except asyncio.CancelledError:
                raise
            except (OSError, TimeoutError, asyncio.IncompleteReadError, FrameError,
                    ConnectionError) as error:
                log.info("broker %d: fetch from leader %d failed (%s); retrying in %d ms",
                         self.node_id, self.leader_id, error or type(error).__name__,
                         self.config.backoff_ms)
                self._back_off()
            except Exception:
                log.exception("broker %d: fetch from leader %d failed", self.node_id,
                              self.leader_id)
                self._back_off()

    def _back_off(self) -> None:
        """The whole fetch failed (the leader unreachable, or an error for all of it): a
        new session, opened no sooner than backoff_ms from now. One deadline for the
        fetcher rather than a delay per partition: delaying each of the 100,000 partitions
        a killed leader had led, again after each refused connection, held a broker's loop
        2 s at a time while it was to apply the fence that moves them elsewhere."""
        self.reset_session()
        self._backoff_until = (asyncio.get_running_loop().time()
                               + self.config.backoff_ms / 1000)

    async def _sleep(self, timeout_s: float | None) -> None:
        """Until a partition is added (`add`) or `timeout_s` has passed."""
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._wake.wait()

    def _end_delays(self, now: float) -> None:
        """States whose delay is over are fetched again, their position told again (the
        leader's session may still hold them: no request told it to forget them when all
        of them waited); every FULL_LOOK_S, all are looked at. The delays that are over
        come off a heap: a scan of every delayed state each round was 13% of a broker's
        time while it rejoined 300,000 partitions' ISRs."""
        while self._next_delay_end() <= now:
            _, _, key = heapq.heappop(self._delay_ends)
            del self._delayed[key]
            self._in_session.pop(key, None)
            self._dirty[key] = None
        if now >= self._full_look_at:
            self._full_look_at = now + self.FULL_LOOK_S
            self._full_look = [*self._by_id, *(self._in_session.keys() - self._by_id.keys())]

    def _next_delay_end(self) -> float:
        """When the soonest finite delay ends (math.inf: none), stale entries dropped."""
        ends = self._delay_ends
        while ends:
            until, _, key = ends[0]
            state = self._delayed.get(key)
            if state is not None and state.delayed_until == until:
                return until
            heapq.heappop(ends)
        return math.inf

    def _current(self, state: FetchState) -> bool:
        """The state still follows what the replica manager says about its partition."""
        partition = self.states.get((state.partition.topic, state.partition.index))
        return (partition is state and state.partition.leader_id == self.leader_id
                and state.partition.leader_epoch == state.leader_epoch)

    def _delay(self, state: FetchState, delay_ms: int) -> None:
        """One partition waits `delay_ms` (unless it waits for the metadata already); a fetch
        that fails as a whole backs off the fetcher instead (`_back_off`)."""
        if state.delayed_until != math.inf:
            self._delay_until(state, asyncio.get_running_loop().time() + delay_ms / 1000)

    def _delay_until(self, state: FetchState, until: float) -> None:
        state.delayed_until = until
        key = _id_key(state)
        if self._by_id.get(key) is state:
            self._delayed[key] = state
            if until != math.inf:
                heapq.heappush(self._delay_ends, (until, next(self._delay_ties), key))
            self._forget[key] = None  # the leader's session forgets it meanwhile

    def _needs_reset(self, state: FetchState, needed: bool) -> None:
        state.reset_needed = needed
        key = _id_key(state)
        if needed and self._by_id.get(key) is state:
            self._resets[key] = state
        elif self._resets.get(key) is state:
            del self._resets[key]
        self._dirty[key] = None

    def build_request(self) -> tuple[Any, FetchRound]:
        """The Fetch of this round: in a session, only the partitions whose position
        changed since the leader was last told, and the ones to forget; else all of
        them."""
        full = self.session_epoch == INITIAL_EPOCH
        if full and (self._refill or not self._dirty):
            self._dirty = collections.OrderedDict.fromkeys(self._by_id)
            self._refill = False
        dirty, full_look = self._dirty, self._full_look
        by_topic: dict[Any, list[Any]] = {}
        told: dict[_IdKey, _Position | None] = self._forgotten(full)
        looked, positions = 0, 0
        while (dirty or full_look) and looked < self.LOOKED_PER_ROUND_MAX \
                and positions < self.TOLD_PER_ROUND_MAX:
            key = dirty.popitem(last=False)[0] if dirty else full_look.pop()
            if key in told:
                continue  # dirty and in the full look, or forgotten: told once
            looked += 1
            state = self._by_id.get(key)
            if state is None or not self._fetched_now(state):
                if not full and key in self._in_session:
                    told[key] = None  # forgotten
                continue
            log_ = state.partition.log
            position = (log_.log_end_offset, state.leader_epoch, log_.latest_epoch,
                        log_.log_start_offset)
            if not full and self._in_session.get(key) == position:
                continue  # the leader's session has it as it is
            told[key] = position
            positions += 1
            by_topic.setdefault(key[0], []).append(make(fetch_request.FetchPartition,
                partition=key[1], current_leader_epoch=state.leader_epoch,
                fetch_offset=position[0], last_fetched_epoch=position[2],
                log_start_offset=position[3], partition_max_bytes=self.config.max_bytes))
        forgotten: dict[Any, list[int]] = {}
        for key in [key for key, told_as in told.items() if told_as is None]:
            forgotten.setdefault(key[0], []).append(key[1])
        request = make(fetch_request.FetchRequest,
            replica_state=make(fetch_request.ReplicaState, replica_id=self.node_id,
                                                     replica_epoch=self.broker_epoch()),
            max_wait=_timedelta_ms(0 if dirty or full_look or self._forget
                                 else self.config.wait_max_ms),
            min_bytes=self.config.min_bytes,
            max_bytes=self.config.response_max_bytes, isolation_level=0,
            session_id=self.session_id, session_epoch=self.session_epoch,
            topics=tuple(make(fetch_request.FetchTopic, topic_id=topic_id, partitions=tuple(parts))
                         for topic_id, parts in by_topic.items()),
            forgotten_topics_data=tuple(
                make(fetch_request.ForgottenTopic, topic_id=topic_id,
                     partitions=tuple(sorted(indexes)))
                for topic_id, indexes in forgotten.items()),
            rack_id="")
        return request, FetchRound(full, told)

    def _fetched_now(self, state: FetchState) -> bool:
        return (_id_key(state) not in self._delayed and not state.reset_needed
                and self._current(state))

    def _forgotten(self, full: bool) -> dict[_IdKey, _Position | None]:
        """The partitions this round asks the leader's session to forget (None each):
        the next of those to forget that its session holds and that are not fetched
        again meanwhile (a full fetch opens a new session: it forgets none)."""
        forget, in_session = self._forget, self._in_session
        if full:
            forget.clear()
            return {}
        told: dict[_IdKey, _Position | None] = {}
        while forget and len(told) < self.FORGOTTEN_PER_ROUND_MAX:
            key = forget.popitem(last=False)[0]
            if key in in_session:
                state = self._by_id.get(key)
                if state is None or not self._fetched_now(state):
                    told[key] = None
        return told

    def _session_answered(self, response: Any, round_: FetchRound) -> None:
        """The leader answered within the session (or opened one, or made none)."""
        if response.session_id == NO_SESSION:
            # no room in its cache: full fetches, asking again each time, each taking
            # the next partitions
            self.reset_session(refill=False)
            return
        if self.session_epoch == INITIAL_EPOCH or response.session_id != self.session_id:
            self.session_id, self.session_epoch = response.session_id, 1
            self._in_session = {}
        else:
            self.session_epoch = next_epoch(self.session_epoch)
        for key, position in round_.told.items():
            if position is None:
                self._in_session.pop(key, None)
            else:
                self._in_session[key] = position

    async def _fetch(self) -> bool:
        """One round; False when there was nothing to fetch."""
        request, round_ = self.build_request()
        while not round_.full and not round_.told and (self._dirty or self._full_look):
            # a slice of the dirty ones looked at, none to tell (the full look, mostly):
            # look on rather than ask the leader for nothing without waiting
            await asyncio.sleep(0)
            request, round_ = self.build_request()
        if not request.topics and not self._in_session and not request.forgotten_topics_data:
            return False
        response = await self.connection.request(ApiKey.FETCH, FETCH_VERSION, request,
                                                  extra_timeout_ms=self.config.wait_max_ms)
        if response.error_code in _SESSION_ERRORS:
            log.info("broker %d: leader %d answered the fetch with %s; opening a new session",
                     self.node_id, self.leader_id, response.error_code.name)
            self.reset_session()
            return True
        if response.error_code != ErrorCode.none:
            log.info("broker %d: leader %d answered the fetch with %s", self.node_id,
                     self.leader_id, response.error_code.name)
            self._back_off()
            return True
        self._session_answered(response, round_)
        self.handle_response(round_, response)
        return True

    def handle_response(self, round_: FetchRound, response: Any) -> None:
        """Each answered partition, if its state is current and was asked for (at the
        position told this round, or before in the session) at its leader epoch and its
        log end: an answer to a request at an older epoch -- FENCED_LEADER_EPOCH sent
        before the metadata brought the new one -- would park the new state for good."""
        for topic in response.responses:
            for data in topic.partitions:
                key = (topic.topic_id, data.partition_index)
                state = self._by_id.get(key)
                if state is None or not self._current(state):
                    continue
                self._dirty[key] = None  # its position may move now, or moved meanwhile
                position = round_.told.get(key) or self._in_session.get(key)
                if (position is None or position[1] != state.leader_epoch
                        or state.partition.log.log_end_offset != position[0]):
                    continue  # a new epoch or a moved log (truncated): the answer is stale
                try:
                    self.handle_partition(state, data)
                except KafkaError as error:
                    log.warning("broker %d: %s from leader %d: %s", self.node_id,
                                state.partition.name, self.leader_id, error)
                    self._delay(state, self.config.backoff_ms)

    def handle_partition(self, state: FetchState, data: Any) -> None:
        partition = state.partition
        log_ = partition.log
        code = data.error_code
        if code == ErrorCode.none:
            diverging = data.diverging_epoch
            if diverging.epoch != -1 or diverging.end_offset != -1:
                offset = truncation_offset(log_, diverging.epoch, diverging.end_offset)
                self._events(f"diverged from leader {self.leader_id}; truncating").add(
                    partition.name, f"(its epoch {diverging.epoch} ended at "
                    f"{diverging.end_offset}): from {log_.log_end_offset} to {offset}")
                log_.truncate_to(offset)
                return
            if data.records:
                append_from_leader(log_, bytes(data.records), self.now_ms())
            learn_from_leader(log_, data.high_watermark, data.log_start_offset)
            partition.wake_waiters()
        elif code == ErrorCode.offset_out_of_range:
            self._needs_reset(state, True)
        elif code in _WAIT_FOR_METADATA:
            self._events(f"leader {self.leader_id} answers {code.name}; waiting for the "
                         "metadata").add(partition.name)
            self._delay_until(state, math.inf)
        else:
            self._events(f"leader {self.leader_id} answers {code.name}; retrying in "
                         f"{self.config.backoff_ms} ms").add(partition.name)
            self._delay(state, self.config.backoff_ms)

    def _events(self, what: str) -> PartitionEvents:
        """The log of one kind of event, one line per loop turn (a leader that stopped
        leading 33,000 partitions says so for each of them)."""
        events = self._event_logs.get(what)
        if events is None:
            events = self._event_logs[what] = PartitionEvents(
                log, f"broker {self.node_id}: {what}")
        return events

    async def _reset_offset(self, state: FetchState) -> None:
        """OFFSET_OUT_OF_RANGE: restart below the leader's log start; cut back to its high
        watermark what lies above it."""
        earliest = await self._leader_offset(state, EARLIEST_TIMESTAMP)
        latest = await self._leader_offset(state, LATEST_TIMESTAMP)
        if earliest is None or latest is None or not self._current(state):
            self._delay(state, self.config.backoff_ms)
            return
        log_ = state.partition.log
        end = log_.log_end_offset
        if end < earliest:
            log.info("broker %d: %s ends at %d, below leader %d's log start %d: restarting "
                     "the log there", self.node_id, state.partition.name, end, self.leader_id,
                     earliest)
            log_.truncate_fully_and_start_at(earliest, now_ms=self.now_ms())
        elif end > latest:
            log.info("broker %d: %s ends at %d, above leader %d's high watermark %d: "
                     "truncating", self.node_id, state.partition.name, end, self.leader_id,
                     latest)
            log_.truncate_to(latest)
        self._needs_reset(state, False)

    async def _leader_offset(self, state: FetchState, timestamp: int) -> int | None:
        partition = state.partition
        request = make(list_offsets_request.ListOffsetsRequest,
            replica_id=self.node_id, isolation_level=0,
            topics=(make(list_offsets_request.ListOffsetsTopic,
                name=partition.topic, partitions=(make(list_offsets_request.ListOffsetsPartition,
                    partition_index=partition.index, current_leader_epoch=state.leader_epoch,
                    timestamp=timestamp),)),))
        response = await self.connection.request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION,
                                                  request)
        for topic in response.topics:
            for answer in topic.partitions:
                if answer.partition_index == partition.index:
                    if answer.error_code != ErrorCode.none:
                        return None
                    return int(answer.offset)
        return None


def _timedelta_ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


class ReplicaFetcherManager:
    """The replica manager's FetcherControl: a fetcher per leader, started on demand and
    stopped when it has nothing left to fetch."""

    def __init__(
        self, node_id: int, address_of: Callable[[int], tuple[str, int] | None],
        config: FetcherConfig, broker_epoch: Callable[[], int], now_ms: Callable[[], int],
        security: ClientSecurity | None = None,
    ) -> None:
        self.node_id = node_id
        self.security = security
        self.address_of = address_of
        self.config = config
        self.broker_epoch = broker_epoch
        self.now_ms = now_ms
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._closed = False

    def follow(self, partition: Partition) -> None:
        self.unfollow(partition)
        if self._closed or partition.leader_id < 0 or partition.leader_id == self.node_id:
            return
        leader_id = partition.leader_id
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            connection = BrokerConnection(
                lambda: self.address_of(leader_id),
                f"broker-{self.node_id}-fetcher-{leader_id}", self.config.socket_timeout_ms,
                self.security)
            fetcher = ReplicaFetcher(self.node_id, leader_id, connection, self.config,
                                     self.broker_epoch, self.now_ms)
            fetcher.task = asyncio.get_running_loop().create_task(
                fetcher.run(), name=f"replica-fetcher-{leader_id}")
            self.fetchers[leader_id] = fetcher
        fetcher.add(partition)

    def unfollow(self, partition: Partition) -> None:
        for leader_id, fetcher in list(self.fetchers.items()):
            fetcher.remove(partition)
            if not fetcher.states:
                self._stop(leader_id)

    def _stop(self, leader_id: int) -> None:
        fetcher = self.fetchers.pop(leader_id)
        if fetcher.task is not None:
            fetcher.task.cancel()
        fetcher.connection.close()

    async def close(self) -> None:
        self._closed = True
        tasks = [f.task for f in self.fetchers.values() if f.task is not None]
        for leader_id in list(self.fetchers):
            self._stop(leader_id)
        await asyncio.gather(*tasks, return_exceptions=True)
