"""Loading a partition directory: leftovers of interrupted operations, then recovery.

Leftover rules (Kafka's, from its log loader):

- `*.deleted`: a deletion that was scheduled but not finished: delete the file.
- `*.cleaned`: output of a compaction that never reached the swap step: delete it, and any
  `*.swap` whose base offset is at or above the smallest cleaned base offset (that swap
  belongs to the same unfinished compaction).
- other `*.log.swap`: a finished compaction or split whose rename was interrupted. The swap
  replaces the segments whose base offsets fall in its offset range, and is renamed into
  place; its indexes are rebuilt (index `*.swap` files are always deleted).
- index files without their `.log` are deleted; so are our own `*.tmp` files.

Recovery (see `recover_segments`) re-reads segments from the one holding the recovery point,
or from the first whose index files are missing, whichever comes first.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final, NamedTuple

from pykraft.storage.index import INDEX_SUFFIX, TIME_INDEX_SUFFIX
from pykraft.storage.log_config import LogConfig
from pykraft.storage.segment import LOG_SUFFIX, TXN_INDEX_SUFFIX, LogSegment

__all__ = [
    "CLEANED_SUFFIX", "DELETED_SUFFIX", "SWAP_SUFFIX", "Listing", "clean_leftovers",
    "recover_segments",
]

DELETED_SUFFIX: Final = ".deleted"
CLEANED_SUFFIX: Final = ".cleaned"
SWAP_SUFFIX: Final = ".swap"
TEMPORARY_SUFFIX: Final = ".tmp"
_INDEX_SUFFIXES: Final = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def _base_offset(name: str) -> int | None:
    """The 20-digit base offset a segment file name starts with, if it does."""
    prefix = name.split(".", 1)[0]
    return int(prefix) if len(prefix) == 20 and prefix.isdigit() else None


def _file_names(directory: Path) -> list[str]:
    """The names of the regular files in `directory` (the entry's type as the directory
    listing gives it: no stat per file)."""
    with os.scandir(directory) as entries:
        return [entry.name for entry in entries if entry.is_file()]


class Listing(NamedTuple):
    """A partition directory's files once its leftovers are dealt with."""

    bases: list[int]  # the segments' base offsets, ascending
    names: frozenset[str]  # every regular file's name: whether a file is there, unasked


def clean_leftovers(directory: Path, config: LogConfig, now_ms: int) -> Listing:
    """Apply the leftover rules; return the segments and files left.
    The directory is listed once, and again only if a rule removed or renamed a file: a
    broker restarting with 200,000 logs lists each of them, and asks the listing, not the
    file system, which of a log's optional files exist (an idle log has no index file, no
    leader epoch checkpoint and no producer snapshot: a stat or an open less for each)."""
    names = _file_names(directory)
    changed = False
    swaps: list[str] = []
    cleaned_bases: list[int] = []
    for name in names:
        if name.endswith((DELETED_SUFFIX, TEMPORARY_SUFFIX)):
            (directory / name).unlink(missing_ok=True)
            changed = True
        elif name.endswith(CLEANED_SUFFIX):
            base = _base_offset(name)
            if base is not None:
                cleaned_bases.append(base)
            (directory / name).unlink(missing_ok=True)
            changed = True
        elif name.endswith(SWAP_SUFFIX):
            swaps.append(name)
    min_cleaned = min(cleaned_bases, default=None)
    for name in sorted(swaps):
        base = _base_offset(name)
        is_log = name.endswith(LOG_SUFFIX + SWAP_SUFFIX)
        if base is None or not is_log or (min_cleaned is not None and base >= min_cleaned):
            (directory / name).unlink(missing_ok=True)
        else:
            _complete_swap(directory, base, config, now_ms)
        changed = True
    if changed:
        names = _file_names(directory)
    bases = sorted(
        base for name in names
        if name.endswith(LOG_SUFFIX) and (base := _base_offset(name)) is not None
    )
    removed = _delete_orphan_indexes(directory, names, set(bases))
    return Listing(bases, frozenset(names).difference(removed))


def _complete_swap(directory: Path, base: int, config: LogConfig, now_ms: int) -> None:
    swap = LogSegment(directory, base, config, now_ms, suffix=SWAP_SUFFIX)
    next_offset = base
    for _, header in swap.iter_headers(0):
        next_offset = header.next_offset
    swap_path = swap.log_path
    swap.close()
    for path in directory.iterdir():
        old_base = _base_offset(path.name)
        replaced = old_base is not None and base <= old_base < max(next_offset, base + 1)
        if replaced and path.name.endswith((LOG_SUFFIX, *_INDEX_SUFFIXES)):
            path.unlink(missing_ok=True)
    swap_path.rename(swap_path.with_name(swap_path.name[: -len(SWAP_SUFFIX)]))


def _delete_orphan_indexes(directory: Path, names: list[str], bases: set[int]) -> list[str]:
    """Delete the index files without their segment; return their names."""
    removed = []
    for name in names:
        if name.endswith(_INDEX_SUFFIXES):
            base = _base_offset(name)
            if base is not None and base not in bases:
                (directory / name).unlink(missing_ok=True)
                removed.append(name)
    return removed


def recover_segments(
    segments: list[LogSegment], recovery_point: int | None, config: LogConfig,
    listed: frozenset[str] | None = None,
) -> list[LogSegment]:
    """Re-validate the unflushed tail (None: a clean shutdown); return the surviving segments.

    The first segment cut short ends the log: every later segment is deleted. Recovered
    segments other than the last are sealed; the last one is left open for append.
    """
    start = _first_to_recover(segments, recovery_point)
    for index in range(start, len(segments)):
        segment = segments[index]
        segment.open_for_append(config, listed=listed)
        truncated = segment.recover()
        is_last = index == len(segments) - 1
        if truncated and not is_last:
            for later in segments[index + 1 :]:
                later.delete()
            return segments[: index + 1]
        if not is_last:
            segment.on_become_inactive()
    return segments


def _first_to_recover(segments: Sequence[LogSegment], recovery_point: int | None) -> int:
    start = len(segments)
    if recovery_point is not None:
        bases = [segment.base_offset for segment in segments]
        start = max(0, sum(1 for base in bases if base <= recovery_point) - 1)
    for index, segment in enumerate(segments[:start]):
        if segment.indexes_were_missing:
            return index
    if start == len(segments):
        last = segments[-1]
        _, end = last.read_next_offset()
        if end != last.size:  # the tail's framing is broken even after a clean shutdown
            return len(segments) - 1
    return start
