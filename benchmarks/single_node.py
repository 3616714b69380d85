"""Single-node throughput: `pykraft perf` against one pykraft node on loopback.

For 1 and 6 partitions, uncompressed and lz4: produce N records of 100 bytes with acks=1
and client batching up to 1 MiB, then consume them all. Reports records/s and MB/s from
the perf tools, the broker's CPU seconds per GB of record payload (from /proc), and its
resident memory at idle and at its peak under load.

    .venv/bin/python benchmarks/single_node.py [--records 3000000] [--markdown]
"""

from __future__ import annotations

import argparse
import platform
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pykraft.testing import LocalCluster  # noqa: E402

RECORD_BYTES = 100
TICKS_PER_SECOND = 100  # Linux USER_HZ


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND  # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class PeakRss:
    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib(self.pid))
            time.sleep(0.05)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Result:
    partitions: int
    codec: str
    produce_rps: float
    produce_mbps: float
    p99_ms: float
    consume_rps: float
    consume_mbps: float
    cpu_s_per_gb_produce: float
    cpu_s_per_gb_consume: float
    rss_peak_mib: float


def run_perf(args: list[str]) -> str:
    result = subprocess.run([sys.executable, "-m", "pykraft", "perf", *args],
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"perf {args[0]} failed: {result.stderr[-2000:]}")
    return result.stdout


def one_case(cluster: LocalCluster, pid: int, partitions: int, codec: str,
             records: int) -> Result:
    topic = f"bench-{partitions}p-{codec}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replication_factor=1)])[topic].result(30)
    gigabytes = records * RECORD_BYTES / 1e9
    with PeakRss(pid) as peak:
        cpu_before = cpu_seconds(pid)
        produced = run_perf([
            "produce", "--bootstrap-server", cluster.bootstrap_servers, "--topic", topic,
            "--num-records", str(records), "--record-size", str(RECORD_BYTES),
            "--throughput", "-1", "--producer-props", "acks=1", "batch.size=1048576",
            "linger.ms=5", f"compression.type={codec}"])
        cpu_produce = cpu_seconds(pid) - cpu_before
        cpu_before = cpu_seconds(pid)
        consumed = run_perf([
            "consume", "--bootstrap-server", cluster.bootstrap_servers, "--topic", topic,
            "--messages", str(records), "--timeout-ms", "30000"])
        cpu_consume = cpu_seconds(pid) - cpu_before
    final = produced.strip().splitlines()[-1]
    match = re.search(r"([\d.]+) records/sec \(([\d.]+) MB/sec\).*?([\d.]+) ms 99th", final)
    if match is None:
        raise RuntimeError(f"cannot parse perf produce output: {final}")
    row = consumed.strip().splitlines()[-1].split(",")
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, ...
    if int(row[4].strip()) != records:
        raise RuntimeError(f"consumed {row[4]} of {records} records")
    return Result(partitions, codec, float(match.group(1)), float(match.group(2)),
                  float(match.group(3)), float(row[5]), float(row[3]),
                  cpu_produce / gigabytes, cpu_consume / gigabytes, peak.peak)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=3_000_000)
    arguments = parser.parse_args()
    with LocalCluster() as cluster:
        assert cluster.process is not None
        pid = cluster.process.pid
        time.sleep(2)
        idle = rss_mib(pid)
        results = [one_case(cluster, pid, partitions, codec, arguments.records)
                   for partitions in (1, 6) for codec in ("none", "lz4")]
        idle_after = rss_mib(pid)
    print(f"machine: {platform.machine()}, {platform.processor() or '?'}, "
          f"{len(__import__('os').sched_getaffinity(0))} cores, Python {platform.python_version()}")
    print(f"records per case: {arguments.records:,} x {RECORD_BYTES} B, acks=1, "
          "batch.size=1 MiB, linger.ms=5")
    print(f"broker RSS idle: {idle:.0f} MiB at start, {idle_after:.0f} MiB after the runs")
    print()
    print("| partitions | codec | produce rec/s | produce MB/s | p99 ms | consume rec/s |"
          " consume MB/s | broker CPU s/GB produce | broker CPU s/GB consume |"
          " broker RSS peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r.partitions} | {r.codec} | {r.produce_rps:,.0f} | {r.produce_mbps:.1f} | "
              f"{r.p99_ms:.0f} | {r.consume_rps:,.0f} | {r.consume_mbps:.1f} | "
              f"{r.cpu_s_per_gb_produce:.1f} | {r.cpu_s_per_gb_consume:.1f} | "
              f"{r.rss_peak_mib:.0f} |")


if __name__ == "__main__":
    main()
