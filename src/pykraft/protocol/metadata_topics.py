"""The topics of a Metadata response (all versions, 0-12), encoded straight from the
image's fields rather than through kio entities.

An all-topics Metadata response is spliced from each topic's encoding (the broker's
MetadataCache). While every topic changes -- a broker rejoining 100,000 partitions moves
each ISR -- every poll of a client re-encodes them all: through kio (an entity per
partition, then its generic writer) that was 28% of a leader broker's samples in the
rejoin, for one client asking every 0.2 s. Here a partition is a few `struct.pack`s.

The layout is MetadataResponse.json's MetadataResponseTopic and
MetadataResponsePartition; test_metadata_topics.py checks every version against kio's
encoding of the same values.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Iterable, Sequence
from typing import Final

from pykraft.protocol.framing import compact_length

FIRST_FLEXIBLE: Final = 9
_INT16_INT32_INT32: Final = struct.Struct(">hii")
_INT32: Final = struct.Struct(">i")
_INT16: Final = struct.Struct(">h")
_EMPTY_TAGS: Final = b"\x00"
_SHORT: Final = 16  # list lengths packed with the rest of a partition (`_partition_layout`)


def _length(count: int, flexible: bool) -> bytes:
    """An array's (or string's) length: compact (count + 1, unsigned varint) or int32."""
    return compact_length(count) if flexible else _INT32.pack(count)


def _int32s(values: Sequence[int], flexible: bool) -> bytes:
    return _length(len(values), flexible) + struct.pack(f">{len(values)}i", *values)


@functools.cache
def _partition_layout(version: int, replicas: int, isr: int, offline: int) -> struct.Struct:
    """The whole partition as one struct, for lists short enough that a compact length is
    one byte (the common case: a partition's replicas)."""
    flexible = version >= FIRST_FLEXIBLE
    length = "B" if flexible else "i"
    return struct.Struct(
        ">hii" + ("i" if version >= 7 else "")
        + f"{length}{replicas}i{length}{isr}i"
        + (f"{length}{offline}i" if version >= 5 else "") + ("B" if flexible else ""))


def encode_partition(version: int, error_code: int, index: int, leader: int,
                     leader_epoch: int, replicas: Sequence[int], isr: Sequence[int],
                     offline: Sequence[int]) -> bytes:
    """One MetadataResponsePartition of response version `version`."""
    flexible = version >= FIRST_FLEXIBLE
    if max(len(replicas), len(isr), len(offline)) < _SHORT:
        extra = 1 if flexible else 0  # a compact length is the count + 1
        values = [error_code, index, leader]
        if version >= 7:
            values.append(leader_epoch)
        values.append(len(replicas) + extra)
        values.extend(replicas)
        values.append(len(isr) + extra)
        values.extend(isr)
        if version >= 5:
            values.append(len(offline) + extra)
            values.extend(offline)
        if flexible:
            values.append(0)  # no tagged fields
        return _partition_layout(version, len(replicas), len(isr), len(offline)).pack(*values)
    parts = [_INT16_INT32_INT32.pack(error_code, index, leader)]
    if version >= 7:
        parts.append(_INT32.pack(leader_epoch))
    parts.append(_int32s(replicas, flexible))
    parts.append(_int32s(isr, flexible))
    if version >= 5:
        parts.append(_int32s(offline, flexible))
    if flexible:
        parts.append(_EMPTY_TAGS)
    return b"".join(parts)


def encode_topic(version: int, error_code: int, name: str, topic_id: uuid.UUID,
                 is_internal: bool, partitions: Iterable[bytes], partition_count: int,
                 authorized_operations: int) -> bytes:
    """One MetadataResponseTopic around its partitions' encodings (`encode_partition`)."""
    flexible = version >= FIRST_FLEXIBLE
    encoded_name = name.encode()
    if flexible:
        name_part = _length(len(encoded_name), True) + encoded_name
    else:
        name_part = _INT16.pack(len(encoded_name)) + encoded_name
    parts = [_INT16.pack(error_code), name_part]
    if version >= 10:
        parts.append(topic_id.bytes)
    if version >= 1:
        parts.append(b"\x01" if is_internal else b"\x00")
    parts.append(_length(partition_count, flexible))
    parts.extend(partitions)
    if version >= 8:
        parts.append(_INT32.pack(authorized_operations))
    if flexible:
        parts.append(_EMPTY_TAGS)
    return b"".join(parts)
