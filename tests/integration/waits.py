"""Polling in integration tests: until a condition holds, or an assertion that says what
was awaited (and the last error the predicate raised, when it may raise)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T | None], what: str, timeout_s: float = 30.0, *,
             retry_on: tuple[type[BaseException], ...] = (),
             interval_s: float = 0.05) -> T:
    """The first truthy value of `predicate()`, polled every `interval_s`; errors of the
    types in `retry_on` (a node restarting, a leader moving) count as not yet."""
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while True:
        try:
            value = predicate()
        except retry_on as error:
            last = error
        else:
            if value:
                return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last error: {last})")
        time.sleep(interval_s)
