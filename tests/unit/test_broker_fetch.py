"""A broker's Fetch handler, one layer: real logs and a ReplicaManager, the request as a kio
entity, no sockets. What is checked here is how a look at many partitions shares the loop."""

from __future__ import annotations

import asyncio
import datetime
import threading
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_request
from kio.schema.fetch.v15 import request as fetch_v15

from pykraft.broker import apis as apis_module
from pykraft.broker.apis import BrokerApis
from pykraft.broker.metadata_cache import MetadataCache
from pykraft.broker.replica_manager import NEW_LOGS_ON_LOOP, Partition, ReplicaManager
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.records import PartitionRecord, TopicRecord
from pykraft.metadata.registrations import LeaderRecoveryState, PartitionRegistration
from pykraft.protocol.entities import make
from pykraft.records.record import build_batch
from pykraft.storage.log_config import LogConfig
from pykraft.storage.log_manager import LogManager

ME = 1
TOPIC_ID = uuid.UUID(int=11)
PARTITIONS = 50


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def manager(tmp_path: Path, clock: Clock) -> Iterator[ReplicaManager]:
    log_manager = LogManager([tmp_path], {})
    log_manager.load(0)
    yield ReplicaManager(ME, log_manager, {}, clock)
    log_manager.close()


def lead(manager: ReplicaManager, index: int) -> Partition:
    registration = PartitionRegistration(
        replicas=(ME,), isr=(ME,), removing_replicas=(), adding_replicas=(), leader=ME,
        leader_recovery_state=LeaderRecoveryState.RECOVERED, leader_epoch=0,
        partition_epoch=0, directories=())
    manager._apply_partition("t", TOPIC_ID, index,
                             registration, LogConfig.from_configs({}, manager.server_configs))
    partition = manager.get_partition("t", index)
    assert partition is not None
    return partition


def consumer_fetch(offsets: dict[int, int], *, max_wait_ms: int = 0, session_id: int = 0,
                   epoch: int = -1) -> object:
    """A consumer's fetch of the partitions in `offsets` (index -> fetch offset); in a
    session (KIP-227) with `session_id` and `epoch`, none by default."""
    return make(
        fetch_request.FetchRequest, replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0, session_id=session_id, session_epoch=epoch,
        topics=(make(fetch_request.FetchTopic, topic="t", partitions=tuple(
            make(fetch_request.FetchPartition, partition=index, current_leader_epoch=-1,
                 fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                 partition_max_bytes=1 << 16)
            for index, offset in offsets.items())),) if offsets else (),
        forgotten_topics_data=(), rack_id="")


@pytest.fixture
def apis(manager: ReplicaManager) -> BrokerApis:
    return BrokerApis(ME, MetadataCache(ME, "cluster"), manager, [], auto_create_topics=None)


def count_idle_looks(monkeypatch: pytest.MonkeyPatch) -> list[Partition]:
    """The partitions whose idle state the Fetch handler works out, from now on."""
    looks: list[Partition] = []
    idle_state = apis_module._idle_state

    def counted(partition: Partition) -> object:
        looks.append(partition)
        return idle_state(partition)

    monkeypatch.setattr(apis_module, "_idle_state", counted)
    return looks


def record_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The indexes of the partitions the Fetch handler reads, from now on."""
    read = apis_module.BrokerApis._fetch_partition
    reads: list[int] = []

    def counted(self: BrokerApis, wanted: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(wanted.partition)
        return read(self, wanted, *args, **kwargs)

    monkeypatch.setattr(apis_module.BrokerApis, "_fetch_partition", counted)
    return reads


async def fetch(apis: BrokerApis, request: object, version: int = 12) -> Any:
    return await apis.fetch(types.SimpleNamespace(  # type: ignore[arg-type]
        header=types.SimpleNamespace(api_version=version), listener_name="PLAINTEXT"), request)


async def test_an_append_to_a_partition_looked_at_before_the_fetch_yielded_answers_it(
        manager: ReplicaManager, apis: BrokerApis, monkeypatch: pytest.MonkeyPatch) -> None:
    """The look yields after every partition here; an append to partition 0 lands while
    the look is at the others. The fetch answers with it at once, not after max_wait: the
    wait that follows the look would not hear of an append made before it parked."""
    monkeypatch.setattr(apis_module, "FETCH_SLICE_S", 0.0)
    monkeypatch.setattr(apis_module, "FETCH_SLICE_CHECK", 1)
    partitions = [lead(manager, index) for index in range(PARTITIONS)]
    fetching = asyncio.ensure_future(fetch(apis, consumer_fetch(
        dict.fromkeys(range(PARTITIONS), 0), max_wait_ms=10_000)))
    for _ in range(5):  # the look is a few partitions in
        await asyncio.sleep(0)
    assert not fetching.done()
    manager.append(partitions[0], build_batch([(b"k", b"v", [], 1)]), acks=1)
    response = await asyncio.wait_for(fetching, 5)
    answered = {data.partition_index: data for topic in response.responses
                for data in topic.partitions}
    assert answered[0].records and answered[0].high_watermark == 1
    assert all(not answered[index].records for index in range(1, PARTITIONS))


async def test_an_idle_session_looks_again_only_at_partitions_noted_as_changed(
        manager: ReplicaManager, apis: BrokerApis, clock: Clock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After a session's partitions went idle, an incremental fetch looks at none of them
    until the replica manager notes a change (an append here); a change it was not told
    of (retention moving a log start) is seen at the session's full look."""
    looks = count_idle_looks(monkeypatch)
    partitions = [lead(manager, index) for index in range(PARTITIONS)]
    for partition in partitions:
        manager.append(partition, build_batch([(b"k", b"v", [], 1)]), acks=1)
    opened = await fetch(apis, consumer_fetch(dict.fromkeys(range(PARTITIONS), 1), epoch=0))
    session_id = opened.session_id
    assert session_id != 0

    async def incremental(epoch: int, offsets: dict[int, int] | None = None
                          ) -> dict[int, Any]:
        response = await fetch(apis, consumer_fetch(offsets or {}, session_id=session_id,
                                                       epoch=epoch))
        return {data.partition_index: data for topic in response.responses
                for data in topic.partitions}

    assert await incremental(1) == {}
    looks.clear()
    assert await incremental(2) == {}
    assert looks == []  # none of the idle partitions was looked at
    manager.append(partitions[3], build_batch([(b"k", b"v", [], 1)]), acks=1)
    answered = await incremental(3)
    assert list(answered) == [3] and len(looks) <= 2
    partitions[7].log.delete_records(1, clock())  # as retention would: nobody told
    assert await incremental(4, {3: 2}) == {}  # the consumer moved past the record
    clock.ms += apis_module.FULL_LOOK_MS
    answered = await incremental(5)
    assert list(answered) == [7] and answered[7].log_start_offset == 1


async def test_a_parked_session_fetch_waits_on_the_changes_not_on_each_partition(
        manager: ReplicaManager, apis: BrokerApis, monkeypatch: pytest.MonkeyPatch) -> None:
    """An incremental fetch of an idle session parks on the replica manager's changes,
    registering nothing on its partitions; an append to one of them answers it with that
    partition, looked at again alone; an append to a partition outside the session wakes
    it only to look at nothing and park again."""
    partitions = [lead(manager, index) for index in range(PARTITIONS + 1)]
    outside = partitions.pop()
    in_session = dict.fromkeys(range(PARTITIONS), 0)
    opened = await fetch(apis, consumer_fetch(in_session, epoch=0))
    session_id = opened.session_id
    assert session_id != 0
    assert await fetch(apis, consumer_fetch({}, session_id=session_id, epoch=1))
    reads = record_reads(monkeypatch)
    fetching = asyncio.ensure_future(fetch(apis, consumer_fetch(
        {}, session_id=session_id, epoch=2, max_wait_ms=10_000)))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not fetching.done() and reads == []
    assert all(not partition.waiters for partition in [*partitions, outside])
    manager.append(outside, build_batch([(b"k", b"v", [], 1)]), acks=1)
    for _ in range(5):
        await asyncio.sleep(0)
    assert not fetching.done() and reads == []  # woken, looked at nothing, parked again
    manager.append(partitions[9], build_batch([(b"k", b"v", [], 1)]), acks=1)
    response = await asyncio.wait_for(fetching, 5)
    answered = {data.partition_index: data for topic in response.responses
                for data in topic.partitions}
    assert list(answered) == [9] and answered[9].records and reads == [9]


async def test_a_session_partition_named_before_its_topic_was_known_is_read_once_it_is(
        manager: ReplicaManager, apis: BrokerApis) -> None:
    """A fetch by topic id can come before this broker has applied the topic (a follower
    that applied it first): the session keeps the partition, answered UNKNOWN_TOPIC_ID, and
    reads it once the topic is known, though the fetcher does not name it again."""
    topics = types.SimpleNamespace(by_id={}, by_name={})
    apis.cache.image = types.SimpleNamespace(topics=topics)  # type: ignore[assignment]

    def by_id(offsets: dict[int, int], session_id: int, epoch: int) -> object:
        return make(
            fetch_v15.FetchRequest,
            replica_state=make(fetch_v15.ReplicaState, replica_id=-1, replica_epoch=-1),
            max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=session_id, session_epoch=epoch,
            topics=(make(fetch_v15.FetchTopic, topic_id=TOPIC_ID, partitions=tuple(
                make(fetch_v15.FetchPartition, partition=index, current_leader_epoch=-1,
                     fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                     partition_max_bytes=1 << 16)
                for index, offset in offsets.items())),) if offsets else (),
            forgotten_topics_data=(), rack_id="")

    opened = await fetch(apis, by_id({0: 0}, 0, 0), version=15)
    assert [p.error_code for t in opened.responses for p in t.partitions] == [
        ErrorCode.unknown_topic_id]
    partition = lead(manager, 0)  # the topic is applied here
    topics.by_id[TOPIC_ID] = types.SimpleNamespace(name="t")
    manager.append(partition, build_batch([(b"k", b"v", [], 1)]), acks=1)
    later = await fetch(apis, by_id({}, opened.session_id, 1), version=15)
    answered = [p for t in later.responses for p in t.partitions]
    assert [(p.error_code, bool(p.records)) for p in answered] == [(ErrorCode.none, True)]


def test_a_follower_caught_up_while_it_could_not_join_joins_once_it_can(
        manager: ReplicaManager, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Broker 2 fetched at the leader's end while fenced (restarted, not yet unfenced):
    no proposal then. Its later fetches of the idle partition take the session's shortcut
    (`follower_still_caught_up`), which must still propose it once it may join -- 15
    partitions of the 300,000-partition run stayed out of their ISRs for good."""
    registration = PartitionRegistration(
        replicas=(ME, 2), isr=(ME,), removing_replicas=(), adding_replicas=(), leader=ME,
        leader_recovery_state=LeaderRecoveryState.RECOVERED, leader_epoch=0,
        partition_epoch=0, directories=())
    manager._apply_partition("t", TOPIC_ID, 0, registration,
                             LogConfig.from_configs({}, manager.server_configs))
    partition = manager.get_partition("t", 0)
    assert partition is not None
    manager.append(partition, build_batch([(b"k", b"v", [], 1)]), acks=1)
    proposed: list[tuple[int, ...]] = []
    monkeypatch.setattr(manager, "_propose_isr", lambda _, isr: proposed.append(isr))
    eligible = False
    monkeypatch.setattr(manager, "_broker_eligible", lambda broker: eligible)
    manager.update_follower(partition, 2, partition.log.log_end_offset)
    assert proposed == []
    manager.follower_still_caught_up(partition, 2, clock())
    assert proposed == []
    eligible = True  # unfenced: its next fetch, still of an idle partition
    manager.follower_still_caught_up(partition, 2, clock())
    assert proposed == [(ME, 2)]


def follower_fetch(offsets: dict[int, int], *, session_id: int, epoch: int,
                   replica_id: int = 2, max_wait_ms: int = 0) -> object:
    """Broker `replica_id`'s fetch (v12: by topic name) of the partitions in `offsets`."""
    return make(
        fetch_request.FetchRequest, replica_id=replica_id,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=(make(fetch_request.FetchTopic, topic="t", partitions=tuple(
            make(fetch_request.FetchPartition, partition=index, current_leader_epoch=0,
                 fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=0,
                 partition_max_bytes=1 << 16)
            for index, offset in offsets.items())),) if offsets else (),
        forgotten_topics_data=(), rack_id="")


def lead_with_follower(manager: ReplicaManager, index: int) -> Partition:
    """A partition led here with broker 2 in its ISR, holding one record."""
    registration = PartitionRegistration(
        replicas=(ME, 2), isr=(ME, 2), removing_replicas=(), adding_replicas=(), leader=ME,
        leader_recovery_state=LeaderRecoveryState.RECOVERED, leader_epoch=0,
        partition_epoch=0, directories=())
    manager._apply_partition("t", TOPIC_ID, index, registration,
                             LogConfig.from_configs({}, manager.server_configs))
    partition = manager.get_partition("t", index)
    assert partition is not None
    manager.append(partition, build_batch([(b"k", b"v", [], 1)]), acks=1)
    return partition


async def test_an_idle_follower_stays_caught_up_without_a_look_at_its_partitions(
        manager: ReplicaManager, apis: BrokerApis, clock: Clock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Broker 2's session holds partitions idle at our log end; its fetches go on for
    longer than replica.lag.time.max.ms without looking at them (no full look). An append
    then leaves its recorded position behind ours: until it fetches again it still counts
    as caught up, as of its session's last look -- and no longer once that look is older
    than the lag allowed. Looking at each idle partition to record it was the full look
    every 5 s: with the rest of the look at idle partitions, up to 17% of a broker's time
    at 300,000 partitions."""
    monkeypatch.setattr(apis_module, "FULL_LOOK_MS", 10**9)
    partitions = [lead_with_follower(manager, index) for index in range(3)]
    lag_ms = manager.replica_lag_time_max_ms
    opened = await fetch(apis, follower_fetch(dict.fromkeys(range(3), 1), session_id=0,
                                              epoch=0))
    session_id = opened.session_id
    assert session_id != 0
    # its first fetch moved the high watermarks meanwhile: the next one looks at them again
    await fetch(apis, follower_fetch({}, session_id=session_id, epoch=1))
    looks = count_idle_looks(monkeypatch)
    epoch = 2
    for _ in range(4):  # 40 s of fetches, each 10 s apart, none looking at a partition
        clock.ms += lag_ms // 3
        assert (await fetch(apis, follower_fetch({}, session_id=session_id,
                                                 epoch=epoch))).responses == ()
        epoch += 1
    assert looks == []
    manager.append(partitions[0], build_batch([(b"k", b"v", [], 1)]), acks=1)
    assert partitions[0].followers[2].log_end_offset == 1  # behind our 2 since long ago
    assert clock() - partitions[0].followers[2].last_caught_up_ms > lag_ms
    assert manager.out_of_sync_replicas(partitions[0], clock()) == ()
    assert manager.maybe_shrink_isr() == 0
    clock.ms += lag_ms  # the session's last look is now as old as the lag allowed
    assert manager.out_of_sync_replicas(partitions[0], clock()) == ()
    clock.ms += 1
    assert manager.out_of_sync_replicas(partitions[0], clock()) == (2,)
    assert manager.out_of_sync_replicas(partitions[1], clock()) == ()  # still at our end


async def test_a_follower_partition_read_again_after_a_change_is_caught_up_as_of_the_last_look(
        manager: ReplicaManager, apis: BrokerApis, clock: Clock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After a long idle time, an append to a session's idle partition: the follower's
    next fetch reads it from its old position and gets the record. Until the fetch after,
    the follower counts as caught up as of the session's look before (Kafka's previous
    fetch), not as of when it was last read, long ago."""
    monkeypatch.setattr(apis_module, "FULL_LOOK_MS", 10**9)
    partition = lead_with_follower(manager, 0)
    lag_ms = manager.replica_lag_time_max_ms
    opened = await fetch(apis, follower_fetch({0: 1}, session_id=0, epoch=0))
    session_id = opened.session_id
    await fetch(apis, follower_fetch({}, session_id=session_id, epoch=1))  # (the new HW)
    for epoch in range(2, 5):
        clock.ms += lag_ms // 3
        await fetch(apis, follower_fetch({}, session_id=session_id, epoch=epoch))
    last_look = clock()
    clock.ms += 100
    manager.append(partition, build_batch([(b"k", b"v", [], 1)]), acks=1)
    answered = await fetch(apis, follower_fetch({}, session_id=session_id, epoch=5))
    [data] = [p for t in answered.responses for p in t.partitions]
    assert data.records and data.high_watermark == 1
    assert partition.followers[2].log_end_offset == 1
    assert partition.followers[2].last_caught_up_ms == last_look
    clock.ms += lag_ms - 100
    assert manager.out_of_sync_replicas(partition, clock()) == ()
    clock.ms += 1
    assert manager.out_of_sync_replicas(partition, clock()) == (2,)


async def test_an_isr_change_that_keeps_the_follower_in_it_is_not_read_again(
        manager: ReplicaManager, apis: BrokerApis, monkeypatch: pytest.MonkeyPatch) -> None:
    """A controlled shutdown takes one broker out of every ISR: the sessions of the other
    followers, idle at our log end, do not read those partitions again (no answer tells
    the ISR); a follower taken out of the ISR itself is read again, to be added back."""
    def registration(isr: tuple[int, ...], partition_epoch: int) -> PartitionRegistration:
        return PartitionRegistration(
            replicas=(ME, 2, 3), isr=isr, removing_replicas=(), adding_replicas=(),
            leader=ME, leader_recovery_state=LeaderRecoveryState.RECOVERED, leader_epoch=0,
            partition_epoch=partition_epoch, directories=())

    config = LogConfig.from_configs({}, manager.server_configs)
    for index in range(3):
        manager._apply_partition("t", TOPIC_ID, index, registration((ME, 2, 3), 0), config)
    opened = await fetch(apis, follower_fetch(dict.fromkeys(range(3), 0), session_id=0,
                                              epoch=0))
    session_id = opened.session_id
    await fetch(apis, follower_fetch({}, session_id=session_id, epoch=1))
    reads = record_reads(monkeypatch)
    changes = manager.changes.count
    for index in range(3):  # broker 3 leaves every ISR
        manager._apply_partition("t", TOPIC_ID, index, registration((ME, 2), 1), config)
    assert manager.changes.count > changes  # noted: the session looks at them again
    assert await fetch(apis, follower_fetch({}, session_id=session_id, epoch=2))
    assert reads == []
    manager._apply_partition("t", TOPIC_ID, 1, registration((ME,), 2), config)  # 2 leaves
    await fetch(apis, follower_fetch({}, session_id=session_id, epoch=3))
    assert reads == [1]


async def test_a_follower_fetch_of_a_log_still_being_made_waits_for_it_without_an_error(
        manager: ReplicaManager, apis: BrokerApis, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delta makes this broker the leader of more new partitions than it makes logs for
    on the loop: until a partition's log exists, a follower's fetch of it in a session is
    answered as from the empty log it will be (no error, offsets 0) and is held there --
    an incremental fetch neither reads it again nor answers at once -- until the log is
    made, then served as any other. Outside a session, or from an offset the new log
    cannot have, it is still NOT_LEADER_OR_FOLLOWER. Refused each time, the followers of
    1,000,000 new partitions asked again for each of them every second."""
    release = threading.Event()
    open_logs = manager._open_logs

    def held(jobs: Any) -> Any:
        release.wait(10)
        return open_logs(jobs)

    monkeypatch.setattr(manager, "_open_logs", held)
    count = NEW_LOGS_ON_LOOP + 1
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in [TopicRecord(name="t", topic_id=TOPIC_ID), *(
            PartitionRecord(partition_id=index, topic_id=TOPIC_ID, replicas=(ME, 2),
                            isr=(ME, 2), leader=ME, leader_epoch=0, partition_epoch=0)
            for index in range(count))]:
        delta.replay(record)
    image = delta.apply(count + 1, 1)
    apis.cache.image = image
    manager.apply_delta(delta, image)
    assert manager.get_partition("t", 0) is None  # its log is being made

    def answered(response: Any) -> dict[int, tuple[int, int, int, bytes | None]]:
        return {data.partition_index: (data.error_code, data.high_watermark,
                                       data.log_start_offset, data.records)
                for topic in response.responses for data in topic.partitions}

    without_session = await fetch(apis, follower_fetch({0: 0}, session_id=0, epoch=-1))
    assert answered(without_session)[0][0] == ErrorCode.not_leader_or_follower
    beyond = await fetch(apis, follower_fetch({2: 7}, session_id=0, epoch=0))
    assert answered(beyond)[2][0] == ErrorCode.not_leader_or_follower  # a new log has no 7
    opened = await fetch(apis, follower_fetch({0: 0, 1: 0}, session_id=0, epoch=0))
    session_id = opened.session_id
    assert session_id not in (0, beyond.session_id)
    told = answered(opened)
    assert told[0] == told[1] == (ErrorCode.none, 0, 0, b"")
    reads = record_reads(monkeypatch)
    waiting = asyncio.ensure_future(fetch(apis, follower_fetch(
        {}, session_id=session_id, epoch=1, max_wait_ms=10_000)))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done()
    assert reads == []  # passed by
    release.set()
    async with asyncio.timeout(10):
        while manager._creator is not None:
            await asyncio.sleep(0.01)
    partition = manager.get_partition("t", 0)
    assert partition is not None
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done()  # looked again at the logs made: nothing to say yet
    assert reads == [0, 1]
    manager.append(partition, build_batch([(b"k", b"v", [], 1)]), acks=1)
    response = await asyncio.wait_for(waiting, 5)
    told = answered(response)
    assert list(told) == [0] and told[0][:3] == (ErrorCode.none, 0, 0) and told[0][3]
    await fetch(apis, follower_fetch({0: 1}, session_id=session_id, epoch=2))
    assert partition.followers[2].log_end_offset == 1
    assert partition.log.high_watermark == 1


async def test_a_rejoining_follower_is_not_read_again_while_its_addition_is_proposed(
        manager: ReplicaManager, apis: BrokerApis, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted follower at our log end, outside the ISR: its first fetch proposes it
    back. Until the controller answers, its session's next fetches pass the partitions by
    (at 1,000,000 partitions every fetch of a rejoining broker read again each of the
    hundreds of thousands still proposed); the answer brings them back to a look: a
    refusal to be read and proposed again, an acceptance to stay idle."""
    from pykraft.broker.replica_manager import IsrUpdate, IsrUpdateResult

    answers: list[asyncio.Future[list[IsrUpdateResult]]] = []
    sent: list[list[IsrUpdate]] = []

    async def controller(updates: list[IsrUpdate]) -> list[IsrUpdateResult]:
        sent.append(updates)
        answers.append(asyncio.get_running_loop().create_future())
        return await answers[-1]

    manager.alter_partition = controller
    registration = PartitionRegistration(
        replicas=(ME, 2), isr=(ME,), removing_replicas=(), adding_replicas=(), leader=ME,
        leader_recovery_state=LeaderRecoveryState.RECOVERED, leader_epoch=0,
        partition_epoch=0, directories=())
    config = LogConfig.from_configs({}, manager.server_configs)
    monkeypatch.setattr(manager, "_broker_eligible", lambda broker: True)
    for index in range(3):
        manager._apply_partition("t", TOPIC_ID, index, registration, config)
    opened = await fetch(apis, follower_fetch(dict.fromkeys(range(3), 0), session_id=0,
                                              epoch=0))
    session_id, epoch = opened.session_id, 1
    await asyncio.sleep(0)  # the proposals go out
    assert [(u.partition, u.new_isr) for u in sent[0]] == [(0, (ME, 2)), (1, (ME, 2)),
                                                           (2, (ME, 2))]
    reads = record_reads(monkeypatch)
    for _ in range(3):
        await fetch(apis, follower_fetch({}, session_id=session_id, epoch=epoch))
        epoch += 1
    assert reads == []  # proposed: passed by

    answers[0].set_result([  # 0 and 2 accepted, 1 refused
        IsrUpdateResult(0, ME, 0, (ME, 2), 1), IsrUpdateResult(ErrorCode.invalid_request),
        IsrUpdateResult(0, ME, 0, (ME, 2), 1)])
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert [manager.get_partition("t", i).isr for i in range(3)] == [  # type: ignore[union-attr]
        (ME, 2), (ME,), (ME, 2)]
    await fetch(apis, follower_fetch({}, session_id=session_id, epoch=epoch))
    assert reads == [1]  # the refused one, read again (proposed once its quiet is over)
