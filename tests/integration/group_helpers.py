"""Helpers shared by the consumer group tests (classic and KIP-848)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer


@contextmanager
def closing_all(consumers: list[Consumer]) -> Iterator[list[Consumer]]:
    """Close every consumer in `consumers` (as the list is when the block ends), whether the
    block failed or not, while the cluster is still up. A confluent-kafka consumer left to
    the garbage collector with a rebalance callback pending blocks in its destructor for
    good (librdkafka waits for the callback the destructor has already dropped), and so
    does close() once the cluster is gone: either way the test worker hangs wherever the
    collector happens to run, long after the test that leaked it. Closing twice is
    harmless."""
    try:
        yield consumers
    finally:
        for consumer in consumers:
            consumer.close()


def assignments_of(consumers: list[Consumer]) -> list[set[int]]:
    return [{tp.partition for tp in c.assignment()} for c in consumers]


def poll_until(consumers: list[Consumer], done: Any, timeout_s: float = 20.0,
               on_record: Any = None) -> None:
    """Poll every consumer until `done()`; a record polled meanwhile goes to
    `on_record(consumer, message)` if given, else it is dropped."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for consumer in consumers:
            message = consumer.poll(0.05)
            if on_record is not None and message is not None and message.error() is None:
                on_record(consumer, message)
        if done():
            return
    raise AssertionError(f"not done in {timeout_s}s: {assignments_of(consumers)}")


# A group member in its own process, printing "assigned" once it owns partitions, "R p o" per
# record read and "C p:o ..." per commit (every `commit_every` records, 0 = never), so a test
# can kill -9 it at a known point. `client`: "confluent" (classic protocol, short session),
# "consumer" (confluent-kafka with group.protocol=consumer, KIP-848), "kafka-python", "aiokafka".
_MEMBER_SCRIPT = """
import sys
bootstrap, group, topic, client, commit_every = sys.argv[1:4] + [sys.argv[4], int(sys.argv[5])]
if client in ("confluent", "consumer"):
    from confluent_kafka import Consumer
    config = {"bootstrap.servers": bootstrap, "group.id": group,
              "auto.offset.reset": "earliest", "enable.auto.commit": False}
    if client == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config.update({"session.timeout.ms": 1000, "heartbeat.interval.ms": 100})
    c = Consumer(config)
    c.subscribe([topic])
    told, read = False, 0
    while True:
        m = c.poll(0.05)
        if m is not None and m.error() is None:
            print(f"R {m.partition()} {m.offset()}", flush=True)
            read += 1
            if commit_every and read % commit_every == 0:
                done = c.commit(asynchronous=False)
                print("C " + " ".join(f"{tp.partition}:{tp.offset}" for tp in done), flush=True)
        if c.assignment() and not told:
            print("assigned", flush=True)
            told = True
elif client == "kafka-python":
    import time
    from kafka import KafkaConsumer
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                      session_timeout_ms=1000, heartbeat_interval_ms=100,
                      auto_offset_reset="earliest", enable_auto_commit=False)
    while not c.partitions_for_topic(topic):  # see kafka_python_consumer in test_groups.py
        time.sleep(0.01)
    c.subscribe([topic])
    told = False
    while True:
        c.poll(timeout_ms=500)
        if c.assignment() and not told:
            print("assigned", flush=True)
            told = True
else:
    import asyncio
    from aiokafka import AIOKafkaConsumer
    async def main():
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             session_timeout_ms=1000, heartbeat_interval_ms=100,
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        told = False
        while True:
            await c.getmany(timeout_ms=50)
            if c.assignment() and not told:
                print("assigned", flush=True)
                told = True
    asyncio.run(main())
"""


def start_member(bootstrap: str, group: str, topic: str, client: str = "confluent",
                 commit_every: int = 0) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _MEMBER_SCRIPT, bootstrap, group, topic,
                             client, str(commit_every)], stdout=subprocess.PIPE, text=True)
