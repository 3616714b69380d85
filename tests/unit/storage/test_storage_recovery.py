"""Recovery on open: torn and corrupt tails, trusted flushed data, leftovers, lost indexes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.records.batch import CRC_FROM, read_header
from pykraft.storage.leader_epoch import LeaderEpochCache
from pykraft.storage.log import Log
from tests.unit.storage.storage_helpers import (
    all_batches,
    crash_copy,
    make_batch,
    open_log,
    small_config,
)


def _locate(log: Log) -> list[tuple[Path, int, int, int]]:
    """(segment file, position, size, base offset) of every batch, in offset order."""
    located = []
    for segment in log.segments:
        for position, header in segment.iter_headers(0):
            located.append((segment.log_path, position, header.size, header.base_offset))
    return located


@settings(max_examples=50, deadline=None)
@given(
    shapes=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 120)), min_size=1, max_size=25),
    flush_after=st.integers(-1, 25),
    damage=st.sampled_from(["truncate", "flip", "none"]),
    pick=st.floats(0, 1, exclude_max=True),
    where=st.floats(0, 1, exclude_max=True),
)
def test_crash_then_reopen_keeps_exactly_a_prefix(
    shapes: list[tuple[int, int]], flush_after: int, damage: str, pick: float, where: float
) -> None:
    """A torn or corrupted unflushed tail is cut at the first bad batch; the rest is intact.

    Damage is confined to batches above the recovery point (below it data was fsynced). A
    tear loses everything written after it; a flipped byte may sit in any unflushed batch,
    and everything from that batch on must go.
    """
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        config = small_config()
        log = open_log(root / "crash.me-0", config)
        appended: list[bytes] = []
        for index, (count, value_size) in enumerate(shapes):
            batch = make_batch(count, value_size=value_size)
            log.append_as_leader(batch, leader_epoch=index // 4, now_ms=0)
            appended.append(bytes(batch))
            if index == flush_after:
                log.flush()
        recovery_point = log.recovery_point
        located = _locate(log)
        (root / "crashed").mkdir()
        copy = crash_copy(log, root / "crashed")
        log.close()
        unflushed = [i for i, item in enumerate(located) if item[3] >= recovery_point]
        kept = len(appended)
        if damage != "none" and unflushed:
            kept = unflushed[int(pick * len(unflushed))]
            path, position, size, _ = located[kept]
            target = copy / path.name
            if damage == "truncate":  # a crash loses a suffix of the writes
                os.truncate(target, position + int(where * size))
                for later in {item[0].name for item in located if item[0].name > path.name}:
                    (copy / later).unlink()
            else:  # flip a byte the CRC covers
                offset = position + CRC_FROM + int(where * (size - CRC_FROM))
                data = bytearray(target.read_bytes())
                data[offset] ^= 0x5A
                target.write_bytes(bytes(data))
        reopened = open_log(copy, config, recovery_point=recovery_point)
        assert all_batches(reopened) == appended[:kept]
        expected_end = read_header(appended[kept - 1]).next_offset if kept else 0
        assert reopened.log_end_offset == expected_end
        assert all(e.start_offset < expected_end for e in reopened.leader_epoch_cache.entries)
        reopened.check_invariants()
        info = reopened.append_as_leader(make_batch(2), leader_epoch=99, now_ms=0)
        assert info.first_offset == expected_end
        assert reopened.read(expected_end, 1000).first_offset == expected_end
        reopened.close()


def test_epochs_of_unflushed_batches_are_recovered_when_the_checkpoint_lost_them(
        tmp_path: Path) -> None:
    """A new epoch reaches the leader-epoch checkpoint at the log's flush (or its close),
    not at once. A crash leaves it as of the last flush while later batches survive:
    recovery assigns their epochs again from the batches themselves."""
    config = small_config()
    log = open_log(tmp_path / "t-0", config)
    for epoch in (1, 1, 2):
        log.append_as_leader(make_batch(2, value_size=50), leader_epoch=epoch, now_ms=0)
    log.flush()
    flushed_checkpoint = (log.dir / "leader-epoch-checkpoint").read_bytes()
    recovery_point = log.recovery_point
    for epoch in (3, 3, 5):
        log.append_as_leader(make_batch(2, value_size=50), leader_epoch=epoch, now_ms=0)
    expected = log.leader_epoch_cache.entries
    assert expected == ((1, 0), (2, 4), (3, 6), (5, 10))
    copy = crash_copy(log, tmp_path / "crashed")
    log.close()
    (copy / "leader-epoch-checkpoint").write_bytes(flushed_checkpoint)  # as of the flush
    reopened = open_log(copy, config, recovery_point=recovery_point)
    assert reopened.log_end_offset == 12
    assert reopened.leader_epoch_cache.entries == expected
    assert reopened.end_offset_for_epoch(3) == (3, 10)
    reopened.close()


def test_a_new_leaders_epoch_is_in_the_checkpoint_once_the_log_is_closed(
        tmp_path: Path) -> None:
    """A new leader's epoch is only noted in memory until the log's flush; closing the log
    writes it too, so a log reopened in place without recovery (a failed move between log
    dirs) or copied after its close still knows where that epoch began."""
    config = small_config()
    log = open_log(tmp_path / "t-0", config)
    log.append_as_leader(make_batch(2), leader_epoch=1, now_ms=0)
    log.flush()
    log.assign_epoch_start(4)
    log.append_as_leader(make_batch(2), leader_epoch=4, now_ms=0)
    on_disk = LeaderEpochCache.load(log.dir / "leader-epoch-checkpoint")
    assert on_disk.entries == ((1, 0),)  # not yet written
    log.close()
    reopened = open_log(tmp_path / "t-0", config, recovery_point=4, had_clean_shutdown=True)
    assert reopened.leader_epoch_cache.entries == ((1, 0), (4, 2))
    assert reopened.end_offset_for_epoch(1) == (1, 2)
    reopened.close()


def test_an_epoch_that_wrote_nothing_is_dropped_at_open_and_from_the_file_with_the_next_epoch(
        tmp_path: Path) -> None:
    """A leadership that ended before it wrote leaves an epoch at the log end: the reopened
    log forgets it at once; the file keeps it, since every open drops it again, until an
    epoch below the log end changes -- not written while the log opens (one file written per
    idle log was half of a broker's restart), nor at a close that would write the same
    entries below the log end (one file per new, empty log closed)."""
    config = small_config()
    log = open_log(tmp_path / "t-0", config)
    log.append_as_leader(make_batch(2), leader_epoch=1, now_ms=0)
    log.assign_epoch_start(4)
    log.close()
    checkpoint = tmp_path / "t-0" / "leader-epoch-checkpoint"
    written = checkpoint.read_bytes()
    assert LeaderEpochCache.load(checkpoint).entries == ((1, 0), (4, 2))
    reopened = open_log(tmp_path / "t-0", config, recovery_point=2, had_clean_shutdown=True)
    assert reopened.leader_epoch_cache.entries == ((1, 0),)
    assert checkpoint.read_bytes() == written  # not written at open
    reopened.close()
    assert checkpoint.read_bytes() == written  # nor at close: the same below the log end
    again = open_log(tmp_path / "t-0", config, recovery_point=2, had_clean_shutdown=True)
    assert again.leader_epoch_cache.entries == ((1, 0),)
    again.append_as_leader(make_batch(1), leader_epoch=5, now_ms=0)
    again.close()
    assert LeaderEpochCache.load(checkpoint).entries == ((1, 0), (5, 2))


def test_a_new_empty_log_closes_without_writing_its_epoch_file(tmp_path: Path) -> None:
    """A leader's first epoch on a new log starts at its end (0): every open drops such an
    entry, so neither its flush nor its close writes a file; once a batch is written, the
    flush writes it. A torn file read at open is rewritten at close whatever it held."""
    config = small_config()
    log = open_log(tmp_path / "t-0", config)
    log.assign_epoch_start(3)
    log.flush()  # as a clean shutdown does first
    log.close()
    checkpoint = tmp_path / "t-0" / "leader-epoch-checkpoint"
    assert not checkpoint.exists()
    reopened = open_log(tmp_path / "t-0", config, recovery_point=0, had_clean_shutdown=True)
    assert reopened.leader_epoch_cache.entries == ()
    reopened.assign_epoch_start(4)
    reopened.append_as_leader(make_batch(2), leader_epoch=4, now_ms=0)
    reopened.flush()  # the batch is durable, and so is its epoch
    assert LeaderEpochCache.load(checkpoint).entries == ((4, 0),)
    reopened.close()
    assert LeaderEpochCache.load(checkpoint).entries == ((4, 0),)
    checkpoint.write_bytes(b"0\n1\n4 x\n")  # torn; rebuilt from the log after a crash
    crashed = open_log(tmp_path / "t-0", config, recovery_point=0, had_clean_shutdown=False)
    assert crashed.leader_epoch_cache.entries == ((4, 0),)
    crashed.truncate_to(0)
    crashed.close()
    assert LeaderEpochCache.load(checkpoint).entries == ()


def test_a_stale_epoch_past_the_recovery_point_gives_way_to_the_recovered_batches(
        tmp_path: Path) -> None:
    """The file as a crash leaves it after an epoch was dropped in memory only (above) and
    batches of an older epoch came after (a leader elected uncleanly had them): recovery
    takes the epochs past where it starts from the batches, not from the file."""
    config = small_config()
    log = open_log(tmp_path / "t-0", config)
    log.append_as_leader(make_batch(2), leader_epoch=1, now_ms=0)
    log.flush()
    recovery_point = log.recovery_point
    log.append_as_leader(make_batch(2), leader_epoch=5, now_ms=0)
    copy = crash_copy(log, tmp_path / "crashed")
    log.close()
    (copy / "leader-epoch-checkpoint").write_text("0\n2\n1 0\n7 2\n")  # the stale file
    reopened = open_log(copy, config, recovery_point=recovery_point)
    assert reopened.leader_epoch_cache.entries == ((1, 0), (5, 2))
    assert reopened.end_offset_for_epoch(5) == (5, 4)
    reopened.close()


def test_a_torn_epoch_checkpoint_is_rebuilt_from_the_log_after_a_crash(
        tmp_path: Path) -> None:
    """The checkpoint is replaced without fsync, so a crash may leave it torn: after an
    unclean stop it is rebuilt from every batch's epoch."""
    config = small_config()
    log = open_log(tmp_path / "t-0", config)
    for epoch in (1, 4, 4, 6):
        log.append_as_leader(make_batch(2, value_size=50), leader_epoch=epoch, now_ms=0)
    expected = log.leader_epoch_cache.entries
    log.flush()
    log.close()
    (log.dir / "leader-epoch-checkpoint").write_bytes(b"0\n3\n1 0\n4")  # torn
    reopened = open_log(log.dir, config, recovery_point=0)
    assert reopened.leader_epoch_cache.entries == expected == ((1, 0), (4, 2), (6, 6))
    reopened.close()


def test_segments_below_the_recovery_point_are_trusted(tmp_path: Path) -> None:
    """Corruption below the recovery point is not re-read; from offset 0 it is found and cut."""
    config = small_config()
    log = open_log(tmp_path / "t-0", config)
    for _ in range(12):
        log.append_as_leader(make_batch(2, value_size=50), leader_epoch=0, now_ms=0)
    log.flush()
    end, first_segment = log.log_end_offset, log.segments[0].log_path
    log.close()
    data = bytearray(first_segment.read_bytes())
    data[-5] ^= 0xFF  # inside the last batch of the first segment, under its CRC
    first_segment.write_bytes(bytes(data))
    trusted = open_log(tmp_path / "t-0", config, recovery_point=end)
    assert trusted.log_end_offset == end
    trusted.close()
    recovered = open_log(tmp_path / "t-0", config, recovery_point=0)
    assert recovered.log_end_offset < end
    assert recovered.segment_count == 1
    recovered.check_invariants()
    recovered.close()


def test_missing_index_files_are_rebuilt(tmp_path: Path) -> None:
    """A segment without its index files is recovered and gets them back."""
    config = small_config()
    log = open_log(tmp_path / "t-0", config)
    for _ in range(12):
        log.append_as_leader(make_batch(2, value_size=50), leader_epoch=0, now_ms=0)
    log.flush()
    end = log.log_end_offset
    middle = log.segments[1]
    log.close()
    middle.offset_index.path.unlink()
    reopened = open_log(tmp_path / "t-0", config, recovery_point=end)
    assert middle.offset_index.path.exists() and middle.time_index.path.exists()
    assert reopened.segments[1].offset_index.entries > 0
    assert reopened.log_end_offset == end
    reopened.check_invariants()
    reopened.close()


def test_leftover_files_follow_kafkas_rules(tmp_path: Path) -> None:
    """.deleted/.cleaned/.tmp go, a completed .swap replaces its segments, orphans go."""
    config = small_config()
    log = open_log(tmp_path / "t-0", config)
    for _ in range(12):
        log.append_as_leader(make_batch(2, value_size=50), leader_epoch=0, now_ms=0)
    before = all_batches(log)
    bases = log.segment_base_offsets
    assert len(bases) >= 3
    log.flush()
    log.close()
    directory = log.dir

    def name(base: int, suffix: str) -> Path:
        return directory / f"{base:020d}{suffix}"

    # a finished compaction of segments 1..end whose rename was interrupted: merged data
    merged = b"".join(name(base, ".log").read_bytes() for base in bases[1:])
    name(bases[1], ".log.swap").write_bytes(merged)
    name(bases[1], ".index.swap").write_bytes(b"junk")
    # an unfinished one at a higher offset: its .cleaned marks it, so its .swap goes too
    name(bases[2], ".log.cleaned").write_bytes(b"partial")
    name(bases[2] + 1, ".log.swap").write_bytes(b"partial")
    (directory / "00000000000000000000.log.deleted").write_bytes(b"x")
    name(999_999, ".index").write_bytes(b"orphan")
    (directory / "leader-epoch-checkpoint.tmp").write_bytes(b"x")
    reopened = open_log(directory, config, recovery_point=bases[-1])
    leftovers = [p.name for p in directory.iterdir()
                 if p.name.endswith((".swap", ".cleaned", ".deleted", ".tmp"))]
    assert leftovers == []
    assert not name(999_999, ".index").exists()
    assert reopened.segment_base_offsets == (bases[0], bases[1])
    assert all_batches(reopened) == before
    reopened.check_invariants()
    reopened.close()


def test_clean_shutdown_skips_recovery_but_a_torn_tail_is_still_repaired(tmp_path: Path) -> None:
    """After a clean shutdown nothing is re-validated, unless the tail's framing is broken."""
    config = small_config(segment_bytes=1 << 20)
    log = open_log(tmp_path / "t-0", config)
    for _ in range(5):
        log.append_as_leader(make_batch(2, value_size=50), leader_epoch=0, now_ms=0)
    log.flush()
    path, end = log.segments[-1].log_path, log.log_end_offset
    log.close()
    with open(path, "ab") as stream:
        stream.write(b"\x00" * 7)  # a torn header after the last batch
    reopened = open_log(tmp_path / "t-0", config, recovery_point=0, had_clean_shutdown=True)
    assert reopened.log_end_offset == end
    assert reopened.recovery_point == end
    assert reopened.segments[-1].size == os.path.getsize(path)
    reopened.close()
