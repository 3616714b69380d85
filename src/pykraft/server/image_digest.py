"""A digest of a MetadataImage that is equal on every node holding the same image.

Nodes compare their images by this digest (exposed on /metrics as
`pykraft_metadata_image_info{offset,digest}`): two nodes that applied the metadata log to
the same offset must show the same digest. The image is walked into a canonical form --
maps and sets sorted, dataclasses as their fields in order, ids as strings -- since the
iteration order of its hash maps depends on the process's string hashing, then hashed with
SHA-256. The offset and epoch of the image are part of the digest.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

import immutables

from pykraft.metadata.image import MetadataImage


def _canonical(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if isinstance(value, enum.Enum):
        return (type(value).__name__, value.value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple(
            (f.name, _canonical(getattr(value, f.name))) for f in dataclasses.fields(value)))
    if isinstance(value, Mapping | immutables.Map):
        return ("map", tuple(sorted(((_canonical(k), _canonical(v)) for k, v in value.items()),
                                    key=repr)))
    if isinstance(value, frozenset | set):
        return ("set", tuple(sorted((_canonical(v) for v in value), key=repr)))
    if isinstance(value, tuple | list):
        return tuple(_canonical(v) for v in value)
    raise TypeError(f"no canonical form for {type(value).__name__}")


def image_digest(image: MetadataImage) -> str:
    """The hex SHA-256 of the image's canonical form."""
    return hashlib.sha256(repr(_canonical(image)).encode()).hexdigest()


class DigestCache:
    """The digest of the latest image asked for, computed once per image object."""

    def __init__(self) -> None:
        self._image: MetadataImage | None = None
        self._digest = ""

    def digest(self, image: MetadataImage) -> str:
        if image is not self._image:
            self._image, self._digest = image, image_digest(image)
        return self._digest
