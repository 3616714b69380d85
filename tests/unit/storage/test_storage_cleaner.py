"""The log cleaner on real files: the pure cleaning decision, the offset map and its passes,
the rewrite (latest record per key, offsets and producer metadata kept, tombstones gone after
delete.retention.ms), the swap and what a crash at each swap step leaves; plus the produce-path
key check for compacted topics and DeleteRecords at the Log level."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykraft.errors import CorruptRecord, InvalidRecord, OffsetOutOfRange
from pykraft.records.batch import DELETE_HORIZON_BIT, BatchHeader
from pykraft.records.record import (
    ControlRecordType,
    Record,
    build_batch,
    control_record_key,
    end_txn_marker_value,
    iter_records,
    read_control_record_type,
)
from pykraft.storage import log_files
from pykraft.storage.cleaner import (
    CLEANER_OFFSET_CHECKPOINT,
    AbortedTxn,
    CleanerConfig,
    CleaningPlan,
    LogCleaner,
    LogFacts,
    SegmentFacts,
    SwapFailed,
    choose_filthiest,
    plan_cleaning,
    scan_transactions,
)
from pykraft.storage.log import Log
from pykraft.storage.log_config import LogConfig
from pykraft.storage.txn_index import read_entries

from .storage_helpers import open_log, small_config

NOW = 1_700_000_000_000
DAY_MS = 86_400_000


def compacted(**overrides: Any) -> LogConfig:
    values: dict[str, Any] = {"cleanup_policy": ("compact",), "segment_bytes": 600,
                              "min_cleanable_dirty_ratio": 0.0, "delete_retention_ms": 1_000}
    values.update(overrides)
    return small_config(**values)


def put(log: Log, pairs: list[tuple[bytes | None, bytes | None]], now_ms: int = NOW,
        **batch: Any) -> int:
    """Append one batch of (key, value) records; return its base offset."""
    data = build_batch([(k, v, [], now_ms) for k, v in pairs], **batch)
    info = log.append_as_leader(bytearray(data), leader_epoch=0, now_ms=now_ms)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


def records(log: Log) -> list[Record]:
    found: list[Record] = []
    for header, batch in log.iter_batches():
        if not header.is_control:
            found.extend(iter_records(batch))
    return found


def fold(items: list[Record]) -> dict[bytes, bytes]:
    state: dict[bytes, bytes] = {}
    for record in items:
        assert record.key is not None
        if record.value is None:
            state.pop(record.key, None)
        else:
            state[record.key] = record.value
    return state


def cleaner(log: Log, dedupe_bytes: int = 1 << 20) -> LogCleaner:
    config = CleanerConfig(dedupe_buffer_size=dedupe_bytes, io_buffer_load_factor=1.0)
    return LogCleaner(config, lambda: [(log, log.dir.parent)])


def clean_until_done(the_cleaner: LogCleaner, now_ms: int, rounds_max: int = 200) -> int:
    rounds = 0
    while the_cleaner.clean_once(now_ms) is not None:
        rounds += 1
        assert rounds < rounds_max, "cleaning never settles"
    return rounds


def facts(sizes: list[int], bases: list[int], **overrides: Any) -> LogFacts:
    values: dict[str, Any] = dict(
        segments=tuple(SegmentFacts(b, s, NOW - DAY_MS, NOW - DAY_MS)
                       for b, s in zip(bases, sizes, strict=True)),
        log_start_offset=bases[0], high_watermark=1_000, log_end_offset=1_000,
        checkpoint_offset=None, min_cleanable_dirty_ratio=0.5, min_compaction_lag_ms=0,
        max_compaction_lag_ms=2**63 - 1)
    values.update(overrides)
    return LogFacts(**values)


# -- the decision ------------------------------------------------------------------------------


def test_dirty_ratio_counts_whole_segments_below_the_active_one() -> None:
    plan = plan_cleaning(facts([100, 100, 100, 50], [0, 100, 200, 300],
                               checkpoint_offset=100), NOW)
    assert (plan.first_dirty_offset, plan.first_uncleanable_offset) == (100, 300)
    assert (plan.clean_bytes, plan.cleanable_bytes) == (100, 200)
    assert plan.dirty_ratio == pytest.approx(2 / 3) and plan.needs_cleaning
    lazy = plan_cleaning(facts([100, 100, 100, 50], [0, 100, 200, 300], checkpoint_offset=200,
                               min_cleanable_dirty_ratio=0.5), NOW)
    assert lazy.dirty_ratio == pytest.approx(1 / 3) and not lazy.needs_cleaning


def test_nothing_at_or_above_the_high_watermark_or_too_young_is_cleanable() -> None:
    above = plan_cleaning(facts([100, 100, 100, 50], [0, 100, 200, 300],
                                high_watermark=150), NOW)
    assert above.first_uncleanable_offset == 100
    young = facts([100, 100, 100, 50], [0, 100, 200, 300], min_compaction_lag_ms=60_000)
    segments = list(young.segments)
    segments[1] = dataclasses.replace(segments[1], largest_timestamp_ms=NOW - 1_000)
    plan = plan_cleaning(dataclasses.replace(young, segments=tuple(segments)), NOW)
    assert plan.first_uncleanable_offset == 100 and plan.cleanable_bytes == 100
    only_active = plan_cleaning(facts([500], [0]), NOW)
    assert only_active.cleanable_bytes == 0 and not only_active.needs_cleaning


def test_checkpoint_outside_the_log_restarts_at_the_log_start() -> None:
    for checkpoint in (-5, 10, 5_000):
        plan = plan_cleaning(facts([100, 100], [20, 120], log_start_offset=20,
                                   checkpoint_offset=checkpoint), NOW)
        assert plan.first_dirty_offset == 20


def test_max_compaction_lag_forces_a_clean_below_the_ratio() -> None:
    base = facts([1_000, 10, 10], [0, 100, 200], checkpoint_offset=100,
                 max_compaction_lag_ms=60_000)
    plan = plan_cleaning(base, NOW)
    assert plan.dirty_ratio < 0.5 and plan.max_compaction_delay_ms > 0 and plan.needs_cleaning
    relaxed = plan_cleaning(dataclasses.replace(base, max_compaction_lag_ms=2 * DAY_MS), NOW)
    assert not relaxed.needs_cleaning


def test_the_dirtiest_due_log_is_chosen() -> None:
    def plan(ratio_parts: tuple[int, int], minimum: float = 0.5) -> CleaningPlan:
        clean, dirty = ratio_parts
        return CleaningPlan(0, 1, clean, dirty, 0, False, minimum)

    assert choose_filthiest([("a", plan((50, 50))), ("b", plan((10, 90))),
                             ("c", plan((30, 70)))]) == "b"
    assert choose_filthiest([("a", plan((90, 10))), ("b", plan((60, 40)))]) is None
    assert choose_filthiest([("a", plan((90, 10), minimum=0.05))]) == "a"


def test_cleaner_config_from_server_keys() -> None:
    config = CleanerConfig.from_server_configs({
        "log.cleaner.enable": "false", "log.cleaner.threads": "2",
        "log.cleaner.dedupe.buffer.size": "1000", "log.cleaner.backoff.ms": "5"})
    assert not config.active and config.backoff_ms == 5
    assert config.map_bytes_max == 450  # 1000 / 2 threads * 0.9
    assert CleanerConfig.from_server_configs({}).active


# -- cleaning ------------------------------------------------------------------------------------


def test_clean_keeps_the_latest_record_per_key_at_its_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(), now_ms=NOW)
    written: dict[int, tuple[bytes, bytes]] = {}
    for round_ in range(30):
        for key in range(5):
            pair = (f"k{key}".encode(), f"v{round_}".encode() * 3)
            written[put(log, [pair])] = pair
    log.roll(NOW)
    before = log.size_bytes
    assert clean_until_done(cleaner(log), NOW) >= 1
    kept = records(log)
    assert [(r.key, r.value) for r in kept] == [(f"k{k}".encode(), b"v29" * 3) for k in range(5)]
    for record in kept:
        assert written[record.offset] == (record.key, record.value), "offsets are preserved"
    assert log.size_bytes < before / 10
    assert log.log_end_offset == 150
    log.check_invariants()
    assert not list(log.dir.glob("*.cleaned")) and not list(log.dir.glob("*.swap"))
    checkpoint = (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text().split()
    assert checkpoint[2:] == ["t", "0", "150"]


def test_the_active_segment_and_records_above_the_high_watermark_stay(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(), now_ms=NOW)
    for round_ in range(20):
        put(log, [(b"k", f"v{round_}".encode())])
    active_before = log.segments[-1].size
    log.update_high_watermark(log.segments[2].base_offset)
    clean_until_done(cleaner(log), NOW)
    assert log.segments[-1].size == active_before
    offsets = [r.offset for r in records(log)]
    assert all(o in offsets for o in range(log.segments[2].base_offset, 20))
    log.check_invariants()


def test_tiny_dedupe_buffer_takes_several_passes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(segment_bytes=2_000), now_ms=NOW)
    for round_ in range(4):
        for key in range(40):
            put(log, [(f"key{key:03d}".encode(), f"{round_}".encode())])
    log.roll(NOW)
    the_cleaner = cleaner(log, dedupe_bytes=1_300)  # about ten keys per pass
    assert clean_until_done(the_cleaner, NOW) > 3
    kept = records(log)
    assert fold(kept) == {f"key{k:03d}".encode(): b"3" for k in range(40)}
    assert len(kept) == 40


def test_tombstones_stay_until_their_delete_horizon(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(delete_retention_ms=5_000), now_ms=NOW)
    for round_ in range(10):
        put(log, [(b"a", f"{round_}".encode()), (b"b", b"x" * 20)])
    put(log, [(b"a", None)])
    log.roll(NOW)
    the_cleaner = cleaner(log)
    clean_until_done(the_cleaner, NOW)
    kept = records(log)
    assert [(r.key, r.value) for r in kept] == [(b"b", b"x" * 20), (b"a", None)]
    stamped = [h for h, _ in log.iter_batches() if h.attributes & DELETE_HORIZON_BIT]
    assert len(stamped) == 1 and stamped[0].base_timestamp == NOW + 5_000
    assert kept[1].timestamp == NOW, "record timestamps survive the horizon stamp"
    assert the_cleaner.clean_once(NOW + 4_999) is None
    assert the_cleaner.clean_once(NOW + 5_000) is not None
    assert [(r.key, r.value) for r in records(log)] == [(b"b", b"x" * 20)]
    assert the_cleaner.clean_once(NOW + 10_000) is None
    log.check_invariants()


def test_keyless_records_in_a_compacted_log_are_dropped(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(cleanup_policy=("delete",)), now_ms=NOW)
    put(log, [(None, b"no key"), (b"k", b"1")])
    put(log, [(b"k", b"2")])
    log.update_config(compacted())
    log.roll(NOW)
    clean_until_done(cleaner(log), NOW)
    assert [(r.key, r.value) for r in records(log)] == [(b"k", b"2")]


def test_rebuilt_batches_keep_producer_metadata(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(), now_ms=NOW)
    producer = dict(producer_id=7, producer_epoch=3, base_sequence=10, compression=1)
    first = put(log, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], **producer)
    put(log, [(b"a", b"2"), (b"b", b"2"), (b"c", b"2")],
        producer_id=8, producer_epoch=0, base_sequence=0)
    put(log, [(b"x", b"1"), (b"a", b"3")], producer_id=7, producer_epoch=3, base_sequence=13)
    put(log, [(b"b", b"3"), (b"c", b"3"), (b"x", b"2")], producer_id=9, producer_epoch=1,
        base_sequence=0)
    log.roll(NOW)
    clean_until_done(cleaner(log), NOW)
    headers = [h for h, _ in log.iter_batches()]
    # producer 7's first batch is empty and not its last: gone; producer 8's only batch is
    # emptied but is its last: its header stays, empty
    assert first not in [h.base_offset for h in headers]
    by_producer = {h.producer_id: h for h in headers}
    assert by_producer[8].records_count == 0 and by_producer[8].last_offset_delta == 2
    assert by_producer[8].base_offset == 3 and by_producer[8].base_sequence == 0
    seven = by_producer[7]
    assert (seven.base_offset, seven.last_offset_delta, seven.records_count) == (6, 1, 1)
    assert (seven.producer_epoch, seven.base_sequence, seven.compression) == (3, 13, 0)
    assert fold(records(log)) == {b"a": b"3", b"b": b"3", b"c": b"3", b"x": b"2"}
    log.check_invariants()


def test_a_job_whose_segments_changed_is_dropped(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(cleanup_policy=("compact", "delete")),
                   now_ms=NOW)
    for round_ in range(20):
        put(log, [(b"k", f"v{round_}".encode())])
    log.roll(NOW)
    the_cleaner = cleaner(log)
    job = the_cleaner.next_job(NOW)
    assert job is not None
    job.run()
    assert list(log.dir.glob("*.cleaned"))
    log.delete_records(log.segments[2].base_offset, NOW)
    assert not the_cleaner.finish(job, NOW)
    assert not list(log.dir.glob("*.cleaned"))
    log.check_invariants()


def test_checkpoint_is_read_back_by_a_new_cleaner(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(), now_ms=NOW)
    for round_ in range(20):
        put(log, [(b"k", f"v{round_}".encode())])
    log.roll(NOW)
    clean_until_done(cleaner(log), NOW)
    put(log, [(b"k", b"late")])
    fresh = cleaner(log)
    plan, _ = fresh.status(NOW)[("t", 0)]
    assert plan.first_dirty_offset == 20


def test_status_plans_at_the_time_it_is_given(tmp_path: Path) -> None:
    """min.compaction.lag.ms holds young segments back from the dirty section until the
    time asked about has passed their newest record plus the lag."""
    log = open_log(tmp_path / "t-0", compacted(min_compaction_lag_ms=DAY_MS), now_ms=NOW)
    for round_ in range(20):
        put(log, [(b"k", f"v{round_}".encode())])
    log.roll(NOW)
    the_cleaner = cleaner(log)
    young, _ = the_cleaner.status(NOW)[("t", 0)]
    old, last_clean_ms = the_cleaner.status(NOW + DAY_MS + 1)[("t", 0)]
    assert young.cleanable_bytes == 0 and young.dirty_ratio == 0.0
    assert old.cleanable_bytes > 0 and old.dirty_ratio == 1.0 and last_clean_ms == -1


# -- crashes during the swap -------------------------------------------------------------------


def _dirty_log(directory: Path) -> tuple[Log, dict[bytes, bytes]]:
    log = open_log(directory, compacted(), now_ms=NOW)
    for round_ in range(12):
        for key in range(4):
            put(log, [(f"k{key}".encode(), f"v{round_}".encode() * 4)])
    log.roll(NOW)
    return log, fold(records(log))


def _count_replaces(tmp_path: Path) -> int:
    log, _ = _dirty_log(tmp_path / "count" / "t-0")
    job = cleaner(log).next_job(NOW)
    assert job is not None
    job.run()
    calls = [0]
    real = os.replace

    def counting(*args: Any) -> None:
        calls[0] += 1
        real(*args)

    os.replace = counting  # type: ignore[assignment]
    try:
        assert cleaner(log).finish(job, NOW)
    finally:
        os.replace = real
    return calls[0]


def test_a_crash_at_any_swap_step_leaves_an_intact_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = _count_replaces(tmp_path)
    assert steps >= 4
    for crash_at in range(steps):
        directory = tmp_path / f"crash{crash_at}" / "t-0"
        log, expected = _dirty_log(directory)
        job = cleaner(log).next_job(NOW)
        assert job is not None
        job.run()
        real = os.replace
        calls = [0]

        def failing(*args: Any, real: Callable[..., None] = real, at: int = crash_at,
                    calls: list[int] = calls) -> None:
            if calls[0] == at:
                raise OSError("power cut")
            calls[0] += 1
            real(*args)

        monkeypatch.setattr(os, "replace", failing)
        with pytest.raises((SwapFailed, OSError), match="power cut"):
            cleaner(log).finish(job, NOW)
        monkeypatch.setattr(os, "replace", real)
        log.close()  # what the process leaves behind; nothing is flushed or checkpointed
        reopened = open_log(directory, compacted(), now_ms=NOW, recovery_point=0)
        reopened.update_high_watermark(reopened.log_end_offset)
        assert fold(records(reopened)) == expected, f"crash at rename {crash_at}"
        offsets = [r.offset for r in records(reopened)]
        assert offsets == sorted(set(offsets))
        assert not list(directory.glob("*.cleaned")) and not list(directory.glob("*.swap"))
        reopened.check_invariants()
        clean_until_done(cleaner(reopened), NOW)
        assert fold(records(reopened)) == expected and len(records(reopened)) == 4


def test_a_crash_before_the_swap_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    log, expected = _dirty_log(tmp_path / "t-0")
    size = log.size_bytes
    job = cleaner(log).next_job(NOW)
    assert job is not None
    job.run()
    log.close()
    assert list((tmp_path / "t-0").glob("*" + log_files.CLEANED_SUFFIX))
    reopened = open_log(tmp_path / "t-0", compacted(), now_ms=NOW)
    assert not list((tmp_path / "t-0").glob("*" + log_files.CLEANED_SUFFIX))
    assert reopened.size_bytes == size and fold(records(reopened)) == expected


# -- the property --------------------------------------------------------------------------------

_BATCHES = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(0, 11),
                           st.one_of(st.none(), st.binary(min_size=0, max_size=30)),
                           st.integers(0, 5_000)),
                 min_size=1, max_size=4),
        st.sampled_from([0, 1, 3, 4]),  # codec
        st.sampled_from([-1, 5, 6]),  # producer id
    ),
    min_size=1, max_size=100)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=_BATCHES, dedupe_bytes=st.sampled_from([200, 700, 1 << 20]),
       log_append_time=st.booleans())
def test_compaction_keeps_exactly_the_latest_value_per_key(
    tmp_path_factory: pytest.TempPathFactory,
    batches: list[tuple[list[tuple[int, bytes | None, int]], int, int]],
    dedupe_bytes: int, log_append_time: bool,
) -> None:
    """Random puts and tombstones over many segments (any codec, idempotent producers or
    none, CreateTime or LogAppendTime), compacted with a buffer that may hold only a key or
    two: the log folds to the same state, each surviving record sits at the offset it was
    written at with its timestamp, every key appears once, and tombstones go after their
    horizon."""
    directory = tmp_path_factory.mktemp("prop") / "t-0"
    timestamp_type = "LogAppendTime" if log_append_time else "CreateTime"
    log = open_log(directory, compacted(segment_bytes=300, delete_retention_ms=1_000,
                                        message_timestamp_type=timestamp_type), now_ms=NOW)
    written: dict[int, tuple[bytes, bytes | None, int]] = {}
    the_cleaner = cleaner(log, dedupe_bytes)
    sequences: dict[int, int] = {}
    for index, (items, codec, producer_id) in enumerate(batches):
        data = build_batch(
            [(f"key{key}".encode(), value, [], NOW - age) for key, value, age in items],
            compression=codec, producer_id=producer_id, producer_epoch=0 if producer_id >= 0
            else -1, base_sequence=sequences.get(producer_id, 0) if producer_id >= 0 else -1)
        sequences[producer_id] = sequences.get(producer_id, 0) + len(items)
        base = log.append_as_leader(bytearray(data), leader_epoch=0, now_ms=NOW).first_offset
        log.update_high_watermark(log.log_end_offset)
        for i, (key, value, age) in enumerate(items):
            written[base + i] = (f"key{key}".encode(), value, NOW if log_append_time else NOW - age)
        if index % 17 == 16:  # clean along the way too, with part of the log still active
            the_cleaner.clean_once(NOW)
    expected = fold(records(log))
    log.roll(NOW)
    clean_until_done(the_cleaner, NOW)
    kept = records(log)
    assert fold(kept) == expected
    offsets = [r.offset for r in kept]
    assert offsets == sorted(set(offsets)), "offsets strictly increase"
    for record in kept:
        assert written[record.offset] == (record.key, record.value, record.timestamp)
    keys = [r.key for r in kept]
    assert len(keys) == len(set(keys)), "one record per key"
    clean_until_done(the_cleaner, NOW + 1_000)
    final = records(log)
    assert all(r.value is not None for r in final), "tombstones gone after delete.retention.ms"
    assert {r.key: r.value for r in final} == expected
    for offset in written:  # a consumer's position still finds that record or a later one
        if offset >= log.log_start_offset:
            info = log.read(offset, 1 << 20, max_offset=log.high_watermark)
            assert info.next_offset > offset or info.records == b""
    log.check_invariants()
    log.close()


# -- the produce path and DeleteRecords at the Log level ---------------------------------------


def test_keyless_records_are_refused_by_compacted_logs_only(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(), now_ms=NOW)
    put(log, [(b"k", b"v")])
    with pytest.raises(InvalidRecord,
                       match="Compacted topic cannot accept message without key") as caught:
        put(log, [(b"k", b"v"), (None, b"v")])
    assert [index for index, _ in caught.value.record_errors] == [1]
    assert log.log_end_offset == 1
    plain = open_log(tmp_path / "p-0", small_config(), now_ms=NOW)
    put(plain, [(None, b"v")])
    assert plain.log_end_offset == 1


def test_delete_records_moves_the_start_and_drops_whole_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", small_config(), now_ms=NOW)
    for _ in range(40):
        put(log, [(b"k", b"x" * 50)])
    segments = log.segment_count
    assert log.delete_records(25, NOW) == 25
    assert log.log_start_offset == 25 and log.segment_count < segments
    assert log.segments[0].base_offset <= 25
    with pytest.raises(OffsetOutOfRange):
        log.read(24, 1 << 20)
    with pytest.raises(OffsetOutOfRange):
        log.delete_records(41, NOW)
    assert log.delete_records(10, NOW) == 25
    log.check_invariants()


def test_io_throttle_paces_the_cleaner_to_its_rate(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(segment_bytes=5_000), now_ms=NOW)
    for round_ in range(200):
        put(log, [(f"k{round_ % 7}".encode(), b"x" * 40)])
    log.roll(NOW)
    clock = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    rate = 2_000.0
    the_cleaner = LogCleaner(
        CleanerConfig(io_max_bytes_per_second=rate), lambda: [(log, log.dir.parent)],
        io_clock=lambda: clock[0], io_sleep=sleep)
    job = the_cleaner.clean_once(NOW)
    assert job is not None
    moved = job.stats.dirty_bytes_read + job.stats.bytes_read + job.stats.bytes_written
    assert len(slept) > 5
    assert sum(slept) == pytest.approx(moved / rate, rel=0.25)
    assert fold(records(log)) == {f"k{k}".encode(): b"x" * 40 for k in range(7)}
    unthrottled = CleanerConfig.from_server_configs({})
    assert unthrottled.io_max_bytes_per_second > 1e300


def test_a_corrupt_batch_fails_the_job_and_leaves_no_output(tmp_path: Path) -> None:
    log, expected = _dirty_log(tmp_path / "t-0")
    victim = log.segments[1]
    with open(victim.log_path, "r+b") as stream:
        stream.seek(victim.size - 3)
        stream.write(b"\xff\xff")  # under the CRC of the segment's last batch
    job = cleaner(log).next_job(NOW)
    assert job is not None
    with pytest.raises(CorruptRecord):
        job.run()
    assert not list((tmp_path / "t-0").glob("*" + log_files.CLEANED_SUFFIX))


def test_the_cleaner_picks_the_dirtiest_log_and_skips_uncleanable_ones(tmp_path: Path) -> None:
    logs = []
    for name, updates in (("a-0", 3), ("b-0", 12), ("c-0", 12)):
        log = open_log(tmp_path / name, compacted(min_cleanable_dirty_ratio=0.1), now_ms=NOW)
        for round_ in range(updates):
            for key in range(4):
                put(log, [(f"k{key}".encode(), f"{round_}".encode() * 30)])
        log.roll(NOW)
        logs.append(log)
    logs[2].update_config(compacted(cleanup_policy=("delete",)))
    the_cleaner = LogCleaner(CleanerConfig(), lambda: [(lg, tmp_path) for lg in logs])
    first = the_cleaner.next_job(NOW)
    assert first is not None and first.log is logs[1]  # c is not compacted
    the_cleaner.uncleanable.add(("b", 0))
    second = the_cleaner.next_job(NOW)
    assert second is not None and second.log is logs[0]
    second.run()
    assert the_cleaner.finish(second, NOW)
    assert the_cleaner.next_job(NOW) is None


def test_a_recreated_partition_starts_with_a_fresh_cleaner_state(tmp_path: Path) -> None:
    log, _ = _dirty_log(tmp_path / "t-0")
    current = [log]
    the_cleaner = LogCleaner(CleanerConfig(), lambda: [(current[0], tmp_path)])
    clean_until_done(the_cleaner, NOW)
    assert the_cleaner.status(NOW)[("t", 0)][0].first_dirty_offset == log.log_end_offset
    log.delete()
    recreated, _ = _dirty_log(tmp_path / "t-0")
    current[0] = recreated
    plan, last_clean_ms = the_cleaner.status(NOW)[("t", 0)]
    assert plan.first_dirty_offset == 0 and last_clean_ms == -1


# -- transactions: aborted data, markers, open transactions -----------------------------------


class Txn:
    """A transactional producer writing to one log: numbered batches, then its marker."""

    def __init__(self, log: Log, producer_id: int) -> None:
        self.log, self.producer_id, self.sequence = log, producer_id, 0

    def send(self, pairs: list[tuple[bytes | None, bytes | None]], now_ms: int = NOW) -> int:
        base = put(self.log, pairs, now_ms, producer_id=self.producer_id, producer_epoch=0,
                   base_sequence=self.sequence, is_transactional=True)
        self.sequence += len(pairs)
        return base

    def end(self, kind: ControlRecordType, now_ms: int = NOW) -> int:
        marker = build_batch([(control_record_key(kind), end_txn_marker_value(0), [], now_ms)],
                             producer_id=self.producer_id, producer_epoch=0,
                             is_transactional=True, is_control=True)
        info = self.log.append_as_leader(bytearray(marker), leader_epoch=0, now_ms=now_ms)
        self.log.update_high_watermark(self.log.log_end_offset)
        return info.first_offset


def markers(log: Log) -> list[tuple[int, int, ControlRecordType, BatchHeader]]:
    found = []
    for header, batch in log.iter_batches():
        if header.is_control:
            kinds = [read_control_record_type(r.key) for r in iter_records(batch)]
            found.append((header.producer_id, header.base_offset,
                          kinds[0] if kinds else ControlRecordType.UNKNOWN, header))
    return found


def test_scan_finds_aborted_and_open_transactions(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(segment_bytes=1 << 20), now_ms=NOW)
    aborted, committed, still_open = Txn(log, 5), Txn(log, 6), Txn(log, 7)
    put(log, [(b"plain", b"1")], producer_id=9, producer_epoch=0, base_sequence=0)
    first_aborted = aborted.send([(b"a", b"x")])
    committed.send([(b"b", b"y")])
    aborted.send([(b"a", b"z")])
    abort_at = aborted.end(ControlRecordType.ABORT)
    commit_at = committed.end(ControlRecordType.COMMIT)
    open_at = still_open.send([(b"c", b"w")])
    second_aborted = aborted.send([(b"a", b"again")])
    second_abort_at = aborted.end(ControlRecordType.ABORT)
    found = scan_transactions(log.iter_batches())
    assert found.aborted == [AbortedTxn(5, first_aborted, abort_at),
                             AbortedTxn(5, second_aborted, second_abort_at)]
    assert found.first_unstable_offset == open_at
    assert found.producer_last == {9: 0, 5: second_abort_at, 6: commit_at, 7: open_at}


def test_aborted_data_is_dropped_and_never_shadows_a_committed_value(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(), now_ms=NOW)
    txn = Txn(log, 5)
    put(log, [(b"a", b"committed"), (b"b", b"committed")])
    txn.send([(b"a", b"aborted"), (b"c", b"aborted")])
    abort_at = txn.end(ControlRecordType.ABORT)
    txn.send([(b"d", b"committed")])
    txn.end(ControlRecordType.COMMIT)
    log.roll(NOW)
    the_cleaner = cleaner(log)
    clean_until_done(the_cleaner, NOW)
    # the aborted a=aborted is newer than a=committed but must not win: it never happened
    assert fold(records(log)) == {b"a": b"committed", b"b": b"committed", b"d": b"committed"}
    stats = the_cleaner._states[("t", 0)].last_stats
    assert stats is not None and stats.aborted_records_removed == 2
    # the ABORT marker saw its data removed in the same pass: it stays, for now
    assert (5, abort_at) in [(pid, offset) for pid, offset, *_ in markers(log)]
    # the cleaned segment keeps the aborted transaction's `.txnindex` entry (as Kafka's)
    indexed = [each for segment in log.segments
               for each in read_entries(segment.txn_index_path)]
    assert [(each.producer_id, each.last_offset) for each in indexed] == [(5, abort_at)]
    log.check_invariants()


def test_a_marker_goes_after_its_data_and_its_delete_horizon(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(delete_retention_ms=1_000), now_ms=NOW)
    txn = Txn(log, 5)
    txn.send([(b"a", b"aborted")])
    abort_at = txn.end(ControlRecordType.ABORT)
    committed = Txn(log, 6)
    committed.send([(b"k", b"old")])
    commit_at = committed.end(ControlRecordType.COMMIT)
    put(log, [(b"k", b"new")])  # supersedes the committed transaction's only record
    txn.send([(b"z", b"later")])  # producers 5 and 6 have later batches, so their markers
    txn.end(ControlRecordType.COMMIT)  # are not their last batch in the log
    committed.send([(b"y", b"later")])
    committed.end(ControlRecordType.COMMIT)
    log.roll(NOW)
    the_cleaner = cleaner(log)
    clean_until_done(the_cleaner, NOW)
    # the pass that removed the transactions' data keeps their markers as they were (Kafka
    # does the same: a marker must outlive its data); the next cleaning stamps them
    assert not any(h.attributes & DELETE_HORIZON_BIT for *_, h in markers(log))
    put(log, [(b"y", b"newer")])
    log.roll(NOW)
    clean_until_done(the_cleaner, NOW)
    kept = {offset: header for _, offset, _, header in markers(log)}
    assert abort_at in kept and commit_at in kept
    assert all(kept[o].attributes & DELETE_HORIZON_BIT for o in (abort_at, commit_at))
    assert kept[abort_at].base_timestamp == NOW + 1_000
    assert clean_until_done(the_cleaner, NOW + 999) == 0
    assert clean_until_done(the_cleaner, NOW + 1_001) == 1  # the horizon brings it back
    left = [offset for _, offset, *_ in markers(log)]
    assert abort_at not in left and commit_at not in left
    assert fold(records(log)) == {b"k": b"new", b"z": b"later", b"y": b"newer"}
    log.check_invariants()


def test_a_producers_last_batch_stays_as_an_empty_header(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(), now_ms=NOW)
    txn = Txn(log, 5)
    txn.send([(b"a", b"aborted")])
    abort_at = txn.end(ControlRecordType.ABORT)
    put(log, [(b"b", b"1")])
    log.roll(NOW)
    the_cleaner = cleaner(log)
    clean_until_done(the_cleaner, NOW)
    put(log, [(b"b", b"2")])
    log.roll(NOW)
    clean_until_done(the_cleaner, NOW)  # stamps the marker
    clean_until_done(the_cleaner, NOW + 1_001)  # its horizon passed: its record goes
    (producer, offset, _, header), = markers(log)
    assert (producer, offset, header.records_count) == (5, abort_at, 0)
    assert fold(records(log)) == {b"b": b"2"}


def test_an_open_transaction_bounds_cleaning_until_it_ends(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compacted(), now_ms=NOW)
    put(log, [(b"a", b"1")])
    txn = Txn(log, 5)
    open_at = txn.send([(b"a", b"2")])  # may yet be aborted: must not shadow a=1
    for value in range(3, 40):
        put(log, [(b"a", b"%d" % value)])
    log.roll(NOW)
    the_cleaner = cleaner(log)
    clean_until_done(the_cleaner, NOW)
    state = the_cleaner._states[("t", 0)]
    assert state.checkpoint_offset is not None and state.checkpoint_offset <= open_at
    values = [r.value for r in records(log) if r.key == b"a"]
    assert values[:2] == [b"1", b"2"] and values[-1] == b"39"  # nothing past it cleaned
    txn.end(ControlRecordType.ABORT)
    log.roll(NOW)
    clean_until_done(the_cleaner, NOW)
    assert [r.value for r in records(log) if r.key == b"a"] == [b"39"]
    log.check_invariants()
