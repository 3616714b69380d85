"""Spark fixtures: one local[2] SparkSession for the whole test session (start-up is ~6 s)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
if shutil.which("java") is None:
    # CI=true: scripts/setup --test installed Java, so its absence is a failure there, not a skip
    if os.environ.get("CI") == "true":
        pytest.fail("no Java runtime for Spark (scripts/setup --test installs one)")
    pytest.skip("no Java runtime for Spark (scripts/setup --test installs one)",
                allow_module_level=True)

from pyspark.sql import SparkSession  # noqa: E402

from pykraft.spark import local_session  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = local_session("pykraft-tests", master="local[2]")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def empty_consumer_pool() -> Iterator[None]:
    """Consumers pooled by tests that read in this process must not outlive the test (nor
    the cluster it used)."""
    from pykraft.spark.client import CONSUMERS

    yield
    CONSUMERS.close()


@pytest.fixture
def topic_name() -> Callable[[str], str]:
    """Unique topic names, so tests sharing one cluster never see each other's records."""
    def make(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"
    return make
