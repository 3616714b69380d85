"""Check a request body's length and count fields before kio decodes it.

kio's native reader reserves room for an array's claimed element count before it reads a
single element. A frame of a few bytes claiming 2^32-2 entries made it ask for 32 GiB, and a
failed allocation in Rust aborts the process: one request killed the node (found by
tests/fuzz). So the body is walked here first, without building anything, and every array,
string and bytes field must claim no more than the bytes left in the frame (each element
takes at least one byte); only then does kio decode it. The walk is linear in the frame's
size, like the decode.

The plan of each entity type is built once from the same field metadata kio reads: the field
order, `kafka_type`, the tag of tagged fields (skipped by size, at the end of each flexible
struct), and the entity's `__flexible__`.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, Final

from pykraft.errors import InvalidRequest

__all__ = ["LengthClaimError", "check_lengths"]


class LengthClaimError(InvalidRequest):
    """A length or count claims more bytes than the request holds."""

    def __init__(self, message: str, claimed: int) -> None:
        super().__init__(message)
        self.claimed = claimed


_FIXED_SIZES: Final = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4,
    "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "timedelta_i64": 8,
    "datetime_i64": 8, "float64": 8, "uuid": 16,
}
_VARINTS: Final = frozenset({"uvarint", "varint", "uvarlong", "varlong"})
# legacy (non-flexible) width of each variable field's length
_LENGTH_WIDTH: Final = {"string": 2, "bytes": 4, "records": 4}

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")

# (data, offset, end) -> the offset after the field; raises InvalidRequest
Walker = Callable[[bytes | memoryview, int, int], int]


def _fail(what: str, claimed: int, offset: int, end: int) -> LengthClaimError:
    return LengthClaimError(f"{what} of {claimed} at byte {offset}, but only "
                            f"{max(end - offset, 0)} bytes remain in the frame", claimed)


def _uvarint(data: bytes | memoryview, offset: int, end: int) -> tuple[int, int]:
    if offset < end:
        byte = data[offset]
        if byte < 0x80:  # the common case: one byte
            return byte, offset + 1
    value, shift = 0, 0
    while True:
        if offset >= end or shift > 63:
            raise InvalidRequest(f"varint at byte {offset} runs past the frame")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, offset
        shift += 7


def _length_reader(flexible: bool, width: int) -> Callable[[bytes | memoryview, int, int],
                                                            tuple[int, int]]:
    """Reads a nullable length or count (-1 for null)."""
    if flexible:
        def compact(data: bytes | memoryview, offset: int, end: int) -> tuple[int, int]:
            value, offset = _uvarint(data, offset, end)
            return value - 1, offset
        return compact
    unpack = (_I16 if width == 2 else _I32).unpack_from

    def legacy(data: bytes | memoryview, offset: int, end: int) -> tuple[int, int]:
        if offset + width > end:
            raise InvalidRequest(f"length at byte {offset} runs past the frame")
        return int(unpack(data, offset)[0]), offset + width
    return legacy


def _skip_varint(data: bytes | memoryview, offset: int, end: int) -> int:
    return _uvarint(data, offset, end)[1]


def _null(size: int, nullable: bool, offset: int) -> None:
    """A length of -1 is null, which only a nullable field may be (kio would hand a handler
    None where the schema promises a value; Kafka refuses it as this does); below -1 is
    nothing."""
    if size < -1 or not nullable:
        what = "a negative length" if size < -1 else "null in a non-nullable field"
        raise InvalidRequest(f"{what} at byte {offset}")


def _variable(flexible: bool, width: int, nullable: bool) -> Walker:
    read = _length_reader(flexible, width)

    def walk(data: bytes | memoryview, offset: int, end: int) -> int:
        size, offset = read(data, offset, end)
        if size > end - offset:
            raise _fail("a length", size, offset, end)
        if size < 0:
            _null(size, nullable, offset)
            return offset
        return offset + size
    return walk


def _array(flexible: bool, item: Walker | int, nullable: bool) -> Walker:
    read = _length_reader(flexible, 4)

    def walk(data: bytes | memoryview, offset: int, end: int) -> int:
        count, offset = read(data, offset, end)
        if count > end - offset:  # every element takes at least one byte
            raise _fail("an array", count, offset, end)
        if count < 0:
            _null(count, nullable, offset)
            return offset
        if isinstance(item, int):
            return offset + max(count, 0) * item
        for _ in range(count):
            offset = item(data, offset, end)
        return offset
    return walk


def _nullable_struct(walker: Walker | int) -> Walker:
    """A nullable struct: an int8 marker, -1 for null, else 1 and the struct."""

    def walk(data: bytes | memoryview, offset: int, end: int) -> int:
        if offset >= end:
            raise InvalidRequest(f"struct marker at byte {offset} runs past the frame")
        if data[offset] == 0xFF:
            return offset + 1
        offset += 1
        return offset + walker if isinstance(walker, int) else walker(data, offset, end)
    return walk


def _unwrap(hint: Any) -> tuple[Any, bool]:
    """The type of a field, and whether it is nullable (`X | None`)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next(arg for arg in typing.get_args(hint) if arg is not type(None)), True
    return hint, False


def _step(hint: Any, kafka_type: str | None, flexible: bool) -> Walker | int:
    """How to move past one field: a fixed size, or a walker."""
    hint, nullable = _unwrap(hint)
    if typing.get_origin(hint) is tuple:
        item = _step(typing.get_args(hint)[0], kafka_type, flexible)
        return _array(flexible, item, nullable)
    if dataclasses.is_dataclass(hint):
        struct_walker = _walker(typing.cast(type, hint))
        return _nullable_struct(struct_walker) if nullable else struct_walker
    if kafka_type in _FIXED_SIZES:
        return _FIXED_SIZES[kafka_type]
    if kafka_type in _LENGTH_WIDTH:
        return _variable(flexible, _LENGTH_WIDTH[kafka_type], nullable)
    if kafka_type in _VARINTS:
        return _skip_varint
    raise TypeError(f"no length check for field type {hint!r} ({kafka_type})")


@cache
def _walker(entity_type: type) -> Walker | int:
    """The walker of an entity, or its size when every field has a fixed size."""
    flexible = bool(getattr(entity_type, "__flexible__", False))
    hints = typing.get_type_hints(entity_type)
    steps: list[Walker | int] = []
    tagged: dict[int, Walker | int] = {}
    for field in dataclasses.fields(entity_type):
        step = _step(hints[field.name], field.metadata.get("kafka_type"), flexible)
        if "tag" in field.metadata:
            tagged[int(field.metadata["tag"])] = step
        elif isinstance(step, int) and steps and isinstance(steps[-1], int):
            steps[-1] += step  # a run of fixed-size fields is one step
        else:
            steps.append(step)
    if not flexible and all(isinstance(step, int) for step in steps):
        return sum(typing.cast(list[int], steps))
    name = entity_type.__name__
    frozen_steps = tuple(steps)

    def walk(data: bytes | memoryview, offset: int, end: int) -> int:
        for step in frozen_steps:
            offset = offset + step if isinstance(step, int) else step(data, offset, end)
        if offset >= end:
            if offset == end and not flexible:
                return offset
            raise InvalidRequest(f"{name} runs past the frame")
        if flexible:
            if data[offset] == 0:  # the common case: no tagged fields
                return offset + 1
            offset = _tags(tagged, data, offset, end)
        return offset
    return walk


def _tags(tagged: dict[int, Walker | int], data: bytes | memoryview, offset: int,
          end: int) -> int:
    count, offset = _uvarint(data, offset, end)
    if count > end - offset:
        raise _fail("a tagged field count", count, offset, end)
    for _ in range(count):
        tag, offset = _uvarint(data, offset, end)
        size, offset = _uvarint(data, offset, end)
        if size > end - offset:
            raise _fail("a tagged field", size, offset, end)
        step = tagged.get(tag)
        if step is not None and not isinstance(step, int):
            step(data, offset, offset + size)  # kio decodes a known tag: check it in its size
        offset += size
    return offset


def check_lengths(entity_type: type, data: bytes | memoryview, offset: int) -> None:
    """Raise InvalidRequest if a length or count in the body at `offset` (a request's, or a
    response's from a peer) claims more than the frame holds (what kio would otherwise try
    to allocate), or is null where the schema has no null."""
    walk = _walker(entity_type)
    end = len(data)
    offset = offset + walk if isinstance(walk, int) else walk(data, offset, end)
    if offset > end:
        raise InvalidRequest(f"{entity_type.__name__} runs past the frame")
