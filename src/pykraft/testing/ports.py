"""Free loopback ports for test clusters, chosen before the servers bind them.

A port taken with bind(0) comes from the kernel's ephemeral range, so in the time between
choosing it and a node binding it, the kernel may give the same port to another bind(0) or
to an outgoing connection (a client's, or another node's) -- the node then fails with
"Address already in use". Ports are therefore drawn below that range, never twice in one
process, and checked free by binding them once. Under pytest-xdist each worker draws from
its own residue class (port % workers == its number), so two workers never pick the same.
"""

from __future__ import annotations

import functools
import os
import random
import socket
import threading
from contextlib import closing
from pathlib import Path

_LOWEST = 10_000
_handed_out: set[int] = set()
_lock = threading.Lock()


@functools.cache
def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _bindable(port: int) -> bool:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@functools.cache
def _worker_share() -> tuple[int, int]:
    """(this pytest-xdist worker's number, the number of workers); (0, 1) outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        number = int(worker.removeprefix("gw")) if worker.startswith("gw") else 0
    except ValueError:
        return 0, 1
    return (number % count, count) if count > 1 else (0, 1)


def free_port() -> int:
    """A loopback port nobody listens on, outside the ephemeral range, not handed out
    before by this process (nor by another xdist worker)."""
    low, _ = _ephemeral_range()
    span = range(_LOWEST, low) if low - _LOWEST >= 1000 else range(1024, 65536)
    number, count = _worker_share()
    first = span.start + (number - span.start) % count
    candidates = range(first, span.stop, count)
    with _lock:
        for _ in range(1000):
            port = random.choice(candidates)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                return port
    raise RuntimeError(f"no free loopback port found in {candidates}")


def free_ports(count: int) -> list[int]:
    return [free_port() for _ in range(count)]
