"""A partition's transactions, for read_committed: the open ones (their first offsets give
the last stable offset) and the aborted ones (Fetch returns those overlapping what it reads,
so a read_committed client drops their records).

Kafka keeps the open transactions in its producer state and the aborted ones in `.txnindex`
files beside each segment. This is the same information held in memory by the log: fed each
appended batch (`on_batch`), built on first use by one pass over the log's batch headers
(control batches are the only ones read), and dropped by the log when it is truncated, to
be built again. An aborted transaction is recorded as Kafka's AbortedTxn: producer id, first
offset, last offset (its ABORT marker) and the last stable offset when the marker was
written.

A transactional data batch opens a transaction for its producer if none is open; a COMMIT
or ABORT control batch of that producer closes it. The first unstable offset is the smallest
first offset of the open transactions.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from pykraft.errors import CorruptRecord
from pykraft.records.batch import BatchHeader
from pykraft.records.record import ControlRecordType, iter_records, read_control_record_type

__all__ = ["AbortedTxn", "TxnState"]


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


@dataclass(slots=True)
class TxnState:
    ongoing: dict[int, int] = field(default_factory=dict)  # producer id -> first offset
    aborted: list[AbortedTxn] = field(default_factory=list)  # by last offset
    _last_offsets: list[int] = field(default_factory=list)

    def on_batch(self, header: BatchHeader, read: Callable[[], bytes | bytearray]) -> None:
        """One batch appended at its offsets; `read()` gives its bytes (asked for control
        batches only)."""
        if not header.is_transactional or header.producer_id < 0:
            return
        if not header.is_control:
            self.ongoing.setdefault(header.producer_id, header.base_offset)
            return
        try:
            record = next(iter(iter_records(read())), None)
            kind = read_control_record_type(None if record is None else record.key)
        except CorruptRecord:
            return
        if kind not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            return
        first = self.ongoing.pop(header.producer_id, None)
        if kind is ControlRecordType.ABORT and first is not None:
            stable = self.first_unstable_offset()
            self.aborted.append(AbortedTxn(header.producer_id, first, header.base_offset,
                                           header.base_offset if stable is None else stable))
            self._last_offsets.append(header.base_offset)

    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing.values(), default=None)

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with data in [start, end): their last offset (the
        marker) is at or past `start` and their first offset before `end`."""
        index = bisect.bisect_left(self._last_offsets, start)
        return [each for each in self.aborted[index:] if each.first_offset < end]
