"""Full disks for the chaos harness: each node's log dir lives on its own size-limited tmpfs.

`fill` writes a ballast file beside the log dir, on the same filesystem, until the write
fails with ENOSPC (so ~0 bytes are free for the node); `free` deletes it. The mount's
source is named `<prefix>` so that a crashed run's mounts are found (in /proc/mounts) and
unmounted by the next run.

A disk that returns EIO: the machine has no device-mapper (no dm-error or dm-flakey), so
a node chosen for it (`ChaosCluster(eio_nodes=...)`) gets its log dir through a FUSE
passthrough of its tmpfs (eiofs.py), run as its own process on the host, whose operations
`set_eio_mode` switches to fail. The mount is made before the node starts: `ip netns exec`
gives the node a copy of the host's mounts at that moment (a new mount namespace, and the
host's `/` is private, so later mounts would not reach it). The FUSE mount's source is the
run's prefix too, so the sweep finds it.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pykraft.testing.chaos.eiofs import CONTROL_NAME, MODES
from pykraft.testing.chaos.network import ChaosError, NotSupported, run

__all__ = ["check_eio_prerequisites", "fill", "free", "mount_eio", "mount_table",
           "mount_tmpfs", "mounts", "set_eio_mode", "stop_eio", "unmount"]

BALLAST_NAME = "chaos-ballast"
EIO_MOUNT_TIMEOUT_S = 30.0  # the FUSE process imports Python and mounts
EIO_EXIT_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.05
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
    return [(source, point) for source, point, _ in mount_table()]


def mount_table() -> list[tuple[str, str, str]]:
    """(source, mount point, filesystem type) of every mount, in mount order."""
    found = []
    with open("/proc/mounts", encoding="utf-8") as table:
        for line in table:
            parts = line.split()
            if len(parts) >= 3:
                found.append((parts[0], parts[1].replace("\\040", " "), parts[2]))
    return found


def check_eio_prerequisites() -> None:
    """NotSupported, with what to install, when FUSE cannot be used here."""
    problems = []
    if not os.path.exists("/dev/fuse"):
        problems.append("/dev/fuse is missing (the kernel has no FUSE)")
    if shutil.which("fusermount3") is None:
        problems.append("fusermount3 is not installed (Debian package fuse3)")
    try:
        import mfusepy  # type: ignore[import-untyped]  # noqa: F401
    except (ImportError, OSError) as error:  # OSError: libfuse3 itself is missing
        problems.append(f"mfusepy cannot be loaded ({error})")
    if problems:
        raise NotSupported("a disk that returns EIO needs FUSE: " + "; ".join(problems)
                           + "; run ./scripts/setup --test")


def mount_eio(backing: Path, where: Path, source: str,
              log_path: Path) -> subprocess.Popen[bytes]:
    """Start eiofs serving `backing` at `where` (healthy) and wait until it is mounted;
    its process (in a session of its own, so signals to the harness do not reach it)."""
    where.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "pykraft.testing.chaos.eiofs", str(backing), str(where),
             "--fsname", source],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True)
    deadline = time.monotonic() + EIO_MOUNT_TIMEOUT_S
    for _ in range(int(EIO_MOUNT_TIMEOUT_S / POLL_INTERVAL_S) + 1):
        if (where / CONTROL_NAME).exists():
            return process
        if process.poll() is not None or time.monotonic() >= deadline:
            break
        time.sleep(POLL_INTERVAL_S)
    stop_eio(process, where)
    tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
    raise ChaosError(f"eiofs did not mount {where} within {EIO_MOUNT_TIMEOUT_S} s:\n{tail}")


def set_eio_mode(where: Path, mode: str) -> None:
    """`ok`, `all` (every operation fails with EIO) or `writes` (only writes do); in force
    for the next operation once this returns."""
    if mode not in MODES:
        raise ChaosError(f"an EIO mode is one of {MODES}, not {mode!r}")
    try:
        with open(where / CONTROL_NAME, "wb", buffering=0) as control:
            control.write(mode.encode())
    except OSError as error:
        raise ChaosError(f"cannot switch {where} to {mode}: {error}") from error


def stop_eio(process: subprocess.Popen[bytes] | None, where: Path) -> None:
    """Unmount the FUSE filesystem at `where` (its process then exits), and wait for the
    process; SIGKILL it when it does not exit in time (the lazy unmount still detaches)."""
    if str(where) in {point for _, point in mounts()}:
        try:
            run(["fusermount3", "-u", str(where)])
        except ChaosError:
            run(["umount", "-l", str(where)])
    if process is None:
        return
    try:
        process.wait(timeout=EIO_EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=EIO_EXIT_TIMEOUT_S)


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
