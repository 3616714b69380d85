"""A FUSE passthrough filesystem whose operations can be switched to fail with EIO: a disk
that dies under a node's log dir.

    python -m pykraft.testing.chaos.eiofs BACKING_DIR MOUNT_POINT [--fsname NAME]

mounts BACKING_DIR at MOUNT_POINT and serves it until unmounted (`fusermount3 -u`, or
`umount -l`) or sent SIGTERM/SIGINT. Every operation is passed to the backing directory,
except while the mode says otherwise. The mode is switched through a control file at the
root of the mount, `/.chaos-eio`, that only this process serves (it is not in the backing
directory): writing `ok`, `all` or `writes` to it switches at once, so when the writer's
write() returns, the next operation already sees the new mode.

- `ok`: everything passes through.
- `all`: every operation on the backing files fails with EIO (open, create, read, write,
  fsync, flush, rename, unlink, truncate, mkdir, readdir, getattr, statfs...): a dead
  device. The default of `fail_disk`, since Kafka takes a log dir offline on any
  IOException, reads included.
- `writes`: only the operations that would write to the device fail (write, fsync, flush,
  create, mkdir, rename, unlink, rmdir, truncate and open with O_TRUNC, chmod, utimens,
  fallocate, link, symlink...); open, read, getattr, readdir and statfs work: a device
  whose writes fail underneath while its reads still work.

Reads of pages the kernel already caches never reach this process (the page cache is kept
across opens, `kernel_cache`, for speed), so they succeed while failing: as on a real
failing disk, where Linux also serves cached pages. Writes are not cached (no
`writeback_cache`), so a failing write() returns EIO to its caller at once rather than
being lost at writeback.

Library: mfusepy (ctypes over libfuse3, pure Python, maintained fork of fusepy). fusepy
itself is unmaintained since 2018 and needs libfuse2; pyfuse3 compiles against libfuse3 and
runs on trio, more machinery for a passthrough. Every call costs a round trip through this
Python process: one confluent-kafka producer (1 kB records, acks=all, one replica,
linger.ms=5) got 123-246 MB/s into a node on plain tmpfs and 60-155 MB/s into one on
eiofs, on this project's 2-core machine under other load; far above what the chaos
workloads write, but the quorum's voters stay on plain tmpfs by default.

libfuse 3.14 prints "Ignoring invalid max threads value 4294967295" at start: mfusepy
leaves the limit unset; it is harmless.
"""

from __future__ import annotations

import argparse
import errno
import functools
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

__all__ = ["CONTROL_NAME", "MODES", "EioFilesystem", "main"]

CONTROL_NAME: Final = ".chaos-eio"
CONTROL_PATH: Final = "/" + CONTROL_NAME
MODES: Final = ("ok", "all", "writes")
CONTROL_FH: Final = (1 << 63) - 1  # never a real file descriptor
CONTROL_BYTES_MAX: Final = 64
# the kernel keeps attributes and lookups this long: the node's stat() calls do not all
# reach Python; only this process changes the backing files, so they cannot go stale
CACHE_TIMEOUT_S: Final = 5.0

F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger(__name__)


def _eio() -> OSError:
    return OSError(errno.EIO, os.strerror(errno.EIO))


def _reads(method: F) -> F:
    """Fails in mode `all` only."""
    @functools.wraps(method)  # mfusepy reads create's signature
    def checked(self: EioFilesystem, path: str, *args: Any) -> Any:
        if self.mode == "all" and path != CONTROL_PATH:
            raise _eio()
        return method(self, path, *args)
    return checked  # type: ignore[return-value]


def _writes(method: F) -> F:
    """Fails in modes `all` and `writes`."""
    @functools.wraps(method)
    def checked(self: EioFilesystem, path: str, *args: Any) -> Any:
        if self.mode != "ok" and path != CONTROL_PATH:
            raise _eio()
        return method(self, path, *args)
    return checked  # type: ignore[return-value]


class EioFilesystem:
    """The operations (mfusepy's `Operations` protocol, raw_fi off: file handles are the
    backing files' descriptors). Paths arrive absolute within the mount."""

    use_ns = True  # utimens gets nanoseconds

    def __init__(self, backing: str) -> None:
        self.backing = os.path.realpath(backing)
        self.mode = "ok"
        self._control_lock = threading.Lock()

    def _real(self, path: str) -> str:
        # libfuse resolves `..` and never hands out a path outside the mount
        return self.backing + path

    # -- the control file ---------------------------------------------------------------

    def _control_text(self) -> bytes:
        return (self.mode + "\n").encode()

    def _set_mode(self, data: bytes) -> int:
        word = data.strip().decode("ascii", errors="replace")
        if word not in MODES:
            raise OSError(errno.EINVAL, f"mode must be one of {MODES}")
        with self._control_lock:
            if word != self.mode:
                log.warning("eiofs %s: mode %s -> %s", self.backing, self.mode, word)
            self.mode = word
        return len(data)

    # -- attributes and directories -------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        if path == CONTROL_PATH:
            return {"st_mode": 0o100600, "st_nlink": 1, "st_size": len(self._control_text()),
                    "st_uid": os.getuid(), "st_gid": os.getgid()}
        if self.mode == "all" and path != "/":
            raise _eio()
        st = os.lstat(self._real(path)) if fh is None or fh == CONTROL_FH else os.fstat(fh)
        return {"st_mode": st.st_mode, "st_nlink": st.st_nlink, "st_size": st.st_size,
                "st_uid": st.st_uid, "st_gid": st.st_gid, "st_ino": st.st_ino,
                "st_blocks": st.st_blocks, "st_blksize": st.st_blksize, "st_rdev": st.st_rdev,
                "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns,
                "st_ctime": st.st_ctime_ns}

    @_reads
    def access(self, path: str, amode: int) -> int:
        if not os.access(self._real(path), amode):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        return 0

    @_reads
    def readdir(self, path: str, fh: int) -> list[str]:
        names = [".", "..", *os.listdir(self._real(path))]
        if path == "/":
            names.append(CONTROL_NAME)
        return names

    @_reads
    def readlink(self, path: str) -> str:
        return os.readlink(self._real(path))

    def statfs(self, path: str) -> dict[str, int]:
        if self.mode == "all":
            raise _eio()
        st = os.statvfs(self._real("/"))
        return {key: getattr(st, key) for key in (
            "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
            "f_flag", "f_frsize", "f_namemax")}

    @_writes
    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._real(path), mode)
        return 0

    @_writes
    def rmdir(self, path: str) -> int:
        os.rmdir(self._real(path))
        return 0

    @_writes
    def unlink(self, path: str) -> int:
        os.unlink(self._real(path))
        return 0

    @_writes
    def rename(self, old: str, new: str) -> int:
        if new == CONTROL_PATH:
            raise OSError(errno.EPERM, os.strerror(errno.EPERM))
        os.rename(self._real(old), self._real(new))
        return 0

    @_writes
    def link(self, target: str, source: str) -> int:
        os.link(self._real(source), self._real(target))
        return 0

    @_writes
    def symlink(self, target: str, source: str) -> int:
        os.symlink(source, self._real(target))
        return 0

    @_writes
    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._real(path), mode)
        return 0

    @_writes
    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._real(path), uid, gid)
        return 0

    @_writes
    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        if times is None:
            os.utime(self._real(path))
        else:
            os.utime(self._real(path), ns=times)
        return 0

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        if path == CONTROL_PATH:
            return 0  # `echo all > .chaos-eio` truncates first
        if self.mode != "ok":
            raise _eio()
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._real(path), length)
        return 0

    # -- files ---------------------------------------------------------------------------

    def open(self, path: str, flags: int) -> int:
        if path == CONTROL_PATH:
            return CONTROL_FH
        # opening for writing writes nothing to a device; truncating does
        if self.mode == "all" or (self.mode == "writes" and flags & os.O_TRUNC):
            raise _eio()
        return os.open(self._real(path), flags)

    @_writes
    def create(self, path: str, mode: int, flags: int) -> int:
        return os.open(self._real(path), flags | os.O_CREAT, mode)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        if fh == CONTROL_FH:
            return self._control_text()[offset:offset + size]
        if self.mode == "all":
            raise _eio()
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        if fh == CONTROL_FH:
            if offset + len(data) > CONTROL_BYTES_MAX:
                raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))
            return self._set_mode(data)
        if self.mode != "ok":
            raise _eio()
        return os.pwrite(fh, data, offset)

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        if fh == CONTROL_FH:
            return 0
        if self.mode != "ok":
            raise _eio()
        if datasync:
            os.fdatasync(fh)
        else:
            os.fsync(fh)
        return 0

    @_writes
    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        return 0  # the backing directory is on tmpfs: nothing to sync

    def flush(self, path: str, fh: int) -> int:
        if fh != CONTROL_FH and self.mode != "ok":
            raise _eio()  # close() reports a failed write-back, as on a real disk
        return 0

    def release(self, path: str, fh: int) -> int:
        if fh != CONTROL_FH:
            os.close(fh)  # always: a failing disk must not leak descriptors
        return 0

    @_writes
    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        if mode:
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
        os.posix_fallocate(fh, offset, size)
        return 0


def mount_options(fsname: str) -> dict[str, Any]:
    """libfuse3 options: the kernel caches pages across opens (kernel_cache) and attributes
    and lookups for CACHE_TIMEOUT_S; direct_io stays off so the page cache works; the
    kernel sends writes of up to 1 MiB (libfuse3's default max_write) in one call."""
    return {"foreground": True, "fsname": fsname, "subtype": "eiofs", "allow_other": True,
            "default_permissions": True, "kernel_cache": True,
            "attr_timeout": CACHE_TIMEOUT_S, "entry_timeout": CACHE_TIMEOUT_S,
            "negative_timeout": CACHE_TIMEOUT_S}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pykraft.testing.chaos.eiofs",
        description="Mount BACKING at MOUNT_POINT as a passthrough FUSE filesystem whose "
                    f"operations fail with EIO when 'all' or 'writes' is written to "
                    f"MOUNT_POINT/{CONTROL_NAME} ('ok' heals it). Runs until unmounted.")
    parser.add_argument("backing", help="the directory served")
    parser.add_argument("mount_point", help="an empty directory to mount it on")
    parser.add_argument("--fsname", default="eiofs",
                        help="the mount's source in /proc/mounts (default: eiofs)")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.backing) or not os.path.isdir(args.mount_point):
        parser.error("BACKING and MOUNT_POINT must both be existing directories")
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", args.fsname):
        # it goes into libfuse's -o list: a comma or '=' would smuggle in options
        parser.error("--fsname is 1-64 letters, digits, '_', '.' or '-'")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    try:
        import mfusepy  # type: ignore[import-untyped]
    except (ImportError, OSError) as error:  # OSError: libfuse3 is not installed
        print(f"eiofs needs mfusepy and libfuse3 (./scripts/setup --test): {error}",
              file=sys.stderr)
        return 2
    # libfuse unmounts and returns on SIGTERM/SIGINT (it installs its own handlers)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        mfusepy.FUSE(EioFilesystem(args.backing), args.mount_point,
                     **mount_options(args.fsname))
    except RuntimeError as error:
        print(f"eiofs: mounting {args.mount_point} failed ({error})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
