"""Snapshots in the metadata log stores: write, read, prefix deletion, install, and recovery
of a DiskLogStore after a crash in the middle of each."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.errors import (
    CorruptRecord,
    InvariantViolation,
    KafkaStorageError,
    OffsetOutOfRange,
    PositionOutOfRange,
    SnapshotNotFound,
)
from pykraft.raft.core import RaftCore
from pykraft.raft.log_store import DiskLogStore, LogStore, MemoryLogStore
from pykraft.raft.messages import SnapshotId
from pykraft.raft.snapshot import (
    build_snapshot,
    check_snapshot,
    parse_snapshot_file_name,
    snapshot_file_name,
    snapshot_values,
)
from pykraft.raft.state import QuorumStateData
from pykraft.records.record import build_batch

PARTITION_DIR = "__cluster_metadata-0"


def batch(base_offset: int, epoch: int, *values: bytes) -> bytes:
    return build_batch(
        [(None, value, (), 1_000) for value in values],
        base_offset=base_offset,
        partition_leader_epoch=epoch,
    )


def snapshot_bytes(snapshot_id: SnapshotId, *values: bytes) -> bytes:
    return b"".join(
        build_snapshot(snapshot_id, values, last_contained_log_timestamp=1, timestamp_ms=2)
    )


def write_snapshot(store: LogStore, snapshot_id: SnapshotId, *values: bytes) -> bytes:
    data = snapshot_bytes(snapshot_id, *values)
    writer = store.create_snapshot(snapshot_id)
    for position in range(0, len(data), 7):  # unaligned chunks, as FetchSnapshot brings
        writer.append(data[position : position + 7])
    assert writer.size_bytes == len(data)
    writer.freeze()
    return data


def fill(store: LogStore) -> None:
    """Offsets 0-1 epoch 1, 2 epoch 1, 3-4 epoch 2, 5 epoch 3; flushed."""
    store.append(batch(0, 1, b"a", b"b") + batch(2, 1, b"c"))
    store.append(batch(3, 2, b"d", b"e") + batch(5, 3, b"f"))
    store.flush()


@pytest.fixture(params=["memory", "disk"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LogStore]:
    if request.param == "memory":
        yield MemoryLogStore()
        return
    disk = DiskLogStore.open(tmp_path / PARTITION_DIR, now_ms=0)
    yield disk
    disk.close()


def test_snapshot_file_names_are_kafkas() -> None:
    snapshot_id = SnapshotId(end_offset=1234, epoch=5)
    name = snapshot_file_name(snapshot_id)
    assert name == "00000000000000001234-0000000005.checkpoint"
    assert parse_snapshot_file_name(name) == snapshot_id
    assert parse_snapshot_file_name(name + ".part") is None
    assert parse_snapshot_file_name("1234-5.checkpoint") is None


def test_snapshot_content_opens_with_the_header_and_ends_with_the_footer() -> None:
    """The parser accepts any chunking of a good snapshot and rejects a torn one, one
    without its header, and trailing bytes after the footer."""
    snapshot_id = SnapshotId(10, 3)
    data = snapshot_bytes(snapshot_id, b"x" * 100, b"y")
    assert check_snapshot(data).record_count == 2
    chunks = [data[i : i + 5] for i in range(0, len(data), 5)]
    assert list(snapshot_values(chunks)) == [b"x" * 100, b"y"]
    with pytest.raises(CorruptRecord):
        check_snapshot(data[:-1])
    with pytest.raises(CorruptRecord):
        check_snapshot(batch(0, 3, b"no header"))
    with pytest.raises(CorruptRecord):
        check_snapshot(data + batch(3, 3, b"after the footer"))


def test_write_then_read_a_snapshot_in_chunks(store: LogStore) -> None:
    """A frozen snapshot is listed and readable from any position; until frozen it is not."""
    fill(store)
    snapshot_id = SnapshotId(3, 1)
    writer = store.create_snapshot(snapshot_id)
    writer.append(snapshot_bytes(snapshot_id, b"state"))
    assert store.latest_snapshot_id is None and store.snapshot_size(snapshot_id) is None
    writer.freeze()
    data = snapshot_bytes(snapshot_id, b"state")
    assert store.latest_snapshot_id == store.earliest_snapshot_id == snapshot_id
    assert store.snapshot_size(snapshot_id) == len(data)
    assert store.read_snapshot(snapshot_id, 0, 10) == data[:10]
    assert store.read_snapshot(snapshot_id, 10, 1 << 20) == data[10:]
    with pytest.raises(PositionOutOfRange):
        store.read_snapshot(snapshot_id, len(data), 10)
    with pytest.raises(SnapshotNotFound):
        store.read_snapshot(SnapshotId(3, 2), 0, 10)
    assert store.log_start_offset == 0  # taking a snapshot deletes nothing by itself


def test_a_torn_snapshot_is_never_published(store: LogStore) -> None:
    fill(store)
    writer = store.create_snapshot(SnapshotId(3, 1))
    writer.append(snapshot_bytes(SnapshotId(3, 1), b"state")[:-4])
    with pytest.raises(CorruptRecord):
        writer.freeze()
    assert store.latest_snapshot_id is None


def test_delete_before_moves_the_log_start_and_drops_older_snapshots(store: LogStore) -> None:
    """The log below the snapshot goes, reads below it fail, the epoch of an empty log is the
    snapshot's, and appends continue at the end."""
    fill(store)
    write_snapshot(store, SnapshotId(3, 1), b"early")
    write_snapshot(store, SnapshotId(5, 2), b"later")
    store.delete_before(SnapshotId(5, 2))
    assert store.log_start_offset == 5
    assert store.earliest_snapshot_id == SnapshotId(5, 2)
    assert store.snapshot_size(SnapshotId(3, 1)) is None
    with pytest.raises(OffsetOutOfRange):
        store.read(3, 100)
    assert store.read(5, 100) == batch(5, 3, b"f")
    assert (store.log_end_offset, store.last_epoch) == (6, 3)
    store.truncate_to(5)  # down to the log start, not below
    assert (store.log_end_offset, store.last_epoch, store.flushed_offset) == (5, 2, 5)
    with pytest.raises(InvariantViolation):
        store.truncate_to(4)
    store.append(batch(5, 4, b"g"))
    assert store.flush() == 6


def test_delete_before_needs_a_batch_boundary_and_a_durable_log(store: LogStore) -> None:
    fill(store)
    write_snapshot(store, SnapshotId(4, 2), b"inside a batch")
    with pytest.raises(InvariantViolation):
        store.delete_before(SnapshotId(4, 2))
    store.append(batch(6, 3, b"unflushed"))
    write_snapshot(store, SnapshotId(7, 3), b"past the durable end")
    with pytest.raises(InvariantViolation):
        store.delete_before(SnapshotId(7, 3))


def test_install_replaces_the_whole_log(store: LogStore) -> None:
    """A follower installs a fetched snapshot: the log restarts empty at its end offset."""
    fill(store)
    write_snapshot(store, SnapshotId(3, 1), b"mine")
    write_snapshot(store, SnapshotId(40, 7), b"the leader's")
    store.install_snapshot(SnapshotId(40, 7))
    assert (store.log_start_offset, store.log_end_offset, store.last_epoch) == (40, 40, 7)
    assert store.flushed_offset == 40 and store.read(40, 100) == b""
    assert store.earliest_snapshot_id == store.latest_snapshot_id == SnapshotId(40, 7)
    store.append(batch(40, 8, b"next"))
    assert store.flush() == 41


def test_memory_store_crash_loses_the_unfinished_snapshot_only() -> None:
    store = MemoryLogStore()
    fill(store)
    write_snapshot(store, SnapshotId(3, 1), b"kept")
    store.delete_before(SnapshotId(3, 1))
    writer = store.create_snapshot(SnapshotId(5, 2))
    writer.append(b"partial")
    store.append(batch(6, 3, b"unflushed"))
    store.crash()
    assert (store.log_start_offset, store.log_end_offset) == (3, 6)
    assert store.snapshot_ids == (SnapshotId(3, 1),)


# DiskLogStore recovery ------------------------------------------------------------------


def reopen(store: DiskLogStore) -> DiskLogStore:
    directory = store.directory
    store.log.close()  # no flush beyond what the store did: a crash
    return DiskLogStore.open(directory, now_ms=0)


def test_disk_store_restarts_from_its_snapshots_and_log_start(tmp_path: Path) -> None:
    directory = tmp_path / PARTITION_DIR
    store = DiskLogStore.open(directory, now_ms=0)
    fill(store)
    data = write_snapshot(store, SnapshotId(3, 1), b"state")
    store.delete_before(SnapshotId(3, 1))
    store.close()
    store = DiskLogStore.open(directory, now_ms=0)
    try:
        assert (store.log_start_offset, store.log_end_offset, store.last_epoch) == (3, 6, 3)
        assert store.read_snapshot(SnapshotId(3, 1), 0, 1 << 20) == data
        assert store.read(3, 1 << 20) == batch(3, 2, b"d", b"e") + batch(5, 3, b"f")
    finally:
        store.close()


def test_disk_store_removes_a_partial_snapshot_and_ignores_a_torn_one(tmp_path: Path) -> None:
    """A crash mid-write leaves a .part file: it is removed. A .checkpoint whose content does
    not check is not used: the log restarts from the earliest good snapshot."""
    directory = tmp_path / PARTITION_DIR
    store = DiskLogStore.open(directory, now_ms=0)
    fill(store)
    write_snapshot(store, SnapshotId(3, 1), b"good")
    writer = store.create_snapshot(SnapshotId(5, 2))
    writer.append(snapshot_bytes(SnapshotId(5, 2), b"half")[:20])
    torn = snapshot_bytes(SnapshotId(6, 3), b"torn")[:-5]
    (directory / snapshot_file_name(SnapshotId(6, 3))).write_bytes(torn)
    store = reopen(store)
    try:
        assert not list(directory.glob("*.part"))
        assert store.snapshot_ids == (SnapshotId(3, 1),)
        assert (store.log_start_offset, store.log_end_offset) == (3, 6)
    finally:
        store.close()


def test_disk_store_finishes_an_install_a_crash_interrupted(tmp_path: Path) -> None:
    """The fetched snapshot was frozen but the log not yet replaced: open replaces it."""
    directory = tmp_path / PARTITION_DIR
    store = DiskLogStore.open(directory, now_ms=0)
    fill(store)
    write_snapshot(store, SnapshotId(40, 7), b"the leader's")
    store = reopen(store)
    try:
        assert (store.log_start_offset, store.log_end_offset, store.last_epoch) == (40, 40, 7)
    finally:
        store.close()


def test_disk_store_finishes_an_install_over_a_diverged_log(tmp_path: Path) -> None:
    """A snapshot inside the log's offsets but of another epoch than the log's entry below
    its end also means an interrupted install: the diverged log goes."""
    directory = tmp_path / PARTITION_DIR
    store = DiskLogStore.open(directory, now_ms=0)
    fill(store)
    write_snapshot(store, SnapshotId(5, 4), b"another history")
    store = reopen(store)
    try:
        assert (store.log_start_offset, store.log_end_offset, store.last_epoch) == (5, 5, 4)
    finally:
        store.close()


def test_disk_store_without_a_snapshot_below_its_log_refuses_to_open(tmp_path: Path) -> None:
    directory = tmp_path / PARTITION_DIR
    store = DiskLogStore.open(directory, now_ms=0)
    store.append(batch(0, 1, b"a"))
    store.log.roll(0)
    store.append(batch(1, 1, b"b"))
    write_snapshot(store, SnapshotId(1, 1), b"state")
    store.flush()
    store.delete_before(SnapshotId(1, 1))
    assert [path.name for path in directory.glob("*.log")] == ["00000000000000000001.log"]
    store.close()
    (directory / snapshot_file_name(SnapshotId(1, 1))).unlink()
    with pytest.raises(KafkaStorageError):
        DiskLogStore.open(directory, now_ms=0)


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.binary(max_size=300), max_size=20),
    chunk_bytes=st.integers(min_value=1, max_value=400),
    batch_bytes_max=st.integers(min_value=1, max_value=1000),
    cut=st.integers(min_value=1, max_value=10_000),
)
def test_snapshot_content_round_trips_in_any_chunking(
    values: list[bytes], chunk_bytes: int, batch_bytes_max: int, cut: int
) -> None:
    """Whatever the values, the batch size and the chunking, the records come back in
    order; any proper prefix of the bytes is torn."""
    snapshot_id = SnapshotId(100, 7)
    data = b"".join(build_snapshot(snapshot_id, values, last_contained_log_timestamp=3,
                                   timestamp_ms=4, batch_bytes_max=batch_bytes_max))
    chunks = [data[i : i + chunk_bytes] for i in range(0, len(data), chunk_bytes)]
    assert list(snapshot_values(chunks)) == values
    assert check_snapshot(data).record_count == len(values)
    with pytest.raises(CorruptRecord):
        check_snapshot(data[: len(data) - 1 - cut % len(data)])


def test_a_core_over_a_disk_store_restarts_from_its_snapshot(tmp_path: Path) -> None:
    """A single voter snapshots, deletes the log below, stops; reopened, the store starts at
    the snapshot and the core loads it first, then delivers only what follows it."""
    directory = tmp_path / PARTITION_DIR
    store = DiskLogStore.open(directory, now_ms=0)
    fill(store)
    core = RaftCore(1, frozenset({1}), store, QuorumStateData(leader_epoch=3),
                    random.Random(1), 0)
    persisted = QuorumStateData(leader_epoch=3)
    for _ in range(5):
        ready = core.ready()
        persisted = ready.quorum_state or persisted
        if ready.delete_before is not None:
            store.delete_before(ready.delete_before)
        for data in ready.batches:
            store.append(data)
        store.flush()
        core.advance(ready)
        core.flushed(store.flushed_offset)
        if core.applied_offset == 7 and store.latest_snapshot_id is None:
            snapshot_id = core.snapshot_id_at(6)
            assert snapshot_id == SnapshotId(6, 3)
            write_snapshot(store, snapshot_id, b"image")
            core.delete_before(snapshot_id)
    assert store.log_start_offset == 6
    store.close()
    store = DiskLogStore.open(directory, now_ms=0)
    try:
        assert (store.log_start_offset, store.log_end_offset) == (6, 7)
        core = RaftCore(1, frozenset({1}), store, persisted, random.Random(2), 0)
        ready = core.ready()
        assert ready.load_snapshot == SnapshotId(6, 3) and ready.committed == ()
    finally:
        store.close()
