"""The example pipelines in examples/spark/ run against real pykraft nodes and their output
matches a plain-Python computation over the same input."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from examples.spark import event_counts, mirror, replay_to_parquet
from pykraft.testing import LocalCluster
from tests.spark.helpers import consume_all, create_topic, produce

TopicName = Callable[[str], str]


@pytest.fixture(scope="module")
def second_cluster() -> Iterator[LocalCluster]:
    with LocalCluster() as cluster:
        yield cluster


def test_event_counts_match_plain_python(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName,
        tmp_path: Path) -> None:
    """JSON events -> windowed counts with a watermark -> compacted topic and Parquet: every
    (minute, page) count and duration sum equals the same computation in plain Python."""
    bootstrap = pykraft_cluster.bootstrap_servers
    source, sink = topic_name("page-views"), topic_name("page-view-counts")
    event_counts.main(["--bootstrap-servers", bootstrap, "--input-topic", source,
                       "--output-topic", sink, "--parquet", str(tmp_path / "parquet"),
                       "--checkpoint", str(tmp_path / "checkpoint"), "--demo", "3000"], spark)

    views: Counter[tuple[str, str]] = Counter()
    durations: Counter[tuple[str, str]] = Counter()
    for _key, event in event_counts.demo_events(3000):
        if event["page"] == "closer":
            continue  # its window is still open: the watermark has not passed it
        at = datetime.fromisoformat(str(event["event_time"]))
        window = at.replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
        views[(str(event["page"]), window)] += 1
        durations[(str(event["page"]), window)] += int(str(event["duration_ms"]))
    wanted = {k: (views[k], durations[k]) for k in views}
    assert len(wanted) == 50  # 10 minutes x 5 pages

    parquet = spark.read.parquet(str(tmp_path / "parquet")).collect()
    from_parquet = {(r.page, r.window_start.strftime("%Y-%m-%dT%H:%M:%SZ")):
                    (r.views, r.duration_ms) for r in parquet}
    assert len(parquet) == len(from_parquet)
    assert from_parquet == wanted

    latest: dict[str, dict[str, object]] = {}
    for record in consume_all(bootstrap, sink, 1):
        assert record.key is not None and record.value is not None
        latest[record.key.decode()] = json.loads(record.value)
    from_topic = {tuple(key.split("@")): (doc["views"], doc["duration_ms"])
                  for key, doc in latest.items()}
    assert from_topic == wanted


def test_mirror_keeps_partitions_keys_values_headers(
        spark: SparkSession, pykraft_cluster: LocalCluster, second_cluster: LocalCluster,
        topic_name: TopicName, tmp_path: Path) -> None:
    """Topics matching a pattern are copied to another cluster record for record, in order."""
    source, target = pykraft_cluster.bootstrap_servers, second_cluster.bootstrap_servers
    prefix = topic_name("mirrored")
    topics = {f"{prefix}-orders": 3, f"{prefix}-payments": 2}
    for topic, partitions in topics.items():
        create_topic(source, topic, partitions=partitions)
        produce(source, topic, ((i % partitions, f"{topic}-{i}".encode(), f"v{i}".encode())
                                for i in range(1200)), headers=True)
    create_topic(source, f"other-{prefix}", partitions=1)  # does not match: not copied
    mirror.main(["--source", source, "--target", target, "--topics", f"{prefix}-.*",
                 "--checkpoint", str(tmp_path / "checkpoint"), "--available-now"], spark)

    def ordered(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple]]:
        by_partition: dict[int, list[tuple]] = defaultdict(list)
        for r in sorted(consume_all(bootstrap, topic, partitions),
                        key=lambda r: (r.partition, r.offset)):
            by_partition[r.partition].append((r.key, r.value, r.headers))
        return dict(by_partition)

    for topic, partitions in topics.items():
        copied = ordered(target, topic, partitions)
        assert copied == ordered(source, topic, partitions)
        assert sum(len(records) for records in copied.values()) == 1200
    from confluent_kafka.admin import AdminClient
    assert f"other-{prefix}" not in AdminClient({"bootstrap.servers": target}) \
        .list_topics(timeout=10).topics


def test_replay_writes_exactly_the_range(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An offsets range of a topic replayed to Parquet, partitioned by Kafka partition."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("replayed")
    create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, ((i % 2, f"k{i}".encode(), f"v{i}".encode())
                               for i in range(1000)))
    output = tmp_path / "replay"
    replay_to_parquet.main([
        "--bootstrap-servers", bootstrap, "--topic", topic, "--text", "--output", str(output),
        "--starting-offsets", json.dumps({topic: {"0": 100, "1": -2}}),
        "--ending-offsets", json.dumps({topic: {"0": 200, "1": 50}})], spark)
    assert "150 records written" in capsys.readouterr().out
    rows = spark.read.parquet(str(output)).collect()
    got = sorted((r.partition, r.offset, r.key, r.value) for r in rows)
    # record i went to partition i % 2 at offset i // 2
    wanted = sorted((p, o, f"k{2 * o + p}", f"v{2 * o + p}")
                    for p, (low, high) in {0: (100, 200), 1: (0, 50)}.items()
                    for o in range(low, high))
    assert got == wanted
    assert sorted(d.name for d in output.iterdir() if d.is_dir()) == \
        ["partition=0", "partition=1"]
