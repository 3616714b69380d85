"""`__transaction_state` records: golden bytes (Kafka's layout) and round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykraft.broker.transaction_coordinator.records import (
    PartitionsSchema,
    TransactionLogKey,
    TransactionLogValue,
    TransactionRecord,
    TxnStatus,
    decode_record,
    encode_key,
    encode_record,
    encode_value,
    group_partitions,
)
from pykraft.errors import CorruptRecord


def test_key_golden_bytes() -> None:
    # int16 key version 0, then an int16-length string
    assert encode_key(TransactionLogKey(transactional_id="tx")) == bytes.fromhex("0000" "0002"
                                                                                 "7478")


def test_value_v0_golden_bytes() -> None:
    value = TransactionLogValue(
        producer_id=5, producer_epoch=2, transaction_timeout_ms=60000,
        transaction_status=TxnStatus.ONGOING,
        transaction_partitions=group_partitions([("t", 1), ("t", 0), ("a", 3)]),
        transaction_last_update_timestamp_ms=10, transaction_start_timestamp_ms=9)
    assert encode_value(value) == bytes.fromhex(
        "0000"                  # value version 0
        "0000000000000005"      # producer id
        "0002"                  # epoch
        "0000ea60"              # timeout 60000
        "01"                    # Ongoing
        "00000002"              # two topics
        "000161" "00000001" "00000003"             # a: [3]
        "000174" "00000002" "00000000" "00000001"  # t: [0, 1]
        "000000000000000a"      # last update
        "0000000000000009")     # start


def test_empty_state_writes_null_partitions() -> None:
    value = TransactionLogValue(producer_id=1, transaction_status=TxnStatus.EMPTY)
    encoded = encode_value(value)
    assert encoded is not None
    # version, pid, epoch, timeout, status, then int32 -1 (null array)
    assert encoded[2 + 8 + 2 + 4 + 1:][:4] == b"\xff\xff\xff\xff"
    assert value.version == 0


def test_value_v1_tagged_fields_golden_bytes() -> None:
    value = TransactionLogValue(producer_id=5, next_producer_id=6,
                                client_transaction_version=2)
    assert value.version == 1
    assert encode_value(value) == bytes.fromhex(
        "0001" "0000000000000005" "0000" "00000000" "00"
        "00"                    # null compact array
        "0000000000000000" "0000000000000000"
        "02" "01" "08" "0000000000000006" "02" "02" "0002")  # tags 1 and 2


def test_tombstone_round_trip() -> None:
    key, value = encode_record(TransactionRecord(TransactionLogKey(transactional_id="x"), None))
    assert value is None
    decoded = decode_record(key, None)
    assert decoded == TransactionRecord(TransactionLogKey(transactional_id="x"), None)


def test_unknown_key_version_is_skipped() -> None:
    assert decode_record(b"\x00\x05\x00\x01x", b"\x00\x00") is None


@pytest.mark.parametrize("key, value", [
    (None, None), (b"\x00", None), (b"\x00\x00\x00\x05ab", None),
    (b"\x00\x00\x00\x01x", b"\x00"), (b"\x00\x00\x00\x01x", b"\x00\x00\x00\x01"),
])
def test_malformed_records_raise(key: bytes | None, value: bytes | None) -> None:
    with pytest.raises(CorruptRecord):
        decode_record(key, value)


def test_unknown_status_raises() -> None:
    encoded = encode_value(TransactionLogValue(transaction_status=9))
    with pytest.raises(CorruptRecord, match="unknown transaction status"):
        decode_record(encode_key(TransactionLogKey(transactional_id="x")), encoded)


def test_kafka_state_names() -> None:
    assert [each.kafka_name for each in TxnStatus] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
        "CompleteAbort", "Dead", "PrepareEpochFence"]


_partitions = st.frozensets(st.tuples(st.text(min_size=1, max_size=5),
                                      st.integers(0, 2**31 - 1)), max_size=6)


@given(st.text(max_size=20), st.integers(0, 2**63 - 1), st.integers(-1, 2**63 - 1),
       st.integers(-1, 2**63 - 1), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1),
       st.sampled_from(list(TxnStatus)), _partitions, st.integers(0, 2**62),
       st.integers(-1, 2**62), st.integers(0, 2))
def test_round_trip(txn_id: str, pid: int, previous: int, following: int, epoch: int,
                    timeout: int, status: TxnStatus, partitions: frozenset[tuple[str, int]],
                    updated: int, started: int, client_version: int) -> None:
    grouped: tuple[PartitionsSchema, ...] | None = (
        None if status is TxnStatus.EMPTY else group_partitions(partitions))
    value = TransactionLogValue(
        producer_id=pid, previous_producer_id=previous, next_producer_id=following,
        producer_epoch=epoch, transaction_timeout_ms=timeout, transaction_status=status,
        transaction_partitions=grouped, transaction_last_update_timestamp_ms=updated,
        transaction_start_timestamp_ms=started, client_transaction_version=client_version)
    record = TransactionRecord(TransactionLogKey(transactional_id=txn_id), value)
    decoded = decode_record(*encode_record(record))
    assert decoded == record
    assert decoded is not None and decoded.value is not None
    assert decoded.value.status is status
    assert decoded.value.partitions() == (frozenset() if grouped is None else partitions)
