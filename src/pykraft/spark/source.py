"""The "pykraft" PySpark data source: Spark's Kafka source and sink contract, in Python.

    pykraft.spark.register(spark)
    df = (spark.readStream.format("pykraft")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

Where each piece runs: `PykraftDataSource` is pickled from the driver to Spark's Python
processes. Option syntax is checked when the DataFrame is defined (`schema`); cluster lookups
(topics, offsets) happen when the query starts and at each micro-batch, in the planner process
on the driver (`partitions`, `initialOffset`, `latestOffset`); each planned offset range is read
by one Spark task (`read`). The stream reader's offsets are the checkpointed offsets of Spark's
Kafka source, {"topic": {"partition": next offset}}; the source keeps no state of its own
beyond the planner's memory of when it last planned a batch (minOffsetsPerTrigger).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pykraft.spark.client import ClusterView, read_range, write_batches
from pykraft.spark.options import (
    EARLIEST,
    LATEST,
    EarliestOffsets,
    GlobalTimestamp,
    InvalidOptionError,
    LatestOffsets,
    OffsetSpec,
    Partition,
    ReadOptions,
    SpecificOffsets,
    SpecificTimestamps,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)
from pykraft.spark.planning import (
    OffsetRange,
    delays_trigger,
    next_end_offsets,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
    report_data_loss,
    split_ranges,
)
from pykraft.spark.transactional import current_task, write_transaction

__all__ = ["PykraftDataSource", "read_schema"]

log = logging.getLogger("pykraft.spark")

HEADERS_DDL = "array<struct<key:string,value:binary>>"


def read_schema(include_headers: bool) -> StructType:
    """The schema of Spark's Kafka source."""
    fields = [
        StructField("key", BinaryType()), StructField("value", BinaryType()),
        StructField("topic", StringType()), StructField("partition", IntegerType()),
        StructField("offset", LongType()), StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


class PykraftDataSource(DataSource):
    """spark.read/readStream/write/writeStream .format("pykraft")."""

    @classmethod
    def name(cls) -> str:
        return "pykraft"

    def schema(self) -> StructType:
        options = parse_read_options(self.options, streaming=None)
        return read_schema(options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return PykraftBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return PykraftStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> PykraftBatchWriter:
        if overwrite:
            raise InvalidOptionError("Save mode overwrite is not allowed for the pykraft sink: "
                                     "a topic is appended to. Use mode 'append'.")
        options = parse_write_options(self.options, streaming=False)
        check_sink_schema(schema, options.topic)
        return PykraftBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> PykraftStreamWriter:
        options = parse_write_options(self.options)
        check_sink_schema(schema, options.topic)
        return PykraftStreamWriter(options)


# -- reading -------------------------------------------------------------------------------


def _known_partitions(view: ClusterView, options: ReadOptions) -> set[Partition]:
    partitions, missing = view.topic_partitions(options.strategy)
    if missing:
        message = (f"Topic or partition {', '.join(missing)} does not exist "
                   f"(kafka.bootstrap.servers={options.kafka_params['bootstrap.servers']}).")
        if options.fail_on_data_loss:
            raise InvalidOptionError(message + " Create it first, or set the option "
                                     "'failOnDataLoss' to 'false' to read nothing from it.")
        report_data_loss([message], fail=False)
    return partitions


def resolve_offsets(view: ClusterView, spec: OffsetSpec, partitions: set[Partition], *,
                    name: str, no_record_means_latest: bool) -> dict[Partition, int]:
    """Concrete offsets for an offsets option over the partitions that exist."""
    ordered = sorted(partitions)
    if isinstance(spec, EarliestOffsets):
        return view.earliest(ordered)
    if isinstance(spec, LatestOffsets):
        return view.latest(ordered)
    if isinstance(spec, SpecificOffsets):
        _check_covers(spec.offsets, partitions, name)
        earliest = [tp for tp, offset in spec.offsets.items() if offset == EARLIEST]
        latest = [tp for tp, offset in spec.offsets.items() if offset == LATEST]
        return {**spec.offsets, **view.earliest(earliest), **view.latest(latest)}
    if isinstance(spec, GlobalTimestamp):
        timestamps = {tp: spec.timestamp_ms for tp in ordered}
    else:
        _check_covers(spec.timestamps_ms, partitions, name)
        timestamps = dict(spec.timestamps_ms)
    found = view.for_times(timestamps)
    late = sorted(tp for tp, offset in found.items() if offset < 0)
    if late and not no_record_means_latest:
        names = ", ".join(f"{t}-{p} (at {timestamps[(t, p)]})" for t, p in late)
        raise InvalidOptionError(
            f"Option '{name}': no record at or after the timestamp in {names}. Set "
            "'startingOffsetsByTimestampStrategy' to 'latest' to start at the latest offset.")
    return {**found, **view.latest(late)}


def _check_covers(table: Mapping[Partition, int], partitions: set[Partition], name: str) -> None:
    unknown = sorted(set(table) - partitions)
    if unknown:
        raise InvalidOptionError(f"Option '{name}' names partitions that do not exist or are "
                                 f"not subscribed: {', '.join(f'{t}-{p}' for t, p in unknown)}.")
    missing = sorted(partitions - set(table))
    if missing:
        raise InvalidOptionError(
            f"Option '{name}' must give every subscribed partition (use -2 for earliest, -1 "
            f"for latest); missing: {', '.join(f'{t}-{p}' for t, p in missing)}.")


def _starting_name(options: ReadOptions) -> str:
    return {GlobalTimestamp: "startingTimestamp", SpecificTimestamps:
            "startingOffsetsByTimestamp"}.get(type(options.starting), "startingOffsets")


def _input_partitions(options: ReadOptions, ranges: Sequence[OffsetRange]) -> list[InputPartition]:
    pieces = split_ranges(ranges, min_partitions=options.min_partitions,
                          max_records_per_partition=options.max_records_per_partition)
    return [InputPartition(piece) for piece in pieces]


def _read(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if isinstance(partition.value, OffsetRange):  # Spark adds InputPartition(None) for no data
        yield from read_range(options, partition.value)


class PykraftBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        view = ClusterView(options.kafka_params)
        known = _known_partitions(view, options)
        starting = resolve_offsets(view, options.starting, known, name=_starting_name(options),
                                   no_record_means_latest=options.timestamp_strategy == "latest")
        ending_spec = options.ending if options.ending is not None else LatestOffsets()
        ending = resolve_offsets(view, ending_spec, known, name="endingOffsets",
                                 no_record_means_latest=True)
        for tp in sorted(known):
            if starting[tp] > ending[tp]:
                raise InvalidOptionError(
                    f"Starting offset {starting[tp]} of {tp[0]}-{tp[1]} is after its ending "
                    f"offset {ending[tp]}.")
        plan = plan_ranges(starting, ending, view.earliest(sorted(known)))
        report_data_loss(plan.losses, fail=options.fail_on_data_loss)
        return _input_partitions(options, plan.ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class PykraftStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over offsets; Spark checkpoints each batch's end before running it."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._view: ClusterView | None = None
        self._latest: dict[Partition, int] = {}
        self._target: dict[Partition, int] | None = None  # Trigger.AvailableNow's end
        self._initial: dict[str, Any] | None = None
        self._last_trigger_ms = 0  # when a batch was last planned (0: never, do not delay)

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_view": None, "_latest": {}, "_target": None,
                "_initial": None, "_last_trigger_ms": 0}

    def _cluster(self) -> ClusterView:
        if self._view is None:
            self._view = ClusterView(self.options.kafka_params)
        return self._view

    def initialOffset(self) -> dict[str, Any]:
        """Resolved once per run: Spark asks again at every trigger until a first batch has
        data, and "latest" must not move on in between, or records would be skipped."""
        if self._initial is None:
            options = self.options
            view = self._cluster()
            known = _known_partitions(view, options)
            offsets = resolve_offsets(
                view, options.starting, known, name=_starting_name(options),
                no_record_means_latest=options.timestamp_strategy == "latest")
            self._initial = offsets_to_json(offsets)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        view = self._cluster()
        self._target = view.latest(sorted(view.topic_partitions(self.options.strategy)[0]))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        view = self._cluster()
        known = view.topic_partitions(self.options.strategy)[0]
        latest = view.latest(sorted(known))
        if self._target is not None:  # read nothing that arrived after the trigger started
            target = self._target
            latest = {tp: min(offset, target[tp]) for tp, offset in latest.items()
                      if tp in target}
        self._latest = latest
        begin = offsets_from_json(start)
        now_ms = time.time_ns() // 1_000_000
        if self._target is None and delays_trigger(  # AvailableNow must not wait for more
                begin, latest, self.options.min_offsets_per_trigger,
                now_ms - self._last_trigger_ms, self.options.max_trigger_delay_ms):
            log.debug("pykraft source: fewer than minOffsetsPerTrigger new offsets; "
                      "skipping this trigger")
            return start
        self._last_trigger_ms = now_ms
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end, losses = next_end_offsets(begin, latest, view.earliest(sorted(latest)), max_rows)
        report_data_loss(losses, fail=self.options.fail_on_data_loss)
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return offsets_to_json(self._latest) if self._latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        end_offsets = offsets_from_json(end)
        plan = plan_ranges(offsets_from_json(start), end_offsets,
                           self._cluster().earliest(sorted(end_offsets)))
        report_data_loss(plan.losses, fail=self.options.fail_on_data_loss)
        return _input_partitions(self.options, plan.ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in the cluster."""


# -- writing -------------------------------------------------------------------------------


@dataclass(frozen=True)
class WrittenRecords(WriterCommitMessage):
    count: int
    skipped: bool = False  # exactlyOnce: an earlier attempt had written this partition


def _is_text_or_bytes(data_type: DataType) -> bool:
    return isinstance(data_type, StringType | BinaryType)


def check_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """The sink's input contract (Spark's Kafka sink): value, and optionally key, topic,
    partition and headers; other columns are ignored."""
    fields = {field.name: field.dataType for field in schema.fields}
    if "value" not in fields:
        raise InvalidOptionError("Required attribute 'value' not found in the data written to "
                                 "the pykraft sink.")
    for name in ("value", "key"):
        if name in fields and not _is_text_or_bytes(fields[name]):
            raise InvalidOptionError(f"pykraft sink: attribute '{name}' must be of type string "
                                     f"or binary, not {fields[name].simpleString()}.")
    if topic_option is None and "topic" not in fields:
        raise InvalidOptionError("pykraft sink: no 'topic' attribute in the data and no option "
                                 "'topic'. Use the option 'topic' to set a topic.")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise InvalidOptionError("pykraft sink: attribute 'topic' must be of type string, not "
                                 f"{fields['topic'].simpleString()}.")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise InvalidOptionError("pykraft sink: attribute 'partition' must be of type int, not "
                                 f"{fields['partition'].simpleString()}.")
    headers = fields.get("headers")
    if headers is not None and not (
            isinstance(headers, ArrayType) and isinstance(headers.elementType, StructType)
            and [(f.name, type(f.dataType)) for f in headers.elementType.fields]
            == [("key", StringType), ("value", BinaryType)]):
        raise InvalidOptionError(f"pykraft sink: attribute 'headers' must be of type "
                                 f"{HEADERS_DDL}, not {headers.simpleString()}.")


class PykraftBatchWriter(DataSourceArrowWriter):
    """df.write: each task produces its rows and waits for every acknowledgement."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        return WrittenRecords(write_batches(self.options.kafka_params, self.options.topic,
                                            iterator))


class PykraftStreamWriter(DataSourceStreamArrowWriter):
    """df.writeStream. At-least-once by default: a failed or retried micro-batch is written
    again. With option exactlyOnce=true each task writes its rows in one Kafka transaction
    that also records the batch id, and a replayed batch's task whose transaction committed
    writes nothing (pykraft.spark.transactional)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        options = self.options
        if options.exactly_once:
            result = write_transaction(options.kafka_params, options.topic, iterator,
                                       current_task(),
                                       transactional_id_prefix=options.transactional_id_prefix)
            return WrittenRecords(result.count, skipped=result.skipped)
        return WrittenRecords(write_batches(options.kafka_params, options.topic, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every record was acknowledged (or committed) before its task succeeded."""
        skipped = sum(1 for m in messages if isinstance(m, WrittenRecords) and m.skipped)
        if skipped:
            log.info("pykraft sink: batch %d replayed; %d of %d partitions had been written "
                     "by an earlier attempt and were skipped", batchId, skipped, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records already acknowledged stay in their topics (at-least-once); with
        exactlyOnce, transactions that committed stay too, and the batch's replay skips
        their partitions."""
