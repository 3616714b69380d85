"""The leader epoch cache: at which offset each leader epoch began writing this log.

Followers use it to find where their log diverges from the leader's (OffsetsForLeaderEpoch,
KIP-101/279): the leader answers "epoch E ended at offset X" and the follower truncates to X.
It is persisted as `leader-epoch-checkpoint` in the partition directory, in the offset
checkpoint layout with `epoch startOffset` entries, rewritten atomically: a truncation at
once, a new epoch (`assign`) at the log's next flush or close.

Invariants: entries are sorted by epoch and by start offset, both strictly increasing. A new
entry that breaks the order wins: every entry with an epoch or start offset at or above the
new one is dropped first (a new leader overwrote that history).

The entries in memory are the truth; the file follows. A new epoch is only noted (the file
is stale): a broker that becomes leader of 20,000 partitions at once would otherwise write
20,000 files on its event loop, about 0.3 ms each here. So is a change whose file cannot be
written (a full disk), so that the append or leadership change that made it goes on. A
stale file is written by the next truncation, by the log's close (`write_if_stale`), or
by `sync`, which the log's flush calls before it moves the recovery point: entries for data
below the recovery point are always in the file. A file left behind (stale) is repaired at
open: Log.open drops its entries past the log end and, after a crash, those from where
recovery starts, whose batches then assign their epochs again. So a stale file may lack
entries or hold extra ones past the recovery point, never differ below it.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final, NamedTuple

from pykraft.errors import KafkaStorageError
from pykraft.storage.checkpoint import (
    fsync_directory,
    fsync_file,
    read_checkpoint,
    write_checkpoint,
)

__all__ = ["EpochEntry", "LeaderEpochCache", "LEADER_EPOCH_CHECKPOINT_FILE", "UNDEFINED_EPOCH"]

LEADER_EPOCH_CHECKPOINT_FILE: Final = "leader-epoch-checkpoint"
UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1

log = logging.getLogger(__name__)


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    # one per replica; the path is held as its directory, a str the caller may share (the
    # log's), and the file's name, None for the usual one: a whole path was 130 B a replica
    __slots__ = ("_dir", "_file", "_entries", "_unsynced", "_stale", "_failed", "_on_disk")

    def __init__(self, path: Path, entries: Sequence[EpochEntry] = (), *,
                 directory: str | None = None, absent: bool = False) -> None:
        """The cache kept at `path`; given `directory`, at its usual name there (`path` is
        then not read). `absent`: the caller knows no file is there (a listing of the
        directory without it); otherwise what the file holds is unknown until written."""
        if directory is None:
            directory, name = os.path.split(os.fspath(path))
            self._file: str | None = None if name == LEADER_EPOCH_CHECKPOINT_FILE else name
        else:
            self._file = None
        self._dir = directory
        # a tuple, made anew at each (rare) change: an idle replica's is the shared empty
        # one, where a list was one more object per replica for the garbage collector
        self._entries: tuple[EpochEntry, ...] = tuple(entries)
        self._unsynced = False  # written since the last sync()
        self._stale = False  # the file lacks a change (a new epoch, or a failed write)
        self._failed = False  # its last write failed (warned once)
        # what the file holds, as last read or written (None: not known)
        self._on_disk: tuple[EpochEntry, ...] | None = () if absent else None

    @classmethod
    def load(cls, path: Path, *, directory: str | None = None) -> LeaderEpochCache:
        entries = []
        for epoch, start_offset in read_checkpoint(path, 2):
            try:
                entries.append(EpochEntry(int(epoch), int(start_offset)))
            except ValueError:
                raise KafkaStorageError(f"{path}: malformed entry {epoch} {start_offset}") from None
        for before, after in zip(entries, entries[1:], strict=False):
            if not (before.epoch < after.epoch and before.start_offset < after.start_offset):
                raise KafkaStorageError(f"{path}: entries out of order: {before} then {after}")
        cache = cls(path, entries, directory=directory)
        cache._on_disk = cache._entries
        return cache

    @property
    def path(self) -> Path:
        return Path(self._dir, self._file or LEADER_EPOCH_CHECKPOINT_FILE)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._entries

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` began at `start_offset`; return whether anything changed."""
        if epoch < 0 or start_offset < 0:
            return False
        latest = self.latest_entry
        if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
            return False  # the same epoch continuing
        if latest is not None and latest.epoch > epoch and latest.start_offset <= start_offset:
            return False  # an old epoch's batch after a newer epoch began: nothing to learn
        self._entries = (
            *(entry for entry in self._entries
              if entry.epoch < epoch and entry.start_offset < start_offset),
            EpochEntry(epoch, start_offset),
        )
        self._stale = True  # written by the log's next flush (sync), or a truncation
        return True

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote `offset`, if known."""
        starts = [entry.start_offset for entry in self._entries]
        slot = bisect.bisect_right(starts, offset) - 1
        return self._entries[slot].epoch if slot >= 0 else None

    def end_offset_for_epoch(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetsForLeaderEpoch answers it.

        - the latest epoch ends at the log end offset;
        - an older epoch E ends where the first epoch after it starts, and is reported as the
          largest known epoch <= E (the follower may ask for an epoch this log never had);
        - an epoch older than everything known ends where the first known epoch starts;
        - an unknown newer epoch, or UNDEFINED_EPOCH, gives (-1, -1).
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1].epoch:
            return requested_epoch, log_end_offset
        epochs = [entry.epoch for entry in self._entries]
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        end_offset = self._entries[higher].start_offset
        if higher == 0:
            return requested_epoch, end_offset
        return self._entries[higher - 1].epoch, end_offset

    def truncate_from_end(self, end_offset: int, *, write: bool = True) -> None:
        """Forget epochs that start at or after `end_offset` (the log was truncated there).
        With `write` false only the entries change and the file is stale (Log.open, which
        repairs a stale file: see the module's doc)."""
        kept = tuple(entry for entry in self._entries if entry.start_offset < end_offset)
        if len(kept) != len(self._entries):
            self._entries = kept
            if write:
                self.flush()
            else:
                self._stale = True

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget history before `start_offset`; the epoch covering it now starts there."""
        covering = [entry for entry in self._entries if entry.start_offset <= start_offset]
        if not covering:
            return
        first = EpochEntry(covering[-1].epoch, start_offset)
        kept = (first, *(e for e in self._entries if e.start_offset > start_offset))
        if kept != self._entries:
            self._entries = kept
            self.flush()

    def clear(self) -> None:
        if self._entries or not self.path.exists():
            self._entries = ()
            self.flush()

    def flush(self) -> None:
        """Write the checkpoint file, without fsync: Kafka fsyncs it at `assign`, on one of
        many request threads; on one event loop an fsync per partition held a broker for
        minutes when 20,000 leaderships moved to it. The log's flush makes it durable
        (`sync`); recovery after an unclean stop assigns the recovered batches' epochs
        again, and rebuilds a torn file from the whole log (Log.open). See
        docs/deviations.md."""
        try:
            write_checkpoint(self.path, self._entries, sync=False)
        except OSError as error:
            if not self._failed:  # once until it is written again, not at every change
                log.warning("cannot write %s (%s); it is written again at the next flush",
                            self.path, error)
            self._stale = self._failed = True
            return
        self._stale = self._failed = False
        self._unsynced = True
        self._on_disk = self._entries

    def write_if_stale(self, log_end_offset: int | None = None) -> None:
        """Write the file if it lacks a change: before the log's files are closed, and so
        copied or read again (a move between log dirs). A failure is warned about and
        left for the next flush, as in `flush`. Given the log's end offset, not when the
        file already holds every entry that starts below it: the next open (Log.open)
        drops the entries at or past the log end, so the file would read the same.
        A new, empty log's first epoch starts at its end: closing 1,000,000 of them
        wrote a file each, some 150 µs."""
        if self._stale and not self._same_below(log_end_offset):
            self.flush()

    def sync(self, log_end_offset: int | None = None) -> None:
        """fsync what `flush` wrote, writing it first if it is stale (a new epoch, or a
        failed write), raising if that write fails: the caller must not count the file as
        durable. Given the log's end offset, a change only at or past it is not written
        (as in `write_if_stale`): the log's flush at every clean shutdown wrote and
        fsynced the file, and its directory, for each new, empty log (some 200 µs a log)."""
        if self._stale and not self._same_below(log_end_offset):
            write_checkpoint(self.path, self._entries, sync=False)
            self._stale, self._failed, self._unsynced = False, False, True
            self._on_disk = self._entries
        if self._unsynced:
            fsync_file(self.path)
            fsync_directory(self.path.parent)
            self._unsynced = False

    def _same_below(self, log_end_offset: int | None) -> bool:
        """Whether the file is known to hold the entries that start below the log end as
        they are here (the next open keeps only those)."""
        return log_end_offset is not None and self._on_disk is not None and (
            _below(self._entries, log_end_offset) == _below(self._on_disk, log_end_offset))


def _below(entries: tuple[EpochEntry, ...], offset: int) -> tuple[EpochEntry, ...]:
    return tuple(entry for entry in entries if entry.start_offset < offset)
