"""Python's cyclic garbage collector in a node: long pauses told, long-lived objects frozen.

A full collection walks every object the collector tracks. A node holding 100,000
partitions tracks millions (partition registrations, the maps of its metadata images, its
logs), and one collection then holds the event loop for 0.4-1.5 s on this project's 2-core
VM: Raft peers get no answer meanwhile, and the node's own timers fire late. While such a
node grows, a full collection comes every time the objects that survived young collections
reach a quarter of those that survived the last full one: 40 of them, 30 s of pauses, in a
broker's first 3.5 minutes at 100,000 partitions. And they found nothing to collect: the
metadata and the logs hold no reference cycles, so reference counting frees them.

So after a full collection that took `threshold_ms` or more, its survivors are frozen
(`gc.freeze`): later collections leave them out, and an object among them that becomes
garbage is still freed by its reference count. What is in flight at that moment
(a request's task, its futures) and later dies in a reference cycle waits for the thaw:
every `thaw_interval_s` the frozen objects are handed back (`gc.unfreeze`), and the next
full collection looks at everything -- a pause as long as those it avoids (3.4 s on a
broker of 100,000 partitions, which had frozen after every full collection and so kept
300,000 such objects in 10 minutes). Freezing only after the long ones keeps both rare.
The JVM's collectors trade the same way between young and old generations.

CPython's collection thresholds (700, 10, 10) are kept. Raising them was tried in the
100,000-partition benchmark (2026-11-25). In a clean run with (2,000, 10, 100) the nodes'
pauses of 0.1 s or more added up to 1.3-6.1 s instead of 9-27 s, and creation and
controlled shutdown were faster (16 s and 27 s, against 21-28 s and 36-44 s); but full
collections, now rare, each had more to walk: 0.9-2.0 s, and the active controller's
2.0 s pause cost the metadata quorum its leader (its followers' fetch timeout is 2 s).
With the defaults and the freezing above, the longest pause was 0.43 s. (Two earlier runs,
with (10,000, 20, 100) and (2,000, 10, 100), shared the machine with leftover processes:
0.7-2.8 s pauses and two leader changes.)

A pause of at least `threshold_ms` is logged at INFO with its generation and, for a full
collection, how much of it the collection itself took (the node thread's CPU time, a
system call that young collections, thousands a second, do without: py-spy found 13% of a
busy broker's samples in it when they made it too); the usual young collections, shorter,
are not logged. The two differ when the thread waited meanwhile: the callbacks that time
a collection are Python code, in which the thread can hand the GIL to another one (a log
loading or a snapshot being written on a worker thread) and wait to get it back, and the
system can run other processes. A restarting broker of 100,000 partitions, loading its
logs on two threads, logged young collections "pausing" it 419-486 ms. So what is frozen
is the survivors of a full collection that took `threshold_ms` of CPU, not of one that
only waited. With PYKRAFT_GC_CENSUS=1 in a node's environment (a diagnostic: it walks
the collected generation once more), a long full collection is also followed by the count
of the objects it walked and the types most of them are, before they are frozen.
"""

from __future__ import annotations

import collections
import gc
import logging
import os
import time
from typing import Any, Final

__all__ = ["GcPauses"]

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD_MS: Final = 100
DEFAULT_THAW_INTERVAL_S: Final = 3600.0
OLDEST: Final = 2  # the generation a full collection is of


class GcPauses:
    """Times each collection through `gc.callbacks` while installed and, with `freeze`,
    freezes the survivors of each long full collection."""

    def __init__(self, threshold_ms: int = DEFAULT_THRESHOLD_MS, *, freeze: bool = True,
                 thaw_interval_s: float = DEFAULT_THAW_INTERVAL_S) -> None:
        self.threshold_ms = threshold_ms
        self.freeze = freeze
        self.thaw_interval_s = thaw_interval_s
        self.longest_ms = 0.0  # of the pauses seen since installed
        self._started = 0.0
        self._started_cpu = 0.0
        self._thawed_at = time.monotonic()
        self.census = os.environ.get("PYKRAFT_GC_CENSUS") == "1"

    def install(self) -> None:
        if self._on_collection not in gc.callbacks:
            gc.callbacks.append(self._on_collection)

    def uninstall(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        full = info["generation"] == OLDEST
        if phase == "start":
            self._started = time.perf_counter()
            if full:  # a system call: thousands of young collections a second skip it
                self._started_cpu = time.thread_time()
            return
        paused_ms = (time.perf_counter() - self._started) * 1000
        collecting_ms = (time.thread_time() - self._started_cpu) * 1000 if full else 0.0
        self.longest_ms = max(self.longest_ms, paused_ms)
        if paused_ms >= self.threshold_ms:
            # (not gc.get_freeze_count(): it walks every frozen object)
            log.info("garbage collection of generation %d paused the node for %d ms%s "
                     "(%d objects collected, %d uncollectable)", info["generation"], paused_ms,
                     f", {int(collecting_ms)} ms of it collecting" if full else "",
                     info["collected"], info["uncollectable"])
        if not full or not self.freeze:
            return
        now = time.monotonic()  # the collection is over: its lists may change
        if now - self._thawed_at >= self.thaw_interval_s:
            self._thawed_at = now
            gc.unfreeze()  # the next full collection looks at everything
        elif collecting_ms >= self.threshold_ms:  # long for what it walked
            if self.census:
                self._log_census()
            gc.freeze()

    @staticmethod
    def _log_census() -> None:
        walked = gc.get_objects(generation=OLDEST)
        kinds = collections.Counter(type(each).__qualname__ for each in walked)
        log.info("the full collection walked %d objects: %s", len(walked), ", ".join(
            f"{name} {count}" for name, count in kinds.most_common(12)))
