"""Metadata snapshots written and loaded by real nodes (server/metadata_snapshots.py).

With a tiny `metadata.log.max.record.bytes.between.snapshots` and no retention
(`metadata.max.retention.bytes=0`), creating topics makes every node write snapshots and
delete the metadata log below them. A node restarted on its data
dir starts from its latest snapshot and the log after it; a controller whose data dir was
wiped fetches the leader's snapshot (FetchSnapshot), ends with the same image as the
others, and can lead the quorum with every topic. `pykraft dump-log
--cluster-metadata-decoder` reads the snapshots the nodes write.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from pykraft.raft.snapshot import parse_snapshot_file_name
from pykraft.testing import LocalCluster
from tests.integration.test_cluster import agreed_with, metadata_view, topic_names, wait_for

SNAPSHOT_CONFIGS = {
    "metadata.log.max.record.bytes.between.snapshots": "1000",
    "metadata.log.max.snapshot.interval.ms": "0",
    "metadata.max.retention.bytes": "0",  # the log below each snapshot goes at once
}


def metadata_dir(node: LocalCluster) -> Path:
    return node.log_dir / "__cluster_metadata-0"


def snapshot_ends(node: LocalCluster) -> list[int]:
    """End offsets of the node's snapshot files, in order."""
    found = (parse_snapshot_file_name(p.name) for p in metadata_dir(node).glob("*.checkpoint"))
    return sorted(s.end_offset for s in found if s is not None)


def segment_bases(node: LocalCluster) -> list[int]:
    return sorted(int(p.stem) for p in metadata_dir(node).glob("*.log"))


def create_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)
                                   for name in names], operation_timeout=20)
    for future in futures.values():
        future.result(30)


def create_topic_after_a_kill(bootstrap: str, name: str) -> None:
    """The broker may still send to the killed controller once: that answer is
    REQUEST_TIMED_OUT (the outcome is unknown); try again, as a client would."""
    deadline = time.monotonic() + 30
    while True:
        try:
            create_topics(bootstrap, [name])
            return
        except KafkaException as error:
            code = error.args[0].code()
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if code != KafkaError.REQUEST_TIMED_OUT or time.monotonic() > deadline:
                raise


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2"})
    for value in values:
        producer.produce(topic, value, key=b"same-partition")
    assert producer.flush(30) == 0


def consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)
                         for partition in range(2)])  # no group: no rebalance to wait for
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        return values
    finally:
        consumer.close()


def log_since(node: LocalCluster, position: int) -> str:
    with node.log_path.open("rb") as file:
        file.seek(position)
        return file.read().decode(errors="replace")


def agreed_images(cluster: LocalCluster, node_ids: list[int]) -> tuple[int, str] | None:
    images = {cluster.metadata_image(n) for n in node_ids}
    return images.pop() if len(images) == 1 else None


def dump_snapshot(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pykraft", "dump-log", "--cluster-metadata-decoder",
         "--files", str(path)],
        capture_output=True, text=True, timeout=60)


def test_a_node_writes_snapshots_and_restarts_from_the_latest() -> None:
    """One combined node: snapshots appear as the log grows, the log below the latest is
    deleted, dump-log decodes them, and a restart loads the latest snapshot and then the log
    after it: every topic is back, and the controller (rebuilt from the snapshot) creates
    more."""
    with LocalCluster(configs=SNAPSHOT_CONFIGS) as node:
        names = [f"snap-{i}" for i in range(12)]
        create_topics(node.bootstrap_servers, names)
        ends = wait_for(lambda: snapshot_ends(node), "a snapshot")
        assert len(ends) == 1, "only the latest snapshot is kept"
        latest = next(metadata_dir(node).glob("*.checkpoint"))

        dumped = dump_snapshot(latest)
        assert dumped.returncode == 0, dumped.stderr
        payloads = [json.loads(line.split(" payload: ", 1)[1])
                    for line in dumped.stdout.splitlines() if " payload: " in line]
        kinds = [p["type"] for p in payloads]
        assert kinds[0] == "FEATURE_LEVEL_RECORD", kinds[:3]
        in_snapshot = {p["data"]["name"] for p in payloads if p["type"] == "TOPIC_RECORD"}
        assert in_snapshot and in_snapshot <= set(names)
        assert "SnapshotHeader" in dumped.stdout and "SnapshotFooter" in dumped.stdout

        produce(node.bootstrap_servers, "snap-0", [b"one", b"two", b"three"])
        before = metadata_view(node.bootstrap_servers)
        position = node.log_path.stat().st_size
        node.kill()
        node.start()
        after_start = log_since(node, position)
        assert "loaded metadata snapshot" in after_start, after_start[-3000:]
        view = wait_for(lambda: (v := metadata_view(node.bootstrap_servers))
                        and set(names) <= topic_names(v) and v, "the topics back")
        assert {t for t in view[1] if t[0] in names} == {t for t in before[1] if t[0] in names}
        # the broker side saw its partitions come from the snapshot: it serves them
        assert consume(node.bootstrap_servers, "snap-0", 3) == [b"one", b"two", b"three"]
        create_topics(node.bootstrap_servers, ["after-restart"])
        assert "after-restart" in topic_names(metadata_view(node.bootstrap_servers))


@pytest.mark.slow  # a fault test; in ./scripts/test-long to keep CI under 30 minutes
def test_a_wiped_controller_fetches_a_snapshot_and_can_lead() -> None:
    """Three controllers and a broker: the leader's log starts above 0 (below it, only its
    snapshot); a follower controller killed and wiped (formatted again) fetches the
    snapshot, ends with the same image digest as every other node, and once the others'
    leaders are killed in turn, leads the quorum with every topic and creates one more."""
    with LocalCluster(controllers=3, brokers=1, configs=SNAPSHOT_CONFIGS,
                      startup_timeout_s=60) as cluster:
        names = [f"kept-{i}" for i in range(12)]
        create_topics(cluster.bootstrap_servers, names)
        leader = wait_for(lambda: (a := cluster.active_controller()) > 0 and a, "a leader")
        wait_for(lambda: snapshot_ends(cluster.node(leader)), "a snapshot on the leader")
        assert segment_bases(cluster.node(leader)), "the leader keeps its log after it"

        wiped = next(i for i in cluster.controller_ids if i != leader)
        node = cluster.node(wiped)
        cluster.kill_node(wiped)
        shutil.rmtree(node.log_dir)
        node.format()
        position = node.log_path.stat().st_size
        cluster.restart_node(wiped)
        create_topics(cluster.bootstrap_servers, ["after-wipe"])
        wait_for(lambda: agreed_images(cluster, list(cluster.nodes)), "identical images")
        restarted = log_since(node, position)
        assert "loaded metadata snapshot" in restarted, restarted[-3000:]
        assert min(segment_bases(node)) > 0, "the wiped node never had the log's start"

        # make the wiped controller lead: kill whoever else leads, until it does
        def running_leader() -> int | None:
            found = cluster.active_controller()
            return found if found > 0 and cluster.running(found) else None

        deadline = time.monotonic() + 90
        while (current := wait_for(running_leader, "a running leader")) != wiped:
            assert time.monotonic() < deadline, "the wiped controller never led"
            for other in cluster.controller_ids:  # the other survivor must be up
                if other != current and not cluster.running(other):
                    cluster.restart_node(other)
            cluster.kill_node(current)
        create_topic_after_a_kill(cluster.bootstrap_servers, "led-by-the-wiped")
        broker = cluster.broker_ids[0]
        view: Any = wait_for(agreed_with(cluster, [broker], {*names, "after-wipe",
                                                             "led-by-the-wiped"}), "topics")
        assert {*names, "after-wipe", "led-by-the-wiped"} <= topic_names(view)
        running = [n for n in cluster.nodes if cluster.running(n)]
        wait_for(lambda: agreed_images(cluster, running), "identical images after the move")


@pytest.mark.slow
def test_a_combined_node_without_its_metadata_log_serves_its_partitions_again() -> None:
    """Three combined nodes: one (not the leader) loses only its metadata log (its data logs
    and meta.properties stay), restarts, fetches the leader's snapshot, and its broker --
    which saw every partition arrive in that one snapshot delta -- serves the records its
    partitions held; every node ends with the same image."""
    with LocalCluster(combined=3, configs=SNAPSHOT_CONFIGS, startup_timeout_s=60) as cluster:
        names = [f"data-{i}" for i in range(10)]
        create_topics(cluster.bootstrap_servers, names)
        for name in names:
            produce(cluster.bootstrap_servers, name, [f"{name}-{i}".encode() for i in range(3)])
        leader = wait_for(lambda: (a := cluster.active_controller()) > 0 and a, "a leader")
        wait_for(lambda: snapshot_ends(cluster.node(leader)), "a snapshot on the leader")
        wiped = next(i for i in cluster.controller_ids if i != leader)
        node = cluster.node(wiped)
        cluster.kill_node(wiped)
        shutil.rmtree(metadata_dir(node))
        position = node.log_path.stat().st_size
        cluster.restart_node(wiped)
        restarted = log_since(node, position)
        assert "loaded metadata snapshot" in restarted, restarted[-3000:]
        wait_for(lambda: agreed_images(cluster, list(cluster.nodes)), "identical images")
        for name in names:
            assert consume(cluster.bootstrap_servers, name, 3) == [
                f"{name}-{i}".encode() for i in range(3)]


def test_a_lagging_controller_loads_a_snapshot_over_the_image_it_has() -> None:
    """A follower controller stopped while topics are created and deleted comes back with a
    log that ends below the leader's log start: it loads its own state, then the leader's
    snapshot over it (topics deleted meanwhile go, new ones come), and matches every
    digest."""
    with LocalCluster(controllers=3, brokers=1, configs=SNAPSHOT_CONFIGS,
                      startup_timeout_s=60) as cluster:
        early = [f"early-{i}" for i in range(6)]
        create_topics(cluster.bootstrap_servers, early)
        leader = wait_for(lambda: (a := cluster.active_controller()) > 0 and a, "a leader")
        lagging = next(i for i in cluster.controller_ids if i != leader)
        node = cluster.node(lagging)
        wait_for(lambda: agreed_images(cluster, list(cluster.nodes)), "identical images")
        cluster.kill_node(lagging)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        for future in admin.delete_topics(early[:3], operation_timeout=20).values():
            future.result(30)
        create_topics(cluster.bootstrap_servers, [f"late-{i}" for i in range(12)])
        leader_node = cluster.node(cluster.active_controller())
        kept_end = max(segment_bases(node), default=0)
        wait_for(lambda: (ends := snapshot_ends(leader_node)) and ends[-1] > kept_end,
                 "a leader snapshot past the stopped controller's log")
        position = node.log_path.stat().st_size
        cluster.restart_node(lagging)
        wait_for(lambda: agreed_images(cluster, list(cluster.nodes)), "identical images")
        loads = [(int(m.group(1)), int(m.group(2))) for m in re.finditer(
            r"loaded metadata snapshot (\d+)-\d+ over the image at offset (-?\d+)",
            log_since(node, position))]
        own = [end for end, base in loads if base == -1]  # its own, at start-up (if any)
        fetched = [(end, base) for end, base in loads if base >= 0]
        assert fetched, f"no snapshot loaded over an image: {loads}"
        assert all(end > max(own, default=0) for end, _ in fetched)
