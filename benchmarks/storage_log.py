"""Micro-benchmark of Log append, read and recovery (page cache, no fsync).

Run: .venv/bin/python benchmarks/storage_log.py
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

from pykraft.records.record import build_batch
from pykraft.storage.log import Log
from pykraft.storage.log_config import LogConfig


def _open(directory: Path) -> Log:
    config = dataclasses.replace(LogConfig(), segment_bytes=256 << 20)
    return Log.open(directory, config, recovery_point=0, log_start_offset=None, now_ms=0)


def bench(batch_bytes: int, total_mib: int, records_per_batch: int) -> None:
    value = b"v" * (batch_bytes // records_per_batch - 20)
    batch = build_batch([(None, value, [], 1000 + i) for i in range(records_per_batch)])
    with tempfile.TemporaryDirectory() as root:
        log = _open(Path(root) / "bench-0")
        count = (total_mib << 20) // len(batch)
        buffers = [bytearray(batch) for _ in range(min(count, 64))]
        started = time.perf_counter()
        for index in range(count):
            log.append_as_leader(buffers[index % len(buffers)], leader_epoch=1, now_ms=1000)
        appended = time.perf_counter()
        log.update_high_watermark(log.log_end_offset)
        offset, read_bytes = 0, 0
        while offset < log.log_end_offset:
            info = log.read(offset, 1 << 20, max_offset=log.high_watermark)
            read_bytes, offset = read_bytes + len(info.records), info.next_offset
        read = time.perf_counter()
        size = log.size_bytes
        log.close()
        reopened_at = time.perf_counter()
        _open(log.dir).close()  # recovery_point=0: every batch re-read and CRC-checked
        recovered = time.perf_counter()
    print(
        f"{len(batch):>8}-byte batches: append {size / (appended - started) / 1e6:7.0f} MB/s "
        f"({count / (appended - started):6.0f}/s), read {read_bytes / (read - appended) / 1e6:7.0f}"
        f" MB/s, recovery {size / (recovered - reopened_at) / 1e6:6.0f} MB/s"
    )


if __name__ == "__main__":
    bench(1 << 20, 512, 1000)
    bench(64 << 10, 256, 64)
    bench(4 << 10, 64, 4)
