"""Group coordinator benchmarks: OffsetCommit throughput for one group, and how long the
coordinator takes to reload many groups' state after a crash.

One pykraft node on loopback (a subprocess).

1. Commit throughput: a confluent-kafka consumer in group G with a manual assignment of
   `--partitions` partitions commits the next offset of every one of them, for `--seconds`:
   synchronously (one commit in flight: latency-bound) and asynchronously (the client keeps
   several in flight; counted by their callbacks). Each commit is one OffsetCommit request
   written to `__consumer_offsets` and answered once appended.
2. Reload: `--groups` groups (default 10,000) each commit an offset for one partition
   (OffsetCommit over a raw connection, pipelined), then the node is killed with SIGKILL and
   started again; reported: the time from the restart until the node answers, and until an
   OffsetFetch of one sampled group per `__consumer_offsets` partition returns its offset
   (no COORDINATOR_LOAD_IN_PROGRESS), i.e. until every partition's groups are loaded.
   (A single node reloads from its own log; on a replicated cluster the new leader does the
   same replay.)

    .venv/bin/python benchmarks/group_offsets.py [--seconds 10] [--partitions 6]
        [--groups 10000]
"""

from __future__ import annotations

import argparse
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v8.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kio.static.primitive import i8  # noqa: E402

from pykraft.broker.group_coordinator.core import partition_for  # noqa: E402
from pykraft.testing import LocalCluster  # noqa: E402
from pykraft.testing.wire import WireClient  # noqa: E402

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
OFFSETS_PARTITIONS = 50


def commit_throughput(bootstrap: str, topic: str, partitions: int, seconds: float,
                      asynchronous: bool) -> float:
    done = 0

    def on_commit(error: Any, _offsets: Any) -> None:
        nonlocal done
        if error is None:
            done += 1

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "enable.auto.commit": False,
                              "group.id": "bench-async" if asynchronous else "bench-sync"}
    if asynchronous:
        config["on_commit"] = on_commit
    consumer = Consumer(config)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in range(partitions)],
                        asynchronous=False)  # the coordinator is found before timing
        offset, sent = 1, 0
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            offsets = [TopicPartition(topic, p, offset) for p in range(partitions)]
            offset += 1
            if asynchronous:
                try:
                    consumer.commit(offsets=offsets, asynchronous=True)
                    sent += 1
                except KafkaException:  # the client's queue is full: let callbacks run
                    pass
                consumer.poll(0)
                if sent - done > 1_000:
                    consumer.poll(0.001)
            else:
                consumer.commit(offsets=offsets, asynchronous=False)
                done += 1
        while asynchronous and done < sent and time.monotonic() - started < seconds + 30:
            consumer.poll(0.01)
        return done / (time.monotonic() - started)
    finally:
        consumer.close()


def commit_groups(bootstrap: str, topic: str, groups: list[str]) -> None:
    with WireClient(bootstrap, timeout_s=60) as client:
        deadline = time.monotonic() + 60
        while True:  # the first FindCoordinator creates __consumer_offsets
            found = client.request(FIND_COORDINATOR, 4, FindCoordinatorRequest(
                key_type=i8(0), coordinator_keys=tuple(groups[:1])))
            if found.coordinators[0].error_code == ErrorCode.none:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"no coordinator: {found.coordinators[0].error_code!r}")
            time.sleep(0.1)
        window = 200
        pending = 0
        for index, group in enumerate(groups):
            client.send(OFFSET_COMMIT, 8, OffsetCommitRequest(
                group_id=group, generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, topics=(OffsetCommitRequestTopic(
                    name=topic, partitions=(OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=index + 1,
                        committed_leader_epoch=-1, committed_metadata=""),)),)))
            pending += 1
            if pending == window:
                _drain(client, pending)
                pending = 0
        _drain(client, pending)


def _drain(client: WireClient, count: int) -> None:
    for _ in range(count):
        _, response = client.receive(OFFSET_COMMIT, 8)
        error = response.topics[0].partitions[0].error_code
        if error != ErrorCode.none:
            raise SystemExit(f"OffsetCommit failed: {error!r}")


def fetched(client: WireClient, topic: str, group: str) -> int | None:
    response = client.request(OFFSET_FETCH, 8, OffsetFetchRequest(groups=(
        OffsetFetchRequestGroup(group_id=group, topics=(
            OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),)),),
        require_stable=False))
    group_response = response.groups[0]
    if group_response.error_code != ErrorCode.none:
        return None
    return int(group_response.topics[0].partitions[0].committed_offset)


def reload_time(cluster: LocalCluster, topic: str, groups: list[str]) -> tuple[float, float]:
    sample: dict[int, tuple[str, int]] = {}
    for index, group in enumerate(groups):
        sample.setdefault(partition_for(group, OFFSETS_PARTITIONS), (group, index + 1))
    cluster.kill(signal.SIGKILL)
    started = time.monotonic()
    cluster.start()
    ready = time.monotonic() - started
    waiting = dict(sample)
    while waiting:
        try:
            with WireClient(cluster.bootstrap_servers, timeout_s=30) as client:
                for partition, (group, want) in list(waiting.items()):
                    if fetched(client, topic, group) == want:
                        del waiting[partition]
        except OSError:
            pass
        if waiting:
            time.sleep(0.01)
        if time.monotonic() - started > 600:
            raise SystemExit(f"{len(waiting)} offsets partitions never loaded")
    return ready, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--groups", type=int, default=10_000)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {platform.python_version()}")
    configs = {"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)}
    topic = "bench-offsets"
    with LocalCluster(configs=configs) as cluster:
        bootstrap = cluster.bootstrap_servers
        create_topic(bootstrap, topic, args.partitions)
        for asynchronous in (False, True):
            rate = commit_throughput(bootstrap, topic, args.partitions, args.seconds,
                                     asynchronous)
            mode = "async" if asynchronous else "sync"
            print(f"OffsetCommit, one group, {args.partitions} partitions per commit, {mode}: "
                  f"{rate:,.0f} commits/s")
    with LocalCluster(configs=configs) as cluster:  # a fresh log: only the groups' records
        create_topic(cluster.bootstrap_servers, topic, 1)
        groups = [f"reload-{i}" for i in range(args.groups)]
        started = time.monotonic()
        commit_groups(cluster.bootstrap_servers, topic, groups)
        print(f"{len(groups):,} groups committed in {time.monotonic() - started:.1f}s")
        ready, loaded = reload_time(cluster, topic, groups)
        print(f"kill -9 and restart: node answering after {ready:.2f}s, every offsets "
              f"partition's groups loaded after {loaded:.2f}s")


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replication_factor=1)])[topic].result(30)

if __name__ == "__main__":
    main()
