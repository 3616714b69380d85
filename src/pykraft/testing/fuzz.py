"""Generators and properties for the fuzzers in tests/fuzz.

Every case is drawn from its own `random.Random` seeded by (run seed, layer, case index), so a
failure replays from those three numbers alone, without running the cases before it (the
fuzz tests print the command). Plain seeded generation rather than hypothesis here: a million
cases on two cores need microseconds a case, and hypothesis spends milliseconds.

Seeds are real requests: one kio entity per (api key, version) that a listener serves, built
from the entity's own field types (`build_entity`), with names from a small pool so that many
of them reach a handler. Mutations (`mutate`) then flip bits, cut, splice and lie in size and
length fields, as a hostile or broken client would. Record batches (`batch_case`) are valid
ones of every codec, the same mutated, and garbage records under a valid CRC.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
import struct
import types
import typing
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

import crc32c
from kio.index import UnknownAPIKey, UnknownEntity
from kio.schema.errors import ErrorCode

from pykraft.broker.group_apis import GROUP_APIS
from pykraft.broker.partition_apis import PARTITION_APIS
from pykraft.broker.records_apis import RECORDS_APIS
from pykraft.broker.transaction_apis import TRANSACTION_APIS
from pykraft.errors import InvalidRequest
from pykraft.protocol.api import (
    ACL_APIS,
    BROKER_APIS,
    CONTROLLER_APIS,
    CREDENTIAL_APIS,
    supports,
)
from pykraft.protocol.framing import (
    FrameError,
    RequestHeader,
    decode_request,
    encode_request,
    is_flexible,
    parse_request_header,
    request_type,
    skip_header_tags,
)
from pykraft.raft.codec import RAFT_APIS
from pykraft.records.batch import CRC_FROM
from pykraft.records.codecs import compress
from pykraft.records.record import build_batch
from pykraft.server.lifecycle_apis import LIFECYCLE_APIS
from pykraft.testing.batches import frame_batch, raw_record, varint

__all__ = [
    "BROKER_LISTENER_APIS",
    "CONTROLLER_LISTENER_APIS",
    "DECODE_ERRORS",
    "Seed",
    "batch_case",
    "build_entity",
    "case_rng",
    "decode_like_listener",
    "fresh_seed",
    "mutate",
    "seed_frames",
]

# What each listener of a combined node serves (the node's ApiVersions answers; the live
# fuzz test checks that they agree, so an API added later is fuzzed or the test fails).
BROKER_LISTENER_APIS: Final[Mapping[int, tuple[int, int]]] = {
    **BROKER_APIS, **GROUP_APIS, **TRANSACTION_APIS, **RECORDS_APIS, **PARTITION_APIS,
    **ACL_APIS, **CREDENTIAL_APIS,
}
CONTROLLER_LISTENER_APIS: Final[Mapping[int, tuple[int, int]]] = {
    **CONTROLLER_APIS, **LIFECYCLE_APIS, **RAFT_APIS, **ACL_APIS, **CREDENTIAL_APIS,
}

# What the listener (net.server) turns into "close this connection": anything else escaping
# the decoder would be an unexpected error, logged with a traceback.
DECODE_ERRORS: Final = (FrameError, InvalidRequest, UnknownAPIKey, UnknownEntity)

TOPIC: Final = "fuzz-target"
NAMES: Final = (TOPIC, TOPIC, "fuzz-group", "fuzz-txn", "", "x", "__consumer_offsets",
                "fuzz-other")
_INT_RANGES: Final = {"int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1),
                      "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
                      "uint16": (0, 2**16 - 1)}
_SMALL_INTS: Final = (0, 0, 1, 1, -1, 2, 3, 1000)
_MILLIS: Final = (0, 1, 10, 100, 1000, 30_000)
_ERROR_CODES: Final = tuple(ErrorCode)
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def case_rng(seed: int, layer: str, index: int) -> random.Random:
    """The generator of one case: independent of every other case of the run."""
    return random.Random(f"{seed}:{layer}:{index}")


# -- seed requests ---------------------------------------------------------------------------


def _integer(rng: random.Random, kafka_type: str) -> int:
    low, high = _INT_RANGES[kafka_type]
    roll = rng.random()
    if roll < 0.8:
        return max(low, min(high, rng.choice(_SMALL_INTS)))
    if roll < 0.9:
        return rng.choice((low, high))
    return rng.randint(low, high)


def _valid_records(rng: random.Random) -> bytes:
    count = rng.randint(1, 4)
    records = [(b"k%d" % i, b"v" * rng.randint(0, 40), (), 1_700_000_000_000 + i)
               for i in range(count)]
    return build_batch(records, compression=rng.choice((0, 0, 1, 2, 3, 4)))


def _primitive(rng: random.Random, kafka_type: str) -> Any:
    if kafka_type in _INT_RANGES:
        return _integer(rng, kafka_type)
    if kafka_type == "bool":
        return rng.random() < 0.5
    if kafka_type == "float64":  # client quota values (KIP-546): edge values too
        return rng.choice((1.0, 1024.0, 0.5, 0.0, -1.0, 1e300, float("inf")))  # NaN != NaN
    if kafka_type == "string":
        return rng.choice(NAMES) if rng.random() < 0.9 else f"n{rng.randint(0, 9)}"
    if kafka_type == "bytes":
        return rng.randbytes(rng.randint(0, 16))
    if kafka_type == "records":
        return _valid_records(rng) if rng.random() < 0.8 else rng.randbytes(rng.randint(0, 80))
    if kafka_type == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))  # the zero uuid is None, drawn above
    if kafka_type == "datetime_i64":
        return _EPOCH + datetime.timedelta(milliseconds=rng.randint(0, 2**41))
    if kafka_type == "error_code":
        return rng.choice(_ERROR_CODES)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        if rng.random() < 0.1:  # none, or longer than anything waits
            return datetime.timedelta(milliseconds=rng.choice((-1, 2**31 - 1)))
        return datetime.timedelta(milliseconds=rng.choice(_MILLIS))
    raise TypeError(f"no generator for kafka type {kafka_type!r}")


def _value(rng: random.Random, hint: Any, kafka_type: str | None, depth: int) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(options) < len(typing.get_args(hint)) and rng.random() < 0.15:
            return None
        return _value(rng, options[0], kafka_type, depth)
    if origin is tuple:
        (item, _) = typing.get_args(hint)
        length = rng.choice((0, 1, 1, 1, 2, 3)) if depth < 4 else 0
        return tuple(_value(rng, item, kafka_type, depth + 1) for _ in range(length))
    if dataclasses.is_dataclass(hint):
        return build_entity(typing.cast(type, hint), rng, depth + 1)
    if kafka_type is None:
        raise TypeError(f"no generator for field type {hint!r}")
    return _primitive(rng, kafka_type)


@cache
def _fields(entity_type: type) -> tuple[tuple[str, Any, str | None], ...]:
    hints = typing.get_type_hints(entity_type)
    return tuple((field.name, hints[field.name], field.metadata.get("kafka_type"))
                 for field in dataclasses.fields(entity_type) if field.init)


def build_entity(entity_type: type, rng: random.Random, depth: int = 0) -> Any:
    """A random instance of a kio entity, every field of its declared wire type."""
    return entity_type(**{name: _value(rng, hint, kafka_type, depth)
                          for name, hint, kafka_type in _fields(entity_type)})


@dataclass(frozen=True, slots=True)
class Seed:
    api_key: int
    api_version: int
    entity: Any
    frame: bytes  # with its size prefix, as on the wire


def fresh_seed(apis: Mapping[int, tuple[int, int]], rng: random.Random) -> Seed:
    """A new random request of any served API and version: most of them decode, and reach
    the handler with values no fixed seed has."""
    api_key = rng.choice(sorted(apis))
    low, high = apis[api_key]
    version = rng.randint(low, high)
    entity = build_entity(request_type(api_key, version), rng)
    frame = encode_request(api_key, version, rng.randint(0, 2**31 - 1),
                           rng.choice(("fuzz", None, "")), entity)
    return Seed(api_key, version, entity, frame)


def seed_frames(apis: Mapping[int, tuple[int, int]], rng: random.Random,
                per_version: int = 3) -> list[Seed]:
    """`per_version` real requests of every (api key, version) in `apis`."""
    seeds = []
    for api_key, (low, high) in sorted(apis.items()):
        for version in range(low, high + 1):
            entity_type = request_type(api_key, version)
            for _ in range(per_version):
                entity = build_entity(entity_type, rng)
                frame = encode_request(api_key, version, rng.randint(0, 2**31 - 1),
                                       rng.choice(("fuzz", None, "")), entity)
                seeds.append(Seed(api_key, version, entity, frame))
    return seeds


# -- mutation ---------------------------------------------------------------------------------

_LIES: Final = (
    struct.pack(">i", 2**31 - 1), struct.pack(">i", -1), struct.pack(">i", -2),
    struct.pack(">i", 2**30), struct.pack(">h", 2**15 - 1), struct.pack(">h", -1),
    b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x07", b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
    b"\x00", b"\xff",
)


def _sized(body: bytes | bytearray) -> bytes:
    return struct.pack(">i", len(body)) + bytes(body)


def _flip(rng: random.Random, body: bytearray) -> bytearray:
    for _ in range(rng.randint(1, 8)):
        body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)
    return body


def _lie(rng: random.Random, body: bytearray) -> bytearray:
    """A length or count field claims far more than is there (or a negative amount)."""
    lie = rng.choice(_LIES)
    at = rng.randrange(8, max(9, len(body)))  # after api key, version and correlation id
    if rng.random() < 0.5:
        body[at:at + len(lie)] = lie
    else:
        body[at:at] = lie
    return body


def _splice(rng: random.Random, body: bytearray, other: bytes) -> bytearray:
    at = rng.randrange(len(body) + 1)
    if rng.random() < 0.5:
        return body[:at] + bytearray(rng.randbytes(rng.randint(1, 40))) + body[at:]
    return body[:at] + bytearray(other[rng.randrange(4, len(other)):])


def _random_body(rng: random.Random, seed: Seed) -> bytearray:
    """A valid header of a served API followed by random bytes."""
    header = struct.pack(">hhih", seed.api_key, seed.api_version, rng.randint(0, 2**31 - 1), -1)
    tags = b"\x00" if is_flexible(seed.api_key, seed.api_version) else b""
    return bytearray(header + tags + rng.randbytes(rng.randint(0, 200)))


MUTATIONS: Final = ("seed", "flip", "flip", "lie", "lie", "truncate", "splice", "random",
                    "header", "size")


def mutate(rng: random.Random, seeds: Sequence[Seed]) -> tuple[Seed, str, bytes]:
    """(the seed, the mutation, the mutated frame with a size prefix): usually the prefix is
    the true size; the "size" mutation makes it lie."""
    seed = rng.choice(seeds)
    kind = rng.choice(MUTATIONS)
    body = bytearray(seed.frame[4:])
    if kind == "flip":
        body = _flip(rng, body)
    elif kind == "lie":
        body = _lie(rng, body)
    elif kind == "truncate":
        del body[rng.randrange(len(body)):]
    elif kind == "splice":
        body = _splice(rng, body, rng.choice(seeds).frame)
    elif kind == "random":
        body = _random_body(rng, seed)
    elif kind == "header":  # api key and version of anything, served or not
        struct.pack_into(">hh", body, 0, rng.randint(-2, 80), rng.randint(-1, 20))
    elif kind == "size":
        size = rng.choice((-1, 0, 2**31 - 1, 200 * 2**20, len(body) + 10, len(body) - 1))
        return seed, kind, struct.pack(">i", size) + bytes(body)
    return seed, kind, _sized(body)


# -- the decoding property ---------------------------------------------------------------------


def decode_like_listener(
    data: bytes, apis: Mapping[int, tuple[int, int]], request_bytes_max: int = 100 * 2**20
) -> tuple[RequestHeader, Any] | None:
    """What a listener does with these bytes, up to its handler: (header, request), or None
    when it would wait for more bytes; DECODE_ERRORS when it closes the connection. An
    unsupported API is a FrameError here (the listener answers only ApiVersions of an
    unsupported version, with its own v0 body, without decoding it)."""
    if len(data) < 4:
        return None
    (size,) = struct.unpack_from(">i", data)
    if size <= 0 or size > request_bytes_max:
        raise FrameError(f"request of {size} bytes")
    if len(data) - 4 < size:
        return None
    frame = memoryview(data)[4:4 + size]
    header = parse_request_header(frame)
    if not supports(dict(apis), header.api_key, header.api_version):
        raise FrameError(f"unsupported API {header.api_key} v{header.api_version}")
    if is_flexible(header.api_key, header.api_version):
        header = skip_header_tags(header, frame)
    return header, decode_request(header, frame)


# -- record batches ----------------------------------------------------------------------------

_CODECS: Final = (0, 1, 2, 3, 4)
BATCH_KINDS: Final = ("valid", "flip", "flip_recrc", "records_garbage", "records_lie",
                      "codec_garbage", "truncate", "two_batches")


def _recrc(batch: bytearray) -> bytearray:
    """Make the CRC right again after a mutation, so that only the record check can refuse."""
    if len(batch) >= CRC_FROM:
        struct.pack_into(">I", batch, CRC_FROM - 4, crc32c.crc32c(bytes(batch[CRC_FROM:])))
    return batch


def _garbage_records(rng: random.Random, count: int) -> bytes:
    """A records section of `count` records, some lying in their lengths or deltas."""
    out = bytearray()
    for index in range(count):
        roll = rng.random()
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 8))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 30))
        headers = [(rng.randbytes(rng.randint(0, 4)), None if rng.random() < 0.3
                    else rng.randbytes(rng.randint(0, 4))) for _ in range(rng.randint(0, 2))]
        if roll < 0.6:
            out += raw_record(index, key, value, headers=headers,
                              timestamp_delta=rng.choice((0, 1, -1, 2**40)))
        elif roll < 0.75:
            out += raw_record(rng.choice((index + 1, -1, 2**31)), key, value, headers=headers)
        elif roll < 0.9:
            out += raw_record(index, key, value, headers=headers,
                              length_adjust=rng.choice((-3, -1, 1, 5, 2**31)))
        else:
            out += varint(rng.randint(0, 40)) + rng.randbytes(rng.randint(0, 40))
    return bytes(out)


def batch_case(rng: random.Random, now_ms: int) -> tuple[str, int, bytearray]:
    """(kind, codec, bytes) of one produced batch: valid ones of every codec, mutated ones
    and garbage under a valid CRC."""
    kind = rng.choice(BATCH_KINDS)
    codec = rng.choice(_CODECS)
    count = rng.randint(1, 5)
    records = [(None if rng.random() < 0.2 else b"k%d" % i,
                None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 60)),
                tuple(("h", rng.randbytes(2)) for _ in range(rng.randint(0, 1))),
                now_ms + rng.randint(-1000, 1000)) for i in range(count)]
    valid = bytearray(build_batch(records, compression=codec))
    if kind == "valid":
        return kind, codec, valid
    if kind == "flip":
        return kind, codec, _flip(rng, valid)
    if kind == "flip_recrc":
        for _ in range(rng.randint(1, 4)):
            valid[rng.randrange(CRC_FROM, len(valid))] ^= 1 << rng.randrange(8)
        return kind, codec, _recrc(valid)
    if kind == "records_garbage":
        section = _garbage_records(rng, count)
        return kind, codec, bytearray(frame_batch(section, count, codec=codec))
    if kind == "records_lie":
        section = _garbage_records(rng, count)
        claimed = rng.choice((count + 1, count - 1, 0, -1, 2**31 - 1))
        return kind, codec, bytearray(frame_batch(
            section, count, codec=codec, last_offset_delta=rng.choice((count - 1, claimed))))
    if kind == "codec_garbage":
        if codec == 0:
            codec = rng.choice(_CODECS[1:])
        payload = rng.randbytes(rng.randint(0, 100))
        if rng.random() < 0.5:  # a valid stream whose content is garbage records
            payload = compress(codec, _garbage_records(rng, count) + rng.randbytes(3))
        return kind, codec, bytearray(frame_batch(payload, count, codec=codec,
                                                  compress_section=False))
    if kind == "truncate":
        del valid[rng.randrange(len(valid)):]
        return kind, codec, valid
    other = bytearray(build_batch(records[:1], compression=rng.choice(_CODECS)))
    return kind, codec, valid + other

