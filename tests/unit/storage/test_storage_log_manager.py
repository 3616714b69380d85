"""LogManager: placement over log dirs, checkpoints, clean and unclean restarts, deletion."""

from __future__ import annotations

import json
import os
import random
import uuid
from pathlib import Path

import pytest

from pykraft.errors import InconsistentTopicId, KafkaStorageError
from pykraft.storage import log_manager
from pykraft.storage.checkpoint import read_offsets_checkpoint
from pykraft.storage.log import Log
from pykraft.storage.log_config import LogConfig
from pykraft.storage.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    READAHEAD_PROCESSES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    LogManager,
)
from pykraft.storage.readahead import Readahead
from tests.unit.storage.storage_helpers import all_batches, make_batch, small_config

TOPIC_ID = uuid.UUID(int=0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0)


def _manager(tmp_path: Path, count: int = 2) -> LogManager:
    dirs = [tmp_path / f"data{i}" for i in range(count)]
    manager = LogManager(dirs, {"log.segment.bytes": str(1 << 20)}, rng=random.Random(7))
    manager.load(now_ms=0)
    return manager


def test_logs_spread_over_dirs_and_survive_a_clean_restart(tmp_path: Path) -> None:
    """New logs go to the least loaded dir; a clean close restores every offset on load."""
    manager = _manager(tmp_path)
    config = small_config(segment_bytes=400)
    logs = {}
    for partition in range(4):
        log = manager.get_or_create_log(
            "my.topic_with-dash", partition, topic_id=TOPIC_ID, config=config, now_ms=0
        )
        for _ in range(partition + 3):
            log.append_as_leader(make_batch(2, value_size=60), leader_epoch=1, now_ms=0)
        log.update_high_watermark(log.log_end_offset - 1)
        logs[partition] = (log.log_end_offset, log.high_watermark, all_batches(log))
    assert manager.get_log("my.topic_with-dash", 3) is not None
    homes = [manager.log_dir_of("my.topic_with-dash", p) for p in range(4)]
    assert homes.count(tmp_path / "data0") == homes.count(tmp_path / "data1") == 2
    first = manager.get_log("my.topic_with-dash", 3)
    assert first is not None
    first.update_high_watermark(first.log_end_offset)
    assert first.delete_retention_segments(now_ms=2_000) == 0  # within 7 days of the records
    first.maybe_increment_log_start_offset(first.log_end_offset - 3)
    manager.close(broker_epoch=42)
    marker = json.loads((tmp_path / "data0" / CLEAN_SHUTDOWN_FILE).read_text())
    assert marker == {"version": 0, "brokerEpoch": 42}

    again = LogManager([tmp_path / "data0", tmp_path / "data1"], {})
    again.load(now_ms=0, topic_configs={"my.topic_with-dash": config})
    assert all(again.had_clean_shutdown.values())
    assert not (tmp_path / "data0" / CLEAN_SHUTDOWN_FILE).exists()
    for partition, (end, high_watermark, batches) in logs.items():
        loaded = again.get_log("my.topic_with-dash", partition)
        assert loaded is not None and loaded.topic_id == TOPIC_ID
        assert loaded.log_end_offset == loaded.recovery_point == end
        if partition == 3:
            assert loaded.log_start_offset == end - 3
        else:
            assert loaded.high_watermark == high_watermark
            assert all_batches(loaded) == batches
    again.close()


def test_checkpoint_files_use_kafkas_text_format(tmp_path: Path) -> None:
    """Version 0, a count, then 'topic partition offset' lines, per log dir."""
    manager = _manager(tmp_path, count=1)
    log = manager.get_or_create_log("t", 0, topic_id=TOPIC_ID, config=LogConfig(), now_ms=0)
    log.append_as_leader(make_batch(3), leader_epoch=0, now_ms=0)
    log.update_high_watermark(2)
    log.flush()
    manager.checkpoint()
    data = tmp_path / "data0"
    assert (data / RECOVERY_POINT_CHECKPOINT).read_text() == "0\n1\nt 0 3\n"
    assert (data / REPLICATION_OFFSET_CHECKPOINT).read_text() == "0\n1\nt 0 2\n"
    assert (data / LOG_START_OFFSET_CHECKPOINT).read_text() == "0\n0\n"
    assert read_offsets_checkpoint(data / RECOVERY_POINT_CHECKPOINT) == {("t", 0): 3}
    epochs = (log.dir / "leader-epoch-checkpoint").read_text()
    assert epochs == "0\n1\n0 0\n"
    manager.close()


def test_unclean_restart_recovers_from_the_checkpointed_recovery_point(tmp_path: Path) -> None:
    """Without the clean marker, data above the recovery point is re-validated; tears are cut."""
    manager = _manager(tmp_path, count=1)
    log = manager.get_or_create_log("t", 0, topic_id=TOPIC_ID, config=LogConfig(), now_ms=0)
    for _ in range(3):
        log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=0)
    log.flush()
    manager.checkpoint()
    log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=0)
    segment_path = log.segments[-1].log_path
    manager.release_locks()  # the process dies: no flush, no marker
    with open(segment_path, "r+b") as stream:
        stream.truncate(segment_path.stat().st_size - 3)
    again = LogManager([tmp_path / "data0"], {})
    again.load(now_ms=0)
    assert again.had_clean_shutdown == {tmp_path / "data0": False}
    recovered = again.get_log("t", 0)
    assert recovered is not None and recovered.log_end_offset == 6
    recovered.check_invariants()
    again.close()


def test_delete_log_and_interrupted_deletions(tmp_path: Path) -> None:
    """delete_log removes the directory; a leftover '-delete' dir is removed at load."""
    manager = _manager(tmp_path, count=1)
    manager.get_or_create_log("gone", 0, topic_id=TOPIC_ID, config=LogConfig(), now_ms=0)
    assert manager.delete_log("gone", 0)
    assert not manager.delete_log("gone", 0)
    assert not any((tmp_path / "data0").glob("gone-0*"))
    manager.close()
    leftover = tmp_path / "data0" / f"other-1.{uuid.uuid4().hex}-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"")
    metadata = tmp_path / "data0" / "__cluster_metadata-0"
    metadata.mkdir()
    again = LogManager([tmp_path / "data0"], {})
    again.load(now_ms=0)
    assert not leftover.exists()
    assert again.logs() == [] and metadata.exists()  # the raft log is not ours to load
    again.close()


def test_topic_id_mismatch_and_directory_lock(tmp_path: Path) -> None:
    """A partition recreated under another topic id is refused; a locked dir is refused."""
    manager = _manager(tmp_path, count=1)
    manager.get_or_create_log("t", 0, topic_id=TOPIC_ID, config=LogConfig(), now_ms=0)
    with pytest.raises(InconsistentTopicId):
        manager.get_or_create_log("t", 0, topic_id=uuid.uuid4(), config=LogConfig(), now_ms=0)
    second = LogManager([tmp_path / "data0"], {})
    with pytest.raises(KafkaStorageError, match="lock"):
        second.load(now_ms=0)
    manager.close()
    second.load(now_ms=0)
    second.close()


def test_retention_and_flush_run_over_all_logs(tmp_path: Path) -> None:
    """run_retention and flush_due apply each log's own config."""
    manager = _manager(tmp_path, count=1)
    expiring = small_config(segment_bytes=300, retention_ms=100, flush_ms=1000)
    kept = small_config(segment_bytes=300, retention_ms=-1)
    for topic, config in (("expiring", expiring), ("kept", kept)):
        log = manager.get_or_create_log(topic, 0, topic_id=TOPIC_ID, config=config, now_ms=0)
        for _ in range(6):
            log.append_as_leader(make_batch(2, timestamp=0, value_size=60), leader_epoch=0,
                                 now_ms=0)
        log.update_high_watermark(log.log_end_offset)
    assert manager.run_retention(now_ms=10_000) > 0
    expired, intact = manager.get_log("expiring", 0), manager.get_log("kept", 0)
    assert expired is not None and intact is not None
    assert expired.log_start_offset == expired.log_end_offset
    assert intact.log_start_offset == 0
    assert manager.flush_due(now_ms=10_000) >= 1
    assert expired.recovery_point == expired.log_end_offset
    manager.close()


def test_flush_due_looks_only_at_rolled_logs_and_those_with_a_flush_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An idle log (no roll, flush.ms unset) is not looked at; a roll, or a finite flush.ms
    set later, brings a log to flush_due's attention, and a flushed roll leaves it."""
    manager = _manager(tmp_path, count=1)
    rolling, idle = (manager.get_or_create_log(topic, 0, topic_id=TOPIC_ID,
                                               config=small_config(segment_bytes=300),
                                               now_ms=0) for topic in ("rolling", "idle"))
    looked_at: list[str] = []
    real = Log.flush_due

    def counted(log: Log, now_ms: int) -> bool:  # which of the two logs are looked at
        if log in (rolling, idle):
            looked_at.append(log.topic)
        return real(log, now_ms)
    monkeypatch.setattr(Log, "flush_due", counted)
    assert manager.flush_due(now_ms=1_000) == 0 and looked_at == []
    for _ in range(6):  # past segment.bytes: the log rolls
        rolling.append_as_leader(make_batch(2, timestamp=0, value_size=60), leader_epoch=0,
                                 now_ms=0)
    assert len(rolling.segments) > 1 and rolling.recovery_point == 0
    assert manager.flush_due(now_ms=2_000) == 1 and looked_at == ["rolling"]
    assert rolling.recovery_point > 0
    assert manager.flush_due(now_ms=3_000) == 0 and looked_at == ["rolling"]  # done with it
    idle.update_config(small_config(segment_bytes=300, flush_ms=1_000))
    manager.flush_due(now_ms=4_000)
    assert looked_at == ["rolling", "idle"]
    manager.close()


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _mappings() -> int:
    """Mappings of this test's files (not all: the allocator maps and unmaps memory)."""
    return sum(1 for line in Path("/proc/self/maps").read_text().splitlines()
               if "/idle-" in line)


@pytest.mark.parametrize("clean", [True, False])
def test_idle_logs_hold_no_descriptors_or_mappings(tmp_path: Path, clean: bool) -> None:
    """A broker may host 100,000 partitions: a log that never saw a record holds no open
    file and no index mapping, when created and after a clean or unclean restart; its
    first append opens them and everything reads back."""
    manager = _manager(tmp_path, count=1)
    config = LogConfig.from_configs({"index.interval.bytes": "1"}, {})
    before = (_open_descriptors(), _mappings())
    for partition in range(200):
        manager.get_or_create_log("idle", partition, topic_id=TOPIC_ID, config=config,
                                  now_ms=0, sync=False)
    manager.sync_created_logs()
    assert (_open_descriptors(), _mappings()) == before
    assert sorted(p.name for p in (tmp_path / "data0" / "idle-7").iterdir()) == [
        "00000000000000000000.log", "partition.metadata"]
    if clean:
        manager.close(broker_epoch=1)
    else:
        manager.release_locks()
    again = LogManager([tmp_path / "data0"], {})
    before = (_open_descriptors(), _mappings())
    again.load(now_ms=0, topic_configs={"idle": config})
    assert (_open_descriptors(), _mappings()) == (before[0] + 1, before[1])  # + the dir lock
    log = again.get_log("idle", 7)
    assert log is not None
    for _ in range(3):
        log.append_as_leader(make_batch(2, value_size=60), leader_epoch=1, now_ms=0)
    assert log.log_end_offset == 6 and len(all_batches(log)) == 3
    assert log.read(2, 10_000).records  # found through the index the appends wrote
    log.roll(now_ms=1)
    log.roll(now_ms=2)  # rolls an empty active segment: it is replaced, files stay sane
    again.close(broker_epoch=2)
    third = LogManager([tmp_path / "data0"], {})
    third.load(now_ms=0, topic_configs={"idle": config})
    reopened = third.get_log("idle", 7)
    assert reopened is not None and reopened.log_end_offset == 6
    assert len(all_batches(reopened)) == 3


def test_checkpoints_taken_earlier_never_overwrite_later_ones(tmp_path: Path) -> None:
    """take_checkpoints on the logs' thread, write_checkpoints from another: offsets taken
    before the last ones written are dropped, so a file never goes back."""
    manager = _manager(tmp_path, count=1)
    log = manager.get_or_create_log("t", 0, topic_id=TOPIC_ID, config=LogConfig(), now_ms=0)
    log.append_as_leader(make_batch(3), leader_epoch=0, now_ms=0)
    log.update_high_watermark(1)
    early = manager.take_checkpoints()
    log.update_high_watermark(3)
    late = manager.take_checkpoints()
    manager.write_checkpoints(late)
    manager.write_checkpoints(early)  # a slow writer of older offsets comes last
    data = tmp_path / "data0"
    assert read_offsets_checkpoint(data / REPLICATION_OFFSET_CHECKPOINT) == {("t", 0): 3}
    log.update_high_watermark(2)
    manager.checkpoint()  # a new taking is written
    assert read_offsets_checkpoint(data / REPLICATION_OFFSET_CHECKPOINT) == {("t", 0): 2}
    manager.close()


def test_checkpoints_taken_a_slice_at_a_time(tmp_path: Path) -> None:
    """A taking begun with no keys and filled slice by slice holds every log still open,
    each as it was when its slice was taken; a log deleted meanwhile is left out."""
    manager = _manager(tmp_path, count=1)
    for topic in ("a", "b", "c"):
        log = manager.get_or_create_log(topic, 0, topic_id=TOPIC_ID, config=LogConfig(),
                                        now_ms=0)
        log.append_as_leader(make_batch(3), leader_epoch=0, now_ms=0)
        log.update_high_watermark(1)
    keys = sorted(manager.log_keys())
    taken = manager.take_checkpoints(())
    assert taken.by_dir == {tmp_path / "data0": ({}, {}, {})}
    manager.take_checkpoints(keys[:1], into=taken)
    b = manager.get_log("b", 0)
    assert b is not None
    b.update_high_watermark(2)  # between the slices: the later slice sees it
    assert manager.delete_log("c", 0)
    assert manager.take_checkpoints(keys[1:], into=taken) is taken
    manager.write_checkpoints(taken)
    data = tmp_path / "data0"
    assert read_offsets_checkpoint(data / REPLICATION_OFFSET_CHECKPOINT) == {
        ("a", 0): 1, ("b", 0): 2}
    manager.close()


def test_compacted_logs_follow_creation_config_changes_moves_and_deletion(
        tmp_path: Path) -> None:
    """compacted_logs() (what the cleaner looks at) holds exactly the open logs whose
    cleanup.policy includes compact, as their configs change and they come and go."""
    manager = _manager(tmp_path)
    compact = LogConfig(cleanup_policy=("compact", "delete"))
    a = manager.get_or_create_log("a", 0, topic_id=TOPIC_ID, config=compact, now_ms=0)
    b = manager.get_or_create_log("b", 0, topic_id=TOPIC_ID, config=LogConfig(), now_ms=0)
    assert manager.compacted_logs() == [a]
    b.update_config(compact)
    a.update_config(LogConfig())
    assert manager.compacted_logs() == [b]
    home = manager.log_dir_of("b", 0)
    other = next(d for d in manager.log_dirs if d != home)
    b.close()
    moved = Log.open(b.dir, compact, recovery_point=0, log_start_offset=None, now_ms=0)
    manager.rehome_log(moved, other)
    assert manager.compacted_logs() == [moved]
    assert manager.delete_log("b", 0)
    assert manager.compacted_logs() == []
    manager.close()


def test_periodic_work_over_a_slice_skips_logs_deleted_since(tmp_path: Path) -> None:
    """run_retention over a slice of log_keys(): a log deleted after the keys were listed
    is skipped, the others in the slice get their retention."""
    manager = _manager(tmp_path, count=1)
    expiring = small_config(segment_bytes=300, retention_ms=100)
    for topic in ("a", "b"):
        log = manager.get_or_create_log(topic, 0, topic_id=TOPIC_ID, config=expiring, now_ms=0)
        for _ in range(6):
            log.append_as_leader(make_batch(2, timestamp=0, value_size=60), leader_epoch=0,
                                 now_ms=0)
        log.update_high_watermark(log.log_end_offset)
    keys = manager.log_keys()
    assert sorted(keys) == [("a", 0), ("b", 0)]
    assert manager.delete_log("a", 0)
    assert manager.run_retention(now_ms=10_000, keys=keys) > 0
    kept = manager.get_log("b", 0)
    assert kept is not None and kept.log_start_offset == kept.log_end_offset
    assert manager.expire_producers(10_000, 1, keys=keys) == 0
    manager.close()


@pytest.mark.parametrize("readahead", [False, True])
@pytest.mark.parametrize("threads", ["1", "4"])
def test_logs_load_on_recovery_threads_and_a_bad_one_stops_the_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: str, readahead: bool
) -> None:
    """num.recovery.threads.per.data.dir threads open the logs of a dir (Kafka's pool); each
    log comes back as it was written, and a log that cannot be read fails the start-up with
    its own error whichever thread met it; the same with helper processes reading the
    directories ahead (a large log dir's load), which end with the load."""
    manager = _manager(tmp_path, count=1)
    for partition in range(30):
        log = manager.get_or_create_log("t", partition, topic_id=TOPIC_ID,
                                        config=LogConfig(), now_ms=0)
        for _ in range(partition % 4):
            log.append_as_leader(make_batch(1), leader_epoch=2, now_ms=0)
    manager.close(broker_epoch=1)
    configs = {"num.recovery.threads.per.data.dir": threads}
    again = LogManager([tmp_path / "data0"], configs)
    started: list[Readahead] = []

    def tracked(directories: list[Path], processes: int) -> Readahead:
        started.append(Readahead(directories, processes))
        return started[-1]

    if readahead:
        again.readahead_from = 1
        monkeypatch.setattr(log_manager, "Readahead", tracked)
    again.load(now_ms=0)
    assert [ahead.helpers for ahead in started] == ([READAHEAD_PROCESSES] if readahead else [])
    assert [ahead.running() for ahead in started] == [0] * len(started)
    loaded = {(log.topic, log.partition): log for log in again.logs()}
    assert sorted(loaded) == [("t", p) for p in range(30)]
    for (_, partition), log in loaded.items():
        assert log.log_end_offset == partition % 4 and log.topic_id == TOPIC_ID
    again.close(broker_epoch=2)
    (tmp_path / "data0" / "t-17" / "partition.metadata").write_text("version: 9\n")
    broken = LogManager([tmp_path / "data0"], configs)
    broken.readahead_from = 1 if readahead else broken.readahead_from
    with pytest.raises(KafkaStorageError, match="t-17"):
        broken.load(now_ms=0)
    assert [ahead.running() for ahead in started] == [0] * len(started)
    broken.release_locks()


@pytest.mark.parametrize("clean", [True, False])
def test_an_idle_log_loads_from_one_listing_without_asking_for_absent_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean: bool) -> None:
    """A restarted broker lists an idle log's directory once and asks the file system only
    about the files the listing holds (its segment, partition.metadata): no stat of index
    files, no open of a leader epoch checkpoint, no second listing for producer snapshots;
    after a clean stop as after a crash. A log with data still finds its files."""
    manager = _manager(tmp_path, count=1)
    idle = manager.get_or_create_log("t", 0, topic_id=TOPIC_ID, config=LogConfig(), now_ms=0)
    busy = manager.get_or_create_log("t", 1, topic_id=TOPIC_ID, config=LogConfig(), now_ms=0)
    busy.append_as_leader(make_batch(3), leader_epoch=2, now_ms=0)
    idle_dir = os.fspath(idle.dir)
    if clean:
        manager.close(broker_epoch=1)
    else:
        busy.flush()
        manager.release_locks()  # no close: the next load recovers
    calls: list[tuple[str, str]] = []

    def counted(name: str, real):  # type: ignore[no-untyped-def]
        def call(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            calls.append((name, os.fspath(path)))
            return real(path, *args, **kwargs)
        return call

    for name in ("stat", "open", "scandir", "listdir"):
        monkeypatch.setattr(os, name, counted(name, getattr(os, name)))
    again = LogManager([tmp_path / "data0"], {})
    again.load(now_ms=0)
    monkeypatch.undo()
    touched = sorted((name, os.path.relpath(path, idle_dir)) for name, path in calls
                     if path == idle_dir or path.startswith(idle_dir + os.sep))
    assert touched == [("open", "partition.metadata"), ("scandir", "."),
                       ("stat", "00000000000000000000.log")]
    loaded = {log.partition: log for log in again.logs()}
    assert loaded[0].log_end_offset == 0 and loaded[0].topic_id == TOPIC_ID
    assert loaded[1].log_end_offset == 3 and loaded[1].topic_id == TOPIC_ID
    assert loaded[1].leader_epoch_cache.latest_epoch == 2
    again.close(broker_epoch=2)
