"""The field-spec tables that describe a Kafka message schema as data.

`records.py` is generated from Kafka's JSON schemas into classes that each carry a `FIELDS`
table of `FieldSpec`s; one generic codec (`codec.py`) interprets those tables to read and
write the bytes. Keeping the schema as data rather than generated read/write code keeps the
generated file reviewable and puts every byte-level decision in one hand-written place.

A field's presence is decided per version: at version `v` a field is

- *tagged* when `v in tagged_versions` (written in the tag buffer, only when it differs
  from its default),
- *regular* when `v in versions` otherwise (written in declaration order),
- *absent* when `v not in versions` (never written; decoded as its default).

`None` is a legal value only at versions in `nullable_versions`.
"""

from __future__ import annotations

import builtins
import uuid
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "VERSION_MAX",
    "ZERO_UUID",
    "NO_VERSIONS",
    "FieldSpec",
    "Versions",
    "PRIMITIVE_TYPES",
]

VERSION_MAX: Final = 0x7FFF  # "n+" in a schema: every version from n on
ZERO_UUID: Final = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID, the default of a uuid field

# The scalar types a schema field (or an array's element) may have.
PRIMITIVE_TYPES: Final = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "int64", "float64", "string", "bytes", "uuid"}
)


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; `NO_VERSIONS` is the empty one."""

    lowest: int
    highest: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lowest <= version <= self.highest

    def __bool__(self) -> bool:
        return self.lowest <= self.highest

    def __str__(self) -> str:
        if not self:
            return "none"
        if self.highest == VERSION_MAX:
            return f"{self.lowest}+"
        if self.lowest == self.highest:
            return str(self.lowest)
        return f"{self.lowest}-{self.highest}"


NO_VERSIONS: Final = Versions(0, -1)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a message schema.

    `type` is Kafka's type name: a primitive (`int32`, `string`, `uuid`, ...), `[]element`
    for an array, or a struct name; for a struct or an array of structs, `struct` is the
    dataclass of the element, itself carrying a `FIELDS` table. `default` is the value the
    field has when absent from a version or omitted from the tag buffer, already converted
    to its Python type (`()` for an empty array, `None` for null).
    """

    name: str
    type: str
    versions: Versions
    nullable_versions: Versions = NO_VERSIONS
    tag: int | None = None
    tagged_versions: Versions = NO_VERSIONS
    default: Any = None
    ignorable: bool = False
    struct: builtins.type[Any] | None = None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        """The element type of an array, or the type itself for a scalar."""
        return self.type[2:] if self.is_array else self.type
