"""Idempotent producers against a real node: retried batches are not written twice (a proxy
drops Produce responses so real clients retry), sequence and epoch errors at the protocol
edge, and the producer state surviving clean and unclean restarts."""

from __future__ import annotations

import datetime
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from pykraft.records.record import build_batch
from pykraft.testing import LocalCluster
from pykraft.testing.proxy import FaultProxy
from pykraft.testing.wire import WireClient

PRODUCE = 0
PARTITIONS = 3


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions,
                                  replication_factor=1)])[name].result(timeout=30)


def read_all(bootstrap: str, topic: str, expected: int,
             partitions: int = PARTITIONS) -> dict[int, list[bytes]]:
    """Every value of every partition, in log order (stops at the end of all partitions
    once `expected` values are in, or after 60 s)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, index, 0) for index in range(partitions)])
    values: dict[int, list[bytes]] = {index: [] for index in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    if len(at_end) == partitions and \
                            sum(map(len, values.values())) >= expected:
                        break
                continue
            at_end.discard(message.partition())
            values[message.partition()].append(message.value())
    finally:
        consumer.close()
    return values


@pytest.fixture
def dropping() -> Iterator[tuple[LocalCluster, FaultProxy]]:
    """A node whose clients all go through a proxy that drops every fourth Produce
    response (closing that connection), 25 drops at most."""
    produce_responses = [0]

    def drop(api_key: int) -> bool:
        if api_key != PRODUCE:
            return False
        produce_responses[0] += 1
        return produce_responses[0] % 4 == 0 and proxy.dropped < 25

    proxy = FaultProxy(drop_response=drop)
    cluster = LocalCluster(configs={
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    proxy.target_port = cluster.broker_port
    try:
        with cluster:
            yield cluster, proxy
    finally:
        proxy.close()


def produce_through(proxy: FaultProxy, topic: str, count: int, **configs: Any) -> list[str]:
    """Send `count` records keyed by partition (value = sequence number); return the
    delivery errors."""
    errors: list[str] = []

    def delivered(error: Any, _: Any) -> None:
        if error is not None:
            errors.append(str(error))

    producer = Producer({"bootstrap.servers": f"127.0.0.1:{proxy.port}", "acks": "all",
                         "linger.ms": 2, "batch.num.messages": 200,
                         "socket.connection.setup.timeout.ms": 5000,
                         "reconnect.backoff.ms": 10, "retry.backoff.ms": 10, **configs})
    for index in range(count):
        producer.produce(topic, b"%d" % index, partition=index % PARTITIONS,
                         on_delivery=delivered)
        if index % 500 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return errors


def test_dropped_produce_responses_leave_no_duplicates(
        dropping: tuple[LocalCluster, FaultProxy]) -> None:
    """Done-when 2 of issue 8: an idempotent confluent-kafka producer whose Produce
    responses are lost retries them, and the log holds every record once, in order. The
    same faults with idempotence off write duplicates (the control: the faults are real)."""
    cluster, proxy = dropping
    topic, control = f"idem-{uuid.uuid4().hex[:8]}", f"plain-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap_servers, topic)
    create_topic(cluster.bootstrap_servers, control)
    count = 20_000
    assert produce_through(proxy, topic, count, **{"enable.idempotence": True}) == []
    idempotent_drops = proxy.dropped
    assert idempotent_drops >= 3, "the proxy dropped responses"
    values = read_all(cluster.bootstrap_servers, topic, count)
    for partition, got in values.items():
        assert got == [b"%d" % i for i in range(partition, count, PARTITIONS)], partition
    proxy.dropped = 0  # the control run gets its own drops
    produce_through(proxy, control, count, **{"enable.idempotence": False})
    assert proxy.dropped >= 3
    plain = read_all(cluster.bootstrap_servers, control, count)
    assert sum(map(len, plain.values())) > count, "without idempotence retries duplicate"


# -- the protocol edge ------------------------------------------------------------------

def raw_produce(client: WireClient, topic: str, *, producer_id: int, epoch: int,
                sequence: int, count: int = 2, partition: int = 0) -> tuple[ErrorCode, int]:
    """One idempotent batch (Produce v9, acks=all); (error code, base offset)."""
    now = int(time.time() * 1000)
    batch = build_batch([(None, b"v%d" % (sequence + i), (), now) for i in range(count)],
                        producer_id=producer_id, producer_epoch=epoch,
                        base_sequence=sequence)
    request = ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
        TopicProduceData(name=topic, partition_data=(
            PartitionProduceData(index=partition, records=batch),)),))
    answer = client.request(PRODUCE, 9, request).responses[0].partition_responses[0]
    return ErrorCode(answer.error_code), int(answer.base_offset)


def test_sequence_and_epoch_errors_write_nothing(pykraft_cluster: LocalCluster) -> None:
    """Gaps and replays outside the last five batches: OUT_OF_ORDER_SEQUENCE_NUMBER; an
    older epoch: INVALID_PRODUCER_EPOCH; a retried batch gets its first offset back. The
    log end moves only for the accepted batches."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = f"edge-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    pid = 7_000_001
    with WireClient(bootstrap) as client:
        assert raw_produce(client, topic, producer_id=pid, epoch=3, sequence=0) == \
            (ErrorCode.none, 0)
        assert raw_produce(client, topic, producer_id=pid, epoch=3, sequence=2) == \
            (ErrorCode.none, 2)
        assert raw_produce(client, topic, producer_id=pid, epoch=3, sequence=0) == \
            (ErrorCode.none, 0)  # a duplicate: the first copy's offset
        assert raw_produce(client, topic, producer_id=pid, epoch=3, sequence=9)[0] == \
            ErrorCode.out_of_order_sequence_number
        assert raw_produce(client, topic, producer_id=pid, epoch=2, sequence=4)[0] == \
            ErrorCode.invalid_producer_epoch
        assert raw_produce(client, topic, producer_id=pid, epoch=4, sequence=4)[0] == \
            ErrorCode.out_of_order_sequence_number  # a new epoch starts at 0
        assert raw_produce(client, topic, producer_id=pid, epoch=3, sequence=4) == \
            (ErrorCode.none, 4)
    values = read_all(bootstrap, topic, 6, partitions=1)[0]
    assert values == [b"v0", b"v1", b"v2", b"v3", b"v4", b"v5"]


@pytest.mark.parametrize("stop", ["clean", "kill -9"])
def test_producer_state_survives_a_restart(stop: str) -> None:
    """After a clean stop (snapshot at the log end) or kill -9 (rebuilt from the log), a
    retry of the producer's last batch is still recognised and its sequence continues."""
    with LocalCluster() as cluster:
        topic = f"restart-{uuid.uuid4().hex[:8]}"
        create_topic(cluster.bootstrap_servers, topic, partitions=1)
        pid = 7_000_002
        with WireClient(cluster.bootstrap_servers) as client:
            for sequence in range(0, 10, 2):
                assert raw_produce(client, topic, producer_id=pid, epoch=0,
                                   sequence=sequence)[0] == ErrorCode.none
        if stop == "clean":
            cluster.stop()
        else:
            cluster.kill(signal.SIGKILL)
        cluster.start()
        with WireClient(cluster.bootstrap_servers) as client:
            assert raw_produce(client, topic, producer_id=pid, epoch=0, sequence=8) == \
                (ErrorCode.none, 8)
            assert raw_produce(client, topic, producer_id=pid, epoch=0, sequence=12)[0] == \
                ErrorCode.out_of_order_sequence_number
            assert raw_produce(client, topic, producer_id=pid, epoch=0, sequence=10) == \
                (ErrorCode.none, 10)
        assert len(read_all(cluster.bootstrap_servers, topic, 12, partitions=1)[0]) == 12


def test_idle_producers_expire() -> None:
    """producer.id.expiration.ms: once a producer's state is gone, it may continue at any
    sequence (before, a gap is OUT_OF_ORDER_SEQUENCE_NUMBER)."""
    with LocalCluster(configs={"producer.id.expiration.ms": "1500",
                               "producer.id.expiration.check.interval.ms": "200"}) as cluster:
        topic = f"expire-{uuid.uuid4().hex[:8]}"
        create_topic(cluster.bootstrap_servers, topic, partitions=1)
        pid = 7_000_003
        with WireClient(cluster.bootstrap_servers) as client:
            assert raw_produce(client, topic, producer_id=pid, epoch=0, sequence=0)[0] == \
                ErrorCode.none
            assert raw_produce(client, topic, producer_id=pid, epoch=0, sequence=50)[0] == \
                ErrorCode.out_of_order_sequence_number
            time.sleep(3)
            assert raw_produce(client, topic, producer_id=pid, epoch=0, sequence=50) == \
                (ErrorCode.none, 2)
