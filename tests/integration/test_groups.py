"""Consumer groups against a real node: real clients share partitions, survive a member's
death and a node restart with their committed offsets; the wire answers bad input with
Kafka's error codes and writes nothing."""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
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
from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment

from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient
from tests.integration.group_helpers import (
    assignments_of,
    closing_all,
    poll_until,
    start_member,
)

TOPIC = "shared"
PARTITIONS = 6
SESSION_MS = 1000
GROUP_CONFIGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "offsets.topic.num.partitions": "5",
    "offset.metadata.max.bytes": "100",
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(configs=GROUP_CONFIGS) as node:
        admin = AdminClient({"bootstrap.servers": node.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": node.bootstrap_servers})
        for i in range(600):
            producer.produce(TOPIC, value=b"%d" % i, partition=i % PARTITIONS)
        producer.flush(30)
        yield node


def confluent_consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 100, **extra})


# kafka-python 3.0.12 drops a finished JoinGroup/SyncGroup round whose result arrives after
# poll()'s timeout: if a rebalance is still wanted it starts another round (the leader then
# rebalances the group every ~100 ms, for ever), and if the round was the one the topic's
# late metadata asked for, nothing collects it and the member stops heartbeating. Short
# polls of several consumers from one thread hit this often against any fast broker, so
# these tests subscribe once the topic's partitions are known and give each kafka-python
# consumer its own thread and long polls, as an application would.


def kafka_python_consumer(bootstrap: str, group: str, **extra: Any) -> Any:
    """A kafka-python consumer, subscribed once it knows the topic's partitions."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, **extra)
    deadline = time.monotonic() + 30
    while not consumer.partitions_for_topic(TOPIC) and time.monotonic() < deadline:
        time.sleep(0.01)
    consumer.subscribe([TOPIC])
    return consumer


class PollingThreads:
    """Polls each kafka-python consumer in a thread of its own until stopped."""

    def __init__(self, consumers: list[Any]) -> None:
        self.consumers = consumers
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._poll, args=(c,), daemon=True)
                         for c in consumers]
        for thread in self._threads:
            thread.start()

    def _poll(self, consumer: Any) -> None:
        while not self._stop.is_set():
            consumer.poll(timeout_ms=500)

    def owned(self) -> list[set[int]]:
        return [{tp.partition for tp in c.assignment()} for c in self.consumers]

    def wait(self, done: Any, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not done(self.owned()):
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)


def owned_exactly_once(assignments: list[set[int]]) -> bool:
    every = [p for owned in assignments for p in owned]
    return sorted(every) == list(range(PARTITIONS)) and all(assignments)


def test_confluent_three_members_share_partitions_and_a_killed_one_is_replaced(
    cluster: LocalCluster,
) -> None:
    """Every partition has exactly one owner; SIGKILL one member (no LeaveGroup) and its
    partitions move to the others within the session timeout (plus a rebalance)."""
    group = "confluent-three"
    victim = start_member(cluster.bootstrap_servers, group, TOPIC)
    try:
        assert victim.stdout is not None and victim.stdout.readline().strip() == "assigned"
        consumers = [confluent_consumer(cluster.bootstrap_servers, group) for _ in range(2)]
        for consumer in consumers:
            consumer.subscribe([TOPIC])
        poll_until(consumers, lambda: all(assignments_of(consumers))
                   and sum(len(a) for a in assignments_of(consumers)) == 4)
        surviving = assignments_of(consumers)
        assert not surviving[0] & surviving[1]
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        killed_at = time.monotonic()
        poll_until(consumers, lambda: owned_exactly_once(assignments_of(consumers)))
        took_s = time.monotonic() - killed_at
        assert took_s < SESSION_MS / 1000 + 3, took_s
        for consumer in consumers:
            consumer.close()
    finally:
        if victim.poll() is None:
            victim.kill()


def test_kafka_python_and_aiokafka_replace_a_killed_member(cluster: LocalCluster) -> None:
    """kafka-python and aiokafka groups (session.timeout.ms=1000): SIGKILL one of three
    members and the other two own every partition again within seconds."""
    victim = start_member(cluster.bootstrap_servers, "kp-kill", TOPIC, "kafka-python")
    try:
        assert victim.stdout is not None and victim.stdout.readline().strip() == "assigned"
        survivors = PollingThreads([
            kafka_python_consumer(cluster.bootstrap_servers, "kp-kill", session_timeout_ms=1000,
                                  heartbeat_interval_ms=100, enable_auto_commit=False)
            for _ in range(2)])
        try:
            survivors.wait(lambda owned: sum(len(o) for o in owned) == 4, 20)
            assert sum(len(o) for o in survivors.owned()) == 4, survivors.owned()
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            killed_at = time.monotonic()
            survivors.wait(owned_exactly_once, 15)
            took_s = time.monotonic() - killed_at
            assert owned_exactly_once(survivors.owned()), survivors.owned()
            assert took_s < 8, took_s  # the 1 s session, then kafka-python's rejoin
        finally:
            survivors.stop()
        for consumer in survivors.consumers:
            consumer.close()
    finally:
        victim.kill()
    _aiokafka_replaces_a_killed_member(cluster.bootstrap_servers)


def _aiokafka_replaces_a_killed_member(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer

    async def run() -> float:
        loop = asyncio.get_running_loop()
        victim = start_member(bootstrap, "aio-kill", TOPIC, "aiokafka")
        try:
            assert victim.stdout is not None
            line = await loop.run_in_executor(None, victim.stdout.readline)
            assert line.strip() == "assigned"
            survivors = [AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap,
                                          group_id="aio-kill", session_timeout_ms=1000,
                                          heartbeat_interval_ms=100, enable_auto_commit=False)
                          for _ in range(2)]
            for consumer in survivors:
                await consumer.start()

            async def owned() -> list[set[int]]:
                await asyncio.gather(*(c.getmany(timeout_ms=20) for c in survivors))
                return [{tp.partition for tp in c.assignment()} for c in survivors]

            for _ in range(500):
                if sum(len(o) for o in await owned()) == 4:
                    break
            victim.send_signal(signal.SIGKILL)
            await loop.run_in_executor(None, victim.wait)
            killed_at = time.monotonic()
            for _ in range(500):
                if owned_exactly_once(await owned()):
                    break
            took_s = time.monotonic() - killed_at
            assert owned_exactly_once(await owned())
            for consumer in survivors:
                await consumer.stop()
            return took_s
        finally:
            victim.kill()

    took_s = asyncio.run(run())
    assert took_s < 8, took_s


def test_commits_after_processing_lose_nothing_and_repeat_only_after_the_last_commit(
    cluster: LocalCluster,
) -> None:
    """A member committing every 25 records is SIGKILLed mid-stream; its successor starts
    exactly at the last commit: nothing is lost, and the only records read twice are
    those the dead member read after its last commit."""
    group = "at-least-once"
    victim = start_member(cluster.bootstrap_servers, group, TOPIC, commit_every=25)
    first_reads: set[tuple[int, int]] = set()
    committed: dict[int, int] = {}

    def record(line: str) -> None:
        kind, *fields = line.split()
        if kind == "R":
            first_reads.add((int(fields[0]), int(fields[1])))
        elif kind == "C":
            committed.update((int(p), int(o)) for p, o in
                             (field.split(":") for field in fields) if int(o) >= 0)

    try:
        assert victim.stdout is not None
        for line in victim.stdout:
            record(line)
            if len(first_reads) >= 300 and committed:
                break
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        for line in victim.stdout.read().splitlines():  # what it did before it died
            record(line)
    finally:
        victim.kill()
    # The member may die between a commit and the line reporting it, so the group's own
    # offsets are the truth: never behind what was reported, never past what was read.
    reader = confluent_consumer(cluster.bootstrap_servers, group)
    stored = {tp.partition: tp.offset for tp in reader.committed(
        [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30) if tp.offset >= 0}
    reader.close()
    for partition, offset in committed.items():
        assert stored[partition] >= offset, (partition, stored, committed)
    for partition, offset in stored.items():
        assert offset <= 1 + max(o for p, o in first_reads if p == partition), partition
    committed = stored
    successor = confluent_consumer(cluster.bootstrap_servers, group)
    successor.subscribe([TOPIC])
    second_reads: set[tuple[int, int]] = set()
    deadline = time.monotonic() + 30
    while len(first_reads | second_reads) < 600 and time.monotonic() < deadline:
        message = successor.poll(0.1)
        if message is not None and message.error() is None:
            second_reads.add((message.partition(), message.offset()))
    successor.close()
    assert first_reads | second_reads == {(p, o) for p in range(PARTITIONS) for o in range(100)}
    for partition, offset in second_reads & first_reads:
        assert offset >= committed.get(partition, 0), (partition, offset)
    for partition in range(PARTITIONS):
        resumed = min((o for p, o in second_reads if p == partition), default=100)
        assert resumed == committed.get(partition, 0)


def test_confluent_three_members_each_partition_once_and_offsets_resume(
    cluster: LocalCluster,
) -> None:
    """Three members consume everything once between them, commit, and a new generation
    of consumers in the same group resumes after the commits (reads nothing again).

    Each member pauses what it is given until all three share the partitions: a member
    reading alone before the others join would rightly see its uncommitted records again
    from their next owner."""
    group = "confluent-resume"
    consumers = [confluent_consumer(cluster.bootstrap_servers, group) for _ in range(3)]
    seen: list[tuple[int, int]] = []
    history: list[str] = []  # for the failure message: who was given what, and when

    def read(consumer: Consumer, message: Any) -> None:
        seen.append((message.partition(), message.offset()))

    def pause_assigned(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        history.append(f"member {consumers.index(consumer)} assigned "
                       f"{[tp.partition for tp in partitions]} after {len(seen)} reads")
        consumer.assign(partitions)
        consumer.pause(partitions)

    with closing_all(consumers):
        for consumer in consumers:
            consumer.subscribe([TOPIC], on_assign=pause_assigned)
        # a record polled before the last assignment still counts (a paused partition should
        # deliver none, but if the client let one through it was read once, not lost)
        poll_until(consumers, lambda: owned_exactly_once(assignments_of(consumers)),
                   on_record=read)
        history.append(f"resumed after {len(seen)} reads")
        for consumer in consumers:
            consumer.resume(consumer.assignment())
        deadline = time.monotonic() + 30
        while len(seen) < 600 and time.monotonic() < deadline:
            for consumer in consumers:
                message = consumer.poll(0.05)
                if message is not None and message.error() is None:
                    read(consumer, message)
        assert owned_exactly_once(assignments_of(consumers))
        everything = {(p, o) for p in range(PARTITIONS) for o in range(100)}
        missing = sorted(everything - set(seen))
        twice = sorted(r for r in set(seen) if seen.count(r) > 1)
        positions = [[(tp.partition, tp.offset) for tp in c.position(list(c.assignment()))]
                     for c in consumers]
        assert not missing and not twice and len(seen) == 600, (
            f"missing {missing[:20]}, read twice {twice[:20]}; {history}; positions {positions}")
        for consumer in consumers:
            consumer.commit(asynchronous=False)
            consumer.close()
    again = confluent_consumer(cluster.bootstrap_servers, group)
    committed = again.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 10)
    assert [tp.offset for tp in committed] == [100] * PARTITIONS
    again.subscribe([TOPIC])
    poll_until([again], lambda: len(again.assignment()) == PARTITIONS)
    assert again.poll(1.0) is None  # nothing after the committed offsets
    again.close()


def test_kafka_python_three_members(cluster: LocalCluster) -> None:
    """kafka-python's group protocol (its own JoinGroup/SyncGroup versions) shares the
    partitions among three members and commits."""
    from kafka.structs import OffsetAndMetadata

    consumers = [kafka_python_consumer(cluster.bootstrap_servers, "kafka-python",
                                       auto_offset_reset="earliest", enable_auto_commit=False,
                                       session_timeout_ms=SESSION_MS * 6,
                                       heartbeat_interval_ms=100) for _ in range(3)]
    try:
        polling = PollingThreads(consumers)
        polling.wait(owned_exactly_once, 30)
        polling.stop()
        assert owned_exactly_once(polling.owned()), polling.owned()
        partition = next(iter(consumers[0].assignment()))
        consumers[0].commit({partition: OffsetAndMetadata(7, "note", -1)})
        assert consumers[0].committed(partition) == 7
    finally:
        for consumer in consumers:
            consumer.close()


def test_aiokafka_three_members(cluster: LocalCluster) -> None:
    """aiokafka shares the partitions among three members."""
    from aiokafka import AIOKafkaConsumer

    async def run() -> list[set[int]]:
        consumers = [AIOKafkaConsumer(TOPIC, bootstrap_servers=cluster.bootstrap_servers,
                                      group_id="aiokafka", auto_offset_reset="earliest",
                                      session_timeout_ms=SESSION_MS * 6,
                                      heartbeat_interval_ms=100) for _ in range(3)]
        for consumer in consumers:
            await consumer.start()
        try:
            owned: list[set[int]] = []
            for _ in range(300):
                await asyncio.gather(*(c.getmany(timeout_ms=50) for c in consumers))
                owned = [{tp.partition for tp in c.assignment()} for c in consumers]
                if owned_exactly_once(owned):
                    break
            return owned
        finally:
            for consumer in consumers:
                await consumer.stop()

    owned = asyncio.run(run())
    assert owned_exactly_once(owned), owned


# -- the wire: exact error codes ----------------------------------------------------------

ONE_S = datetime.timedelta(seconds=1)


def _join(client: WireClient, group: str, member_id: str) -> Any:
    request = JoinGroupRequest(group_id=group, session_timeout=ONE_S, rebalance_timeout=ONE_S,
                               member_id=member_id, group_instance_id=None,
                               protocol_type="consumer",
                               protocols=(JoinGroupRequestProtocol(name="range",
                                                                   metadata=b"m"),))
    return client.request(11, 5, request)


def _commit(client: WireClient, group: str, generation: int, member_id: str,
            metadata: str = "") -> Any:
    request = OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
        group_instance_id=None, topics=(OffsetCommitRequestTopic(name=TOPIC, partitions=(
            OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                         committed_leader_epoch=-1,
                                         committed_metadata=metadata),)),))
    response = client.request(8, 8, request)
    return response.topics[0].partitions[0].error_code


def _fetched(client: WireClient, group: str) -> int:
    request = OffsetFetchRequest(groups=(OffsetFetchRequestGroup(group_id=group, topics=(
        OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(0,)),)),), require_stable=True)
    response = client.request(9, 8, request)
    return int(response.groups[0].topics[0].partitions[0].committed_offset)


def test_wire_bad_commits_get_their_codes_and_write_nothing(cluster: LocalCluster) -> None:
    group = "wire-group"
    with WireClient(cluster.bootstrap_servers) as client:
        found = client.request(10, 4, FindCoordinatorRequest(
            key_type=0, coordinator_keys=(group, "other-group")))
        assert [c.error_code for c in found.coordinators] == [ErrorCode.none] * 2
        assert {c.node_id for c in found.coordinators} == {cluster.node_id}
        first = _join(client, group, "")
        assert first.error_code == ErrorCode.member_id_required
        joined = _join(client, group, first.member_id)
        assert joined.error_code == ErrorCode.none and joined.leader == first.member_id
        member, generation = joined.member_id, joined.generation_id
        synced = client.request(14, 3, SyncGroupRequest(
            group_id=group, generation_id=generation, member_id=member, group_instance_id=None,
            assignments=(SyncGroupRequestAssignment(member_id=member, assignment=b"A"),)))
        assert synced.error_code == ErrorCode.none and synced.assignment == b"A"

        assert _commit(client, group, generation - 1, member) == ErrorCode.illegal_generation
        assert _commit(client, group, generation, "stranger") == ErrorCode.unknown_member_id
        assert _commit(client, group, generation, member, "x" * 101) == (
            ErrorCode.offset_metadata_too_large)
        assert _fetched(client, group) == -1  # none of them was written
        assert _commit(client, group, generation, member, "ok") == ErrorCode.none
        assert _fetched(client, group) == 5


def test_admin_lists_describes_and_deletes_groups(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    consumer = confluent_consumer(bootstrap, "admin-active")
    consumer.subscribe([TOPIC])
    poll_until([consumer], lambda: len(consumer.assignment()) == PARTITIONS)
    idle = confluent_consumer(bootstrap, "admin-idle")
    idle.commit(offsets=[TopicPartition(TOPIC, 0, 3)], asynchronous=False)
    idle.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(10)
    states = {g.group_id: g.state.name for g in listed.valid}
    assert states["admin-active"] == "STABLE" and states["admin-idle"] == "EMPTY"
    described = admin.describe_consumer_groups(["admin-active"])["admin-active"].result(10)
    [member] = described.members
    assert len(member.assignment.topic_partitions) == PARTITIONS
    refused = admin.delete_consumer_groups(["admin-active"])["admin-active"]
    with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
        refused.result(10)
    admin.delete_consumer_groups(["admin-idle"])["admin-idle"].result(10)
    assert "admin-idle" not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    consumer.close()


def test_committed_offsets_survive_a_node_restart(tmp_path: Any) -> None:
    """Offsets and group metadata are rebuilt from __consumer_offsets (default 50
    partitions) after the node restarts, cleanly and after SIGKILL."""
    with LocalCluster(data_dir=tmp_path / "node", configs={
            "group.initial.rebalance.delay.ms": "0"}) as node:
        bootstrap = node.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("kept", 3, 1)])["kept"].result(30)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kept-group"})
        consumer.commit(offsets=[TopicPartition("kept", p, 10 + p) for p in range(3)],
                        asynchronous=False)
        consumer.close()
        for restart in (node.stop, node.kill):
            restart()
            node.start()
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kept-group"})
            committed = consumer.committed([TopicPartition("kept", p) for p in range(3)], 20)
            consumer.close()
            assert [tp.offset for tp in committed] == [10, 11, 12], restart
        assert os.path.isdir(node.log_dir / "__consumer_offsets-49")


# -- the consumer-groups tool --------------------------------------------------------------


def _tool(bootstrap: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pykraft", "consumer-groups",
                           "--bootstrap-server", bootstrap, *argv],
                          capture_output=True, text=True, timeout=60)


def test_cli_describes_lag_and_resets_an_inactive_group_only(cluster: LocalCluster) -> None:
    """--describe shows committed offset, log end and lag per partition; --reset-offsets
    --to-earliest is refused while a member is active, and once the group is empty it makes
    the next consumer reread the topic from the start."""
    bootstrap, group = cluster.bootstrap_servers, "cli-group"
    committer = confluent_consumer(bootstrap, group)
    committer.commit(offsets=[TopicPartition(TOPIC, p, 40 + p) for p in range(PARTITIONS)],
                     asynchronous=False)
    committer.close()
    described = _tool(bootstrap, "--describe", "--group", group)
    assert described.returncode == 0, described.stderr
    rows = [line.split() for line in described.stdout.splitlines()
            if line.startswith(f"{group} ")]
    assert [(r[2], r[3], r[4], r[5]) for r in rows] == [
        (str(p), str(40 + p), "100", str(60 - p)) for p in range(PARTITIONS)]
    assert f"Consumer group '{group}' has no active members." in described.stderr

    active = confluent_consumer(bootstrap, group)
    active.subscribe([TOPIC])
    poll_until([active], lambda: len(active.assignment()) == PARTITIONS)
    refused = _tool(bootstrap, "--reset-offsets", "--group", group, "--topic", TOPIC,
                    "--to-earliest", "--execute")
    assert refused.returncode == 1
    assert "can only be reset if the group 'cli-group' is inactive" in refused.stderr
    active.close()

    reset = _tool(bootstrap, "--reset-offsets", "--group", group, "--topic", TOPIC,
                  "--to-earliest", "--execute")
    assert reset.returncode == 0, reset.stderr
    reader = confluent_consumer(bootstrap, group)
    reader.subscribe([TOPIC])
    first_offsets: dict[int, int] = {}
    deadline = time.monotonic() + 20
    while len(first_offsets) < PARTITIONS and time.monotonic() < deadline:
        message = reader.poll(0.1)
        if message is not None and message.error() is None:
            first_offsets.setdefault(message.partition(), message.offset())
    reader.close()
    assert first_offsets == {p: 0 for p in range(PARTITIONS)}


# -- cooperative rebalancing and static membership ----------------------------------------


class Tracker:
    """Records a consumer's rebalance callbacks (partition numbers)."""

    def __init__(self) -> None:
        self.assigned: list[set[int]] = []
        self.revoked: list[set[int]] = []

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned.append({tp.partition for tp in partitions})

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.revoked.append({tp.partition for tp in partitions})


def test_cooperative_sticky_a_joining_member_revokes_only_what_moves(
    cluster: LocalCluster,
) -> None:
    """With cooperative-sticky, the first member keeps every partition that does not move
    to the newcomer: its revocations are exactly the newcomer's partitions."""
    bootstrap, group = cluster.bootstrap_servers, "cooperative"
    extra = {"partition.assignment.strategy": "cooperative-sticky"}
    first_calls = Tracker()
    first = confluent_consumer(bootstrap, group, **extra)
    consumers = [first]
    with closing_all(consumers):
        first.subscribe([TOPIC], on_assign=first_calls.on_assign,
                        on_revoke=first_calls.on_revoke)
        poll_until([first], lambda: len(first.assignment()) == PARTITIONS)
        consumers.append(confluent_consumer(bootstrap, group, **extra))
        consumers[1].subscribe([TOPIC])
        poll_until(consumers, lambda: owned_exactly_once(assignments_of(consumers)))
        kept, moved = assignments_of(consumers)
        revoked = set().union(*first_calls.revoked)
        assert revoked == moved and len(kept) == len(moved) == PARTITIONS // 2
        assert first_calls.assigned[0] == set(range(PARTITIONS))


def test_a_restarted_static_member_gets_its_partitions_back_without_a_rebalance(
    cluster: LocalCluster,
) -> None:
    """group.instance.id (KIP-345): a member that restarts within the session timeout
    takes its old place and assignment; the other member sees no revocation."""
    bootstrap, group = cluster.bootstrap_servers, "static"
    static = {"session.timeout.ms": 6000}
    leader_calls = Tracker()
    leader = confluent_consumer(bootstrap, group, **{"group.instance.id": "s-1"}, **static)
    consumers = [leader]
    with closing_all(consumers):
        leader.subscribe([TOPIC], on_assign=leader_calls.on_assign,
                         on_revoke=leader_calls.on_revoke)
        poll_until([leader], lambda: len(leader.assignment()) == PARTITIONS)
        follower = confluent_consumer(bootstrap, group, **{"group.instance.id": "s-2"},
                                      **static)
        follower.subscribe([TOPIC])
        consumers.append(follower)
        poll_until(consumers, lambda: owned_exactly_once(assignments_of(consumers)))
        before = assignments_of(consumers)
        revocations = len(leader_calls.revoked)
        follower.close()  # a static member does not leave the group on close
        restarted = confluent_consumer(bootstrap, group, **{"group.instance.id": "s-2"},
                                       **static)
        consumers.append(restarted)
        restarted.subscribe([TOPIC])
        poll_until([leader, restarted], lambda: bool(restarted.assignment()))
        assert assignments_of([leader, restarted]) == before
        assert len(leader_calls.revoked) == revocations
