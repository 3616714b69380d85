"""Partition replication benchmark (issue 5): one controller and three brokers on loopback.

1. Produce throughput, 100-byte records, one partition: RF=1 acks=1, RF=3 acks=1 and
   RF=3 acks=all (`pykraft perf produce`, confluent-kafka, batch.size 1 MiB, linger 5 ms).
2. End-to-end latency at a steady rate (`--rate`, default 10,000 records/s) for RF=3 with
   acks=all and acks=1, confluent-kafka's default producer settings (linger.ms 5): a
   producer thread notes each record's send time on the monotonic clock, a consumer in the
   same process reads it back; p50/p99 of receive - send.
3. Unavailability after kill -9 of the partition's leader while a producer (acks=all,
   min.insync.replicas=2, retries) sends every 5 ms: the longest gap between acknowledgements
   around the kill, per trial, for each `--session-timeouts` value of
   broker.session.timeout.ms (default 9000 = Kafka's; heartbeats every 2000 ms).

    .venv/bin/python benchmarks/replication.py [--records 1000000] [--rate 10000]
        [--seconds 10] [--trials 3] [--session-timeouts 9000,3000]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pykraft.testing import LocalCluster  # noqa: E402


def create_topic(cluster: LocalCluster, rf: int, configs: dict[str, str] | None = None) -> str:
    name = f"bench-{rf}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=rf,
                                  config=configs or {})])[name].result(30)
    wait_in_sync(admin, name, rf)
    return name


def wait_in_sync(admin: AdminClient, topic: str, rf: int, timeout_s: float = 60) -> int:
    """The leader, once the partition's ISR holds all `rf` replicas."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        partition = admin.list_topics(topic, timeout=10).topics[topic].partitions.get(0)
        if partition is not None and partition.leader >= 0 and len(partition.isrs) == rf:
            return int(partition.leader)
        time.sleep(0.1)
    raise SystemExit(f"{topic} never had {rf} replicas in sync")


def throughput(cluster: LocalCluster, topic: str, acks: str, records: int) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "pykraft", "perf", "produce", "--bootstrap-server",
         cluster.bootstrap_servers, "--topic", topic, "--num-records", str(records),
         "--record-size", "100", "--producer-props", f"acks={acks}", "batch.size=1048576",
         "linger.ms=5"], capture_output=True, text=True, timeout=900)
    lines = result.stdout.strip().splitlines()
    return lines[-1] if lines else result.stderr[-300:]


def end_to_end(cluster: LocalCluster, topic: str, acks: str, rate: int,
               seconds: float) -> tuple[float, float, int]:
    """p50 and p99 (ms) of send -> receive, and the number of records measured."""
    latencies: list[float] = []
    sent: dict[int, float] = {}
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": acks})
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": f"e2e-{uuid.uuid4().hex[:6]}", "fetch.wait.max.ms": 10,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, -1)])  # from the end: only new records
    consumer.poll(1.0)
    stop = threading.Event()

    def send() -> None:
        interval, sequence = 1.0 / rate, 0
        started = time.monotonic()
        while not stop.is_set():
            due = started + sequence * interval
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            sent[sequence] = time.monotonic()
            producer.produce(topic, str(sequence).encode())
            producer.poll(0)
            sequence += 1
        producer.flush(30)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    warm_until = time.monotonic() + 1.0
    end = time.monotonic() + 1.0 + seconds
    while time.monotonic() < end:
        message = consumer.poll(0.05)
        if message is None or message.error() is not None:
            continue
        now = time.monotonic()
        at = sent.get(int(message.value()))
        if at is not None and now > warm_until:
            latencies.append((now - at) * 1000)
    stop.set()
    sender.join(60)
    consumer.close()
    latencies.sort()
    if not latencies:
        raise SystemExit("no record came back")
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return statistics.median(latencies), p99, len(latencies)


def unavailability(cluster: LocalCluster, trials: int) -> list[float]:
    topic = create_topic(cluster, 3, {"min.insync.replicas": "2"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    windows = []
    for _ in range(trials):
        windows.append(kill_trial(cluster, admin, topic))
    return windows


def kill_trial(cluster: LocalCluster, admin: AdminClient, topic: str) -> float:
    """Seconds of the longest gap between acknowledgements around a kill -9 of the
    leader; the leader is restarted and back in sync afterwards."""
    acked: list[float] = []
    stop = threading.Event()
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "linger.ms": 0, "enable.idempotence": False,
                         "retry.backoff.ms": 50, "retry.backoff.max.ms": 200,
                         "message.timeout.ms": 60_000,
                         "topic.metadata.refresh.interval.ms": 200})

    def delivered(error: Any, _message: Any) -> None:
        if error is None:
            acked.append(time.monotonic())

    def send() -> None:
        while not stop.is_set():
            producer.produce(topic, b"x", on_delivery=delivered)
            producer.poll(0.005)
        producer.flush(60)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    time.sleep(2.0)
    leader = wait_in_sync(admin, topic, 3)
    killed = time.monotonic()
    cluster.kill_node(leader, signal.SIGKILL)
    while not any(at > killed + 0.5 for at in acked):
        time.sleep(0.05)
        if time.monotonic() - killed > 120:
            raise SystemExit("produce never resumed")
    time.sleep(1.0)
    stop.set()
    sender.join(90)
    around = sorted(at for at in acked if at > killed - 1.0)
    cluster.restart_node(leader)
    wait_in_sync(admin, topic, 3)
    return max(b - a for a, b in zip(around, around[1:], strict=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--session-timeouts", default="9000,3000")
    args = parser.parse_args()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# {platform.node()} {platform.machine()}, {now}; 1 controller + 3 brokers")
    with LocalCluster(controllers=1, brokers=3, startup_timeout_s=60) as cluster:
        for rf, acks in ((1, "1"), (3, "1"), (3, "all")):
            topic = create_topic(cluster, rf)
            print(f"throughput RF={rf} acks={acks}: "
                  f"{throughput(cluster, topic, acks, args.records)}", flush=True)
        for acks in ("all", "1"):
            topic = create_topic(cluster, 3)
            p50, p99, count = end_to_end(cluster, topic, acks, args.rate, args.seconds)
            print(f"end-to-end RF=3 acks={acks} at {args.rate:,} records/s: p50 {p50:.1f} ms, "
                  f"p99 {p99:.1f} ms ({count:,} records)", flush=True)
    for timeout_ms in (int(t) for t in args.session_timeouts.split(",")):
        configs = {"broker.session.timeout.ms": str(timeout_ms)}
        with LocalCluster(controllers=1, brokers=3, configs=configs,
                          startup_timeout_s=60) as cluster:
            windows = unavailability(cluster, args.trials)
        print(f"kill -9 of the leader, broker.session.timeout.ms={timeout_ms}: produce "
              f"stalled {', '.join(f'{w:.2f}' for w in windows)} s "
              f"(median {statistics.median(windows):.2f} s)", flush=True)


if __name__ == "__main__":
    main()
