"""Kafka's small text files: offset checkpoints and `partition.metadata`.

Offset checkpoints (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
`replication-offset-checkpoint`, and `leader-epoch-checkpoint` inside a partition dir) share
one layout:

    0               <- version
    2               <- number of entries
    my-topic 0 42   <- one entry per line, fields separated by a space
    my-topic 1 17

Every write goes to `<name>.tmp`, is fsynced, renamed over the old file and the directory is
fsynced, so a reader sees the old file or the new one, never a mix; a write that fails (a
full disk) leaves the old file and removes the temporary one, and the caller writes again
later (the node's checkpoint task, each interval). A malformed file is a storage error
naming the file and line. `partition.metadata` alone is written without the
fsyncs (see `write_partition_metadata`).
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from pykraft.errors import KafkaStorageError

__all__ = [
    "PARTITION_METADATA_FILE",
    "fsync_directory",
    "fsync_file",
    "kafka_uuid_string",
    "parse_kafka_uuid",
    "read_checkpoint",
    "read_offsets_checkpoint",
    "read_partition_metadata",
    "write_atomically",
    "write_checkpoint",
    "write_offsets_checkpoint",
    "write_partition_metadata",
]

PARTITION_METADATA_FILE: Final = "partition.metadata"
CHECKPOINT_VERSION: Final = 0


def fsync_directory(directory: Path) -> None:
    """Make renames and creations inside `directory` durable."""
    _fsync(directory)


def fsync_file(path: Path) -> None:
    """Make a file's contents durable; a file that does not exist is nothing to do."""
    try:
        _fsync(path)
    except FileNotFoundError:
        pass


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str | bytes, *, sync: bool = True) -> None:
    """Replace `path` by a file holding `text`; with `sync`, durably (see the module doc)."""
    temporary = path.with_name(path.name + ".tmp")
    data = text.encode() if isinstance(text, str) else text
    try:
        with open(temporary, "wb") as stream:
            stream.write(data)
            if sync:
                stream.flush()
                os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        # a full disk (ENOSPC) or an I/O error: the old file stays as it was, and the
        # partial temporary file goes, so it holds no space and cannot be taken for data
        temporary.unlink(missing_ok=True)
        raise
    if sync:
        fsync_directory(path.parent)


def write_checkpoint(path: Path, entries: Iterable[Iterable[object]], *,
                     sync: bool = True) -> None:
    _write_lines(path, [" ".join(str(field) for field in entry) for entry in entries], sync=sync)


def _write_lines(path: Path, lines: list[str], *, sync: bool = True) -> None:
    write_atomically(path, "\n".join([str(CHECKPOINT_VERSION), str(len(lines)), *lines, ""]),
                     sync=sync)


def _read_small_text(path: str | Path) -> str:
    """A small file's text (UTF-8) read with plain system calls: a broker restarting reads
    two such files per log, and Path.read_text's layers of file objects were a fifth of
    the time it took to load 300,000 idle logs."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


def read_checkpoint(path: Path, fields: int) -> list[list[str]]:
    """The entries of a checkpoint file, each split into `fields` strings; [] if absent."""
    try:
        lines = _read_small_text(path).splitlines()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as error:
        raise KafkaStorageError(f"cannot read checkpoint file {path}: {error}") from error
    if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
        raise KafkaStorageError(f"checkpoint file {path}: unrecognised version line")
    try:
        expected = int(lines[1])
    except ValueError:
        raise KafkaStorageError(f"checkpoint file {path}: malformed count line") from None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != expected:
        raise KafkaStorageError(
            f"checkpoint file {path}: expected {expected} entries, found {len(entries)}"
        )
    for number, entry in enumerate(entries, start=3):
        if len(entry) != fields:
            raise KafkaStorageError(f"checkpoint file {path}: malformed line {number}")
    return entries


def read_offsets_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """`topic partition offset` entries as {(topic, partition): offset}."""
    result: dict[tuple[str, int], int] = {}
    for topic, partition, offset in read_checkpoint(path, 3):
        try:
            result[(topic, int(partition))] = int(offset)
        except ValueError:
            raise KafkaStorageError(
                f"checkpoint file {path}: malformed entry {topic} {partition} {offset}"
            ) from None
    return result


def write_offsets_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    # (one f-string a line: the generic join took 1 s of a broker's 300,000 logs)
    _write_lines(path, [f"{topic} {partition} {offset}"
                        for (topic, partition), offset in sorted(offsets.items())])


def kafka_uuid_string(value: uuid.UUID) -> str:
    """Kafka's text form of a Uuid: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raise ValueError(f"{text!r} is not a base64 Kafka Uuid") from None
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a base64 Kafka Uuid (decodes to {len(raw)} bytes)")
    return uuid.UUID(bytes=raw)


def write_partition_metadata(directory: Path, topic_id: uuid.UUID) -> None:
    """Written without fsync: a broker creating 100,000 logs would otherwise spend two fsyncs
    on each. A crash may leave the file missing or empty; it is then read as absent and
    written again from the metadata image (the topic id is in the metadata log)."""
    text = f"version: 0\ntopic_id: {kafka_uuid_string(topic_id)}\n"
    write_atomically(directory / PARTITION_METADATA_FILE, text, sync=False)


def read_partition_metadata(directory: Path) -> uuid.UUID | None:
    path = directory / PARTITION_METADATA_FILE
    try:
        lines = _read_small_text(path).splitlines()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise KafkaStorageError(f"cannot read {path}: {error}") from error
    if not lines:
        return None  # left empty by a crash before the page cache reached the disk
    fields = dict(line.partition(":")[::2] for line in lines if ":" in line)
    if fields.get("version", "").strip() != "0" or "topic_id" not in fields:
        raise KafkaStorageError(f"{path}: expected 'version: 0' and a 'topic_id:' line")
    try:
        return parse_kafka_uuid(fields["topic_id"].strip())
    except ValueError as error:
        raise KafkaStorageError(f"{path}: {error}") from error
