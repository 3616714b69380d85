"""A deterministic keyed workload with headers, and the check that a client read it back."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

PARTITIONS = 3
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True, slots=True)
class Sent:
    partition: int
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Received:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def workload(count: int, tag: str) -> list[Sent]:
    """Record i goes to partition i % 3 with a unique key, a compressible value, 2 headers."""
    records = []
    for i in range(count):
        key = f"{tag}-key-{i:07d}".encode()
        value = (f"value {i} of {tag} " * 3).encode()
        headers = (("seq", str(i).encode()), ("tag", tag.encode()))
        records.append(Sent(i % PARTITIONS, key, value, headers))
    return records


def check_round_trip(sent: list[Sent], received: Iterable[Received]) -> None:
    """Every record back exactly once, in send order within its partition, offsets dense."""
    by_partition: dict[int, list[Received]] = {p: [] for p in range(PARTITIONS)}
    for record in received:
        by_partition[record.partition].append(record)
    for partition in range(PARTITIONS):
        expected = [s for s in sent if s.partition == partition]
        got = sorted(by_partition[partition], key=lambda r: r.offset)
        assert len(got) == len(expected), (
            f"partition {partition}: {len(got)} records back, {len(expected)} sent")
        assert [r.offset for r in got] == list(range(len(got))), (
            f"partition {partition}: offsets are not 0..{len(got) - 1}")
        for want, have in zip(expected, got, strict=True):
            assert have.key == want.key, f"partition {partition} offset {have.offset}: key"
            assert have.value == want.value, f"partition {partition} offset {have.offset}: value"
            assert tuple(have.headers) == want.headers, (
                f"partition {partition} offset {have.offset}: headers {have.headers}")
