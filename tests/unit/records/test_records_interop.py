"""Cross-check against kafka-python's independent v2 record implementation, both directions.

kafka-python compresses with optional packages (python-snappy, lz4, zstandard); codecs whose
package is missing are skipped with a reason rather than silently passing.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec  # type: ignore[import-untyped]
from kafka.record.default_records import (  # type: ignore[import-untyped]
    DefaultRecordBatch,
    DefaultRecordBatchBuilder,
)
from kafka.record.memory_records import (  # type: ignore[import-untyped]
    MemoryRecords,
    MemoryRecordsBuilder,
)

from pykraft.records.batch import check_batch
from pykraft.records.codecs import CompressionType
from pykraft.records.record import (
    ControlRecordType,
    Record,
    build_batch,
    control_record_key,
    end_txn_marker_value,
    iter_batch_records,
    iter_records,
)

AVAILABLE = {
    CompressionType.NONE: True,
    CompressionType.GZIP: kafka_codec.has_gzip(),
    CompressionType.SNAPPY: kafka_codec.has_snappy(),
    CompressionType.LZ4: kafka_codec.has_lz4(),
    CompressionType.ZSTD: kafka_codec.has_zstd(),
}
CODECS = [
    pytest.param(
        int(codec),
        marks=pytest.mark.skipif(not available, reason=f"kafka-python lacks {codec.name}"),
        id=codec.name.lower(),
    )
    for codec, available in AVAILABLE.items()
]

maybe_bytes = st.one_of(st.none(), st.binary(max_size=60))
headers = st.lists(st.tuples(st.text(max_size=10), maybe_bytes), max_size=3)
timestamps = st.integers(0, 1 << 50)
# A long repetitive value in every batch keeps it compressible: kafka-python falls back to
# no compression when compressing does not pay, and then the codec would go untested.
padding = b"pad" * 200
records_strategy = st.lists(
    st.tuples(maybe_bytes, maybe_bytes, headers, timestamps), min_size=1, max_size=15
).map(lambda records: [(b"padding", padding, [], records[0][3]), *records])


KafkaPythonRecord = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def kafka_python_view(batch: bytes) -> list[KafkaPythonRecord]:
    parsed = DefaultRecordBatch(batch)
    assert parsed.validate_crc()
    return [
        (record.offset, record.timestamp, record.key, record.value, list(record.headers))
        for record in parsed
    ]


@pytest.mark.parametrize("codec", CODECS)
@given(
    records=records_strategy,
    base_offset=st.integers(0, 1 << 40),
    log_append_time=st.booleans(),
    is_transactional=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_kafka_python_reads_our_batches(
    codec: int,
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
    base_offset: int,
    log_append_time: bool,
    is_transactional: bool,
) -> None:
    """Batches we build are read by kafka-python with the same header and records."""
    batch = build_batch(
        records,
        base_offset=base_offset,
        compression=codec,
        producer_id=77,
        producer_epoch=3,
        base_sequence=1000,
        partition_leader_epoch=9,
        is_transactional=is_transactional,
        log_append_time=log_append_time,
    )
    parsed = DefaultRecordBatch(batch)
    assert parsed.compression_type == codec
    assert parsed.timestamp_type == (1 if log_append_time else 0)
    assert parsed.is_transactional == is_transactional
    assert (parsed.producer_id, parsed.producer_epoch, parsed.base_sequence) == (77, 3, 1000)
    assert (parsed.base_offset, parsed.leader_epoch) == (base_offset, 9)
    assert parsed.last_offset_delta == len(records) - 1
    max_timestamp = max(record[3] for record in records)
    assert parsed.max_timestamp == max_timestamp
    assert kafka_python_view(batch) == [
        (
            base_offset + index,
            max_timestamp if log_append_time else timestamp,
            key,
            value,
            list(record_headers),
        )
        for index, (key, value, record_headers, timestamp) in enumerate(records)
    ]


@pytest.mark.parametrize("codec", CODECS)
@given(records=records_strategy, is_transactional=st.booleans())
@settings(max_examples=60, deadline=None)
def test_we_read_kafka_python_batches(
    codec: int,
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
    is_transactional: bool,
) -> None:
    """Batches kafka-python builds are read by us with the same header and records."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=is_transactional,
        producer_id=12,
        producer_epoch=1,
        base_sequence=5,
        batch_size=1 << 30,
    )
    for offset, (key, value, record_headers, timestamp) in enumerate(records):
        assert builder.append(offset, timestamp, key, value, record_headers) is not None
    batch = bytes(builder.build())
    header = check_batch(batch)
    assert header.compression == codec
    assert header.is_transactional == is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (12, 1, 5)
    assert header.records_count == len(records)
    assert list(iter_records(batch)) == [
        Record(offset, timestamp, key, value, tuple(record_headers))
        for offset, (key, value, record_headers, timestamp) in enumerate(records)
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_kafka_python_memory_records(codec: int) -> None:
    """Several kafka-python batches back to back, as a fetch returns them, each read whole."""
    buffer = b""
    for batch_index in range(3):
        builder = MemoryRecordsBuilder(
            magic=2, compression_type=codec, batch_size=1 << 20, offset=batch_index * 10
        )
        for index in range(10):
            builder.append(1000 + index, b"key-%d" % index, padding, [("n", b"%d" % index)])
        builder.close()
        buffer += bytes(builder.buffer())
    batches = list(iter_batch_records(buffer))
    # kafka-python, like a producer, leaves baseOffset 0 and writes its offsets as deltas
    assert [header.last_offset_delta for header, _ in batches] == [9, 19, 29]
    assert all(header.compression == codec for header, _ in batches)
    offsets = [record.offset for _, records in batches for record in records]
    assert offsets == list(range(30))
    assert [record.headers for record in batches[2][1][:2]] == [(("n", b"0"),), (("n", b"1"),)]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_our_buffer_of_batches(codec: int) -> None:
    """kafka-python's MemoryRecords walks a buffer of our batches and sees control records."""
    data = build_batch(
        [(b"k", padding, [], 5)] * 4,
        base_offset=0,
        compression=codec,
        producer_id=8,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    marker = build_batch(
        [(control_record_key(ControlRecordType.ABORT), end_txn_marker_value(3), [], 6)],
        base_offset=4,
        producer_id=8,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    records = MemoryRecords(data + marker)
    first, second = records.next_batch(), records.next_batch()
    assert records.next_batch() is None
    assert [record.offset for record in first] == [0, 1, 2, 3]
    assert second.is_control_batch
    (control,) = list(second)
    assert (control.offset, control.abort, control.version) == (4, True, 0)
