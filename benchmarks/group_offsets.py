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
   (A single node reloads from its own log.)
3. Failover: 1 controller + 3 brokers, `__consumer_offsets` with 3 replicas; the same
   groups commit, then the broker coordinating most of them is killed with SIGKILL;
   reported: the time until one group of each offsets partition it led gets its committed
   offset from its new coordinator (found again with FindCoordinator).

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


def find_coordinators(bootstrap: str, groups: list[str]) -> dict[str, tuple[int, str]]:
    """group -> (coordinator node id, "host:port"), by batched FindCoordinator v4 (the first
    one creates __consumer_offsets; retried until every group has a coordinator)."""
    found: dict[str, tuple[int, str]] = {}
    deadline = time.monotonic() + 60
    with WireClient(bootstrap, timeout_s=60) as client:
        while len(found) < len(groups):
            missing = [g for g in groups if g not in found]
            for start in range(0, len(missing), 500):
                answer = client.request(FIND_COORDINATOR, 4, FindCoordinatorRequest(
                    key_type=i8(0), coordinator_keys=tuple(missing[start : start + 500])))
                for coordinator in answer.coordinators:
                    if coordinator.error_code == ErrorCode.none:
                        found[coordinator.key] = (int(coordinator.node_id),
                                                  f"{coordinator.host}:{coordinator.port}")
            if len(found) < len(groups):
                if time.monotonic() > deadline:
                    raise SystemExit(f"{len(groups) - len(found)} groups have no coordinator")
                time.sleep(0.1)
    return found


def commit_groups(bootstrap: str, topic: str, groups: list[str]) -> None:
    """Each group commits offset index+1 of partition 0, pipelined to its coordinator."""
    coordinators = find_coordinators(bootstrap.split(",")[0], groups)
    by_address: dict[str, list[int]] = {}
    for index, group in enumerate(groups):
        by_address.setdefault(coordinators[group][1], []).append(index)
    for address, indexes in by_address.items():
        with WireClient(address, timeout_s=60) as client:
            window, pending = 200, 0
            for index in indexes:
                client.send(OFFSET_COMMIT, 8, OffsetCommitRequest(
                    group_id=groups[index], generation_id_or_member_epoch=-1, member_id="",
                    group_instance_id=None, topics=(OffsetCommitRequestTopic(
                        name=topic, partitions=(OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=index + 1,
                            committed_leader_epoch=-1, committed_metadata=""),)),)))
                pending += 1
                if pending == window:
                    _drain(client, pending)
                    pending = 0
            _drain(client, pending)


def failover_time(cluster: LocalCluster, topic: str, groups: list[str]) -> tuple[float, int]:
    """kill -9 of the broker coordinating the most groups: seconds until one group of each
    offsets partition it led answers OffsetFetch, with its offset, from its new
    coordinator; and how many groups moved."""
    coordinators = find_coordinators(cluster.bootstrap_servers.split(",")[0], groups)
    counts: dict[int, int] = {}
    for node_id, _ in coordinators.values():
        counts[node_id] = counts.get(node_id, 0) + 1
    victim = max(counts, key=lambda node_id: counts[node_id])
    sample: dict[int, tuple[str, int]] = {}
    for index, group in enumerate(groups):
        if coordinators[group][0] == victim:
            sample.setdefault(partition_for(group, OFFSETS_PARTITIONS), (group, index + 1))
    survivors = ",".join(cluster.node(b).bootstrap_servers for b in cluster.broker_ids
                         if b != victim)
    cluster.kill_node(victim, signal.SIGKILL)
    started = time.monotonic()
    waiting = dict(sample)
    while waiting:
        try:
            moved = find_coordinators(survivors.split(",")[0],
                                      [group for group, _ in waiting.values()])
            for partition, (group, want) in list(waiting.items()):
                node_id, address = moved[group]
                if node_id == victim:
                    continue
                with WireClient(address, timeout_s=30) as client:
                    if fetched(client, topic, group) == want:
                        del waiting[partition]
        except (OSError, SystemExit):
            pass
        if waiting:
            time.sleep(0.01)
        if time.monotonic() - started > 600:
            raise SystemExit(f"{len(waiting)} offsets partitions never moved")
    return time.monotonic() - started, counts[victim]


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
    three = {**configs, "broker.heartbeat.interval.ms": "2000"}
    with LocalCluster(controllers=1, brokers=3, configs=three, startup_timeout_s=60) as cluster:
        create_topic(cluster.bootstrap_servers, topic, 1, replication_factor=3)
        groups = [f"failover-{i}" for i in range(args.groups)]
        commit_groups(cluster.bootstrap_servers, topic, groups)
        took, moved = failover_time(cluster, topic, groups)
        print(f"3 brokers, __consumer_offsets RF=3: kill -9 of the coordinator of {moved:,} "
              f"of {len(groups):,} groups; their offsets served by the new coordinators "
              f"after {took:.2f}s")


def create_topic(bootstrap: str, topic: str, partitions: int,
                 replication_factor: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replication_factor=replication_factor)])[topic].result(30)

if __name__ == "__main__":
    main()
