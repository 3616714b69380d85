"""Offset-range planning (pure): admission control never exceeds the limit, splits have no
overlap or gap, data loss is found and reported or skipped."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykraft.spark.planning import (
    DataLossError,
    OffsetRange,
    admit,
    delays_trigger,
    next_end_offsets,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
    report_data_loss,
    split_ranges,
)

tables = st.dictionaries(st.tuples(st.sampled_from("abc"), st.integers(0, 5)),
                         st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)),
                         max_size=12)


@given(tables, st.integers(1, 20_000))
def test_admit_bounds_the_total_and_each_partition(table: dict, limit: int) -> None:
    """The admitted total is min(limit, available), every partition within [start, latest]."""
    start = {tp: min(a, b) for tp, (a, b) in table.items()}
    latest = {tp: max(a, b) for tp, (a, b) in table.items()}
    end = admit(start, latest, limit)
    assert set(end) == set(latest)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in latest)
    available = sum(latest[tp] - start[tp] for tp in latest)
    assert sum(end[tp] - start[tp] for tp in latest) == min(limit, available)


def test_admit_worked_example() -> None:
    """The module docstring's example: 30 and 10 available, limit 10 -> 8 and 2."""
    assert admit({("a", 0): 0, ("b", 0): 0}, {("a", 0): 30, ("b", 0): 10}, 10) == \
        {("a", 0): 8, ("b", 0): 2}


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 3000)), max_size=6),
       st.integers(1, 40), st.one_of(st.none(), st.integers(1, 500)))
def test_split_covers_each_range_exactly(bounds: list, min_partitions: int,
                                         max_records: int | None) -> None:
    """Pieces tile each range with no overlap or gap, honour both options where possible."""
    ranges = [OffsetRange("t", i, low, low + size) for i, (low, size) in enumerate(bounds)
              if size > 0]
    pieces = split_ranges(ranges, min_partitions=min_partitions,
                          max_records_per_partition=max_records)
    for r in ranges:
        mine = [p for p in pieces if p.partition == r.partition]
        assert mine[0].from_offset == r.from_offset and mine[-1].until_offset == r.until_offset
        assert all(a.until_offset == b.from_offset for a, b in zip(mine, mine[1:], strict=False))
        assert all(p.size > 0 for p in mine)
    total = sum(r.size for r in ranges)
    assert len(pieces) >= min(min_partitions, total)
    if max_records is not None:
        assert all(p.size <= max_records for p in pieces)


def test_min_partitions_splits_one_big_partition_evenly() -> None:
    pieces = split_ranges([OffsetRange("t", 0, 100, 1100)], min_partitions=4)
    assert [(p.from_offset, p.until_offset) for p in pieces] == \
        [(100, 350), (350, 600), (600, 850), (850, 1100)]


def test_plan_ranges_reports_deleted_offsets_and_skips_ahead() -> None:
    """A start below the log start offset is data loss; the plan starts at the log start."""
    plan = plan_ranges({("t", 0): 10, ("t", 1): 0}, {("t", 0): 50, ("t", 1): 5},
                       {("t", 0): 30, ("t", 1): 0})
    assert plan.ranges == (OffsetRange("t", 0, 30, 50), OffsetRange("t", 1, 0, 5))
    assert plan.losses == ("Partition t-0: offsets 10 to 29 were deleted before they were "
                           "read (log start offset 30).",)


def test_plan_ranges_new_partition_gone_partition_and_backwards_end() -> None:
    plan = plan_ranges({("t", 0): 10, ("t", 1): 7}, {("t", 0): 5, ("t", 1): 9, ("t", 2): 4},
                       {("t", 0): 0, ("t", 2): 0})
    assert plan.ranges == (OffsetRange("t", 2, 0, 4),)  # new partitions start at offset 0
    assert len(plan.losses) == 2
    assert "went back from 10 to 5" in plan.losses[0]
    assert "t-1 is gone" in plan.losses[1]


def test_next_end_offsets_drops_gone_partitions_and_limits_from_log_start() -> None:
    end, losses = next_end_offsets({("t", 0): 0, ("gone", 0): 3},
                                   {("t", 0): 100, ("t", 1): 10},
                                   {("t", 0): 60, ("t", 1): 0}, limit=20)
    assert losses == ["Partition gone-0 is gone (its topic was deleted, or no longer matches); "
                      "it was at offset 3."]
    # 40 available from t-0's log start, 10 from new t-1: 20 shared 16/4
    assert end == {("t", 0): 76, ("t", 1): 4}


def test_report_data_loss_fails_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(DataLossError, match="offsets 1 to 2 were deleted.*failOnDataLoss"):
        report_data_loss(["offsets 1 to 2 were deleted."], fail=True)
    with caplog.at_level(logging.WARNING, logger="pykraft.spark"):
        report_data_loss(["offsets 1 to 2 were deleted."], fail=False)
    assert "skipped lost data" in caplog.text and "offsets 1 to 2" in caplog.text


def test_offsets_json_is_sparks_shape() -> None:
    table = {("b", 1): 5, ("a", 0): 7, ("a", 10): 2}
    assert offsets_to_json(table) == {"a": {"0": 7, "10": 2}, "b": {"1": 5}}
    assert offsets_from_json(offsets_to_json(table)) == table


def test_min_offsets_per_trigger_delays_until_enough_or_too_late() -> None:
    start = {("t", 0): 10, ("t", 1): 5}
    few = {("t", 0): 15, ("t", 1): 8}  # 8 new
    enough = {("t", 0): 15, ("t", 1): 7, ("t", 2): 3}  # 7 new + a new partition's 3 from 0
    assert delays_trigger(start, few, 10, 1_000, 60_000)
    assert not delays_trigger(start, enough, 10, 1_000, 60_000)
    assert not delays_trigger(start, few, 10, 60_000, 60_000), "the delay has run out"
    assert not delays_trigger(start, few, None, 0, 60_000), "no minimum: never delayed"
    assert delays_trigger(start, start, 1, 0, 60_000), "nothing new at all"
