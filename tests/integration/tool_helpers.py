"""Helpers shared by the tests that run the `pykraft` tools as a user does (subprocesses)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

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


def confluent_round_trip(config: dict[str, Any], topic: str, value: bytes) -> None:
    """confluent-kafka with `config` produces `value` to partition 0 of `topic` (auto-created)
    and reads it back with an assigned consumer: the client's whole path through a listener."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer(config)
    delivered: list[Any] = []
    producer.produce(topic, value, on_delivery=lambda error, _: delivered.append(error))
    assert producer.flush(15) == 0 and delivered == [None]
    consumer = Consumer({**config, "group.id": f"g-{topic}", "enable.auto.commit": False})

    def polled() -> Any:
        message = consumer.poll(0.5)
        assert message is not None and message.error() is None, message
        return message

    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert eventually(polled, timeout_s=15).value() == value
    finally:
        consumer.close()
