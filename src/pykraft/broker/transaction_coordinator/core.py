"""The transaction coordinator's core: transactional ids and their transactions, sans I/O.

Theory of operation. The broker coordinates the transactional ids that hash to the
`__transaction_state` partitions it leads (`partition_for`, Java's String.hashCode as for
groups). For each such partition the core holds every id's `TxnMetadata`, rebuilt by replaying
the partition (`begin_load`, `load`, `complete_load`) and dropped on `unload`. Requests come in
as method calls with a reply token and `now_ms`; the core never blocks, reads a clock, touches
a log or sends a marker. What it wants done comes out of `ready()`:

- `replies`: answers to send now;
- `appends`: one `__transaction_state` record each, to append and commit; the shell calls
  `append_done(append_id, error, now_ms)` once the record is committed (or failed);
- `markers`: WriteTxnMarkers work (a COMMIT or ABORT control batch on each partition of a
  transaction); the shell calls `markers_done(...)` with each partition's outcome;
- `wake_at_ms`: call `tick(now_ms)` again no later than this.

As in Kafka's TransactionMetadata, a change is *prepared* (the id gets a pending transit,
and other requests on it get CONCURRENT_TRANSACTIONS) and applied to memory only once its
record is committed; a failed append drops the transit and the caller gets Kafka's mapped
error. The transitions are Kafka's (transaction version 0, the classic protocol):

    Empty/CompleteCommit/CompleteAbort --InitProducerId--> Empty (epoch + 1, or a new
        producer id once the epoch is exhausted)
    Ongoing --InitProducerId--> PrepareEpochFence (epoch + 1, in memory only) -> PrepareAbort
        (written with the bumped epoch) -> markers -> CompleteAbort; the InitProducerId gets
        CONCURRENT_TRANSACTIONS and its retry bumps the epoch again
    Empty/Complete*/Ongoing --AddPartitionsToTxn/AddOffsetsToTxn--> Ongoing
    Ongoing --EndTxn--> PrepareCommit/PrepareAbort (answered once written) -> WriteTxnMarkers
        on every partition -> CompleteCommit/CompleteAbort (partitions cleared)
    Ongoing past its timeout --tick--> fenced and aborted as above
    Empty/Complete* idle past transactional.id.expiration.ms --tick--> Dead (a tombstone)

A partition loaded with transactions in PrepareCommit/PrepareAbort sends their markers and
completes them; Ongoing ones stay until their client ends them or they time out. Markers
carry the coordinator epoch (the `__transaction_state` partition's leader epoch) so a
partition leader can refuse those of a deposed coordinator.

Invariants: an id has at most one pending transit; an Empty id has no partitions; the epoch of
an id never decreases for one producer id; markers go out only after PrepareX is committed.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.broker.group_coordinator.core import partition_for
from pykraft.broker.transaction_coordinator.records import (
    TransactionLogKey,
    TransactionLogValue,
    TransactionRecord,
    TxnStatus,
    group_partitions,
)
from pykraft.errors import invariant

log = logging.getLogger(__name__)

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "Append",
    "InitResult",
    "MarkerRequest",
    "Ready",
    "Reply",
    "TransactionCoordinator",
    "TxnConfig",
    "TxnDescription",
    "TxnListing",
    "TxnMetadata",
]

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
MAX_EPOCH: Final = 32767  # Short.MAX_VALUE
_NONE: Final = ErrorCode.none
TopicPartition = tuple[str, int]

# Kafka's TransactionStateManager maps a failed append of the log to what the client gets.
_APPEND_ERRORS: Final[dict[ErrorCode, ErrorCode]] = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.not_coordinator: ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available: ErrorCode.coordinator_not_available,
}

# Marker outcomes after which the partition is done (UNSUPPORTED_FOR_MESSAGE_FORMAT: the
# partition cannot take markers; Kafka drops it), and those that mean this coordinator was
# deposed (stop sending: the next coordinator completes the transaction from the log).
_MARKER_DONE: Final = frozenset({_NONE, ErrorCode.unsupported_for_message_format})
_MARKER_FENCED: Final = frozenset({ErrorCode.invalid_producer_epoch,
                                   ErrorCode.transaction_coordinator_fenced})


@dataclass(frozen=True, slots=True)
class TxnConfig:
    partition_count: int = 50  # transaction.state.log.num.partitions
    offsets_partition_count: int = 50  # offsets.topic.num.partitions (AddOffsetsToTxn)
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    abort_interval_ms: int = 10_000  # transaction.abort.timed.out.transaction.cleanup...
    remove_interval_ms: int = 3_600_000  # transaction.remove.expired.transaction.cleanup...
    marker_retry_ms: int = 100

    @classmethod
    def from_properties(cls, values: Mapping[str, str]) -> TxnConfig:
        def number(key: str, default: int) -> int:
            return int(values.get(key, default))
        return cls(
            partition_count=number("transaction.state.log.num.partitions", 50),
            offsets_partition_count=number("offsets.topic.num.partitions", 50),
            max_timeout_ms=number("transaction.max.timeout.ms", 900_000),
            id_expiration_ms=number("transactional.id.expiration.ms", 604_800_000),
            abort_interval_ms=number(
                "transaction.abort.timed.out.transaction.cleanup.interval.ms", 10_000),
            remove_interval_ms=number(
                "transaction.remove.expired.transaction.cleanup.interval.ms", 3_600_000),
        )


@dataclass(frozen=True, slots=True)
class Transit:
    """What an id becomes once its record is committed (Kafka's TxnTransitMetadata)."""

    producer_id: int
    previous_producer_id: int
    epoch: int
    last_epoch: int
    timeout_ms: int
    state: TxnStatus
    partitions: frozenset[TopicPartition]
    start_ms: int
    update_ms: int


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: TxnStatus
    start_ms: int
    update_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    last_epoch: int = NO_PRODUCER_EPOCH
    partitions: set[TopicPartition] = field(default_factory=set)
    pending: Transit | None = None

    def transit(self, **changes: Any) -> Transit:
        base = Transit(self.producer_id, self.previous_producer_id, self.epoch,
                       self.last_epoch, self.timeout_ms, self.state,
                       frozenset(self.partitions), self.start_ms, self.update_ms)
        return replace(base, **changes)

    def apply(self, transit: Transit) -> None:
        self.producer_id, self.previous_producer_id = (transit.producer_id,
                                                       transit.previous_producer_id)
        self.epoch, self.last_epoch = transit.epoch, transit.last_epoch
        self.timeout_ms, self.state = transit.timeout_ms, transit.state
        self.partitions = set(transit.partitions)
        self.start_ms, self.update_ms = transit.start_ms, transit.update_ms

    @property
    def epoch_exhausted(self) -> bool:
        return self.epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class Reply:
    token: int
    result: Any  # ErrorCode, InitResult, or dict[TopicPartition, ErrorCode]


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class Append:
    append_id: int
    partition: int
    record: TransactionRecord


@dataclass(frozen=True, slots=True)
class MarkerRequest:
    """Write a COMMIT (`commit`) or ABORT control batch with this producer id and epoch on
    each partition; `coordinator_epoch` fences markers of a deposed coordinator."""

    transactional_id: str
    producer_id: int
    epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class Ready:
    replies: tuple[Reply, ...]
    appends: tuple[Append, ...]
    markers: tuple[MarkerRequest, ...]
    wake_at_ms: int | None


@dataclass(frozen=True, slots=True)
class TxnDescription:
    transactional_id: str
    state: TxnStatus
    producer_id: int
    epoch: int
    timeout_ms: int
    start_ms: int
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class TxnListing:
    transactional_id: str
    producer_id: int
    state: TxnStatus


@dataclass(slots=True)
class _PartitionState:
    index: int
    leader_epoch: int
    loading: bool = True
    txns: dict[str, TxnMetadata] = field(default_factory=dict)


@dataclass(slots=True)
class _PendingAppend:
    partition: int
    leader_epoch: int
    transactional_id: str
    transit: Transit
    on_done: Callable[[ErrorCode, int], None]


@dataclass(slots=True)
class _MarkerWork:
    partition: int
    request: MarkerRequest
    remaining: set[TopicPartition]
    in_flight: bool = True


# ("abort", partition), ("expire", partition), ("markers", id), ("complete", partition, id)
TimerKey = tuple[Any, ...]


class TransactionCoordinator:
    """See the module docstring. `producer_ids()` hands out a fresh producer id, or None while
    no block of ids is available (the caller gets COORDINATOR_LOAD_IN_PROGRESS, as Kafka)."""

    def __init__(self, config: TxnConfig, producer_ids: Callable[[], int | None]) -> None:
        self.config = config
        self.producer_ids = producer_ids
        self.partitions: dict[int, _PartitionState] = {}
        self._replies: list[Reply] = []
        self._appends: list[Append] = []
        self._markers: list[MarkerRequest] = []
        self._pending_appends: dict[int, _PendingAppend] = {}
        self._marker_work: dict[str, _MarkerWork] = {}
        self._append_ids = itertools.count(1)
        self._deadlines: dict[TimerKey, int] = {}
        self._timers: list[tuple[int, int, TimerKey]] = []
        self._sequence = itertools.count()

    # -- outputs ------------------------------------------------------------------------

    def ready(self) -> Ready:
        """Everything decided since the last call; the caller must act on all of it."""
        ready = Ready(tuple(self._replies), tuple(self._appends), tuple(self._markers),
                      self.wake_at_ms())
        self._replies.clear()
        self._appends.clear()
        self._markers.clear()
        return ready

    def wake_at_ms(self) -> int | None:
        while self._timers:
            deadline, _, key = self._timers[0]
            if self._deadlines.get(key) == deadline:
                return deadline
            heapq.heappop(self._timers)
        return None

    def _reply(self, token: int, result: Any) -> None:
        self._replies.append(Reply(token, result))

    def _set_timer(self, key: TimerKey, deadline_ms: int) -> None:
        self._deadlines[key] = deadline_ms
        heapq.heappush(self._timers, (deadline_ms, next(self._sequence), key))

    # -- partitions -----------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.partition_count)

    def begin_load(self, partition: int, leader_epoch: int) -> None:
        self.unload(partition)
        self.partitions[partition] = _PartitionState(partition, leader_epoch)

    def load(self, partition: int, record: TransactionRecord) -> None:
        """Replay one record of the partition's log, in log order: the last value wins."""
        state = self.partitions[partition]
        invariant(state.loading, f"load into active __transaction_state-{partition}")
        txn_id, value = record.key.transactional_id, record.value
        if value is None:
            state.txns.pop(txn_id, None)
            return
        txn = TxnMetadata(txn_id, value.producer_id, value.producer_epoch,
                          value.transaction_timeout_ms, value.status,
                          value.transaction_start_timestamp_ms,
                          value.transaction_last_update_timestamp_ms,
                          previous_producer_id=value.previous_producer_id,
                          partitions=set(value.partitions()))
        state.txns[txn_id] = txn

    def complete_load(self, partition: int, now_ms: int) -> None:
        """The partition is replayed: serve it, and finish the transactions it left in
        PrepareCommit/PrepareAbort (their markers may not all have been written)."""
        state = self.partitions[partition]
        state.loading = False
        for txn in state.txns.values():
            if txn.state in (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT):
                self._send_markers(state, txn, now_ms)
        self._set_timer(("abort", partition), now_ms + self.config.abort_interval_ms)
        self._set_timer(("expire", partition), now_ms + self.config.remove_interval_ms)

    def unload(self, partition: int) -> None:
        """This broker no longer leads `partition`: forget it. Appends in flight are
        answered NOT_COORDINATOR when they complete; marker work stops."""
        state = self.partitions.pop(partition, None)
        if state is None:
            return
        for txn_id in list(state.txns):
            self._marker_work.pop(txn_id, None)
            self._deadlines.pop(("markers", txn_id), None)
        for key in [key for key in self._deadlines
                    if key[0] in ("abort", "expire", "complete") and key[1] == partition]:
            del self._deadlines[key]

    def leader_epoch(self, partition: int) -> int | None:
        state = self.partitions.get(partition)
        return None if state is None else state.leader_epoch

    def is_loading(self, partition: int) -> bool:
        state = self.partitions.get(partition)
        return state is not None and state.loading

    def _active(self, txn_id: str) -> tuple[_PartitionState | None, ErrorCode]:
        state = self.partitions.get(self.partition_for(txn_id))
        if state is None:
            return None, ErrorCode.not_coordinator
        if state.loading:
            return None, ErrorCode.coordinator_load_in_progress
        return state, _NONE

    def metadata(self, txn_id: str) -> TxnMetadata | None:
        state = self.partitions.get(self.partition_for(txn_id))
        return None if state is None else state.txns.get(txn_id)

    # -- appends ----------------------------------------------------------------------------

    def _append(self, state: _PartitionState, txn: TxnMetadata, transit: Transit,
                on_done: Callable[[ErrorCode, int], None]) -> None:
        """Prepare `transit` on `txn` and ask for its record to be written; `on_done(error,
        now_ms)` runs once it is committed (error NONE, memory updated) or failed."""
        invariant(txn.pending is None, f"{txn.transactional_id}: two pending transits")
        txn.pending = transit
        append_id = next(self._append_ids)
        self._pending_appends[append_id] = _PendingAppend(
            state.index, state.leader_epoch, txn.transactional_id, transit, on_done)
        self._appends.append(Append(append_id, state.index,
                                    _record(txn.transactional_id, transit)))

    def append_done(self, append_id: int, error: ErrorCode, now_ms: int) -> None:
        """The record of `append_id` is committed (NONE) or could not be."""
        pending = self._pending_appends.pop(append_id, None)
        if pending is None:
            return
        state = self.partitions.get(pending.partition)
        txn = None if state is None else state.txns.get(pending.transactional_id)
        if (state is None or state.leader_epoch != pending.leader_epoch or txn is None
                or txn.pending is not pending.transit):
            pending.on_done(ErrorCode.not_coordinator, now_ms)  # deposed meanwhile
            return
        txn.pending = None
        if error is not _NONE:
            log.warning("__transaction_state-%d: writing %s for %r failed: %s",
                        pending.partition, pending.transit.state.kafka_name,
                        pending.transactional_id, error.name)
            pending.on_done(_APPEND_ERRORS.get(error, ErrorCode.unknown_server_error), now_ms)
            return
        if pending.transit.state is TxnStatus.DEAD:
            del state.txns[txn.transactional_id]
        else:
            txn.apply(pending.transit)
        pending.on_done(_NONE, now_ms)

    # -- InitProducerId ---------------------------------------------------------------------

    def init_producer_id(self, token: int, txn_id: str, timeout_ms: int,
                         expected: tuple[int, int] | None, now_ms: int) -> None:
        """InitProducerId with a transactional id; `expected` is the request's (producer id,
        epoch) when the client sent one (KIP-360), else None. Replies an InitResult."""
        def fail(error: ErrorCode) -> None:
            self._reply(token, InitResult(error))

        if not txn_id:
            fail(ErrorCode.invalid_request)
            return
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            fail(ErrorCode.invalid_transaction_timeout)
            return
        state, error = self._active(txn_id)
        if state is None:
            fail(error)
            return
        txn = state.txns.get(txn_id)
        if txn is None:
            producer_id = self.producer_ids()
            if producer_id is None:
                fail(ErrorCode.coordinator_load_in_progress)
                return
            txn = TxnMetadata(txn_id, producer_id, NO_PRODUCER_EPOCH, timeout_ms,
                              TxnStatus.EMPTY, -1, now_ms)
            state.txns[txn_id] = txn
        if txn.pending is not None:
            fail(ErrorCode.concurrent_transactions)
            return
        if expected is not None and not _valid_expected(txn, expected):
            fail(ErrorCode.producer_fenced)
            return
        if txn.state in (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT):
            fail(ErrorCode.concurrent_transactions)
            return
        if txn.state is TxnStatus.ONGOING:
            # Abort the open transaction under a bumped epoch (fencing its producer); the
            # client retries after CONCURRENT_TRANSACTIONS and gets a further bump.
            def fenced(error: ErrorCode, _now: int) -> None:
                fail(ErrorCode.concurrent_transactions if error is _NONE else error)
            self._fence_and_abort(state, txn, now_ms, fenced)
            return
        invariant(txn.state in (TxnStatus.EMPTY, TxnStatus.COMPLETE_COMMIT,
                                TxnStatus.COMPLETE_ABORT), f"{txn_id}: init in {txn.state}")
        if txn.epoch_exhausted and (expected is None or expected[1] == txn.epoch):
            producer_id = self.producer_ids()
            if producer_id is None:
                fail(ErrorCode.coordinator_load_in_progress)
                return
            transit = txn.transit(
                producer_id=producer_id, previous_producer_id=txn.producer_id, epoch=0,
                last_epoch=txn.epoch if expected is not None else NO_PRODUCER_EPOCH,
                timeout_ms=timeout_ms, state=TxnStatus.EMPTY, partitions=frozenset(),
                start_ms=-1, update_ms=now_ms)
        else:
            bumped = _bump_epoch(txn, None if expected is None else expected[1])
            if bumped is None:
                fail(ErrorCode.producer_fenced)
                return
            epoch, last_epoch = bumped
            transit = txn.transit(epoch=epoch, last_epoch=last_epoch, timeout_ms=timeout_ms,
                                  state=TxnStatus.EMPTY, partitions=frozenset(),
                                  start_ms=-1, update_ms=now_ms)

        def initialised(error: ErrorCode, _now: int) -> None:
            if error is _NONE:
                self._reply(token, InitResult(_NONE, transit.producer_id, transit.epoch))
            else:
                fail(error)
        self._append(state, txn, transit, initialised)

    # -- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------

    def _check_producer(self, txn_id: str, producer_id: int, epoch: int
                        ) -> tuple[_PartitionState | None, TxnMetadata | None, ErrorCode]:
        """The checks every request of a producer in a transaction goes through."""
        if not txn_id:
            return None, None, ErrorCode.invalid_request
        state, error = self._active(txn_id)
        if state is None:
            return None, None, error
        txn = state.txns.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            return state, txn, ErrorCode.invalid_producer_id_mapping
        if txn.epoch != epoch:
            return state, txn, ErrorCode.producer_fenced
        return state, txn, _NONE

    def add_partitions(self, token: int, txn_id: str, producer_id: int, epoch: int,
                       partitions: Iterable[TopicPartition], now_ms: int) -> None:
        """AddPartitionsToTxn (client form, v0-v3): replies one ErrorCode for all."""
        wanted = frozenset(partitions)
        state, txn, error = self._check_producer(txn_id, producer_id, epoch)
        if error is not _NONE:
            self._reply(token, error)
            return
        assert state is not None and txn is not None
        if txn.pending is not None or txn.state in (TxnStatus.PREPARE_COMMIT,
                                                    TxnStatus.PREPARE_ABORT):
            self._reply(token, ErrorCode.concurrent_transactions)
            return
        if txn.state is TxnStatus.ONGOING and wanted <= txn.partitions:
            self._reply(token, _NONE)
            return
        starting = txn.state is not TxnStatus.ONGOING
        transit = txn.transit(state=TxnStatus.ONGOING,
                              partitions=frozenset(txn.partitions) | wanted,
                              start_ms=now_ms if starting else txn.start_ms, update_ms=now_ms)
        self._append(state, txn, transit, lambda error, _now: self._reply(token, error))

    def add_offsets(self, token: int, txn_id: str, producer_id: int, epoch: int,
                    group_id: str, now_ms: int) -> None:
        """AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the
        transaction (its TxnOffsetCommit then goes to the group coordinator)."""
        partition = partition_for(group_id, self.config.offsets_partition_count)
        self.add_partitions(token, txn_id, producer_id, epoch,
                            [("__consumer_offsets", partition)], now_ms)

    def verify_partitions(self, txn_id: str, producer_id: int, epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition,
                                                                        ErrorCode]:
        """AddPartitionsToTxn v4+ with verify_only (a partition leader asking whether a
        transactional produce belongs to an ongoing transaction): nothing is written."""
        wanted = list(partitions)
        state, txn, error = self._check_producer(txn_id, producer_id, epoch)
        if error is _NONE and txn is not None and txn.state in (TxnStatus.PREPARE_COMMIT,
                                                                 TxnStatus.PREPARE_ABORT):
            error = ErrorCode.concurrent_transactions
        if error is not _NONE or txn is None:
            return {each: error for each in wanted}
        return {each: _NONE if each in txn.partitions else ErrorCode.invalid_txn_state
                for each in wanted}

    # -- EndTxn -------------------------------------------------------------------------------

    def end_txn(self, token: int, txn_id: str, producer_id: int, epoch: int, commit: bool,
                now_ms: int) -> None:
        """EndTxn from a client: replies an ErrorCode once PrepareCommit/PrepareAbort is
        written (the markers and CompleteX follow), or at once on error or a retry."""
        state, txn, error = self._check_producer(txn_id, producer_id, epoch)
        if error is not _NONE:
            self._reply(token, error)
            return
        assert state is not None and txn is not None
        if txn.pending is not None or txn_id in self._marker_work:
            # Kafka holds the pending CompleteX while the markers are written
            self._reply(token, ErrorCode.concurrent_transactions)
            return
        self._end(state, txn, commit, now_ms, lambda error, _now: self._reply(token, error))

    def _end(self, state: _PartitionState, txn: TxnMetadata, commit: bool, now_ms: int,
             on_done: Callable[[ErrorCode, int], None]) -> None:
        done_state = TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT
        prepare_state = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
        if txn.state is TxnStatus.ONGOING:
            transit = txn.transit(state=prepare_state, update_ms=now_ms)

            def prepared(error: ErrorCode, now: int) -> None:
                on_done(error, now)
                if error is _NONE:
                    self._send_markers(state, txn, now)
            self._append(state, txn, transit, prepared)
        elif txn.state is done_state:
            on_done(_NONE, now_ms)  # a retry of an EndTxn that completed
        elif txn.state is prepare_state:
            on_done(ErrorCode.concurrent_transactions, now_ms)
        else:
            log.info("%r: EndTxn(%s) in state %s", txn.transactional_id,
                     "commit" if commit else "abort", txn.state.kafka_name)
            on_done(ErrorCode.invalid_txn_state, now_ms)

    def _fence_and_abort(self, state: _PartitionState, txn: TxnMetadata, now_ms: int,
                         on_done: Callable[[ErrorCode, int], None]) -> None:
        """Kafka's PrepareEpochFence: abort the ongoing transaction under a bumped epoch. The
        bump is memory only until PrepareAbort is written, so a failed write bumps nothing
        and the next fence bumps from the same epoch."""
        invariant(txn.state is TxnStatus.ONGOING, "only an ongoing transaction is fenced")
        if txn.epoch >= MAX_EPOCH:
            on_done(ErrorCode.unknown_server_error, now_ms)
            return
        transit = txn.transit(epoch=txn.epoch + 1, last_epoch=NO_PRODUCER_EPOCH,
                              state=TxnStatus.PREPARE_ABORT, update_ms=now_ms)

        def prepared(error: ErrorCode, now: int) -> None:
            on_done(error, now)
            if error is _NONE:
                self._send_markers(state, txn, now)
        self._append(state, txn, transit, prepared)

    # -- markers ----------------------------------------------------------------------------

    def _send_markers(self, state: _PartitionState, txn: TxnMetadata, now_ms: int) -> None:
        commit = txn.state is TxnStatus.PREPARE_COMMIT
        request = MarkerRequest(txn.transactional_id, txn.producer_id, txn.epoch, commit,
                                state.leader_epoch, frozenset(txn.partitions))
        if not request.partitions:
            self._complete(state, txn, now_ms)
            return
        self._marker_work[txn.transactional_id] = _MarkerWork(
            state.index, request, set(request.partitions))
        self._markers.append(request)

    def markers_done(self, txn_id: str, coordinator_epoch: int,
                     results: Mapping[TopicPartition, ErrorCode], now_ms: int) -> None:
        """The outcome of a MarkerRequest's partitions (all or some of them). Partitions of
        a deleted topic are to be reported NONE. Retriable errors are retried after
        `marker_retry_ms`; a fenced coordinator stops sending."""
        work = self._marker_work.get(txn_id)
        if work is None or work.request.coordinator_epoch != coordinator_epoch:
            return
        work.in_flight = False
        for partition, error in results.items():
            if error in _MARKER_DONE:
                work.remaining.discard(partition)
            elif error in _MARKER_FENCED:
                log.warning("%r: marker on %s refused (%s): coordinator fenced", txn_id,
                            partition, error.name)
                del self._marker_work[txn_id]
                return
        state = self.partitions.get(work.partition)
        txn = None if state is None else state.txns.get(txn_id)
        if state is None or txn is None:
            del self._marker_work[txn_id]
            return
        if not work.remaining:
            del self._marker_work[txn_id]
            self._deadlines.pop(("markers", txn_id), None)
            self._complete(state, txn, now_ms)
        else:
            self._set_timer(("markers", txn_id), now_ms + self.config.marker_retry_ms)

    def _retry_markers(self, txn_id: str) -> None:
        work = self._marker_work.get(txn_id)
        if work is None or work.in_flight or not work.remaining:
            return
        work.in_flight = True
        self._markers.append(replace(work.request, partitions=frozenset(work.remaining)))

    def _complete(self, state: _PartitionState, txn: TxnMetadata, now_ms: int) -> None:
        """Every marker is written: CompleteCommit/CompleteAbort, partitions cleared."""
        commit = txn.state is TxnStatus.PREPARE_COMMIT
        transit = txn.transit(
            state=TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT,
            partitions=frozenset(), update_ms=now_ms)

        def completed(error: ErrorCode, now: int) -> None:
            if error is not _NONE and error is not ErrorCode.not_coordinator:
                # The markers are written; only the record is missing: write it again later
                self._set_timer(("complete", state.index, txn.transactional_id),
                                now + self.config.marker_retry_ms)
        self._append(state, txn, transit, completed)

    def _retry_complete(self, partition: int, txn_id: str, now_ms: int) -> None:
        state = self.partitions.get(partition)
        txn = None if state is None else state.txns.get(txn_id)
        if (state is not None and txn is not None and txn.pending is None
                and txn.state in (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT)):
            self._complete(state, txn, now_ms)

    # -- time -------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        while self._timers and self._timers[0][0] <= now_ms:
            deadline, _, key = heapq.heappop(self._timers)
            if self._deadlines.get(key) != deadline:
                continue
            del self._deadlines[key]
            if key[0] == "markers":
                self._retry_markers(key[1])
            elif key[0] == "complete":
                self._retry_complete(key[1], key[2], now_ms)
            elif key[0] == "abort":
                self._abort_timed_out(key[1], now_ms)
                self._set_timer(key, now_ms + self.config.abort_interval_ms)
            elif key[0] == "expire":
                self._expire_ids(key[1], now_ms)
                self._set_timer(key, now_ms + self.config.remove_interval_ms)

    def _abort_timed_out(self, partition: int, now_ms: int) -> None:
        state = self.partitions.get(partition)
        if state is None or state.loading:
            return
        for txn in list(state.txns.values()):
            if (txn.state is TxnStatus.ONGOING and txn.pending is None
                    and txn.start_ms + txn.timeout_ms < now_ms):
                log.info("%r: transaction of producer %d epoch %d open past its timeout of "
                         "%d ms: aborting", txn.transactional_id, txn.producer_id, txn.epoch,
                         txn.timeout_ms)
                self._fence_and_abort(state, txn, now_ms, lambda error, now: None)

    def _expire_ids(self, partition: int, now_ms: int) -> None:
        state = self.partitions.get(partition)
        if state is None or state.loading:
            return
        for txn in list(state.txns.values()):
            if (txn.state in (TxnStatus.EMPTY, TxnStatus.COMPLETE_COMMIT,
                              TxnStatus.COMPLETE_ABORT) and txn.pending is None
                    and txn.update_ms <= now_ms - self.config.id_expiration_ms):
                log.info("%r: idle since %d: expired", txn.transactional_id, txn.update_ms)
                self._append(state, txn, txn.transit(state=TxnStatus.DEAD, update_ms=now_ms),
                             lambda error, now: None)

    # -- DescribeTransactions / ListTransactions -------------------------------------------

    def describe(self, txn_id: str) -> TxnDescription | ErrorCode:
        state, error = self._active(txn_id)
        if state is None:
            return error
        txn = state.txns.get(txn_id)
        if txn is None or txn.state is TxnStatus.DEAD:
            return ErrorCode.transactional_id_not_found
        return TxnDescription(txn_id, txn.state, txn.producer_id, txn.epoch, txn.timeout_ms,
                              txn.start_ms, frozenset(txn.partitions))

    def list_transactions(self, states: Iterable[str], producer_ids: Iterable[int],
                          min_duration_ms: int, now_ms: int
                          ) -> tuple[ErrorCode, list[TxnListing], list[str]]:
        """ListTransactions: (error, listings, unknown state filters). States are Kafka's
        names; `min_duration_ms` < 0 means no duration filter (KIP-994)."""
        names = {status.kafka_name: status for status in TxnStatus}
        wanted_states = set(states)
        unknown = sorted(each for each in wanted_states if each not in names)
        state_filter = {names[each] for each in wanted_states if each in names}
        if wanted_states and not state_filter:
            return _NONE, [], unknown
        pid_filter = set(producer_ids)
        error = _NONE
        listings = []
        for partition in self.partitions.values():
            if partition.loading:
                error = ErrorCode.coordinator_load_in_progress
                continue
            for txn in partition.txns.values():
                if state_filter and txn.state not in state_filter:
                    continue
                if pid_filter and txn.producer_id not in pid_filter:
                    continue
                if min_duration_ms >= 0 and now_ms - txn.start_ms < min_duration_ms:
                    continue
                listings.append(TxnListing(txn.transactional_id, txn.producer_id, txn.state))
        listings.sort(key=lambda each: each.transactional_id)
        return error, listings, unknown


def _valid_expected(txn: TxnMetadata, expected: tuple[int, int]) -> bool:
    """KIP-360: a producer recovering its id is let through when the id was just created,
    when it names the current producer id (its epoch is checked by the bump), or when it
    names the previous one with an exhausted epoch (a retry after a rotation)."""
    producer_id, epoch = expected
    return (txn.epoch == NO_PRODUCER_EPOCH or producer_id == txn.producer_id
            or (producer_id == txn.previous_producer_id and epoch >= MAX_EPOCH - 1))


def _bump_epoch(txn: TxnMetadata, expected_epoch: int | None) -> tuple[int, int] | None:
    """(epoch, last epoch) after InitProducerId, or None when the producer is fenced."""
    bumped = txn.epoch + 1
    if expected_epoch is None:
        return bumped, NO_PRODUCER_EPOCH
    if txn.epoch == NO_PRODUCER_EPOCH or expected_epoch == txn.epoch:
        return bumped, txn.epoch
    if expected_epoch == txn.last_epoch:
        return txn.epoch, txn.last_epoch  # a retry of a bump whose answer was lost
    return None


def _record(txn_id: str, transit: Transit) -> TransactionRecord:
    key = TransactionLogKey(transactional_id=txn_id)
    if transit.state is TxnStatus.DEAD:
        return TransactionRecord(key, None)
    invariant(transit.state is not TxnStatus.PREPARE_EPOCH_FENCE,
              "PrepareEpochFence is never written")
    invariant(transit.state is not TxnStatus.EMPTY or not transit.partitions,
              "an Empty transaction has no partitions")
    value = TransactionLogValue(
        producer_id=transit.producer_id, producer_epoch=transit.epoch,
        transaction_timeout_ms=transit.timeout_ms, transaction_status=transit.state,
        transaction_partitions=(None if transit.state is TxnStatus.EMPTY
                                else group_partitions(transit.partitions)),
        transaction_last_update_timestamp_ms=transit.update_ms,
        transaction_start_timestamp_ms=transit.start_ms)
    return TransactionRecord(key, value)
