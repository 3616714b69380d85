"""The exactly-once sink (option exactlyOnce=true): one Kafka transaction per task of a
micro-batch, recording the batch id atomically with the rows it writes.

Theory of operation. Spark runs micro-batch B of a streaming query as one task per Spark
partition P. The task for (B, P), in a Spark Python worker:

1. creates a transactional producer with transactional.id = "<prefix>-<query id>-<P>" and
   calls init_transactions(). InitProducerId bumps the producer epoch of that id, which
   fences every older instance (a retried, speculative or zombie task of the same P, or a
   task of an earlier batch still running in a lost executor), and completes or aborts any
   transaction an older instance left behind before it returns;
2. asks which batch the partition last wrote: the group named like the transactional id
   holds a committed "offset" B' + 1 for the last batch B' whose transaction committed
   (OffsetFetch with require_stable, KIP-447, so an in-flight transactional commit is never
   read as absent). If B' >= B, this task is a replay of a batch that is already in the
   output: it writes nothing;
3. otherwise begins a transaction, produces every row, sends the offset B + 1 for the group
   to the transaction (AddOffsetsToTxn + TxnOffsetCommit) and commits. The rows and the
   record of batch B become visible together, or neither does.

Spark re-runs batch B after a restart whenever B's entry in the checkpoint's commit log is
missing, even though every task of B may have committed; step 2 makes the re-run write
only the partitions whose transaction did not commit. The query id (not the run id) is in the
transactional id: Spark keeps it in the checkpoint, so a restarted query finds its records.

Invariant that makes this exactly-once: a replayed batch hands each Spark partition the same
rows as the first attempt. Spark replays a batch with the offsets it logged before running
it, and the pykraft source plans the same ranges from the same offsets; transforms must be
deterministic too (no rand(), no current_timestamp() in the output, no shuffle whose
partitioning changes between runs). The guarantee and its limits are in the README's Spark
section and docs/deviations.md.

Why the marker is read with one group-wide OffsetFetch: the offset is committed for
partition 0 of the first topic the task writes (offsets can only be committed for
partitions that exist); a replay reads every offset of the group and takes the highest, so
the check does not depend on which topic that was.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

import pyarrow as pa
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from pykraft.errors import invariant
from pykraft.spark.client import DeliveryErrors, kafka_cause, produce_rows

__all__ = [
    "BATCH_ID_PROPERTY",
    "QUERY_ID_PROPERTY",
    "SinkIds",
    "TaskIdentity",
    "TransactionResult",
    "batch_is_written",
    "current_task",
    "kafka_cause",
    "last_written_batch",
    "recorded_batch",
    "sink_ids",
    "write_transaction",
]

log = logging.getLogger("pykraft.spark")

# Spark's local properties of a micro-batch's jobs, visible to its tasks (StreamExecution)
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"
NO_BATCH: Final = -1
RETRY_ATTEMPTS_MAX: Final = 5
UNSTABLE_BACKOFF_S: Final = 0.05
# the group metadata handle is built offline, by a consumer that never connects: no
# bootstrap servers, so no log lines about them either
GROUP_METADATA_CONFIG: Final = {"log_level": 0}

# Each task starts a new producer, and librdkafka asks for the transaction coordinator only
# over a connection to a broker learned from metadata, which it opens after its reconnect
# backoff: 100 ms by default made init_transactions take 55 ms on loopback, 10 ms takes 15.
# Failed connections still back off exponentially, up to reconnect.backoff.max.ms.
TRANSACTIONAL_DEFAULTS: Final = {"reconnect.backoff.ms": 10}

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """Which micro-batch partition a write task is."""
    query_id: str  # stable across restarts from one checkpoint (the run id is not)
    batch_id: int
    partition_id: int
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class SinkIds:
    transactional_id: str
    group_id: str  # the group whose committed offset records the last batch written


@dataclass(frozen=True, slots=True)
class TransactionResult:
    count: int  # rows written by this task's transaction (0 when skipped)
    skipped: bool  # the batch was already in the output: an earlier attempt committed it


def sink_ids(prefix: str, query_id: str, partition_id: int) -> SinkIds:
    name = f"{prefix}-{query_id}-{partition_id}"
    return SinkIds(transactional_id=name, group_id=name)


def last_written_batch(committed_offsets: Iterable[int]) -> int:
    """The last batch recorded by committed offsets (batch B is recorded as offset B + 1),
    or NO_BATCH when nothing valid is committed (offsets below 0 mean none)."""
    return max((offset - 1 for offset in committed_offsets if offset > 0), default=NO_BATCH)


def batch_is_written(last_written: int, batch_id: int) -> bool:
    """Batches of one query run in order, each after the previous one committed in Spark's
    checkpoint; so a recorded batch at or after this one means this one is in the output."""
    return last_written >= batch_id


def current_task() -> TaskIdentity:
    """The running Spark task's identity, from the local properties Spark sets on every job
    of a micro-batch."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("pykraft sink: exactlyOnce writes run only inside Spark tasks")
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
    if not query_id or batch_id is None:
        raise RuntimeError("pykraft sink: option 'exactlyOnce' needs a streaming query's "
                           "micro-batch (Spark set no query id or batch id on this task)")
    return TaskIdentity(query_id=query_id, batch_id=int(batch_id),
                        partition_id=context.partitionId(), attempt=context.attemptNumber())


class _Admins:
    """One AdminClient per client configuration in a Python worker (Spark reuses workers):
    the replay check skips connecting and finding the coordinator after the first task."""

    def __init__(self) -> None:
        self._by_params: dict[tuple[tuple[str, str], ...], AdminClient] = {}

    def get(self, params: Mapping[str, str]) -> AdminClient:
        key = tuple(sorted(params.items()))
        admin = self._by_params.get(key)
        if admin is None:
            admin = self._by_params[key] = AdminClient(dict(params))
        return admin

    def drop(self, params: Mapping[str, str]) -> None:
        self._by_params.pop(tuple(sorted(params.items())), None)

    def clear(self) -> None:
        self._by_params.clear()  # the client library closes each one when it is released


ADMINS: Final = _Admins()
_GROUP_METADATA: dict[str, object] = {}
GROUP_METADATA_CACHED_MAX: Final = 1024


def _group_metadata(group_id: str) -> object:
    """The consumer group metadata send_offsets_to_transaction needs for a group the task
    never joins (generation -1, no member id): librdkafka builds it without a connection."""
    cached = _GROUP_METADATA.get(group_id)
    if cached is None:
        consumer = Consumer({**GROUP_METADATA_CONFIG, "group.id": group_id})
        try:
            cached = consumer.consumer_group_metadata()
        finally:
            consumer.close()
        if len(_GROUP_METADATA) >= GROUP_METADATA_CACHED_MAX:
            _GROUP_METADATA.clear()
        _GROUP_METADATA[group_id] = cached
    return cached


def recorded_batch(admin: AdminClient, group_id: str, timeout_s: float, *,
                   sleep: Callable[[float], None] = time.sleep,
                   clock: Callable[[], float] = time.monotonic) -> int:
    """The last batch the group records as written (NO_BATCH if none). Offsets of a
    transaction still completing are unstable (KIP-447): wait for its outcome."""
    deadline = clock() + timeout_s
    while True:
        request = [ConsumerGroupTopicPartitions(group_id)]
        try:
            listed = admin.list_consumer_group_offsets(
                request, require_stable=True, request_timeout=timeout_s)[group_id].result()
            errors = [tp.error for tp in listed.topic_partitions or () if tp.error is not None]
            if not errors:
                return last_written_batch(tp.offset for tp in listed.topic_partitions or ())
            error = errors[0]
        except KafkaException as failure:
            error = failure.args[0]
            if error.code() == KafkaError.GROUP_ID_NOT_FOUND:
                return NO_BATCH
        if error.code() != KafkaError.UNSTABLE_OFFSET_COMMIT or clock() > deadline:
            raise KafkaException(error)
        sleep(UNSTABLE_BACKOFF_S)


def _retrying(call: Callable[[], T], what: str) -> T:
    """Repeat a transactional call that failed with a retriable error (librdkafka's contract
    for init_transactions, send_offsets_to_transaction and commit_transaction)."""
    for attempt in itertools.count(1):
        try:
            return call()
        except KafkaException as failure:
            error = failure.args[0]
            if not error.retriable() or attempt >= RETRY_ATTEMPTS_MAX:
                raise
            log.warning("pykraft sink: %s failed (%s); retrying", what, error.str())
    raise AssertionError("unreachable")


def _rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch] | None:
    """The batches from the first one with a row, or None if there is no row at all."""
    for batch in batches:
        if batch.num_rows:
            return itertools.chain([batch], batches)
    return None


def write_transaction(params: Mapping[str, str], topic_option: str | None,
                      batches: Iterator[pa.RecordBatch], task: TaskIdentity, *,
                      transactional_id_prefix: str = "pykraft-sink",
                      timeout_s: float = 120.0) -> TransactionResult:
    """Write one micro-batch partition exactly once (see the module docstring)."""
    rows = _rows(batches)
    if rows is None:  # nothing to write, and a replay has nothing either
        return TransactionResult(count=0, skipped=False)
    ids = sink_ids(transactional_id_prefix, task.query_id, task.partition_id)
    producer = Producer({**TRANSACTIONAL_DEFAULTS, **params,
                         "transactional.id": ids.transactional_id})
    began = False
    try:
        _retrying(lambda: producer.init_transactions(timeout_s), "init_transactions")
        try:
            last = recorded_batch(ADMINS.get(params), ids.group_id, timeout_s)
        except KafkaException:
            ADMINS.drop(params)  # a broken admin client is not kept for the next task
            raise
        if batch_is_written(last, task.batch_id):
            log.info("pykraft sink: batch %d partition %d (task attempt %d) was written by an "
                     "earlier attempt (group %s records batch %d); skipping it", task.batch_id,
                     task.partition_id, task.attempt, ids.group_id, last)
            return TransactionResult(count=0, skipped=True)
        producer.begin_transaction()
        began = True
        errors = DeliveryErrors()
        produced = produce_rows(producer, topic_option, rows, errors)
        if errors.first is not None:
            raise KafkaException(errors.first)
        invariant(produced.first_topic is not None, "a non-empty write names a topic")
        marker = TopicPartition(str(produced.first_topic), 0, task.batch_id + 1)
        _retrying(lambda: producer.send_offsets_to_transaction(
            [marker], _group_metadata(ids.group_id), timeout_s), "send_offsets_to_transaction")
        # commit_transaction waits for every acknowledgement; a failed delivery fails it
        _retrying(lambda: producer.commit_transaction(timeout_s), "commit_transaction")
        return TransactionResult(count=produced.count, skipped=False)
    except BaseException as failure:
        if began:
            _abort(producer, timeout_s)
        cause = kafka_cause(failure) if isinstance(failure, SystemError) else None
        if cause is not None:
            raise cause from failure
        raise
    finally:
        _close(producer)


def _close(producer: Producer) -> None:
    """Close without masking the task's own error: a fenced producer's close reports the
    fencing again."""
    try:
        producer.close()
    except KafkaException as failure:
        log.info("pykraft sink: closing the producer: %s", failure.args[0].str())


def _abort(producer: Producer, timeout_s: float) -> None:
    """Best effort: a transaction left open is aborted by the next attempt's
    init_transactions, or by the coordinator after transaction.timeout.ms."""
    producer.purge()
    try:
        producer.abort_transaction(timeout_s)
    except KafkaException as failure:
        log.warning("pykraft sink: aborting the transaction failed (%s); the next attempt "
                    "of the task aborts it", failure.args[0].str())
