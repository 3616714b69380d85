"""`pykraft dump-log` on segment and index files written here, by us and by kafka-python."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from pykraft.cli.main import main
from pykraft.records.record import (
    BatchBuilder,
    ControlRecordType,
    build_batch,
    control_record_key,
    end_txn_marker_value,
)

T0 = 1_700_000_000_000


def write_segment(directory: Path, *batches: bytes, tail: bytes = b"", base: int = 0) -> Path:
    path = directory / f"{base:020d}.log"
    path.write_bytes(b"".join(batches) + tail)
    return path


def dump(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = main(["dump-log", *argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def fields(line: str) -> dict[str, str]:
    """'a: 1 b: x' -> {'a': '1', 'b': 'x'} (values without spaces)."""
    return dict(re.findall(r"(\w+): (\S*)", line))


def idempotent_batch() -> bytes:
    return build_batch(
        [(b"k1", b"hello", [("h1", b"x"), ("h2", None)], T0), (None, b"world", [], T0 + 5)],
        base_offset=0,
        producer_id=7,
        producer_epoch=3,
        base_sequence=10,
        partition_leader_epoch=4,
    )


def test_batch_lines_carry_every_header_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line per batch with Kafka's field names, values from the header, position, size."""
    first = idempotent_batch()
    second = build_batch([(None, b"z" * 100, [], T0 + 9)], base_offset=2, compression=1)
    segment = write_segment(tmp_path, first, second)
    code, lines, _ = dump(capsys, "--files", str(segment))
    assert code == 0
    assert lines[:2] == [f"Dumping {segment}", "Log starting offset: 0"]
    assert len(lines) == 4
    one, two = fields(lines[2]), fields(lines[3])
    assert one == {
        "baseOffset": "0",
        "lastOffset": "1",
        "count": "2",
        "baseSequence": "10",
        "lastSequence": "11",
        "producerId": "7",
        "producerEpoch": "3",
        "partitionLeaderEpoch": "4",
        "isTransactional": "false",
        "isControl": "false",
        "position": "0",
        "CreateTime": str(T0 + 5),
        "size": str(len(first)),
        "magic": "2",
        "compresscodec": "none",
        "crc": str(struct.unpack_from(">I", first, 17)[0]),
        "isvalid": "true",
    }
    assert (two["position"], two["compresscodec"], two["baseSequence"]) == (
        str(len(first)),
        "gzip",
        "-1",
    )
    assert lines[2].startswith("baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 10")
    assert lines[2].endswith("compresscodec: none crc: " + one["crc"] + " isvalid: true")


def test_deep_iteration_prints_records_without_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    segment = write_segment(tmp_path, idempotent_batch())
    _, lines, _ = dump(capsys, "--files", str(segment), "--deep-iteration")
    assert lines[3:] == [
        f"| offset: 0 CreateTime: {T0} keySize: 2 valueSize: 5 sequence: 10 headerKeys: [h1,h2]",
        f"| offset: 1 CreateTime: {T0 + 5} keySize: -1 valueSize: 5 sequence: 11 headerKeys: []",
    ]


def test_print_data_log_adds_key_and_payload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--print-data-log implies deep iteration; a null key prints no key field."""
    segment = write_segment(tmp_path, idempotent_batch())
    _, lines, _ = dump(capsys, "--files", str(segment), "--print-data-log")
    assert lines[3].endswith("headerKeys: [h1,h2] key: k1 payload: hello")
    assert lines[4].endswith("headerKeys: [] payload: world")


def test_segment_written_by_kafka_python_decodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another implementation's batch bytes (here gzip-compressed) dump the same way."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=1,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for offset in range(3):
        builder.append(
            offset,
            timestamp=T0 + offset,
            key=None,
            value=f"value-{offset}-".encode() * 20,
            headers=[],
        )
    segment = write_segment(tmp_path, bytes(builder.build()), base=100)
    _, lines, _ = dump(capsys, "--files", str(segment), "--print-data-log")
    assert lines[1] == "Log starting offset: 100"
    assert fields(lines[2])["compresscodec"] == "gzip"
    assert [line.rsplit("payload: ", 1)[1] for line in lines[3:]] == [
        f"value-{offset}-" * 20 for offset in range(3)
    ]


def test_control_batches_show_the_transaction_marker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    builder = BatchBuilder(
        base_offset=5, producer_id=9, producer_epoch=0, is_transactional=True, is_control=True
    )
    builder.append(5, T0, control_record_key(ControlRecordType.ABORT), end_txn_marker_value(12))
    segment = write_segment(tmp_path, builder.build())
    _, lines, _ = dump(capsys, "--files", str(segment), "--print-data-log")
    assert "isTransactional: true isControl: true" in lines[2]
    assert lines[3].endswith("headerKeys: [] endTxnMarker: ABORT coordinatorEpoch: 12")


def test_trailing_bytes_and_zero_fill_are_reported_as_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A torn tail (part of a batch) or a preallocated zero tail ends the dump, counted."""
    batch = idempotent_batch()
    torn = write_segment(tmp_path, batch, tail=batch[:30])
    _, lines, _ = dump(capsys, "--files", str(torn))
    assert len(lines) == 4
    assert lines[3] == f"Found 30 invalid bytes at the end of {torn.name}"
    zeroed = write_segment(tmp_path, batch, tail=b"\x00" * 100, base=1)
    _, lines, _ = dump(capsys, "--files", str(zeroed))
    assert len(lines) == 4
    assert lines[3] == f"Found 100 invalid bytes at the end of {zeroed.name}"


def test_a_corrupted_batch_is_printed_invalid_and_not_decoded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    batch = bytearray(idempotent_batch())
    batch[-1] ^= 0xFF  # inside the CRC-covered records
    segment = write_segment(tmp_path, bytes(batch), idempotent_batch())
    code, lines, _ = dump(capsys, "--files", str(segment), "--deep-iteration")
    assert code == 0
    assert lines[2].endswith("isvalid: false")
    assert lines[3] == "| records not decoded: the batch's CRC does not match"
    assert lines[4].endswith("isvalid: true")  # the next batch is still read


def test_empty_segment_prints_only_the_starting_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    segment = write_segment(tmp_path)
    _, lines, _ = dump(capsys, "--files", str(segment))
    assert lines == [f"Dumping {segment}", "Log starting offset: 0"]


def test_offset_and_time_indexes_stop_at_the_zero_fill(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Index entries are relative to the file's base offset; zeros past the last end it."""
    index = tmp_path / "00000000000000000100.index"
    index.write_bytes(struct.pack(">iiii", 0, 0, 7, 4096) + b"\x00" * 64)
    time_index = tmp_path / "00000000000000000100.timeindex"
    time_index.write_bytes(struct.pack(">qiqi", T0, 3, T0 + 9, 7) + b"\x00" * 48)
    _, lines, _ = dump(capsys, "--files", f"{index},{time_index}")
    assert lines == [
        f"Dumping {index}",
        "offset: 100 position: 0",
        "offset: 107 position: 4096",
        f"Dumping {time_index}",
        f"timestamp: {T0} offset: 103",
        f"timestamp: {T0 + 9} offset: 107",
    ]


def test_empty_index_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = tmp_path / "00000000000000000000.index"
    index.write_bytes(b"")
    _, lines, _ = dump(capsys, "--files", str(index))
    assert lines[1] == f"{index} is empty."


def test_transaction_index_entries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 0, 7, 10, 20, 15))
    _, lines, _ = dump(capsys, "--files", str(path))
    assert lines[1] == (
        "version: 0 producerId: 7 firstOffset: 10 lastOffset: 20 lastStableOffset: 15"
    )


def test_snapshot_checkpoint_files_dump_as_batches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "00000000000000000042-0000000003.checkpoint"
    path.write_bytes(idempotent_batch())
    _, lines, _ = dump(capsys, "--files", str(path))
    assert lines[1] == "Snapshot end offset: 42, epoch: 3"
    assert lines[2].startswith("baseOffset: 0 ")


def test_unknown_and_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown suffixes are skipped with a note; a missing file is an error (exit 1) but the
    other files are still dumped."""
    other = tmp_path / "notes.txt"
    other.write_text("hi")
    segment = write_segment(tmp_path, idempotent_batch())
    missing = tmp_path / "00000000000000000099.log"
    code, lines, err = dump(capsys, "--files", f"{other},{missing},{segment}")
    assert code == 1
    assert f"Ignoring unknown file {other}" in err
    assert f"Error: cannot read {missing}: No such file or directory" in err
    assert lines[-1].startswith("baseOffset: 0 ")


def test_a_segment_name_without_base_offset_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "segment.log"
    path.write_bytes(idempotent_batch())
    code, _, err = dump(capsys, "--files", str(path))
    assert code == 1
    assert "the file name does not start with a base offset" in err


def test_a_reader_that_goes_away_ends_the_dump_quietly(tmp_path: Path) -> None:
    """`dump-log ... | head -1`: the closed pipe is not reported as a file that cannot be
    read, and the exit code is 0 (it was 'Error: cannot read ...: Broken pipe', exit 1)."""
    batches = [build_batch([(b"k", b"v" * 100, [], T0)], base_offset=n) for n in range(3000)]
    segment = write_segment(tmp_path, *batches)
    dumper = subprocess.Popen(
        [sys.executable, "-m", "pykraft", "dump-log", "--files", str(segment),
         "--print-data-log"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert dumper.stdout is not None and dumper.stderr is not None
    assert dumper.stdout.readline().startswith(b"Dumping ")
    dumper.stdout.close()  # as `head -1` exits
    code = dumper.wait(timeout=60)
    assert (code, dumper.stderr.read().decode()) == (0, "")
