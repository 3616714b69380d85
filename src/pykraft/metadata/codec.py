"""Bytes of the `__cluster_metadata` records: Kafka's RPC message format, driven by schema data.

Theory of operation. Every record class carries a `FIELDS` table (see `schema.py`). For a
(class, version) pair this module compiles, once, a `_StructCodec`: the regular fields in
declaration order, each with a reader and a writer closure chosen for its type, version
and nullability; the tagged fields by tag; and the defaults of fields the version lacks.
Reading and writing then only walk those tuples.

The format (Kafka's "flexible" versions, which all metadata records use, and the older
"non-flexible" form, kept for completeness):

    int8/int16/uint16/int32/int64/float64   big-endian, fixed width
    bool                                    one byte, non-zero is true
    uuid                                    16 bytes
    string / bytes      flexible:   unsigned varint (length + 1), 0 = null, then the bytes
                        otherwise:  int16 (string) / int32 (bytes) length, -1 = null
    array               flexible:   unsigned varint (count + 1), 0 = null, then elements
                        otherwise:  int32 count, -1 = null
    struct              its regular fields, then (flexible) its tag buffer
    tag buffer          unsigned varint count, then per field in ascending tag order:
                        unsigned varint tag, unsigned varint size, `size` bytes of value

A tagged field equal to its default is not written; an unknown tag is skipped on read.
Writing a non-default value into a field the version lacks is refused (as Kafka refuses
it), since the reader would silently lose it.

The metadata log frames each record as Kafka's `ApiMessageAndVersion` serde does: unsigned
varint frame version (1), unsigned varint api key, unsigned varint record version, then
the body; nothing may follow the body.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from pykraft.errors import CorruptRecord
from pykraft.metadata.records import METADATA_RECORD_TYPES, MetadataRecord
from pykraft.metadata.schema import PRIMITIVE_TYPES, FieldSpec

__all__ = [
    "FRAME_VERSION",
    "MetadataDecodeError",
    "MetadataEncodeError",
    "decode_message",
    "decode_metadata_record",
    "decode_metadata_record_and_version",
    "encode_message",
    "encode_metadata_record",
    "read_unsigned_varint",
    "write_unsigned_varint",
]

FRAME_VERSION: Final = 1  # frame version 0 was KRaft's 2.8 preview; Kafka rejects it too
VARINT_BYTES_MAX: Final = 5  # an unsigned varint holds at most 32 bits

T = TypeVar("T")
Read = Callable[[memoryview, int], tuple[Any, int]]
Write = Callable[[bytearray, Any], None]


class MetadataDecodeError(CorruptRecord, ValueError):
    """Malformed record bytes, or an api key or version this node does not know."""


class MetadataEncodeError(ValueError):
    """A record that cannot be written at the requested version: a bug in the caller."""


# ---------------------------------------------------------------------------------------------
# Primitives


def read_unsigned_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Read an unsigned varint (7 bits a byte, low bits first); return (value, new pos)."""
    byte = buf[pos]
    if byte < 0x80:  # the common case: lengths, counts and tags below 128
        return byte, pos + 1
    result = byte & 0x7F
    shift = 7
    for index in range(1, VARINT_BYTES_MAX):
        byte = buf[pos + index]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result > 0xFFFFFFFF:
                raise MetadataDecodeError(f"unsigned varint {result} exceeds 32 bits")
            return result, pos + index + 1
        shift += 7
    raise MetadataDecodeError(f"unsigned varint longer than {VARINT_BYTES_MAX} bytes")


def write_unsigned_varint(out: bytearray, value: int) -> None:
    if not 0 <= value <= 0xFFFFFFFF:
        raise MetadataEncodeError(f"{value} does not fit an unsigned 32-bit varint")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


_FIXED: Final = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
}
_INT16: Final = _FIXED["int16"]
_INT32: Final = _FIXED["int32"]


def _fixed_codec(layout: struct.Struct) -> tuple[Read, Write]:
    unpack_from, pack, size = layout.unpack_from, layout.pack, layout.size

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        return unpack_from(buf, pos)[0], pos + size  # struct.error when short

    def write(out: bytearray, value: Any) -> None:
        out += pack(value)

    return read, write


def _read_bool(buf: memoryview, pos: int) -> tuple[Any, int]:
    return buf[pos] != 0, pos + 1


def _write_bool(out: bytearray, value: Any) -> None:
    if not isinstance(value, bool):
        raise MetadataEncodeError(f"bool field given {value!r}")
    out.append(1 if value else 0)


@functools.lru_cache(maxsize=4096)
def _uuid_of(raw: bytes) -> uuid.UUID:
    """The UUID of 16 bytes; cached, as a log names the same topic and directory ids in
    record after record (a PartitionRecord holds one per replica) and `uuid.UUID()` checks
    its arguments at every call."""
    return uuid.UUID(bytes=raw)


def _read_uuid(buf: memoryview, pos: int) -> tuple[Any, int]:
    end = pos + 16
    if end > len(buf):
        raise MetadataDecodeError("uuid runs past the end of the record")
    return _uuid_of(bytes(buf[pos:end])), end


def _write_uuid(out: bytearray, value: Any) -> None:
    if not isinstance(value, uuid.UUID):
        raise MetadataEncodeError(f"uuid field given {value!r}")
    out += value.bytes


def _length_reader(
    flexible: bool, legacy: struct.Struct
) -> Callable[[memoryview, int], tuple[int, int]]:
    """Reader of a string/bytes/array length prefix; returns -1 for null."""
    if flexible:

        def read_compact(buf: memoryview, pos: int) -> tuple[int, int]:
            length_plus_one, pos = read_unsigned_varint(buf, pos)
            return length_plus_one - 1, pos

        return read_compact
    unpack_from, size = legacy.unpack_from, legacy.size

    def read_legacy(buf: memoryview, pos: int) -> tuple[int, int]:
        length = unpack_from(buf, pos)[0]
        if length < -1:
            raise MetadataDecodeError(f"negative length {length}")
        return length, pos + size

    return read_legacy


def _length_writer(flexible: bool, legacy: struct.Struct) -> Callable[[bytearray, int], None]:
    """Writer of a length prefix; -1 writes null."""
    if flexible:

        def write_compact(out: bytearray, length: int) -> None:
            write_unsigned_varint(out, length + 1)

        return write_compact
    pack = legacy.pack

    def write_legacy(out: bytearray, length: int) -> None:
        out += pack(length)  # struct.error when the length overflows the prefix

    return write_legacy


def _blob_codec(kind: str, flexible: bool, nullable: bool, where: str) -> tuple[Read, Write]:
    """string or bytes: a length prefix, then UTF-8 text or raw bytes."""
    legacy = _INT16 if kind == "string" else _INT32
    read_length = _length_reader(flexible, legacy)
    write_length = _length_writer(flexible, legacy)
    is_string = kind == "string"

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        length, pos = read_length(buf, pos)
        if length < 0:
            if not nullable:
                raise MetadataDecodeError(f"{where}: null in a non-nullable {kind}")
            return None, pos
        end = pos + length
        if end > len(buf):
            raise MetadataDecodeError(f"{where}: {kind} of {length} bytes runs past the end")
        chunk = buf[pos:end]
        return (str(chunk, "utf-8") if is_string else bytes(chunk)), end

    def write(out: bytearray, value: Any) -> None:
        if value is None:
            if not nullable:
                raise MetadataEncodeError(f"{where}: null in a non-nullable {kind}")
            write_length(out, -1)
            return
        if isinstance(value, str) and is_string:
            data = value.encode("utf-8")
        elif isinstance(value, bytes) and not is_string:
            data = value
        else:
            raise MetadataEncodeError(f"{where}: {kind} field given {type(value).__name__}")
        write_length(out, len(data))
        out += data

    return read, write


# ---------------------------------------------------------------------------------------------
# Arrays and structs


def _array_codec(
    spec: FieldSpec, version: int, flexible: bool, nullable: bool
) -> tuple[Read, Write]:
    read_length = _length_reader(flexible, _INT32)
    write_length = _length_writer(flexible, _INT32)
    element = spec.element_type
    fixed = _FIXED.get(element)
    code = fixed.format[1:] if fixed is not None else ""
    read_element, write_element = _element_codec(spec, version, flexible)
    where = spec.name

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        count, pos = read_length(buf, pos)
        if count < 0:
            if not nullable:
                raise MetadataDecodeError(f"{where}: null in a non-nullable array")
            return None, pos
        if count > len(buf) - pos:  # every element takes at least a byte
            raise MetadataDecodeError(f"{where}: {count} elements cannot fit the record")
        if fixed is not None:  # one C call for a whole replica list
            layout = _fixed_array_layout(code, count)
            return layout.unpack_from(buf, pos), pos + layout.size
        items = []
        for _ in range(count):
            item, pos = read_element(buf, pos)
            items.append(item)
        return tuple(items), pos

    def write(out: bytearray, value: Any) -> None:
        if value is None:
            if not nullable:
                raise MetadataEncodeError(f"{where}: null in a non-nullable array")
            write_length(out, -1)
            return
        if not isinstance(value, tuple | list):
            raise MetadataEncodeError(f"{where}: array field given {type(value).__name__}")
        write_length(out, len(value))
        if fixed is not None:
            out += _fixed_array_layout(code, len(value)).pack(*value)
            return
        for item in value:
            write_element(out, item)

    return read, write


@functools.lru_cache(maxsize=1024)
def _fixed_array_layout(code: str, count: int) -> struct.Struct:
    """The layout of `count` big-endian values of struct `code` (a replica list: "i")."""
    return struct.Struct(f">{count}{code}")


def _element_codec(spec: FieldSpec, version: int, flexible: bool) -> tuple[Read, Write]:
    """Reader and writer of one non-null scalar, or one struct, of the field's element type."""
    element = spec.element_type
    if spec.struct is not None:
        codec = _struct_codec(spec.struct, version, flexible)
        return codec.read, codec.write
    if element in _FIXED:
        return _fixed_codec(_FIXED[element])
    if element == "bool":
        return _read_bool, _write_bool
    if element == "uuid":
        return _read_uuid, _write_uuid
    if element in ("string", "bytes"):
        return _blob_codec(element, flexible, False, spec.name)
    raise MetadataEncodeError(f"{spec.name}: no codec for type {spec.type}")


def _field_codec(spec: FieldSpec, version: int, flexible: bool) -> tuple[Read, Write]:
    nullable = version in spec.nullable_versions
    if spec.is_array:
        return _array_codec(spec, version, flexible, nullable)
    if spec.type in ("string", "bytes"):
        return _blob_codec(spec.type, flexible, nullable, spec.name)
    if spec.type not in PRIMITIVE_TYPES:
        raise MetadataEncodeError(f"{spec.name}: struct fields must be arrays")
    return _element_codec(spec, version, flexible)


@dataclass(frozen=True, slots=True)
class _TaggedField:
    tag: int
    name: str
    default: Any
    read: Read
    write: Write


@dataclass(frozen=True, slots=True)
class _StructCodec:
    """One message (or nested struct) type at one version, compiled from its `FIELDS`."""

    cls: type[Any]
    version: int
    flexible: bool
    initial: dict[str, Any]  # values of fields not read as regular fields, before tags
    regular: tuple[tuple[str, Read, Write], ...]
    tagged: tuple[_TaggedField, ...]  # ascending tags
    tagged_by_tag: dict[int, _TaggedField]
    absent: tuple[tuple[str, Any], ...]  # (name, default): must hold the default to write

    def read(self, buf: memoryview, pos: int) -> tuple[Any, int]:
        values = dict(self.initial)
        for name, read, _ in self.regular:
            values[name], pos = read(buf, pos)
        if self.flexible:
            pos = self._read_tag_buffer(buf, pos, values)
        return self.cls(**values), pos

    def _read_tag_buffer(self, buf: memoryview, pos: int, values: dict[str, Any]) -> int:
        count, pos = read_unsigned_varint(buf, pos)
        seen: set[int] = set()
        for _ in range(count):
            tag, pos = read_unsigned_varint(buf, pos)
            size, pos = read_unsigned_varint(buf, pos)
            end = pos + size
            if end > len(buf):
                raise MetadataDecodeError(f"tagged field {tag} runs past the end")
            if tag in seen:
                raise MetadataDecodeError(f"tagged field {tag} appears twice")
            seen.add(tag)
            field = self.tagged_by_tag.get(tag)
            if field is not None:  # an unknown tag is a newer writer's field: skip it
                values[field.name], read_end = field.read(buf[:end], pos)
                if read_end != end:
                    raise MetadataDecodeError(f"tagged field {tag} is {size} bytes, not its size")
            pos = end
        return pos

    def write(self, out: bytearray, message: Any) -> None:
        for name, default in self.absent:
            if getattr(message, name) != default:
                raise MetadataEncodeError(
                    f"{self.cls.__qualname__}.{name} cannot hold a non-default value at "
                    f"version {self.version}"
                )
        for name, _, write in self.regular:
            write(out, getattr(message, name))
        if self.flexible:
            self._write_tag_buffer(out, message)

    def _write_tag_buffer(self, out: bytearray, message: Any) -> None:
        present = [
            (field, value)
            for field in self.tagged
            if (value := getattr(message, field.name)) != field.default
        ]
        write_unsigned_varint(out, len(present))
        for field, value in present:
            body = bytearray()
            field.write(body, value)
            write_unsigned_varint(out, field.tag)
            write_unsigned_varint(out, len(body))
            out += body


_CODECS: dict[tuple[type[Any], int, bool], _StructCodec] = {}


def _struct_codec(cls: type[Any], version: int, flexible: bool) -> _StructCodec:
    key = (cls, version, flexible)
    codec = _CODECS.get(key)
    if codec is None:
        codec = _compile(cls, version, flexible)
        _CODECS[key] = codec
    return codec


def _compile(cls: type[Any], version: int, flexible: bool) -> _StructCodec:
    fields: tuple[FieldSpec, ...] = cls.FIELDS
    initial: dict[str, Any] = {}
    regular: list[tuple[str, Read, Write]] = []
    tagged: list[_TaggedField] = []
    absent: list[tuple[str, Any]] = []
    for spec in fields:
        if version in spec.tagged_versions and spec.tag is not None:
            if not flexible:
                raise MetadataEncodeError(f"{cls.__qualname__}.{spec.name}: tagged, not flexible")
            read, write = _field_codec(spec, version, flexible=True)
            tagged.append(_TaggedField(spec.tag, spec.name, spec.default, read, write))
            initial[spec.name] = spec.default
        elif version in spec.versions:
            regular.append((spec.name, *_field_codec(spec, version, flexible)))
        else:
            initial[spec.name] = spec.default
            if not spec.ignorable:
                absent.append((spec.name, spec.default))
    tagged.sort(key=lambda field: field.tag)
    return _StructCodec(
        cls=cls,
        version=version,
        flexible=flexible,
        initial=initial,
        regular=tuple(regular),
        tagged=tuple(tagged),
        tagged_by_tag={field.tag: field for field in tagged},
        absent=tuple(absent),
    )


# ---------------------------------------------------------------------------------------------
# Public API

_ENCODE_FAILURES: Final = (struct.error, TypeError, OverflowError, UnicodeEncodeError)
_DECODE_FAILURES: Final = (struct.error, IndexError, UnicodeDecodeError, ValueError, TypeError)


def _is_flexible(cls: type[Any], version: int) -> bool:
    flexible_from: int | None = cls.FLEXIBLE_FROM
    return flexible_from is not None and version >= flexible_from


def _check_version(cls: type[Any], version: int, error: type[ValueError]) -> None:
    if not cls.LOWEST_VERSION <= version <= cls.LATEST_VERSION:
        raise error(
            f"{cls.__name__} has versions {cls.LOWEST_VERSION}-{cls.LATEST_VERSION}, not {version}"
        )


def encode_message(message: Any, version: int) -> bytes:
    """The body of `message` (an instance of a class with `FIELDS`, `LOWEST_VERSION`,
    `LATEST_VERSION` and `FLEXIBLE_FROM`) at `version`, without any framing."""
    cls = type(message)
    _check_version(cls, version, MetadataEncodeError)
    out = bytearray()
    try:
        _struct_codec(cls, version, _is_flexible(cls, version)).write(out, message)
    except _ENCODE_FAILURES as error:
        raise MetadataEncodeError(f"cannot encode {cls.__name__} v{version}: {error}") from error
    return bytes(out)


def decode_message(cls: type[T], data: bytes | bytearray | memoryview, version: int) -> T:
    """The inverse of `encode_message`: the whole of `data` must be one message body."""
    _check_version(cls, version, MetadataDecodeError)
    buf = memoryview(data).cast("B")
    message, pos = _decode_body(cls, buf, 0, version)
    if pos != len(buf):
        raise MetadataDecodeError(f"{len(buf) - pos} byte(s) after the {cls.__name__} body")
    result: T = message
    return result


def _decode_body(cls: type[Any], buf: memoryview, pos: int, version: int) -> tuple[Any, int]:
    try:
        return _struct_codec(cls, version, _is_flexible(cls, version)).read(buf, pos)
    except MetadataDecodeError:
        raise
    except _DECODE_FAILURES as error:
        raise MetadataDecodeError(f"malformed {cls.__name__} v{version}: {error!r}") from error


def encode_metadata_record(record: MetadataRecord, version: int | None = None) -> bytes:
    """One record as the value of a `__cluster_metadata` log record (the serde framing)."""
    cls = type(record)
    if METADATA_RECORD_TYPES.get(getattr(cls, "API_KEY", -1)) is not cls:
        raise MetadataEncodeError(f"{cls.__name__} is not a metadata record")
    if version is None:
        version = cls.LATEST_VERSION
    out = bytearray()
    write_unsigned_varint(out, FRAME_VERSION)
    write_unsigned_varint(out, cls.API_KEY)
    write_unsigned_varint(out, version)
    out += encode_message(record, version)
    return bytes(out)


def decode_metadata_record_and_version(
    data: bytes | bytearray | memoryview,
) -> tuple[MetadataRecord, int]:
    """The record framed in `data`, and the version it was written at."""
    buf = memoryview(data).cast("B")
    try:
        frame_version, pos = read_unsigned_varint(buf, 0)
        api_key, pos = read_unsigned_varint(buf, pos)
        version, pos = read_unsigned_varint(buf, pos)
    except IndexError as error:
        raise MetadataDecodeError("truncated metadata record header") from error
    if frame_version != FRAME_VERSION:
        raise MetadataDecodeError(f"unknown metadata record frame version {frame_version}")
    cls = METADATA_RECORD_TYPES.get(api_key)
    if cls is None:
        raise MetadataDecodeError(f"unknown metadata record api key {api_key}")
    _check_version(cls, version, MetadataDecodeError)
    record, pos = _decode_body(cls, buf, pos, version)
    if pos != len(buf):
        raise MetadataDecodeError(f"{len(buf) - pos} byte(s) after the {cls.__name__} body")
    return record, version


def decode_metadata_record(data: bytes | bytearray | memoryview) -> MetadataRecord:
    """The record framed in `data` (see `encode_metadata_record`)."""
    return decode_metadata_record_and_version(data)[0]
