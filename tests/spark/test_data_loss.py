"""failOnDataLoss against real retention: when retention deletes offsets a query has not read
yet, the query fails with a clear message, or (failOnDataLoss=false) skips to the log start."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pykraft.testing import LocalCluster
from tests.spark.helpers import create_topic, produce, stream, to_parquet_per_batch, watermarks

TopicName = Callable[[str], str]
SEGMENT_BYTES = 1_048_576  # Kafka 4's smallest segment.bytes
RECORD_BYTES = 10_000  # one record per batch: ~104 batches fill a segment


@pytest.fixture(scope="module")
def retention_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(configs={"log.retention.check.interval.ms": "300"}) as cluster:
        yield cluster


def _topic_losing_its_head(bootstrap: str, topic: str, before: Callable[[], None]) -> int:
    """50 records, then `before()` reads them, then 700 more: retention deletes the head.
    Returns the log start offset once deletion has settled."""
    create_topic(bootstrap, topic, config={"retention.bytes": str(3 * SEGMENT_BYTES),
                                           "segment.bytes": str(SEGMENT_BYTES)})
    produce(bootstrap, topic, ((0, None, bytes([65 + i % 26]) * RECORD_BYTES)
                               for i in range(50)), linger_ms=0)
    before()
    produce(bootstrap, topic, ((0, None, bytes([65 + i % 26]) * RECORD_BYTES)
                               for i in range(700)), linger_ms=0)
    deadline = time.monotonic() + 30
    low = 0
    while time.monotonic() < deadline:
        low = watermarks(bootstrap, topic)[0]
        if (750 - low) * RECORD_BYTES <= 4 * SEGMENT_BYTES:  # retention has done its work
            return low
        time.sleep(0.2)
    raise AssertionError(f"retention did not delete the head (log start offset {low})")


def test_streaming_fails_or_skips_when_retention_deleted_the_next_offsets(
        spark: SparkSession, retention_cluster: LocalCluster, topic_name: TopicName,
        tmp_path: Path) -> None:
    bootstrap = retention_cluster.bootstrap_servers
    topic = topic_name("lossy")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def read_first_fifty() -> None:
        df = stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest")
        to_parquet_per_batch(df, out, checkpoint).awaitTermination(60)
        assert spark.read.parquet(str(out)).count() == 50

    low = _topic_losing_its_head(bootstrap, topic, read_first_fifty)
    assert low > 50

    strict = stream(spark, bootstrap, subscribe=topic)
    query = to_parquet_per_batch(strict, out, checkpoint)
    with pytest.raises(StreamingQueryException,
                       match=f"offsets 50 to {low - 1} were deleted before they were read"):
        query.awaitTermination(60)

    lenient = stream(spark, bootstrap, subscribe=topic, failOnDataLoss="false")
    to_parquet_per_batch(lenient, out, checkpoint).awaitTermination(60)
    offsets = spark.read.parquet(str(out)).agg(F.min("offset"), F.max("offset"),
                                               F.count("*")).first()
    assert tuple(offsets) == (0, 749, 50 + 750 - low)  # the head, then the log start on
    resumed = spark.read.parquet(str(out)).where(F.col("offset") >= 50)
    assert resumed.agg(F.min("offset")).first()[0] == low


def test_batch_read_of_deleted_offsets(
        spark: SparkSession, retention_cluster: LocalCluster, topic_name: TopicName) -> None:
    """A batch read asked to start below the log start offset fails, or skips ahead."""
    bootstrap = retention_cluster.bootstrap_servers
    topic = topic_name("lossy-batch")
    low = _topic_losing_its_head(bootstrap, topic, lambda: None)

    def read(fail_on_data_loss: str) -> int:
        return (spark.read.format("pykraft").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", json.dumps({topic: {"0": 10}}))
                .option("failOnDataLoss", fail_on_data_loss).load().count())

    with pytest.raises(Exception, match=f"offsets 10 to {low - 1} were deleted"):
        read("true")
    assert read("false") == 750 - low


def test_executor_finds_offsets_deleted_after_planning(
        retention_cluster: LocalCluster, topic_name: TopicName,
        caplog: pytest.LogCaptureFixture) -> None:
    """A task whose planned range starts below the log start offset (retention ran between
    planning and reading) fails, or reads from the log start and logs what it skipped."""
    from pykraft.spark.client import read_range
    from pykraft.spark.options import parse_read_options
    from pykraft.spark.planning import DataLossError, OffsetRange

    bootstrap = retention_cluster.bootstrap_servers
    topic = topic_name("lossy-task")
    low = _topic_losing_its_head(bootstrap, topic, lambda: None)
    planned = OffsetRange(topic, 0, 20, low + 30)

    def read(fail_on_data_loss: str) -> list[int]:
        options = parse_read_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                      "failOnDataLoss": fail_on_data_loss}, streaming=True)
        return [offset for batch in read_range(options, planned)
                for offset in batch.column("offset").to_pylist()]

    with pytest.raises(DataLossError, match=f"offsets 20 to {low - 1} were deleted"):
        read("true")
    with caplog.at_level("WARNING", logger="pykraft.spark"):
        assert read("false") == list(range(low, low + 30))
    assert f"offsets 20 to {low - 1} were deleted" in caplog.text
