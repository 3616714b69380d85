"""Clock jumps for the chaos harness: libfaketime, with a per-node offset file.

A node starts with LD_PRELOAD=libfaketime and FAKETIME_TIMESTAMP_FILE naming a file that
holds its wall clock offset ("+0" at first); a jump rewrites the file, and libfaketime
re-reads it at most FAKETIME_CACHE_DURATION seconds later. DONT_FAKE_MONOTONIC=1 keeps the
monotonic clock real: only the wall clock (time.time(), what the broker stamps as
LogAppendTime, what it compares retention against) moves.

libfaketime 0.9.10 (Debian 12's) mistranslates clock_nanosleep(CLOCK_MONOTONIC,
TIMER_ABSTIME) when the monotonic clock is not faked (libfaketime issue #426, fixed after
0.9.10): it subtracts the faked wall time from a monotonic deadline and the kernel answers
EINVAL, which is what Python 3.11's time.sleep() calls. A 20-line shim loaded before
libfaketime (`_SHIM_SOURCE`, compiled here with the C compiler the install already needs)
sends clock_nanosleep on every clock but CLOCK_REALTIME straight to the kernel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from pykraft.testing.chaos.network import NotSupported

__all__ = ["FakeClock", "find_libfaketime"]

LIBFAKETIME_PATHS = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)
CACHE_DURATION_S = 1  # how stale a node's view of its offset file may be

_SHIM_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_nanosleep_fn)(clockid_t, int, const struct timespec *, struct timespec *);

/* Only CLOCK_REALTIME is faked: every other clock's sleep goes straight to the kernel. */
int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *req,
                    struct timespec *rem) {
    static clock_nanosleep_fn next;
    if (clock_id != CLOCK_REALTIME) {
        long result = syscall(SYS_clock_nanosleep, clock_id, flags, req, rem);
        return result == 0 ? 0 : errno;
    }
    if (next == NULL)
        next = (clock_nanosleep_fn)dlsym(RTLD_NEXT, "clock_nanosleep");
    return next(clock_id, flags, req, rem);
}
"""


def find_libfaketime() -> str | None:
    for path in LIBFAKETIME_PATHS:
        if os.path.exists(path):
            return path
    return None


class FakeClock:
    """The environment that starts nodes under libfaketime, and their offset files.

    `available` is False (and `why_not` says why) when libfaketime or the shim is missing:
    nodes then start with the real clock and `jump` raises NotSupported."""

    def __init__(self, work_dir: Path, *, enabled: bool = True) -> None:
        self.work_dir = work_dir
        self.offsets_s: dict[int, float] = {}
        self.why_not = ""
        self.library = find_libfaketime()
        self.shim = work_dir / "nanosleep-shim.so"
        if not enabled:
            self.why_not = "the cluster was started with fake_clock=False"
        elif self.library is None:
            self.why_not = ("libfaketime is not installed (apt-get install faketime; "
                            "./scripts/setup --test does it)")
        else:
            self.why_not = self._build_shim()

    @property
    def available(self) -> bool:
        return not self.why_not

    def _build_shim(self) -> str:
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            return "no C compiler to build the clock_nanosleep shim for libfaketime 0.9.10"
        self.work_dir.mkdir(parents=True, exist_ok=True)
        source = self.work_dir / "nanosleep-shim.c"
        source.write_text(_SHIM_SOURCE, encoding="utf-8")
        try:
            result = subprocess.run(
                [compiler, "-shared", "-fPIC", "-O2", "-o", str(self.shim), str(source),
                 "-ldl"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"building the clock_nanosleep shim failed: {error}"
        if result.returncode != 0:
            return f"building the clock_nanosleep shim failed: {result.stderr.strip()}"
        return ""

    def offset_file(self, node_id: int) -> Path:
        return self.work_dir / f"clock-offset-{node_id}"

    def environment(self, node_id: int) -> dict[str, str]:
        """What to add to a node's environment (nothing when unavailable); the offset file
        is created at "+0" the first time and kept across restarts, as a machine keeps its
        clock."""
        if not self.available or self.library is None:
            return {}
        path = self.offset_file(node_id)
        if not path.exists():
            self._write(node_id, 0.0)
        return {"LD_PRELOAD": f"{self.shim} {self.library}",
                "FAKETIME_TIMESTAMP_FILE": str(path),
                "DONT_FAKE_MONOTONIC": "1",
                "FAKETIME_CACHE_DURATION": str(CACHE_DURATION_S)}

    def jump(self, node_id: int, offset_s: float) -> None:
        """Set the node's wall clock `offset_s` seconds off the real time (0: real time)."""
        if not self.available:
            raise NotSupported(f"clock jumps: {self.why_not}")
        self._write(node_id, offset_s)

    def _write(self, node_id: int, offset_s: float) -> None:
        # written whole then renamed: libfaketime never reads half a line
        path = self.offset_file(node_id)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(f"{offset_s:+.3f}\n", encoding="ascii")
        temporary.replace(path)
        self.offsets_s[node_id] = offset_s
