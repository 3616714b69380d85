"""Per-partition events of one kind, logged as one line per turn of the event loop.

When leaderships move by the 100,000, a broker meets the same event for tens of thousands
of partitions at once: a leader that no longer leads them, a follower to add to their
ISRs, their new ISRs. One INFO line each made 500,000-600,000 lines per broker in a
10-minute benchmark run at 100,000 partitions, and logging took 9% of a broker's busy
time while it rejoined its ISRs (py-spy). A `PartitionEvents` collects the partitions
named in one turn and logs one INFO line for them -- how many, and the first few with
their details -- and each at DEBUG.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

__all__ = ["PartitionEvents"]

SHOWN: Final = 3  # partitions named, with their details, in the INFO line


class PartitionEvents:
    """`add(partition, detail)` for each partition the event happened to; the INFO line
    reads "<what>: <count> partition(s): <partition> <detail>, ...". Outside an event loop
    each is logged at once."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self.logger = logger
        self.what = what
        self._pending: list[tuple[str, str]] = []
        self._count = 0

    def add(self, partition: str, detail: str = "") -> None:
        if self.logger.isEnabledFor(logging.DEBUG):
            self.logger.debug("%s: %s %s", self.what, partition, detail)
        if not self.logger.isEnabledFor(logging.INFO):
            return
        self._count += 1
        if len(self._pending) < SHOWN:
            self._pending.append((partition, detail))
        if self._count == 1:
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop: say it now
                self.flush()

    def flush(self) -> None:
        if not self._count:
            return
        shown = ", ".join(f"{name} {detail}".rstrip() for name, detail in self._pending)
        more = ", ..." if self._count > len(self._pending) else ""
        self.logger.info("%s: %d partition(s): %s%s", self.what, self._count, shown, more)
        self._pending, self._count = [], 0
