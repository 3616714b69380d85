"""`pykraft dump-log`: print what is in segment and index files, like kafka-dump-log.sh.

Reads files directly, with no broker: `.log` segments and `.checkpoint` snapshots batch by
batch (a line per batch; with `--deep-iteration` a `| offset: ...` line per record; with
`--print-data-log` keys and values too), `.index` as "offset: N position: P" and
`.timeindex` as "timestamp: T offset: N" entries, `.txnindex` as aborted transactions.

KRaft's control records (LeaderChange, SnapshotHeader, SnapshotFooter, KRaftVersion,
Voters) are printed by name with their fields as JSON, as Kafka's tool prints them. With
`--cluster-metadata-decoder` (which implies `--print-data-log`) every record of a
`__cluster_metadata` segment or snapshot gets its payload as Kafka's JSON
(`payload: {"type":"TOPIC_RECORD","version":0,"data":{...}}`, see `metadata_decoder`).
`--offsets-decoder` (__consumer_offsets) and `--transaction-log-decoder` (__transaction_state)
print each record as Kafka 4's tool does: `key: {"type":"<record type>","data":{...}}
payload: {"version":"<n>","data":{...}}` (or `payload: <DELETE>` for a tombstone), decoded
by the coordinators' own codecs; a consumer group's member subscriptions and assignments are
shown decoded. A record that does not decode is "Error at offset N, skipping. <why>", which
(as with the metadata decoder) is also reported on stderr and makes the exit code 1.

A segment is read through a memory map, so a 1 GiB segment costs no 1 GiB of heap. Bytes
after the last whole batch (a crash's torn write, or the zeros of a preallocated file) are
counted and reported as "Found N invalid bytes at the end of <file>", as Kafka does. A batch
whose CRC does not match is printed with `isvalid: false`; its records are not decoded.
Kafka's tool exits 0 either way; with `--cluster-metadata-decoder` such damage (and a
record that does not decode, or a snapshot without its header or footer) is also reported
as an error on stderr after the file's valid contents, and the exit code is 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import mmap
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

from pykraft.broker.group_coordinator import records as group_records
from pykraft.broker.transaction_coordinator import records as txn_records
from pykraft.cli.args import ArgumentParser, CommandError, UsageError
from pykraft.cli.metadata_decoder import (
    control_record_fields,
    metadata_payload,
    struct_json,  # the generic schema-driven JSON writer, shared with the metadata decoder
)
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
        "dump-log", help="print the contents of log segment and index files (kafka-dump-log.sh)",
        description="This tool helps to parse a log file and dump its contents to the "
        "console, useful for debugging a seemingly corrupt log segment.",
    )
    parser.add_argument("--files", metavar="PATH[,PATH...]", help="REQUIRED (or list them last)")
    parser.add_argument("paths", nargs="*", metavar="PATH", help="more files to dump")
    parser.add_argument(
        "--print-data-log",
        action="store_true",
        help="print keys and values (implies --deep-iteration)",
    )
    parser.add_argument(
        "--deep-iteration", action="store_true", help="print every record, not only batch headers"
    )
    decoders = parser.add_mutually_exclusive_group()
    decoders.add_argument(
        "--cluster-metadata-decoder",
        action="store_true",
        help="decode records as __cluster_metadata records (implies --print-data-log)",
    )
    decoders.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="decode records as __consumer_offsets records: committed offsets, group "
        "metadata, KIP-848 consumer group records (implies --print-data-log)",
    )
    decoders.add_argument(
        "--transaction-log-decoder",
        action="store_true",
        help="decode records as __transaction_state records (implies --print-data-log)",
    )
    parser.set_defaults(handler=_run_args)


def _run_args(args: argparse.Namespace) -> int:
    if args.files is None and not args.paths:
        raise UsageError("the following arguments are required: --files")
    listed = args.files.split(",") if args.files is not None else []
    paths = [path.strip() for path in [*listed, *args.paths] if path.strip()]
    if not paths:
        raise CommandError("--files names no file")
    metadata = args.cluster_metadata_decoder
    coordinator = ("offsets" if args.offsets_decoder
                   else "transaction-log" if args.transaction_log_decoder else None)
    print_data = args.print_data_log or metadata or coordinator is not None
    deep = args.deep_iteration or print_data
    return run(paths, print_data=print_data, deep_iteration=deep, metadata=metadata,
               coordinator=coordinator)


@dataclass(slots=True)
class _Problems:
    """Damage found in one file, reported after its valid contents (decoder mode)."""

    messages: list[str] = field(default_factory=list)

    def add(self, message: str) -> None:
        self.messages.append(message)


def run(paths: list[str], *, print_data: bool, deep_iteration: bool, metadata: bool = False,
        coordinator: str | None = None) -> int:
    """Dump each file in turn; one that cannot be read is reported and makes the exit code 1.
    With a decoder (`metadata`, or `coordinator` "offsets" / "transaction-log"), so does a
    file whose contents are damaged."""
    status = 0
    for path in paths:
        print(f"Dumping {path}")
        problems = _Problems()
        if not Path(path).exists():  # before its name is parsed: that is not the problem
            print(f"Error: cannot read {path}: No such file or directory", file=sys.stderr)
            status = 1
            continue
        try:
            dumped = dump_file(
                Path(path), sys.stdout, print_data, deep_iteration, metadata, problems,
                coordinator=coordinator,
            )
        except BrokenPipeError:
            raise  # stdout's reader (say `head`) has gone: main ends quietly
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
        elif (metadata or coordinator is not None) and problems.messages:
            sys.stdout.flush()
            print(f"Error: {path}: {'; '.join(problems.messages)}", file=sys.stderr)
            status = 1
    return status


def dump_file(
    path: Path,
    out: TextIO,
    print_data: bool,
    deep_iteration: bool,
    metadata: bool = False,
    problems: _Problems | None = None,
    *,
    coordinator: str | None = None,
) -> bool:
    """Print one file's contents; False when its kind (by suffix) is not one we know.
    Damage found is added to `problems`; `metadata` decodes __cluster_metadata records,
    `coordinator` ("offsets", "transaction-log") a coordinator's records."""
    suffix = path.suffix
    problems = problems if problems is not None else _Problems()
    if suffix == ".log":
        print(f"Log starting offset: {_base_offset(path)}", file=out)
        options = _Options(print_data, deep_iteration, metadata, coordinator=coordinator)
        _dump_batches(path, out, options, problems)
    elif suffix == ".checkpoint":
        if path.name == "bootstrap.checkpoint":
            print("KRaft bootstrap snapshot", file=out)
        else:
            end_offset, epoch = _snapshot_id(path)
            print(f"Snapshot end offset: {end_offset}, epoch: {epoch}", file=out)
        options = _Options(print_data, deep_iteration, metadata, snapshot=True)
        _dump_batches(path, out, options, problems)
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


@dataclass(frozen=True, slots=True)
class _Options:
    print_data: bool
    deep_iteration: bool
    metadata: bool  # decode values as __cluster_metadata records
    snapshot: bool = False  # a .checkpoint: SnapshotHeader first, SnapshotFooter last
    coordinator: str | None = None  # "offsets" or "transaction-log": decode keys and values


@dataclass(slots=True)
class _SnapshotFrame:
    """The control records that open and close a snapshot, as seen while dumping."""

    first: ControlRecordType | None = None
    last: ControlRecordType | None = None
    records: int = 0

    def saw(self, header: BatchHeader, record: Record) -> None:
        kind = ControlRecordType.UNKNOWN
        if header.is_control:
            try:
                kind = read_control_record_type(record.key)
            except CorruptRecord:
                kind = ControlRecordType.UNKNOWN
        if self.records == 0:
            self.first = kind
        self.last = kind
        self.records += 1


def _dump_batches(path: Path, out: TextIO, options: _Options, problems: _Problems) -> None:
    frame = _SnapshotFrame()
    with path.open("rb") as file:
        size = path.stat().st_size
        valid_bytes = 0
        if size > 0:
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                valid_bytes = _dump_mapped(mapped, out, options, problems, frame)
    if valid_bytes < size:
        print(f"Found {size - valid_bytes} invalid bytes at the end of {path.name}", file=out)
        problems.add(
            f"{size - valid_bytes} invalid bytes at position {valid_bytes} "
            "(a truncated or corrupt batch)"
        )
    if options.snapshot and options.deep_iteration:
        if frame.first is not ControlRecordType.SNAPSHOT_HEADER:
            problems.add("the snapshot does not start with a SnapshotHeader record")
        if frame.last is not ControlRecordType.SNAPSHOT_FOOTER:
            problems.add("the snapshot does not end with a SnapshotFooter record (truncated?)")


def _dump_mapped(
    mapped: mmap.mmap,
    out: TextIO,
    options: _Options,
    problems: _Problems,
    frame: _SnapshotFrame,
) -> int:
    """Print every whole batch; return the bytes they cover (the file's valid prefix)."""
    valid_bytes = 0
    with memoryview(mapped) as view:
        for position, header in _whole_batches(view):
            is_valid = compute_crc(view, position) == header.crc
            print(batch_line(header, position, is_valid), file=out)
            if not is_valid:
                problems.add(f"the batch at position {position} fails its CRC check")
            if options.deep_iteration:
                # a copy, so that nothing decoded keeps the map open
                batch = bytes(view[position : position + header.size])
                _dump_records(batch, header, is_valid, out, options, problems, frame)
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
    batch: bytes,
    header: BatchHeader,
    is_valid: bool,
    out: TextIO,
    options: _Options,
    problems: _Problems,
    frame: _SnapshotFrame,
) -> None:
    if not is_valid:
        print("| records not decoded: the batch's CRC does not match", file=out)
        return
    try:
        records = list(iter_records(batch))
    except KafkaError as error:  # corrupt records section, unknown codec, too large
        print(f"| records not decoded: {error}", file=out)
        problems.add(f"the records of the batch at offset {header.base_offset}: {error}")
        return
    for record in records:
        frame.saw(header, record)
        if options.metadata and header.is_control:
            _, unreadable = _control_text(record)
            if unreadable is not None:
                problems.add(f"the control record at offset {record.offset}: {unreadable}")
        if options.metadata and not header.is_control:
            payload, decoded = metadata_payload(record.value, record.offset)
            if not decoded:
                problems.add(f"the record at offset {record.offset} does not decode")
            print(f"{record_line(record, header, False)} payload: {payload}", file=out)
            continue
        if options.coordinator is not None and not header.is_control:
            key, value, problem = coordinator_record_text(options.coordinator, record)
            if problem is not None:
                problems.add(f"the record at offset {record.offset}: {problem}")
            text = f" key: {key}" + ("" if value is None else f" payload: {value}")
            print(record_line(record, header, False) + text, file=out)
            continue
        print(record_line(record, header, options.print_data), file=out)


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
    return _control_text(record)[0]


def _control_text(record: Record) -> tuple[str, str | None]:
    """What Kafka prints after a control record's metadata, and why it is unreadable if so."""
    try:
        control_type = read_control_record_type(record.key)
        if control_type in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            coordinator_epoch = read_end_txn_marker(record.value)
            text = f" endTxnMarker: {control_type.name} coordinatorEpoch: {coordinator_epoch}"
            return text, None
        fields = control_record_fields(control_type, record.value)
        if fields is not None:
            return fields, None
    except CorruptRecord as error:
        return f" controlRecord: unreadable ({error})", str(error)
    key = record.key or b""
    type_id = struct.unpack_from(">h", key, 2)[0]
    return f" controlType: {control_type.name}({type_id})", None


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


# -- __consumer_offsets and __transaction_state --------------------------------------------


def coordinator_record_text(decoder: str, record: Record) -> tuple[str, str | None, str | None]:
    """(key text, payload text or None, the problem if any) of a coordinator's record, as
    Kafka 4's tool prints them: `{"type":"<record type>","data":{...}}` for the key (the
    type is the key's version, which names the kind of record), `{"version":"<n>",
    "data":{...}}` for the value, `<DELETE>` for a tombstone; a record that does not decode
    gets Kafka's "Error at offset N, skipping. <why>" (or "Unknown record type")."""
    if record.key is None:
        why = "the record has no key"
        return f"Error at offset {record.offset}, skipping. {why}", None, why
    (key_version,) = struct.unpack_from(">h", record.key) if len(record.key) >= 2 else (-1,)
    try:
        decoded: Any = (group_records.decode_record(record.key, record.value)
                        if decoder == "offsets"
                        else txn_records.decode_record(record.key, record.value))
    except CorruptRecord as error:
        return f"Error at offset {record.offset}, skipping. {error}", None, str(error)
    if decoded is None:  # a kind this build does not read (share groups)
        return f"Unknown record type {key_version} at offset {record.offset}, skipping.", None, None
    key = _json({"type": str(key_version), "data": struct_json(decoded.key, key_version)})
    if decoded.value is None or record.value is None:
        return key, "<DELETE>", None
    (value_version,) = struct.unpack_from(">h", record.value)
    data = struct_json(decoded.value, value_version)
    if isinstance(decoded.value, group_records.GroupMetadataValue):
        _decode_consumer_protocol(decoded.value, data)
    return key, _json({"version": str(value_version), "data": data}), None


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _decode_consumer_protocol(value: group_records.GroupMetadataValue,
                              data: dict[str, Any]) -> None:
    """As Kafka's tool: a consumer group's member subscriptions and assignments are shown
    decoded (ConsumerProtocolSubscription / Assignment); bytes that do not decode stay
    base64."""
    if value.protocol_type != "consumer":
        return
    for member, shown in zip(value.members, data.get("members", ()), strict=False):
        for name, reader in (("subscription", _subscription), ("assignment", _assignment)):
            raw = getattr(member, name, None)
            if raw is None:
                continue
            try:
                shown[name] = reader(_Reader(bytes(raw)))
            except (struct.error, UnicodeDecodeError, ValueError):
                shown[name] = base64.b64encode(bytes(raw)).decode("ascii")


class _Reader:
    """The consumer protocol's classic (non-flexible) encoding, bounds-checked."""

    def __init__(self, data: bytes) -> None:
        self.data, self.position = data, 0

    def take(self, layout: str) -> int:
        (value,) = struct.unpack_from(layout, self.data, self.position)
        self.position += struct.calcsize(layout)
        return int(value)

    def string(self, *, nullable: bool = False) -> str | None:
        length = self.take(">h")
        if length < 0:
            if nullable:
                return None
            raise ValueError("a null string where one is required")
        return self.raw(length).decode("utf-8")

    def raw(self, length: int) -> bytes:
        if length < 0 or self.position + length > len(self.data):
            raise ValueError("truncated")
        chunk = self.data[self.position : self.position + length]
        self.position += length
        return chunk

    def count(self) -> int:
        count = self.take(">i")
        if count < 0 or count > len(self.data):
            raise ValueError(f"bad array length {count}")
        return count

    def user_data(self) -> str | None:
        length = self.take(">i")
        return None if length < 0 else base64.b64encode(self.raw(length)).decode("ascii")

    def partitions(self, name: str) -> list[dict[str, Any]]:
        return [{"topic": self.string(), name: [self.take(">i") for _ in range(self.count())]}
                for _ in range(self.count())]


def _subscription(reader: _Reader) -> dict[str, Any]:
    version = reader.take(">h")
    shown: dict[str, Any] = {
        "topics": [reader.string() for _ in range(reader.count())],
        "userData": reader.user_data(),
    }
    if version >= 1:
        shown["ownedPartitions"] = reader.partitions("partitions")
    if version >= 2:
        shown["generationId"] = reader.take(">i")
    if version >= 3:
        shown["rackId"] = reader.string(nullable=True)
    return shown


def _assignment(reader: _Reader) -> dict[str, Any]:
    reader.take(">h")  # the version: every one has the same fields
    return {"assignedPartitions": reader.partitions("partitions"),
            "userData": reader.user_data()}
