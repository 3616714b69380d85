"""GcPauses: a long collection is logged with its generation, a short one is not; the
survivors of a full collection are frozen, so that a cycle among them is collected only
after the thaw, which hands them all back to the collector."""

from __future__ import annotations

import gc
import logging
import re
import weakref
from collections.abc import Iterator

import pytest

from pykraft.server import gc_pauses
from pykraft.server.gc_pauses import GcPauses


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    yield
    gc.unfreeze()  # leave the test process's collector as it was


def full_collection_logged(pauses: GcPauses, caplog: pytest.LogCaptureFixture) -> list[str]:
    """What GcPauses logs of a full collection made while it is installed."""
    pauses.install()
    try:
        with caplog.at_level(logging.INFO, logger="pykraft.server.gc_pauses"):
            gc.collect(2)
    finally:
        pauses.uninstall()
    return caplog.messages


def test_a_long_collection_is_logged_with_its_generation(
        caplog: pytest.LogCaptureFixture) -> None:
    pauses = GcPauses(threshold_ms=0, freeze=False)  # every collection counts as long
    assert any("garbage collection of generation 2 paused the node for" in m
               for m in full_collection_logged(pauses, caplog))
    assert pauses.longest_ms > 0
    assert pauses._on_collection not in gc.callbacks
    assert gc.get_freeze_count() == 0


def test_a_short_collection_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    pauses = GcPauses(threshold_ms=60_000)
    pauses.install()
    pauses.install()  # once only
    try:
        with caplog.at_level(logging.INFO, logger="pykraft.server.gc_pauses"):
            gc.collect(0)
        assert gc.callbacks.count(pauses._on_collection) == 1
    finally:
        pauses.uninstall()
    assert caplog.messages == []


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_survivors_of_a_short_collection_are_not_frozen() -> None:
    pauses = GcPauses(threshold_ms=60_000, thaw_interval_s=3600)
    pauses.install()
    try:
        gc.collect(2)
        assert gc.get_freeze_count() == 0
    finally:
        pauses.uninstall()


def test_survivors_are_frozen_and_a_cycle_among_them_waits_for_the_thaw() -> None:
    pauses = GcPauses(threshold_ms=0, thaw_interval_s=3600)  # every collection is long
    pauses.install()
    try:
        first, second = Node(), Node()
        first.other, second.other = second, first  # a cycle, alive for now
        gone = weakref.ref(first)
        gc.collect(2)
        assert gc.get_freeze_count() > 0  # the survivors, the cycle among them
        del first, second
        gc.collect(2)
        assert gone() is not None  # frozen: not looked at
        pauses.thaw_interval_s = 0
        gc.collect(2)  # the thaw: handed back
        assert gc.get_freeze_count() == 0
        pauses.thaw_interval_s = 3600
        gc.collect(2)  # looks at everything, then freezes again
        assert gone() is None
        assert gc.get_freeze_count() > 0
    finally:
        pauses.uninstall()


def test_the_census_names_what_a_long_full_collection_walked(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """With PYKRAFT_GC_CENSUS=1, a long full collection is followed by how many objects
    it walked and of which types, before they are frozen."""
    monkeypatch.setenv("PYKRAFT_GC_CENSUS", "1")
    pauses = GcPauses(threshold_ms=0, thaw_interval_s=3600)
    walked = [Node() for _ in range(50_000)]  # among the most numerous
    census = [m for m in full_collection_logged(pauses, caplog)
              if m.startswith("the full collection walked")]
    assert len(census) == 1, census
    named = re.search(r"\bNode (\d+)", census[0])  # (others may still be alive)
    assert named is not None and int(named.group(1)) >= 50_000, census
    assert walked and gc.get_freeze_count() > 0


def test_a_pause_is_told_with_the_time_collecting_and_only_that_decides_the_freeze(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full collection whose node thread waited (for the GIL, or for a core) is logged
    with its whole pause and the CPU time it took; its survivors are frozen only when the
    collecting itself was long."""
    clocks = {"wall": 0.0, "cpu": 0.0}
    monkeypatch.setattr(gc_pauses.time, "perf_counter", lambda: clocks["wall"])
    monkeypatch.setattr(gc_pauses.time, "thread_time", lambda: clocks["cpu"])
    pauses = GcPauses(threshold_ms=100, thaw_interval_s=3600)
    full = {"generation": 2, "collected": 0, "uncollectable": 0}

    def collection(wall_s: float, cpu_s: float) -> None:
        pauses._on_collection("start", full)
        clocks["wall"] += wall_s
        clocks["cpu"] += cpu_s
        pauses._on_collection("stop", full)

    with caplog.at_level(logging.INFO, logger="pykraft.server.gc_pauses"):
        collection(0.5, 0.01)  # waited 490 ms
        assert caplog.messages == ["garbage collection of generation 2 paused the node for "
                                   "500 ms, 10 ms of it collecting (0 objects collected, "
                                   "0 uncollectable)"]
        assert gc.get_freeze_count() == 0
        collection(0.3, 0.25)  # walked a lot
        assert "paused the node for 300 ms, 250 ms of it collecting" in caplog.messages[-1]
        assert gc.get_freeze_count() > 0
    assert pauses.longest_ms == 500
    # a young collection is timed by the clock alone (the CPU clock is a system call)
    monkeypatch.setattr(gc_pauses.time, "thread_time", lambda: pytest.fail("thread_time"))
    young = {"generation": 0, "collected": 0, "uncollectable": 0}
    with caplog.at_level(logging.INFO, logger="pykraft.server.gc_pauses"):
        pauses._on_collection("start", young)
        clocks["wall"] += 0.25
        pauses._on_collection("stop", young)
    assert caplog.messages[-1] == ("garbage collection of generation 0 paused the node for "
                                   "250 ms (0 objects collected, 0 uncollectable)")
