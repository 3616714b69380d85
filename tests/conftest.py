from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Iterator

import pytest

from pykraft.testing.fixtures import pykraft_cluster, pykraft_node  # noqa: F401

# pytest-timeout fails a test past its timeout by raising in the main thread, which a test
# stuck in C (librdkafka) or in a teardown after that failure never sees: once, one such
# test kept CI waiting past its limit with nothing printed. Past the timeout and this grace,
# every thread's stack goes to stderr and the worker exits (xdist reports it crashed).
HANG_GRACE_S = 120
_stderr: list[int] = []  # a copy of stderr as it was before any test captured it


def pytest_configure(config: pytest.Config) -> None:
    assert sys.__stderr__ is not None
    _stderr.append(os.dup(sys.__stderr__.fileno()))


def pytest_unconfigure(config: pytest.Config) -> None:
    while _stderr:
        os.close(_stderr.pop())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    marker = item.get_closest_marker("timeout")
    timeout_s = float(marker.args[0] if marker is not None and marker.args
                      else item.config.getini("timeout") or 0)
    if timeout_s > 0 and _stderr:
        faulthandler.dump_traceback_later(timeout_s + HANG_GRACE_S, exit=True,
                                          file=_stderr[0])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
