"""Helpers shared by the consumer group tests (classic and KIP-848)."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer


def assignments_of(consumers: list[Consumer]) -> list[set[int]]:
    return [{tp.partition for tp in c.assignment()} for c in consumers]


def poll_until(consumers: list[Consumer], done: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.poll(0.05)
        if done():
            return
    raise AssertionError(f"not done in {timeout_s}s: {assignments_of(consumers)}")
