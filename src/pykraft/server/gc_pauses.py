"""Long pauses of Python's cyclic garbage collector, told in the node's log.

A full collection walks every object the collector tracks. A node holding 100,000
partitions tracks millions (partition registrations, the maps of its metadata images, its
logs), and one collection can then hold the event loop for a second or more: Raft peers get
no answer meanwhile, and the node's own timers fire late. The JVM logs its GC pauses for
the same reason. A pause of at least `threshold_ms` is logged at INFO with its generation;
shorter ones, the usual young collections, are not.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any, Final

__all__ = ["GcPauses"]

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD_MS: Final = 100


class GcPauses:
    """Times each collection through `gc.callbacks` while installed."""

    def __init__(self, threshold_ms: int = DEFAULT_THRESHOLD_MS) -> None:
        self.threshold_ms = threshold_ms
        self.longest_ms = 0.0  # of the pauses seen since installed
        self._started = 0.0

    def install(self) -> None:
        if self._on_collection not in gc.callbacks:
            gc.callbacks.append(self._on_collection)

    def uninstall(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        paused_ms = (time.perf_counter() - self._started) * 1000
        self.longest_ms = max(self.longest_ms, paused_ms)
        if paused_ms >= self.threshold_ms:
            log.info("garbage collection of generation %d paused the node for %d ms "
                     "(%d objects collected, %d uncollectable)", info["generation"],
                     paused_ms, info["collected"], info["uncollectable"])
