"""Mirroring: copy topics from one cluster to another, keeping each record's partition, key,
value and headers (what MirrorMaker does), as a Spark streaming query.

    .venv/bin/python examples/spark/mirror.py --source 127.0.0.1:9092 \
        --target 127.0.0.1:9192 --topics 'orders|payments' --available-now

Target topics are created with the source's partition count when missing, so records land
in the same partition numbers. Delivery is at-least-once: a micro-batch retried after a
failure is copied again.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from examples.spark._common import ensure_topic, partition_counts
from pykraft.spark import local_session


def prepare_targets(args: argparse.Namespace) -> list[str]:
    """Create missing target topics with their source's partition count."""
    metadata = AdminClient({"bootstrap.servers": args.source}).list_topics(timeout=30)
    pattern = re.compile(args.topics)
    topics = sorted(t for t in metadata.topics if not t.startswith("__") and pattern.fullmatch(t))
    for topic, partitions in partition_counts(args.source, topics).items():
        ensure_topic(args.target, args.prefix + topic, partitions)
    return topics


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    prepare_targets(args)
    source = (spark.readStream.format("pykraft")
              .option("kafka.bootstrap.servers", args.source)
              .option("subscribePattern", args.topics)
              .option("startingOffsets", args.starting_offsets)
              .option("includeHeaders", "true")
              .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger)).load())
    copy = source.select(F.concat(F.lit(args.prefix), "topic").alias("topic"), "partition",
                         "key", "value", "headers")
    writer = (copy.writeStream.format("pykraft")
              .option("kafka.bootstrap.servers", args.target)
              .option("checkpointLocation", args.checkpoint))
    writer = writer.trigger(availableNow=True) if args.available_now \
        else writer.trigger(processingTime="1 second")
    writer.start().awaitTermination()


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default="127.0.0.1:9092", help="source bootstrap servers")
    parser.add_argument("--target", required=True, help="target bootstrap servers")
    parser.add_argument("--topics", default=".*", help="regular expression of topics to copy")
    parser.add_argument("--prefix", default="", help="prefix of the target topic names")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--checkpoint", default="out/checkpoints/mirror")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=200_000)
    parser.add_argument("--available-now", action="store_true",
                        help="copy what the topics hold now, then stop")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    run(spark or local_session("mirror"), args)


if __name__ == "__main__":
    main()
