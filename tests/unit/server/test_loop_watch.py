"""LoopWatch: a callback that holds the event loop past `held_ms` is logged once, with the
stack of the code holding it, and the loop's turning again is logged with the length; a
loop that turns keeps the log quiet."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from pykraft.server.loop_watch import LoopWatch


def hold_the_loop_for(seconds: float) -> None:
    time.sleep(seconds)  # the stack the warning must show


async def watched(hold_s: float) -> LoopWatch:
    watch = LoopWatch(asyncio.get_running_loop(), held_ms=200, beat_s=0.02)
    watch.start()
    try:
        await asyncio.sleep(0.1)
        hold_the_loop_for(hold_s)
        await asyncio.sleep(0.2)  # the beat resumes; the watcher sees it
    finally:
        watch.stop()
    return watch


def test_a_hold_is_logged_once_with_the_stack_and_its_end(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="pykraft.server.loop_watch"):
        watch = asyncio.run(watched(0.8))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert watch.holds == 1
    assert len(warnings) == 1
    assert "the event loop has been held for" in warnings[0].getMessage()
    assert "hold_the_loop_for" in warnings[0].getMessage()
    ends = [m for m in caplog.messages if m.startswith("the event loop turned again after")]
    assert len(ends) == 1
    assert int(ends[0].split()[-2]) >= 600


def test_a_turning_loop_is_not_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="pykraft.server.loop_watch"):
        watch = asyncio.run(watched(0.05))
    assert watch.holds == 0
    assert caplog.messages == []
