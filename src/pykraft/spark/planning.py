"""Offset-range planning for the "pykraft" source: pure functions over offset tables.

A table maps (topic, partition) to an offset. A micro-batch is the half-open range
[start, end) of every partition; Spark keeps `end` in its checkpoint (offsets log) in the JSON
shape of its Kafka source, {"topic": {"0": 42}}, and gives it back as the next `start`, so a
restarted query plans exactly the ranges it planned before.

Data loss: offsets planned but no longer in the log (retention deleted them, the partition
vanished, or the log end moved backwards). With failOnDataLoss the query stops with
`DataLossError`; without, the loss is logged and reading skips ahead.

Worked example of admission control (maxOffsetsPerTrigger=10): partitions a and b have 30 and
10 new offsets. Shares are 10*30/40 = 7.5 and 10*10/40 = 2.5; floors 7 and 2 leave one offset,
given to the largest remainder (a tie here, broken by partition order): a gets 8, b gets 2.
Unlike Spark's Kafka source (which rounds small shares up), the total never exceeds the limit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pykraft.spark.options import Partition

__all__ = [
    "DataLossError",
    "OffsetRange",
    "Plan",
    "admit",
    "delays_trigger",
    "next_end_offsets",
    "offsets_from_json",
    "offsets_to_json",
    "plan_ranges",
    "report_data_loss",
    "split_ranges",
]

log = logging.getLogger("pykraft.spark")

FAIL_HINT = ("Some data may have been lost: it is no longer in the topic (deleted by retention, "
             "or the topic or partition was deleted). If you want the query to go on, skipping "
             "what is lost, set the source option 'failOnDataLoss' to 'false'.")


class DataLossError(RuntimeError):
    """Planned offsets are gone from the log and the query has failOnDataLoss=true."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    topic: str
    partition: int
    from_offset: int
    until_offset: int  # exclusive

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


@dataclass(frozen=True, slots=True)
class Plan:
    ranges: tuple[OffsetRange, ...]
    losses: tuple[str, ...]  # one sentence per partition that lost data


def offsets_to_json(offsets: Mapping[Partition, int]) -> dict[str, dict[str, int]]:
    document: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        document.setdefault(topic, {})[str(partition)] = offset
    return document


def offsets_from_json(document: Mapping[str, Mapping[str, int]]) -> dict[Partition, int]:
    return {(topic, int(partition)): int(offset)
            for topic, per_partition in document.items()
            for partition, offset in per_partition.items()}


def report_data_loss(losses: Iterable[str], *, fail: bool) -> None:
    messages = list(losses)
    if not messages:
        return
    if fail:
        raise DataLossError(" ".join(messages) + " " + FAIL_HINT)
    for message in messages:
        log.warning("pykraft source skipped lost data (failOnDataLoss=false): %s", message)


def admit(start: Mapping[Partition, int], latest: Mapping[Partition, int],
          limit: int | None) -> dict[Partition, int]:
    """End offsets admitting at most `limit` offsets in total, shared in proportion to what
    each partition has available (largest remainder); every partition in `latest` appears."""
    available = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(available.values())
    if limit is None or total <= limit:
        return {tp: start.get(tp, latest[tp]) + available[tp] for tp in latest}
    shares = {tp: limit * size // total for tp, size in available.items()}
    left = limit - sum(shares.values())
    by_remainder = sorted(available, key=lambda tp: (-(limit * available[tp] % total), tp))
    for tp in by_remainder[:left]:
        shares[tp] += 1  # a remainder > 0 implies share < available, so this never overshoots
    return {tp: start.get(tp, latest[tp]) + shares[tp] for tp in latest}


def delays_trigger(start: Mapping[Partition, int], latest: Mapping[Partition, int],
                   min_offsets: int | None, since_last_trigger_ms: int,
                   max_delay_ms: int) -> bool:
    """minOffsetsPerTrigger: skip this trigger (plan no batch) while fewer offsets than
    `min_offsets` are new, until `max_delay_ms` has passed since the last batch was planned.
    New partitions count from offset 0, as Spark's Kafka source counts them."""
    if min_offsets is None:
        return False
    new = sum(max(0, offset - start.get(tp, 0)) for tp, offset in latest.items())
    return new < min_offsets and since_last_trigger_ms < max_delay_ms


def next_end_offsets(start: Mapping[Partition, int], latest: Mapping[Partition, int],
                     earliest: Mapping[Partition, int], limit: int | None,
                     ) -> tuple[dict[Partition, int], list[str]]:
    """The end of the next micro-batch, and the data losses seen on the way.

    Partitions new since `start` begin at offset 0 (their first record, as in Spark); a start
    below the log start offset begins at the log start offset for the sake of the limit
    (`plan_ranges` reports that loss); partitions gone from `latest` are losses."""
    losses = [f"Partition {topic}-{partition} is gone (its topic was deleted, or no longer "
              f"matches); it was at offset {offset}."
              for (topic, partition), offset in sorted(start.items()) if (topic, partition)
              not in latest]
    effective: dict[Partition, int] = {}
    for tp, latest_offset in latest.items():
        from_offset = start.get(tp, 0)
        if latest_offset < from_offset:
            effective[tp] = latest_offset  # the log end moved backwards: plan_ranges reports it
        else:
            effective[tp] = max(from_offset, min(earliest.get(tp, 0), latest_offset))
    return admit(effective, latest, limit), losses


def plan_ranges(start: Mapping[Partition, int], end: Mapping[Partition, int],
                earliest: Mapping[Partition, int]) -> Plan:
    """The ranges [start, end) of every partition in `end`, clipped to what the log holds."""
    ranges: list[OffsetRange] = []
    losses: list[str] = []
    for (topic, partition), until_offset in sorted(end.items()):
        from_offset = start.get((topic, partition), 0)
        name = f"{topic}-{partition}"
        if until_offset < from_offset:
            losses.append(f"Partition {name}'s offset went back from {from_offset} to "
                          f"{until_offset} (was the topic re-created?).")
            continue
        log_start = earliest.get((topic, partition))
        if log_start is None:
            if until_offset > from_offset:
                losses.append(f"Partition {name} is gone; offsets {from_offset} to "
                              f"{until_offset - 1} cannot be read.")
            continue
        if from_offset < log_start:
            skip_to = min(log_start, until_offset)
            if skip_to > from_offset:
                losses.append(f"Partition {name}: offsets {from_offset} to {skip_to - 1} were "
                              f"deleted before they were read (log start offset {log_start}).")
            from_offset = skip_to
        if until_offset > from_offset:
            ranges.append(OffsetRange(topic, partition, from_offset, until_offset))
    return Plan(tuple(ranges), tuple(losses))


def split_ranges(ranges: Iterable[OffsetRange], *, min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Cut ranges into contiguous pieces, with no overlap or gap: none longer than
    max_records_per_partition, and at least min_partitions pieces when there are at least
    that many offsets, shared in proportion to each range's size."""
    pieces = [piece for r in ranges
              for piece in _cut(r, _ceil_div(r.size, max_records_per_partition)
                                if max_records_per_partition else 1)]
    total = sum(r.size for r in pieces)
    if not min_partitions or len(pieces) >= min_partitions or total == 0:
        return pieces
    wanted = min(min_partitions, total)
    parts = [max(1, r.size * wanted // total) for r in pieces]
    by_remainder = sorted(range(len(pieces)),
                          key=lambda i: (-(pieces[i].size * wanted % total), i))
    left = wanted - sum(parts)
    for i in by_remainder:
        if left <= 0:
            break
        if parts[i] < pieces[i].size:
            parts[i] += 1
            left -= 1
    return [piece for r, count in zip(pieces, parts, strict=True) for piece in _cut(r, count)]


def _cut(r: OffsetRange, count: int) -> list[OffsetRange]:
    count = max(1, min(count, r.size))
    bounds = [r.from_offset + r.size * i // count for i in range(count + 1)]
    return [OffsetRange(r.topic, r.partition, low, high)
            for low, high in zip(bounds, bounds[1:], strict=False)]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)
