"""The exactly-once sink (option exactlyOnce=true): the replay check alone, the task-side
transactional writer against a real node (replays skipped, zombies fenced, failures
aborted), real Spark local[2] queries whose last micro-batch is replayed from the checkpoint,
and a Spark task retried after failing mid-transaction."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pykraft.spark.options import InvalidOptionError, parse_write_options
from pykraft.spark.transactional import (
    ADMINS,
    NO_BATCH,
    TaskIdentity,
    batch_is_written,
    current_task,
    kafka_cause,
    last_written_batch,
    recorded_batch,
    sink_ids,
    write_transaction,
)
from pykraft.testing import LocalCluster
from tests.spark.helpers import create_topic, produce, stream

TopicName = Callable[[str], str]
BASE = {"kafka.bootstrap.servers": "h:1"}


@pytest.fixture(autouse=True)
def drop_admin_clients() -> Any:
    """Admin clients kept by the writer in this process must not outlive the test's node."""
    yield
    ADMINS.clear()


# -- the replay check, pure --------------------------------------------------------------


def test_a_batch_is_recorded_as_offset_batch_plus_one() -> None:
    """Committed offset B + 1 records batch B; none or only invalid offsets record none."""
    assert last_written_batch([]) == NO_BATCH
    assert last_written_batch([-1, 0]) == NO_BATCH
    assert last_written_batch([1]) == 0
    assert last_written_batch([4, 7, -1]) == 6  # markers on two topics: the highest counts


def test_a_replay_of_the_recorded_batch_or_an_earlier_one_is_written() -> None:
    """Only batches after the recorded one are written; the recorded one and earlier ones
    (a zombie task of an old batch) are skipped."""
    assert not batch_is_written(NO_BATCH, 0)
    assert batch_is_written(0, 0)
    assert not batch_is_written(0, 1)
    assert batch_is_written(5, 3)


def test_the_kafka_error_behind_a_system_error_is_found() -> None:
    """confluent-kafka reports a fatal error pending during a delivery callback as a
    SystemError whose context is the KafkaException: the task fails with the latter."""
    fenced = KafkaException(KafkaError(KafkaError._FENCED))
    try:
        try:
            raise fenced
        except KafkaException:
            raise SystemError("callback returned a result with an exception set") from None
    except SystemError as failure:
        wrapped = failure
    assert wrapped.__cause__ is None and kafka_cause(wrapped) is fenced
    assert kafka_cause(SystemError("no cause")) is None


def test_ids_are_per_query_and_spark_partition() -> None:
    ids = sink_ids("pykraft-sink", "0f9c-q", 3)
    assert ids.transactional_id == ids.group_id == "pykraft-sink-0f9c-q-3"
    assert sink_ids("pykraft-sink", "0f9c-q", 4) != ids
    assert sink_ids("etl", "0f9c-q", 3).transactional_id == "etl-0f9c-q-3"


def test_the_task_identity_comes_only_from_a_micro_batch_task() -> None:
    """Outside a Spark task (here: the test process) there is no query or batch id."""
    with pytest.raises(RuntimeError, match="only inside Spark tasks"):
        current_task()


def test_write_options() -> None:
    """exactlyOnce and transactionalIdPrefix parse case-insensitively; a user
    transactional.id, a batch write with exactlyOnce and idempotence off are refused."""
    options = parse_write_options({**BASE, "ExactlyOnce": "TRUE",
                                   "transactionalIdPrefix": "etl"})
    assert options.exactly_once and options.transactional_id_prefix == "etl"
    assert not parse_write_options(BASE).exactly_once
    for bad, message in [
        ({"kafka.transactional.id": "x"}, "derives one transactional.id per task"),
        ({"exactlyOnce": "yes"}, "'exactlyOnce' must be true or false"),
        ({"transactionalIdPrefix": "etl"}, "only used with option 'exactlyOnce'"),
        ({"exactlyOnce": "true", "transactionalIdPrefix": " "}, "must not be empty"),
        ({"exactlyOnce": "true", "kafka.enable.idempotence": "false"}, "idempotent"),
        ({"exactlyOnce": "true", "kafka.acks": "1"}, "'kafka.acks' must be 'all'"),
    ]:
        with pytest.raises(InvalidOptionError, match=message):
            parse_write_options({**BASE, **bad})
    with pytest.raises(InvalidOptionError, match="for streaming writes"):
        parse_write_options({**BASE, "exactlyOnce": "true"}, streaming=False)


@dataclass
class _Offset:
    """What the admin client answers per partition: an offset or an error."""
    offset: int
    error: KafkaError | None = None


class _Listed:
    def __init__(self, partitions: list[_Offset]) -> None:
        self.topic_partitions = partitions


class _Future:
    def __init__(self, value: _Listed) -> None:
        self.value = value

    def result(self) -> _Listed:
        return self.value


class _Admin:
    """Answers OffsetFetch with the given partitions, one answer per call."""

    def __init__(self, answers: list[list[_Offset]]) -> None:
        self.answers = answers
        self.calls = 0

    def list_consumer_group_offsets(self, request: list[Any], **kwargs: Any) -> dict[str, Any]:
        assert kwargs["require_stable"] is True
        self.calls += 1
        return {request[0].group_id: _Future(_Listed(self.answers.pop(0)))}


def _unstable() -> _Offset:
    return _Offset(-1, KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT))


def test_recorded_batch_waits_out_a_commit_in_flight() -> None:
    """An offset of a transaction still completing is unstable: the check asks again rather
    than reading it as absent, and gives up with the error after its timeout."""
    admin = _Admin([[_unstable()], [_unstable()], [_Offset(8)]])
    naps: list[float] = []
    assert recorded_batch(admin, "g", 10, sleep=naps.append) == 7
    assert admin.calls == 3 and len(naps) == 2
    now = [0.0]
    stuck = _Admin([[_unstable()]] * 3)

    def nap(seconds: float) -> None:
        now[0] += 6

    with pytest.raises(KafkaException):
        recorded_batch(stuck, "g", 10, sleep=nap, clock=lambda: now[0])


# -- the task-side writer against a real node (no Spark) ---------------------------------


def _rows(values: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"key": values, "value": values})


def read_values(bootstrap: str, topic: str, partitions: int, *,
                committed: bool = True, timeout_s: float = 30) -> list[bytes]:
    """Every value of the topic as a read_committed (or read_uncommitted) consumer sees it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-test-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed" if committed
                         else "read_uncommitted"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        todo, values = set(range(partitions)), list[bytes]()
        deadline = time.monotonic() + timeout_s
        while todo and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.5):
                error = message.error()
                if error is None:
                    values.append(message.value() or b"")
                elif error.code() == KafkaError._PARTITION_EOF:
                    todo.discard(message.partition())
                else:
                    raise AssertionError(str(error))
        assert not todo, f"partitions {todo} not read to their end"
        return values
    finally:
        consumer.close()


def test_a_replayed_task_writes_nothing_and_the_next_batch_is_written(
        pykraft_cluster: LocalCluster, topic_name: TopicName) -> None:
    """Batch 0 of partition 2 written, then run again (a replay after a restart): skipped;
    batch 1 written; a zombie of batch 0 arriving after batch 1 is skipped too."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("eos-task")
    create_topic(bootstrap, topic, partitions=2)
    params = {"bootstrap.servers": bootstrap}

    def task(batch_id: int, values: list[bytes]) -> tuple[int, bool]:
        result = write_transaction(params, topic, iter([_rows(values)]),
                                   TaskIdentity("query-a", batch_id, 2))
        return result.count, result.skipped

    assert task(0, [b"a", b"b"]) == (2, False)
    assert task(0, [b"a", b"b"]) == (0, True)
    assert task(1, [b"c"]) == (1, False)
    assert task(0, [b"a", b"b"]) == (0, True)
    ids = sink_ids("pykraft-sink", "query-a", 2)
    assert recorded_batch(ADMINS.get(params), ids.group_id, 10) == 1
    assert sorted(read_values(bootstrap, topic, 2)) == [b"a", b"b", b"c"]
    # another query (another checkpoint) with the same partition id records its own batches
    assert write_transaction(params, topic, iter([_rows([b"d"])]),
                             TaskIdentity("query-b", 0, 2)).count == 1


def test_empty_partitions_open_no_transaction(
        pykraft_cluster: LocalCluster, topic_name: TopicName) -> None:
    """A task with no rows (only empty Arrow batches) writes and records nothing."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("eos-empty")
    create_topic(bootstrap, topic, partitions=1)
    params = {"bootstrap.servers": bootstrap}
    result = write_transaction(params, topic, iter([_rows([]), _rows([])]),
                               TaskIdentity("query-e", 0, 0))
    assert (result.count, result.skipped) == (0, False)
    assert recorded_batch(ADMINS.get(params), sink_ids("pykraft-sink", "query-e", 0).group_id,
                          10) == NO_BATCH


def test_a_zombie_task_is_fenced_and_its_rows_never_become_visible(
        pykraft_cluster: LocalCluster, topic_name: TopicName) -> None:
    """An older attempt of the task (same transactional.id) with its transaction open is
    fenced by the new attempt's InitProducerId: its rows are aborted, its commit fails, and
    the new attempt's rows alone are read_committed."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("eos-zombie")
    create_topic(bootstrap, topic, partitions=1)
    params = {"bootstrap.servers": bootstrap}
    ids = sink_ids("pykraft-sink", "query-z", 0)
    zombie = Producer({**params, "transactional.id": ids.transactional_id})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for i in range(100):
        zombie.produce(topic, b"zombie-%d" % i)
    assert zombie.flush(30) == 0
    result = write_transaction(params, topic, iter([_rows([b"new-1", b"new-2"])]),
                               TaskIdentity("query-z", 0, 0, attempt=1))
    assert (result.count, result.skipped) == (2, False)
    with pytest.raises(KafkaException) as failure:
        zombie.commit_transaction(30)
    assert failure.value.args[0].fatal() or failure.value.args[0].txn_requires_abort()
    with contextlib.suppress(KafkaException):  # a fenced producer reports it again
        zombie.close()
    assert read_values(bootstrap, topic, 1) == [b"new-1", b"new-2"]
    uncommitted = read_values(bootstrap, topic, 1, committed=False)
    assert len(uncommitted) == 102, "the zombie's rows are in the log, aborted"


def test_a_task_fenced_mid_transaction_fails_with_the_fencing_and_writes_nothing(
        pykraft_cluster: LocalCluster, topic_name: TopicName) -> None:
    """The zombie's side: while the task is writing, a newer attempt initialises the same
    transactional id. The task fails with the fencing error (not a later one from closing
    its producer), and none of its rows and no batch record become visible."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("eos-fenced")
    create_topic(bootstrap, topic, partitions=1)
    params = {"bootstrap.servers": bootstrap}
    ids = sink_ids("pykraft-sink", "query-y", 0)
    newer: list[Producer] = []

    def batches() -> Iterator[pa.RecordBatch]:
        yield _rows([b"old-%d" % i for i in range(500)])
        time.sleep(0.5)  # the first rows reach the partition inside the transaction
        successor = Producer({**params, "transactional.id": ids.transactional_id})
        successor.init_transactions(30)
        newer.append(successor)
        yield _rows([b"old-late"])

    with pytest.raises(KafkaException) as failure:
        write_transaction(params, topic, batches(), TaskIdentity("query-y", 0, 0))
    assert failure.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                            KafkaError.INVALID_PRODUCER_EPOCH)
    assert recorded_batch(ADMINS.get(params), ids.group_id, 10) == NO_BATCH
    assert read_values(bootstrap, topic, 1) == []
    newer[0].close()


def test_a_failed_task_leaves_nothing_visible(
        pykraft_cluster: LocalCluster, topic_name: TopicName) -> None:
    """A row with no topic fails the task mid-transaction: the transaction is aborted,
    nothing is recorded, and the retry writes every row once."""
    bootstrap = pykraft_cluster.bootstrap_servers
    topic = topic_name("eos-failed")
    create_topic(bootstrap, topic, partitions=1)
    params = {"bootstrap.servers": bootstrap}
    good = pa.RecordBatch.from_pydict({"topic": [topic] * 3, "value": [b"1", b"2", b"3"]})
    bad = pa.RecordBatch.from_pydict({"topic": [None], "value": [b"lost"]},
                                     schema=good.schema)
    with pytest.raises(ValueError, match="null topic"):
        write_transaction(params, None, iter([good, bad]), TaskIdentity("query-f", 0, 0))
    group = sink_ids("pykraft-sink", "query-f", 0).group_id
    assert recorded_batch(ADMINS.get(params), group, 10) == NO_BATCH
    assert write_transaction(params, None, iter([good]), TaskIdentity("query-f", 0, 0)).count \
        == 3
    assert read_values(bootstrap, topic, 1) == [b"1", b"2", b"3"]


# -- real Spark: a replayed micro-batch --------------------------------------------------


def _sink_query(df: DataFrame, bootstrap: str, sink: str, checkpoint: Path, *,
                exactly_once: bool) -> None:
    writer = (df.select("key", "value").writeStream.format("pykraft")
              .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    if exactly_once:
        writer = writer.option("exactlyOnce", "true")
    query = writer.start()
    assert query.awaitTermination(180)
    assert query.exception() is None


def forget_last_batch_commit(checkpoint: Path) -> int:
    """Make Spark re-run the last micro-batch on restart, as after a crash between the sink's
    commit and the checkpoint's: delete the batch's entry in the commit log."""
    commits = sorted((p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()),
                     key=lambda p: int(p.name))
    last = commits[-1]
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    return int(last.name)


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_a_replayed_micro_batch_is_written_once(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName,
        tmp_path: Path, exactly_once: bool) -> None:
    """3 partitions x 2,000 records mirrored in micro-batches of at most 2,500; the last
    batch's checkpoint commit is deleted and the query restarted, so Spark runs that batch
    again. exactlyOnce: every record once (read_committed). At-least-once (the control): the
    replayed batch's records twice."""
    bootstrap = pykraft_cluster.bootstrap_servers
    source, sink = topic_name("eos-in"), topic_name("eos-out")
    create_topic(bootstrap, source, partitions=3)
    create_topic(bootstrap, sink, partitions=3)
    produce(bootstrap, source, ((i % 3, b"k%d" % i, b"v%d" % i) for i in range(6000)))
    df = stream(spark, bootstrap, subscribe=source, startingOffsets="earliest",
                maxOffsetsPerTrigger="2500")
    checkpoint = tmp_path / "checkpoint"
    _sink_query(df, bootstrap, sink, checkpoint, exactly_once=exactly_once)
    replayed = forget_last_batch_commit(checkpoint)
    assert replayed == 2, "6,000 records in batches of at most 2,500: batches 0, 1, 2"
    _sink_query(df, bootstrap, sink, checkpoint, exactly_once=exactly_once)
    assert (checkpoint / "commits" / str(replayed)).exists(), "the batch ran again"
    values = read_values(bootstrap, sink, 3)
    expected = sorted(b"v%d" % i for i in range(6000))
    if exactly_once:
        assert sorted(values) == expected
    else:
        assert len(values) == 6000 + 1000, "the last batch (1,000 records) written twice"
        assert set(values) == set(expected)


def test_rows_routed_to_two_topics_are_written_once_after_a_replay(
        spark: SparkSession, pykraft_cluster: LocalCluster, topic_name: TopicName,
        tmp_path: Path) -> None:
    """With a topic column (each task writes both topics: value % 4 < 2 to one, the rest to
    the other) each task's batch is recorded on the first topic it writes; the replay check
    reads the whole group, so a replayed batch is still recognised."""
    bootstrap = pykraft_cluster.bootstrap_servers
    source, low, high = topic_name("eos-route-in"), topic_name("eos-low"), topic_name("eos-high")
    for topic in (source, low, high):
        create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, source, ((i % 2, b"k%d" % i, b"%d" % i) for i in range(3000)))
    df = stream(spark, bootstrap, subscribe=source, startingOffsets="earliest",
                maxOffsetsPerTrigger="1000")
    routed = df.select("key", "value", F.when(
        F.col("value").cast("string").cast("int") % 4 < 2, F.lit(low))
        .otherwise(F.lit(high)).alias("topic"))
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        query = (routed.writeStream.format("pykraft").option("kafka.bootstrap.servers",
                                                             bootstrap)
                 .option("exactlyOnce", "true").option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(180)
        assert query.exception() is None

    run()
    assert forget_last_batch_commit(checkpoint) == 2
    run()
    assert sorted(read_values(bootstrap, low, 2)) == sorted(b"%d" % i for i in range(3000)
                                                             if i % 4 < 2)
    assert sorted(read_values(bootstrap, high, 2)) == sorted(b"%d" % i for i in range(3000)
                                                              if i % 4 >= 2)


# A query whose task for source partition 0 fails on its first attempt in the middle of
# writing: a Python UDF gives the partition's last row no topic on attempt 0 only, so the
# sink fails on it after producing the rows before it in the task's transaction. The UDF
# waits before that row: the sink hands rows to librdkafka, whose background thread sends
# them (after AddPartitionsToTxn) while the UDF waits; without the wait the failure could
# purge them unsent and the test would not see aborted rows in the log. Spark local[2,2]
# retries a failed task once.
_RETRY_QUERY = """
import sys
import time
from pyspark import TaskContext
from pyspark.sql import functions as F
from pyspark.sql.types import StringType
from pykraft.spark import local_session
bootstrap, source, sink, checkpoint, last = sys.argv[1:6]
spark = local_session("eos-retry", master="local[2,2]")

def topic_of(value):
    if value == last.encode() and TaskContext.get().attemptNumber() == 0:
        time.sleep(3)
        return None
    return sink

df = (spark.readStream.format("pykraft").option("kafka.bootstrap.servers", bootstrap)
      .option("subscribe", source).option("startingOffsets", "earliest").load())
query = (df.select("key", "value", F.udf(topic_of, StringType())("value").alias("topic"))
         .writeStream.format("pykraft").option("kafka.bootstrap.servers", bootstrap)
         .option("exactlyOnce", "true").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
query.awaitTermination()
sys.exit(0 if query.exception() is None else 1)
"""


@pytest.mark.slow  # a fault test; in ./scripts/test-long to keep CI under 30 minutes
def test_a_task_retried_after_failing_mid_transaction_writes_its_rows_once(
        pykraft_cluster: LocalCluster, topic_name: TopicName, tmp_path: Path) -> None:
    """Real Spark with task retries: the first attempt of one task fails after producing
    20,000 rows in its transaction; the transaction is aborted, the retry writes every row,
    and read_committed sees each record once (read_uncommitted also the aborted rows)."""
    import subprocess
    import sys

    bootstrap = pykraft_cluster.bootstrap_servers
    source, sink = topic_name("eos-retry-in"), topic_name("eos-retry-out")
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=2)
    total = 40_000
    produce(bootstrap, source, ((i % 2, b"k%d" % i, b"v%d" % i) for i in range(total)))
    result = subprocess.run(
        [sys.executable, "-c", _RETRY_QUERY, bootstrap, source, sink, str(tmp_path / "cp"),
         f"v{total - 2}"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "null topic present in the data" in result.stderr, "the first attempt did fail"
    values = read_values(bootstrap, sink, 2)
    assert sorted(values) == sorted(b"v%d" % i for i in range(total))
    uncommitted = read_values(bootstrap, sink, 2, committed=False)
    assert len(uncommitted) > total, "the failed attempt's rows reached the log, aborted"


def test_exactly_once_is_refused_for_batch_writes(
        spark: SparkSession, pykraft_cluster: LocalCluster) -> None:
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="for streaming writes"):
        (df.write.format("pykraft").mode("append")
         .option("kafka.bootstrap.servers", pykraft_cluster.bootstrap_servers)
         .option("topic", "t").option("exactlyOnce", "true").save())
