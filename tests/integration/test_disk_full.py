"""A node whose log dir fills up: produce gets KAFKA_STORAGE_ERROR, the process lives and
serves reads, offset commits fail with a retriable error; once space returns produce,
commits and rebalances work again without a restart; and after a restart every
acknowledged record is there exactly once, in order.

The log dir is a 16 MiB tmpfs mounted for the test (this needs root: the test fails, it
does not skip, where mounting is not permitted); the metadata log lives off it
(`metadata.log.dir`), as an operator would keep it on its own disk.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from pykraft.testing import LocalCluster
from tests.integration.group_helpers import poll_until
from tests.integration.waits import wait_for

TOPIC = "full"
SPARSE = "sparse"  # an index entry needs a page of its own while the data still fits
LATE = "late"  # created while the disk is full: its log cannot be made until space returns
MANY = "many"  # its offsets make a commit larger than a page: it needs new space
MANY_PARTITIONS = 128
VALUE_BYTES = 8 * 1024
TMPFS_BYTES = 16 * 1024 * 1024
# Kafka's retriable answers to an offset commit whose write failed (its storage errors map
# to NOT_COORDINATOR: GroupMetadataManager), or while the coordinator reloads its partition
COORDINATOR_RETRIABLE = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                         KafkaError.COORDINATOR_LOAD_IN_PROGRESS}
CONFIGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "log.segment.bytes": str(1024 * 1024),  # rolls happen while the disk fills
    "replica.lag.time.max.ms": "4000",  # the replica manager's checks (and retries) every 2 s
}


def _mount_tmpfs(where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs",
                             str(where)], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:  # not skipped: a skip would hide every regression here
        raise RuntimeError(f"this test needs a tmpfs mount (root): {result.stderr.strip()}")


def _unmount(where: Path) -> None:
    for _ in range(50):
        if subprocess.run(["umount", str(where)], capture_output=True).returncode == 0:
            return
        time.sleep(0.1)  # a process still closing files there
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(data_dir=tmp_path, configs={
        **CONFIGS, "metadata.log.dir": str(tmp_path / "metadata")})
    _mount_tmpfs(cluster.log_dir)
    try:
        cluster.start()
        yield cluster
    finally:
        try:
            cluster.stop()
        finally:
            _unmount(cluster.log_dir)


def _fill(path: Path, leave_bytes: int) -> None:
    """Write a file at `path` until the filesystem has about `leave_bytes` free (0: none)."""
    chunk = b"\xff" * (64 * 1024)
    with open(path, "ab") as stream:
        while True:
            stats = os.statvfs(path)
            free = stats.f_bavail * stats.f_frsize
            if free <= leave_bytes:
                return
            try:
                stream.write(chunk[: max(4096, min(len(chunk), free - leave_bytes))])
                stream.flush()
            except OSError as error:
                assert error.errno == errno.ENOSPC
                return


def _produce_until_storage_error(bootstrap: str, acked: list[bytes]) -> KafkaError:
    """Produce (acks=all, no retries) one record at a time until one fails; the values the
    broker acknowledged are added to `acked`, in order. Return the failure."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0,
                         "linger.ms": 0, "message.timeout.ms": 10_000})
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: Any) -> None:
        if error is None:
            acked.append(message.value())
        else:
            failures.append(error)

    for sequence in range(TMPFS_BYTES // VALUE_BYTES * 2):
        value = b"%08d" % sequence + b"." * (VALUE_BYTES - 8)
        producer.produce(TOPIC, value=value, partition=0, on_delivery=delivered)
        producer.flush(15)
        if failures:
            return failures[0]
    raise AssertionError(f"{len(acked)} records of {VALUE_BYTES} bytes fit a full disk")


def _read_all(bootstrap: str, topic: str = TOPIC) -> list[bytes]:
    """Every record of the topic, from the start, by a consumer outside any group."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        # up to the end by position, not by count: a transaction marker takes an offset
        while consumer.position([TopicPartition(topic, 0)])[0].offset < end:
            assert time.monotonic() < deadline, f"read {len(values)} records of {topic}"
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
        return values
    finally:
        consumer.close()


def _member(bootstrap: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 200})
    consumer.subscribe([TOPIC])
    return consumer


def _commit_many(consumer: Consumer, offset: int) -> None:
    consumer.commit(offsets=[TopicPartition(MANY, p, offset) for p in range(MANY_PARTITIONS)],
                    asynchronous=False)


def test_a_full_log_dir_fails_writes_keeps_serving_and_recovers_when_space_returns(
    node: LocalCluster,
) -> None:
    bootstrap = node.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1), NewTopic(SPARSE, 1, 1),
                                       NewTopic(MANY, MANY_PARTITIONS, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0})

    # -- an index entry on a full disk: it used to be a store into a sparse mapped page,
    # which the kernel answers with SIGBUS (the node died without a word in its log) ------
    sparse = [b"s" * VALUE_BYTES]  # the segment's first batch: no index entry
    producer.produce(SPARSE, value=sparse[0], partition=0)
    assert producer.flush(15) == 0
    _fill(node.log_dir / "filler-0", leave_bytes=0)
    outcome: list[KafkaError | None] = []
    producer.produce(SPARSE, value=b"small", partition=0,  # fits the data file's last page
                     on_delivery=lambda error, _: outcome.append(error))
    producer.flush(15)
    assert node.process is not None and node.process.poll() is None, node.tail_log()
    assert outcome and outcome[0] is not None, "a write on a full disk was acknowledged"
    assert outcome[0].code() == KafkaError.KAFKA_STORAGE_ERROR, outcome
    (node.log_dir / "filler-0").unlink()
    member = _member(bootstrap)
    poll_until([member], lambda: bool(member.assignment()))
    _commit_many(member, 1)  # the group's partition exists and is loaded before the fill
    # a committer outside any generation (assign, not subscribe): its answer while the disk
    # is full can only come from the failed write, not from a session that ran out
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": "committer",
                          "enable.auto.commit": False})
    _commit_many(committer, 1)
    first = Producer({"bootstrap.servers": bootstrap, "transactional.id": "before"})
    first.init_transactions(30)  # the transaction state partition exists before the fill

    # -- the disk fills ------------------------------------------------------------------
    _fill(node.log_dir / "filler-1", leave_bytes=2 * 1024 * 1024)
    acked: list[bytes] = []
    failure = _produce_until_storage_error(bootstrap, acked)
    assert failure.code() == KafkaError.KAFKA_STORAGE_ERROR, failure
    assert len(acked) > 10
    _fill(node.log_dir / "filler-2", leave_bytes=0)  # not a page left for a small write
    assert node.process is not None and node.process.poll() is None, node.tail_log()

    # reads go on: metadata, and every acknowledged record, once, in order
    assert TOPIC in admin.list_topics(timeout=10).topics
    assert _read_all(bootstrap) == acked
    with pytest.raises(KafkaException) as refused:
        _commit_many(committer, 2)
    assert refused.value.args[0].code() in COORDINATOR_RETRIABLE, refused.value
    # an id longer than a page: its state record cannot fit what is left of a written page
    admin.create_topics([NewTopic(LATE, 1, 1)])[LATE].result(30)  # metadata is elsewhere
    late = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 2000})
    late_outcome: list[KafkaError | None] = []
    late.produce(LATE, value=b"early", on_delivery=lambda error, _: late_outcome.append(error))
    late.flush(10)
    assert late_outcome and late_outcome[0] is not None, "a write on a full disk was acknowledged"
    transactional = Producer({"bootstrap.servers": bootstrap,
                              "transactional.id": "during-" + "x" * 5000})
    with pytest.raises(KafkaException):  # its state cannot be written: retried, then timed out
        transactional.init_transactions(3)
    assert node.process.poll() is None, node.tail_log()
    reported = node.log_path.read_text(errors="replace").count("storage error in log dir")
    assert 1 <= reported <= 5, "storage errors are logged once per interval, not per failure"

    # -- space returns: writes, commits and a rebalance work without a restart ----------
    (node.log_dir / "filler-1").unlink()
    (node.log_dir / "filler-2").unlink()
    after = [b"after-%d" % i for i in range(20)]
    for value in after:
        producer.produce(TOPIC, value=value, partition=0)
    producer.produce(SPARSE, value=b"small", partition=0)
    assert producer.flush(30) == 0
    acked.extend(after)
    sparse.append(b"small")

    late = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    late.produce(LATE, value=b"late", partition=0)  # its log is made by a retry, no restart
    assert late.flush(30) == 0

    transactional.init_transactions(30)  # the same producer, once space is back
    transactional.begin_transaction()
    transactional.produce(TOPIC, value=b"in-a-transaction", partition=0)
    transactional.commit_transaction(30)
    acked.append(b"in-a-transaction")

    wait_for(lambda: _commit_or_none(committer, 3), "an offset commit after space returned",
             timeout_s=20)
    committed = committer.committed([TopicPartition(MANY, 7)], timeout=10)
    assert committed[0].offset == 3
    committer.close()
    second = _member(bootstrap)  # a rebalance: both members' join and sync are written

    def rebalanced() -> bool:
        group = admin.describe_consumer_groups(["g"])["g"].result(10)
        return (group.state.name == "STABLE" and len(group.members) == 2
                and bool(member.assignment() or second.assignment()))

    poll_until([member, second], rebalanced)
    owner = member if member.assignment() else second
    owner.commit(offsets=[TopicPartition(TOPIC, 0, len(acked))], asynchronous=False)
    second.close()
    member.close()

    # -- a restart finds every acknowledged record exactly once, in order ----------------
    node.stop()
    node.start()
    assert _read_all(bootstrap) == acked
    assert _read_all(bootstrap, SPARSE) == sparse
    assert _read_all(bootstrap, LATE) == [b"late"]
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": "g"})
    try:
        assert check.committed([TopicPartition(TOPIC, 0)], timeout=10)[0].offset == len(acked)
    finally:
        check.close()


def _commit_or_none(consumer: Consumer, offset: int) -> bool:
    consumer.poll(0.05)
    try:
        _commit_many(consumer, offset)
    except KafkaException as error:
        if error.args[0].code() not in COORDINATOR_RETRIABLE:
            raise
        return False
    return True
