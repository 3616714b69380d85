"""ControllerServer's leadership and QuorumControllerChannel's routing, over a scripted Raft
log and a scripted network client: the leader activates and bootstraps once; a lost
leadership drops the pending state and tells the callers waiting on it that the outcome is
unknown; the channel decides in-process when active, else asks the active controller,
resends only what is safe to resend, and gives up with NOT_CONTROLLER at its deadline."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from pykraft.controller.config import ControllerConfig
from pykraft.controller.features import BOOTSTRAP_METADATA_VERSION, MINIMUM_KRAFT_METADATA_VERSION
from pykraft.controller.quorum_controller import QuorumController
from pykraft.controller.requests import BrokerFeatureRange, CreatableTopic, Listener
from pykraft.errors import NotController, NotLeaderError, RequestTimedOut
from pykraft.metadata.codec import decode_metadata_record, encode_metadata_record
from pykraft.metadata.records import (
    BrokerRegistrationChangeRecord,
    NoOpRecord,
    PartitionChangeRecord,
    UnregisterBrokerRecord,
)
from pykraft.protocol.entities import make, response_module
from pykraft.raft.core import LeaderAndEpoch
from pykraft.server.controller_channel import (
    BROKER_HEARTBEAT,
    BROKER_HEARTBEAT_VERSION,
    BROKER_REGISTRATION,
    ControllerRefused,
    QuorumControllerChannel,
)
from pykraft.server.controller_client import ActiveControllerClient, ControllerUnavailable
from pykraft.server.controller_server import (
    APPENDS_PER_TURN,
    RECORDS_PER_BATCH,
    ControllerServer,
    OffLoop,
    OutcomeUnknown,
    _broker_changes,
)

NODE = 1
FEATURES = [BrokerFeatureRange("metadata.version", MINIMUM_KRAFT_METADATA_VERSION,
                               BOOTSTRAP_METADATA_VERSION)]


class ScriptedRaft:
    """The part of RaftNode the controller shell uses; commits happen when told."""

    def __init__(self) -> None:
        self.leader = LeaderAndEpoch(NODE, 1)
        self.log: list[bytes] = [b"leader-change"]  # offset 0: the epoch start
        self.high_watermark: int | None = 1
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.server: ControllerServer | None = None
        self.batch_sizes: list[int] = []  # records per append
        self.unwritten_max: int | None = None  # batches held unwritten (None: no limit)
        self.written = 0  # batches written so far (`write`); the rest wait
        self._write_done = asyncio.Event()

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self.leader

    def append(self, records: Sequence[bytes]) -> int:
        if self.leader.leader_id != NODE:
            raise NotLeaderError(self.leader.leader_id, self.leader.epoch)
        if (self.unwritten_max is not None
                and len(self.batch_sizes) - self.written >= self.unwritten_max):
            raise RequestTimedOut("too much waits to be written")  # as RaftCore.propose
        self.log.extend(records)
        self.batch_sizes.append(len(records))
        return len(self.log) - 1

    async def wait_room(self, records: Sequence[bytes], timeout_s: float) -> None:
        while (self.unwritten_max is not None
               and len(self.batch_sizes) - self.written >= self.unwritten_max):
            self._write_done.clear()
            await asyncio.wait_for(self._write_done.wait(), timeout_s)

    def write(self) -> None:
        """The log has written every batch appended so far."""
        self.written = len(self.batch_sizes)
        self._write_done.set()

    async def wait_committed(self, offset: int) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append((offset, future))
        await future

    def commit_all(self) -> None:
        """Commit the log: the shell replays it, then the waiters are answered."""
        assert self.server is not None and self.high_watermark is not None
        start = self.high_watermark
        records = [decode_metadata_record(r) for r in self.log[start:]]
        if records:
            self.server.handle_committed(start, self.leader.epoch, records)
        self.high_watermark = len(self.log)
        for offset, future in self.waiters:
            if offset < self.high_watermark and not future.done():
                future.set_result(None)
        self.waiters = [w for w in self.waiters if not w[1].done()]

    def lose_leadership(self, new_leader: int) -> None:
        """As the driver does: the waiters of the lost epoch fail, then listeners hear."""
        self.leader = LeaderAndEpoch(new_leader, self.leader.epoch + 1)
        for _, future in self.waiters:
            future.set_exception(NotLeaderError(new_leader, self.leader.epoch))
        self.waiters = []
        assert self.server is not None
        self.server.on_leader_change(new_leader, NODE)


async def inline(function: Callable[..., Any], /, *args: Any) -> Any:
    """Decides on the event loop itself, so that a few `settle()` turns see it done."""
    return function(*args)


def make_server(off_loop: OffLoop = inline) -> tuple[ControllerServer, ScriptedRaft]:
    raft = ScriptedRaft()
    core = QuorumController(
        ControllerConfig.from_properties({"node.id": str(NODE)}, cluster_id="c",
                                         controller_ids=frozenset({1, 2, 3})),
        random.Random(1))
    server = ControllerServer(core, raft, now_ms=lambda: 1_000,  # type: ignore[arg-type]
                              off_loop=off_loop)
    raft.server = server
    return server, raft


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def activated(off_loop: OffLoop = inline) -> tuple[ControllerServer, ScriptedRaft]:
    server, raft = make_server(off_loop)
    server.on_leader_change(NODE, NODE)
    await settle()
    raft.commit_all()  # the bootstrap record (metadata.version)
    await server.wait_active()
    return server, raft


async def register(server: ControllerServer, raft: ScriptedRaft, broker_id: int) -> int:
    task = asyncio.ensure_future(server.run(lambda core: core.register_broker(
        broker_id, uuid.uuid4(), [Listener("PLAINTEXT", "h", 9092, 0)], FEATURES, None, 1_000,
        log_dirs=[uuid.uuid4()], cluster_id="c")))
    await settle()
    raft.commit_all()
    epoch = (await task).broker_epoch
    task = asyncio.ensure_future(server.run(lambda core: core.broker_heartbeat(  # unfenced
        broker_id, epoch, len(raft.log), want_fence=False, want_shutdown=False,
        now_ms=1_000)))
    await settle()
    raft.commit_all()
    assert not (await task).is_fenced
    return epoch


def test_the_leader_activates_and_bootstraps_once() -> None:
    async def go() -> None:
        server, raft = await activated()
        assert server.core.is_active
        assert server.core.committed_image.features.metadata_version > 0
        assert len(raft.log) == 2  # epoch start + the bootstrap record
        server.on_leader_change(NODE, NODE)  # told again: nothing new
        await settle()
        assert len(raft.log) == 2
    asyncio.run(go())


def test_lost_leadership_drops_pending_state_and_answers_outcome_unknown() -> None:
    async def go() -> None:
        server, raft = await activated()
        await register(server, raft, 1)
        pending = asyncio.ensure_future(server.create_topics(
            [CreatableTopic("t", 1, 1)], validate_only=False))
        await settle()
        assert "t" in server.core.image.topics.by_name  # pre-applied
        assert "t" not in server.core.committed_image.topics.by_name
        raft.lose_leadership(2)
        with pytest.raises(OutcomeUnknown):
            await pending
        assert not server.core.is_active
        assert "t" not in server.core.image.topics.by_name  # pending dropped
        with pytest.raises(NotController):  # nothing is decided any more
            await server.create_topics([CreatableTopic("u", 1, 1)], validate_only=False)
    asyncio.run(go())


def gate(deciding: threading.Event, release: threading.Event) -> OffLoop:
    """An off_loop that runs each decision on a thread, which sets `deciding` and then
    holds until `release` is set."""
    async def gated(function: Callable[..., Any], /, *args: Any) -> Any:
        def run() -> Any:
            deciding.set()
            release.wait(10)
            return function(*args)
        return await asyncio.to_thread(run)
    return gated


def test_a_leader_change_during_an_off_loop_decision_waits_for_it_and_voids_it() -> None:
    """While an operation is decided on a worker thread, a leader change (and commits) must
    not touch the core under it: they are done once it is back, and the decision, made by
    a controller no longer active, appends nothing."""
    deciding, release = threading.Event(), threading.Event()
    gated = gate(deciding, release)

    async def go() -> None:
        server, raft = await activated()
        await register(server, raft, 1)
        server._off_loop = gated  # from now on decisions run on a thread, held at the gate
        deciding.clear()
        task = asyncio.ensure_future(server.create_topics(
            [CreatableTopic("t", 1, 1)], validate_only=False))
        await asyncio.to_thread(deciding.wait, 10)
        log_before = len(raft.log)
        raft.lose_leadership(2)
        assert server.core.is_active  # deferred: the decision is still running
        release.set()
        with pytest.raises(NotController):
            await task
        assert not server.core.is_active
        assert len(raft.log) == log_before  # nothing appended
        assert "t" not in server.core.image.topics.by_name
    asyncio.run(go())


def test_what_waited_for_a_decision_is_done_in_order_with_the_loop_running_between() -> None:
    """A backlog deferred during a decision (commits to fold) is done one action per turn
    of the loop, so that the quorum's fetches are answered meanwhile; an action that comes
    during the flush goes behind the backlog."""
    deciding, release = threading.Event(), threading.Event()
    gated = gate(deciding, release)

    async def go() -> None:
        server, raft = await activated()
        server._off_loop = gated
        done: list[str] = []
        task = asyncio.ensure_future(server.run(lambda core: core.tick(1_000)))
        await asyncio.to_thread(deciding.wait, 10)
        for name in ("a", "b", "c"):
            server._now_or_later(lambda name=name: done.append(name))  # type: ignore[misc]
        assert done == []  # the decision still runs

        async def probe() -> None:
            while len([x for x in done if x in ("a", "b", "c")]) < 3:
                done.append("loop")
                if "a" in done and "late" not in done:
                    done.append("late")
                    server._now_or_later(lambda: done.append("after"))
                await asyncio.sleep(0)

        probing = asyncio.ensure_future(probe())
        release.set()
        await task
        await probing
        actions = [x for x in done if x not in ("loop", "late")]
        assert actions == ["a", "b", "c", "after"]
        between = done[done.index("a"):done.index("c")]
        assert between.count("loop") >= 2  # the loop ran after a and after b
    asyncio.run(go())


async def appended(raft: ScriptedRaft) -> None:
    """Until the operation decided on a worker thread has appended its records."""
    for _ in range(1000):
        if raft.waiters:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("nothing appended within 10 s")


def test_a_non_atomic_result_is_appended_in_batches_and_an_atomic_one_whole() -> None:
    """Unregistering a broker that leads 1,500 partitions changes each: non-atomic, so at
    most RECORDS_PER_BATCH records per batch; the 1,500 partitions' creation is atomic."""
    async def go() -> None:
        server, raft = await activated()
        await register(server, raft, 1)
        server._off_loop = asyncio.to_thread  # as in a node
        raft.batch_sizes.clear()
        task = asyncio.ensure_future(server.create_topics(
            [CreatableTopic("t", 1500, 1)], validate_only=False))
        await appended(raft)
        raft.commit_all()
        (created,) = await task
        assert created.error_code == ErrorCode.none
        assert raft.batch_sizes == [1501]  # the topic and its partitions, one batch
        raft.batch_sizes.clear()
        task = asyncio.ensure_future(server.run(lambda core: core.unregister_broker(1)))
        await appended(raft)
        raft.commit_all()
        await task
        assert raft.batch_sizes == [RECORDS_PER_BATCH, 1501 - RECORDS_PER_BATCH]
        assert server.core.committed_image.cluster.brokers.get(1) is None
        leaders = {p.leader for p in server.core.image.topics.by_name["t"].partitions.values()}
        assert leaders == {-1}
    asyncio.run(go())


async def leading_topic(partitions: int) -> tuple[ControllerServer, ScriptedRaft]:
    """An active controller whose broker 1 leads the committed topic "t" of `partitions`
    (unregistering it then changes each), with the appends of that creation forgotten."""
    server, raft = await activated()
    await register(server, raft, 1)
    task = asyncio.ensure_future(server.create_topics(
        [CreatableTopic("t", partitions, 1)], validate_only=False))
    await appended(raft)
    raft.commit_all()
    await task
    raft.batch_sizes.clear()
    return server, raft


def test_a_long_run_of_appends_lets_the_loop_turn_and_commits_wait_for_the_proposals(
) -> None:
    """A change of more than APPENDS_PER_TURN batches is appended a few batches per turn of
    the event loop; what commits meanwhile (the quorum is quick) reaches the core only
    after the batches were proposed, so the core never folds its own records as a
    standby's."""
    batches = APPENDS_PER_TURN + 2
    partitions = (batches - 1) * RECORDS_PER_BATCH + 1

    async def go() -> None:
        server, raft = await leading_topic(partitions)
        seen: list[int] = []  # batches appended, as each turn of the loop saw them

        async def watch_and_commit() -> None:
            while len(raft.batch_sizes) < batches:
                seen.append(len(raft.batch_sizes))
                if 0 < len(raft.batch_sizes) < batches:
                    raft.commit_all()  # the first batches commit before the last are in
                await asyncio.sleep(0)

        watcher = asyncio.ensure_future(watch_and_commit())
        task = asyncio.ensure_future(server.run(lambda core: core.unregister_broker(1)))
        await appended(raft)
        await watcher
        raft.commit_all()
        await task
        assert raft.batch_sizes == [RECORDS_PER_BATCH] * (batches - 1) + [2]  # + unregister
        assert APPENDS_PER_TURN in seen  # the loop turned with the appends half done
        assert server.core.committed_image.cluster.brokers.get(1) is None
        assert server.core.committed_image.offset == len(raft.log) - 1
    asyncio.run(go())


def test_a_change_larger_than_raft_holds_unwritten_waits_for_the_writes_and_is_whole(
) -> None:
    """Raft refuses proposals past what it holds unwritten (128 MiB): a change larger than
    that waits for the log to write what it appended before instead of being left half
    appended (OutcomeUnknown), as a 1,000,000-partition controlled shutdown (42 MB) was at
    the former 40 MiB."""
    batches = 5
    partitions = (batches - 1) * RECORDS_PER_BATCH + 1

    async def go() -> None:
        server, raft = await leading_topic(partitions)
        raft.written = 0
        raft.unwritten_max = 2
        task = asyncio.ensure_future(server.run(lambda core: core.unregister_broker(1)))
        for _ in range(50):
            await asyncio.sleep(0)
        assert raft.batch_sizes == [RECORDS_PER_BATCH] * 2  # the rest waits for room
        for _ in range(100):
            if len(raft.batch_sizes) == batches or task.done():
                break
            raft.write()
            await asyncio.sleep(0)
        await appended(raft)
        raft.write()
        raft.commit_all()
        await task
        assert raft.batch_sizes == [RECORDS_PER_BATCH] * (batches - 1) + [2]  # + unregister
        assert server.core.committed_image.cluster.brokers.get(1) is None
    asyncio.run(go())


def test_the_fold_runs_off_the_loop_at_the_offsets_raft_gave() -> None:
    """The records are folded on the worker thread at the offsets the append returned, also
    when they differ from the controller's prediction (here one entry it did not write came
    first): the event loop never replays them itself, and the broker epochs and the image
    offset follow the log."""
    async def go() -> None:
        server, raft = await activated()
        await register(server, raft, 1)
        server._off_loop = asyncio.to_thread
        task = asyncio.ensure_future(server.create_topics(
            [CreatableTopic("t", 2500, 1)], validate_only=False))
        await appended(raft)
        raft.commit_all()
        await task
        raft.batch_sizes.clear()
        raft.log.append(encode_metadata_record(NoOpRecord()))  # not the controller's: its
        # prediction of the next offset is now one short
        folded_on_loop: list[int] = []
        advance = server.core._advance

        def spy(records: Any, base_offset: int, epoch: int) -> Any:
            folded_on_loop.append(len(records))
            return advance(records, base_offset, epoch)

        server.core._advance = spy  # type: ignore[method-assign]
        task = asyncio.ensure_future(server.run(lambda core: core.unregister_broker(1)))
        await appended(raft)
        assert server.core.image.offset == len(raft.log) - 1
        raft.commit_all()
        await task
        assert raft.batch_sizes == [1000, 1000, 501]  # several batches, all planned
        assert folded_on_loop == []
    asyncio.run(go())


class ScriptedClient(ActiveControllerClient):
    """Answers from a script: an entity, or an exception to raise."""

    def __init__(self, active: int, answers: list[Any]) -> None:
        super().__init__(NODE, {2: ("127.0.0.1", 1)}, lambda: active, request_timeout_ms=100)
        self.answers = answers
        self.requests: list[tuple[int, Any]] = []

    async def send(self, api_key: int, api_version: int, request: Any) -> tuple[int, Any]:
        self.requests.append((api_key, request))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return 2, answer


def create_topics_answer(code: ErrorCode) -> Any:
    module = response_module(19, 7)
    return make(module.CreateTopicsResponse, throttle_time=0, topics=(make(
        module.CreatableTopicResult, name="t", topic_id=uuid.UUID(int=7), error_code=code,
        error_message=None, topic_config_error_code=0, num_partitions=1,
        replication_factor=1, configs=()),))


def standby() -> ControllerServer:
    server, _ = make_server()
    return server  # never activated: this node does not lead


def test_a_standby_forwards_and_retries_not_controller() -> None:
    async def go() -> None:
        client = ScriptedClient(2, [create_topics_answer(ErrorCode.not_controller),
                                    ControllerUnavailable("refused", sent=False),
                                    create_topics_answer(ErrorCode.none)])
        channel = QuorumControllerChannel(standby(), client, timeout_ms=5_000)
        results = await channel.create_topics([CreatableTopic("t", 1, 1)], validate_only=False)
        assert [(r.name, r.error_code, r.topic_id) for r in results] == [
            ("t", ErrorCode.none, uuid.UUID(int=7))]
        assert len(client.requests) == 3
        sent = client.requests[-1][1]
        assert [(t.name, t.num_partitions, t.replication_factor) for t in sent.topics] == [
            ("t", 1, 1)]
    asyncio.run(go())


def test_a_change_that_may_have_been_made_is_not_sent_again() -> None:
    async def go() -> None:
        client = ScriptedClient(2, [ControllerUnavailable("timed out", sent=True),
                                    create_topics_answer(ErrorCode.none)])
        channel = QuorumControllerChannel(standby(), client, timeout_ms=5_000)
        results = await channel.create_topics([CreatableTopic("t", 1, 1)], validate_only=False)
        assert [r.error_code for r in results] == [ErrorCode.request_timed_out]
        assert len(client.requests) == 1
    asyncio.run(go())


def test_no_active_controller_until_the_deadline_is_not_controller() -> None:
    async def go() -> None:
        client = ScriptedClient(-1, [])
        channel = QuorumControllerChannel(standby(), client, timeout_ms=100)
        results = await channel.create_topics([CreatableTopic("t", 1, 1)], validate_only=False)
        assert [r.error_code for r in results] == [ErrorCode.not_controller]
        assert client.requests == []  # nobody to ask
        with pytest.raises(ControllerRefused) as refused:
            await channel.broker_heartbeat(3, 10, 5, want_fence=False, want_shutdown=False)
        assert refused.value.code == ErrorCode.not_controller
    asyncio.run(go())


def heartbeat_answer(code: ErrorCode, *, should_shut_down: bool = False) -> Any:
    module = response_module(BROKER_HEARTBEAT, BROKER_HEARTBEAT_VERSION)
    return make(module.BrokerHeartbeatResponse, throttle_time=0, error_code=code,
                is_caught_up=True, is_fenced=False, should_shut_down=should_shut_down)


def test_a_controlled_shutdown_asks_a_busy_controller_again_but_not_a_missing_one() -> None:
    """A want-shutdown heartbeat that no controller answers within the channel's timeout is
    sent again while a controller is known (it is busy moving leaderships), until it says
    the broker may stop; with no controller known the broker gives up at once."""
    async def go() -> None:
        late = ControllerUnavailable("timed out", sent=True)
        client = ScriptedClient(2, [late, late, heartbeat_answer(ErrorCode.none),
                                    heartbeat_answer(ErrorCode.none, should_shut_down=True)])
        channel = QuorumControllerChannel(standby(), client, timeout_ms=1)
        await asyncio.wait_for(channel.controlled_shutdown(
            3, 10, lambda: 5, interval_s=0.001), 5)
        assert len(client.requests) == 4
        assert all(r.want_shut_down and r.broker_epoch == 10 for _, r in client.requests)

        missing = ScriptedClient(-1, [])
        channel = QuorumControllerChannel(standby(), missing, timeout_ms=1)
        with pytest.raises(ControllerRefused) as refused:
            await asyncio.wait_for(channel.controlled_shutdown(
                3, 10, lambda: 5, interval_s=0.001), 5)
        assert refused.value.code == ErrorCode.not_controller and missing.requests == []

        fenced = ScriptedClient(2, [heartbeat_answer(ErrorCode.stale_broker_epoch)])
        channel = QuorumControllerChannel(standby(), fenced, timeout_ms=1)
        with pytest.raises(ControllerRefused) as refused:
            await asyncio.wait_for(channel.controlled_shutdown(
                3, 10, lambda: 5, interval_s=0.001), 5)
        assert refused.value.code == ErrorCode.stale_broker_epoch
    asyncio.run(go())


def test_a_controlled_shutdown_gives_up_on_a_leader_this_node_no_longer_follows() -> None:
    """A voter whose leader stopped answering pre-votes (KIP-996) and keeps that leader's
    id meanwhile; when the rest of the quorum is stopping too, the pre-vote never ends. An
    unanswered want-shutdown heartbeat is then not asked again: the broker stops instead
    of waiting out CONTROLLED_SHUTDOWN_TIMEOUT_MS (all three nodes of a combined cluster
    stopped together hung for minutes)."""
    async def go() -> None:
        late = ControllerUnavailable("timed out", sent=True)
        lost = ScriptedClient(2, [late] * 1000)  # the old leader never answers
        channel = QuorumControllerChannel(standby(), lost, timeout_ms=1,
                                          leader_followed=lambda: False)
        with pytest.raises(ControllerRefused) as refused:  # not wait_for's TimeoutError
            await asyncio.wait_for(channel.controlled_shutdown(
                3, 10, lambda: 5, interval_s=0.001), 5)
        assert refused.value.code in (ErrorCode.not_controller, ErrorCode.request_timed_out)
        assert 1 <= len(lost.requests) < 1000
    asyncio.run(go())


def test_heartbeats_go_on_the_lifecycle_connection_and_changes_on_the_other() -> None:
    """A heartbeat never queues behind a forwarded change on one connection."""
    async def go() -> None:
        main = ScriptedClient(2, [create_topics_answer(ErrorCode.none)])
        lifecycle = ScriptedClient(2, [heartbeat_answer(ErrorCode.none)])
        channel = QuorumControllerChannel(standby(), main, timeout_ms=5_000,
                                          lifecycle_client=lifecycle)
        await channel.create_topics([CreatableTopic("t", 1, 1)], validate_only=False)
        await channel.broker_heartbeat(3, 10, 5, want_fence=False, want_shutdown=False)
        assert [key for key, _ in main.requests] == [19]
        assert [key for key, _ in lifecycle.requests] == [BROKER_HEARTBEAT]
    asyncio.run(go())


def test_registration_is_resent_after_a_lost_answer_and_refusals_are_raised() -> None:
    async def go() -> None:
        module = response_module(BROKER_REGISTRATION, 4)
        refused = make(module.BrokerRegistrationResponse, throttle_time=0,
                       error_code=ErrorCode.inconsistent_cluster_id, broker_epoch=-1)
        accepted = make(module.BrokerRegistrationResponse, throttle_time=0,
                        error_code=ErrorCode.none, broker_epoch=42)
        client = ScriptedClient(2, [ControllerUnavailable("reset", sent=True), accepted,
                                    refused])
        channel = QuorumControllerChannel(standby(), client, timeout_ms=5_000)

        async def register_once() -> Any:
            return await channel.register_broker(
                3, uuid.uuid4(), [Listener("PLAINTEXT", "h", 9092, 0)], [], None,
                log_dirs=[uuid.uuid4()], cluster_id="c")

        assert (await register_once()).broker_epoch == 42
        with pytest.raises(ControllerRefused) as caught:
            await register_once()
        assert caught.value.code == ErrorCode.inconsistent_cluster_id
    asyncio.run(go())


def test_the_active_controller_decides_in_process() -> None:
    async def go() -> None:
        server, raft = await activated()
        await register(server, raft, 1)
        client = ScriptedClient(2, [])
        channel = QuorumControllerChannel(server, client, timeout_ms=1_000)
        task = asyncio.ensure_future(channel.create_topics([CreatableTopic("t", 2, 1)],
                                                           validate_only=False))
        await settle()
        raft.commit_all()
        [result] = await task
        assert result.error_code == ErrorCode.none and result.num_partitions == 2
        assert client.requests == []
        assert "t" in server.core.committed_image.topics.by_name
    asyncio.run(go())


def test_broker_sessions_run_on_the_controllers_monotonic_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A heartbeat is timed by the controller's own clock, not by its caller's: a wall clock
    set an hour ahead (the fault campaign's clock fault) neither keeps a silent broker's
    session alive nor, set back, fences a live one. By default that clock is monotonic."""
    async def go() -> None:
        server, raft = await activated()  # its clock stands at 1,000 ms
        epoch = await register(server, raft, 3)
        channel = QuorumControllerChannel(server, ScriptedClient(2, []), timeout_ms=1_000)
        real = time.time_ns
        with monkeypatch.context() as patch:  # every wall clock in the process an hour on
            patch.setattr(time, "time_ns", lambda: real() + 3_600 * 10**9)
            patch.setattr(time, "time", lambda: real() / 1e9 + 3_600)
            task = asyncio.ensure_future(channel.broker_heartbeat(
                3, epoch, len(raft.log), want_fence=False, want_shutdown=False))
            await settle()
            raft.commit_all()
            await task
        expired = 1_000 + server.core.config.broker_session_timeout_ms + 1
        tick = asyncio.ensure_future(server.run(lambda core: core.tick(expired)))
        await settle()
        raft.commit_all()
        assert (await tick).fenced_broker_ids == (3,)
    asyncio.run(go())

    core = QuorumController(
        ControllerConfig.from_properties({"node.id": str(NODE)}, cluster_id="c",
                                         controller_ids=frozenset({1, 2, 3})),
        random.Random(1))
    default = ControllerServer(core, ScriptedRaft())  # type: ignore[arg-type]
    before = default.now_ms()
    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() + 3_600 * 10**9)
    assert default.now_ms() - before < 60_000


async def committed(raft: ScriptedRaft, task: asyncio.Future[Any]) -> Any:
    """`task`'s result, committing whatever it appends meanwhile."""
    for _ in range(1000):
        if task.done():
            return await task
        raft.commit_all()
        await asyncio.sleep(0.001)
    raise AssertionError("not done within a second")


async def queue_held() -> tuple[ControllerServer, ScriptedRaft, list[int],
                               QuorumControllerChannel, asyncio.Future[Any]]:
    """An active controller whose broker 1 is registered, on a clock the test sets (at
    1,000 ms), with a topic creation holding its queue until `raft.write()`: (server, raft,
    clock, a channel to it, the creation)."""
    server, raft = await leading_topic(1)
    clock = [1_000]
    server.now_ms = lambda: clock[0]
    channel = QuorumControllerChannel(server, ScriptedClient(2, []), timeout_ms=1_000)
    raft.written = len(raft.batch_sizes)
    raft.unwritten_max = 0  # the next append waits for the log to write
    long = asyncio.ensure_future(server.create_topics([CreatableTopic("u", 1, 1)],
                                                      validate_only=False))
    await settle()
    assert not long.done() and raft.batch_sizes == []  # holding the queue
    return server, raft, clock, channel, long


def test_a_heartbeat_waiting_for_its_answer_keeps_its_broker_unfenced() -> None:
    """A broker sends its next heartbeat only once the last is answered: while one waits
    behind a long operation past the session timeout, a tick that runs first does not fence
    its broker (at 1,000,000 partitions one did); once answered, the session runs from the
    answer and expires as usual."""
    async def go() -> None:
        server, raft, clock, channel, long = await queue_held()
        session_ms = server.core.config.broker_session_timeout_ms

        def fences() -> int:
            return sum(isinstance(record, BrokerRegistrationChangeRecord) and record.fenced == 1
                       for record in map(decode_metadata_record, raft.log[1:]))
        tick = asyncio.ensure_future(server.tick())
        clock[0] = 5_000
        heartbeat = asyncio.ensure_future(channel.broker_heartbeat(
            1, server.core.image.cluster.brokers[1].epoch, len(raft.log), want_fence=False,
            want_shutdown=False))
        await settle()
        clock[0] = 5_000 + session_ms + 1  # the heartbeat waited out a whole session
        raft.unwritten_max = None
        raft.write()
        await committed(raft, tick)  # ran before the heartbeat, still waiting its answer
        assert not (await committed(raft, heartbeat)).is_fenced
        await committed(raft, long)
        assert fences() == 0
        answered_ms = clock[0]
        clock[0] = answered_ms + session_ms  # not yet expired: it runs from the answer
        await committed(raft, asyncio.ensure_future(server.tick()))
        assert fences() == 0
        clock[0] = answered_ms + session_ms + 1
        await committed(raft, asyncio.ensure_future(server.tick()))
        assert fences() == 1 and server.core.committed_image.cluster.brokers[1].fenced
    asyncio.run(go())


def test_a_heartbeat_waiting_half_an_interval_behind_others_is_answered_timed_out() -> None:
    """As Kafka's controller: a heartbeat that waited broker.heartbeat.interval.ms / 2 (1 s)
    for the operations before it is answered REQUEST_TIMED_OUT, nothing decided, so that its
    broker sends the next instead of waiting (a stand-in broker whose heartbeat went 30 s
    unanswered closed its connection and was fenced); its session runs from that answer."""
    async def go() -> None:
        server, raft, clock, channel, long = await queue_held()
        session_ms = server.core.config.broker_session_timeout_ms
        started = time.monotonic()
        heartbeat = asyncio.ensure_future(channel.broker_heartbeat(
            1, server.core.image.cluster.brokers[1].epoch, len(raft.log), want_fence=False,
            want_shutdown=False))
        await settle()
        clock[0] = 1_000 + 2 * session_ms  # its broker's session would have expired
        with pytest.raises(ControllerRefused) as refused:
            await heartbeat
        assert refused.value.code == ErrorCode.request_timed_out
        assert 0.9 <= time.monotonic() - started < 5
        assert not long.done()  # still holding the queue
        raft.unwritten_max = None
        raft.write()
        await committed(raft, long)
        clock[0] += session_ms
        await committed(raft, asyncio.ensure_future(server.tick()))
        assert not server.core.committed_image.cluster.brokers[1].fenced
        clock[0] += 1
        await committed(raft, asyncio.ensure_future(server.tick()))
        assert server.core.committed_image.cluster.brokers[1].fenced
    asyncio.run(go())


def test_fencing_unfencing_and_controlled_shutdown_are_told_with_their_partition_changes(
) -> None:
    topic = uuid.uuid4()
    moved = [PartitionChangeRecord(topic_id=topic, partition_id=i, leader=5) for i in range(3)]
    assert _broker_changes([BrokerRegistrationChangeRecord(broker_id=4, fenced=1), *moved]) \
        == ["broker 4 fenced", "3 partition changes"]
    assert _broker_changes([BrokerRegistrationChangeRecord(broker_id=4, fenced=-1)]) == [
        "broker 4 unfenced"]
    assert _broker_changes([BrokerRegistrationChangeRecord(
        broker_id=6, in_controlled_shutdown=1), *moved[:1]]) == [
        "broker 6 in controlled shutdown", "1 partition changes"]
    assert _broker_changes([UnregisterBrokerRecord(broker_id=2)]) == ["broker 2 unregistered"]
    assert _broker_changes(moved) == []  # an election alone is no broker change
