"""Batch replay: one range of a topic (offsets or times) to Parquet files, partitioned by
Kafka partition, for audits, backfills and tests.

    .venv/bin/python examples/spark/replay_to_parquet.py --topic page-views \
        --starting-offsets earliest --ending-offsets latest --output out/page-views

Ranges take Spark's Kafka syntax: --starting-offsets '{"page-views":{"0":100,"1":-2}}', or
--starting-timestamp / --ending-timestamp in epoch milliseconds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pykraft.spark import local_session


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    reader = (spark.read.format("pykraft")
              .option("kafka.bootstrap.servers", args.bootstrap_servers)
              .option("subscribe", args.topic)
              .option("startingOffsets", args.starting_offsets)
              .option("endingOffsets", args.ending_offsets)
              .option("includeHeaders", "true"))
    if args.starting_timestamp is not None:
        reader = reader.option("startingTimestamp", str(args.starting_timestamp))
    if args.ending_timestamp is not None:
        reader = reader.option("endingTimestamp", str(args.ending_timestamp))
    records = reader.load().select(
        "partition", "offset", "timestamp",
        F.col("key").cast("string").alias("key") if args.text else "key",
        F.col("value").cast("string").alias("value") if args.text else "value", "headers")
    records.write.mode("overwrite").partitionBy("partition").parquet(args.output)
    return spark.read.parquet(args.output).count()


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--ending-offsets", default="latest")
    parser.add_argument("--starting-timestamp", type=int)
    parser.add_argument("--ending-timestamp", type=int)
    parser.add_argument("--text", action="store_true", help="write keys and values as UTF-8 text")
    parser.add_argument("--output", default="out/replay")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    count = run(spark or local_session("replay-to-parquet"), args)
    print(f"{count} records written to {args.output}")


if __name__ == "__main__":
    main()
