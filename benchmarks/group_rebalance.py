"""Rebalance time of a consumer group growing from 1 to N members, per group protocol.

One pykraft node on loopback, a topic of 60 partitions, real confluent-kafka consumers
joining one at a time (all polled from this thread, 5 ms each); a join counts as done when
the partitions are spread over all members again (each owns at least 60 // n). Protocols:
KIP-848 (`group.protocol=consumer`, server-side uniform assignor, heartbeat interval 500 ms),
classic eager (range) and classic cooperative (cooperative-sticky), both with 100 ms
heartbeats and no initial rebalance delay.

    .venv/bin/python benchmarks/group_rebalance.py [--members 20] [--partitions 60]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pykraft.testing import LocalCluster  # noqa: E402

NODE_CONFIGS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.min.session.timeout.ms": "500",
}
PROTOCOLS: dict[str, dict[str, Any]] = {
    "KIP-848 (consumer)": {"group.protocol": "consumer"},
    "classic eager (range)": {"partition.assignment.strategy": "range",
                              "heartbeat.interval.ms": 100, "session.timeout.ms": 6000},
    "classic cooperative-sticky": {"partition.assignment.strategy": "cooperative-sticky",
                                   "heartbeat.interval.ms": 100, "session.timeout.ms": 6000},
}
JOIN_TIMEOUT_S = 60.0


def grow(bootstrap: str, topic: str, group: str, extra: dict[str, Any], members: int,
         partitions: int) -> list[float]:
    """Seconds each join took until the group was balanced again."""
    consumers: list[Consumer] = []
    steps: list[float] = []
    try:
        for count in range(1, members + 1):
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **extra})
            consumer.subscribe([topic])
            consumers.append(consumer)
            started = time.monotonic()
            while True:
                for each in consumers:
                    each.poll(0.005)
                owned = [len(each.assignment()) for each in consumers]
                if sum(owned) == partitions and min(owned) >= partitions // count:
                    break
                if time.monotonic() - started > JOIN_TIMEOUT_S:
                    raise TimeoutError(f"{group}: member {count} not balanced: {owned}")
            steps.append(time.monotonic() - started)
    finally:
        for consumer in consumers:
            consumer.close()
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=60)
    args = parser.parse_args()
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"| protocol | 1 -> {args.members} members total | median join | max join |")
    print("| --- | --- | --- | --- |")
    with LocalCluster(configs=NODE_CONFIGS) as node:
        bootstrap = node.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("rebalance", args.partitions, 1)])["rebalance"].result(30)
        for index, (name, extra) in enumerate(PROTOCOLS.items()):
            steps = grow(bootstrap, "rebalance", f"bench-{index}", extra, args.members,
                         args.partitions)
            print(f"| {name} | {sum(steps):.1f} s | {statistics.median(steps) * 1000:.0f} ms "
                  f"| {max(steps) * 1000:.0f} ms |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
