"""Stream processing: JSON page-view events -> parse -> 1-minute windows with a watermark ->
per-page counts to a compacted topic (one record per page and window, latest wins) and to
Parquet files.

    .venv/bin/python examples/spark/event_counts.py --demo     # sample events, then run

Without --available-now the query runs until Ctrl-C; with it, it processes what the input
topic holds when it starts and stops. Transforms are column expressions only (no Python
UDFs, no collect), so Spark runs them in the JVM.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from examples.spark._common import ensure_topic, produce_json
from pykraft.spark import local_session

EVENT_SCHEMA = "user STRING, page STRING, event_time TIMESTAMP, duration_ms LONG"
PAGES = ("home", "search", "cart", "checkout", "help")


def page_counts(events: DataFrame, *, window: str = "1 minute",
                lateness: str = "1 minute") -> DataFrame:
    """Raw source rows -> (window_start, window_end, page, views, users, duration_ms)."""
    parsed = events.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA)
                           .alias("event")).select("event.*")
    return (parsed.where(F.col("page").isNotNull() & F.col("event_time").isNotNull())
            .withWatermark("event_time", lateness)
            .groupBy(F.window("event_time", window), "page")
            .agg(F.count("*").alias("views"), F.approx_count_distinct("user").alias("users"),
                 F.sum("duration_ms").alias("duration_ms"))
            .select(F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"), "page", "views", "users",
                    "duration_ms"))


def as_records(counts: DataFrame) -> DataFrame:
    """Key page@window_start, so compaction keeps the latest result of each window."""
    key = F.concat_ws("@", "page", F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'"))
    return counts.select(key.alias("key"), F.to_json(F.struct(*counts.columns)).alias("value"))


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    ensure_topic(args.bootstrap_servers, args.output_topic, 1,
                 {"cleanup.policy": "compact"})
    events = (spark.readStream.format("pykraft")
              .option("kafka.bootstrap.servers", args.bootstrap_servers)
              .option("subscribe", args.input_topic)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger)).load())
    counts = page_counts(events)
    bootstrap, topic, parquet = args.bootstrap_servers, args.output_topic, args.parquet

    def write_both(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        as_records(batch).write.format("pykraft").option("kafka.bootstrap.servers", bootstrap) \
            .option("topic", topic).mode("append").save()
        # one directory per batch, replaced if the batch is retried: no duplicate files
        batch.write.mode("overwrite").parquet(f"{parquet}/batch={batch_id}")
        batch.unpersist()

    writer = (counts.writeStream.outputMode("append").foreachBatch(write_both)
              .option("checkpointLocation", args.checkpoint))
    writer = writer.trigger(availableNow=True) if args.available_now \
        else writer.trigger(processingTime="2 seconds")
    writer.start().awaitTermination()


def demo_events(count: int, seed: int = 7) -> list[tuple[str, dict[str, object]]]:
    """`count` page views over ten minutes, then one event an hour later that closes every
    window (the watermark passes them all), so --available-now emits every count."""
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    events: list[tuple[str, dict[str, object]]] = []
    for i in range(count):
        user = f"user-{rng.randrange(50)}"
        at = start + timedelta(milliseconds=rng.randrange(600_000))
        events.append((user, {"user": user, "page": rng.choice(PAGES),
                              "event_time": at.isoformat(timespec="milliseconds"),
                              "duration_ms": rng.randrange(5000), "seq": i}))
    closer = start + timedelta(hours=1)
    events.append(("closer", {"user": "closer", "page": "closer",
                              "event_time": closer.isoformat(timespec="milliseconds"),
                              "duration_ms": 0}))
    return events


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--input-topic", default="page-views")
    parser.add_argument("--output-topic", default="page-view-counts")
    parser.add_argument("--parquet", default="out/page-view-counts")
    parser.add_argument("--checkpoint", default="out/checkpoints/page-view-counts")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=100_000)
    parser.add_argument("--available-now", action="store_true",
                        help="process what is in the topic now, then stop")
    parser.add_argument("--demo", type=int, nargs="?", const=20_000, default=0, metavar="N",
                        help="first produce N sample events (default 20000); implies "
                             "--available-now")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.demo:
        ensure_topic(args.bootstrap_servers, args.input_topic, 3)
        produce_json(args.bootstrap_servers, args.input_topic, demo_events(args.demo))
        args.available_now = True
    run(spark or local_session("event-counts"), args)


if __name__ == "__main__":
    main()
