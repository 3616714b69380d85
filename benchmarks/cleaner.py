"""Benchmark of the log cleaner: dirty MB/s processed, records/s, offset map size, peak RSS.

Builds a compacted log directly through `Log` (page cache, no network): `--keys` keys updated
`--updates` times in batches of `--batch` records, rolled so all of it is cleanable, then runs
the cleaner to completion on this thread and reports. The dirty section is the whole log.

Run: .venv/bin/python benchmarks/cleaner.py [--keys 10000] [--updates 1000000]
     [--value-bytes 20] [--batch 100] [--compression 0] [--dedupe-mib 128]

With `--impact`, against a real node (LocalCluster, a subprocess): produce throughput on one
topic for `--seconds` while nothing is cleaned, then again while the cleaner compacts
another topic of `--updates` records (written as a delete topic, then switched to compact),
and the time that compaction took.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import resource
import tempfile
import time
from pathlib import Path

from pykraft.records.record import build_batch
from pykraft.storage.cleaner import CleanerConfig, LogCleaner
from pykraft.storage.log import Log
from pykraft.storage.log_config import LogConfig

NOW_MS = 1_700_000_000_000


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--updates", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--compression", type=int, default=0, help="0 none, 1 gzip, 3 lz4, 4 zstd")
    parser.add_argument("--dedupe-mib", type=int, default=128)
    parser.add_argument("--impact", action="store_true")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--io-max-mb", type=float, default=None,
                        help="with --impact: log.cleaner.io.max.bytes.per.second in MB/s")
    args = parser.parse_args()
    if args.impact:
        impact(args)
        return
    rng = random.Random(1)
    config = dataclasses.replace(LogConfig(), cleanup_policy=("compact",),
                                 segment_bytes=64 << 20, min_cleanable_dirty_ratio=0.0)
    with tempfile.TemporaryDirectory() as root:
        log = Log.open(Path(root) / "bench-0", config, recovery_point=0, log_start_offset=None,
                       now_ms=NOW_MS)
        padding = b"." * args.value_bytes
        written = 0
        started = time.perf_counter()
        while written < args.updates:
            count = min(args.batch, args.updates - written)
            batch = build_batch(
                [(f"key-{rng.randrange(args.keys):08d}".encode(), padding, [], NOW_MS)
                 for _ in range(count)], compression=args.compression)
            log.append_as_leader(bytearray(batch), leader_epoch=0, now_ms=NOW_MS)
            written += count
        log.roll(NOW_MS)
        log.update_high_watermark(log.log_end_offset)
        built = time.perf_counter()
        dirty_bytes = log.size_bytes
        rss_before = _peak_rss_mib()
        cleaner = LogCleaner(
            CleanerConfig(dedupe_buffer_size=args.dedupe_mib << 20),
            lambda: [(log, Path(root))])
        passes, records_read, map_entries = 0, 0, 0
        clean_started = time.perf_counter()
        while (job := cleaner.clean_once(NOW_MS)) is not None:
            passes += 1
            records_read += job.stats.records_read
            map_entries = max(map_entries, job.stats.map_entries)
        cleaned = time.perf_counter()
        seconds = cleaned - clean_started
        print(f"log: {args.updates} updates of {args.keys} keys, {args.value_bytes}-byte values, "
              f"{args.batch}-record batches, codec {args.compression}: "
              f"{dirty_bytes / 1e6:.1f} MB built in {built - started:.1f}s")
        print(f"cleaned to {log.size_bytes / 1e6:.2f} MB in {seconds:.2f}s ({passes} passes): "
              f"{dirty_bytes / seconds / 1e6:.1f} MB/s of dirty log, "
              f"{records_read / seconds / 1e3:.0f}k records/s rewritten, "
              f"offset map {map_entries} entries")
        print(f"peak RSS {_peak_rss_mib():.0f} MiB (before cleaning {rss_before:.0f} MiB)")
        log.close()


def _produce_for(bootstrap: str, topic: str, seconds: float) -> float:
    """Records/s acknowledged while producing 100-byte records as fast as the client can."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1,
                         "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000})
    acknowledged = [0]

    def delivered(error: object, _: object) -> None:
        if error is None:
            acknowledged[0] += 1

    value = b"x" * 100
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(1000):
            try:
                producer.produce(topic, value, partition=0, on_delivery=delivered)
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)
    return acknowledged[0] / (time.perf_counter() - started)


def impact(args: argparse.Namespace) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
        ResourceType,
    )

    from pykraft.testing import LocalCluster

    configs = {"log.cleaner.backoff.ms": "100"}
    if args.io_max_mb is not None:
        configs["log.cleaner.io.max.bytes.per.second"] = str(args.io_max_mb * 1e6)
    with LocalCluster(configs=configs) as node:
        bootstrap = node.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [NewTopic("hot", 1, 1),
                  NewTopic("dirty", 1, 1, config={"segment.bytes": str(16 << 20)})]
        for future in admin.create_topics(topics).values():
            future.result(30)
        rng = random.Random(1)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                             "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000})
        padding = b"." * args.value_bytes
        for _ in range(args.updates):
            key = f"key-{rng.randrange(args.keys):08d}".encode()
            while True:
                try:
                    producer.produce("dirty", padding, key=key, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(300)
        directory = node.log_dir / "dirty-0"

        def dirty_bytes() -> int:
            return sum(path.stat().st_size for path in directory.glob("*.log"))

        size = dirty_bytes()
        baseline = _produce_for(bootstrap, "hot", args.seconds)
        change = ConfigResource(ResourceType.TOPIC, "dirty", incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([change])[change].result(30)
        switched = time.perf_counter()
        during = _produce_for(bootstrap, "hot", args.seconds)
        while dirty_bytes() > size // 4 and time.perf_counter() - switched < 600:
            time.sleep(0.1)
        compacted = time.perf_counter() - switched
        print(f"dirty topic: {args.updates} records of {args.keys} keys, {size / 1e6:.0f} MB; "
              f"compacted to {dirty_bytes() / 1e6:.1f} MB within {compacted:.1f}s "
              f"({size / compacted / 1e6:.1f} MB/s, produce load included)")
        print(f"produce on another partition: {baseline:,.0f} records/s idle, "
              f"{during:,.0f} records/s while cleaning (ratio {during / baseline:.2f})")


if __name__ == "__main__":
    main()
