"""Helpers shared by the tests that run the `pykraft` tools as a user does (subprocesses)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

T = TypeVar("T")


def pykraft(
    *argv: str,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run `pykraft ARGV...` in a fresh interpreter and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "pykraft", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=None if env is None else dict(env),
    )


def eventually(check: Callable[[], T], timeout_s: float = 15.0, interval_s: float = 0.2) -> T:
    """Retry `check` until it stops raising AssertionError: metadata reaches brokers a
    moment after the controller commits it."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(interval_s)
