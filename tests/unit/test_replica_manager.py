"""The leader's side of replication, one layer: real logs in a temp dir, a ReplicaManager
driven by partition registrations, followers' fetches as calls, and a recorded
AlterPartition sender in place of the controller."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pykraft.broker.replica_manager import (
    NEW_LOGS_ON_LOOP,
    IsrUpdate,
    IsrUpdateResult,
    Partition,
    ReplicaManager,
)
from pykraft.errors import (
    KafkaStorageError,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    OffsetOutOfRange,
    OutOfOrderSequenceNumber,
    RequestTimedOut,
)
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.records import (
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from pykraft.metadata.registrations import LeaderRecoveryState, PartitionRegistration
from pykraft.records.record import build_batch
from pykraft.storage.log import Log
from pykraft.storage.log_config import LogConfig
from pykraft.storage.log_manager import LogManager

TOPIC_ID = uuid.UUID(int=7)
ME = 1


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def registration(leader: int, epoch: int, isr: tuple[int, ...], *, partition_epoch: int = 0,
                 replicas: tuple[int, ...] = (1, 2, 3)) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=replicas, isr=isr, removing_replicas=(), adding_replicas=(), leader=leader,
        leader_recovery_state=LeaderRecoveryState.RECOVERED, leader_epoch=epoch,
        partition_epoch=partition_epoch, directories=())


def batch(count: int = 1) -> bytes:
    return build_batch([(b"k", b"v" * 10, [], 1_000_000) for _ in range(count)])


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def manager(tmp_path: Path, clock: Clock) -> Iterator[ReplicaManager]:
    log_manager = LogManager([tmp_path], {"replica.lag.time.max.ms": "10000"})
    log_manager.load(clock())
    replicas = ReplicaManager(ME, log_manager, {"replica.lag.time.max.ms": "10000",
                                                "min.insync.replicas": "2"}, clock)
    yield replicas
    log_manager.close()


def place(manager: ReplicaManager, reg: PartitionRegistration) -> Partition:
    """What a metadata delta placing partition t-0 on this broker does."""
    config = LogConfig.from_configs({}, manager.server_configs)
    manager._apply_partition("t", TOPIC_ID, 0, reg, config)
    partition = manager.get_partition("t", 0)
    assert partition is not None
    return partition


def test_high_watermark_is_the_smallest_log_end_over_the_isr(manager: ReplicaManager) -> None:
    partition = place(manager, registration(ME, 0, (1, 2, 3)))
    manager.append(partition, batch(5), acks=-1)
    assert partition.log.log_end_offset == 5
    assert partition.log.high_watermark == 0  # followers' positions are not known yet
    manager.follower_fetch(partition, 2, 5, 0)
    assert partition.log.high_watermark == 0  # broker 3 still unknown
    manager.follower_fetch(partition, 3, 3, 0)
    assert partition.log.high_watermark == 3
    manager.follower_fetch(partition, 3, 1, 0)  # an older fetch never moves it back
    assert partition.log.high_watermark == 3
    manager.follower_fetch(partition, 3, 5, 0)
    assert partition.log.high_watermark == 5


def test_the_injected_bug_lets_the_high_watermark_pass_the_isr(tmp_path: Path,
                                                             clock: Clock) -> None:
    """pykraft.testing.unsafe.leader.high.watermark, the fault campaign's injected bug: the
    HW follows the leader's log end, whatever the followers have."""
    log_manager = LogManager([tmp_path], {})
    log_manager.load(clock())
    try:
        manager = ReplicaManager(ME, log_manager, {
            "min.insync.replicas": "2",
            "pykraft.testing.unsafe.leader.high.watermark": "true"}, clock)
        partition = place(manager, registration(ME, 0, (1, 2, 3)))
        manager.append(partition, batch(5), acks=-1)
        assert partition.log.high_watermark == 5
    finally:
        log_manager.close()


def test_followers_read_up_to_the_log_end_consumers_up_to_the_hw(
        manager: ReplicaManager) -> None:
    partition = place(manager, registration(ME, 0, (1, 2, 3)))
    manager.append(partition, batch(3), acks=1)
    consumer = manager.read(partition, 0, 10_000, min_one_message=True)
    follower = manager.read(partition, 0, 10_000, min_one_message=True,
                            up_to_high_watermark=False)
    assert consumer.records == b"" and follower.next_offset == 3


def test_a_new_leader_records_its_epoch_at_its_log_end(manager: ReplicaManager) -> None:
    partition = place(manager, registration(2, 4, (1, 2, 3)))
    partition.log.append_as_follower(build_batch([(b"k", b"v", [], 1)], base_offset=0,
                                                 partition_leader_epoch=4))
    partition = place(manager, registration(ME, 5, (1, 2, 3), partition_epoch=1))
    assert partition.log.leader_epoch_cache.entries[-1] == (5, 1)
    assert partition.leader_epoch_start_offset == 1


def test_a_follower_of_a_stale_epoch_gets_the_diverging_epoch(manager: ReplicaManager) -> None:
    partition = place(manager, registration(ME, 3, (1, 2, 3)))
    manager.append(partition, batch(4), acks=1)  # epoch 3: offsets 0-3
    partition = place(manager, registration(ME, 6, (1, 2, 3), partition_epoch=1))
    manager.append(partition, batch(2), acks=1)  # epoch 6: offsets 4-5
    # a follower that wrote offsets 0-6 in epoch 3 (a deposed leader's tail)
    seen = manager.follower_fetch(partition, 2, 7, 3)
    assert (seen.diverging_epoch, seen.diverging_end_offset) == (3, 4)
    assert partition.followers[2].log_end_offset == -1  # not recorded
    # an epoch the leader never had, between two it had: the one below it, and where it ended
    seen = manager.follower_fetch(partition, 2, 4, 5)
    assert (seen.diverging_epoch, seen.diverging_end_offset) == (3, 4)
    # consistent: recorded
    assert not manager.follower_fetch(partition, 2, 4, 3).diverged
    assert partition.followers[2].log_end_offset == 4
    assert not manager.follower_fetch(partition, 2, 6, 6).diverged


def test_fetches_outside_the_log_and_from_non_replicas_are_refused(
        manager: ReplicaManager) -> None:
    partition = place(manager, registration(ME, 0, (1, 2, 3)))
    manager.append(partition, batch(2), acks=1)
    with pytest.raises(OffsetOutOfRange):
        manager.follower_fetch(partition, 2, 3, -1)
    with pytest.raises(NotLeaderOrFollower):
        manager.follower_fetch(partition, 9, 0, -1)


def test_min_insync_replicas_refuses_acks_all_before_the_append(
        manager: ReplicaManager) -> None:
    partition = place(manager, registration(ME, 0, (1,)))
    with pytest.raises(NotEnoughReplicas):
        manager.append(partition, batch(), acks=-1)
    assert partition.log.log_end_offset == 0
    manager.append(partition, batch(), acks=1)  # acks=1 does not care
    assert partition.log.log_end_offset == 1


def test_acks_all_outcomes(manager: ReplicaManager, clock: Clock) -> None:
    partition = place(manager, registration(ME, 0, (1, 2)))
    info = manager.append(partition, batch(2), acks=-1)
    end = info.last_offset + 1
    with pytest.raises(RequestTimedOut):
        manager.check_acks_all(partition, 0, end)
    manager.follower_fetch(partition, 2, end, 0)
    manager.check_acks_all(partition, 0, end)  # replicated: fine
    partition.isr = (1,)  # the ISR shrank meanwhile
    with pytest.raises(NotEnoughReplicasAfterAppend):
        manager.check_acks_all(partition, 0, end)
    place(manager, registration(2, 1, (2,), partition_epoch=2))
    with pytest.raises(NotLeaderOrFollower):
        manager.check_acks_all(partition, 0, end)


async def test_an_acks_all_wait_ends_when_a_follower_catches_up(
        manager: ReplicaManager) -> None:
    partition = place(manager, registration(ME, 0, (1, 2)))
    info = manager.append(partition, batch(), acks=-1)
    waiting = asyncio.ensure_future(
        manager.wait_for_high_watermark([(partition, info.last_offset + 1)], 5_000))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    manager.follower_fetch(partition, 2, 1, 0)
    await asyncio.wait_for(waiting, 1)
    assert partition.log.high_watermark == 1


class Controller:
    """Answers AlterPartition as the controller would, one partition epoch further."""

    def __init__(self, error: int = 0) -> None:
        self.updates: list[IsrUpdate] = []
        self.error = error

    async def __call__(self, updates: list[IsrUpdate]) -> list[IsrUpdateResult]:
        self.updates.extend(updates)
        if self.error:
            return [IsrUpdateResult(self.error) for _ in updates]
        return [IsrUpdateResult(0, ME, update.leader_epoch, update.new_isr,
                                update.partition_epoch + 1) for update in updates]


async def test_isr_shrinks_after_the_lag_time_and_expands_on_catch_up(
        manager: ReplicaManager, clock: Clock) -> None:
    controller = Controller()
    manager.alter_partition = controller
    partition = place(manager, registration(ME, 0, (1, 2, 3)))
    manager.append(partition, batch(3), acks=1)
    manager.follower_fetch(partition, 2, 3, 0)
    manager.follower_fetch(partition, 3, 1, 0)
    clock.ms += 5_000
    assert manager.maybe_shrink_isr() == 0
    manager.follower_fetch(partition, 2, 3, 0)  # 2 keeps up; 3 stays behind
    clock.ms += 6_000
    assert manager.maybe_shrink_isr() == 1
    assert partition.maximal_isr == (1, 2, 3)  # a pending shrink keeps the old ISR
    await asyncio.sleep(0.01)
    assert controller.updates[-1].new_isr == (1, 2)
    assert controller.updates[-1].partition_epoch == 0
    assert partition.isr == (1, 2) and partition.partition_epoch == 1
    assert partition.log.high_watermark == 3  # no longer held back by broker 3
    # broker 3 fetches, reaches the HW (and the epoch start): added back
    manager.follower_fetch(partition, 3, 3, 0)
    await asyncio.sleep(0.01)
    assert controller.updates[-1].new_isr == (1, 2, 3)
    assert partition.isr == (1, 2, 3) and partition.partition_epoch == 2


async def test_a_leader_that_cannot_read_its_log_answers_storage_errors_and_keeps_its_isr(
        manager: ReplicaManager, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """EIO reading the log (a failing disk) is KAFKA_STORAGE_ERROR to the fetcher, and the
    followers it could not serve are not dropped from the ISR for lagging: otherwise the
    failing leader would end up the ISR's only member (found by the fault campaign)."""
    manager.alter_partition = Controller()
    partition = place(manager, registration(ME, 0, (1, 2, 3)))
    manager.append(partition, batch(3), acks=1)
    manager.follower_fetch(partition, 2, 1, 0)
    manager.follower_fetch(partition, 3, 1, 0)
    real_read = Log.read
    failing_log = partition.log

    def failing(log: Log, *args: Any, **kwargs: Any) -> Any:  # this log's reads fail (EIO)
        if log is failing_log:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_read(log, *args, **kwargs)

    monkeypatch.setattr(Log, "read", failing)
    with pytest.raises(KafkaStorageError):
        manager.read(partition, 1, 10_000, min_one_message=True, up_to_high_watermark=False)
    clock.ms += 60_000
    assert manager.maybe_shrink_isr() == 0
    monkeypatch.setattr(Log, "read", real_read)
    assert manager.read(partition, 1, 10_000, min_one_message=True,
                        up_to_high_watermark=False).next_offset == 3
    assert manager.maybe_shrink_isr() == 1  # it reads again: lagging followers are judged


async def test_a_refused_isr_change_is_dropped_until_the_metadata_moves(
        manager: ReplicaManager, clock: Clock) -> None:
    controller = Controller(error=95)  # INVALID_UPDATE_VERSION
    manager.alter_partition = controller
    partition = place(manager, registration(ME, 0, (1, 2)))
    manager.append(partition, batch(1), acks=1)  # broker 2 has not fetched it
    clock.ms += 20_000
    assert manager.maybe_shrink_isr() == 1
    await asyncio.sleep(0.01)
    assert partition.isr == (1, 2) and partition.pending_isr is None
    # the committed state arrives through the metadata
    place(manager, registration(ME, 0, (1,), partition_epoch=3))
    assert partition.isr == (1,) and partition.partition_epoch == 3


@pytest.mark.parametrize(("error", "again_after_ms"), [
    (95, None),  # INVALID_UPDATE_VERSION: the controller has a newer partition epoch
    (74, None),  # FENCED_LEADER_EPOCH: and a newer leader epoch
    (107, 500),  # INELIGIBLE_REPLICA: not a stale state; proposed again in a while
])
async def test_a_proposal_refused_for_a_stale_state_waits_for_the_metadata(
        manager: ReplicaManager, clock: Clock, error: int, again_after_ms: int | None) -> None:
    """Refused because the controller has a newer state of the partition, the leader does
    not propose again from the state it has (every 500 ms, at 1,000,000 partitions, a
    broker lagging on the metadata proposed 3.4 million ISR changes in 23 minutes) until
    the metadata brings it; refused for another reason, it tries again after 500 ms."""
    controller = Controller(error=error)
    manager.alter_partition = controller
    partition = place(manager, registration(ME, 0, (1, 2)))
    manager.append(partition, batch(1), acks=1)
    clock.ms += 20_000
    manager.maybe_shrink_isr()
    await asyncio.sleep(0.01)
    assert len(controller.updates) == 1 and partition.pending_isr is None
    clock.ms += 600
    manager.maybe_shrink_isr()
    await asyncio.sleep(0.01)
    assert len(controller.updates) == (1 if again_after_ms is None else 2)
    if again_after_ms is None:
        clock.ms += 60_000
        manager.maybe_shrink_isr()
        await asyncio.sleep(0.01)
        assert len(controller.updates) == 1
        place(manager, registration(ME, 0, (1, 2), partition_epoch=4))  # the newer state
        manager.maybe_shrink_isr()
        await asyncio.sleep(0.01)
        assert [u.partition_epoch for u in controller.updates] == [0, 4]


def test_a_silent_follower_of_an_idle_partition_stays_in_the_isr(
        manager: ReplicaManager, clock: Clock) -> None:
    partition = place(manager, registration(ME, 0, (1, 2, 3)))
    manager.append(partition, batch(2), acks=1)
    manager.follower_fetch(partition, 2, 2, 0)
    manager.follower_fetch(partition, 3, 2, 0)
    clock.ms += 60_000  # neither fetched since, but both hold the whole log
    assert manager.out_of_sync_replicas(partition, clock()) == ()
    manager.append(partition, batch(1), acks=1)  # now they are behind
    assert manager.out_of_sync_replicas(partition, clock()) == (2, 3)


async def test_no_new_proposal_right_after_a_refusal(manager: ReplicaManager,
                                                     clock: Clock) -> None:
    controller = Controller(error=107)  # INELIGIBLE_REPLICA
    manager.alter_partition = controller
    partition = place(manager, registration(ME, 0, (1, 2)))
    manager.follower_fetch(partition, 3, 0, -1)  # caught up: proposed, refused
    await asyncio.sleep(0.01)
    assert len(controller.updates) == 1 and partition.pending_isr is None
    manager.follower_fetch(partition, 3, 0, -1)
    await asyncio.sleep(0.01)
    assert len(controller.updates) == 1  # quiet for a moment
    clock.ms += 1_000
    manager.follower_fetch(partition, 3, 0, -1)
    await asyncio.sleep(0.01)
    assert len(controller.updates) == 2


# -- following the metadata: new replicas' logs ---------------------------------------------


def _delta(base: MetadataImage, records: list[MetadataRecord],
           ) -> tuple[MetadataDelta, MetadataImage]:
    delta = MetadataDelta(base)
    for record in records:
        delta.replay(record)
    return delta, delta.apply(base.offset + len(records), 1)


def _topic(name: str, topic_id: uuid.UUID, partitions: int) -> list[MetadataRecord]:
    return [TopicRecord(name=name, topic_id=topic_id), *(
        PartitionRecord(partition_id=index, topic_id=topic_id, replicas=(1, 2, 3), isr=(1, 2, 3),
                        leader=ME if index % 2 == 0 else 2, leader_epoch=0, partition_epoch=0)
        for index in range(partitions))]


async def _until_created(manager: ReplicaManager) -> None:
    async with asyncio.timeout(30):
        while manager._creator is not None:
            await asyncio.sleep(0.01)


async def test_many_new_replicas_get_their_logs_off_the_event_loop(
        manager: ReplicaManager, tmp_path: Path) -> None:
    """A delta placing more than NEW_LOGS_ON_LOOP replicas here returns before their logs
    exist; meanwhile they are not served (retriable NOT_LEADER_OR_FOLLOWER), a topic
    deleted in the meantime never gets a log, and every other replica ends up served with
    the newest registration it was given."""
    many = NEW_LOGS_ON_LOOP + 36
    big, doomed, again = uuid.UUID(int=100), uuid.UUID(int=101), uuid.UUID(int=102)
    delta, image = _delta(MetadataImage.EMPTY,
                          _topic("big", big, many) + _topic("doomed", doomed, many))
    manager.apply_delta(delta, image)
    assert manager.get_partition("big", 0) is None
    with pytest.raises(NotLeaderOrFollower):
        manager.leader_partition("big", 0, image)
    # before any log is made: partition 1 changes leader, "doomed" is deleted and made
    # again under a new id with a few partitions (a small delta: normally made at once)
    moved = PartitionChangeRecord(partition_id=1, topic_id=big, leader=ME)
    delta, image = _delta(image, [moved, RemoveTopicRecord(topic_id=doomed)])
    manager.apply_delta(delta, image)
    delta, image = _delta(image, _topic("doomed", again, 4))
    manager.apply_delta(delta, image)
    await _until_created(manager)
    for index in range(many):
        partition = manager.get_partition("big", index)
        assert partition is not None and partition.log.topic_id == big
        assert partition.leader_id == (ME if index % 2 == 0 or index == 1 else 2)
    assert manager.leader_partition("big", 1, image).leader_epoch == 1
    assert {manager.get_partition("doomed", i) is not None for i in range(4)} == {True}
    assert all(manager.get_partition("doomed", i).log.topic_id == again  # type: ignore[union-attr]
               for i in range(4))
    assert manager.get_partition("doomed", 4) is None
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("doomed-")) == [
        f"doomed-{i}" for i in range(4)]
    info = manager.append(manager.leader_partition("big", 0, image), batch(3), acks=1)
    assert info.last_offset == 2


async def test_each_delta_that_moves_replicas_here_is_logged_with_its_offset(
        manager: ReplicaManager, caplog: pytest.LogCaptureFixture) -> None:
    topic = uuid.UUID(int=6)
    with caplog.at_level(logging.INFO, logger="pykraft.broker.replica_manager"):
        delta, image = _delta(MetadataImage.EMPTY, _topic("moved", topic, 6))
        manager.apply_delta(delta, image)
        delta, image = _delta(image, [ConfigRecord(resource_type=2, resource_name="moved",
                                                   name="retention.ms", value="1000")])
        manager.apply_delta(delta, image)  # no replica moves: nothing said
        delta, image = _delta(image, [PartitionChangeRecord(partition_id=1, topic_id=topic,
                                                            leader=ME)])
        manager.apply_delta(delta, image)
    said = [r.getMessage() for r in caplog.records if "to lead" in r.getMessage()]
    assert said == ["metadata at offset 6: 3 partition(s) to lead, 3 to follow here",
                    "metadata at offset 8: 1 partition(s) to lead, 0 to follow here"]


async def test_a_few_new_replicas_are_served_at_once(manager: ReplicaManager) -> None:
    delta, image = _delta(MetadataImage.EMPTY, _topic("few", uuid.UUID(int=5), 8))
    manager.apply_delta(delta, image)
    assert manager._creator is None
    assert manager.leader_partition("few", 0, image).log.log_end_offset == 0


async def test_isr_proposals_made_while_one_is_in_flight_go_in_one_request(
        tmp_path: Path, clock: Clock) -> None:
    """Kafka's AlterPartitionManager: one AlterPartition in flight; the proposals made
    meanwhile are sent together and each partition gets its own answer; a failed request
    is sent again, after a backoff, with what still stands of it."""
    sent: list[list[int]] = []
    release = asyncio.Event()

    async def send(updates: list[IsrUpdate]) -> list[IsrUpdateResult]:
        sent.append([u.partition for u in updates])
        if len(sent) == 1:
            await release.wait()
        if len(sent) == 3:
            raise ConnectionError("controller gone")
        return [IsrUpdateResult(0, ME, u.leader_epoch, u.new_isr, u.partition_epoch + 1)
                for u in updates]

    log_manager = LogManager([tmp_path], {})
    log_manager.load(clock())
    manager = ReplicaManager(ME, log_manager, {"retry.backoff.ms": "10"}, clock)
    manager.alter_partition = send
    config = LogConfig.from_configs({}, manager.server_configs)
    partitions = []
    for index in range(6):
        manager._apply_partition("t", TOPIC_ID, index, registration(ME, 0, (1, 2)), config)
        partition = manager.get_partition("t", index)
        assert partition is not None
        partitions.append(partition)
    try:
        manager.follower_fetch(partitions[0], 3, 0, -1)  # caught up: proposes (1, 2, 3)
        await asyncio.sleep(0)
        for partition in partitions[1:4]:
            manager.follower_fetch(partition, 3, 0, -1)
        await asyncio.sleep(0)
        assert sent == [[0]]
        release.set()
        for _ in range(100):
            await asyncio.sleep(0)
        assert sent == [[0], [1, 2, 3]]
        assert [p.isr for p in partitions[:4]] == [(1, 2, 3)] * 4
        assert [p.partition_epoch for p in partitions[:4]] == [1] * 4
        manager.follower_fetch(partitions[4], 3, 0, -1)
        manager.follower_fetch(partitions[5], 3, 0, -1)
        await asyncio.sleep(0.2)
        assert sent == [[0], [1, 2, 3], [4, 5], [4, 5]]  # failed, then sent again
        assert [p.isr for p in partitions] == [(1, 2, 3)] * 6
        assert all(p.pending_isr is None for p in partitions)
    finally:
        await manager.close()
        log_manager.close()


def test_an_append_on_a_full_disk_is_a_storage_error_and_the_next_one_continues(
        manager: ReplicaManager, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """ENOSPC answers KAFKA_STORAGE_ERROR, logged once however many appends fail; reads
    go on; once space returns the next append takes the offsets the failed ones would."""
    partition = place(manager, registration(ME, 0, (1, 2, 3)))
    manager.append(partition, batch(2), acks=1)
    real_pwrite = os.pwrite

    def full(fd: int, data: bytes, position: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", full)
    with caplog.at_level(logging.ERROR, logger="pykraft.storage.storage_errors"):
        for _ in range(50):
            with pytest.raises(KafkaStorageError):
                manager.append(partition, batch(3), acks=1)
    assert len(caplog.records) == 1 and "No space left" in caplog.records[0].getMessage()
    assert partition.log.log_end_offset == 2
    assert manager.read(partition, 0, 10_000, min_one_message=True,
                        up_to_high_watermark=False).next_offset == 2
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    assert manager.append(partition, batch(3), acks=1).first_offset == 2


def idempotent(sequence: int, count: int, producer_id: int = 42) -> bytes:
    return build_batch([(b"k", b"v", [], 1_000_000) for _ in range(count)],
                       producer_id=producer_id, producer_epoch=0, base_sequence=sequence)


def test_batches_pipelined_behind_one_that_failed_on_storage_fail_the_same_way(
        manager: ReplicaManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """An idempotent producer's first batch fails on a full disk; the batches it pipelined
    behind it get KAFKA_STORAGE_ERROR too, not OUT_OF_ORDER_SEQUENCE_NUMBER (on which
    librdkafka bumps its epoch and re-sends batches that may be written: duplicates, as
    the fault campaign found). Another producer's gap is still out of order; once the
    first batch is retried and written, the rest follow in order."""
    partition = place(manager, registration(ME, 0, (1, 2, 3)))
    manager.append(partition, idempotent(0, 2), acks=1)
    real_pwrite = os.pwrite

    def full(fd: int, data: bytes, position: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(KafkaStorageError):
        manager.append(partition, idempotent(2, 3), acks=1)
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    with pytest.raises(KafkaStorageError):
        manager.append(partition, idempotent(5, 3), acks=1)  # pipelined behind the failure
    manager.append(partition, idempotent(0, 1, producer_id=43), acks=1)
    with pytest.raises(OutOfOrderSequenceNumber):
        manager.append(partition, idempotent(5, 1, producer_id=43), acks=1)
    assert manager.append(partition, idempotent(2, 3), acks=1).first_offset == 3
    assert manager.append(partition, idempotent(5, 3), acks=1).first_offset == 6
    assert not partition.storage_failed_producers
    with pytest.raises(OutOfOrderSequenceNumber):  # a real gap, once written in order again
        manager.append(partition, idempotent(20, 1), acks=1)


def test_a_topic_named_as_the_metadata_log_never_gets_a_replica(
        manager: ReplicaManager, tmp_path: Path) -> None:
    """A metadata log written before the controller refused the name may hold such a topic:
    its partition 0 would share __cluster_metadata-0 with the Raft log, so it is ignored."""
    reserved, other = uuid.UUID(int=200), uuid.UUID(int=201)
    delta, image = _delta(MetadataImage.EMPTY,
                          _topic("__cluster_metadata", reserved, 2) + _topic("fine", other, 1))
    manager.apply_delta(delta, image)
    assert manager.get_partition("__cluster_metadata", 0) is None
    assert manager.get_partition("fine", 0) is not None
    assert not list(tmp_path.glob("__cluster_metadata-*"))


async def test_a_log_that_could_not_be_created_is_created_once_space_returns(
        manager: ReplicaManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica placed here while its log cannot be created (ENOSPC) is not served, and is
    created and served by a later retry, without a new delta; one
    the metadata no longer places here is forgotten instead."""
    real = manager.log_manager.get_or_create_log

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(manager.log_manager, "get_or_create_log", full)
    delta, image = _delta(MetadataImage.EMPTY, _topic("late", uuid.UUID(int=9), 2))
    manager.apply_delta(delta, image)
    assert manager.get_partition("late", 0) is None
    with pytest.raises(NotLeaderOrFollower):
        manager.leader_partition("late", 0, image)
    assert manager.retry_unplaced() == []  # still full
    monkeypatch.setattr(manager.log_manager, "get_or_create_log", real)
    created = manager.retry_unplaced()
    assert sorted(p.name for p in created) == ["late-0", "late-1"]
    assert manager.append(manager.leader_partition("late", 0, image), batch(2),
                          acks=1).last_offset == 1
    assert manager.retry_unplaced() == []  # nothing left to create

    monkeypatch.setattr(manager.log_manager, "get_or_create_log", full)
    delta, image = _delta(image, _topic("gone", uuid.UUID(int=10), 1))
    manager.apply_delta(delta, image)
    delta, image = _delta(image, [RemoveTopicRecord(topic_id=uuid.UUID(int=10))])
    manager.apply_delta(delta, image)
    monkeypatch.setattr(manager.log_manager, "get_or_create_log", real)
    assert manager.retry_unplaced() == [] and manager.get_partition("gone", 0) is None
    assert manager._unplaced == set()


class FetcherCalls:
    """The replica fetchers as calls recorded: (follow or unfollow, partition index)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def follow(self, partition: Partition) -> None:
        self.calls.append(("follow", partition.index))

    def unfollow(self, partition: Partition) -> None:
        self.calls.append(("unfollow", partition.index))


async def test_in_its_controlled_shutdown_a_broker_stops_fetching_what_left_its_isr(
        manager: ReplicaManager) -> None:
    """Kafka's applyLocalFollowersDelta: once this broker began its controlled shutdown,
    a follower replica whose ISR it left (or that has no leader) is no longer
    fetched, whether its leader moved or not; one still in the ISR follows its new leader.
    Before that, leaving an ISR under the same leader changes nothing here."""
    topic = uuid.UUID(int=8)
    fetchers = FetcherCalls()
    manager.fetchers = fetchers
    delta, image = _delta(MetadataImage.EMPTY, _topic("s", topic, 6))
    manager.apply_delta(delta, image)
    assert sorted(fetchers.calls) == [("follow", 1), ("follow", 3), ("follow", 5),
                                      ("unfollow", 0), ("unfollow", 2), ("unfollow", 4)]
    fetchers.calls.clear()
    # not shutting down: out of the ISR of partition 1 under the same leader
    delta, image = _delta(image, [PartitionChangeRecord(partition_id=1, topic_id=topic,
                                                        isr=(2, 3))])
    manager.apply_delta(delta, image)
    assert fetchers.calls == []
    manager.begin_controlled_shutdown()
    delta, image = _delta(image, [
        PartitionChangeRecord(partition_id=0, topic_id=topic, leader=2, isr=(2, 3)),
        PartitionChangeRecord(partition_id=2, topic_id=topic, leader=3),  # still in the ISR
        PartitionChangeRecord(partition_id=3, topic_id=topic, isr=(2, 3)),
        PartitionChangeRecord(partition_id=4, topic_id=topic, leader=-1, isr=(1,))])
    manager.apply_delta(delta, image)
    assert sorted(fetchers.calls) == [("follow", 2), ("unfollow", 0), ("unfollow", 3),
                                      ("unfollow", 4)]
    assert manager.get_partition("s", 0).leader_id == 2  # type: ignore[union-attr]
    assert manager.get_partition("s", 0).followers == {}  # type: ignore[union-attr]


def test_a_follower_of_a_log_that_never_held_a_record_stays_in_the_isr(
        manager: ReplicaManager, clock: Clock) -> None:
    """Nothing to be behind on: a follower that has not fetched a new, empty partition (its
    log still being made on a broker creating 1,000,000) stays in the ISR however long;
    after the first append it is judged from when this broker took over, so one that never
    fetched leaves at the next check."""
    partition = place(manager, registration(ME, 0, (1, 2, 3)))
    manager.follower_fetch(partition, 2, 0, -1)
    clock.ms += manager.replica_lag_time_max_ms * 10
    assert manager.out_of_sync_replicas(partition, clock()) == ()
    assert manager.maybe_shrink_isr() == 0
    manager.append(partition, batch(1), acks=1)
    assert manager.out_of_sync_replicas(partition, clock()) == (2, 3)
