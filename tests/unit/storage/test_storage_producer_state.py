"""Idempotent-producer state: sequence and epoch checks, duplicates, snapshots, rebuilds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.errors import (
    InvalidProducerEpoch,
    OutOfOrderSequenceNumber,
    TransactionCoordinatorFenced,
)
from pykraft.records.batch import read_header
from pykraft.records.record import ControlRecordType, build_batch, end_txn_marker_value
from pykraft.storage.producer_state import (
    SEQUENCE_MAX,
    ProducerState,
    ProducerStateEntry,
    decode_snapshot,
    encode_snapshot,
    increment_sequence,
    list_snapshots,
)
from tests.unit.storage.storage_helpers import open_log, small_config

PID = 4000


def producer_batch(count: int = 2, *, producer_id: int = PID, epoch: int = 0,
                   sequence: int = 0, transactional: bool = False,
                   timestamp: int = 1_000) -> bytearray:
    records = [(b"k%d" % i, b"v" * 20, [], timestamp + i) for i in range(count)]
    return bytearray(build_batch(records, producer_id=producer_id, producer_epoch=epoch,
                                 base_sequence=sequence, is_transactional=transactional))


def marker(*, producer_id: int = PID, epoch: int = 0, commit: bool = True,
           coordinator_epoch: int = 0) -> bytearray:
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    key = b"\x00\x00" + int(kind).to_bytes(2, "big")
    return bytearray(build_batch([(key, end_txn_marker_value(coordinator_epoch), [], 2_000)],
                                 producer_id=producer_id, producer_epoch=epoch,
                                 is_transactional=True, is_control=True))


def test_sequences_must_follow_each_other_within_an_epoch(tmp_path: Path) -> None:
    """In order is accepted; a gap or a step back is OUT_OF_ORDER_SEQUENCE_NUMBER and
    leaves the log untouched."""
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    assert log.append_as_leader(producer_batch(3, sequence=0), leader_epoch=0,
                                now_ms=1_000).first_offset == 0
    assert log.append_as_leader(producer_batch(2, sequence=3), leader_epoch=0,
                                now_ms=1_000).first_offset == 3
    for bad in (6, 4, 1):
        with pytest.raises(OutOfOrderSequenceNumber):
            log.append_as_leader(producer_batch(2, sequence=bad), leader_epoch=0, now_ms=1_000)
    assert log.log_end_offset == 5


def test_a_retried_batch_is_answered_with_its_first_offsets_and_not_written(
        tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    first = [log.append_as_leader(producer_batch(2, sequence=seq), leader_epoch=0, now_ms=1_000)
             for seq in range(0, 12, 2)]  # six batches: the first falls out of the last five
    again = log.append_as_leader(producer_batch(2, sequence=4), leader_epoch=0, now_ms=1_000)
    assert (again.first_offset, again.last_offset) == (first[2].first_offset,
                                                       first[2].last_offset)
    assert log.log_end_offset == 12
    with pytest.raises(OutOfOrderSequenceNumber):  # older than the last five batches
        log.append_as_leader(producer_batch(2, sequence=0), leader_epoch=0, now_ms=1_000)
    with pytest.raises(OutOfOrderSequenceNumber):  # same first sequence, other length
        log.append_as_leader(producer_batch(3, sequence=10), leader_epoch=0, now_ms=1_000)


def test_epochs_fence_zombies_and_a_new_epoch_starts_at_zero(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    log.append_as_leader(producer_batch(sequence=0, epoch=1), leader_epoch=0, now_ms=1_000)
    with pytest.raises(InvalidProducerEpoch):
        log.append_as_leader(producer_batch(sequence=2, epoch=0), leader_epoch=0, now_ms=1_000)
    with pytest.raises(OutOfOrderSequenceNumber):
        log.append_as_leader(producer_batch(sequence=5, epoch=2), leader_epoch=0, now_ms=1_000)
    log.append_as_leader(producer_batch(sequence=0, epoch=2), leader_epoch=0, now_ms=1_000)
    with pytest.raises(InvalidProducerEpoch):  # epoch 1 is a zombie now
        log.append_as_leader(producer_batch(sequence=2, epoch=1), leader_epoch=0, now_ms=1_000)
    assert log.log_end_offset == 4


def test_an_unknown_producer_may_start_at_any_sequence(tmp_path: Path) -> None:
    """KIP-360: its state may have gone with retention or expiration."""
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    log.append_as_leader(producer_batch(sequence=77), leader_epoch=0, now_ms=1_000)
    with pytest.raises(OutOfOrderSequenceNumber):
        log.append_as_leader(producer_batch(sequence=80), leader_epoch=0, now_ms=1_000)
    log.append_as_leader(producer_batch(sequence=79), leader_epoch=0, now_ms=1_000)


def test_batches_in_one_append_are_checked_in_order() -> None:
    """Two batches of one producer in one append chain; the state is not changed by check."""
    state = ProducerState()
    first, second = (read_header(producer_batch(2, sequence=s)) for s in (0, 2))
    assert state.check([first, second]) is None
    with pytest.raises(OutOfOrderSequenceNumber):
        state.check([first, read_header(producer_batch(2, sequence=3))])
    assert state.producers == {}


def test_sequences_wrap_at_int_max(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    log.append_as_leader(producer_batch(2, sequence=SEQUENCE_MAX - 1), leader_epoch=0,
                         now_ms=1_000)
    log.append_as_leader(producer_batch(2, sequence=0), leader_epoch=0, now_ms=1_000)
    again = log.append_as_leader(producer_batch(2, sequence=SEQUENCE_MAX - 1), leader_epoch=0,
                                 now_ms=1_000)
    assert again.first_offset == 0 and log.log_end_offset == 4
    assert increment_sequence(SEQUENCE_MAX, 1) == 0


def test_state_survives_clean_restart_crash_and_truncation(tmp_path: Path) -> None:
    """Rebuilt from a snapshot at the log end after a clean close, from the log's headers
    after a crash (snapshots at rolls bound the pass), and again after a truncation."""
    directory = tmp_path / "t-0"
    config = small_config(segment_bytes=400)
    log = open_log(directory, config)
    for seq in range(0, 20, 2):
        log.append_as_leader(producer_batch(2, sequence=seq), leader_epoch=0, now_ms=1_000)
    assert log.segment_count > 2 and list_snapshots(directory)  # snapshots at rolls
    log.flush()
    log.close()
    assert list_snapshots(directory)[-1] == 20
    reopened = open_log(directory, config, recovery_point=20, had_clean_shutdown=True)
    assert reopened.append_as_leader(producer_batch(2, sequence=18), leader_epoch=0,
                                     now_ms=1_000).first_offset == 18  # the duplicate
    with pytest.raises(OutOfOrderSequenceNumber):
        reopened.append_as_leader(producer_batch(2, sequence=30), leader_epoch=0, now_ms=1_000)
    reopened.close(snapshot=False)
    for offset in list_snapshots(directory):
        (directory / f"{offset:020d}.snapshot").unlink()
    crashed = open_log(directory, config, recovery_point=0)  # no snapshot: all headers
    assert crashed.producer_state.producers[PID].last_sequence == 19
    assert len(crashed.producer_state.producers[PID].batches) == 5
    crashed.truncate_to(10)
    assert all(offset <= 10 for offset in list_snapshots(directory))
    assert crashed.append_as_leader(producer_batch(2, sequence=10), leader_epoch=0,
                                    now_ms=1_000).first_offset == 10


def test_a_crash_leaves_no_snapshot_above_the_recovered_log_end(tmp_path: Path) -> None:
    """Recovery after a crash deletes the producer snapshots past the log end it found (a
    snapshot of batches the crash lost), and keeps the others."""
    directory = tmp_path / "t-0"
    config = small_config(segment_bytes=400)
    log = open_log(directory, config)
    for seq in range(0, 20, 2):
        log.append_as_leader(producer_batch(2, sequence=seq), leader_epoch=0, now_ms=1_000)
    kept = list_snapshots(directory)
    assert kept and max(kept) < 20  # snapshots at rolls
    log.flush()
    (directory / f"{40:020d}.snapshot").write_bytes((directory / f"{kept[-1]:020d}.snapshot")
                                                    .read_bytes())
    crashed = open_log(directory, config, recovery_point=0)  # no close: a crash
    assert crashed.log_end_offset == 20
    assert list_snapshots(directory) == kept
    assert crashed.producer_state.producers[PID].last_sequence == 19


def test_follower_appends_and_transactions_update_the_state(tmp_path: Path) -> None:
    """A follower applies batches without checks (a leader already did); a marker closes
    the producer's transaction; a new leader continues the producer's sequence."""
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    assert log.producer_state.producers == {}  # built (empty) before the appends
    for offset, batch in ((0, producer_batch(2, sequence=0, transactional=True)),
                          (2, marker()), (3, producer_batch(2, sequence=2))):
        stamped = bytearray(batch)
        stamped[0:8] = offset.to_bytes(8, "big")
        log.append_as_follower(stamped)
    entry = log.producer_state.producers[PID]
    assert entry.current_txn_first_offset == -1 and entry.last_sequence == 3
    with pytest.raises(OutOfOrderSequenceNumber):
        log.append_as_leader(producer_batch(sequence=5), leader_epoch=1, now_ms=1_000)
    assert log.append_as_leader(producer_batch(sequence=4, transactional=True),
                                leader_epoch=1, now_ms=1_000).first_offset == 5
    assert log.producer_state.producers[PID].current_txn_first_offset == 5


def test_idle_producers_expire_unless_in_a_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    log.append_as_leader(producer_batch(sequence=0, timestamp=1_000), leader_epoch=0,
                         now_ms=1_000)
    log.append_as_leader(producer_batch(producer_id=PID + 1, sequence=0, transactional=True,
                                        timestamp=1_000), leader_epoch=0, now_ms=1_000)
    assert log.expire_producers(now_ms=50_000, expiration_ms=100_000) == 0
    assert log.expire_producers(now_ms=200_000, expiration_ms=100_000) == 1
    assert set(log.producer_state.producers) == {PID + 1}


entries = st.builds(
    ProducerStateEntry,
    producer_id=st.integers(0, 2**63 - 1), producer_epoch=st.integers(-1, 2**15 - 1),
    coordinator_epoch=st.integers(-1, 2**31 - 1),
    current_txn_first_offset=st.integers(-1, 2**63 - 1),
    last_timestamp=st.integers(-1, 2**63 - 1))


@settings(max_examples=200)
@given(st.lists(entries, max_size=20, unique_by=lambda e: e.producer_id),
       st.integers(0, 2**40), st.integers(0, SEQUENCE_MAX), st.integers(0, 2**40))
def test_snapshot_round_trip(producers: list[ProducerStateEntry], end: int, sequence: int,
                             offset: int) -> None:
    """Kafka's snapshot layout: each producer's last batch survives; any flipped byte is
    caught by the CRC or the length check."""
    state = ProducerState({e.producer_id: e for e in producers}, end_offset=end)
    for entry in producers[::2]:
        entry.apply(read_header(producer_batch(3, producer_id=entry.producer_id,
                                               epoch=max(entry.producer_epoch, 0),
                                               sequence=sequence))._replace(
                                                   base_offset=offset))
    data = encode_snapshot(state)
    decoded = decode_snapshot(data, end)
    assert decoded.end_offset == end
    assert {pid: (dataclasses.astuple(e)[:2], e.batches[-1] if e.batches else None,
                  e.coordinator_epoch, e.current_txn_first_offset, e.last_timestamp)
            for pid, e in decoded.producers.items()} == \
           {pid: (dataclasses.astuple(e)[:2], e.batches[-1] if e.batches else None,
                  e.coordinator_epoch, e.current_txn_first_offset, e.last_timestamp)
            for pid, e in state.producers.items()}
    if len(data) > 6:
        broken = bytearray(data)
        broken[len(data) // 2 + 3] ^= 0xFF
        with pytest.raises(Exception, match="CRC|claims|version"):
            decode_snapshot(bytes(broken), end)


def test_a_coordinators_write_gets_the_epoch_check_only(tmp_path: Path) -> None:
    """The group coordinator writes TxnOffsetCommit offsets in the producer's transactional
    batch without a sequence, also right after an epoch bump (Kafka's COORDINATOR origin);
    an older epoch is still refused."""
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    log.append_as_leader(producer_batch(sequence=-1, epoch=0, transactional=True),
                         leader_epoch=0, now_ms=1_000, from_coordinator=True)
    log.append_as_leader(marker(epoch=0), leader_epoch=0, now_ms=1_000, from_coordinator=True)
    log.append_as_leader(producer_batch(sequence=-1, epoch=1, transactional=True),
                         leader_epoch=0, now_ms=1_000, from_coordinator=True)
    log.append_as_leader(producer_batch(sequence=-1, epoch=1, transactional=True),
                         leader_epoch=0, now_ms=1_000, from_coordinator=True)
    with pytest.raises(OutOfOrderSequenceNumber):  # a client may not do that
        log.append_as_leader(producer_batch(sequence=-1, epoch=2), leader_epoch=0,
                             now_ms=1_000)
    with pytest.raises(InvalidProducerEpoch):
        log.append_as_leader(producer_batch(sequence=-1, epoch=0, transactional=True),
                             leader_epoch=0, now_ms=1_000, from_coordinator=True)
    assert log.log_end_offset == 7


def test_a_deposed_coordinators_late_marker_is_fenced(tmp_path: Path) -> None:
    """The fault campaign's lost write (round 91 of `--rounds 100`, a bridge partition): the
    coordinator of epoch 3 was cut off while it owed an ABORT for transaction A; the new one
    (epoch 5) wrote it, finished A, and the producer's transaction B wrote here. Then the
    old coordinator's ABORT arrived and ended B on this partition, which B's COMMIT
    elsewhere had already made visible. A marker older than one the producer has seen is
    TRANSACTION_COORDINATOR_FENCED, and stays so after a restart with or without a
    snapshot; a newer coordinator's marker is accepted."""
    directory = tmp_path / "t-0"
    config = small_config(segment_bytes=1 << 20)
    log = open_log(directory, config)

    def append(batch: bytearray) -> int:  # markers come from a coordinator
        is_marker = read_header(batch).is_control
        info = log.append_as_leader(batch, leader_epoch=0, now_ms=1_000,
                                    from_coordinator=is_marker)
        return int(info.first_offset)

    append(producer_batch(2, sequence=0, transactional=True))  # A
    append(marker(commit=False, coordinator_epoch=3))  # A's abort by its coordinator ...
    append(producer_batch(2, sequence=2, transactional=True))  # B, under the new one
    with pytest.raises(TransactionCoordinatorFenced):
        append(marker(commit=False, coordinator_epoch=2))
    assert log.producer_state.producers[PID].current_txn_first_offset == 3  # B still open
    append(marker(commit=True, coordinator_epoch=5))  # B's commit by the new coordinator
    append(producer_batch(1, sequence=4, transactional=True))  # C
    end = log.log_end_offset
    with pytest.raises(TransactionCoordinatorFenced):  # the old one, delayed: C stays open
        append(marker(commit=False, coordinator_epoch=3))
    assert log.log_end_offset == end
    assert log.producer_state.producers[PID].coordinator_epoch == 5

    log.flush()
    log.close()  # a snapshot at the log end
    for snapshot in (True, False):
        if not snapshot:
            for offset in list_snapshots(directory):
                (directory / f"{offset:020d}.snapshot").unlink()
        log = open_log(directory, config, recovery_point=0 if not snapshot else end,
                       had_clean_shutdown=snapshot)
        assert log.producer_state.producers[PID].coordinator_epoch == 5
        with pytest.raises(TransactionCoordinatorFenced):
            append(marker(commit=False, coordinator_epoch=4))
        log.close(snapshot=False)
    log = open_log(directory, config, recovery_point=0)
    assert append(marker(commit=True, coordinator_epoch=6)) == end  # a newer one: C ends
    assert log.producer_state.producers[PID].current_txn_first_offset == -1


def test_a_follower_takes_the_coordinator_epoch_of_the_markers_it_copies(
        tmp_path: Path) -> None:
    """A follower that becomes leader fences the same late markers as its old leader."""
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    for offset, batch in ((0, producer_batch(2, sequence=0, transactional=True)),
                          (2, marker(coordinator_epoch=7)),
                          (3, producer_batch(1, sequence=2, transactional=True))):
        stamped = bytearray(batch)
        stamped[0:8] = offset.to_bytes(8, "big")
        log.append_as_follower(stamped)
    with pytest.raises(TransactionCoordinatorFenced):
        log.append_as_leader(marker(commit=False, coordinator_epoch=6), leader_epoch=1,
                             now_ms=1_000, from_coordinator=True)
    assert log.append_as_leader(marker(coordinator_epoch=7), leader_epoch=1, now_ms=1_000,
                                from_coordinator=True).first_offset == 4
