"""Time building and iterating 100,000 small records per codec.

Run: .venv/bin/python benchmarks/records_codec.py
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial

from pykraft.records.codecs import CompressionType
from pykraft.records.record import Header, Record, build_batch, iter_records

RECORDS_COUNT = 100_000
ROUNDS = 3


def best_of(action: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
    return best


def iterate(batch: bytes) -> list[Record]:
    return list(iter_records(batch))


def measure(label: str, records: Sequence[tuple[bytes, bytes, Sequence[Header], int]]) -> None:
    for codec in CompressionType:
        batch = build_batch(records, compression=codec)
        build_seconds = best_of(partial(build_batch, records, compression=codec))
        iterate_seconds = best_of(partial(iterate, batch))
        print(
            f"{label:<22} {codec.name:<6} build {build_seconds * 1000:5.0f} ms  "
            f"iterate {iterate_seconds * 1000:5.0f} ms  batch {len(batch):>9} bytes"
        )


def main() -> None:
    start_ms = 1_700_000_000_000
    plain = [
        (b"key-%d" % index, b"value-%d-%s" % (index, b"x" * 20), (), start_ms + index)
        for index in range(RECORDS_COUNT)
    ]
    measure("no headers, ~40 B", plain)
    with_headers = [
        (key, value, (("trace-id", b"%016x" % index), ("source", b"bench")), timestamp)
        for index, (key, value, _, timestamp) in enumerate(plain)
    ]
    measure("2 headers, ~90 B", with_headers)


if __name__ == "__main__":
    main()
