"""The node sets glibc's allocator thresholds at start-up (server/malloc_tuning.py)."""

from __future__ import annotations

import platform

import pytest

from pykraft.server.malloc_tuning import tune_malloc


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_takes_the_thresholds() -> None:
    # mallopt answers 0 for a parameter number it does not know: a wrong constant fails here
    assert tune_malloc() is True
