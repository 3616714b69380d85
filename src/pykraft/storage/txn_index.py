"""A partition's transactions, for read_committed: the open ones (their first offsets give
the last stable offset) and the aborted ones (Fetch returns those overlapping what it reads,
so a read_committed client drops their records).

In memory (`TxnState`): fed each appended batch (`on_batch`), built on first use by one pass
over the log's batch headers (control batches are the only ones read), and dropped by the
log when it is truncated, to be built again. An aborted transaction is recorded as Kafka's
AbortedTxn: producer id, first offset, last offset (its ABORT marker) and the last stable
offset once the marker is written (the first offset of the oldest other open transaction,
else the marker's offset + 1).

On disk, as Kafka: each segment's aborted transactions are also appended to its
`<base offset>.txnindex` (created with the first entry) when their ABORT marker is written
there: entries of 34 bytes (version 0, producer id, first offset, last offset, last stable
offset). `Log` keeps the files right across truncation, unclean restarts and compaction;
fetches are served from the in-memory state.

A transactional data batch opens a transaction for its producer if none is open; a COMMIT
or ABORT control batch of that producer closes it. The first unstable offset is the smallest
first offset of the open transactions.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pykraft.records.batch import BatchHeader
from pykraft.records.record import ControlRecordType, marker_type
from pykraft.storage.checkpoint import write_atomically

__all__ = ["AbortedTxn", "TxnState", "append_entries", "read_entries", "write_entries"]

TXN_INDEX_VERSION: Final = 0
_ENTRY: Final = struct.Struct(">hqqqq")  # version, producer id, first, last, last stable


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
        kind = marker_type(read())
        if kind is None:
            return
        first = self.ongoing.pop(header.producer_id, None)
        if kind is ControlRecordType.ABORT and first is not None:
            stable = self.first_unstable_offset()
            self.aborted.append(AbortedTxn(header.producer_id, first, header.base_offset,
                                           header.base_offset + 1 if stable is None else stable))
            self._last_offsets.append(header.base_offset)

    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing.values(), default=None)

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with data in [start, end): their last offset (the
        marker) is at or past `start` and their first offset before `end`."""
        index = bisect.bisect_left(self._last_offsets, start)
        return [each for each in self.aborted[index:] if each.first_offset < end]

    def aborted_from(self, offset: int) -> list[AbortedTxn]:
        """The aborted transactions whose marker is at or after `offset`."""
        return self.aborted[bisect.bisect_left(self._last_offsets, offset):]


# -- `.txnindex` files --------------------------------------------------------------------------

def _encode(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(_ENTRY.pack(TXN_INDEX_VERSION, each.producer_id, each.first_offset,
                                each.last_offset, each.last_stable_offset)
                    for each in entries)


def append_entries(path: Path, entries: Iterable[AbortedTxn]) -> None:
    """Append entries to a segment's transaction index (created if missing)."""
    data = _encode(entries)
    if data:
        with open(path, "ab") as stream:
            stream.write(data)


def read_entries(path: Path) -> list[AbortedTxn]:
    """A transaction index's entries ([] if there is no file); a torn last entry is left
    out."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    whole = len(data) - len(data) % _ENTRY.size
    return [AbortedTxn(pid, first, last, stable)
            for _, pid, first, last, stable in _ENTRY.iter_unpack(data[:whole])]


def write_entries(path: Path, entries: Iterable[AbortedTxn]) -> None:
    """Replace a transaction index by `entries`; no entries, no file."""
    data = _encode(entries)
    if data:
        write_atomically(path, data, sync=False)
    else:
        path.unlink(missing_ok=True)
