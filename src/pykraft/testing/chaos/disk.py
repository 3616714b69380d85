"""Full disks for the chaos harness: each node's log dir lives on its own size-limited tmpfs.

`fill` writes a ballast file beside the log dir, on the same filesystem, until the write
fails with ENOSPC (so ~0 bytes are free for the node); `free` deletes it. The mount's
source is named `<prefix>` so that a crashed run's mounts are found (in /proc/mounts) and
unmounted by the next run.

Not covered: a disk that returns EIO. This machine has no device-mapper (no dm-error or
dm-flakey target); a FUSE layer could do it but is not built yet.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from pykraft.testing.chaos.network import ChaosError, run

__all__ = ["fill", "free", "mount_tmpfs", "mounts", "unmount"]

BALLAST_NAME = "chaos-ballast"
CHUNK_BYTES = 1 << 20
SMALL_CHUNK_BYTES = 4096


def mount_tmpfs(where: Path, source: str, size_bytes: int) -> None:
    where.mkdir(parents=True, exist_ok=True)
    run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", source, str(where)])


def unmount(where: Path) -> None:
    """Unmount (lazily if something still holds it open: the node is dead by then)."""
    if str(where) not in {point for _, point in mounts()}:
        return
    try:
        run(["umount", str(where)])
    except ChaosError:
        run(["umount", "-l", str(where)])


def mounts() -> list[tuple[str, str]]:
    """(source, mount point) of every mount."""
    found = []
    with open("/proc/mounts", encoding="utf-8") as table:
        for line in table:
            parts = line.split()
            if len(parts) >= 2:
                found.append((parts[0], parts[1].replace("\\040", " ")))
    return found


def fill(where: Path, size_bytes: int) -> int:
    """Write the ballast until the filesystem is full; the bytes written. At most
    size_bytes / 1 MiB + 1 big writes, then at most 256 small ones for the last bytes."""
    ballast = where / BALLAST_NAME
    written = 0
    with ballast.open("ab") as out:
        for chunk_bytes, writes_max in ((CHUNK_BYTES, size_bytes // CHUNK_BYTES + 1),
                                        (SMALL_CHUNK_BYTES, 256)):
            chunk = b"\0" * chunk_bytes
            for _ in range(writes_max):
                try:
                    written += os.write(out.fileno(), chunk)
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise ChaosError(f"filling {where}: {error}") from error
                    break
    return written


def free(where: Path) -> None:
    (where / BALLAST_NAME).unlink(missing_ok=True)
