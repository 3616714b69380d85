"""Readable text for `__cluster_metadata` records, as kafka-dump-log.sh prints them.

A metadata record's value becomes Kafka's
`{"type":"TOPIC_RECORD","version":0,"data":{"name":"foo","topicId":"..."}}`: the record
type in upper snake case, the version it was written at, and its fields in schema order
under their camelCase names, as Kafka's generated JSON converters write them (a tagged field
only when it differs from its default; uuids in Kafka's base64 form; bytes in base64).

KRaft's control records print as Kafka's tool prints them: ` LeaderChange: {...}`,
` SnapshotHeader {...}`, ` SnapshotFooter {...}`, ` KRaftVersion {...}`,
` KRaftVoters {...}` (the colon after LeaderChange only is Kafka's own).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import struct
import uuid
from collections.abc import Callable
from typing import Any, Final

from kio.schema.k_raft_version_record.v0 import KRaftVersionRecord
from kio.schema.leader_change_message.v0 import LeaderChangeMessage
from kio.schema.leader_change_message.v1 import LeaderChangeMessage as LeaderChangeMessageV1
from kio.schema.snapshot_footer_record.v0 import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0 import SnapshotHeaderRecord
from kio.schema.voters_record.v0 import VotersRecord
from kio.serial import entity_reader

from pykraft.errors import CorruptRecord
from pykraft.metadata.codec import decode_metadata_record_and_version
from pykraft.metadata.records import MetadataRecord
from pykraft.metadata.schema import FieldSpec
from pykraft.protocol.bounds import check_lengths
from pykraft.records.record import ControlRecordType
from pykraft.storage.checkpoint import kafka_uuid_string

__all__ = [
    "control_record_fields",
    "control_record_json",
    "metadata_payload",
    "metadata_record_json",
    "record_type_name",
    "struct_json",
]

ZERO_UUID: Final = uuid.UUID(int=0)
_VERSION: Final = struct.Struct(">h")

# control type -> (the label Kafka prints before the JSON, the kio class of each version)
_CONTROL_SCHEMAS: Final[dict[ControlRecordType, tuple[str, tuple[type[Any], ...]]]] = {
    ControlRecordType.LEADER_CHANGE: (
        "LeaderChange:",
        (LeaderChangeMessage, LeaderChangeMessageV1),
    ),
    ControlRecordType.SNAPSHOT_HEADER: ("SnapshotHeader", (SnapshotHeaderRecord,)),
    ControlRecordType.SNAPSHOT_FOOTER: ("SnapshotFooter", (SnapshotFooterRecord,)),
    ControlRecordType.KRAFT_VERSION: ("KRaftVersion", (KRaftVersionRecord,)),
    ControlRecordType.KRAFT_VOTERS: ("KRaftVoters", (VotersRecord,)),
}
_READERS: Final[dict[type[Any], Callable[[bytes, int], tuple[Any, int]]]] = {}


def _compact(value: Any) -> str:
    """JSON as Jackson's toString writes it: no spaces, non-ASCII kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def record_type_name(record: MetadataRecord) -> str:
    """Kafka's MetadataRecordType name: TopicRecord -> TOPIC_RECORD."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", type(record).__name__).upper()


# -- metadata records ----------------------------------------------------------------------


def metadata_payload(value: bytes | None, offset: int) -> tuple[str, bool]:
    """The payload text of one metadata record and whether it decoded; a record that does
    not decode gets Kafka's "Error at <offset>, skipping. <why>"."""
    if value is None:
        return f"Error at {offset}, skipping. the record has no value", False
    try:
        record, version = decode_metadata_record_and_version(value)
    except CorruptRecord as error:
        return f"Error at {offset}, skipping. {error}", False
    return metadata_record_json(record, version), True


def metadata_record_json(record: MetadataRecord, version: int) -> str:
    return _compact(
        {
            "type": record_type_name(record),
            "version": version,
            "data": struct_json(record, version),
        }
    )


def struct_json(message: Any, version: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    spec: FieldSpec
    for spec in type(message).FIELDS:
        if version not in spec.versions:
            continue
        value = getattr(message, spec.name)
        if version in spec.tagged_versions and value == spec.default:
            continue
        out[_camel(spec.name)] = _field_json(spec, value, version)
    return out


def _field_json(spec: FieldSpec, value: Any, version: int) -> Any:
    if value is None:
        return None
    if spec.is_array:
        if spec.struct is not None:
            return [struct_json(element, version) for element in value]
        return [_scalar_json(spec.element_type, element) for element in value]
    return _scalar_json(spec.type, value)


def _scalar_json(kind: str, value: Any) -> Any:
    if kind == "uuid":
        return kafka_uuid_string(value if isinstance(value, uuid.UUID) else ZERO_UUID)
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode("ascii")
    if kind == "float64":
        return float(value)
    return value


# -- control records -----------------------------------------------------------------------


def control_record_fields(control_type: ControlRecordType, value: bytes | None) -> str | None:
    """` LeaderChange: {...}` and friends for KRaft's control records; None for a type this
    module does not decode (transaction markers, unknown types). Raises CorruptRecord."""
    schema = _CONTROL_SCHEMAS.get(control_type)
    if schema is None:
        return None
    label, _ = schema
    return f" {label} {control_record_json(control_type, value)}"


def control_record_json(control_type: ControlRecordType, value: bytes | None) -> str:
    """The JSON of a KRaft control record's value (its `Version` field picks the schema)."""
    _, classes = _CONTROL_SCHEMAS[control_type]
    name = control_type.name
    if value is None or len(value) < _VERSION.size:
        raise CorruptRecord(f"{name} control record value of {len(value or b'')} bytes")
    (version,) = _VERSION.unpack_from(value)
    if version < 0:
        raise CorruptRecord(f"{name} control record version {version}")
    # a newer writer's version is read with the newest schema known: flexible versions
    # only add tagged fields, which the reader skips
    cls = classes[min(version, len(classes) - 1)]
    try:
        check_lengths(cls, value, 0)  # a file's count must not make kio reserve gigabytes
        message, size = _reader(cls)(value, 0)
    except Exception as error:  # kio raises assorted errors on malformed input
        raise CorruptRecord(f"malformed {name} control record: {error}") from error
    if size != len(value):
        raise CorruptRecord(
            f"{name} control record of {size} bytes followed by {len(value) - size} more"
        )
    return _compact(_entity_json(message))


def _reader(cls: type[Any]) -> Callable[[bytes, int], tuple[Any, int]]:
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


def _entity_json(entity: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in dataclasses.fields(entity):
        out[_camel(field.name)] = _entity_value_json(
            field.metadata.get("kafka_type"), getattr(entity, field.name)
        )
    return out


def _entity_value_json(kind: str | None, value: Any) -> Any:
    if kind == "uuid":  # kio reads the zero uuid as None
        return kafka_uuid_string(value if isinstance(value, uuid.UUID) else ZERO_UUID)
    if value is None:
        return None
    if isinstance(value, tuple):
        return [_entity_value_json(kind, element) for element in value]
    if dataclasses.is_dataclass(value):
        return _entity_json(value)
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)
