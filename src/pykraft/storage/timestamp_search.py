"""ListOffsets by timestamp: the exact record inside the one batch the indexes lead to.

The log finds the first batch whose max timestamp reaches the target from batch headers
alone; Kafka answers with the first *record* at or after the target, so that one batch is
decoded here (`records.record.iter_records`, which decompresses as needed).
"""

from __future__ import annotations

from typing import Final

from pykraft.records.batch import read_header
from pykraft.records.record import iter_records

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "first_record_at_or_after",
]

LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
MAX_TIMESTAMP: Final = -3
EARLIEST_LOCAL_TIMESTAMP: Final = -4


def first_record_at_or_after(
    batch: bytes, target_timestamp: int, min_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record with timestamp >= target and offset >= min."""
    header = read_header(batch)
    if header.max_timestamp < target_timestamp:
        return None
    if header.is_log_append_time:  # every record carries the batch's timestamp
        offset = max(header.base_offset, min_offset)
        return (offset, header.max_timestamp) if offset <= header.last_offset else None
    for record in iter_records(batch):
        if record.timestamp >= target_timestamp and record.offset >= min_offset:
            return record.offset, record.timestamp
    return None
