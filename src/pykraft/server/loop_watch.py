"""A held event loop, told with what held it.

Everything a node does on the network runs on one asyncio loop: Raft fetches and votes,
broker heartbeats, client requests. A callback that runs for seconds holds all of them: at
300,000 partitions a broker that held its loop for 9 s missed its heartbeats and was fenced,
and its log said nothing of why. A thread beside the loop watches a beat that the loop sets
every `beat_s`; when the beat is `held_ms` late, it logs a WARNING with the loop thread's
stack as it is at that moment, and an INFO line with the whole length once the loop turns
again. One warning per hold, however long it lasts.

The watcher needs the GIL to look: Python code on the loop gives it up every switch
interval (5 ms), so the stack is that of the code holding the loop; one C call that keeps
the GIL for seconds (rare) is seen only once it returns.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from typing import Final

__all__ = ["LoopWatch"]

log = logging.getLogger(__name__)

DEFAULT_HELD_MS: Final = 2_000  # Raft's fetch timeout is 2 s: a hold this long is felt
DEFAULT_BEAT_S: Final = 0.25
STACK_FRAMES_MAX: Final = 25  # innermost frames logged


class LoopWatch:
    """Logs each hold of `loop` of `held_ms` or more, with the loop thread's stack."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, held_ms: int = DEFAULT_HELD_MS,
                 beat_s: float = DEFAULT_BEAT_S) -> None:
        self.loop = loop
        self.held_ms = held_ms
        self.beat_s = beat_s
        self.holds = 0  # holds reported since started
        self._beat = time.monotonic()  # written by the loop, read by the watcher
        self._loop_thread_id = threading.get_ident()  # started from the loop's thread
        self._handle: asyncio.TimerHandle | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start watching; call from the loop's thread."""
        self._loop_thread_id = threading.get_ident()
        self._on_beat()
        self._thread = threading.Thread(target=self._watch, name="loop-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _on_beat(self) -> None:
        self._beat = time.monotonic()
        self._handle = self.loop.call_later(self.beat_s, self._on_beat)

    def _watch(self) -> None:
        held_s = self.held_ms / 1000
        reported_beat: float | None = None  # the beat of the hold already reported
        while not self._stopped.wait(min(self.beat_s, held_s / 4)):
            beat, now = self._beat, time.monotonic()
            late_s = now - beat - self.beat_s
            if late_s >= held_s and reported_beat != beat:
                reported_beat = beat
                self.holds += 1
                log.warning("the event loop has been held for %d ms by:\n%s",
                            late_s * 1000, self._loop_stack())
            elif reported_beat is not None and reported_beat != beat:
                log.info("the event loop turned again after %d ms",
                         (beat - reported_beat - self.beat_s) * 1000)
                reported_beat = None

    def _loop_stack(self) -> str:
        frame = sys._current_frames().get(self._loop_thread_id)
        if frame is None:
            return "  (the loop's thread has ended)"
        return "".join(traceback.format_stack(frame, limit=STACK_FRAMES_MAX)).rstrip()
