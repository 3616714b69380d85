"""MetadataSnapshots (server/metadata_snapshots.py) over a real single-voter RaftNode on disk,
with a MetadataLoader as its state machine: the policy (bytes and time since the last
snapshot), writing the image as a snapshot (the log below deleted), and a restart that
starts from that snapshot and the log after it."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pykraft.controller.config import ControllerConfig
from pykraft.controller.quorum_controller import QuorumController
from pykraft.errors import InvariantViolation
from pykraft.metadata.codec import decode_metadata_record, encode_metadata_record
from pykraft.metadata.image import METADATA_VERSION
from pykraft.metadata.loader import MetadataLoader
from pykraft.metadata.records import FeatureLevelRecord, MetadataRecord
from pykraft.raft.core import CommittedBatch
from pykraft.raft.driver import RaftNode
from pykraft.raft.log_store import LogStore, RaftLogView
from pykraft.raft.messages import SnapshotId
from pykraft.raft.snapshot import build_snapshot, snapshot_values
from pykraft.server import metadata_snapshots
from pykraft.server.config import ConfigError, ServerConfig
from pykraft.server.image_digest import image_digest
from pykraft.server.metadata_snapshots import (
    BATCH_OVERHEAD_BYTES,
    BUSY_BYTES,
    BUSY_WINDOW_MS,
    DEFER_MAX_MS,
    HOLD_RETENTION_TIMES,
    RECORD_OVERHEAD_BYTES,
    MetadataSnapshots,
    SnapshotPolicy,
    batch_bytes,
    controller_from_image,
    encoded_image,
    read_snapshot_records,
)
from tests.unit.metadata.metadata_workload import workload


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


class StateMachine:
    """The node's listener, reduced to the loader and the snapshots."""

    def __init__(self) -> None:
        self.loader = MetadataLoader()
        self.snapshots: MetadataSnapshots | None = None
        self.loaded: list[SnapshotId] = []
        self.turns_while_loading = 0

    def handle_commit(self, batch: CommittedBatch) -> None:
        records = [decode_metadata_record(value) for value in batch.records]
        self.loader.handle_commit(batch.base_offset, batch.epoch, records, batch.last_offset)
        assert self.snapshots is not None
        self.snapshots.note_commit(batch)

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        pass

    async def handle_load_snapshot(self, snapshot_id: SnapshotId, snapshot: RaftLogView
                                   ) -> None:
        """As the node's: the snapshot decoded a slice per turn of the loop, awaited by the
        Raft driver (`turns_while_loading` counts another task's turns meanwhile)."""
        assert self.snapshots is not None
        done = asyncio.Event()

        async def count_turns() -> None:
            while not done.is_set():
                self.turns_while_loading += 1
                await asyncio.sleep(0)
        counter = asyncio.ensure_future(count_turns())
        await self.snapshots.load(snapshot_id, snapshot)
        done.set()
        await counter
        self.loaded.append(snapshot_id)


async def open_node(
    log_dir: Path, policy: SnapshotPolicy, clock: Clock,
    broker_offset: Callable[[], int | None] = lambda: None,
) -> tuple[RaftNode, StateMachine]:
    machine = StateMachine()
    raft = RaftNode.open(node_id=1, voters=frozenset({1}),
                         log_dir=log_dir / "__cluster_metadata-0", listener=machine,
                         election_timeout_ms=50)
    machine.snapshots = MetadataSnapshots(raft, machine.loader, policy, clock,
                                          broker_offset=broker_offset)
    await raft.start()
    await raft.wait_leader()
    return raft, machine


async def append(raft: RaftNode, records: list[MetadataRecord], per_batch: int = 25) -> int:
    last = -1
    for start in range(0, len(records), per_batch):
        encoded = [encode_metadata_record(r) for r in records[start:start + per_batch]]
        last = raft.append(encoded)
    await raft.wait_committed(last)
    return last


def history(seed: int, steps: int) -> list[MetadataRecord]:
    """A valid random history (its metadata.version moves at random, as the workload's)."""
    return [FeatureLevelRecord(name=METADATA_VERSION, feature_level=21), *workload(seed, steps)]


def stored_bytes(store: LogStore) -> int:
    """The log and snapshots' bytes, as retention counts them."""
    return store.size_bytes + sum(store.snapshot_size(each) or 0
                                  for each in store.snapshot_ids)


NO_TRIGGER = SnapshotPolicy(max_bytes_between=1 << 40, max_interval_ms=0)
NO_TRIGGER_NO_RETENTION = dataclasses.replace(NO_TRIGGER, retention_bytes=0)


async def test_a_snapshot_past_retention_deletes_the_log_below_and_a_restart_loads_it(
    tmp_path: Path,
) -> None:
    clock = Clock()
    raft, machine = await open_node(tmp_path, NO_TRIGGER_NO_RETENTION, clock)
    assert machine.snapshots is not None
    try:
        records = history(1, 400)
        split = len(records) * 2 // 3
        await append(raft, records[:split])
        image = machine.loader.image
        written = await machine.snapshots.write_now()
        assert written == SnapshotId(end_offset=image.offset + 1, epoch=image.epoch)
        assert raft.store.latest_snapshot_id == written
        await asyncio.sleep(0.2)  # the deletion is the raft loop's next write
        assert raft.core.log_start_offset == written.end_offset
        # nothing new: no second snapshot of the same offset
        assert await machine.snapshots.write_now() is None
        # the stored snapshot holds the image's records exactly
        stored = [decode_metadata_record(v) for v in read_snapshot_records(written, raft.store)]
        assert stored == [decode_metadata_record(v) for v in encoded_image(image)]
        await append(raft, records[split:])  # the log after it, replayed at the restart
        final = machine.loader.image
    finally:
        await raft.stop()

    raft, machine = await open_node(tmp_path, NO_TRIGGER_NO_RETENTION, clock)
    try:
        assert machine.loaded == [written]
        assert machine.loader.image.offset >= final.offset
        # the same content as before the restart (the restart's new epoch aside)
        same_place = dataclasses.replace(machine.loader.image, offset=final.offset,
                                         epoch=final.epoch)
        assert same_place == final and image_digest(same_place) == image_digest(final)
    finally:
        await raft.stop()


async def test_a_snapshot_is_decoded_a_slice_per_turn_and_the_log_after_it_waits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker far behind loads a snapshot of 300,000 partitions: other tasks (its
    heartbeats) run between slices, and the batches after the snapshot are replayed only
    once it is loaded, onto the same image a load in one go makes."""
    monkeypatch.setattr(metadata_snapshots, "DECODED_PER_TURN", 10)
    clock = Clock()
    raft, machine = await open_node(tmp_path, NO_TRIGGER_NO_RETENTION, clock)
    assert machine.snapshots is not None
    try:
        records = history(2, 300)
        await append(raft, records[:200])
        written = await machine.snapshots.write_now()
        assert written is not None
        await append(raft, records[200:])
        final = machine.loader.image
    finally:
        await raft.stop()
    raft, sliced = await open_node(tmp_path, NO_TRIGGER_NO_RETENTION, clock)
    try:
        assert sliced.loaded == [written]
        count = sum(1 for _ in read_snapshot_records(written, raft.store))
        assert sliced.turns_while_loading >= count // 10 - 1
        same_place = dataclasses.replace(sliced.loader.image, offset=final.offset,
                                         epoch=final.epoch)
        assert same_place == final
    finally:
        await raft.stop()


async def test_the_byte_threshold_makes_the_task_write_snapshots(tmp_path: Path) -> None:
    clock = Clock()
    raft, machine = await open_node(
        tmp_path, SnapshotPolicy(max_bytes_between=4096, max_interval_ms=0), clock)
    assert machine.snapshots is not None
    task = asyncio.create_task(machine.snapshots.run())
    try:
        await append(raft, history(3, 400))
        for _ in range(200):
            if machine.snapshots.written:
                break
            await asyncio.sleep(0.02)
        assert machine.snapshots.written >= 1
        latest = raft.store.latest_snapshot_id
        assert latest is not None and latest.end_offset > 0
        earliest = raft.store.earliest_snapshot_id
        assert earliest == latest, "the older snapshots are deleted"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await raft.stop()


async def test_the_policy_counts_bytes_and_the_age_of_the_oldest_batch_not_in_a_snapshot(
    tmp_path: Path,
) -> None:
    clock = Clock()
    policy = SnapshotPolicy(max_bytes_between=10_000, max_interval_ms=60_000)
    raft, machine = await open_node(tmp_path, policy, clock)
    snapshots = machine.snapshots
    assert snapshots is not None
    try:
        appended_ms = int(time.time() * 1000)
        clock.ms = appended_ms + 1000
        await append(raft, history(4, 5))  # below the byte limit
        assert not snapshots.due(clock.ms)
        # KIP-876: due once the oldest batch not in a snapshot was appended the interval ago
        assert not snapshots.due(appended_ms - 2000 + 60_000)
        assert snapshots.due(clock.ms + 60_000)
        clock.ms += 60_000
        assert await snapshots.write_now() is not None
        assert not snapshots.due(clock.ms + 10**9), "nothing committed since the snapshot"
        # a quiet hour, then one batch: due an interval after that batch, not at once
        clock.ms += 3_600_000
        snapshots.note_commit(CommittedBatch(base_offset=0, last_offset=0, epoch=1,
                                             append_timestamp=clock.ms, records=(b"x",)))
        assert not snapshots.due(clock.ms + 59_999)
        assert snapshots.due(clock.ms + 60_000)
        big = CommittedBatch(base_offset=1, last_offset=1, epoch=1,
                             append_timestamp=clock.ms, records=(b"x" * 10_000,))
        assert batch_bytes(big) > 10_000
        snapshots.note_commit(big)
        assert snapshots.due(clock.ms), "the byte limit is reached"
    finally:
        await raft.stop()


async def test_the_next_snapshot_waits_for_as_many_bytes_as_the_last_one_holds(
        tmp_path: Path) -> None:
    """Past metadata.log.max.record.bytes.between.snapshots, a snapshot is due once the log
    since the last one is as large as it (written, or loaded at a restart): a snapshot
    costs as much as the whole image, however little changed."""
    clock = Clock()
    policy = SnapshotPolicy(max_bytes_between=1000, max_interval_ms=0, retention_bytes=0)
    raft, machine = await open_node(tmp_path, policy, clock)
    snapshots = machine.snapshots
    assert snapshots is not None

    def commit(size: int) -> None:
        snapshots.note_commit(CommittedBatch(
            base_offset=0, last_offset=0, epoch=1, append_timestamp=clock.ms,
            records=(b"x" * (size - BATCH_OVERHEAD_BYTES - RECORD_OVERHEAD_BYTES),)))

    try:
        await append(raft, history(5, 300))
        written = await snapshots.write_now()
        assert written is not None
        size = sum(len(value) + RECORD_OVERHEAD_BYTES
                   for value in read_snapshot_records(written, raft.store))
        assert size > 5 * policy.max_bytes_between
        assert snapshots.bytes_between() == size
        commit(size - 1)
        assert not snapshots.due(clock.ms), "less than the snapshot holds"
        commit(1 + BATCH_OVERHEAD_BYTES + RECORD_OVERHEAD_BYTES)
        assert snapshots.due(clock.ms)
    finally:
        await raft.stop()
    raft, machine = await open_node(tmp_path, policy, clock)
    try:
        assert machine.loaded == [written]
        assert machine.snapshots is not None
        assert machine.snapshots.bytes_between() == size
    finally:
        await raft.stop()


async def test_a_due_snapshot_waits_while_a_burst_of_commits_is_applied(
        tmp_path: Path) -> None:
    """A snapshot due in the middle of a burst (BUSY_BYTES committed within BUSY_WINDOW_MS)
    waits for the burst to end, or DEFER_MAX_MS at most, so that encoding the image does
    not compete with applying and fetching it."""
    clock = Clock()
    raft, machine = await open_node(
        tmp_path, SnapshotPolicy(max_bytes_between=4096, max_interval_ms=0), clock)
    snapshots = machine.snapshots
    assert snapshots is not None

    def burst(offset: int) -> None:  # as many bytes committed as a busy node's second
        snapshots.note_commit(CommittedBatch(
            base_offset=offset, last_offset=offset, epoch=1, append_timestamp=clock.ms,
            records=(b"x" * BUSY_BYTES,)))

    async def written_while(step: Callable[[], None], turns: int) -> int:
        for _ in range(turns):
            step()
            await asyncio.sleep(0.01)
        return snapshots.written

    task: asyncio.Task[None] | None = None
    try:
        records = history(3, 800)
        await append(raft, records[:400])
        burst(10**6)
        assert snapshots.busy(clock.ms) and snapshots.due(clock.ms)
        task = asyncio.create_task(snapshots.run())
        assert await written_while(lambda: None, 30) == 0  # busy: it waits
        clock.ms += BUSY_WINDOW_MS - 1
        assert snapshots.busy(clock.ms)
        clock.ms += 1  # the burst left the window
        assert not snapshots.busy(clock.ms)
        for _ in range(200):
            if await written_while(lambda: None, 1):
                break
        assert snapshots.written == 1

        def go_on() -> None:
            clock.ms += BUSY_WINDOW_MS // 2
            burst(2 * 10**6)
        go_on()
        await append(raft, records[400:])  # due again, in a burst that never ends
        assert await written_while(go_on, 2 * DEFER_MAX_MS // BUSY_WINDOW_MS - 20) == 1
        assert await written_while(go_on, 100) == 2  # but not past DEFER_MAX_MS
    finally:
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await raft.stop()


async def test_no_time_trigger_when_the_interval_is_zero(tmp_path: Path) -> None:
    clock = Clock()
    raft, machine = await open_node(
        tmp_path, SnapshotPolicy(max_bytes_between=1 << 30, max_interval_ms=0), clock)
    assert machine.snapshots is not None
    try:
        await append(raft, history(5, 5))
        assert not machine.snapshots.due(clock.ms + 10**12)
    finally:
        await raft.stop()


def test_policy_from_the_server_keys() -> None:
    values = {"metadata.log.max.record.bytes.between.snapshots": 5,
              "metadata.log.max.snapshot.interval.ms": 7,
              "metadata.max.retention.bytes": 11, "metadata.max.retention.ms": 13}
    assert SnapshotPolicy.from_configs(values.__getitem__) == SnapshotPolicy(5, 7, 11, 13)


async def test_the_log_stays_below_snapshots_until_retention_passes(tmp_path: Path) -> None:
    """Within metadata.max.retention.bytes and .ms the log below a snapshot stays (a node
    behind goes on from the log), and a restart still starts from the newest snapshot;
    once the log's first batch is older than the retention time, the log below the newest
    snapshot goes, with the older snapshots; past the byte limit, likewise."""
    clock = Clock()
    policy = SnapshotPolicy(max_bytes_between=1 << 40, max_interval_ms=0,
                            retention_bytes=1 << 30, retention_ms=60_000)
    raft, machine = await open_node(tmp_path, policy, clock)
    snapshots = machine.snapshots
    assert snapshots is not None
    records = history(4, 300)
    try:
        await append(raft, records[:100])
        first = await snapshots.write_now()
        await append(raft, records[100:200])
        second = await snapshots.write_now()
        assert first is not None and second is not None
        await asyncio.sleep(0.2)
        assert raft.core.log_start_offset == 0
        assert raft.store.snapshot_ids == (first, second)
        assert snapshots.retention_passed(clock.ms) is None
        await append(raft, records[200:])
        final = machine.loader.image
    finally:
        await raft.stop()

    raft, machine = await open_node(tmp_path, policy, clock)
    snapshots = machine.snapshots
    assert snapshots is not None
    try:
        assert machine.loaded == [second]  # the newest, though the log starts before it
        assert machine.loader.image.topics == final.topics
        # (a restart starts the log at the earliest snapshot, as DiskLogStore.open does)
        assert raft.core.log_start_offset == first.end_offset
        first_append_ms = int(time.time() * 1000)  # no batch was appended later than now
        clock.ms = first_append_ms + 60_001
        assert snapshots.retention_passed(clock.ms) == second
        snapshots.apply_retention(clock.ms)
        await asyncio.sleep(0.2)  # the deletion is the raft loop's next write
        assert raft.core.log_start_offset == second.end_offset
        assert raft.store.snapshot_ids == (second,)
        assert snapshots.retention_passed(clock.ms) is None
        snapshots.policy = dataclasses.replace(policy, retention_ms=-1, retention_bytes=0)
        assert snapshots.retention_passed(clock.ms) is None  # nothing below the newest
    finally:
        await raft.stop()


async def test_past_retention_the_log_a_live_broker_still_needs_is_kept(
        tmp_path: Path) -> None:
    """Past metadata.max.retention.bytes, the log goes below the newest snapshot every
    live broker has applied past (as the active controller hears in heartbeats), not below
    the newest one, and not at all while a broker is behind every snapshot -- until the log
    and snapshots hold HOLD_RETENTION_TIMES the limit."""
    clock = Clock()
    reported: list[int | None] = [None]
    raft, machine = await open_node(tmp_path, NO_TRIGGER, clock, lambda: reported[0])
    snapshots = machine.snapshots
    assert snapshots is not None
    records = history(5, 200)
    try:
        await append(raft, records[:100])
        first = await snapshots.write_now()
        await append(raft, records[100:])
        second = await snapshots.write_now()
        assert first is not None and second is not None
        store = raft.store
        stored = stored_bytes(store)
        snapshots.policy = dataclasses.replace(NO_TRIGGER, retention_bytes=stored // 2)
        reported[0] = None  # no broker known (not the active controller): as before
        assert snapshots.retention_passed(clock.ms) == second
        reported[0] = first.end_offset - 2  # a broker that has not applied the first one
        assert snapshots.retention_passed(clock.ms) is None
        reported[0] = first.end_offset - 1  # past the first, not the second
        assert snapshots.retention_passed(clock.ms) == first
        reported[0] = second.end_offset - 1
        assert snapshots.retention_passed(clock.ms) == second
        reported[0] = first.end_offset - 1
        snapshots.apply_retention(clock.ms)
        await asyncio.sleep(0.2)  # the deletion is the raft loop's next write
        assert raft.core.log_start_offset == first.end_offset
        assert raft.store.snapshot_ids == (first, second)
        reported[0] = 0  # far behind; the store holds more than 4x the limit, but the
        # newest snapshot is larger than the limit and the store less than 4x it (the
        # bound is then the snapshot's: the next test)
        limit = stored // (HOLD_RETENTION_TIMES + 1)
        snapshots.policy = dataclasses.replace(NO_TRIGGER, retention_bytes=limit)
        assert limit < (store.snapshot_size(second) or 0)
        assert snapshots.retention_passed(clock.ms) is None
    finally:
        await raft.stop()


async def test_the_log_a_live_broker_needs_is_held_up_to_4x_a_snapshot_past_the_limit(
        tmp_path: Path) -> None:
    """A snapshot larger than metadata.max.retention.bytes (a million partitions' image
    is, at Kafka's default) raises the bound on the log kept for a broker behind it to
    HOLD_RETENTION_TIMES that snapshot; a larger limit keeps its own bound."""
    clock = Clock()
    reported: list[int | None] = [None]
    raft, machine = await open_node(tmp_path, NO_TRIGGER, clock, lambda: reported[0])
    snapshots = machine.snapshots
    assert snapshots is not None
    records = history(5, 3000)
    store = raft.store

    def stored() -> int:
        return stored_bytes(store)

    def limited(limit: int) -> SnapshotId | None:
        snapshots.policy = dataclasses.replace(NO_TRIGGER, retention_bytes=limit)
        return snapshots.retention_passed(clock.ms)

    try:
        await append(raft, records[:200])
        first = await snapshots.write_now()
        assert first is not None
        snapshots.policy = dataclasses.replace(NO_TRIGGER, retention_bytes=0)
        snapshots.apply_retention(clock.ms)  # no broker known: the log below it goes
        await asyncio.sleep(0.2)
        assert store.log_start_offset == first.end_offset
        snapshots.policy = NO_TRIGGER
        reported[0] = first.end_offset - 1  # a broker past the first only
        await append(raft, records[200:300])
        second = await snapshots.write_now()
        assert second is not None and store.log_start_offset == first.end_offset
        size = store.snapshot_size(second) or 0
        assert stored() <= size * HOLD_RETENTION_TIMES
        assert limited(size // 2) is None  # held: within 4x the snapshot
        assert limited(0) == second  # a limit of 0 holds nothing
        for start in range(300, len(records), 50):
            await append(raft, records[start:start + 50])
            if stored() > size * (HOLD_RETENTION_TIMES + 2):
                break
        assert stored() > size * (HOLD_RETENTION_TIMES + 2)
        assert limited(size // 2) == second  # past 4x the snapshot
        assert limited(stored() // 3) is None  # a larger limit: within 4x of it
        assert limited(stored() // (HOLD_RETENTION_TIMES + 1)) == second
    finally:
        await raft.stop()


def test_snapshot_values_of_an_encoded_image_are_its_records() -> None:
    records = history(6, 100)
    loader = MetadataLoader()
    loader.handle_commit(0, 1, records, len(records) - 1)
    batches = build_snapshot(SnapshotId(len(records), 1), encoded_image(loader.image),
                             last_contained_log_timestamp=0, timestamp_ms=0)
    values = list(snapshot_values(batches))
    rebuilt = MetadataLoader()
    rebuilt.load_snapshot([decode_metadata_record(v) for v in values],
                          offset=len(records) - 1, epoch=1)
    assert rebuilt.image == loader.image


def test_only_a_standby_controller_is_rebuilt_from_an_image() -> None:
    records = history(7, 100)
    loader = MetadataLoader()
    loader.handle_commit(0, 1, records, len(records) - 1)
    config = ControllerConfig.from_properties({}, cluster_id="c", controller_ids=frozenset({1}))
    core = QuorumController(config, random.Random(1))
    rebuilt = controller_from_image(core, loader.image)
    assert rebuilt.image == loader.image and not rebuilt.is_active
    assert rebuilt.config is core.config
    rebuilt.activate(leader_epoch=2, next_write_offset=len(records) + 1, now_ms=0)
    with pytest.raises(InvariantViolation):
        controller_from_image(rebuilt, loader.image)


@pytest.mark.parametrize("seed", range(8))
def test_state_an_old_metadata_version_cannot_encode_is_still_snapshotted(seed: int) -> None:
    """At metadata.version 3.3-IV0 a reassignment leaves replicas with an unassigned
    directory that PartitionRecord v0 cannot hold; the snapshot still rebuilds the image."""
    records = history(seed, 300)
    records.append(FeatureLevelRecord(name=METADATA_VERSION, feature_level=4))
    loader = MetadataLoader()
    loader.handle_commit(0, 1, records, len(records) - 1)
    rebuilt = MetadataLoader()
    rebuilt.load_snapshot([decode_metadata_record(v) for v in encoded_image(loader.image)],
                          offset=len(records) - 1, epoch=1)
    assert rebuilt.image == loader.image


SERVER_BASE = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "log.dirs": "/data/a",
}


def test_the_snapshot_keys_are_server_keys_with_kafkas_defaults_and_bounds() -> None:
    defaults = SnapshotPolicy.from_configs(ServerConfig(SERVER_BASE).get_int)
    assert defaults == SnapshotPolicy(max_bytes_between=20 * 1024 * 1024,
                                      max_interval_ms=3_600_000,
                                      retention_bytes=100 * 1024 * 1024,
                                      retention_ms=7 * 24 * 3_600_000)
    tiny = ServerConfig({**SERVER_BASE, "metadata.log.max.record.bytes.between.snapshots": "1",
                         "metadata.log.max.snapshot.interval.ms": "0",
                         "metadata.max.retention.bytes": "-1",
                         "metadata.max.retention.ms": "0"})
    assert SnapshotPolicy.from_configs(tiny.get_int) == SnapshotPolicy(1, 0, -1, 0)
    for key, value in [("metadata.log.max.record.bytes.between.snapshots", "0"),
                       ("metadata.log.max.snapshot.interval.ms", "-1"),
                       ("metadata.log.max.snapshot.interval.ms", "soon")]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            ServerConfig({**SERVER_BASE, key: value})


async def test_cancelling_the_task_as_a_batch_commits_stops_it(tmp_path: Path) -> None:
    """A stop cancels the task while committed batches wake it: the cancellation must win
    (Python 3.11's wait_for would return the wake-up and lose it, hanging the stop)."""
    clock = Clock()
    raft, machine = await open_node(tmp_path, NO_TRIGGER, clock)
    snapshots = machine.snapshots
    assert snapshots is not None
    try:
        for _ in range(20):
            task = asyncio.create_task(snapshots.run())
            await asyncio.sleep(0.01)  # waiting for a wake-up
            snapshots.note_commit(CommittedBatch(base_offset=0, last_offset=0, epoch=1,
                                                 append_timestamp=clock.ms, records=(b"x",)))
            snapshots._due.set()
            task.cancel()
            done, _ = await asyncio.wait([task], timeout=2)
            assert task in done and task.cancelled()
            await snapshots.close()
    finally:
        await raft.stop()
