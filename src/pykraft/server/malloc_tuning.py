"""glibc's allocator, set for a node that moves megabyte buffers on every request.

A produce request of 1 MiB makes a node hold a few buffers of that size for a moment: the
frame as read, the records as decoded, the copy the log stamps offsets into. glibc serves
blocks above its mmap threshold (128 KiB at first, raised on the fly up to 32 MiB as such
blocks are freed) with fresh mappings, and gives freed memory at the top of its heap back
to the kernel once more than its trim threshold (twice the mmap threshold) is free. Either
way the next request's buffers are pages the kernel has to fault in and zero again. Measured
with benchmarks/produce_path.py (1 MiB uncompressed batches, acks=1, 2026-11-26): the node
spent 2.3-2.5 CPU s per GB, of which the page faults were a quarter; with the thresholds
below, 1.5-1.8.

So, at start-up: blocks below 4 MiB come from the heap (the frames of every ordinary request:
Kafka's own max.message.bytes default is 1 MiB), and up to 16 MiB of freed heap is kept for
reuse before any is given back. That is the most RSS this keeps that the defaults would have
returned. Larger blocks (a 50 MiB request) are still mapped and unmapped on their own, so the
memory bounds of net/limits.py hold as before. Other C libraries are left as they are.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from typing import Final

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "tune_malloc"]

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD: Final = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD: Final = -3
MMAP_THRESHOLD_BYTES: Final = 4 * 1024 * 1024
TRIM_THRESHOLD_BYTES: Final = 16 * 1024 * 1024


def tune_malloc() -> bool:
    """Set glibc's thresholds (above); False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        log.debug("no mallopt in the C library (%s): allocator left as it is", name)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # mallopt answers 1 on success; setting either also stops glibc's own adjusting
    done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
                and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1)
    if not done:
        log.debug("mallopt refused the thresholds: allocator left as it is")
    return done
