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
read_uncommitted and then read_committed (alternating, `--consume-runs` each); reported as
records/s and the ratio. Each figure is the median of `--runs` runs (modes interleaved).

The node's data directory is a temporary directory under $TMPDIR; on this machine /tmp is
much slower for file creation than /work, so run with TMPDIR set to a directory on /work:

    mkdir -p /work/tmp && TMPDIR=/work/tmp .venv/bin/python benchmarks/transactions.py \
        [--records 1000000] [--partitions 1] [--runs 3] [--consume-runs 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
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
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--consume-runs", type=int, default=3)
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
            for isolation in consumed:
                rate = consume(bootstrap, txn_topic, args.partitions, args.records, isolation)
                consumed[isolation].append(rate)
                print(f"consume run {run + 1} {isolation}: {rate:,.0f} records/s", flush=True)

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


if __name__ == "__main__":
    main()
