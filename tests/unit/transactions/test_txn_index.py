"""read_committed bookkeeping: the open transactions (last stable offset) and the aborted
ones of a partition, fed by a real Log's appends, rebuilt by scanning, reset by truncation."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from pykraft.broker.txn_markers import Marker, marker_batch
from pykraft.records.batch import read_header
from pykraft.records.record import build_batch
from pykraft.storage.log import Log
from pykraft.storage.log_config import LogConfig
from pykraft.storage.txn_index import AbortedTxn, TxnState, read_entries

NOW = 1_700_000_000_000


def data(pid: int, count: int = 2, *, transactional: bool = True,
         sequence: int = 0) -> bytearray:
    return bytearray(build_batch(
        [(b"k", b"v", (), NOW) for _ in range(count)], producer_id=pid, producer_epoch=0,
        base_sequence=sequence, is_transactional=transactional))


def marker(pid: int, commit: bool) -> bytearray:
    return bytearray(marker_batch(Marker(pid, 0, commit, 5, ()), NOW))


def open_log(path: Path) -> Log:
    return Log.open(path / "t-0", LogConfig(), recovery_point=0, log_start_offset=None,
                    now_ms=NOW)


def append(log: Log, records: bytearray) -> int:
    info = log.append_as_leader(records, leader_epoch=0, now_ms=NOW)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


def test_open_transactions_hold_the_last_stable_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(-1, transactional=False))  # 0-1
    assert log.last_stable_offset == 2
    first = append(log, data(7))  # 2-3 opens producer 7's transaction
    append(log, data(8))  # 4-5 opens producer 8's
    append(log, data(7, sequence=2))  # 6-7 same transaction
    assert first == 2 and log.last_stable_offset == 2
    append(log, marker(7, True))  # 8
    assert log.txns.ongoing == {8: 4}
    assert log.last_stable_offset == 4
    append(log, marker(8, False))  # 9
    assert log.last_stable_offset == 10 == log.high_watermark
    assert log.txns.aborted == [AbortedTxn(8, 4, 9, 10)]


def test_an_empty_log_has_no_transaction_state_until_its_first_batch(tmp_path: Path) -> None:
    """The last stable offset of a log without a batch is its high watermark, and asking
    for it makes no TxnState (an idle replica that followers fetch); the first batch, a
    transactional one, still holds it back."""
    log = open_log(tmp_path)
    assert log.last_stable_offset == 0 == log.high_watermark
    assert log._txns is None
    append(log, data(7))  # 0-1 opens producer 7's transaction
    assert log.high_watermark == 2 and log.last_stable_offset == 0
    append(log, marker(7, True))
    assert log.last_stable_offset == 3


def test_the_last_stable_offset_never_passes_the_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(-1, transactional=False))
    log.append_as_leader(data(-1, transactional=False), leader_epoch=0, now_ms=NOW)
    assert log.high_watermark == 2 and log.last_stable_offset == 2


def test_aborted_between_selects_overlapping_transactions(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(1))  # 0-1
    append(log, marker(1, False))  # 2
    append(log, data(2))  # 3-4
    append(log, data(3))  # 5-6
    append(log, marker(2, False))  # 7
    append(log, marker(3, True))  # 8
    txns = log.txns
    assert [a.producer_id for a in txns.aborted_between(0, 9)] == [1, 2]
    assert [a.producer_id for a in txns.aborted_between(3, 4)] == [2]
    assert txns.aborted_between(8, 9) == []  # producer 2's ended at 7
    assert [a.producer_id for a in txns.aborted_between(2, 3)] == [1]  # its marker


def test_a_scan_rebuilds_what_appends_built(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.txns.ongoing == {}  # built now: later appends update it
    for records in (data(1), data(2), marker(1, False), data(3), marker(2, True)):
        append(log, records)
    built = (dict(log.txns.ongoing), list(log.txns.aborted))
    log.close()
    reopened = open_log(tmp_path)
    reopened.update_high_watermark(reopened.log_end_offset)
    assert (reopened.txns.ongoing, reopened.txns.aborted) == built
    assert reopened.last_stable_offset == 5  # producer 3's transaction opened at 5


def test_truncation_below_a_marker_reopens_the_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(1))  # 0-1
    append(log, marker(1, False))  # 2
    assert log.txns.ongoing == {}
    log.truncate_to(2)
    assert log.txns.ongoing == {1: 0} and log.txns.aborted == []
    log.update_high_watermark(2)
    assert log.last_stable_offset == 0


def test_follower_appends_are_tracked(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path / "a"), open_log(tmp_path / "b")
    assert follower.txns.ongoing == {}
    for records in (data(4), marker(4, False)):
        append(leader, records)
    for _, batch in leader.iter_batches():
        follower.append_as_follower(batch)
    assert follower.txns.aborted == leader.txns.aborted == [AbortedTxn(4, 0, 2, 3)]


def test_markers_without_a_transaction_and_other_control_batches_are_ignored() -> None:
    state = TxnState()
    lone = marker(9, False)
    state.on_batch(read_header(lone), lambda: bytes(lone))
    assert state.aborted == [] and state.ongoing == {}
    plain = data(9, transactional=False)
    state.on_batch(read_header(plain), lambda: bytes(plain))
    assert state.ongoing == {}


# -- `.txnindex` files ------------------------------------------------------------------------

def txn_index(log: Log) -> dict[int, list[AbortedTxn]]:
    """Each segment's `.txnindex` entries, by base offset (segments without one left out)."""
    return {segment.base_offset: read_entries(segment.txn_index_path)
            for segment in log.segments if segment.txn_index_path.exists()}


def test_aborts_are_indexed_in_their_markers_segment_in_kafkas_layout(tmp_path: Path) -> None:
    """Kafka's entry: version 0, producer id, first offset, last offset (the marker), last
    stable offset (the oldest other open transaction's first offset, else marker + 1); the
    file is made with the first abort and a commit adds nothing."""
    log = open_log(tmp_path)
    append(log, data(1))  # 0-1
    append(log, data(2))  # 2-3
    append(log, marker(1, False))  # 4: producer 2's transaction is still open from 2
    append(log, marker(2, True))  # 5
    assert txn_index(log) == {0: [AbortedTxn(1, 0, 4, 2)]}
    data_bytes = log.segments[0].txn_index_path.read_bytes()
    assert data_bytes == struct.pack(">hqqqq", 0, 1, 0, 4, 2)
    log.roll(now_ms=NOW)
    append(log, data(3))  # 6-7
    append(log, marker(3, False))  # 8
    assert txn_index(log) == {0: [AbortedTxn(1, 0, 4, 2)], 6: [AbortedTxn(3, 6, 8, 9)]}


def test_a_follower_and_a_log_never_read_committed_index_aborts_too(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path / "a"), open_log(tmp_path / "b")
    for records in (data(4), marker(4, False)):
        append(leader, records)
    for _, batch in leader.iter_batches():
        follower.append_as_follower(batch)
    assert txn_index(leader) == txn_index(follower) == {0: [AbortedTxn(4, 0, 2, 3)]}


@pytest.mark.parametrize("snapshots", [True, False])
def test_truncation_and_an_unclean_restart_keep_the_index_true(tmp_path: Path,
                                                               snapshots: bool) -> None:
    """Truncating below a marker drops its entry; after an unclean stop the recovered
    segments' indexes are rewritten from the log when the transactions are next built,
    whether or not a producer snapshot had been written before the stop."""
    log = open_log(tmp_path)
    append(log, data(1))  # 0-1
    append(log, marker(1, False))  # 2
    append(log, data(2))  # 3-4
    append(log, marker(2, False))  # 5
    log.truncate_to(5)
    assert txn_index(log) == {0: [AbortedTxn(1, 0, 2, 3)]}
    append(log, marker(2, False))  # 5 again
    segment_index = log.segments[0].txn_index_path
    segment_index.write_bytes(segment_index.read_bytes()[:34])  # the second entry was lost
    log.close()
    if not snapshots:
        for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
            snapshot.unlink()
    reopened = Log.open(tmp_path / "t-0", LogConfig(), recovery_point=0,
                        log_start_offset=None, now_ms=NOW)  # not a clean shutdown
    reopened.update_high_watermark(reopened.log_end_offset)
    assert reopened.last_stable_offset == 6  # builds the transactions, rewrites the index
    assert txn_index(reopened) == {0: [AbortedTxn(1, 0, 2, 3), AbortedTxn(2, 3, 5, 6)]}
