"""KIP-392 fetch from follower, with real processes: one controller and three brokers in three
racks (`broker.rack`), `replica.selector.class` set to Kafka's RackAwareReplicaSelector.

- The leader answers a consumer's Fetch v11+ from another rack with `preferred_read_replica`
  (an in-sync follower of the client's rack) and no records; a client in the leader's rack,
  in no rack, or in a rack with no replica is served by the leader.
- A follower serves a consumer's Fetch v11+ up to the high watermark it knows; an offset past
  its log is OFFSET_OUT_OF_RANGE; a Fetch before v11 (no client rack) is refused with
  NOT_LEADER_OR_FOLLOWER, as only the leader serves those.
- confluent-kafka with `client.rack` reads every record, fetching from the follower of its rack.
- A follower out of the ISR (SIGSTOPped) is not preferred any more, and is again once back.
"""

from __future__ import annotations

import datetime
import logging
import re
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v10.request import FetchPartition as FetchPartitionV10
from kio.schema.fetch.v10.request import FetchRequest as FetchRequestV10
from kio.schema.fetch.v10.request import FetchTopic as FetchTopicV10
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from pykraft.records.record import iter_batch_records
from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient
from tests.integration import waits

SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
RACKS = {2: "rack-a", 3: "rack-b", 4: "rack-c"}  # broker id -> rack (node 1: the controller)
LEADER = 2
RECORDS = 20
FAST = {  # a stopped follower leaves the ISR within seconds
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "200",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "500",
}


def wait_for(predicate: Any, what: str, timeout_s: float = 30.0) -> Any:
    return waits.wait_for(predicate, what, timeout_s, retry_on=(OSError, KafkaException))


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    cluster = LocalCluster(controllers=1, brokers=3,
                           configs={"replica.selector.class": SELECTOR, **FAST})
    for broker_id, rack in RACKS.items():
        cluster.set_node_configs(broker_id, {"broker.rack": rack})
    with cluster as running:
        yield running


@pytest.fixture(scope="module")
def topic(cluster: LocalCluster) -> str:
    """One partition on brokers 2 (leader), 3, 4 holding RECORDS records, replicated."""
    name = f"ffr-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, num_partitions=1,
                                replica_assignment=[[2, 3, 4]])])[name].result(30)
    wait_for(lambda: _state(cluster, name) == (LEADER, (2, 3, 4)), "leader 2, ISR 2, 3, 4")
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(name, value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    for follower in (3, 4):  # each follower knows the high watermark that covers them all
        try:
            wait_for(lambda f=follower: _fetch(cluster, f, name, 0).high_watermark == RECORDS,
                     f"broker {follower} knows high watermark {RECORDS}")
        except AssertionError as error:  # say where replication stood
            raise AssertionError(
                f"{error}; leader and ISR {_state(cluster, name)}; broker {follower}'s log:\n"
                f"{cluster.nodes[follower].tail_log(30)}") from None
    return name


def _state(cluster: LocalCluster, topic: str) -> tuple[int, tuple[int, ...]] | None:
    with WireClient(cluster.nodes[LEADER].bootstrap_servers, timeout_s=5) as client:
        response = client.request(3, 12, MetadataRequest(
            topics=(MetadataRequestTopic(name=topic, topic_id=None),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    for partition in response.topics[0].partitions:
        return int(partition.leader_id), tuple(sorted(int(r) for r in partition.isr_nodes))
    return None


def _fetch(cluster: LocalCluster, broker: int, topic: str, offset: int,
           rack: str = "") -> Any:
    """A consumer's Fetch v12 of partition 0 sent to `broker`: the partition's answer."""
    with WireClient(cluster.nodes[broker].bootstrap_servers, timeout_s=10) as client:
        response = client.request(1, 12, FetchRequest(
            max_wait=datetime.timedelta(0), min_bytes=0, rack_id=rack,
            topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
                partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=()))
    assert response.error_code == ErrorCode.none
    return response.responses[0].partitions[0]


def _values(records: bytes | None) -> list[bytes]:
    return [record.value for _, batch in iter_batch_records(records or b"") for record in batch]


def test_brokers_register_their_racks(cluster: LocalCluster) -> None:
    with WireClient(cluster.nodes[LEADER].bootstrap_servers, timeout_s=5) as client:
        response = client.request(3, 12, MetadataRequest(
            topics=(), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
    assert {b.node_id: b.rack for b in response.brokers} == RACKS


def test_the_leader_points_a_consumer_to_the_follower_of_its_rack(
        cluster: LocalCluster, topic: str) -> None:
    for rack, follower in (("rack-b", 3), ("rack-c", 4)):
        answer = _fetch(cluster, LEADER, topic, 0, rack)
        assert answer.error_code == ErrorCode.none
        assert answer.preferred_read_replica == follower
        assert not answer.records  # the read is skipped: the client goes to the follower
        assert answer.high_watermark == RECORDS
    # the leader's own rack, no rack, a rack with no replica: the leader serves
    for rack in ("rack-a", "", "rack-z"):
        answer = _fetch(cluster, LEADER, topic, 0, rack)
        assert answer.error_code == ErrorCode.none
        assert answer.preferred_read_replica == -1
        assert _values(answer.records)[:1] == [b"v0"]


def test_a_follower_serves_consumers_up_to_its_high_watermark(
        cluster: LocalCluster, topic: str) -> None:
    answer = _fetch(cluster, 3, topic, 0, "rack-b")
    assert answer.error_code == ErrorCode.none
    assert answer.preferred_read_replica == -1
    assert answer.high_watermark == RECORDS
    assert _values(answer.records) == [b"v%d" % i for i in range(RECORDS)]
    beyond = _fetch(cluster, 3, topic, RECORDS + 1000, "rack-b")
    assert beyond.error_code == ErrorCode.offset_out_of_range
    # before Fetch v11 a consumer names no rack, and only the leader serves it
    with WireClient(cluster.nodes[3].bootstrap_servers, timeout_s=10) as client:
        old = client.request(1, 10, FetchRequestV10(
            max_wait=datetime.timedelta(0), min_bytes=0,
            topics=(FetchTopicV10(topic=topic, partitions=(FetchPartitionV10(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=()))
    assert old.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_consumer_with_client_rack_reads_everything_from_its_follower(
        cluster: LocalCluster, topic: str) -> None:
    lines = _Lines()
    logger = logging.getLogger(f"rdkafka-{topic}")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": f"g-{topic}", "client.rack": "rack-c",
                         "enable.auto.commit": False, "debug": "fetch", "logger": logger})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
        logger.removeHandler(lines)
    assert values == [b"v%d" % i for i in range(RECORDS)]
    # librdkafka names the broker each fetch went to: ".../<node id>: Fetch topic [0] ..."
    port = cluster.nodes[4].broker_port
    fetched_at = [line for line in lines.lines
                  if re.search(rf":{port}/4: Fetch.*{topic} \[0\]", line)]
    assert fetched_at, "no fetch went to broker 4:\n" + "\n".join(lines.lines[-40:])


def test_a_follower_out_of_the_isr_is_not_preferred(cluster: LocalCluster, topic: str) -> None:
    process = cluster.nodes[4].process
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: _state(cluster, topic) == (LEADER, (2, 3)), "broker 4 out of the ISR")
        answer = _fetch(cluster, LEADER, topic, 0, "rack-c")
        assert answer.preferred_read_replica == -1
        assert _values(answer.records)[:1] == [b"v0"]
    finally:
        process.send_signal(signal.SIGCONT)
    wait_for(lambda: _state(cluster, topic) == (LEADER, (2, 3, 4)), "broker 4 back in the ISR")
    assert _fetch(cluster, LEADER, topic, 0, "rack-c").preferred_read_replica == 4
