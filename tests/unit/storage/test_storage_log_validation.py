"""The leader append checks every record as Kafka's LogValidator does: a refused batch leaves
the log untouched and names its bad records; a header that misstates the records' largest
timestamp is corrected, CRC and all."""

from __future__ import annotations

from pathlib import Path

import pytest

from pykraft.errors import CorruptRecord, InvalidRecord, InvalidTimestamp, MessageTooLarge
from pykraft.records.batch import TIMESTAMP_TYPE_BIT, check_batch
from pykraft.records.codecs import CompressionType
from pykraft.records.record import build_batch, iter_records
from pykraft.testing.batches import frame_batch, raw_record
from tests.unit.storage.storage_helpers import all_batches, open_log, small_config

NOW = 1_700_000_000_000
HOUR = 3_600_000


def _log(tmp_path: Path, **overrides: object):  # type: ignore[no-untyped-def]
    config = small_config(segment_bytes=1 << 20, max_message_bytes=1 << 20, **overrides)
    return open_log(tmp_path / "t-0", config, now_ms=NOW)


def test_a_record_outside_the_timestamp_bounds_is_named(tmp_path: Path) -> None:
    log = _log(tmp_path, message_timestamp_before_max_ms=HOUR,
               message_timestamp_after_max_ms=HOUR)
    # the header's base and max timestamps are in bounds: only record 1 is not
    section = (raw_record(0, b"a", b"v") + raw_record(1, b"b", b"v", timestamp_delta=-2 * HOUR)
               + raw_record(2, b"c", b"v"))
    batch = bytearray(frame_batch(section, 3, base_timestamp=NOW, max_timestamp=NOW))
    with pytest.raises(InvalidTimestamp) as refused:
        log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    assert [index for index, _ in refused.value.record_errors] == [1]
    assert log.log_end_offset == 0


def test_a_producer_may_not_claim_log_append_time(tmp_path: Path) -> None:
    log = _log(tmp_path)
    batch = bytearray(frame_batch(raw_record(0, b"a", b"v") + raw_record(1, b"b", b"v"), 2,
                                  attributes=TIMESTAMP_TYPE_BIT, base_timestamp=NOW))
    with pytest.raises(InvalidTimestamp) as refused:
        log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    assert [index for index, _ in refused.value.record_errors] == [0, 1]
    assert log.log_end_offset == 0


def test_keyless_records_of_a_compacted_topic_are_named_even_when_compressed(
        tmp_path: Path) -> None:
    log = _log(tmp_path, cleanup_policy=("compact",))
    section = raw_record(0, b"a", b"v") + raw_record(1, None, b"v") + raw_record(2, None, b"v")
    batch = bytearray(frame_batch(section, 3, codec=CompressionType.LZ4))
    with pytest.raises(InvalidRecord) as refused:
        log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    assert [index for index, _ in refused.value.record_errors] == [1, 2]
    assert log.log_end_offset == 0


def test_a_wrong_max_timestamp_is_corrected_and_the_crc_redone(tmp_path: Path) -> None:
    log = _log(tmp_path)
    section = raw_record(0, b"a", b"v") + raw_record(1, b"b", b"v", timestamp_delta=7)
    batch = bytearray(frame_batch(section, 2, base_timestamp=NOW, max_timestamp=NOW - 99))
    info = log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    assert info.max_timestamp == NOW + 7
    (stored,) = all_batches(log)
    assert check_batch(stored).max_timestamp == NOW + 7  # and its CRC holds
    assert [record.timestamp for record in iter_records(stored)] == [NOW, NOW + 7]


@pytest.mark.parametrize("section, count, error", [
    (raw_record(0, b"a", b"v", length_adjust=3), 1, InvalidRecord),
    (raw_record(0, b"a", b"v") + raw_record(0, b"b", b"v"), 2, InvalidRecord),
    (raw_record(0, b"a", b"v"), 2, InvalidRecord),
])
def test_garbage_under_a_valid_crc_appends_nothing(
        tmp_path: Path, section: bytes, count: int, error: type[Exception]) -> None:
    log = _log(tmp_path)
    good = bytearray(build_batch([(b"a", b"v", (), NOW)]))
    log.append_as_leader(good, leader_epoch=0, now_ms=NOW)
    with pytest.raises(error):
        log.append_as_leader(bytearray(frame_batch(section, count)), leader_epoch=0,
                             now_ms=NOW)
    assert log.log_end_offset == 1
    assert len(all_batches(log)) == 1


def test_a_bomb_is_refused_at_the_bound_given(tmp_path: Path) -> None:
    log = _log(tmp_path)
    bomb = bytearray(frame_batch(raw_record(0, b"k", b"\0" * (8 << 20)), 1,
                                 codec=CompressionType.ZSTD))
    with pytest.raises(MessageTooLarge):
        log.append_as_leader(bomb, leader_epoch=0, now_ms=NOW,
                             decompressed_bytes_max=1 << 20)
    assert log.log_end_offset == 0


def test_undecodable_compressed_bytes_are_corrupt(tmp_path: Path) -> None:
    log = _log(tmp_path)
    batch = bytearray(frame_batch(b"\x04\x22\x4d\x18garbage" * 3, 1, codec=CompressionType.LZ4,
                                  compress_section=False))
    with pytest.raises(CorruptRecord):
        log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == 0
