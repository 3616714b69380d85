"""Shared helpers for the storage tests: batch building, small-segment configs, crash copies."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from pykraft.records.batch import iter_headers
from pykraft.records.record import build_batch
from pykraft.storage.log import Log
from pykraft.storage.log_config import LogConfig


def make_batch(
    count: int = 1,
    timestamp: int = 1_000,
    value_size: int = 10,
    *,
    timestamps: list[int] | None = None,
    compression: int = 0,
    base_offset: int = 0,
    leader_epoch: int = -1,
) -> bytearray:
    """A v2 batch of `count` records (values of `value_size` bytes)."""
    stamps = timestamps if timestamps is not None else [timestamp + i for i in range(count)]
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]] = [
        (f"k{i}".encode(), bytes([i % 251]) * value_size, [], stamps[i]) for i in range(count)
    ]
    return bytearray(
        build_batch(
            records, base_offset=base_offset, compression=compression,
            partition_leader_epoch=leader_epoch,
        )
    )


def small_config(**overrides: Any) -> LogConfig:
    """Tiny segments and a dense index so a few batches exercise rolls and index lookups."""
    values: dict[str, Any] = {
        "segment_bytes": 1_000,
        "index_interval_bytes": 64,
        "segment_index_bytes": 4_096,
        "file_delete_delay_ms": 0,
    }
    values.update(overrides)
    return dataclasses.replace(LogConfig(), **values)


def open_log(directory: Path, config: LogConfig, *, recovery_point: int = 0,
             now_ms: int = 0, log_start_offset: int | None = None,
             had_clean_shutdown: bool = False) -> Log:
    return Log.open(
        directory, config, recovery_point=recovery_point, log_start_offset=log_start_offset,
        now_ms=now_ms, had_clean_shutdown=had_clean_shutdown,
    )


def all_batches(log: Log) -> list[bytes]:
    """Every batch of the log, read through `Log.read` from the log start."""
    result: list[bytes] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20)
        if not info.records:
            break
        for position, header in iter_headers(info.records):
            result.append(bytes(info.records[position : position + header.size]))
        offset = info.next_offset
    return result


def crash_copy(log: Log, target: Path) -> Path:
    """The partition directory as a crash would leave it (files copied while still open)."""
    destination = target / log.dir.name
    shutil.copytree(log.dir, destination)
    return destination
