"""Idempotent and transactional produce, read_committed consume (issue 8): one pykraft node.

Each mode produces `--records` records of 100 bytes to a fresh topic (`--partitions`,
default 1) with confluent-kafka (batch.size 1 MiB, linger.ms 5), from the first produce()
to the last acknowledgement, or to the last commit_transaction() for transactional modes:

1. plain: acks=all, enable.idempotence=false;
2. idempotent: enable.idempotence=true (acks=all, at most 5 requests in flight);
3. transactional, commit every 100 ms: begin, produce until 100 ms have passed, commit
   (which waits for every acknowledgement and for the COMMIT markers), repeat;
4. transactional, commit every 1 s.

Then the topic of mode 3 (its records in committed transactions, a COMMIT marker per
partition every 100 ms) is consumed whole by a fresh consumer with isolation.level
read_uncommitted and by one with read_committed (`--consume-runs` each, which one reads
first alternating); reported as records/s and the ratio. Each produce figure is the median
of `--runs` runs (the modes interleaved).

With `--spark-records N` (0 skips it), the Spark sink: a topic of 6 partitions holding N
records is mirrored by a streaming query (Spark local[2], Trigger.AvailableNow) to another
topic, at-least-once and with exactlyOnce=true, in micro-batches of at most
`--spark-batch` records (one task, so one transaction, per source partition and batch);
records/s over the query's wall time, each sink twice, alternating.

The node's data directory is a temporary directory under $TMPDIR; on this machine /tmp is
much slower for file creation than /work, so run with TMPDIR set to a directory on /work:

    mkdir -p /work/tmp && TMPDIR=/work/tmp .venv/bin/python benchmarks/transactions.py \
        [--records 3000000] [--partitions 1] [--runs 3] [--consume-runs 3]
        [--spark-records 1000000] [--spark-batch 100000]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pykraft.testing import LocalCluster  # noqa: E402

RECORD = b"x" * 100
PRODUCER_BASE: dict[str, Any] = {"batch.size": 1_048_576, "linger.ms": 5,
                                 "queue.buffering.max.messages": 1_000_000,
                                 "queue.buffering.max.kbytes": 1_048_576}


SPARK_PARTITIONS = 6


def create_topic(bootstrap: str, partitions: int) -> str:
    name = f"bench-txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions,
                                  replication_factor=1)])[name].result(30)
    return name


class Acks:
    def __init__(self) -> None:
        self.count = 0
        self.errors = 0

    def __call__(self, error: KafkaError | None, _message: object) -> None:
        if error is None:
            self.count += 1
        else:
            self.errors += 1


def _send(producer: Producer, topic: str, acks: Acks) -> None:
    while True:
        try:
            producer.produce(topic, RECORD, on_delivery=acks)
            return
        except BufferError:
            producer.poll(0.01)


def produce_plain(bootstrap: str, topic: str, records: int, idempotent: bool) -> float:
    producer = Producer({**PRODUCER_BASE, "bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": idempotent})
    acks = Acks()
    producer.list_topics(topic, timeout=10)  # connected and metadata known before the clock
    start = time.perf_counter()
    for index in range(records):
        _send(producer, topic, acks)
        if index % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise SystemExit("records left unacknowledged")
    elapsed = time.perf_counter() - start
    if acks.count != records or acks.errors:
        raise SystemExit(f"{acks.count} acknowledged, {acks.errors} failed of {records}")
    return records / elapsed


def produce_transactional(bootstrap: str, topic: str, records: int,
                          commit_interval_s: float) -> tuple[float, int]:
    producer = Producer({**PRODUCER_BASE, "bootstrap.servers": bootstrap,
                         "transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    acks = Acks()
    producer.init_transactions(30)
    producer.list_topics(topic, timeout=10)
    transactions = 0
    start = time.perf_counter()
    producer.begin_transaction()
    deadline = start + commit_interval_s
    for index in range(records):
        _send(producer, topic, acks)
        if index % 1_000 == 0:
            producer.poll(0)
            now = time.perf_counter()
            if now >= deadline:
                producer.commit_transaction(60)
                transactions += 1
                producer.begin_transaction()
                deadline = now + commit_interval_s
    producer.commit_transaction(60)
    transactions += 1
    elapsed = time.perf_counter() - start
    if acks.count != records or acks.errors:
        raise SystemExit(f"{acks.count} acknowledged, {acks.errors} failed of {records}")
    return records / elapsed, transactions


def consume(bootstrap: str, topic: str, partitions: int, records: int, isolation: str) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "fetch.queue.backoff.ms": 0})
    consumer.list_topics(topic, timeout=10)
    start = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count = 0
    deadline = start + 300
    while count < records:
        for message in consumer.consume(10_000, 0.5):
            if message.error() is None:
                count += 1
            elif message.error().code() != KafkaError._PARTITION_EOF:
                raise SystemExit(str(message.error()))
        if time.perf_counter() > deadline:
            raise SystemExit(f"{isolation}: read {count} of {records}")
    elapsed = time.perf_counter() - start
    consumer.close()
    if count != records:
        raise SystemExit(f"{isolation}: read {count}, expected {records}")
    return records / elapsed


def fill(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    producer = Producer({**PRODUCER_BASE, "bootstrap.servers": bootstrap})
    acks = Acks()
    for index in range(records):
        while True:
            try:
                producer.produce(topic, RECORD, b"%d" % index, partition=index % partitions,
                                 on_delivery=acks)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(300)
    if acks.count != records:
        raise SystemExit(f"fill: {acks.count} of {records} acknowledged")


def spark_sink(spark: Any, bootstrap: str, source: str, records: int, batch: int,
               exactly_once: bool, scratch: str) -> float:
    """Mirror `source` to a fresh topic with a streaming query; records/s of wall time."""
    target = create_topic(bootstrap, SPARK_PARTITIONS)
    df = (spark.readStream.format("pykraft").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", str(batch)).load())
    writer = (df.select("key", "value").writeStream.format("pykraft")
              .option("kafka.bootstrap.servers", bootstrap).option("topic", target)
              .option("checkpointLocation", f"{scratch}/{target}")
              .trigger(availableNow=True))
    if exactly_once:
        writer = writer.option("exactlyOnce", "true")
    started = time.perf_counter()
    query = writer.start()
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise SystemExit(str(query.exception()))
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    if rows != records:
        raise SystemExit(f"the query wrote {rows} records, expected {records}")
    return records / elapsed


def spark_part(bootstrap: str, records: int, batch: int) -> dict[str, list[float]]:
    from pykraft.spark import local_session

    source = create_topic(bootstrap, SPARK_PARTITIONS)
    fill(bootstrap, source, SPARK_PARTITIONS, records)
    spark = local_session("transactions-benchmark", master="local[2]")
    rates: dict[str, list[float]] = {"at-least-once": [], "exactlyOnce": []}
    with tempfile.TemporaryDirectory() as scratch:
        spark_sink(spark, bootstrap, source, records, records, False, scratch)  # JIT, pools
        for run in range(2):
            for mode in rates:
                rate = spark_sink(spark, bootstrap, source, records, batch,
                                  mode == "exactlyOnce", scratch)
                rates[mode].append(rate)
                print(f"spark run {run + 1} {mode}: {rate:,.0f} records/s", flush=True)
    spark.stop()
    return rates


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float], fmt: Callable[[float], str]) -> str:
    return f"{fmt(median(values))} ({fmt(min(values))}–{fmt(max(values))})"


def git_commit() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).resolve().parents[1])
    return result.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=3_000_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--consume-runs", type=int, default=3)
    parser.add_argument("--spark-records", type=int, default=0)
    parser.add_argument("--spark-batch", type=int, default=100_000)
    args = parser.parse_args()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} cores, {now}, commit "
          f"{git_commit()}, load average {os.getloadavg()[0]:.2f}; one node, "
          f"{args.records:,} records of 100 bytes, {args.partitions} partition(s), "
          f"TMPDIR={os.environ.get('TMPDIR', '/tmp')}", flush=True)
    rates: dict[str, list[float]] = {"plain": [], "idempotent": [], "txn 100 ms": [],
                                     "txn 1 s": []}
    txn_topic = ""
    with LocalCluster(startup_timeout_s=60) as cluster:
        bootstrap = cluster.bootstrap_servers
        warm = create_topic(bootstrap, args.partitions)  # start the coordinators' topics
        produce_transactional(bootstrap, warm, 10_000, 0.1)
        for run in range(args.runs):
            for mode in rates:
                topic = create_topic(bootstrap, args.partitions)
                if mode in ("plain", "idempotent"):
                    rate = produce_plain(bootstrap, topic, args.records, mode == "idempotent")
                    note = ""
                else:
                    interval = 0.1 if mode == "txn 100 ms" else 1.0
                    rate, transactions = produce_transactional(bootstrap, topic, args.records,
                                                               interval)
                    note = f", {transactions} transactions"
                    if mode == "txn 100 ms":
                        txn_topic = topic
                rates[mode].append(rate)
                print(f"run {run + 1} {mode}: {rate:,.0f} records/s{note}", flush=True)
        consumed: dict[str, list[float]] = {"read_uncommitted": [], "read_committed": []}
        for run in range(args.consume_runs):
            order = list(consumed) if run % 2 == 0 else list(reversed(consumed))
            for isolation in order:  # alternating which one reads first
                rate = consume(bootstrap, txn_topic, args.partitions, args.records, isolation)
                consumed[isolation].append(rate)
                print(f"consume run {run + 1} {isolation}: {rate:,.0f} records/s", flush=True)
        sink_rates = spark_part(bootstrap, args.spark_records, args.spark_batch) \
            if args.spark_records else {}

    def thousands(value: float) -> str:
        return f"{value:,.0f}"

    plain = median(rates["plain"])
    print("\n| mode | records/s, median (min–max) | vs plain acks=all |")
    print("| --- | --- | --- |")
    for mode, values in rates.items():
        print(f"| {mode} | {spread(values, thousands)} | {median(values) / plain:.2f} |")
    uncommitted = median(consumed["read_uncommitted"])
    print("\n| consumer | records/s, median (min–max) | vs read_uncommitted |")
    print("| --- | --- | --- |")
    for isolation, values in consumed.items():
        print(f"| {isolation} | {spread(values, thousands)} | "
              f"{median(values) / uncommitted:.2f} |")
    if sink_rates:
        at_least_once = median(sink_rates["at-least-once"])
        print(f"\n| Spark sink ({args.spark_records:,} records, micro-batches of "
              f"{args.spark_batch:,}) | records/s, median (min–max) | vs at-least-once |")
        print("| --- | --- | --- |")
        for mode, values in sink_rates.items():
            print(f"| {mode} | {spread(values, thousands)} | "
                  f"{median(values) / at_least_once:.2f} |")


if __name__ == "__main__":
    main()
