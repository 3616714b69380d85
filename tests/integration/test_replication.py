"""Partition replication with real processes: one controller and three brokers
(LocalCluster), RF=3 topics, confluent-kafka clients.

- Followers fetch from the leader and append its batches as they are: every replica's log
  ends equal, byte for byte, and a consumer sees what was acknowledged with acks=all.
- The leader answers follower Fetch v15 as Kafka does (checked at the wire).
- The leader is killed with SIGKILL while a producer (acks=all, retries, no idempotence)
  sends and a consumer reads: after a new leader is elected from the ISR, every
  acknowledged record is there in send order, and nothing the consumer saw disappeared
  (once in CI, ten times in the slow version, the killed broker rejoining the ISR).
- A SIGSTOPped follower leaves the ISR after replica.lag.time.max.ms (the leader's
  AlterPartition) while acks=all produce goes on, and rejoins after SIGCONT; with both
  followers stopped, acks=all gets NOT_ENOUGH_REPLICAS.
- A leader isolated from the other brokers and the controller (proxies the test cuts)
  acknowledges nothing, and truncates its own tail after healing.
- A follower whose first fetch reached the leader before the leader had applied the topic
  (UNKNOWN_TOPIC_ID) gets the records once it has, and stays in the ISR.
"""

from __future__ import annotations

import datetime
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)

from pykraft.records.record import build_batch
from pykraft.testing import LocalCluster, free_port
from pykraft.testing.proxy import FaultProxy
from pykraft.testing.wire import WireClient
from tests.integration import waits

T = TypeVar("T")
WAIT_S = 30.0
# the leader drops a silent follower from the ISR (lag time 2 s) before the controller
# fences it (session 6 s), so the ISR tests see the leader's AlterPartition at work
FAST = {
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.backoff.ms": "100",
    "replica.fetch.wait.max.ms": "200",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "500",
}


def wait_for(predicate: Callable[[], T | None], what: str, timeout_s: float = WAIT_S) -> T:
    return waits.wait_for(predicate, what, timeout_s, retry_on=(OSError, KafkaException))


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(controllers=1, brokers=3, configs=FAST) as running:
        yield running


def bootstrap_of(cluster: LocalCluster, alive: list[int] | None = None) -> str:
    ids = alive if alive is not None else [i for i in cluster.broker_ids if cluster.running(i)]
    return ",".join(cluster.nodes[i].bootstrap_servers for i in ids)


def create_topic(cluster: LocalCluster, name: str, *, partitions: int = 1,
                 configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_of(cluster)})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=3, config=configs or {})],
                                  operation_timeout=20)
    futures[name].result(30)
    wait_for(lambda: partition_state(cluster, name) is not None
             and partition_state(cluster, name)[0] >= 0, f"{name} has a leader")


def partition_state(cluster: LocalCluster, topic: str, index: int = 0,
                    via: int | None = None) -> tuple[int, int, tuple[int, ...]] | None:
    """(leader, leader epoch, ISR) as a running broker's Metadata shows it."""
    node = via if via is not None else next(i for i in cluster.broker_ids if cluster.running(i))
    request = MetadataRequest(topics=(MetadataRequestTopic(name=topic, topic_id=None),),
                              allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
    with WireClient(cluster.nodes[node].bootstrap_servers, timeout_s=5) as client:
        response = client.request(3, 12, request)
    for found in response.topics:
        for partition in found.partitions:
            if partition.partition_index == index:
                return (int(partition.leader_id), int(partition.leader_epoch),
                        tuple(sorted(int(r) for r in partition.isr_nodes)))
    return None


def replica_log(cluster: LocalCluster, broker: int, topic: str, index: int = 0) -> bytes:
    """The concatenated segment files of one replica (whole batches, as stored)."""
    directory = cluster.nodes[broker].log_dir / f"{topic}-{index}"
    return b"".join(path.read_bytes() for path in sorted(
        directory.glob("*.log"), key=lambda p: int(p.stem)))


def consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = WAIT_S
                ) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            values.append(message.value())
    finally:
        consumer.close()
    return values


def producer(bootstrap: str, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all",
                     "enable.idempotence": False, "linger.ms": 5, **extra})


def test_rf3_acks_all_replicates_to_every_broker(cluster: LocalCluster) -> None:
    topic = f"rep-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, configs={"min.insync.replicas": "2"})
    leader, _, isr = wait_for(lambda: partition_state(cluster, topic), "metadata")
    assert isr == (2, 3, 4)
    acked: list[int] = []
    errors: list[Any] = []

    def report(error: Any, message: Any) -> None:
        if error is None:
            acked.append(message.offset())
        else:
            errors.append(error)

    p = producer(bootstrap_of(cluster))
    for i in range(500):
        p.produce(topic, value=f"v{i}".encode(), on_delivery=report)
    assert p.flush(30) == 0
    assert errors == [] and sorted(acked) == list(range(500))
    values = consume_all(bootstrap_of(cluster), topic, 500)
    assert values == [f"v{i}".encode() for i in range(500)]
    # the followers' logs end equal to the leader's, byte for byte
    wait_for(lambda: len({replica_log(cluster, b, topic) for b in (2, 3, 4)}) == 1,
             "identical replica logs")
    assert len(replica_log(cluster, leader, topic)) > 0


class SendLoop:
    """A producer thread sending numbered values (acks=all, retries, no idempotence, one
    request in flight) until stopped; `acked` holds the values acknowledged, in order."""

    def __init__(self, bootstrap: str, topic: str, prefix: str = "", **extra: Any) -> None:
        self.topic = topic
        self.prefix = prefix
        self.producer = producer(bootstrap, **{"max.in.flight.requests.per.connection": 1,
                                               "retries": 1_000_000,
                                               "retry.backoff.ms": 100,
                                               "message.timeout.ms": 60_000,
                                               "topic.metadata.refresh.interval.ms": 500,
                                               **extra})
        self.acked: list[int] = []
        self.failed: list[tuple[int, str]] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _report(self, error: Any, message: Any) -> None:
        value = int(message.value()[len(self.prefix):])
        if error is None:
            self.acked.append(value)
        else:
            self.failed.append((value, str(error)))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, value=f"{self.prefix}{self.sent}".encode(),
                                      on_delivery=self._report)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.002)

    def __enter__(self) -> SendLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(10)
            self.producer.flush(90)


def new_leader(cluster: LocalCluster, topic: str, old: int) -> int:
    state = partition_state(cluster, topic)
    return state[0] if state is not None and state[0] not in (old, -1) else 0


def check_no_acked_write_lost(acked: list[int], values: list[bytes], prefix: str = "") -> int:
    """Every acknowledged value (of the SendLoop with `prefix`) is in the log, in send
    order; return how many appear more than once (retries of a write whose answer was lost:
    no idempotence)."""
    seen = [int(v[len(prefix):]) for v in values if v.decode().startswith(prefix)]
    first: dict[int, int] = {}
    for position, value in enumerate(seen):
        first.setdefault(value, position)
    missing = [v for v in acked if v not in first]
    assert missing == [], f"acknowledged but lost: {missing[:20]}"
    order = [first[v] for v in sorted(acked)]
    assert order == sorted(order), "acknowledged values out of send order"
    return len(seen) - len(first)


class WatchLoop:
    """A consumer thread reading the partition from the start while the test runs;
    `seen` maps each offset it was given to the value it saw there."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap,
                                  "group.id": f"watch-{uuid.uuid4()}",
                                  "enable.auto.commit": False,
                                  "topic.metadata.refresh.interval.ms": 500})
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.seen: dict[int, bytes] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self.consumer.poll(0.2)
            if message is not None and message.error() is None:
                self.seen[message.offset()] = message.value()

    def __enter__(self) -> WatchLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def kill_leader_while_producing(cluster: LocalCluster, topic: str, kills: int, *,
                                rejoin_isr: bool, **producer_configs: Any) -> int:
    """Kill -9 the partition's leader `kills` times while a SendLoop produces and a
    WatchLoop consumes; each time wait for a new leader and more acks, then restart the
    killed broker (and, with `rejoin_isr`, wait until it is back in the ISR). Then: every
    acknowledged write is in the log in send order, and whatever the consumer saw is still
    there, at the offset where it saw it. Returns how many values the log holds twice."""
    with SendLoop(bootstrap_of(cluster), topic, **producer_configs) as sender, \
            WatchLoop(bootstrap_of(cluster), topic) as watcher:
        for _ in range(kills):
            leader = wait_for(lambda: partition_state(cluster, topic)[0], "a leader")
            before = len(sender.acked)
            wait_for(lambda n=before: len(sender.acked) >= n + 200,  # type: ignore[misc]
                     "acks before the kill")
            cluster.kill_node(leader, signal.SIGKILL)
            wait_for(lambda old=leader: new_leader(cluster, topic, old),  # type: ignore[misc]
                     "a new leader")
            after = len(sender.acked)
            wait_for(lambda n=after: len(sender.acked) >= n + 200,  # type: ignore[misc]
                     "acks after the kill")
            cluster.restart_node(leader)
            if rejoin_isr:
                wait_for(lambda: len((partition_state(cluster, topic) or (0, 0, ()))[2]) == 3,
                         "the restarted broker back in the ISR", timeout_s=60)
        sender.stop()
    assert sender.failed == []
    end = wait_for(lambda: high_watermark(cluster, topic), "the final high watermark")
    values = consume_all(bootstrap_of(cluster), topic, end, timeout_s=60)
    assert len(values) == end
    duplicates = check_no_acked_write_lost(sender.acked, values)
    changed = {o: v for o, v in watcher.seen.items() if o >= end or values[o] != v}
    assert changed == {}, "a consumer saw records that later disappeared"
    return duplicates


def high_watermark(cluster: LocalCluster, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap_of(cluster), "group.id": "hw"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
        return int(high)
    finally:
        consumer.close()


def test_kill_the_leader_while_producing_loses_no_acknowledged_write(
        cluster: LocalCluster) -> None:
    topic = f"kill-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, configs={"min.insync.replicas": "2"})
    kill_leader_while_producing(cluster, topic, kills=1, rejoin_isr=False)


def controller_serves_alter_partition(cluster: LocalCluster) -> bool:
    """Whether the controller listener offers AlterPartition (API 56) at v3."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    controller = cluster.nodes[cluster.controller_ids[0]]
    request = ApiVersionsRequest(client_software_name="test", client_software_version="1")
    with WireClient(f"127.0.0.1:{controller.controller_port}", timeout_s=5) as client:
        response = client.request(18, 3, request)
    return any(key.api_key == 56 and key.max_version >= 3 for key in response.api_keys)


needs_alter_partition = pytest.mark.usefixtures("alter_partition_served")


@pytest.fixture
def alter_partition_served(cluster: LocalCluster) -> None:
    if not controller_serves_alter_partition(cluster):
        pytest.skip("the controller does not serve AlterPartition v3 yet")


def send_one(bootstrap: str, topic: str, value: bytes, timeout_s: float = 10) -> Any:
    """Produce one record with acks=all and no retries; the delivery error (None if acked)."""
    outcome: list[Any] = []
    p = producer(bootstrap, **{"retries": 0, "message.timeout.ms": int(timeout_s * 1000),
                               "request.timeout.ms": int(timeout_s * 1000)})
    p.produce(topic, value=value, on_delivery=lambda error, _: outcome.append(error))
    p.flush(timeout_s + 5)
    assert outcome, "no delivery report"
    return outcome[0]


@needs_alter_partition
def test_a_stopped_follower_leaves_the_isr_and_rejoins(cluster: LocalCluster) -> None:
    topic = f"stop-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, configs={"min.insync.replicas": "2"})
    leader, _, isr = partition_state(cluster, topic)  # type: ignore[misc]
    assert isr == (2, 3, 4)
    follower = next(b for b in isr if b != leader)
    others = [b for b in cluster.broker_ids if b != follower]
    assert send_one(bootstrap_of(cluster, others), topic, b"before") is None
    process = cluster.nodes[follower].process
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    try:
        # acks=all waits while the silent follower holds the high watermark, until the
        # leader drops it from the ISR (replica.lag.time.max.ms 2 s, checked every 1 s)
        started = time.monotonic()
        assert send_one(bootstrap_of(cluster, others), topic, b"during", 20) is None
        waited = time.monotonic() - started
        wait_for(lambda: follower not in partition_state(cluster, topic, via=leader)[2],
                 "the ISR change in the metadata", timeout_s=5)
    finally:
        process.send_signal(signal.SIGCONT)
    assert 1.5 < waited < 10
    wait_for(lambda: follower in partition_state(cluster, topic, via=leader)[2],
             "the follower back in the ISR")
    wait_for(lambda: len({replica_log(cluster, b, topic) for b in (2, 3, 4)}) == 1,
             "identical replica logs")
    assert consume_all(bootstrap_of(cluster), topic, 2) == [b"before", b"during"]


@needs_alter_partition
def test_two_stopped_followers_make_acks_all_fail(cluster: LocalCluster) -> None:
    topic = f"two-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, configs={"min.insync.replicas": "2"})
    leader = partition_state(cluster, topic)[0]  # type: ignore[index]
    followers = [b for b in cluster.broker_ids if b != leader]
    processes = [cluster.nodes[b].process for b in followers]
    for process in processes:
        assert process is not None
        process.send_signal(signal.SIGSTOP)
    try:
        p = producer(cluster.nodes[leader].bootstrap_servers, acks=1)
        p.produce(topic, value=b"acks=1")  # leaves the followers behind
        assert p.flush(10) == 0
        wait_for(lambda: partition_state(cluster, topic, via=leader)[2] == (leader,),
                 "the ISR down to the leader")
        error = send_one(cluster.nodes[leader].bootstrap_servers, topic, b"refused")
        assert error is not None and error.name() == "NOT_ENOUGH_REPLICAS"
    finally:
        for process in processes:
            assert process is not None
            process.send_signal(signal.SIGCONT)
    wait_for(lambda: len(partition_state(cluster, topic, via=leader)[2]) == 3,
             "both followers back in the ISR")
    assert consume_all(bootstrap_of(cluster), topic, 2, timeout_s=5) == [b"acks=1"]


@needs_alter_partition
def test_an_idempotent_producer_writes_each_record_once_across_leader_kills(
        cluster: LocalCluster) -> None:
    """The new leader rebuilds the producers' state from its own log: an idempotent
    producer's retries after a kill -9 of the leader are recognised, none is written
    twice (issue 8: producer state on leader change)."""
    topic = f"idem-kills-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, configs={"min.insync.replicas": "2"})
    assert kill_leader_while_producing(
        cluster, topic, kills=2, rejoin_isr=True, **{
            "enable.idempotence": True, "max.in.flight.requests.per.connection": 5}) == 0


@pytest.mark.slow
@needs_alter_partition
def test_ten_leader_kills_lose_no_acknowledged_write(cluster: LocalCluster) -> None:
    topic = f"kills-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, configs={"min.insync.replicas": "2"})
    kill_leader_while_producing(cluster, topic, kills=10, rejoin_isr=True)


def test_a_follower_that_fetched_before_its_leader_knew_the_topic_catches_up() -> None:
    """The leader (SIGSTOPped while the topic is made) answers the follower's first fetch
    UNKNOWN_TOPIC_ID; once it has applied the topic, the follower gets the records, and
    acks=all completes with both in the ISR. Once in CI the leader's fetch session kept
    answering UNKNOWN_TOPIC_ID for that partition until the ISR shrank."""
    with LocalCluster(controllers=1, brokers=2, configs=FAST) as two_brokers:
        leader, follower = 3, 2
        admin = AdminClient({"bootstrap.servers": bootstrap_of(two_brokers, [follower])})
        process = two_brokers.nodes[leader].process
        assert process is not None
        process.send_signal(signal.SIGSTOP)
        try:
            admin.create_topics([NewTopic("early", num_partitions=1,
                                          replica_assignment=[[leader, follower]])]
                                )["early"].result(30)
            time.sleep(1)  # the follower applies it and fetches from the stopped leader
        finally:
            process.send_signal(signal.SIGCONT)
        wait_for(lambda: partition_state(two_brokers, "early", via=leader) is not None,
                 "the leader's metadata")
        assert send_one(two_brokers.nodes[leader].bootstrap_servers, "early", b"one") is None
        wait_for(lambda: replica_log(two_brokers, follower, "early")
                 == replica_log(two_brokers, leader, "early"), "the record on the follower",
                 timeout_s=10)
        assert partition_state(two_brokers, "early", via=leader)[2] == (2, 3)  # type: ignore[index]
        follower_log = two_brokers.nodes[follower].log_path.read_text()
        assert "leader 3 answers unknown_topic_id" in follower_log  # the case at hand


def raw_produce(bootstrap: str, topic: str, acks: int) -> ErrorCode:
    """One Produce v9 of a one-record batch ("isolated") to partition 0; its error code."""
    request = ProduceRequest(acks=acks, timeout=datetime.timedelta(seconds=2),
                             topic_data=(TopicProduceData(name=topic, partition_data=(
                                 PartitionProduceData(index=0, records=build_batch(
                                     [(None, b"isolated", (), int(time.time() * 1000))])),)),))
    with WireClient(bootstrap, timeout_s=10) as client:
        return ErrorCode(client.request(0, 9, request).responses[0]
                         .partition_responses[0].error_code)


@pytest.mark.slow  # a fault test; in ./scripts/test-long to keep CI under 30 minutes
def test_an_isolated_leader_acknowledges_nothing_and_truncates_after_healing() -> None:
    """Each broker's replication listener and its way to the controller go through a
    proxy. Cutting the leader's two proxies isolates it from the other brokers and the
    controller (clients still reach it): it takes writes but answers acks=all with
    REQUEST_TIMED_OUT, the controller fences it and elects another leader from the ISR,
    and once healed it truncates what only it had (DivergingEpoch) and rejoins the ISR.
    Every write a producer had acknowledged is in the final log, in order."""
    cluster = LocalCluster(controllers=1, brokers=3, configs=FAST)
    controller_port = cluster.nodes[1].controller_port
    proxies: dict[int, tuple[FaultProxy, FaultProxy]] = {}
    for broker in cluster.broker_ids:
        node = cluster.nodes[broker]
        replication_port = free_port()
        replication, to_controller = FaultProxy(replication_port), FaultProxy(controller_port)
        proxies[broker] = (replication, to_controller)
        cluster.set_node_configs(broker, {
            "listeners": f"PLAINTEXT://127.0.0.1:{node.broker_port},"
                         f"REPLICATION://127.0.0.1:{replication_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.broker_port},"
                                    f"REPLICATION://127.0.0.1:{replication.port}",
            "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
            "controller.quorum.voters": f"1@127.0.0.1:{to_controller.port}",
        })
    try:
        with cluster:
            topic = f"iso-{uuid.uuid4().hex[:8]}"
            create_topic(cluster, topic, configs={"min.insync.replicas": "2"})
            leader = partition_state(cluster, topic)[0]  # type: ignore[index]
            others = [b for b in cluster.broker_ids if b != leader]
            # "a" sends throughout; during the isolation it may stay stuck on the isolated
            # leader's stale metadata (a client's availability, not a safety matter). "b"
            # starts once the new leader is elected, from the other brokers' metadata.
            with SendLoop(bootstrap_of(cluster), topic, "a", **{"request.timeout.ms": 3000}) \
                    as before, WatchLoop(bootstrap_of(cluster), topic) as watcher:
                wait_for(lambda: len(before.acked) >= 300, "acks before the isolation")
                for proxy in proxies[leader]:
                    proxy.cut()
                # the isolated leader still takes writes, but cannot acknowledge them with
                # acks=all: its followers are gone and it cannot shrink the ISR without the
                # controller
                assert raw_produce(cluster.nodes[leader].bootstrap_servers, topic, -1) == \
                    ErrorCode.request_timed_out
                assert raw_produce(cluster.nodes[leader].bootstrap_servers, topic, 1) == \
                    ErrorCode.none
                wait_for(lambda: partition_state(cluster, topic, via=others[0])[0]
                         in others, "a new leader elected by the controller")
                with SendLoop(bootstrap_of(cluster, others), topic, "b") as after:
                    wait_for(lambda: len(after.acked) >= 300, "acks from the new leader")
                    for proxy in proxies[leader]:
                        proxy.heal()
                    wait_for(lambda: len(partition_state(cluster, topic, via=others[0])[2])
                             == 3, "the old leader back in the ISR", timeout_s=60)
                before.stop()
            assert before.failed == [] and after.failed == []
            end = wait_for(lambda: high_watermark(cluster, topic), "the final high watermark")
            values = consume_all(bootstrap_of(cluster), topic, end, timeout_s=60)
            assert len(values) == end
            check_no_acked_write_lost(before.acked, values, "a")
            check_no_acked_write_lost(after.acked, values, "b")
            assert b"isolated" not in values  # taken with acks=1 by the isolated leader only
            assert {o: v for o, v in watcher.seen.items() if o >= end or values[o] != v} == {}
            wait_for(lambda: len({replica_log(cluster, b, topic)
                                  for b in cluster.broker_ids}) == 1,
                     "identical replica logs, the old leader's tail truncated")
            log_text = cluster.nodes[leader].log_path.read_text()
            assert re.search(rf"diverged from leader \d+; truncating: \d+ partition\(s\): "
                             rf"(.*, )?{topic}-0 \(its epoch", log_text)
    finally:
        for pair in proxies.values():
            for proxy in pair:
                proxy.close()


def replica_fetch(bootstrap: str, topic_id: uuid.UUID, replica_id: int, fetch_offset: int,
                  last_fetched_epoch: int, current_leader_epoch: int = -1) -> Any:
    """One Fetch v15 as a follower sends it; the answer for partition 0."""
    from kio.schema.fetch.v15 import request as m

    from pykraft.protocol.entities import make

    request = make(
        m.FetchRequest, replica_state=make(m.ReplicaState, replica_id=replica_id,
                                           replica_epoch=-1),
        max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=(make(m.FetchTopic, topic_id=topic_id, partitions=(make(
            m.FetchPartition, partition=0, current_leader_epoch=current_leader_epoch,
            fetch_offset=fetch_offset, last_fetched_epoch=last_fetched_epoch,
            log_start_offset=0, partition_max_bytes=1 << 20),)),))
    with WireClient(bootstrap, timeout_s=5) as client:
        response = client.request(1, 15, request)
    return response.responses[0].partitions[0]


def test_the_leader_answers_follower_fetches_as_kafka(cluster: LocalCluster) -> None:
    """Exact protocol: a replica reads to the log end, a consumer to the high watermark; a
    last fetched epoch the leader's log does not continue gets DivergingEpoch and no
    records; a broker outside the replica set and a stale leader epoch are refused."""
    topic = f"wire-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic)
    leader, epoch, _ = partition_state(cluster, topic)  # type: ignore[misc]
    request = MetadataRequest(topics=(MetadataRequestTopic(name=topic, topic_id=None),),
                              allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)

    def known_id() -> uuid.UUID | None:
        # the leader learns of the topic from its own copy of the metadata log, which may
        # trail the broker partition_state asked; until then it answers the zero id
        with WireClient(cluster.nodes[leader].bootstrap_servers, timeout_s=5) as client:
            found = client.request(3, 12, request).topics[0]
        return found.topic_id if found.error_code == ErrorCode.none else None

    topic_uuid = wait_for(known_id, f"{topic}'s id on its leader")
    p = producer(bootstrap_of(cluster))
    for i in range(3):
        p.produce(topic, value=f"w{i}".encode())
    assert p.flush(10) == 0
    bootstrap = cluster.nodes[leader].bootstrap_servers
    follower = next(b for b in cluster.broker_ids if b != leader)
    answer = replica_fetch(bootstrap, topic_uuid, follower, 3, epoch, epoch)
    assert answer.error_code == ErrorCode.none and answer.high_watermark == 3
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (-1, -1)
    # a follower whose log goes on past the leader's in the same epoch (a deposed
    # leader's unreplicated tail): the epoch ends at the leader's log end
    answer = replica_fetch(bootstrap, topic_uuid, follower, 5, epoch, epoch)
    assert answer.error_code == ErrorCode.none and answer.records in (b"", None)
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (epoch, 3)
    # from offset 0 with no epoch: the whole log, to its end
    answer = replica_fetch(bootstrap, topic_uuid, follower, 0, -1, epoch)
    assert answer.error_code == ErrorCode.none and len(answer.records) > 0
    assert replica_fetch(bootstrap, topic_uuid, 99, 0, -1).error_code == \
        ErrorCode.not_leader_or_follower
    assert replica_fetch(bootstrap, topic_uuid, follower, 0, -1, epoch + 1).error_code == \
        ErrorCode.unknown_leader_epoch
    assert replica_fetch(bootstrap, topic_uuid, follower, 4, -1, epoch).error_code == \
        ErrorCode.offset_out_of_range


@pytest.mark.slow
def test_a_follower_behind_the_leaders_log_start_restarts_its_log_there(
        cluster: LocalCluster) -> None:
    """A follower killed while the leader's log start moves past its log end (DeleteRecords)
    gets OFFSET_OUT_OF_RANGE when it fetches again, asks the leader's log start (ListOffsets)
    and restarts its log there, then catches up."""
    topic = f"start-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic)
    leader = partition_state(cluster, topic)[0]  # type: ignore[index]
    follower = next(b for b in cluster.broker_ids if b != leader)
    p = producer(bootstrap_of(cluster))
    for i in range(10):
        p.produce(topic, value=f"old{i}".encode())
    assert p.flush(10) == 0
    cluster.kill_node(follower, signal.SIGKILL)
    wait_for(lambda: follower not in partition_state(cluster, topic, via=leader)[2],
             "the killed follower out of the ISR")
    for i in range(10):
        p.produce(topic, value=f"new{i}".encode())
    assert p.flush(10) == 0
    admin = AdminClient({"bootstrap.servers": cluster.nodes[leader].bootstrap_servers})
    futures = admin.delete_records([TopicPartition(topic, 0, 15)])
    assert next(iter(futures.values())).result(10).low_watermark == 15
    cluster.restart_node(follower)
    wait_for(lambda: follower in partition_state(cluster, topic, via=leader)[2],
             "the follower back in the ISR", timeout_s=60)
    log_text = cluster.nodes[follower].log_path.read_text()
    assert f"{topic}-0 ends at 10, below leader {leader}'s log start 15" in log_text
    # the leader answered with the whole batch holding offset 15 (offsets 10-19): the
    # follower restarted its log at that batch, as Kafka's does, and dropped offsets 0-9
    directory = cluster.nodes[follower].log_dir / f"{topic}-0"
    assert sorted(int(path.stem) for path in directory.glob("*.log"))[0] == 10
