"""Bytes of the `__cluster_metadata` records: Kafka's RPC message format, driven by schema data.

Theory of operation. Every record class carries a `FIELDS` table (see `schema.py`). For a
(class, version) pair this module writes, once, the Python source of a reader and of a
writer specialised to that table, and compiles it with `exec` (as `dataclasses` and
`namedtuple` make their methods): the schema stays data, yet decoding a record is
straight-line code rather than a walk over per-field closures. Every node decodes every
PartitionRecord and PartitionChangeRecord of the log (fencing one broker at 100,000
partitions writes ~100,000 of them), so this is the metadata path's largest CPU cost. The
generated reader, `read(buf, pos) -> (message, pos after it)` over `bytes`:

- keeps each field in a local variable `f_<name>`, starting from its default when the
  version lacks it or it is tagged;
- reads each run of consecutive fixed-width fields (integers, bool, uuid) with ONE
  precompiled `struct.Struct.unpack_from`, and an array of fixed-width elements (a replica
  list) with one more, its layout taken from a tuple by count;
- inlines unsigned varints of one byte (every realistic length, count and tag), calling
  `read_unsigned_varint` only for longer ones;
- takes the empty tag buffer (a single 0 byte, the common case) in one test, and
  otherwise dispatches each tag with an `if`/`elif` chain to that field's inline code;
- looks uuids up in a dict of those already seen (`_uuid_of`), and whole arrays of them
  (a partition's replica directories) likewise, so that equal ones share a tuple;
- builds the record by storing its slots directly when the class allows it (a slotted
  dataclass whose generated `__init__` only stores its fields, see
  `_builds_without_init`): a frozen dataclass's `__init__` with a dozen keyword arguments
  costs more than all the parsing. Any other class is called with keywords.

For example, PartitionChangeRecord v1 starts

    f_isr = _default_isr                            # None: every optional field is tagged
    ...
    f_partition_id, f_topic_id = _unpack(buf, pos)  # ">i16s"
    pos += 20
    f_topic_id = _uuids_get(f_topic_id) or _uuid_of(f_topic_id)
    if buf[pos] == 0:  # no tagged field: the usual case
        pos += 1
    else:
        ...                                        # count, then per tag: tag, size, and
            if tag == 0:                           # the field's own inline code
                ...

The compiled reader. `_read.c` reads the same format in C, driven by the same layout
(`_native_read` hands it each field's kind, nullability and tag), about four times faster:
every layout of a flexible version whose fields are primitives or arrays of them, built by
storing slots, gets a compiled reader when the extension is built (every metadata record but
the three with arrays of structs, which keep the Python one). The generated Python reader is
its reference, which the tests run beside it on valid, cut and garbled records, and the
fallback when the extension is not built (a warning says so). `native_reader(False)` turns it
off for a block.

The writer mirrors it: a run of fixed-width fields is one `pack`, and a tagged field of
fixed width writes its precomputed tag and size bytes rather than a body to measure. Each
codec keeps its source (`_StructCodec.read_source`, `write_source`) for reading. The public
functions find a record's reader by its frame header's bytes, so a header seen before is
not parsed again, and hand generated code `bytes` (a bytearray or memoryview is copied:
records are small, and bytes index and slice fastest).

Errors. A generated reader raises `MetadataDecodeError` for what it checks itself (null in
a non-nullable field, a length past the end, a duplicate tag, a tagged field whose value
does not end at its declared size), and otherwise lets `struct.error`, `IndexError` or
`UnicodeDecodeError` escape from a record cut short or garbled: the public functions turn
those into `MetadataDecodeError`. A known tagged field is read from the whole buffer, not
a slice of its declared size; one that runs past its size then ends elsewhere and is
refused by the size check, so the same records are accepted and refused as by a reader
of the slice. Writing raises `MetadataEncodeError` alike.

The format (Kafka's "flexible" versions, which all metadata records use, and the older
"non-flexible" form, kept for the `__consumer_offsets` records):

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

import dataclasses
import functools
import logging
import struct
import types
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from pykraft.errors import CorruptRecord, invariant
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
log = logging.getLogger(__name__)
Read = Callable[[bytes, int], tuple[Any, int]]
Write = Callable[[bytearray, Any], None]


class MetadataDecodeError(CorruptRecord, ValueError):
    """Malformed record bytes, or an api key or version this node does not know."""


class MetadataEncodeError(ValueError):
    """A record that cannot be written at the requested version: a bug in the caller."""


# ---------------------------------------------------------------------------------------------
# Primitives


def read_unsigned_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
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


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    write_unsigned_varint(out, value)
    return bytes(out)


# The `struct` code of each fixed-width type. A bool is read as "?" (any non-zero byte is
# true, as Kafka reads it) and a uuid as 16 raw bytes, made a `uuid.UUID` by `_uuid_of`.
_FIXED_CODES: Final = {
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "int64": "q",
    "float64": "d",
    "bool": "?",
    "uuid": "16s",
}
_INT16: Final = struct.Struct(">h")  # the length of a non-flexible string
_INT32: Final = struct.Struct(">i")  # the length of non-flexible bytes, or an array's count
_SMALL_ARRAY_COUNT_MAX: Final = 16  # arrays up to this long find their layout in a tuple


_UUIDS_MAX: Final = 4096
_UUIDS: Final[dict[bytes, uuid.UUID]] = {}  # by their 16 bytes; see _uuid_of
_uuids_get: Final = _UUIDS.get


def _uuid_of(raw: bytes) -> uuid.UUID:
    """The UUID of 16 bytes, from a cache: a log names the same topic and directory ids in
    record after record (a PartitionRecord holds one per replica), `uuid.UUID()` checks
    its arguments at every call, and the image then shares one object per id.

    Generated readers look in the cache themselves (`_uuids_get`, a plain dict lookup
    costs half an `lru_cache` hit) and call this on a miss. A full cache starts over:
    simpler than LRU, and a miss costs one `uuid.UUID()`."""
    value = _UUIDS.get(raw)
    if value is None:
        if len(_UUIDS) >= _UUIDS_MAX:
            _UUIDS.clear()
        value = _UUIDS[raw] = uuid.UUID(bytes=raw)
    return value


_UUID_ARRAYS_MAX: Final = 65_536
_UUID_ARRAYS: Final[dict[bytes, tuple[uuid.UUID, ...]]] = {}  # by their bytes; see below
_uuid_arrays_get: Final = _UUID_ARRAYS.get


def _uuid_array_of(raw: bytes) -> tuple[uuid.UUID, ...]:
    """The UUIDs of `raw` (16 bytes each) as one tuple, shared by every record that holds
    the same ones: a PartitionRecord's replica directories repeat from partition to
    partition, and each tuple of them is one more object per partition of the image for
    the garbage collector to walk. Generated readers look in the cache themselves
    (`_uuid_arrays_get`); a full cache starts over."""
    value = _UUID_ARRAYS.get(raw)
    if value is None:
        if len(_UUID_ARRAYS) >= _UUID_ARRAYS_MAX:
            _UUID_ARRAYS.clear()
        value = _UUID_ARRAYS[raw] = tuple(
            _uuid_of(raw[start:start + 16]) for start in range(0, len(raw), 16))
    return value


@functools.lru_cache(maxsize=1024)
def _array_layout(code: str, count: int) -> struct.Struct:
    """The layout of `count` big-endian values of struct `code` (a replica list: "i")."""
    if len(code) > 1:  # "16s": a count would make it one longer string, so repeat it
        return struct.Struct(">" + code * count)
    return struct.Struct(f">{count}{code}")


@functools.cache  # one tuple per struct code
def _small_array_unpackers(code: str) -> tuple[Callable[[bytes, int], tuple[Any, ...]], ...]:
    """`unpack_from` of 0 to `_SMALL_ARRAY_COUNT_MAX` values of `code`, by count."""
    counts = range(_SMALL_ARRAY_COUNT_MAX + 1)
    return tuple(_array_layout(code, count).unpack_from for count in counts)


@functools.cache  # one tuple per struct code
def _small_array_packers(code: str) -> tuple[Callable[..., bytes], ...]:
    """`pack` of 0 to `_SMALL_ARRAY_COUNT_MAX` values of `code`, by count."""
    return tuple(_array_layout(code, count).pack for count in range(_SMALL_ARRAY_COUNT_MAX + 1))


# ---------------------------------------------------------------------------------------------
# The fields of one (class, version)


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where each field of a class sits at one version (see `schema.py`)."""

    cls: type[Any]
    version: int
    flexible: bool
    names: tuple[str, ...]  # every field, in declaration order: the constructor's arguments
    regular: tuple[FieldSpec, ...]  # in declaration order
    tagged: tuple[tuple[int, FieldSpec], ...]  # (tag, field), ascending tags
    absent: tuple[FieldSpec, ...]  # neither: decoded as the default

    @classmethod
    def of(cls, message_cls: type[Any], version: int, flexible: bool) -> _Layout:
        fields: tuple[FieldSpec, ...] = message_cls.FIELDS
        regular: list[FieldSpec] = []
        tagged: list[tuple[int, FieldSpec]] = []
        absent: list[FieldSpec] = []
        for spec in fields:
            if version in spec.tagged_versions and spec.tag is not None:
                if not flexible:
                    raise MetadataEncodeError(
                        f"{message_cls.__qualname__}.{spec.name}: tagged, not flexible"
                    )
                _check_type(spec)
                tagged.append((spec.tag, spec))
            elif version in spec.versions:
                _check_type(spec)
                regular.append(spec)
            else:
                absent.append(spec)
        tagged.sort(key=lambda pair: pair[0])
        return cls(
            cls=message_cls,
            version=version,
            flexible=flexible,
            names=tuple(spec.name for spec in fields),
            regular=tuple(regular),
            tagged=tuple(tagged),
            absent=tuple(absent),
        )

    def runs(self) -> Iterator[tuple[FieldSpec, ...]]:
        """The regular fields in order, consecutive fixed-width ones grouped in one run."""
        run: list[FieldSpec] = []
        for spec in self.regular:
            if spec.type in _FIXED_CODES:
                run.append(spec)
                continue
            if run:
                yield tuple(run)
                run = []
            yield (spec,)
        if run:
            yield tuple(run)


def _check_type(spec: FieldSpec) -> None:
    """Refuse a field this codec cannot read or write: the emitters below may then take
    anything that is not an array, a fixed-width type or a struct for a string or bytes."""
    if spec.is_array:
        if spec.struct is None and spec.element_type not in PRIMITIVE_TYPES:
            raise MetadataEncodeError(f"{spec.name}: no codec for type {spec.type}")
    elif spec.type not in PRIMITIVE_TYPES:
        raise MetadataEncodeError(f"{spec.name}: struct fields must be arrays")


def _builds_without_init(cls: type[Any], names: tuple[str, ...]) -> bool:
    """Whether an instance of `cls` may be made as `copy` and `pickle` make one of a slotted
    class: `object.__new__`, then each slot stored. True for a dataclass whose fields are
    exactly `names`, each an `__init__` argument kept in a slot, whose `__init__` is the
    one `dataclasses` wrote (it only stores them) and that has no `__post_init__`."""
    if not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__"):
        return False
    fields = dataclasses.fields(cls)
    init_code = getattr(cls.__init__, "__code__", None)
    return (
        tuple(sorted(field.name for field in fields)) == tuple(sorted(names))
        and all(field.init for field in fields)
        and all(isinstance(vars(cls).get(name), types.MemberDescriptorType) for name in names)
        and init_code is not None
        and init_code.co_filename == "<string>"  # made by dataclasses, not in a class body
    )


class _Source:
    """The body of one generated function, and the namespace its code runs in.

    The code names every value other than an int, str or bytes literal (a layout, a nested
    codec, a field's default) through `name`, never through its repr."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.namespace = dict(namespace)
        self.lines: list[str] = []
        self._depth = 1

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self._depth + line)

    @contextmanager
    def block(self, header: str) -> Iterator[None]:
        self(header)
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    def name(self, stem: str, value: Any) -> str:
        """A global of the generated code bound to `value`."""
        name = f"_{stem}"
        if name in self.namespace and self.namespace[name] is not value:
            name = f"_{stem}_{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def define(self, signature: str, filename: str) -> tuple[Callable[..., Any], str]:
        """Compile `def <signature>:` with the body; return the function and its source."""
        source = "\n".join([f"def {signature}:", *self.lines, ""])
        exec(compile(source, filename, "exec"), self.namespace)
        return self.namespace[signature.partition("(")[0]], source


# ---------------------------------------------------------------------------------------------
# Generated readers: `read(buf, pos) -> (message, pos after it)`, `buf` being bytes


def _emit_read_varint(src: _Source, target: str) -> None:
    """`target` = the unsigned varint at `pos`; a one-byte varint without a call."""
    src(f"{target} = buf[pos]")
    with src.block(f"if {target} < 0x80:"):
        src("pos += 1")
    with src.block("else:"):
        src(f"{target}, pos = _read_unsigned_varint(buf, pos)")


def _emit_read_length(src: _Source, target: str, flexible: bool, legacy: struct.Struct) -> None:
    """`target` = the length (or count) prefix of a string, bytes or array; -1 for null."""
    if flexible:
        _emit_read_varint(src, target)
        src(f"{target} -= 1")
        return
    src(f"{target} = {src.name('unpack_legacy_length', legacy.unpack_from)}(buf, pos)[0]")
    src(f"pos += {legacy.size}")
    with src.block(f"if {target} < -1:"):
        src(f'raise MetadataDecodeError(f"negative length {{{target}}}")')


def _emit_read_null(src: _Source, target: str, nullable: bool, refusal: str) -> None:
    """The branch of a null length: `target` = None, or an error saying `refusal`."""
    if nullable:
        src(f"{target} = None")
    else:
        src(f"raise MetadataDecodeError({refusal!r})")


def _emit_read_blob(
    src: _Source, target: str, kind: str, flexible: bool, nullable: bool, where: str
) -> None:
    """`target` = a string (decoded UTF-8) or bytes."""
    _emit_read_length(src, "length", flexible, _INT16 if kind == "string" else _INT32)
    with src.block("if length < 0:"):
        _emit_read_null(src, target, nullable, f"{where}: null in a non-nullable {kind}")
    with src.block("else:"):
        src("end = pos + length")
        with src.block("if end > len(buf):"):
            message = f"{where}: {kind} of {{length}} bytes runs past the end"
            src(f'raise MetadataDecodeError(f"{message}")')
        src(f"{target} = buf[pos:end]" + (".decode()" if kind == "string" else ""))
        src("pos = end")


def _emit_read_fixed_run(src: _Source, run: tuple[FieldSpec, ...]) -> None:
    """The fields of `run`, all fixed-width and consecutive, with one `unpack_from`."""
    layout = struct.Struct(">" + "".join(_FIXED_CODES[spec.type] for spec in run))
    targets = ", ".join(f"f_{spec.name}" for spec in run)
    if len(run) == 1:
        targets = f"({targets},)"
    src(f"{targets} = {src.name('unpack', layout.unpack_from)}(buf, pos)")
    src(f"pos += {layout.size}")
    for spec in run:
        if spec.type == "uuid":
            src(f"f_{spec.name} = _uuids_get(f_{spec.name}) or _uuid_of(f_{spec.name})")


def _emit_read_array(src: _Source, target: str, spec: FieldSpec, layout: _Layout) -> None:
    """`target` = a tuple of the field's elements, or None."""
    nullable = layout.version in spec.nullable_versions
    _emit_read_length(src, "count", layout.flexible, _INT32)
    with src.block("if count < 0:"):
        _emit_read_null(src, target, nullable, f"{spec.name}: null in a non-nullable array")
    with src.block("elif count > len(buf) - pos:  # every element takes at least a byte"):
        src(f'raise MetadataDecodeError(f"{spec.name}: {{count}} elements cannot fit the record")')
    with src.block("else:"):
        element = spec.element_type
        if spec.struct is None and element in _FIXED_CODES:
            _emit_read_fixed_array(src, target, element)
            return
        src("items = []")
        with src.block("for _ in range(count):"):
            if spec.struct is not None:
                nested = _struct_codec(spec.struct, layout.version, layout.flexible)
                read = src.name(f"read_{spec.struct.__name__}", nested.read)
                src(f"item, pos = {read}(buf, pos)")
            else:  # string or bytes: an element is never null
                _emit_read_blob(src, "item", element, layout.flexible, False, spec.name)
            src("items.append(item)")
        src(f"{target} = tuple(items)")


def _emit_read_fixed_array(src: _Source, target: str, element: str) -> None:
    """`target` = `count` fixed-width elements, with one `unpack_from` (a replica list)."""
    code = _FIXED_CODES[element]
    if element == "uuid":  # the tuple of UUIDs of these bytes, shared (`_uuid_array_of`)
        src("raw = buf[pos:pos + 16 * count]")
        with src.block("if len(raw) != 16 * count:"):
            src("raise MetadataDecodeError('an array of uuids runs past the end')")
        src(f"{target} = _uuid_arrays_get(raw) or _uuid_array_of(raw)")
        src("pos += 16 * count")
        return
    unpackers = src.name(f"unpackers_{element}", _small_array_unpackers(code))
    with src.block(f"if count <= {_SMALL_ARRAY_COUNT_MAX}:"):
        src(f"{target} = {unpackers}[count](buf, pos)")
    with src.block("else:"):
        src(f"{target} = _array_layout({code!r}, count).unpack_from(buf, pos)")
    src(f"pos += {struct.calcsize('>' + code)} * count")


def _emit_read_field(src: _Source, spec: FieldSpec, layout: _Layout) -> None:
    """`f_<name>` = the field read at `pos`, for any field that is not in a fixed run."""
    target = f"f_{spec.name}"
    if spec.is_array:
        _emit_read_array(src, target, spec, layout)
    elif spec.type in _FIXED_CODES:
        _emit_read_fixed_run(src, (spec,))
    else:  # string or bytes
        nullable = layout.version in spec.nullable_versions
        _emit_read_blob(src, target, spec.type, layout.flexible, nullable, spec.name)


def _emit_read_tag_buffer(src: _Source, layout: _Layout) -> None:
    """The tag buffer: each known tag into its `f_<name>`, unknown ones skipped."""
    with src.block("if buf[pos] == 0:  # no tagged field: the usual case"):
        src("pos += 1")
    with src.block("else:"):
        _emit_read_varint(src, "tags_count")
        src("seen = set()")
        with src.block("for _ in range(tags_count):"):
            _emit_read_varint(src, "tag")
            _emit_read_varint(src, "size")
            src("tag_end = pos + size")
            with src.block("if tag_end > len(buf):"):
                src('raise MetadataDecodeError(f"tagged field {tag} runs past the end")')
            with src.block("if tag in seen:"):
                src('raise MetadataDecodeError(f"tagged field {tag} appears twice")')
            src("seen.add(tag)")
            if not layout.tagged:
                src("pos = tag_end  # a newer writer's field: skip it")
                return
            keyword = "if"
            for tag, spec in layout.tagged:
                with src.block(f"{keyword} tag == {tag}:"):
                    _emit_read_field(src, spec, layout)
                keyword = "elif"
            with src.block("else:"):
                src("pos = tag_end  # a newer writer's field: skip it")
            with src.block("if pos != tag_end:  # a known field must fill its size exactly"):
                message = "tagged field {tag} is {size} bytes, not its size"
                src(f'raise MetadataDecodeError(f"{message}")')


def _emit_construct(src: _Source, layout: _Layout) -> None:
    """Return the message made of every `f_<name>`, and `pos`."""
    cls = src.name(layout.cls.__name__, layout.cls)
    if not _builds_without_init(layout.cls, layout.names):
        arguments = ", ".join(f"{name}=f_{name}" for name in layout.names)
        src(f"return {cls}({arguments}), pos")
        return
    src(f"message = _new_object({cls})")
    for name in layout.names:
        setter = src.name(f"set_{name}", vars(layout.cls)[name].__set__)
        src(f"{setter}(message, f_{name})")
    src("return message, pos")


def _reader(layout: _Layout) -> tuple[Read, str]:
    src = _Source(_GENERATED_GLOBALS)
    for spec in (*layout.absent, *(spec for _, spec in layout.tagged)):
        src(f"f_{spec.name} = {src.name(f'default_{spec.name}', spec.default)}")
    for run in layout.runs():
        if len(run) > 1 or run[0].type in _FIXED_CODES:
            _emit_read_fixed_run(src, run)
        else:
            _emit_read_field(src, run[0], layout)
    if layout.flexible:
        _emit_read_tag_buffer(src, layout)
    _emit_construct(src, layout)
    return src.define("read(buf, pos)", _filename(layout, "read"))


def _filename(layout: _Layout, what: str) -> str:
    return f"<pykraft.metadata.codec: {layout.cls.__qualname__} v{layout.version} {what}>"


# ---------------------------------------------------------------------------------------------
# Generated writers: `write(out, message)` appends the message's bytes to `out`


def _emit_write_varint(src: _Source, value: str, out: str) -> None:
    """Append the unsigned varint `value` (a local, never negative) to `out`."""
    with src.block(f"if {value} < 0x80:"):
        src(f"{out}.append({value})")
    with src.block("else:"):
        src(f"_write_unsigned_varint({out}, {value})")


def _emit_write_length(
    src: _Source, length: str, flexible: bool, legacy: struct.Struct, out: str
) -> None:
    """Append the length (or count) prefix `length`, an expression; "-1" writes null."""
    if not flexible:  # struct.error when the length overflows the prefix
        src(f"{out} += {src.name('pack_legacy_length', legacy.pack)}({length})")
    elif length == "-1":
        src(f"{out}.append(0)")
    else:
        src(f"length = {length} + 1")
        _emit_write_varint(src, "length", out)


def _emit_write_null(
    src: _Source, nullable: bool, flexible: bool, legacy: struct.Struct, out: str, refusal: str
) -> None:
    """The branch of a None value: a null length, or an error saying `refusal`."""
    if nullable:
        _emit_write_length(src, "-1", flexible, legacy, out)
    else:
        src(f"raise MetadataEncodeError({refusal!r})")


def _emit_write_blob(
    src: _Source, value: str, kind: str, flexible: bool, nullable: bool, where: str, out: str
) -> None:
    legacy = _INT16 if kind == "string" else _INT32
    with src.block(f"if {value} is None:"):
        refusal = f"{where}: null in a non-nullable {kind}"
        _emit_write_null(src, nullable, flexible, legacy, out, refusal)
    with src.block(f"elif isinstance({value}, {'str' if kind == 'string' else 'bytes'}):"):
        src(f"data = {value}" + (".encode()" if kind == "string" else ""))
        _emit_write_length(src, "len(data)", flexible, legacy, out)
        src(f"{out} += data")
    with src.block("else:"):
        message = f"{where}: {kind} field given {{type({value}).__name__}}"
        src(f'raise MetadataEncodeError(f"{message}")')


def _emit_write_fixed_run(src: _Source, kinds: list[str], values: list[str], out: str) -> None:
    """Append `values` (locals of fixed-width types `kinds`) with one `pack`."""
    arguments = []
    for kind, value in zip(kinds, values, strict=True):
        if kind == "bool":
            with src.block(f"if not isinstance({value}, bool):"):
                src(f'raise MetadataEncodeError(f"bool field given {{{value}!r}}")')
        elif kind == "uuid":
            with src.block(f"if not isinstance({value}, _UUID):"):
                src(f'raise MetadataEncodeError(f"uuid field given {{{value}!r}}")')
        arguments.append(f"{value}.bytes" if kind == "uuid" else value)
    layout = struct.Struct(">" + "".join(_FIXED_CODES[kind] for kind in kinds))
    src(f"{out} += {src.name('pack', layout.pack)}({', '.join(arguments)})")


def _emit_write_array(src: _Source, value: str, spec: FieldSpec, layout: _Layout, out: str) -> None:
    nullable = layout.version in spec.nullable_versions
    with src.block(f"if {value} is None:"):
        refusal = f"{spec.name}: null in a non-nullable array"
        _emit_write_null(src, nullable, layout.flexible, _INT32, out, refusal)
    with src.block(f"elif not isinstance({value}, (tuple, list)):"):
        message = f"{spec.name}: array field given {{type({value}).__name__}}"
        src(f'raise MetadataEncodeError(f"{message}")')
    with src.block("else:"):
        src(f"count = len({value})")
        _emit_write_length(src, "count", layout.flexible, _INT32, out)
        element = spec.element_type
        if spec.struct is None and element in _FIXED_CODES and element not in ("bool", "uuid"):
            code = _FIXED_CODES[element]  # numbers: the whole array in one pack
            packers = src.name(f"packers_{element}", _small_array_packers(code))
            with src.block(f"if count <= {_SMALL_ARRAY_COUNT_MAX}:"):
                src(f"{out} += {packers}[count](*{value})")
            with src.block("else:"):
                src(f"{out} += _array_layout({code!r}, count).pack(*{value})")
            return
        with src.block(f"for item in {value}:"):
            if spec.struct is not None:
                nested = _struct_codec(spec.struct, layout.version, layout.flexible)
                src(f"{src.name(f'write_{spec.struct.__name__}', nested.write)}({out}, item)")
            elif element in _FIXED_CODES:  # bool or uuid: each element's type is checked
                _emit_write_fixed_run(src, [element], ["item"], out)
            else:  # string or bytes: an element is never null
                _emit_write_blob(src, "item", element, layout.flexible, False, spec.name, out)


def _emit_write_field(src: _Source, spec: FieldSpec, layout: _Layout, out: str) -> None:
    """Append `f_<name>`, for any field that is not in a fixed run."""
    value = f"f_{spec.name}"
    if spec.is_array:
        _emit_write_array(src, value, spec, layout, out)
    elif spec.type in _FIXED_CODES:
        _emit_write_fixed_run(src, [spec.type], [value], out)
    else:  # string or bytes
        nullable = layout.version in spec.nullable_versions
        _emit_write_blob(src, value, spec.type, layout.flexible, nullable, spec.name, out)


def _emit_write_tag_buffer(src: _Source, layout: _Layout) -> None:
    """The tag buffer: the count of fields that differ from their default, then each of
    them in ascending tag order, written to `tags` as they are counted. A fixed-width
    field's size is known: no body to measure."""
    if not layout.tagged:
        src("out.append(0)  # an empty tag buffer")
        return
    src("tags_count = 0")
    src("tags = bytearray()")
    for tag, spec in layout.tagged:
        default = src.name(f"default_{spec.name}", spec.default)
        with src.block(f"if f_{spec.name} != {default}:"):
            src("tags_count += 1")
            if not spec.is_array and spec.type in _FIXED_CODES:
                size = struct.calcsize(">" + _FIXED_CODES[spec.type])
                src(f"tags += {_varint_bytes(tag) + _varint_bytes(size)!r}  # tag, size")
                _emit_write_fixed_run(src, [spec.type], [f"f_{spec.name}"], "tags")
                continue
            src("body = bytearray()")
            _emit_write_field(src, spec, layout, "body")
            src(f"tags += {_varint_bytes(tag)!r}  # tag")
            src("size = len(body)")
            _emit_write_varint(src, "size", "tags")
            src("tags += body")
    _emit_write_varint(src, "tags_count", "out")
    src("out += tags")


def _writer(layout: _Layout) -> tuple[Write, str]:
    src = _Source(_GENERATED_GLOBALS)
    for spec in layout.absent:
        if spec.ignorable:
            continue
        default = src.name(f"default_{spec.name}", spec.default)
        with src.block(f"if message.{spec.name} != {default}:"):
            refusal = (
                f"{layout.cls.__qualname__}.{spec.name} cannot hold a non-default value at "
                f"version {layout.version}"
            )
            src(f"raise MetadataEncodeError({refusal!r})")
    for spec in (*layout.regular, *(spec for _, spec in layout.tagged)):
        src(f"f_{spec.name} = message.{spec.name}")
    for run in layout.runs():
        if len(run) > 1 or run[0].type in _FIXED_CODES:
            kinds = [spec.type for spec in run]
            _emit_write_fixed_run(src, kinds, [f"f_{spec.name}" for spec in run], "out")
        else:
            _emit_write_field(src, run[0], layout, "out")
    if layout.flexible:
        _emit_write_tag_buffer(src, layout)
    if not src.lines:
        src("pass  # no field at this version")
    return src.define("write(out, message)", _filename(layout, "write"))


# ---------------------------------------------------------------------------------------------
# Compiled codecs

_GENERATED_GLOBALS: Final[dict[str, Any]] = {
    "MetadataDecodeError": MetadataDecodeError,
    "MetadataEncodeError": MetadataEncodeError,
    "_UUID": uuid.UUID,
    "_array_layout": _array_layout,
    "_new_object": object.__new__,
    "_read_unsigned_varint": read_unsigned_varint,
    "_uuid_array_of": _uuid_array_of,
    "_uuid_arrays_get": _uuid_arrays_get,
    "_uuid_of": _uuid_of,
    "_uuids_get": _uuids_get,
    "_write_unsigned_varint": write_unsigned_varint,
}


# ---------------------------------------------------------------------------------------------
# The compiled reader (_read.c)

# The kinds of field _read.c reads, in the order of its `enum kind`, and its op flags.
_NATIVE_KINDS: Final = ("int8", "int16", "uint16", "int32", "int64", "float64", "bool", "uuid",
                        "string", "bytes")
_NATIVE_ARRAY: Final = 0x10
_NATIVE_NULLABLE: Final = 0x20
_NATIVE_TAGGED_MAX: Final = 64


def _load_native() -> Callable[..., Read] | None:
    try:
        from pykraft.metadata import _read  # type: ignore[attr-defined]  # built by setup.py
    except ImportError:
        log.warning("pykraft.metadata._read is not built: metadata records are decoded in "
                    "Python, several times slower (reinstall pykraft with a C compiler)")
        return None
    if _read.KINDS != len(_NATIVE_KINDS):
        log.warning("pykraft.metadata._read reads %d kinds of field, not %d: a stale build; "
                    "metadata records are decoded in Python", _read.KINDS, len(_NATIVE_KINDS))
        return None
    native: Callable[..., Read] = _read.Reader
    return native


_NATIVE_READER: Final = _load_native()
_native_enabled = _NATIVE_READER is not None


def native_reader_loaded() -> bool:
    return _NATIVE_READER is not None


@contextmanager
def native_reader(enabled: bool) -> Iterator[None]:
    """Decode with the compiled reader or the generated Python one (tests compare them);
    every codec made meanwhile is dropped again when the block ends."""
    global _native_enabled
    invariant(not enabled or _NATIVE_READER is not None, "the compiled reader is not built")
    before = _native_enabled
    _native_enabled = enabled
    _CODECS.clear()
    _RECORD_READERS.clear()
    try:
        yield
    finally:
        _native_enabled = before
        _CODECS.clear()
        _RECORD_READERS.clear()


def _native_op(spec: FieldSpec, layout: _Layout) -> int | None:
    """The op _read.c reads `spec` with, or None when it cannot (an array of structs)."""
    if spec.struct is not None or spec.element_type not in _NATIVE_KINDS:
        return None
    op = _NATIVE_KINDS.index(spec.element_type)
    if spec.is_array:
        op |= _NATIVE_ARRAY
    if layout.version in spec.nullable_versions:
        op |= _NATIVE_NULLABLE
    return op


def _native_read(layout: _Layout) -> Read | None:
    """A compiled reader of `layout`, when it is enabled and can read every field: flexible
    versions only (every metadata record's), no arrays of structs, and a class built as
    `_emit_construct` builds it without calling `__init__`."""
    if (_NATIVE_READER is None or not _native_enabled or not layout.flexible
            or len(layout.tagged) > _NATIVE_TAGGED_MAX
            or not _builds_without_init(layout.cls, layout.names)):
        return None
    index = {name: position for position, name in enumerate(layout.names)}
    regular: list[tuple[int, int]] = []
    for spec in layout.regular:
        op = _native_op(spec, layout)
        if op is None:
            return None
        regular.append((index[spec.name], op))
    tagged: list[tuple[int, int, int]] = []
    for tag, spec in layout.tagged:
        op = _native_op(spec, layout)
        if op is None:
            return None
        tagged.append((tag, index[spec.name], op))
    # as `_reader` starts: the absent and tagged fields at their defaults (a regular one is
    # always read)
    unread = {spec.name: spec.default
              for spec in (*layout.absent, *(spec for _, spec in layout.tagged))}
    defaults = tuple(unread.get(name) for name in layout.names)
    setters = tuple(vars(layout.cls)[name] for name in layout.names)
    return _NATIVE_READER(layout.cls, setters, defaults, tuple(regular), tuple(tagged),
                          MetadataDecodeError, _UUIDS, _uuid_of, _UUID_ARRAYS, _uuid_array_of)


@dataclass(frozen=True, slots=True)
class _StructCodec:
    """One message (or nested struct) type at one version, compiled from its `FIELDS`."""

    layout: _Layout
    read: Read  # (buf: bytes, pos) -> (message, pos after it): compiled if it can be
    write: Write  # (out, message): append the message's bytes
    read_source: str  # the generated Python reader's, compiled or not
    write_source: str
    native: bool  # whether `read` is _read.c's


_CODECS: dict[tuple[type[Any], int, bool], _StructCodec] = {}


def _struct_codec(cls: type[Any], version: int, flexible: bool) -> _StructCodec:
    """The codec of `cls` at `version`; a nested struct takes its message's flexibility."""
    key = (cls, version, flexible)
    codec = _CODECS.get(key)
    if codec is None:
        layout = _Layout.of(cls, version, flexible)
        read, read_source = _reader(layout)
        native = _native_read(layout)
        write, write_source = _writer(layout)
        codec = _StructCodec(layout, native or read, write, read_source, write_source,
                             native is not None)
        _CODECS[key] = codec
    return codec


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


def _bytes_of(data: bytes | bytearray | memoryview) -> bytes:
    """`data` as bytes, which generated readers index and slice fastest (records are
    small: a copy of a bytearray or memoryview costs less than reading through it)."""
    if type(data) is bytes:
        return data
    return bytes(memoryview(data).cast("B"))


def _write_body(out: bytearray, message: Any, cls: type[Any], version: int) -> None:
    try:
        _struct_codec(cls, version, _is_flexible(cls, version)).write(out, message)
    except _ENCODE_FAILURES as error:
        raise MetadataEncodeError(f"cannot encode {cls.__name__} v{version}: {error}") from error


def _read_body(cls: type[Any], buf: bytes, pos: int, version: int) -> tuple[Any, int]:
    try:
        return _struct_codec(cls, version, _is_flexible(cls, version)).read(buf, pos)
    except MetadataDecodeError:
        raise
    except _DECODE_FAILURES as error:
        raise MetadataDecodeError(f"malformed {cls.__name__} v{version}: {error!r}") from error


def encode_message(message: Any, version: int) -> bytes:
    """The body of `message` (an instance of a class with `FIELDS`, `LOWEST_VERSION`,
    `LATEST_VERSION` and `FLEXIBLE_FROM`) at `version`, without any framing."""
    cls = type(message)
    _check_version(cls, version, MetadataEncodeError)
    out = bytearray()
    _write_body(out, message, cls, version)
    return bytes(out)


def decode_message(cls: type[T], data: bytes | bytearray | memoryview, version: int) -> T:
    """The inverse of `encode_message`: the whole of `data` must be one message body."""
    _check_version(cls, version, MetadataDecodeError)
    buf = _bytes_of(data)
    message, pos = _read_body(cls, buf, 0, version)
    if pos != len(buf):
        raise MetadataDecodeError(f"{len(buf) - pos} byte(s) after the {cls.__name__} body")
    result: T = message
    return result


# What was checked and compiled once per record kind and version, so that encoding or
# decoding one record is two dict lookups and the generated code. The readers are keyed by
# the frame header's bytes (frame version, api key, version: one byte each), so decoding
# does not parse a header it has seen before. Both are bounded by the kinds and versions.
_RECORD_WRITERS: dict[tuple[type[Any], int | None], tuple[int, bytes, Write]] = {}
_RECORD_READERS: dict[bytes, tuple[Read, type[Any], int, int]] = {}
_ONE_BYTE_HEADER_SIZE: Final = 3


def _record_writer(cls: type[Any], requested: int | None) -> tuple[int, bytes, Write]:
    """(version, frame header, body writer) of `cls` at the `requested` version (None:
    the latest), checked once."""
    if METADATA_RECORD_TYPES.get(getattr(cls, "API_KEY", -1)) is not cls:
        raise MetadataEncodeError(f"{cls.__name__} is not a metadata record")
    version: int = cls.LATEST_VERSION if requested is None else requested
    header = bytearray()
    write_unsigned_varint(header, FRAME_VERSION)
    write_unsigned_varint(header, cls.API_KEY)
    write_unsigned_varint(header, version)
    _check_version(cls, version, MetadataEncodeError)
    try:
        codec = _struct_codec(cls, version, _is_flexible(cls, version))
    except _ENCODE_FAILURES as error:
        raise MetadataEncodeError(f"cannot encode {cls.__name__} v{version}: {error}") from error
    writer = version, bytes(header), codec.write
    _RECORD_WRITERS[cls, requested] = writer
    return writer


def encode_metadata_record(record: MetadataRecord, version: int | None = None) -> bytes:
    """One record as the value of a `__cluster_metadata` log record (the serde framing)."""
    cls = type(record)
    writer = _RECORD_WRITERS.get((cls, version))
    if writer is None:
        writer = _record_writer(cls, version)
    version, header, write = writer
    out = bytearray(header)
    try:
        write(out, record)
    except _ENCODE_FAILURES as error:
        raise MetadataEncodeError(f"cannot encode {cls.__name__} v{version}: {error}") from error
    return bytes(out)


def _read_frame_header(buf: bytes) -> tuple[int, int, int, int]:
    """(frame version, api key, record version, pos after them), varints of any length."""
    try:
        frame_version, pos = read_unsigned_varint(buf, 0)
        api_key, pos = read_unsigned_varint(buf, pos)
        version, pos = read_unsigned_varint(buf, pos)
    except IndexError as error:
        raise MetadataDecodeError("truncated metadata record header") from error
    return frame_version, api_key, version, pos


def _record_reader(buf: bytes) -> tuple[Read, type[Any], int, int]:
    """(reader, record class, version, pos after the header) of the record framed in `buf`,
    checked once: cached by the header's bytes when each of its varints takes one byte, as
    every header does today (`_RECORD_READERS`)."""
    frame_version, api_key, version, pos = _read_frame_header(buf)
    if frame_version != FRAME_VERSION:
        raise MetadataDecodeError(f"unknown metadata record frame version {frame_version}")
    cls = METADATA_RECORD_TYPES.get(api_key)
    if cls is None:
        raise MetadataDecodeError(f"unknown metadata record api key {api_key}")
    _check_version(cls, version, MetadataDecodeError)
    try:
        read = _struct_codec(cls, version, _is_flexible(cls, version)).read
    except _DECODE_FAILURES as error:  # a schema this codec cannot compile
        raise MetadataDecodeError(f"malformed {cls.__name__} v{version}: {error!r}") from error
    reader = read, cls, version, pos
    if pos == _ONE_BYTE_HEADER_SIZE:
        _RECORD_READERS[buf[:pos]] = reader
    return reader


def decode_metadata_record_and_version(
    data: bytes | bytearray | memoryview,
) -> tuple[MetadataRecord, int]:
    """The record framed in `data`, and the version it was written at."""
    buf = data if type(data) is bytes else _bytes_of(data)
    reader = _RECORD_READERS.get(buf[:_ONE_BYTE_HEADER_SIZE])
    if reader is None:
        reader = _record_reader(buf)
    read, cls, version, pos = reader
    try:
        record, pos = read(buf, pos)
    except MetadataDecodeError:
        raise
    except _DECODE_FAILURES as error:
        raise MetadataDecodeError(f"malformed {cls.__name__} v{version}: {error!r}") from error
    if pos != len(buf):
        raise MetadataDecodeError(f"{len(buf) - pos} byte(s) after the {cls.__name__} body")
    return record, version


def decode_metadata_record(data: bytes | bytearray | memoryview) -> MetadataRecord:
    """The record framed in `data` (see `encode_metadata_record`)."""
    return decode_metadata_record_and_version(data)[0]
