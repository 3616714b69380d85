"""Transactions against a real node: confluent-kafka's transactional producer (init, begin,
produce, commit/abort), a read_committed consumer, zombie fencing, the coordinator aborting a
transaction left open past its timeout, and the documented errors at the wire."""

from __future__ import annotations

import datetime
import signal
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v2.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import BrokerId
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.static.primitive import i8, i16, i32, i64

from pykraft.records.record import build_batch
from pykraft.storage.txn_index import read_entries
from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient

LIST_OFFSETS, FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN = 2, 10, 22, 24, 26
WRITE_TXN_MARKERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 27, 65, 66


def create_topic(bootstrap: str, name: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions,
                                  replication_factor=1)])[name].result(timeout=30)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def transactional(bootstrap: str, txn_id: str, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **extra})


def consume_all(bootstrap: str, topic: str, partitions: int, isolation: str,
                expected: int, wait_s: float = 15.0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"),
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, index, 0) for index in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    if len(at_end) == partitions and len(values) >= expected:
                        break
                continue
            values.append(message.value())
    finally:
        consumer.close()
    return values


def wait_coordinator(client: WireClient, txn_id: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        found = client.request(FIND_COORDINATOR, 4, FindCoordinatorRequest(
            key_type=i16(1), coordinator_keys=(txn_id,)))
        if found.coordinators[0].error_code == ErrorCode.none:
            return
        assert time.monotonic() < deadline, found
        time.sleep(0.1)


def init_producer(client: WireClient, txn_id: str, timeout_ms: int = 60_000) -> Any:
    wait_coordinator(client, txn_id)
    deadline = time.monotonic() + 20
    while True:
        answer = client.request(INIT_PRODUCER_ID, 4, InitProducerIdRequest(
            transactional_id=txn_id,
            transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
            producer_id=i64(-1), producer_epoch=i16(-1)))
        if answer.error_code not in (ErrorCode.coordinator_load_in_progress,
                                     ErrorCode.concurrent_transactions):
            return answer
        assert time.monotonic() < deadline, answer
        time.sleep(0.1)


@dataclass(frozen=True)
class Described:
    error_code: ErrorCode
    transaction_state: str
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    topics: tuple[tuple[str, tuple[int, ...]], ...]


def describe(client: WireClient, txn_id: str) -> Described:
    """DescribeTransactions v0 for one id, read by hand: kio refuses the start time -1 that
    Kafka (and pykraft) answer for a transaction that has not started."""
    client.send(DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(
        transactional_ids=(txn_id,)))
    (size,) = struct.unpack(">i", client._read_exactly(4))
    data = client._read_exactly(size)
    position = 4  # correlation id

    def varint() -> int:
        nonlocal position
        value = shift = 0
        while True:
            byte = data[position]
            position += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    def fixed(layout: str) -> int:
        nonlocal position
        (value,) = struct.unpack_from(layout, data, position)
        position += struct.calcsize(layout)
        return int(value)

    def string() -> str:
        nonlocal position
        length = varint() - 1
        position += length
        return data[position - length:position].decode()

    varint()  # header tags
    fixed(">i")  # throttle
    assert varint() - 1 == 1
    error, answered = ErrorCode(fixed(">h")), string()
    assert answered == txn_id
    state, timeout, start = string(), fixed(">i"), fixed(">q")
    producer_id, epoch = fixed(">q"), fixed(">h")
    topics = []
    for _ in range(varint() - 1):
        name = string()
        topics.append((name, tuple(fixed(">i") for _ in range(varint() - 1))))
        varint()
    return Described(error, state, timeout, start, producer_id, epoch, tuple(topics))


@pytest.fixture
def wire(pykraft_cluster: LocalCluster) -> Iterator[WireClient]:
    with WireClient(pykraft_cluster.bootstrap_servers) as client:
        yield client


# -- confluent-kafka ----------------------------------------------------------------------


def test_committed_transaction_is_read_by_read_committed(pykraft_cluster: LocalCluster) -> None:
    bootstrap = pykraft_cluster.bootstrap_servers
    topic, txn_id = unique("txn-commit"), unique("tx")
    create_topic(bootstrap, topic)
    producer = transactional(bootstrap, txn_id)
    producer.init_transactions(30)
    for batch in range(3):
        producer.begin_transaction()
        for index in range(10):
            producer.produce(topic, f"{batch}-{index}".encode(), partition=index % 2)
        producer.commit_transaction(30)
    values = consume_all(bootstrap, topic, 2, "read_committed", 30)
    assert sorted(values) == sorted(f"{b}-{i}".encode() for b in range(3) for i in range(10))
    with WireClient(bootstrap) as client:
        deadline = time.monotonic() + 10
        while (state := describe(client, txn_id)).transaction_state == "PrepareCommit":
            assert time.monotonic() < deadline  # markers still being written
            time.sleep(0.05)
        assert state.error_code == ErrorCode.none
        assert state.transaction_state == "CompleteCommit" and state.topics == ()
        assert state.timeout_ms == 60_000 and state.start_ms > 0
        listed = client.request(LIST_TRANSACTIONS, 1, ListTransactionsRequest(
            state_filters=("CompleteCommit",), producer_id_filters=(), duration_filter=i64(-1)))
        assert txn_id in {each.transactional_id for each in listed.transaction_states}


def test_aborted_data_is_invisible_to_read_committed(pykraft_cluster: LocalCluster) -> None:
    bootstrap = pykraft_cluster.bootstrap_servers
    topic, txn_id = unique("txn-abort"), unique("tx")
    create_topic(bootstrap, topic)
    plain = Producer({"bootstrap.servers": bootstrap})
    producer = transactional(bootstrap, txn_id)
    producer.init_transactions(30)
    expected_committed = []
    for round_ in range(4):
        producer.begin_transaction()
        for index in range(6):
            producer.produce(topic, f"t{round_}-{index}".encode(), partition=index % 2)
        plain.produce(topic, f"plain{round_}".encode(), partition=round_ % 2)
        assert plain.flush(30) == 0
        expected_committed.append(f"plain{round_}".encode())
        if round_ % 2:
            assert producer.flush(30) == 0  # the aborted records reach the log first
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            expected_committed += [f"t{round_}-{i}".encode() for i in range(6)]
    committed = consume_all(bootstrap, topic, 2, "read_committed", len(expected_committed))
    assert sorted(committed) == sorted(expected_committed)
    everything = consume_all(bootstrap, topic, 2, "read_uncommitted", 28)
    assert len(everything) == 28  # aborted data stays in the log
    assert {f"t1-{i}".encode() for i in range(6)} <= set(everything)
    # each partition's segment indexes its two aborted transactions, as Kafka's `.txnindex`
    for index in (0, 1):
        path = pykraft_cluster.log_dir / f"{topic}-{index}" / "00000000000000000000.txnindex"
        entries = read_entries(path)
        assert [each.producer_id for each in entries] == [entries[0].producer_id] * 2


def latest_offset(client: WireClient, topic: str, isolation: int) -> int:
    answer = client.request(LIST_OFFSETS, 2, ListOffsetsRequest(
        replica_id=BrokerId(-1), isolation_level=i8(isolation), topics=(ListOffsetsTopic(
            name=topic, partitions=(ListOffsetsPartition(partition_index=i32(0),
                                                         timestamp=i64(-1)),)),)))
    partition = answer.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    return int(partition.offset)


def test_an_open_transaction_holds_read_committed_back(pykraft_cluster: LocalCluster) -> None:
    bootstrap = pykraft_cluster.bootstrap_servers
    topic, txn_id = unique("txn-open"), unique("tx")
    create_topic(bootstrap, topic, partitions=1)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"before", partition=0)
    assert plain.flush(30) == 0
    producer = transactional(bootstrap, txn_id)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"in-transaction", partition=0)
    assert producer.flush(30) == 0
    plain.produce(topic, b"after", partition=0)
    assert plain.flush(30) == 0
    with WireClient(bootstrap) as client:
        assert latest_offset(client, topic, 0) == 3  # the high watermark
        assert latest_offset(client, topic, 1) == 1  # the last stable offset
        assert consume_all(bootstrap, topic, 1, "read_committed", 1, wait_s=3) == [b"before"]
        producer.commit_transaction(30)
        # EndTxn is answered once PrepareCommit is written; the markers follow (as Kafka)
        deadline = time.monotonic() + 10
        while (stable := latest_offset(client, topic, 1)) != 4:  # past the COMMIT marker
            assert stable == 1 and time.monotonic() < deadline
            time.sleep(0.05)
    assert consume_all(bootstrap, topic, 1, "read_committed", 3) == [
        b"before", b"in-transaction", b"after"]


def test_consume_transform_produce_commits_offsets_with_the_output(
        pykraft_cluster: LocalCluster) -> None:
    bootstrap = pykraft_cluster.bootstrap_servers
    source, sink, group = unique("eos-in"), unique("eos-out"), unique("eos-group")
    create_topic(bootstrap, source, partitions=1)
    create_topic(bootstrap, sink, partitions=1)
    plain = Producer({"bootstrap.servers": bootstrap})
    for index in range(20):
        plain.produce(source, f"in-{index}".encode(), partition=0)
    assert plain.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(source, 0, 0)])
    producer = transactional(bootstrap, unique("eos-tx"))
    producer.init_transactions(30)

    def run_transaction(count: int, commit: bool) -> None:
        producer.begin_transaction()
        taken = 0
        deadline = time.monotonic() + 15
        while taken < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            producer.produce(sink, (message.value() or b"").upper(), partition=0)
            taken += 1
        assert taken == count
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(30)
        else:
            assert producer.flush(30) == 0
            producer.abort_transaction(30)

    def committed() -> int:
        checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "isolation.level": "read_committed"})
        try:
            (found,) = checker.committed([TopicPartition(source, 0)], timeout=10)
        finally:
            checker.close()
        return int(found.offset)

    run_transaction(12, commit=True)
    assert committed() == 12
    run_transaction(8, commit=False)
    assert committed() == 12  # the aborted transaction's offsets never apply
    consumer.close()
    output = consume_all(bootstrap, sink, 1, "read_committed", 12)
    assert output == [f"IN-{index}".encode() for index in range(12)]


def test_zombie_producer_is_fenced_by_a_new_instance(pykraft_cluster: LocalCluster) -> None:
    bootstrap = pykraft_cluster.bootstrap_servers
    topic, txn_id = unique("txn-zombie"), unique("tx")
    create_topic(bootstrap, topic)
    zombie = transactional(bootstrap, txn_id)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    assert zombie.flush(30) == 0
    successor = transactional(bootstrap, txn_id)
    successor.init_transactions(30)  # aborts the zombie's transaction under a new epoch
    with WireClient(bootstrap) as client:
        state = describe(client, txn_id)
    # the zombie's transaction was aborted under epoch 1, the successor holds epoch 2
    assert state.transaction_state == "Empty" and state.producer_epoch == 2
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    assert raised.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH)
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=1)
    successor.commit_transaction(30)
    assert b"successor" in consume_all(bootstrap, topic, 2, "read_committed", 1)


def test_open_transaction_past_its_timeout_is_aborted() -> None:
    configs = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}
    with LocalCluster(configs=configs) as cluster:
        bootstrap = cluster.bootstrap_servers
        topic, txn_id = unique("txn-timeout"), unique("tx")
        create_topic(bootstrap, topic)
        producer = transactional(bootstrap, txn_id, **{"transaction.timeout.ms": 1000})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"left open", partition=0)
        assert producer.flush(30) == 0
        with WireClient(bootstrap) as client:
            assert describe(client, txn_id).transaction_state == "Ongoing"
            deadline = time.monotonic() + 15
            while (state := describe(client, txn_id)).transaction_state != "CompleteAbort":
                assert time.monotonic() < deadline, state
                time.sleep(0.1)
        assert state.producer_epoch == 1  # bumped: the producer is fenced
        with pytest.raises(KafkaException):
            producer.commit_transaction(30)


# -- the wire -------------------------------------------------------------------------------


def test_end_txn_of_an_unknown_transactional_id(wire: WireClient) -> None:
    txn_id = unique("never-initialised")
    wait_coordinator(wire, txn_id)
    answer = wire.request(END_TXN, 3, EndTxnRequest(
        transactional_id=txn_id, producer_id=i64(4242), producer_epoch=i16(0), committed=True))
    assert answer.error_code == ErrorCode.invalid_producer_id_mapping
    assert describe(wire, txn_id).error_code == ErrorCode.transactional_id_not_found


def test_stale_epochs_are_fenced_per_version(wire: WireClient,
                                             pykraft_cluster: LocalCluster) -> None:
    topic, txn_id = unique("txn-wire"), unique("tx")
    create_topic(pykraft_cluster.bootstrap_servers, topic)
    first = init_producer(wire, txn_id)
    second = init_producer(wire, txn_id)
    assert first.error_code == second.error_code == ErrorCode.none
    assert (second.producer_id, second.producer_epoch) == (first.producer_id,
                                                           first.producer_epoch + 1)

    def add(version: int, epoch: int) -> ErrorCode:
        module = __import__(f"kio.schema.add_partitions_to_txn.v{version}.request",
                            fromlist=["_"])
        answer = wire.request(ADD_PARTITIONS, version, module.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=first.producer_id,
            v3_and_below_producer_epoch=i16(epoch), v3_and_below_topics=(
                module.AddPartitionsToTxnTopic(name=topic, partitions=(i32(0),)),)))
        (result,) = answer.results_by_topic_v3_and_below
        return ErrorCode(result.results_by_partition[0].partition_error_code)

    assert add(3, first.producer_epoch) == ErrorCode.producer_fenced
    assert add(1, first.producer_epoch) == ErrorCode.invalid_producer_epoch
    assert add(3, second.producer_epoch) == ErrorCode.none
    assert describe(wire, txn_id).transaction_state == "Ongoing"
    # a stale EndTxn changes nothing
    answer = wire.request(END_TXN, 3, EndTxnRequest(
        transactional_id=txn_id, producer_id=first.producer_id,
        producer_epoch=first.producer_epoch, committed=True))
    assert answer.error_code == ErrorCode.producer_fenced
    assert describe(wire, txn_id).transaction_state == "Ongoing"
    answer = wire.request(END_TXN, 3, EndTxnRequest(
        transactional_id=txn_id, producer_id=second.producer_id,
        producer_epoch=second.producer_epoch, committed=False))
    assert answer.error_code == ErrorCode.none


def test_add_partitions_of_an_unknown_topic_adds_nothing(wire: WireClient,
                                                         pykraft_cluster: LocalCluster) -> None:
    topic, txn_id = unique("txn-known"), unique("tx")
    create_topic(pykraft_cluster.bootstrap_servers, topic)
    producer = init_producer(wire, txn_id)
    answer = wire.request(ADD_PARTITIONS, 3, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=producer.producer_id,
        v3_and_below_producer_epoch=producer.producer_epoch, v3_and_below_topics=(
            AddPartitionsToTxnTopic(name=topic, partitions=(i32(0),)),
            AddPartitionsToTxnTopic(name=unique("missing"), partitions=(i32(0),)))))
    errors = {result.name: result.results_by_partition[0].partition_error_code
              for result in answer.results_by_topic_v3_and_below}
    assert errors[topic] == ErrorCode.operation_not_attempted
    assert ErrorCode.unknown_topic_or_partition in errors.values()
    assert describe(wire, txn_id).transaction_state == "Empty"


def test_write_txn_markers_appends_a_control_batch(wire: WireClient,
                                                   pykraft_cluster: LocalCluster) -> None:
    topic = unique("txn-markers")
    create_topic(pykraft_cluster.bootstrap_servers, topic, partitions=1)
    answer = wire.request(WRITE_TXN_MARKERS, 1, WriteTxnMarkersRequest(markers=(
        WritableTxnMarker(producer_id=i64(77), producer_epoch=i16(3), transaction_result=True,
                          coordinator_epoch=i32(0), topics=(
                              WritableTxnMarkerTopic(name=topic, partition_indexes=(i32(0),)),
                              WritableTxnMarkerTopic(name=unique("gone"),
                                                     partition_indexes=(i32(0),)))),)))
    (marker,) = answer.markers
    errors = {t.name: t.partitions[0].error_code for t in marker.topics}
    assert errors[topic] == ErrorCode.none
    assert sorted(errors.values()) == sorted([ErrorCode.none,
                                              ErrorCode.unknown_topic_or_partition])
    # the marker took an offset: the log end moved, and no data record is read
    consumer = Consumer({"bootstrap.servers": pykraft_cluster.bootstrap_servers,
                         "group.id": unique("g")})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    assert (low, high) == (0, 1)
    assert consume_all(pykraft_cluster.bootstrap_servers, topic, 1, "read_uncommitted", 0,
                       wait_s=3) == []


def test_a_marker_of_an_older_coordinator_is_fenced(wire: WireClient,
                                                   pykraft_cluster: LocalCluster) -> None:
    """A deposed transaction coordinator's marker that arrives after the new coordinator's
    (a network partition delayed it) is refused, TRANSACTION_COORDINATOR_FENCED, and takes
    no offset: it would otherwise end the producer's next transaction on the partition."""
    topic = unique("txn-fenced-marker")
    create_topic(pykraft_cluster.bootstrap_servers, topic, partitions=1)

    def marker(coordinator_epoch: int, commit: bool) -> ErrorCode:
        answer = wire.request(WRITE_TXN_MARKERS, 1, WriteTxnMarkersRequest(markers=(
            WritableTxnMarker(producer_id=i64(78), producer_epoch=i16(0),
                              transaction_result=commit,
                              coordinator_epoch=i32(coordinator_epoch), topics=(
                                  WritableTxnMarkerTopic(name=topic,
                                                         partition_indexes=(i32(0),)),)),)))
        return ErrorCode(answer.markers[0].topics[0].partitions[0].error_code)

    assert marker(5, commit=True) == ErrorCode.none
    assert marker(4, commit=False) == ErrorCode.transaction_coordinator_fenced
    assert marker(5, commit=False) == ErrorCode.none
    assert marker(6, commit=True) == ErrorCode.none
    consumer = Consumer({"bootstrap.servers": pykraft_cluster.bootstrap_servers,
                         "group.id": unique("g")})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 3)
    finally:
        consumer.close()


def test_transactional_produce_outside_the_transaction_is_refused(
        wire: WireClient, pykraft_cluster: LocalCluster) -> None:
    topic, txn_id = unique("txn-verify"), unique("tx")
    create_topic(pykraft_cluster.bootstrap_servers, topic)
    producer = init_producer(wire, txn_id)
    pid, epoch = producer.producer_id, producer.producer_epoch

    def produce(partition: int, producer_epoch: int, sequence: int) -> Any:
        batch = build_batch([(None, b"v", (), int(time.time() * 1000))], producer_id=pid,
                            producer_epoch=producer_epoch, base_sequence=sequence,
                            is_transactional=True)
        request = ProduceRequest(
            transactional_id=txn_id, acks=-1, timeout=datetime.timedelta(seconds=5),
            topic_data=(TopicProduceData(name=topic, partition_data=(
                PartitionProduceData(index=i32(partition), records=batch),)),))
        return wire.request(0, 9, request).responses[0].partition_responses[0]

    refused = produce(0, epoch, 0)  # no AddPartitionsToTxn yet: not in a transaction
    assert refused.error_code == ErrorCode.invalid_txn_state
    answer = wire.request(ADD_PARTITIONS, 3, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
            AddPartitionsToTxnTopic(name=topic, partitions=(i32(0),)),)))
    assert answer.results_by_topic_v3_and_below[0].results_by_partition[0] \
        .partition_error_code == ErrorCode.none
    assert produce(0, epoch, 0).error_code == ErrorCode.none
    assert produce(1, epoch, 0).error_code == ErrorCode.invalid_txn_state  # not added
    assert produce(0, epoch + 1, 1).error_code == ErrorCode.invalid_producer_epoch
    # only the accepted batch was written
    with WireClient(pykraft_cluster.bootstrap_servers) as client:
        assert latest_offset(client, topic, 0) == 1


# -- pykraft transactions -------------------------------------------------------------------


def test_transactions_tool_lists_describes_and_aborts(pykraft_cluster: LocalCluster,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from pykraft.cli.main import main

    bootstrap = pykraft_cluster.bootstrap_servers
    topic, txn_id, idle_id = unique("txn-tool"), unique("tool-tx"), unique("tool-idle")
    create_topic(bootstrap, topic, partitions=1)
    idle = transactional(bootstrap, idle_id)
    idle.init_transactions(30)
    producer = transactional(bootstrap, txn_id)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"hanging", partition=0)
    assert producer.flush(30) == 0
    capsys.readouterr()

    assert main(["transactions", "--bootstrap-server", bootstrap, "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["TransactionalId", "Coordinator", "ProducerId",
                                "TransactionState"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows[txn_id][0] == str(pykraft_cluster.node_id) and rows[txn_id][2] == "Ongoing"
    assert rows[idle_id][2] == "Empty"

    assert main(["transactions", "--bootstrap-server", bootstrap, "describe",
                 "--transactional-id", txn_id]) == 0
    header, row = capsys.readouterr().out.splitlines()
    described = dict(zip(header.split(), row.split(), strict=True))
    assert described["TransactionState"] == "Ongoing"
    assert described["TopicPartitions"] == f"{topic}-0"
    assert int(described["TransactionDurationMs"]) >= 0
    producer_id, epoch = described["ProducerId"], described["ProducerEpoch"]

    assert main(["transactions", "--bootstrap-server", bootstrap, "describe",
                 "--transactional-id", idle_id]) == 0
    header, row = capsys.readouterr().out.splitlines()
    described = dict(zip(header.split(), row.split(), strict=False))  # no TopicPartitions
    assert "TopicPartitions" not in described
    assert described["TransactionState"] == "Empty"
    assert described["CurrentTransactionStartTimeMs"] == "None"

    assert main(["transactions", "--bootstrap-server", bootstrap, "describe",
                 "--transactional-id", unique("unknown")]) == 1
    assert "The transactionalId could not be found." in capsys.readouterr().err

    with WireClient(bootstrap) as client:
        assert latest_offset(client, topic, 1) == 0  # held by the open transaction
        assert main(["transactions", "--bootstrap-server", bootstrap, "abort", "--topic",
                     topic, "--partition", "0", "--producer-id", producer_id,
                     "--producer-epoch", epoch, "--coordinator-epoch", "0"]) == 0
        assert latest_offset(client, topic, 1) == 2  # past the ABORT marker
    assert consume_all(bootstrap, topic, 1, "read_committed", 0, wait_s=3) == []
    assert main(["transactions", "--bootstrap-server", bootstrap, "abort",
                 "--topic", topic]) == 1
    assert "producer-id" in capsys.readouterr().err


# -- restarts ---------------------------------------------------------------------------------


def test_kill_9_keeps_committed_transactions_and_fences_the_open_one() -> None:
    """The coordinator replays __transaction_state and each log rebuilds its transactions:
    committed data stays visible, aborted data stays hidden, a transaction open at the
    crash holds the last stable offset until a new instance of its producer fences it."""
    with LocalCluster() as cluster:
        bootstrap = cluster.bootstrap_servers
        topic, txn_id = unique("txn-restart"), unique("tx")
        create_topic(bootstrap, topic, partitions=1)
        producer = transactional(bootstrap, txn_id)
        producer.init_transactions(30)
        for value, commit in ((b"committed", True), (b"aborted", False)):
            producer.begin_transaction()
            producer.produce(topic, value, partition=0)
            assert producer.flush(30) == 0
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
        producer.begin_transaction()
        producer.produce(topic, b"open at the crash", partition=0)
        assert producer.flush(30) == 0
        with WireClient(bootstrap) as client:
            deadline = time.monotonic() + 10
            while latest_offset(client, topic, 1) != 4:  # the ABORT marker is written
                assert time.monotonic() < deadline
                time.sleep(0.05)
        cluster.kill(signal.SIGKILL)
        cluster.start()
        with WireClient(bootstrap) as client:
            deadline = time.monotonic() + 20
            while True:  # the partition loads, then the coordinator
                try:
                    if latest_offset(client, topic, 1) == 4:
                        break
                except AssertionError:
                    pass
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert latest_offset(client, topic, 0) == 5
            wait_coordinator(client, txn_id)
            while describe(client, txn_id).error_code != ErrorCode.none:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            state = describe(client, txn_id)
            assert state.transaction_state == "Ongoing" and state.producer_epoch == 0
        assert consume_all(bootstrap, topic, 1, "read_committed", 1, wait_s=3) == [
            b"committed"]
        successor = transactional(bootstrap, txn_id)
        successor.init_transactions(30)  # aborts the open transaction under epoch 1
        assert consume_all(bootstrap, topic, 1, "read_committed", 1) == [b"committed"]
        assert sorted(consume_all(bootstrap, topic, 1, "read_uncommitted", 3)) == [
            b"aborted", b"committed", b"open at the crash"]
        with WireClient(bootstrap) as client:
            assert latest_offset(client, topic, 1) == 6  # past the second ABORT marker


# -- exactly once under kill -9 ---------------------------------------------------------------

_WORKER = """
import sys
import time
from confluent_kafka import Consumer, Producer, TopicPartition
bootstrap, source, sink, group, txn_id = sys.argv[1:6]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "isolation.level": "read_committed", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest"})
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                     "linger.ms": 5})
producer.init_transactions(60)  # first: it aborts what a killed instance left open
committed = consumer.committed([TopicPartition(source, 0)], timeout=30)[0].offset
consumer.assign([TopicPartition(source, 0, max(committed, 0))])
while True:
    messages = [m for m in consumer.consume(500, 0.5) if m.error() is None]
    if not messages:
        continue
    producer.begin_transaction()
    for message in messages:
        producer.produce(sink, message.value().upper(), partition=0)
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                         consumer.consumer_group_metadata(), 60)
    producer.commit_transaction(60)
    time.sleep(0.2)  # slow enough for the kills to land mid-way
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_consume_transform_produce_is_exactly_once_under_kill_9(
        pykraft_cluster: LocalCluster, tmp_path: Path) -> None:
    """Issue 8 done-when 1: a transactional copy loop (read_committed input, offsets sent to
    the transaction) over 100,000 records is killed -9 at random points 10 times and
    restarted: the output holds each input record once."""
    import random
    import subprocess
    import sys

    bootstrap = pykraft_cluster.bootstrap_servers
    source, sink = unique("eos-kill-in"), unique("eos-kill-out")
    group, txn_id = unique("eos-kill-group"), unique("eos-kill-tx")
    create_topic(bootstrap, source, partitions=1)
    create_topic(bootstrap, sink, partitions=1)
    total = 100_000
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for index in range(total):
        while True:
            try:
                plain.produce(source, f"record-{index}".encode(), partition=0)
                break
            except BufferError:
                plain.poll(0.05)
    assert plain.flush(60) == 0
    rng = random.Random(8)

    def committed() -> int:
        checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "isolation.level": "read_committed"})
        try:
            (found,) = checker.committed([TopicPartition(source, 0)], timeout=30)
        finally:
            checker.close()
        return int(found.offset)

    progress = []
    errors = tmp_path / "workers.err"

    def start_worker() -> subprocess.Popen[bytes]:
        with open(errors, "ab") as stderr:
            return subprocess.Popen([sys.executable, "-c", _WORKER, bootstrap, source, sink,
                                     group, txn_id], stdout=subprocess.DEVNULL, stderr=stderr)

    for _ in range(10):  # killed at random points, mid-transaction or between
        worker = start_worker()
        time.sleep(rng.uniform(1.5, 3.0))
        worker.kill()
        worker.wait()
    before = committed()
    assert 0 < before < total  # the kills landed while there was work left
    worker = start_worker()
    try:
        deadline = time.monotonic() + 300
        while (offset := committed()) < total:
            progress.append(offset)
            assert time.monotonic() < deadline, (progress[-10:],
                                                 errors.read_text()[-3000:])
            time.sleep(0.5)
    finally:
        worker.kill()
        worker.wait()
    output = consume_all(bootstrap, sink, 1, "read_committed", total, wait_s=60)
    assert len(output) == total
    assert sorted(output) == sorted(f"RECORD-{index}".encode() for index in range(total))
    raw = consume_all(bootstrap, sink, 1, "read_uncommitted", total, wait_s=10)
    assert len(raw) >= total  # aborted copies may be there, never visible to read_committed

def test_transactions_tool_describes_producers_and_aborts_at_a_start_offset(
        pykraft_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """describe-producers (DescribeProducers) shows an idempotent producer's last sequence
    and a transactional one's open transaction; abort --start-offset finds and aborts it."""
    from pykraft.cli.main import main

    bootstrap = pykraft_cluster.bootstrap_servers
    topic = unique("txn-producers")
    create_topic(bootstrap, topic, partitions=1)
    idempotent = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for index in range(3):
        idempotent.produce(topic, b"i%d" % index, partition=0)
        assert idempotent.flush(30) == 0
    producer = transactional(bootstrap, unique("producers-tx"))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"hanging", partition=0)
    assert producer.flush(30) == 0
    capsys.readouterr()

    assert main(["transactions", "--bootstrap-server", bootstrap, "describe-producers",
                 "--topic", topic, "--partition", "0"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch",
                              "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset"]
    table = sorted(dict(zip(header.split(), row.split(), strict=True)).items()
                   for row in rows)
    by_start = {dict(row)["CurrentTransactionStartOffset"]: dict(row) for row in table}
    assert set(by_start) == {"None", "3"}
    assert by_start["None"]["LastSequence"] == "2"  # three batches of one record
    assert by_start["3"]["LastSequence"] == "0"

    assert main(["transactions", "--bootstrap-server", bootstrap, "abort", "--topic", topic,
                 "--partition", "0", "--start-offset", "7"]) == 1
    assert "Could not find any open transactions starting at offset 7" in capsys.readouterr().err
    with WireClient(bootstrap) as client:
        assert latest_offset(client, topic, 1) == 3  # held by the open transaction
        assert main(["transactions", "--bootstrap-server", bootstrap, "abort", "--topic",
                     topic, "--partition", "0", "--start-offset", "3"]) == 0
        assert latest_offset(client, topic, 1) == 5  # past the ABORT marker
    assert main(["transactions", "--bootstrap-server", bootstrap, "describe-producers",
                 "--topic", unique("missing"), "--partition", "0"]) == 1
