"""The task-side writer alone (no Spark): tasks of one reused Python worker share a pooled
producer; a failed task's producer is purged and dropped; idle producers expire."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

from pykraft.spark.client import PRODUCERS, ProducerPool, write_batches
from pykraft.testing import LocalCluster
from tests.spark.helpers import consume_all, create_topic


def _rows(topic: str | None, values: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"topic": [topic] * len(values), "value": values})


def test_tasks_share_a_pooled_producer_and_a_failed_one_is_dropped(
        pykraft_cluster: LocalCluster, topic_name: Callable[[str], str]) -> None:
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("writer-pool")
    create_topic(bootstrap, topic, partitions=1)
    params = {"bootstrap.servers": bootstrap, "linger.ms": "5"}
    key = tuple(sorted(params.items()))
    seen = []
    for task in range(3):
        written = write_batches(params, None, iter([_rows(topic, [b"%d-%d" % (task, i)
                                                                 for i in range(1000)])]))
        assert written == 1000
        seen.append(PRODUCERS._idle[key][0])
    assert seen[0] is seen[1] is seen[2], "one producer served every task"
    with pytest.raises(ValueError, match="null topic"):
        write_batches(params, None, iter([_rows(None, [b"lost"])]))
    assert key not in PRODUCERS._idle, "the failed task's producer is not kept"
    assert write_batches(params, None, iter([_rows(topic, [b"after"])])) == 1
    assert PRODUCERS._idle[key][0] is not seen[0]
    values = [r.value for r in consume_all(bootstrap, topic, 1)]
    assert len(values) == 3001 and values[-1] == b"after" and b"lost" not in values


def test_idle_producers_expire() -> None:
    now = [0.0]
    pool = ProducerPool(idle_timeout_s=600, clock=lambda: now[0])
    params = {"bootstrap.servers": "127.0.0.1:1"}
    first = pool.borrow(params)
    pool.give_back(params, first)
    now[0] = 599
    assert pool.borrow(params) is first
    pool.give_back(params, first)
    now[0] = 1200
    assert pool.borrow({"bootstrap.servers": "127.0.0.1:2"}) is not first
    assert len(pool) == 0, "the producer idle for 601 s was dropped"
