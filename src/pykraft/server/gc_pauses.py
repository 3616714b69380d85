"""Python's cyclic garbage collector in a node: long pauses told, long-lived objects frozen.

A full collection walks every object the collector tracks. A node holding 100,000
partitions tracks millions (partition registrations, the maps of its metadata images, its
logs), and one collection then holds the event loop for 0.4-1.5 s on this project's 2-core
VM: Raft peers get no answer meanwhile, and the node's own timers fire late. While such a
node grows, a full collection comes every time the objects that survived young collections
reach a quarter of those that survived the last full one: 40 of them, 30 s of pauses, in a
broker's first 3.5 minutes at 100,000 partitions. And they found nothing to collect: the
metadata and the logs hold no reference cycles, so reference counting frees them.

So after a full collection that paused the node for `threshold_ms` or more, its survivors
are frozen (`gc.freeze`): later collections leave them out, and an object among them that
becomes garbage is still freed by its reference count. What is in flight at that moment
(a request's task, its futures) and later dies in a reference cycle waits for the thaw:
every `thaw_interval_s` the frozen objects are handed back (`gc.unfreeze`), and the next
full collection looks at everything -- a pause as long as those it avoids (3.4 s on a
broker of 100,000 partitions, which had frozen after every full collection and so kept
300,000 such objects in 10 minutes). Freezing only after the long ones keeps both rare.
The JVM's collectors trade the same way between young and old generations.

Full collections also come too often for such a node. CPython runs one when the objects
promoted out of the young generations since the last one reach a quarter of those that
survived it -- and a node's requests keep hundreds of thousands of objects alive across
young collections (a follower fetch of 33,000 partitions), each promoted, most dead soon
after. `thresholds` (installed with the rest, the previous ones put back on uninstall)
make young collections a little rarer, so fewer of those objects live long enough to be
promoted, and a full collection wait for at least 100 collections of the middle
generation. In a model of that load (1,000,000 long-lived objects, four requests of
90,000 objects in flight), CPython's defaults (700, 10, 10) made 218 full collections,
9.5 s of a 14.1 s run; (2,000, 10, 100) made 14 (0.6 s), the run took 5.2 s and its
longest young collection 1.2 ms. (10,000, 20, 100) made 1, but its middle generation
grew so large that on a 100,000-partition broker its collections paused the node for
100-700 ms, 22-36 times in a 10-minute run.

A pause of at least `threshold_ms` is logged at INFO with its generation; the usual young
collections, shorter, are not.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any, Final

__all__ = ["GcPauses"]

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD_MS: Final = 100
DEFAULT_THRESHOLDS: Final = (2_000, 10, 100)  # gc.set_threshold's, per generation
DEFAULT_THAW_INTERVAL_S: Final = 3600.0
OLDEST: Final = 2  # the generation a full collection is of


class GcPauses:
    """Times each collection through `gc.callbacks` while installed and, with `freeze`,
    freezes the survivors of each long full collection."""

    def __init__(self, threshold_ms: int = DEFAULT_THRESHOLD_MS, *, freeze: bool = True,
                 thaw_interval_s: float = DEFAULT_THAW_INTERVAL_S,
                 thresholds: tuple[int, int, int] | None = DEFAULT_THRESHOLDS) -> None:
        self.threshold_ms = threshold_ms
        self.freeze = freeze
        self.thaw_interval_s = thaw_interval_s
        self.thresholds = thresholds  # None: leave CPython's
        self._previous_thresholds: tuple[int, int, int] | None = None
        self.longest_ms = 0.0  # of the pauses seen since installed
        self._started = 0.0
        self._thawed_at = time.monotonic()

    def install(self) -> None:
        if self._on_collection not in gc.callbacks:
            gc.callbacks.append(self._on_collection)
            if self.thresholds is not None:
                self._previous_thresholds = gc.get_threshold()
                gc.set_threshold(*self.thresholds)

    def uninstall(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
            if self._previous_thresholds is not None:
                gc.set_threshold(*self._previous_thresholds)
                self._previous_thresholds = None

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        paused_ms = (time.perf_counter() - self._started) * 1000
        self.longest_ms = max(self.longest_ms, paused_ms)
        long = paused_ms >= self.threshold_ms
        if long:
            # (not gc.get_freeze_count(): it walks every frozen object)
            log.info("garbage collection of generation %d paused the node for %d ms "
                     "(%d objects collected, %d uncollectable)", info["generation"],
                     paused_ms, info["collected"], info["uncollectable"])
        if not self.freeze or info["generation"] != OLDEST:
            return
        now = time.monotonic()  # the collection is over: its lists may change
        if now - self._thawed_at >= self.thaw_interval_s:
            self._thawed_at = now
            gc.unfreeze()  # the next full collection looks at everything
        elif long:
            gc.freeze()
