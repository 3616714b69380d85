"""GcPauses: a collection that takes at least the threshold is logged with its
generation; shorter ones are not; uninstalling stops the timing."""

from __future__ import annotations

import gc
import logging

import pytest

from pykraft.server.gc_pauses import GcPauses


def test_a_long_collection_is_logged_with_its_generation(
        caplog: pytest.LogCaptureFixture) -> None:
    pauses = GcPauses(threshold_ms=0)  # every collection counts as long
    pauses.install()
    try:
        with caplog.at_level(logging.INFO, logger="pykraft.server.gc_pauses"):
            gc.collect(2)
    finally:
        pauses.uninstall()
    assert any("garbage collection of generation 2 paused the node for" in m
               for m in caplog.messages)
    assert pauses.longest_ms > 0
    assert pauses._on_collection not in gc.callbacks


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
