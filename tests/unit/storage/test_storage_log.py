"""Log: append (leader and follower), read, rolls, timestamps, truncation, retention."""

from __future__ import annotations

import dataclasses
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.errors import (
    CorruptRecord,
    InconsistentTopicId,
    InvalidRecord,
    InvalidTimestamp,
    MessageTooLarge,
    OffsetOutOfRange,
    RecordListTooLarge,
)
from pykraft.records.batch import check_batch, iter_headers, read_header
from pykraft.records.record import iter_records
from pykraft.storage.checkpoint import kafka_uuid_string
from pykraft.storage.log import Log, parse_topic_partition
from pykraft.storage.log_config import LogConfig
from tests.unit.storage.storage_helpers import all_batches, make_batch, open_log, small_config


def test_leader_append_assigns_offsets_and_epoch_and_stores_bytes_unchanged(
    tmp_path: Path,
) -> None:
    """Offsets and leader epoch are stamped in place; everything else is stored as sent."""
    log = open_log(tmp_path / "t-0", LogConfig())
    first = make_batch(3)
    second = make_batch(2, compression=1)
    original = bytes(second)
    info = log.append_as_leader(first, leader_epoch=7, now_ms=5)
    assert (info.first_offset, info.last_offset, info.log_append_time_ms) == (0, 2, -1)
    info = log.append_as_leader(second, leader_epoch=7, now_ms=5)
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (3, 4, 5)
    stored = all_batches(log)
    assert stored[1][12:] == bytes(second)[12:] and stored[1][16:] == original[16:]
    header = check_batch(stored[1])
    assert (header.base_offset, header.partition_leader_epoch) == (3, 7)
    assert [record.offset for record in iter_records(stored[1])] == [3, 4]
    assert log.leader_epoch_cache.entries == ((7, 0),)
    log.close()


def test_a_bad_batch_anywhere_means_nothing_is_appended(tmp_path: Path) -> None:
    """Validation runs over all batches before any byte is written."""
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=100_000, max_message_bytes=500))
    log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=0)
    size = log.size_bytes
    corrupt = make_batch(2)
    corrupt[-1] ^= 0xFF
    cases: list[tuple[bytearray, type[Exception]]] = [
        (make_batch(1) + corrupt, CorruptRecord),
        (make_batch(1) + make_batch(1)[:-3], CorruptRecord),
        (make_batch(1) + make_batch(1, value_size=600), MessageTooLarge),
    ]
    for records, error in cases:
        with pytest.raises(error):
            log.append_as_leader(records, leader_epoch=0, now_ms=0)
    assert (log.log_end_offset, log.size_bytes) == (1, size)
    small = open_log(tmp_path / "u-0", small_config(segment_bytes=300))
    with pytest.raises(RecordListTooLarge):
        small.append_as_leader(make_batch(5, value_size=100), leader_epoch=0, now_ms=0)
    log.close()
    small.close()


def test_record_count_must_match_offset_span(tmp_path: Path) -> None:
    """A batch whose count disagrees with lastOffsetDelta is InvalidRecord (header-level)."""
    import struct

    import crc32c

    batch = make_batch(3)
    struct.pack_into(">i", batch, 57, 2)  # recordsCount
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    log = open_log(tmp_path / "t-0", LogConfig())
    with pytest.raises(InvalidRecord):
        log.append_as_leader(batch, leader_epoch=0, now_ms=0)
    log.close()


def test_create_time_bounds_are_enforced_and_log_append_time_restamps(tmp_path: Path) -> None:
    """message.timestamp.{before,after}.max.ms reject; LogAppendTime rewrites with a new CRC."""
    bounded = open_log(
        tmp_path / "a-0",
        dataclasses.replace(
            LogConfig(), message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=10
        ),
    )
    with pytest.raises(InvalidTimestamp):
        bounded.append_as_leader(make_batch(1, timestamp=5_000), leader_epoch=0, now_ms=7_000)
    with pytest.raises(InvalidTimestamp):
        bounded.append_as_leader(make_batch(1, timestamp=7_011), leader_epoch=0, now_ms=7_000)
    bounded.append_as_leader(make_batch(1, timestamp=6_500), leader_epoch=0, now_ms=7_000)
    bounded.close()
    appended = open_log(
        tmp_path / "b-0", dataclasses.replace(LogConfig(), message_timestamp_type="LogAppendTime")
    )
    info = appended.append_as_leader(make_batch(3, timestamp=5), leader_epoch=0, now_ms=9_999)
    assert (info.log_append_time_ms, info.max_timestamp) == (9_999, 9_999)
    stored = all_batches(appended)[0]
    header = check_batch(stored)  # CRC recomputed
    assert header.is_log_append_time and header.max_timestamp == 9_999
    assert {record.timestamp for record in iter_records(stored)} == {9_999}
    assert appended.fetch_offset_by_timestamp(9_000) == (0, 9_999)
    appended.close()


def test_follower_append_keeps_offsets_and_learns_epochs(tmp_path: Path) -> None:
    """Batches keep their offsets (gaps allowed); going backwards is InvalidRecord."""
    log = open_log(tmp_path / "t-0", small_config())
    log.append_as_follower(make_batch(2, base_offset=0, leader_epoch=1))
    log.append_as_follower(make_batch(1, base_offset=5, leader_epoch=3))
    assert log.log_end_offset == 6
    assert log.leader_epoch_cache.entries == ((1, 0), (3, 5))
    with pytest.raises(InvalidRecord):
        log.append_as_follower(make_batch(1, base_offset=5))
    with pytest.raises(InvalidRecord):
        log.append_as_follower(make_batch(2, base_offset=7) + make_batch(1, base_offset=8))
    assert log.log_end_offset == 6
    assert log.end_offset_for_epoch(1) == (1, 5)
    assert log.end_offset_for_epoch(3) == (3, 6)
    assert log.end_offset_for_epoch(2) == (1, 5)
    log.check_invariants()
    log.close()


def test_follower_skipping_far_ahead_replaces_the_empty_active_segment(tmp_path: Path) -> None:
    """An empty log accepts a first batch at any offset (no int32 relative-offset overflow)."""
    log = open_log(tmp_path / "t-0", small_config())
    far = 1 << 40
    log.append_as_follower(make_batch(2, base_offset=far))
    assert log.segment_base_offsets == (far,)
    assert log.log_end_offset == far + 2
    assert log.read(far + 1, 1000).first_offset == far
    log.close()


def test_read_limits(tmp_path: Path) -> None:
    """max_bytes, min_one_message, max_offset and the offset range behave as Kafka's fetch."""
    log = open_log(tmp_path / "t-0", LogConfig())
    sizes = []
    for _ in range(5):
        batch = make_batch(2, value_size=40)
        sizes.append(len(batch))
        log.append_as_leader(batch, leader_epoch=0, now_ms=0)
    read = log.read(3, sizes[1] + sizes[2])  # starts at the batch holding offset 3
    assert (read.first_offset, read.next_offset) == (2, 6)
    assert len(read.records) == sizes[1] + sizes[2]
    assert len(log.read(0, 1).records) == sizes[0]  # one batch even though it is larger
    assert log.read(0, 1, min_one_message=False).records == b""
    assert log.read(0, 10_000, max_offset=4).next_offset == 4  # batches from 4 on excluded
    assert log.read(4, 10_000, max_offset=4).records == b""
    assert log.read(10, 100).records == b""  # at the log end: empty
    with pytest.raises(OffsetOutOfRange):
        log.read(11, 100)
    log.maybe_increment_log_start_offset(0)
    log.update_high_watermark(10)
    log.maybe_increment_log_start_offset(4)
    with pytest.raises(OffsetOutOfRange):
        log.read(3, 100)
    with pytest.raises(OffsetOutOfRange):
        log.maybe_increment_log_start_offset(11)
    log.close()


@st.composite
def _operations(draw: st.DrawFn) -> list[tuple[str, int, int]]:
    steps = draw(st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(1, 5), st.integers(1, 150)),
            st.tuples(st.just("roll"), st.just(0), st.just(0)),
            st.tuples(st.just("reopen"), st.just(0), st.just(0)),
        ),
        min_size=1, max_size=40,
    ))
    return steps


@settings(max_examples=40, deadline=None)
@given(operations=_operations(), probes=st.lists(st.floats(0, 1), max_size=15),
       max_bytes=st.integers(1, 3000))
def test_random_appends_rolls_and_reads(
    operations: list[tuple[str, int, int]], probes: list[float], max_bytes: int
) -> None:
    """Reads at any offset return the right whole batches in order, across rolls and reopens."""
    with tempfile.TemporaryDirectory() as directory:
        config = small_config()
        log = open_log(Path(directory) / "prop.topic-3", config)
        model: list[tuple[int, int, bytes]] = []  # (base, last, bytes) as stored
        for kind, count, value_size in operations:
            if kind == "append":
                batch = make_batch(count, value_size=value_size)
                info = log.append_as_leader(batch, leader_epoch=2, now_ms=0)
                model.append((info.first_offset, info.last_offset, bytes(batch)))
            elif kind == "roll":
                log.roll(now_ms=0)
            else:
                log.flush()
                log.close()
                log = open_log(log.dir, config, recovery_point=log.recovery_point)
        log.check_invariants()
        end = model[-1][1] + 1 if model else 0
        assert log.log_end_offset == end
        for fraction in probes:
            offset = int(fraction * end)
            read = log.read(offset, max_bytes)
            expected_start = next((i for i, m in enumerate(model) if m[1] >= offset), None)
            if expected_start is None:
                assert read.records == b""
                continue
            got = [bytes(read.records[p : p + h.size]) for p, h in iter_headers(read.records)]
            assert got, "at least one batch (min_one_message)"
            assert got == [m[2] for m in model[expected_start : expected_start + len(got)]]
            assert len(got) == 1 or sum(len(b) for b in got) <= max_bytes
        log.close()


def test_rolls_by_size_time_and_full_index(tmp_path: Path) -> None:
    """segment.bytes, segment.ms (by batch timestamps) and a full index each start a segment."""
    by_size = open_log(tmp_path / "s-0", small_config(segment_bytes=400))
    for _ in range(6):
        by_size.append_as_leader(make_batch(1, value_size=100), leader_epoch=0, now_ms=0)
    assert by_size.segment_count == 3
    assert all(s.size <= 400 for s in by_size.segments)
    by_time = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20, segment_ms=1000))
    by_time.append_as_leader(make_batch(1, timestamp=10_000), leader_epoch=0, now_ms=10_000)
    by_time.append_as_leader(make_batch(1, timestamp=10_900), leader_epoch=0, now_ms=10_900)
    assert by_time.segment_count == 1
    by_time.append_as_leader(make_batch(1, timestamp=11_001), leader_epoch=0, now_ms=11_001)
    assert by_time.segment_base_offsets == (0, 2)
    by_index = open_log(
        tmp_path / "i-0",
        small_config(segment_bytes=1 << 20, index_interval_bytes=0, segment_index_bytes=24),
    )
    for _ in range(8):
        by_index.append_as_leader(make_batch(1), leader_epoch=0, now_ms=0)
    assert by_index.segment_count > 1
    for log in (by_size, by_time, by_index):
        log.check_invariants()
        log.close()


@settings(max_examples=30, deadline=None)
@given(
    timestamps=st.lists(st.lists(st.integers(0, 500), min_size=1, max_size=4), min_size=1,
                        max_size=25),
    targets=st.lists(st.integers(0, 520), max_size=10),
)
def test_offset_for_timestamp_matches_brute_force(
    timestamps: list[list[int]], targets: list[int]
) -> None:
    """The first record (by offset) with timestamp >= target, exactly; -1/-2/-3 specials."""
    with tempfile.TemporaryDirectory() as directory:
        log = open_log(Path(directory) / "ts-0", small_config(segment_bytes=600))
        records: list[tuple[int, int]] = []
        for stamps in timestamps:
            info = log.append_as_leader(
                make_batch(len(stamps), timestamps=stamps), leader_epoch=0, now_ms=0
            )
            records += [(info.first_offset + i, ts) for i, ts in enumerate(stamps)]
        for target in targets:
            expected = next(((o, t) for o, t in records if t >= target), None)
            assert log.fetch_offset_by_timestamp(target) == expected
        top = max(t for _, t in records)
        assert log.fetch_offset_by_timestamp(-3) == next((o, t) for o, t in records if t == top)
        assert log.fetch_offset_by_timestamp(-1) == (log.log_end_offset, -1)
        assert log.fetch_offset_by_timestamp(-2) == (0, -1)
        log.close()
        reopened = open_log(log.dir, small_config(segment_bytes=600))
        for target in targets:
            expected = next(((o, t) for o, t in records if t >= target), None)
            assert reopened.fetch_offset_by_timestamp(target) == expected
        reopened.close()


def test_truncate_to_across_segments(tmp_path: Path) -> None:
    """truncate_to removes later segments and batches, epochs and watermarks follow."""
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=300))
    for epoch in range(6):
        log.append_as_leader(make_batch(2, value_size=60), leader_epoch=epoch, now_ms=0)
    log.update_high_watermark(12)
    assert log.segment_count > 2
    assert log.truncate_to(4)
    assert (log.log_end_offset, log.high_watermark) == (4, 4)
    assert [read_header(b).base_offset for b in all_batches(log)] == [0, 2]
    assert log.leader_epoch_cache.entries == ((0, 0), (1, 2))
    assert not log.truncate_to(9)
    info = log.append_as_leader(make_batch(1), leader_epoch=9, now_ms=0)
    assert info.first_offset == 4
    log.check_invariants()
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.segment_base_offsets) == (
        100, 100, (100,)
    )
    assert len(log.leader_epoch_cache.entries) == 0
    assert log.append_as_leader(make_batch(1), leader_epoch=10, now_ms=0).first_offset == 100
    log.close()


def _filled(tmp_path: Path, name: str, config: LogConfig, timestamps: list[int]) -> Log:
    log = open_log(tmp_path / name, config)
    for timestamp in timestamps:
        log.append_as_leader(make_batch(2, timestamp=timestamp, value_size=40),
                             leader_epoch=0, now_ms=timestamp)
    log.update_high_watermark(log.log_end_offset)
    return log


def test_retention_by_time_deletes_old_segments_and_advances_log_start(tmp_path: Path) -> None:
    """Segments whose newest record is older than retention.ms go; the log start follows."""
    config = small_config(segment_bytes=400, retention_ms=1000, file_delete_delay_ms=500)
    log = _filled(tmp_path, "t-0", config, [100, 200, 300, 2000, 2100, 2200])
    assert log.segment_count == 3
    deleted = log.delete_retention_segments(now_ms=2500)
    assert deleted == 1  # only the first segment's records (100..300) are old enough
    assert log.log_start_offset == log.segment_base_offsets[0] > 0
    pending = sorted(p.name for p in log.dir.iterdir() if p.name.endswith(".deleted"))
    assert pending and all(name.startswith("00000000000000000000") for name in pending)
    assert log.delete_pending(now_ms=2999) == 0
    assert log.delete_pending(now_ms=3000) == 1
    assert not any(p.name.endswith(".deleted") for p in log.dir.iterdir())
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    log.check_invariants()
    log.close()


def test_retention_never_passes_the_high_watermark_and_rolls_when_all_expire(
    tmp_path: Path,
) -> None:
    """Only segments wholly below the HW go; when every segment expires a new one is rolled."""
    config = small_config(segment_bytes=400, retention_ms=10)
    log = _filled(tmp_path, "t-0", config, [100, 200, 300, 400, 500])
    log.update_high_watermark(log.segment_base_offsets[1])
    assert log.delete_retention_segments(now_ms=10_000) == 1
    log.update_high_watermark(log.log_end_offset)
    end = log.log_end_offset
    assert log.delete_retention_segments(now_ms=10_000) >= 1
    assert log.segment_base_offsets == (end,)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (end, end, 0)
    assert log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=0).first_offset == end
    log.close()


def test_retention_by_bytes(tmp_path: Path) -> None:
    """The oldest segments go while the log exceeds retention.bytes by a whole segment."""
    config = small_config(segment_bytes=400, retention_bytes=500, retention_ms=-1)
    log = _filled(tmp_path, "t-0", config, [100] * 8)
    before = log.size_bytes
    deleted = log.delete_retention_segments(now_ms=0)
    assert deleted > 0 and log.size_bytes < before
    assert log.size_bytes - log.segments[0].size < 500 <= log.size_bytes + 400
    log.close()
    compacted = _filled(tmp_path, "c-0", dataclasses.replace(config, cleanup_policy=("compact",)),
                        [100] * 8)
    assert compacted.delete_retention_segments(now_ms=0) == 0  # not a delete-policy topic
    compacted.close()


def test_log_start_offset_breach_deletes_segments_on_any_policy(tmp_path: Path) -> None:
    """After DeleteRecords, segments wholly below the log start go even without retention."""
    config = small_config(segment_bytes=400, retention_ms=-1, cleanup_policy=("compact",))
    log = _filled(tmp_path, "t-0", config, [100] * 6)
    second = log.segment_base_offsets[1]
    log.maybe_increment_log_start_offset(second + 1)
    assert log.delete_retention_segments(now_ms=0) == 1
    assert log.segment_base_offsets[0] == second
    assert log.log_start_offset == second + 1
    log.close()


def test_flush_messages_and_flush_ms_advance_the_recovery_point(tmp_path: Path) -> None:
    """flush.messages and flush.ms force a flush; a roll schedules one via flush_due."""
    log = open_log(tmp_path / "t-0", small_config(flush_messages=3, segment_bytes=1 << 20))
    log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=0)
    assert log.recovery_point == 0
    log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=0)
    assert log.recovery_point == 3
    log.update_config(dataclasses.replace(log.config, flush_messages=1 << 60, flush_ms=100))
    log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=50)
    assert log.recovery_point == 3
    assert log.flush_due(now_ms=100) and log.recovery_point == 4
    log.update_config(dataclasses.replace(log.config, flush_ms=1 << 60))
    log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=200)
    log.roll(now_ms=200)
    assert log.flush_due(now_ms=201) and log.recovery_point == 5
    assert not log.flush_due(now_ms=202)
    log.close()


def test_partition_metadata_and_topic_id(tmp_path: Path) -> None:
    """partition.metadata holds Kafka's text; another id for the same log is refused."""
    topic_id = uuid.UUID("3a2bd1e4-8f5c-4c6e-9f0e-1d2c3b4a5f60")
    log = open_log(tmp_path / "t-0", LogConfig())
    log.assign_topic_id(topic_id)
    text = (log.dir / "partition.metadata").read_text()
    assert text == f"version: 0\ntopic_id: {kafka_uuid_string(topic_id)}\n"
    with pytest.raises(InconsistentTopicId):
        log.assign_topic_id(uuid.uuid4())
    log.close()
    assert open_log(tmp_path / "t-0", LogConfig()).topic_id == topic_id


def test_directory_names_split_at_the_last_dash() -> None:
    """Topic names may contain '.', '_' and '-'."""
    assert parse_topic_partition("my.topic_with-dashes-12") == ("my.topic_with-dashes", 12)
    for bad in ("nodash", "-3", "topic-", "topic-x"):
        with pytest.raises(ValueError):
            parse_topic_partition(bad)


def test_timestamp_lookup_starts_at_the_log_start_offset(tmp_path: Path) -> None:
    """After DeleteRecords inside a segment, lookups answer the first record still readable."""
    log = open_log(tmp_path / "t-0", LogConfig())
    for timestamp in (100, 200, 300):
        log.append_as_leader(make_batch(2, timestamp=timestamp), leader_epoch=0, now_ms=0)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(3)
    assert log.fetch_offset_by_timestamp(0) == (3, 201)
    assert log.fetch_offset_by_timestamp(150) == (3, 201)
    assert log.fetch_offset_by_timestamp(250) == (4, 300)
    assert log.fetch_offset_by_timestamp(-2) == (3, -1)
    log.close()
