"""KRaft's control records: the LeaderChangeMessage a new leader writes first in its epoch,
and the SnapshotHeader / SnapshotFooter records that open and close every snapshot.

A control record's key is the ControlRecordType (version int16 0, type int16); its value is
the message body in the flexible RPC format, whose `Version` field says which schema version
it is. Kafka writes LeaderChangeMessage version 0 while kraft.version is 0 (static voters),
and so do we. The body is encoded with kio, which generates it from Kafka's schema.
"""

from __future__ import annotations

import io
import struct
from typing import Any, Final

from kio.schema.leader_change_message.v0 import LeaderChangeMessage
from kio.schema.leader_change_message.v0.data import Voter
from kio.schema.leader_change_message.v1 import LeaderChangeMessage as LeaderChangeMessageV1
from kio.schema.snapshot_footer_record.v0 import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0 import SnapshotHeaderRecord
from kio.schema.types import BrokerId
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i64

from pykraft.errors import CorruptRecord
from pykraft.protocol.bounds import check_lengths
from pykraft.records.record import ControlRecordType, control_record_key

__all__ = [
    "LEADER_CHANGE_VERSION",
    "leader_change_record",
    "decode_leader_change",
    "snapshot_header_record",
    "snapshot_footer_record",
    "decode_snapshot_header",
    "decode_snapshot_footer",
]

LEADER_CHANGE_VERSION: Final = 0

_write_leader_change: Final = entity_writer(LeaderChangeMessage)
_read_leader_change: Final = entity_reader(LeaderChangeMessage)
_read_leader_change_v1: Final = entity_reader(LeaderChangeMessageV1)
_write_snapshot_header: Final = entity_writer(SnapshotHeaderRecord)
_read_snapshot_header: Final = entity_reader(SnapshotHeaderRecord)
_write_snapshot_footer: Final = entity_writer(SnapshotFooterRecord)
_read_snapshot_footer: Final = entity_reader(SnapshotFooterRecord)
_VERSION: Final = struct.Struct(">h")


def leader_change_record(
    *, leader_id: int, voters: frozenset[int], granting_voters: frozenset[int]
) -> tuple[bytes, bytes]:
    """(key, value) of the LeaderChangeMessage control record electing `leader_id`."""
    message = LeaderChangeMessage(
        version=i16(LEADER_CHANGE_VERSION),
        leader_id=BrokerId(i32(leader_id)),
        voters=tuple(Voter(voter_id=i32(voter_id)) for voter_id in sorted(voters)),
        granting_voters=tuple(
            Voter(voter_id=i32(voter_id)) for voter_id in sorted(granting_voters)
        ),
    )
    buffer = io.BytesIO()
    _write_leader_change(buffer, message)
    return control_record_key(ControlRecordType.LEADER_CHANGE), buffer.getvalue()


def decode_leader_change(value: bytes) -> LeaderChangeMessage | LeaderChangeMessageV1:
    """Parse a LeaderChangeMessage record value of version 0 or 1 (its first field says
    which); anything else, trailing bytes included, is corruption."""
    if len(value) < _VERSION.size:
        raise CorruptRecord(f"LeaderChangeMessage of {len(value)} bytes")
    (version,) = _VERSION.unpack_from(value)
    try:
        if version == 0:
            message: LeaderChangeMessage | LeaderChangeMessageV1
            check_lengths(LeaderChangeMessage, value, 0)  # before kio reserves a claimed count
            message, size = _read_leader_change(value, 0)
        elif version == 1:
            check_lengths(LeaderChangeMessageV1, value, 0)
            message, size = _read_leader_change_v1(value, 0)
        else:
            raise CorruptRecord(f"LeaderChangeMessage version {version}")
    except CorruptRecord:
        raise
    except Exception as error:  # kio raises assorted errors on malformed input
        raise CorruptRecord(f"malformed LeaderChangeMessage: {error}") from error
    if size != len(value):
        raise CorruptRecord(f"LeaderChangeMessage of {size} bytes followed by {len(value) - size}")
    return message


def snapshot_header_record(*, last_contained_log_timestamp: int) -> tuple[bytes, bytes]:
    """(key, value) of the SnapshotHeader control record (version 0) a snapshot opens with;
    the timestamp is the append time of the last log entry the snapshot covers."""
    buffer = io.BytesIO()
    _write_snapshot_header(
        buffer,
        SnapshotHeaderRecord(
            version=i16(0), last_contained_log_timestamp=i64(last_contained_log_timestamp)
        ),
    )
    return control_record_key(ControlRecordType.SNAPSHOT_HEADER), buffer.getvalue()


def snapshot_footer_record() -> tuple[bytes, bytes]:
    """(key, value) of the SnapshotFooter control record (version 0) a snapshot ends with."""
    buffer = io.BytesIO()
    _write_snapshot_footer(buffer, SnapshotFooterRecord(version=i16(0)))
    return control_record_key(ControlRecordType.SNAPSHOT_FOOTER), buffer.getvalue()


def decode_snapshot_header(value: bytes | None) -> SnapshotHeaderRecord:
    message: SnapshotHeaderRecord = _decode_whole(
        value, SnapshotHeaderRecord, _read_snapshot_header, "SnapshotHeader")
    return message


def decode_snapshot_footer(value: bytes | None) -> SnapshotFooterRecord:
    message: SnapshotFooterRecord = _decode_whole(
        value, SnapshotFooterRecord, _read_snapshot_footer, "SnapshotFooter")
    return message


def _decode_whole(value: bytes | None, entity_type: type, reader: Any, name: str) -> Any:
    """A version 0 record body that fills `value` exactly; anything else is corruption."""
    if value is None or len(value) < _VERSION.size:
        raise CorruptRecord(f"{name} record value {value!r}")
    (version,) = _VERSION.unpack_from(value)
    if version != 0:
        raise CorruptRecord(f"{name} record version {version}")
    try:
        check_lengths(entity_type, value, 0)  # before kio reserves a claimed count
        message, size = reader(value, 0)
    except Exception as error:  # kio raises assorted errors on malformed input
        raise CorruptRecord(f"malformed {name} record: {error}") from error
    if size != len(value):
        raise CorruptRecord(f"{name} record of {size} bytes followed by {len(value) - size}")
    return message
