"""Reporting failed disk work (a full disk, an I/O error) without flooding the log.

When a log dir's filesystem fills up, every produce to every partition in it fails, and so
do the periodic flushes, checkpoints and retention passes: thousands of identical errors a
second. `StorageErrorLog.report` logs the first failure of a log dir, then at most one line
per `interval_ms` for that dir, saying how many failures it left out; the first success
after failures (`recovered`) is logged once too, so an operator sees when writes resumed.
Memory is one entry per log dir that has failed.

What the node does about the failure itself is the caller's: the request that failed gets
KAFKA_STORAGE_ERROR, background work is tried again at its next interval (see
docs/deviations.md, "A full disk or a failing log dir").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["REPORT_INTERVAL_MS", "StorageErrorLog"]

log = logging.getLogger(__name__)

REPORT_INTERVAL_MS: Final = 10_000


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class _DirState:
    reported_ms: int
    unreported: int = 0


class StorageErrorLog:
    def __init__(self, interval_ms: int = REPORT_INTERVAL_MS,
                 clock_ms: Callable[[], int] = _monotonic_ms) -> None:
        self.interval_ms = interval_ms
        self._clock_ms = clock_ms
        self._failing: dict[Path, _DirState] = {}

    def report(self, log_dir: Path, what: str, error: BaseException) -> bool:
        """Note that `what` (e.g. "append to t-0") failed in `log_dir`; log it unless a
        line for this dir was logged less than `interval_ms` ago. True if logged."""
        now = self._clock_ms()
        state = self._failing.get(log_dir)
        if state is not None and now - state.reported_ms < self.interval_ms:
            state.unreported += 1
            return False
        left_out = state.unreported if state is not None else 0
        self._failing[log_dir] = _DirState(now)
        more = f" ({left_out} more failure(s) in this log dir not logged)" if left_out else ""
        log.error("storage error in log dir %s: %s failed: %s%s", log_dir, what, error, more)
        return True

    def recovered(self, log_dir: Path) -> None:
        """A write in `log_dir` succeeded: if it had been failing, say so once."""
        if self._failing and self._failing.pop(log_dir, None) is not None:
            log.warning("log dir %s takes writes again", log_dir)

    def is_failing(self, log_dir: Path) -> bool:
        return log_dir in self._failing
