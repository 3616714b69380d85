"""Reading partition directories ahead of a start-up load, in helper processes.

Opening a log is some ten system calls (list the directory, read partition.metadata, stat
the segment files). With the kernel's caches warm that is 55 µs of mostly Python per idle
log; when they are cold (a broker restarted with a million logs has had most of its
directories' inodes evicted) each call waits for the disk, and the same load took 187 µs
per log on this project's test machine. The disk serves several requests at once, but
threads of the loading process cannot ask for them: every return from a system call takes
the interpreter lock back, and the loading thread, whose Python is the rest of the work,
spent more time waiting for it than it saved (four reading threads: 55 -> 102 µs per log
warm, no gain cold). Separate processes have their own interpreters: four of them read
ahead at 55 µs per directory while the loader opens what they have read.

A `Readahead` is told the directories in the order they will be opened. A feeding thread
hands them out, in chunks, round robin, to the helpers over their stdin, never more than a
window of chunks ahead of what the loader has reported opened, so that what is read is
still cached when it is used. Whatever goes wrong here (no process can be started, a
helper dies, a directory cannot be read) only loses the speed-up: the load does its own
reading and reports its own errors.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO, Final

from pykraft.storage.checkpoint import PARTITION_METADATA_FILE
from pykraft.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE

__all__ = ["Readahead"]

_log = logging.getLogger(__name__)

CHUNK: Final = 256  # directories per message to a helper
WINDOW: Final = 64  # chunks handed out ahead of the loader

# The small files a log's opening reads whole; the helper stats the others
_READ_WHOLE: Final = (PARTITION_METADATA_FILE, LEADER_EPOCH_CHECKPOINT_FILE)

# The helper: reads NUL-terminated paths from stdin, lists each directory, reads the files
# named in its arguments whole and stats the others. Standard library only, started
# isolated (-I) and without site (-S): about 10 ms.
_HELPER: Final = r"""
import os, sys
SMALL = {os.fsencode(name) for name in sys.argv[1:]}
def touch(path):
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name in SMALL:
                    fd = os.open(entry.path, os.O_RDONLY)
                    try:
                        os.read(fd, 65536)
                    finally:
                        os.close(fd)
                else:
                    entry.stat()
    except OSError:
        pass
rest = b""
while block := sys.stdin.buffer.read1(65536):
    *paths, rest = (rest + block).split(b"\0")
    for path in paths:
        touch(path)
"""


class Readahead:
    """Helper processes reading `directories` ahead of a loader that calls `opened()` once
    per directory it has opened, in the same order; `close()` ends them (also on error)."""

    def __init__(self, directories: Sequence[str | os.PathLike[str]], processes: int) -> None:
        self._directories = directories  # encoded a chunk at a time, as they are handed out
        self._opened = 0
        self._lock = threading.Lock()  # loads on several threads report progress
        self._progress = threading.Semaphore(0)  # one release per chunk the loader opened
        self._stopping = False
        self._helpers: list[subprocess.Popen[bytes]] = []
        try:
            for _ in range(processes):
                self._helpers.append(subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _HELPER, *_READ_WHOLE],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True))
        except OSError as error:
            _log.info("reading log directories ahead without helpers: %s", error)
        self._feeder = threading.Thread(target=self._feed, name="log-readahead", daemon=True)
        if self._helpers:
            self._feeder.start()

    @property
    def helpers(self) -> int:
        """How many helper processes were started."""
        return len(self._helpers)

    def running(self) -> int:
        """How many helper processes and feeding threads are still alive."""
        return (sum(helper.poll() is None for helper in self._helpers)
                + self._feeder.is_alive())

    def opened(self) -> None:
        """The loader has opened the next directory."""
        with self._lock:
            self._opened += 1
            if self._opened % CHUNK == 0:
                self._progress.release()

    def _feed(self) -> None:
        pipes: list[IO[bytes]] = [helper.stdin for helper in self._helpers
                                  if helper.stdin is not None]
        try:
            for index, start in enumerate(range(0, len(self._directories), CHUNK)):
                if index >= WINDOW:
                    self._progress.acquire()
                if self._stopping:
                    return
                chunk = self._directories[start:start + CHUNK]
                pipe = pipes[index % len(pipes)]
                pipe.write(b"".join(os.fsencode(path) + b"\0" for path in chunk))
                pipe.flush()
        except OSError:  # a helper is gone (or being ended): the load goes on without
            return
        finally:
            for pipe in pipes:
                try:
                    pipe.close()
                except OSError:
                    pass

    def close(self) -> None:
        """End the helpers (what is left for them to read is of no use once the load is
        over or has failed) and the feeder."""
        self._stopping = True
        self._progress.release()  # a feeder waiting on the loader wakes up and stops
        for helper in self._helpers:
            helper.kill()  # a feeder blocked writing to it gets a broken pipe
        if self._feeder.is_alive():
            self._feeder.join()
        for helper in self._helpers:
            helper.wait()
