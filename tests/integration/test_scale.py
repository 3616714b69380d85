"""Partitions at scale through a broker's whole lifecycle (issue 21, done-when 2).

3 controllers and 3 brokers as separate processes, Kafka's default timeouts. The cluster
is given `partitions` partitions (100 per topic, RF 3, each broker holds a replica of
every one), then the last broker goes through a controlled shutdown (SIGTERM), a restart,
a kill -9 and a restart again. After each stop every partition must have a live leader;
after each restart the broker must be back in every ISR; no other broker may be fenced
along the way. acks=all records produced to a sample of partitions before each stop must
all be read back at the offsets they were acknowledged at.

CI runs 10,000 partitions; `./scripts/test-long` runs 100,000 (8 minutes on this
project's 2-core machine) and 300,000 (about 45) as well.
"""

from __future__ import annotations

import re
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as ClientPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kio.schema.list_offsets.v9.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.types import TopicName

from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient

METADATA = 3
LIST_OFFSETS = 2
PER_TOPIC = 100
TOPICS_PER_REQUEST = 10
SAMPLE = 60  # partitions written to and read back, spread over every topic
PER_SAMPLE = 5  # records per sampled partition per round
CONFIGS = {  # a broker holds every partition's log: keep each one's files small
    "log.segment.bytes": "1048576",
    "log.index.size.max.bytes": "4096",
}

# Seconds each step may take, by partition count: the ones at 10,000 are 5-10 times the
# figures of BENCHMARKS.md's "Metadata at scale" runs; 100,000's are 5-10 times those of its
# "fifth look" (the longest step, serving the sample, took 216 s); 300,000 is scaled from
# 100,000's.
LIMITS = {
    10_000: {"create": 300, "stop": 120, "rejoin": 240, "test": 900},
    100_000: {"create": 1_800, "stop": 600, "rejoin": 900, "test": 5_400},
    300_000: {"create": 3_600, "stop": 900, "rejoin": 1_800, "test": 10_800},
}


@dataclass(frozen=True)
class PartitionView:
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


View = dict[tuple[str, int], PartitionView]


def view(bootstrap: str, prefix: str) -> tuple[set[int], View]:
    """The live brokers and every partition of the topics named `prefix`*, as one broker's
    Metadata (all topics) shows them."""
    request = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
    with WireClient(bootstrap, timeout_s=120) as client:
        response = client.request(METADATA, 12, request)
    partitions = {
        (str(topic.name), partition.partition_index): PartitionView(
            partition.leader_id, tuple(partition.replica_nodes), tuple(partition.isr_nodes))
        for topic in response.topics if str(topic.name).startswith(prefix)
        for partition in topic.partitions
    }
    return {broker.node_id for broker in response.brokers}, partitions


def wait(what: str, check: Callable[[], str | None], limit_s: float) -> float:
    """Seconds until `check()` returns None (it returns what is still wrong otherwise)."""
    started = time.monotonic()
    while (wrong := check()) is not None:
        if time.monotonic() - started > limit_s:
            raise AssertionError(f"{what}: not within {limit_s} s; {wrong}")
        time.sleep(0.2)
    return time.monotonic() - started


class Scale:
    """The cluster, its topics and what was acknowledged on the sampled partitions."""

    def __init__(self, cluster: LocalCluster, partitions: int) -> None:
        self.cluster, self.partitions = cluster, partitions
        self.prefix = f"scale-{uuid.uuid4().hex[:6]}-"
        self.topics = [f"{self.prefix}{i:05d}" for i in range(partitions // PER_TOPIC)]
        self.admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        self.brokers = set(cluster.broker_ids)
        self.victim = cluster.broker_ids[-1]
        self.watcher = cluster.node(cluster.broker_ids[0]).bootstrap_servers
        step = max(1, partitions // SAMPLE)
        self.sample = [(self.topics[i // PER_TOPIC], i % PER_TOPIC)
                       for i in range(0, partitions, step)][:SAMPLE]
        self.acked: dict[tuple[str, int], dict[int, bytes]] = {p: {} for p in self.sample}
        self.rounds = 0

    def create(self, limit_s: float) -> None:
        """Every topic, TOPICS_PER_REQUEST per CreateTopics; a retriable error is retried
        (TOPIC_ALREADY_EXISTS then means the first try made it)."""
        deadline = time.monotonic() + limit_s
        for start in range(0, len(self.topics), TOPICS_PER_REQUEST):
            wanted = self.topics[start : start + TOPICS_PER_REQUEST]
            retry = False
            while wanted:
                assert time.monotonic() < deadline, f"creating topics: not within {limit_s} s"
                futures = self.admin.create_topics(
                    [NewTopic(name, num_partitions=PER_TOPIC, replication_factor=3)
                     for name in wanted], request_timeout=300, operation_timeout=300)
                failed = []
                for name, future in futures.items():
                    try:
                        future.result(300)
                    except KafkaException as error:
                        code = error.args[0].code()
                        if retry and code == KafkaError.TOPIC_ALREADY_EXISTS:
                            continue
                        assert code in (KafkaError.REQUEST_TIMED_OUT,
                                        KafkaError.NOT_CONTROLLER), f"{name}: {error}"
                        failed.append(name)
                wanted, retry = failed, True

    def whole(self, live: set[int], in_sync: set[int]) -> Callable[[], str | None]:
        """A check: as every live broker's Metadata shows it, the brokers `live` are listed
        (none other), every partition is led by one of them, and its ISR is `in_sync`
        (its replicas, less the stopped broker)."""
        def wrong_on(bootstrap: str) -> str | None:
            listed, partitions = view(bootstrap, self.prefix)
            if listed != live:
                return f"live brokers {sorted(listed)}, expected {sorted(live)}"
            if len(partitions) != self.partitions:
                return f"{len(partitions):,} partitions of {self.partitions:,} known"
            wrong = [(key, p) for key, p in partitions.items()
                     if p.leader not in live or set(p.isr) != in_sync & set(p.replicas)]
            return None if not wrong else f"{len(wrong):,} partitions not yet so: {wrong[:3]}"

        def check() -> str | None:
            for broker in sorted(live):
                wrong = wrong_on(self.cluster.node(broker).bootstrap_servers)
                if wrong is not None:
                    return f"broker {broker}: {wrong}"
            return None
        return check

    def served(self) -> str | None:
        """None once the leader of each sampled partition and of the last topic's answers
        ListOffsets for it: a broker makes the logs of new replicas in order, after their
        metadata, so a partition is led before it is served."""
        _, partitions = view(self.watcher, self.prefix)
        wanted = {*self.sample, *((self.topics[-1], i) for i in range(PER_TOPIC))}
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, index in wanted:
            leader = partitions[(topic, index)].leader
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(index)
        for leader, topics in sorted(by_leader.items()):
            request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=tuple(
                ListOffsetsTopic(name=TopicName(topic), partitions=tuple(
                    ListOffsetsPartition(partition_index=index, timestamp=-1)
                    for index in indexes)) for topic, indexes in topics.items()))
            with WireClient(self.cluster.node(leader).bootstrap_servers,
                            timeout_s=120) as client:
                answer = client.request(LIST_OFFSETS, 9, request)
            unserved = sum(1 for topic in answer.topics for partition in topic.partitions
                           if partition.error_code != 0)
            if unserved:
                return f"broker {leader} does not serve {unserved} of them yet"
        return None

    def led_by_victim(self) -> int:
        _, partitions = view(self.watcher, self.prefix)
        return sum(1 for p in partitions.values() if p.leader == self.victim)

    def lead_preferred(self, limit_s: float) -> None:
        """Preferred leader election until the victim leads its third of the partitions
        again (a restarted broker leads nothing until then)."""
        wanted = [ClientPartition(topic, index)
                  for topic in self.topics for index in range(PER_TOPIC)]
        deadline = time.monotonic() + limit_s
        while self.led_by_victim() * 4 < self.partitions:
            assert time.monotonic() < deadline, f"preferred leaders: not within {limit_s} s"
            for start in range(0, len(wanted), 5_000):
                future = self.admin.elect_leaders(ElectionType.PREFERRED,
                                                  wanted[start : start + 5_000])
                try:
                    future.result(300)
                except KafkaException as error:  # NOT_CONTROLLER during a failover
                    assert error.args[0].retriable() or \
                        error.args[0].code() == KafkaError.NOT_CONTROLLER, error
            time.sleep(1)

    def produce(self, timeout_s: float = 120) -> None:
        """PER_SAMPLE records to every sampled partition, acks=all; each must be
        acknowledged within `timeout_s`, and its offset is noted."""
        self.rounds += 1
        errors: list[str] = []

        def delivered(error: KafkaError | None, message: Any) -> None:
            if error is not None:
                errors.append(str(error))
            else:
                key = (str(message.topic()), int(message.partition()))
                self.acked[key][int(message.offset())] = bytes(message.value())

        producer = Producer({"bootstrap.servers": self.cluster.bootstrap_servers,
                             "acks": "all", "message.timeout.ms": int(timeout_s * 1000)})
        for topic, partition in self.sample:
            for n in range(PER_SAMPLE):
                producer.produce(topic, f"{self.rounds}-{partition}-{n}".encode(),
                                 partition=partition, on_delivery=delivered)
        assert producer.flush(timeout_s + 60) == 0, "records left unanswered"
        assert errors == [], errors[:5]

    def read_back(self) -> None:
        """Every acknowledged record, at the offset it was acknowledged at."""
        consumer = Consumer({"bootstrap.servers": self.cluster.bootstrap_servers,
                             "group.id": f"scale-check-{uuid.uuid4()}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.assign([ClientPartition(topic, index, 0) for topic, index in self.sample])
        expected = sum(len(records) for records in self.acked.values())
        read: dict[tuple[str, int], dict[int, bytes]] = {p: {} for p in self.sample}
        deadline = time.monotonic() + 120
        try:
            while sum(map(len, read.values())) < expected and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    key = (str(message.topic()), int(message.partition()))
                    read[key][int(message.offset())] = bytes(message.value() or b"")
        finally:
            consumer.close()
        lost = {key: {offset: value for offset, value in records.items()
                      if read[key].get(offset) != value}
                for key, records in self.acked.items()}
        lost = {key: records for key, records in lost.items() if records}
        assert not lost, f"acknowledged records not read back: {list(lost.items())[:5]}"


@pytest.mark.parametrize("partitions", [
    pytest.param(10_000, marks=pytest.mark.timeout(LIMITS[10_000]["test"])),
    pytest.param(100_000, marks=[pytest.mark.slow,
                                 pytest.mark.timeout(LIMITS[100_000]["test"])]),
    pytest.param(300_000, marks=[pytest.mark.slow,
                                 pytest.mark.timeout(LIMITS[300_000]["test"])]),
])
def test_partitions_through_creation_shutdown_kill_and_rejoin(partitions: int) -> None:
    limits = LIMITS[partitions]
    with LocalCluster(controllers=3, brokers=3, configs=CONFIGS, startup_timeout_s=120,
                      stop_timeout_s=300) as cluster:
        scale = Scale(cluster, partitions)
        everyone, victim = scale.brokers, scale.victim
        others = everyone - {victim}
        started = time.monotonic()

        def say(what: str) -> None:  # shown with -s, or in the failure's captured output
            print(f"[{time.monotonic() - started:7.1f} s] {what}", flush=True)

        scale.create(limits["create"])
        wait("every partition led and fully in sync", scale.whole(everyone, everyone),
             limits["create"])
        say(f"{partitions:,} partitions created, led and in sync")
        wait("the sampled partitions and the last topic served by their leaders",
             scale.served, limits["create"])
        say("the sampled partitions and the last topic served by their leaders")
        # acks=all: the followers must have made their logs too, which they do in order
        scale.produce(timeout_s=limits["create"])
        say("the sample produced")
        scale.lead_preferred(limits["rejoin"])
        say("preferred leaders elected")
        process = cluster.node(victim).process
        assert process is not None
        process.send_signal(signal.SIGTERM)
        took = wait("controlled shutdown: every partition led by another broker",
                    lambda: None if scale.led_by_victim() == 0 else "the broker still leads",
                    limits["stop"])
        assert process.wait(limits["stop"]) == 0, "the broker's exit after SIGTERM"
        cluster.node(victim).process = None
        say(f"controlled shutdown: {took:.1f} s until the broker led nothing")
        wait("the stopped broker fenced, out of every ISR", scale.whole(others, others),
             limits["stop"])
        say("fenced and out of every ISR")
        scale.produce()
        cluster.restart_node(victim, wait=False)
        took = wait("the restarted broker back in every ISR", scale.whole(everyone, everyone),
                    limits["rejoin"])
        say(f"restart: {took:.1f} s until back in every ISR")
        scale.produce()
        scale.lead_preferred(limits["rejoin"])
        say("preferred leaders elected")
        cluster.kill_node(victim)
        took = wait("after kill -9: every partition led by a live broker, the broker out of "
                    "every ISR", scale.whole(others, others), limits["stop"])
        say(f"kill -9: {took:.1f} s until every partition was led and the ISRs shrunk")
        scale.produce()
        cluster.restart_node(victim, wait=False)
        took = wait("the broker back in every ISR after kill -9",
                    scale.whole(everyone, everyone), limits["rejoin"])
        say(f"restart after kill -9: {took:.1f} s until back in every ISR")
        scale.read_back()
        say("every acknowledged record read back")
        logs = {node_id: cluster.node(node_id).log_path.read_text(errors="replace")
                for node_id in cluster.controller_ids}
        decisions = [line for text in logs.values() for line in text.splitlines()
                     if re.search(r"controller \d+: ", line)]  # what the controller decided
        fenced = {int(broker) for line in decisions
                  for broker in re.findall(r"broker (\d+) fenced", line)}
        assert fenced == {victim}, f"brokers fenced: {sorted(fenced)}; only {victim} stopped"
        elected = sum(text.count("-> Leader(") for text in logs.values())
        assert elected == 1, f"{elected} metadata quorum leaders elected; no controller stopped"
        for node_id in cluster.nodes:  # checked: no need to wait out 3 controlled shutdowns
            cluster.kill_node(node_id)
