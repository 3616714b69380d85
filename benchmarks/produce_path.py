"""The broker's own cost of a produce, without a client's: raw Produce requests of one prebuilt
batch of just under 1 MiB (100-byte records), acks=1, sent back to back over one connection
to a real node process. Reports requests/s, MB/s and the node's CPU seconds per GB of batch
bytes (from /proc), per codec. Built to measure what checking every record
(records/validate.py) costs the produce path: run it against two checkouts and compare.

    .venv/bin/python benchmarks/produce_path.py [--seconds 10] [--codecs none,lz4,zstd]

With PYTHONPATH=<other checkout>/src the node and this script run that checkout's code.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

if not os.environ.get("PYTHONPATH"):  # else the checkout it names is the one measured
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402
from kio.schema.produce.v9.request import (  # noqa: E402
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)

from pykraft.records.codecs import CompressionType  # noqa: E402
from pykraft.records.record import build_batch  # noqa: E402
from pykraft.testing import LocalCluster  # noqa: E402
from pykraft.testing.wire import WireClient  # noqa: E402

RECORD_BYTES = 100
BATCH_BYTES = 1 << 20
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND  # utime + stime


def batch(codec: int) -> bytes:
    """Just under 1 MiB of records before compression: random-looking halves, so codecs work."""
    count = BATCH_BYTES // (RECORD_BYTES + 12)  # each record has ~10 bytes of framing
    now_ms = int(time.time() * 1000)
    records = [(None, os.urandom(RECORD_BYTES // 2) + b"x" * (RECORD_BYTES // 2), (), now_ms)
               for _ in range(count)]
    return build_batch(records, compression=codec)


def measure(client: WireClient, topic: str, records: bytes, seconds: float,
            pid: int) -> tuple[float, float, float]:
    request = ProduceRequest(acks=1, timeout=datetime.timedelta(seconds=10), topic_data=(
        TopicProduceData(name=topic, partition_data=(
            PartitionProduceData(index=0, records=records),)),))
    for _ in range(20):  # warm up
        client.request(0, 9, request)
    sent, cpu_before, started = 0, cpu_seconds(pid), time.monotonic()
    while time.monotonic() - started < seconds:
        answer = client.request(0, 9, request).responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.none, answer
        sent += 1
    elapsed, cpu = time.monotonic() - started, cpu_seconds(pid) - cpu_before
    gigabytes = sent * len(records) / 1e9
    return sent / elapsed, sent * len(records) / elapsed / 1e6, cpu / gigabytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--codecs", default="none,lz4,zstd")
    args = parser.parse_args()
    import pykraft
    print(f"code: {Path(pykraft.__file__).parent}")
    print("| codec | batch bytes | requests/s | MB/s | node CPU s/GB |")
    print("|---|---|---|---|---|")
    with LocalCluster(configs={"log.segment.bytes": str(256 << 20)}) as node, \
            WireClient(node.bootstrap_servers) as client:
        assert node.process is not None
        for name in args.codecs.split(","):
            codec = CompressionType[name.upper()]
            topic = f"produce-path-{name}"
            created = client.request(19, 7, CreateTopicsRequest(topics=(CreatableTopic(
                name=topic, num_partitions=1, replication_factor=1, assignments=(),
                configs=()),), timeout=datetime.timedelta(seconds=10), validate_only=False))
            assert created.topics[0].error_code == ErrorCode.none, created
            time.sleep(1)
            records = batch(codec)
            rate, megabytes, cpu = measure(client, topic, records, args.seconds,
                                           node.process.pid)
            print(f"| {name} | {len(records):,} | {rate:,.0f} | {megabytes:,.0f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()
