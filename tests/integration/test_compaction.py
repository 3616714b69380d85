"""Compaction on a real node with real clients: a changelog topic shrinks to about one
record per key and a consumer reading from the beginning sees the latest values; tombstones
disappear after delete.retention.ms; the cleaner's topic configs are described and altered
like any other; a kill -9 in the middle of cleaning leaves an intact, readable log."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from pykraft.cli.log_cleaner import cleaner_rows
from pykraft.testing import LocalCluster, free_port

SEGMENT_BYTES = 1_048_576
CLEANER_CONFIGS = {"log.cleaner.backoff.ms": "100"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    metrics = {"pykraft.metrics.listener": f"127.0.0.1:{free_port()}"}
    with LocalCluster(configs={**CLEANER_CONFIGS, **metrics}) as node:
        yield node


def _create(bootstrap: str, name: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1,
                                  config=config)])[name].result(30)


def _compacted(**overrides: str) -> dict[str, str]:
    config = {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES),
              "min.cleanable.dirty.ratio": "0.01", "segment.ms": "1000"}
    config.update(overrides)
    return config


def _update(bootstrap: str, topic: str, keys: int, updates: int, value_bytes: int = 100,
            seed: int = 1) -> dict[bytes, bytes]:
    """`updates` writes spread over `keys` keys; returns the latest value of each key."""
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "batch.num.messages": 500, "queue.buffering.max.messages": 500_000})
    latest: dict[bytes, bytes] = {}
    padding = b"." * value_bytes
    for version in range(updates):
        key = f"key-{version % keys if version < keys else rng.randrange(keys):06d}".encode()
        value = b"%d:" % version + padding
        while True:
            try:
                producer.produce(topic, value, key=key, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        latest[key] = value
        if version % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return latest


def _roll_active_segment(bootstrap: str, topic: str, latest: dict[bytes, bytes]) -> None:
    """Wait out segment.ms and rewrite one key, so the data before it leaves the active
    segment and becomes cleanable."""
    time.sleep(1.2)
    key = next(iter(latest))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    producer.produce(topic, latest[key], key=key, partition=0)
    assert producer.flush(30) == 0


def _read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}",
                         "enable.auto.commit": False, "fetch.queue.backoff.ms": 0})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, int(low))])
        found: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 120
        while high > low and (not found or found[-1][0] < high - 1):
            assert time.monotonic() < deadline, "reading the topic took too long"
            for message in consumer.consume(10_000, 1.0):
                assert message.error() is None, message.error()
                found.append((message.offset(), message.key(), message.value()))
        return found
    finally:
        consumer.close()


def _fold(found: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, bytes]:
    state: dict[bytes, bytes] = {}
    for _, key, value in found:
        assert key is not None
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return state


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError("condition not met in time")


def _log_bytes(cluster: LocalCluster, topic: str) -> int:
    return sum(path.stat().st_size for path in (cluster.log_dir / f"{topic}-0").glob("*.log"))


def test_changelog_shrinks_to_one_record_per_key(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    _create(bootstrap, "changelog", _compacted())
    keys = 1_000
    latest = _update(bootstrap, "changelog", keys, 50_000)
    _roll_active_segment(bootstrap, "changelog", latest)
    written = 50_001 * 100  # the values alone
    _wait_for(lambda: _log_bytes(cluster, "changelog") < written // 20, 90)
    # The cleaner may still owe a pass over the last segments rolled while we wrote: the
    # log is small by now, but only converges to one record per key once that pass ends.
    found = _read_all(bootstrap, "changelog")
    deadline = time.monotonic() + 90
    while len(found) > keys + 1:
        assert time.monotonic() < deadline, \
            f"{len(found)} records left: one per key, plus the one in the active segment"
        time.sleep(0.5)
        found = _read_all(bootstrap, "changelog")
    assert _fold(found) == latest
    offsets = [offset for offset, _, _ in found]
    assert offsets == sorted(set(offsets)) and offsets[-1] == 50_000


def _metrics_url(cluster: LocalCluster) -> str:
    return "http://" + cluster.extra_configs["pykraft.metrics.listener"]


def _scrape(cluster: LocalCluster) -> str:
    with urllib.request.urlopen(_metrics_url(cluster) + "/metrics", timeout=10) as response:
        text: str = response.read().decode()
    return text


def _cleaner_row(cluster: LocalCluster, topic: str) -> dict[str, float]:
    rows = [columns for name, _, columns in cleaner_rows(_scrape(cluster)) if name == topic]
    assert len(rows) == 1, rows
    return rows[0]


def _log_cleaner_cli(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pykraft", "log-cleaner", *args],
                          capture_output=True, text=True, timeout=60)


def test_cleaner_state_is_visible_through_metrics_and_the_cli(cluster: LocalCluster) -> None:
    """Before cleaning: the whole log is dirty, first dirty offset 0, never cleaned. After:
    the first dirty offset moved to where the cleaning stopped and the time is shown; the
    log metrics agree with what clients see."""
    bootstrap = cluster.bootstrap_servers
    _create(bootstrap, "watched", _compacted(**{"min.compaction.lag.ms": "3600000"}))
    latest = _update(bootstrap, "watched", 500, 12_000)
    _roll_active_segment(bootstrap, "watched", latest)
    before = _cleaner_row(cluster, "watched")
    assert before["first_dirty_offset"] == 0 and before["last_clean_timestamp_seconds"] == -1
    assert before["cleanable_bytes"] == 0 and before["dirty_ratio"] == 0  # held by the lag
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, "watched", incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    _wait_for(lambda: _cleaner_row(cluster, "watched")["last_clean_timestamp_seconds"] > 0, 60)
    after = _cleaner_row(cluster, "watched")
    assert after["first_dirty_offset"] > 0
    assert abs(after["last_clean_timestamp_seconds"] - time.time()) < 120

    shown = _log_cleaner_cli(cluster, "--describe", "--metrics-url", _metrics_url(cluster),
                             "--topic", "watched")
    assert shown.returncode == 0, shown.stderr
    header, line = shown.stdout.splitlines()
    assert header.split() == ["TOPIC", "PARTITION", "DIRTY-RATIO", "FIRST-DIRTY-OFFSET",
                              "CLEANABLE-BYTES", "LAST-CLEAN", "STATE"]
    topic, partition, ratio, first_dirty, _, last_clean, state = line.split()
    assert (topic, partition, state) == ("watched", "0", "ok")
    assert int(first_dirty) >= int(after["first_dirty_offset"]) and 0 <= float(ratio) <= 1
    assert last_clean.startswith(time.strftime("%Y-", time.gmtime()))

    text = _scrape(cluster)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    low, high = consumer.get_watermark_offsets(TopicPartition("watched", 0), timeout=10)
    consumer.close()
    assert f'pykraft_log_end_offset{{partition="0",topic="watched"}} {float(high)}' in text
    assert f'pykraft_log_start_offset{{partition="0",topic="watched"}} {float(low)}' in text
    assert "pykraft_metadata_leader_id 1.0" in text

    missing = _log_cleaner_cli(cluster, "--describe", "--metrics-url",
                               f"http://127.0.0.1:{free_port()}")
    assert missing.returncode == 1 and "cannot read metrics" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_tombstones_disappear_after_delete_retention(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    _create(bootstrap, "tombstones", _compacted(**{"delete.retention.ms": "500"}))
    latest = _update(bootstrap, "tombstones", 50, 20_000, value_bytes=200)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    deleted = sorted(latest)[:10]
    for key in deleted:
        producer.produce("tombstones", None, key=key, partition=0)
        del latest[key]
    assert producer.flush(30) == 0
    _roll_active_segment(bootstrap, "tombstones", latest)

    def tombstones_gone() -> bool:
        found = _read_all(bootstrap, "tombstones")
        return all(value is not None for _, _, value in found) and len(found) <= 41

    _wait_for(tombstones_gone, 90)
    assert _fold(_read_all(bootstrap, "tombstones")) == latest


def test_describe_and_alter_cleaner_configs(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    _create(bootstrap, "cleaner-configs", _compacted(**{"min.compaction.lag.ms": "1000"}))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, "cleaner-configs")
    entries = admin.describe_configs([resource])[resource].result(30)
    assert entries["cleanup.policy"].value == "compact"
    assert entries["min.cleanable.dirty.ratio"].value == "0.01"
    assert entries["min.compaction.lag.ms"].value == "1000"
    assert entries["max.compaction.lag.ms"].value == "9223372036854775807"
    assert entries["delete.retention.ms"].value == "86400000"
    assert entries["segment.ms"].value == "1000"
    _set_configs(bootstrap, "cleaner-configs",
                 {"delete.retention.ms": "1234", "cleanup.policy": "compact,delete"})
    entries = admin.describe_configs([resource])[resource].result(30)
    assert entries["delete.retention.ms"].value == "1234"
    assert entries["cleanup.policy"].value == "compact,delete"


def _cleaner_files(directory: Path) -> list[Path]:
    return [*directory.glob("*.cleaned"), *directory.glob("*.swap")]


def _set_configs(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    change = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()])
    admin.incremental_alter_configs([change])[change].result(30)


# seed 2 runs in ./scripts/test-long (CI under 30 minutes)
@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_kill_9_during_cleaning_leaves_an_intact_log(seed: int) -> None:
    with LocalCluster(configs=CLEANER_CONFIGS) as node:
        bootstrap = node.bootstrap_servers
        # written as a plain topic, then made compacted: one large dirty log to clean
        _create(bootstrap, "crashy", _compacted(**{"cleanup.policy": "delete"}))
        latest = _update(bootstrap, "crashy", 5_000, 80_000, value_bytes=150, seed=seed)
        _roll_active_segment(bootstrap, "crashy", latest)
        directory = node.log_dir / "crashy-0"
        _set_configs(bootstrap, "crashy", {"cleanup.policy": "compact"})
        deadline = time.monotonic() + 60
        while not _cleaner_files(directory):
            assert time.monotonic() < deadline, "the cleaner never started"
            time.sleep(0.005)
        time.sleep(random.Random(seed).uniform(0, 0.3))
        node.kill(signal.SIGKILL)
        node.start()
        assert _fold(_read_all(bootstrap, "crashy")) == latest, "nothing acknowledged is lost"
        _wait_for(lambda: len(_read_all(bootstrap, "crashy")) <= 5_001, 90)
        assert _fold(_read_all(bootstrap, "crashy")) == latest
        assert not _cleaner_files(directory)


@pytest.mark.slow
def test_a_million_updates_of_ten_thousand_keys_shrink_to_ten_thousand_records() -> None:
    with LocalCluster(configs=CLEANER_CONFIGS) as node:
        bootstrap = node.bootstrap_servers
        _create(bootstrap, "offsets-like", _compacted())
        latest = _update(bootstrap, "offsets-like", 10_000, 1_000_000, value_bytes=20)
        _roll_active_segment(bootstrap, "offsets-like", latest)
        _wait_for(lambda: len(_read_all(bootstrap, "offsets-like")) <= 10_001, 600)
        found = _read_all(bootstrap, "offsets-like")
        assert _fold(found) == latest


def test_cleaner_disabled_leaves_compacted_topics_alone() -> None:
    with LocalCluster(configs={**CLEANER_CONFIGS, "log.cleaner.enable": "false"}) as node:
        bootstrap = node.bootstrap_servers
        _create(bootstrap, "uncleaned", _compacted())
        latest = _update(bootstrap, "uncleaned", 10, 2_000)
        _roll_active_segment(bootstrap, "uncleaned", latest)
        time.sleep(2)
        found = _read_all(bootstrap, "uncleaned")
        assert len(found) == 2_001 and _fold(found) == latest
