"""pytest fixtures. Use from a conftest.py: `from pykraft.testing.fixtures import *`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pykraft.testing.local_cluster import LocalCluster

__all__ = ["pykraft_cluster", "pykraft_node"]


@pytest.fixture(scope="session")
def pykraft_cluster() -> Iterator[LocalCluster]:
    """One real single-node cluster (a subprocess) shared by a test session."""
    with LocalCluster() as cluster:
        yield cluster


@pytest.fixture
def pykraft_node() -> Iterator[LocalCluster]:
    """A fresh node for one test, for tests that kill, restart or reconfigure it."""
    with LocalCluster() as cluster:
        yield cluster
