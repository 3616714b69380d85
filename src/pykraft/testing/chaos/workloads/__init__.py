"""The chaos workloads: real clients (confluent-kafka) writing the history a checker reads.

    workload = make_workload("queue", cluster.bootstrap_servers, history, rng, round_)
    workload.setup()       # its topics, every partition with a leader
    workload.start()       # client threads run; faults come and go
    workload.stop(30.0)    # no new invocations; open ones settle or become info
    workload.drain(60.0)   # after healing: the final reads of every partition

Workloads: "queue" (queue.py), "transactions" (transactions.py), "metadata" (metadata.py).
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from pykraft.testing.chaos.history import History

__all__ = ["WORKLOADS", "Workload", "make_workload"]

WORKLOADS = ("queue", "transactions", "metadata")


class Workload(Protocol):
    name: str
    topics: list[str]  # the topics it writes; names carry the round

    def setup(self) -> None: ...
    def start(self) -> None: ...
    def stop(self, timeout_s: float) -> None: ...
    def drain(self, timeout_s: float) -> None: ...


def make_workload(name: str, bootstrap: str, history: History, rng: random.Random,
                  round_: int, **options: Any) -> Workload:
    """A workload by name; `options` are its constructor's keyword arguments."""
    if name == "queue":
        from pykraft.testing.chaos.workloads.queue import QueueWorkload
        return QueueWorkload(bootstrap, history, rng, round_, **options)
    if name == "transactions":
        from pykraft.testing.chaos.workloads.transactions import TransactionsWorkload
        return TransactionsWorkload(bootstrap, history, rng, round_, **options)
    if name == "metadata":
        from pykraft.testing.chaos.workloads.metadata import MetadataWorkload
        return MetadataWorkload(bootstrap, history, rng, round_, **options)
    raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
