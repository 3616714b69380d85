"""`pykraft dump-log`: print what is in segment and index files, like kafka-dump-log.sh.

Reads files directly, with no broker: `.log` segments and `.checkpoint` snapshots batch by
batch (a line per batch; with `--deep-iteration` a `| offset: ...` line per record; with
`--print-data-log` keys and values too), `.index` as "offset: N position: P" and
`.timeindex` as "timestamp: T offset: N" entries, `.txnindex` as aborted transactions.

A segment is read through a memory map, so a 1 GiB segment costs no 1 GiB of heap. Bytes
after the last whole batch (a crash's torn write, or the zeros of a preallocated file) are
counted and reported as "Found N invalid bytes at the end of <file>", as Kafka does. A batch
whose CRC does not match is printed with `isvalid: false`; its records are not decoded.
"""

from __future__ import annotations

import argparse
import mmap
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final, TextIO

from pykraft.cli.args import ArgumentParser, CommandError
from pykraft.errors import CorruptRecord, KafkaError
from pykraft.records.batch import (
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_SEQUENCE,
    BatchHeader,
    compute_crc,
    iter_headers,
)
from pykraft.records.record import (
    ControlRecordType,
    Record,
    iter_records,
    read_control_record_type,
    read_end_txn_marker,
)

__all__ = ["add_parser", "dump_file", "run"]

COMPRESSION_NAMES: Final = ("none", "gzip", "snappy", "lz4", "zstd")
_OFFSET_INDEX_ENTRY: Final = struct.Struct(">ii")  # relative offset, position
_TIME_INDEX_ENTRY: Final = struct.Struct(">qi")  # timestamp, relative offset
_ABORTED_TXN_ENTRY: Final = struct.Struct(">hqqqq")  # version, pid, first, last, LSO
_INT32_MAX: Final = (1 << 31) - 1


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "dump-log", help="print the contents of log segment and index files (kafka-dump-log.sh)"
    )
    parser.add_argument("--files", required=True, metavar="PATH[,PATH...]")
    parser.add_argument(
        "--print-data-log",
        action="store_true",
        help="print keys and values (implies --deep-iteration)",
    )
    parser.add_argument(
        "--deep-iteration", action="store_true", help="print every record, not only batch headers"
    )
    parser.set_defaults(handler=_run_args)


def _run_args(args: argparse.Namespace) -> int:
    paths = [path.strip() for path in args.files.split(",") if path.strip()]
    if not paths:
        raise CommandError("--files names no file")
    deep = args.deep_iteration or args.print_data_log
    return run(paths, print_data=args.print_data_log, deep_iteration=deep)


def run(paths: list[str], *, print_data: bool, deep_iteration: bool) -> int:
    """Dump each file in turn; one that cannot be read is reported and makes the exit code 1."""
    status = 0
    for path in paths:
        print(f"Dumping {path}")
        try:
            dumped = dump_file(Path(path), sys.stdout, print_data, deep_iteration)
        except OSError as error:
            print(f"Error: cannot read {path}: {error.strerror}", file=sys.stderr)
            status = 1
            continue
        except CommandError as error:
            print(f"Error: {error}", file=sys.stderr)
            status = 1
            continue
        if not dumped:
            print(f"Ignoring unknown file {path}", file=sys.stderr)
    return status


def dump_file(path: Path, out: TextIO, print_data: bool, deep_iteration: bool) -> bool:
    """Print one file's contents; False when its kind (by suffix) is not one we know."""
    suffix = path.suffix
    if suffix == ".log":
        print(f"Log starting offset: {_base_offset(path)}", file=out)
        _dump_batches(path, out, print_data, deep_iteration)
    elif suffix == ".checkpoint":
        end_offset, epoch = _snapshot_id(path)
        print(f"Snapshot end offset: {end_offset}, epoch: {epoch}", file=out)
        _dump_batches(path, out, print_data, deep_iteration)
    elif suffix == ".index":
        _dump_offset_index(path, out)
    elif suffix == ".timeindex":
        _dump_time_index(path, out)
    elif suffix == ".txnindex":
        _dump_txn_index(path, out)
    else:
        return False
    return True


def _base_offset(path: Path) -> int:
    stem = path.name.split(".")[0]
    if not stem.isdigit():
        raise CommandError(f"{path}: the file name does not start with a base offset")
    return int(stem)


def _snapshot_id(path: Path) -> tuple[int, int]:
    offset, separator, epoch = path.stem.partition("-")
    if not (separator and offset.isdigit() and epoch.isdigit()):
        raise CommandError(f"{path}: a snapshot is named <end offset>-<epoch>.checkpoint")
    return int(offset), int(epoch)


# -- segments ------------------------------------------------------------------------------


def _dump_batches(path: Path, out: TextIO, print_data: bool, deep_iteration: bool) -> None:
    with path.open("rb") as file:
        size = path.stat().st_size
        if size == 0:
            return
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            valid_bytes = _dump_mapped(mapped, out, print_data, deep_iteration)
    if valid_bytes < size:
        print(f"Found {size - valid_bytes} invalid bytes at the end of {path.name}", file=out)


def _dump_mapped(mapped: mmap.mmap, out: TextIO, print_data: bool, deep_iteration: bool) -> int:
    """Print every whole batch; return the bytes they cover (the file's valid prefix)."""
    valid_bytes = 0
    with memoryview(mapped) as view:
        for position, header in _whole_batches(view):
            is_valid = compute_crc(view, position) == header.crc
            print(batch_line(header, position, is_valid), file=out)
            if deep_iteration:
                # a copy, so that nothing decoded keeps the map open
                batch = bytes(view[position : position + header.size])
                _dump_records(batch, header, is_valid, out, print_data)
            valid_bytes = position + header.size
    return valid_bytes


def _whole_batches(view: memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """iter_headers, stopped at the first header that cannot be a v2 batch (zeros, garbage)."""
    try:
        for position, header in iter_headers(view):
            if header.magic != CURRENT_MAGIC or header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                return
            yield position, header
    except CorruptRecord:
        return  # a tail too short for a header: reported as invalid bytes


def batch_line(header: BatchHeader, position: int, is_valid: bool) -> str:
    timestamp_type = "LogAppendTime" if header.is_log_append_time else "CreateTime"
    codec = header.compression
    codec_name = COMPRESSION_NAMES[codec] if codec < len(COMPRESSION_NAMES) else f"unknown({codec})"
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.records_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {_last_sequence(header)} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {_bool(header.is_transactional)} "
        f"isControl: {_bool(header.is_control)} position: {position} "
        f"{timestamp_type}: {header.max_timestamp} size: {header.size} magic: {header.magic} "
        f"compresscodec: {codec_name} crc: {header.crc} isvalid: {_bool(is_valid)}"
    )


def _last_sequence(header: BatchHeader) -> int:
    return _sequence_at(header.base_sequence, header.last_offset_delta)


def _sequence_at(base_sequence: int, offset_delta: int) -> int:
    """Sequence numbers wrap from int32 max to 0, as the producer's do."""
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (base_sequence + offset_delta) % (_INT32_MAX + 1)


def _dump_records(
    batch: bytes, header: BatchHeader, is_valid: bool, out: TextIO, print_data: bool
) -> None:
    if not is_valid:
        print("| records not decoded: the batch's CRC does not match", file=out)
        return
    try:
        records = list(iter_records(batch))
    except KafkaError as error:  # corrupt records section, unknown codec, too large
        print(f"| records not decoded: {error}", file=out)
        return
    for record in records:
        print(record_line(record, header, print_data), file=out)


def record_line(record: Record, header: BatchHeader, print_data: bool) -> str:
    timestamp_type = "LogAppendTime" if header.is_log_append_time else "CreateTime"
    sequence = _sequence_at(header.base_sequence, record.offset - header.base_offset)
    header_keys = ",".join(name for name, _ in record.headers)
    line = (
        f"| offset: {record.offset} {timestamp_type}: {record.timestamp} "
        f"keySize: {_size(record.key)} valueSize: {_size(record.value)} "
        f"sequence: {sequence} headerKeys: [{header_keys}]"
    )
    if header.is_control:
        return line + _control_fields(record)
    if print_data:
        if record.key is not None:
            line += f" key: {_text(record.key)}"
        if record.value is not None:
            line += f" payload: {_text(record.value)}"
    return line


def _control_fields(record: Record) -> str:
    try:
        control_type = read_control_record_type(record.key)
        if control_type in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            coordinator_epoch = read_end_txn_marker(record.value)
            return f" endTxnMarker: {control_type.name} coordinatorEpoch: {coordinator_epoch}"
    except CorruptRecord as error:
        return f" controlRecord: unreadable ({error})"
    key = record.key or b""
    type_id = struct.unpack_from(">h", key, 2)[0]
    return f" controlType: {control_type.name}({type_id})"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _bool(value: bool) -> str:
    return "true" if value else "false"


# -- indexes -------------------------------------------------------------------------------


def _dump_offset_index(path: Path, out: TextIO) -> None:
    base_offset = _base_offset(path)
    entries = list(_entries(path, _OFFSET_INDEX_ENTRY))
    if not entries:
        print(f"{path} is empty.", file=out)
        return
    for index, (relative_offset, position) in enumerate(entries):
        # A preallocated index is zero-filled past its last entry; a zero entry ends it.
        if index > 0 and relative_offset == 0:
            return
        print(f"offset: {base_offset + relative_offset} position: {position}", file=out)


def _dump_time_index(path: Path, out: TextIO) -> None:
    base_offset = _base_offset(path)
    for index, (timestamp, relative_offset) in enumerate(_entries(path, _TIME_INDEX_ENTRY)):
        if index > 0 and relative_offset == 0:
            return
        print(f"timestamp: {timestamp} offset: {base_offset + relative_offset}", file=out)


def _dump_txn_index(path: Path, out: TextIO) -> None:
    for version, producer_id, first, last, last_stable in _entries(path, _ABORTED_TXN_ENTRY):
        print(
            f"version: {version} producerId: {producer_id} firstOffset: {first} "
            f"lastOffset: {last} lastStableOffset: {last_stable}",
            file=out,
        )


def _entries(path: Path, entry: struct.Struct) -> Iterator[tuple[int, ...]]:
    """Fixed-size entries of an index file; a partial entry at the end is ignored."""
    data = path.read_bytes()
    whole = len(data) - len(data) % entry.size
    for values in entry.iter_unpack(memoryview(data)[:whole]):
        yield tuple(values)
