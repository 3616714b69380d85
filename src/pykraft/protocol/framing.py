"""Request/response framing: size prefix, request header v1/v2, response header v0/v1.

A request frame is `int32 size | header | body`. The request header is

    api_key int16 | api_version int16 | correlation_id int32 | client_id nullable string(int16)
    [| tagged fields]            <- header v2, for flexible versions of the API

`client_id` keeps the old int16-length encoding even in header v2. Responses are
`int32 size | correlation_id int32 [| tagged fields] | body`, with header v1 for flexible
versions — except ApiVersions, whose response header is always v0 so that a client can read
it before it knows which versions the broker speaks (KIP-511).

Bodies are encoded and decoded by kio entities, looked up lazily by (api key, version).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import read_unsigned_varint
from kio.serial.writers import write_unsigned_varint
from kio.static.primitive import uvarint

from pykraft.errors import InvalidRequest
from pykraft.protocol.bounds import check_lengths

API_VERSIONS_KEY: Final = 18
_HEADER_FIXED: Final = struct.Struct(">hhih")
_SIZE: Final = struct.Struct(">i")
_CORRELATION: Final = struct.Struct(">ii")


class FrameError(ValueError):
    """The frame cannot be understood; the connection that sent it is closed."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the body starts in the frame


def parse_request_header(frame: bytes | memoryview) -> RequestHeader:
    """Read the fixed part of a request header; tagged fields are skipped for flexible APIs.

    Whether the header has tagged fields depends on the API version, so callers pass the
    result to `skip_header_tags` once they know the version is flexible.
    """
    if len(frame) < _HEADER_FIXED.size:
        raise FrameError(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, client_id_length = _HEADER_FIXED.unpack_from(frame)
    offset = _HEADER_FIXED.size
    client_id: str | None = None
    if client_id_length >= 0:
        end = offset + client_id_length
        if end > len(frame):
            raise FrameError("client_id runs past the end of the frame")
        try:
            client_id = bytes(frame[offset:end]).decode("utf-8")
        except UnicodeDecodeError as error:
            raise FrameError("client_id is not UTF-8") from error
        offset = end
    elif client_id_length != -1:
        raise FrameError(f"client_id length {client_id_length}")
    return RequestHeader(api_key, api_version, correlation_id, client_id, offset)


def skip_header_tags(header: RequestHeader, frame: bytes | memoryview) -> RequestHeader:
    """Move past the header's tagged fields (request header v2)."""
    offset = header.body_offset
    try:
        count, size = read_unsigned_varint(frame, offset)
        offset += size
        for _ in range(count):
            _tag, size = read_unsigned_varint(frame, offset)
            offset += size
            length, size = read_unsigned_varint(frame, offset)
            offset += size + length
    except Exception as error:
        raise FrameError(f"bad request header tagged fields: {error}") from error
    if offset > len(frame):
        raise FrameError("request header tagged fields run past the end of the frame")
    return RequestHeader(
        header.api_key, header.api_version, header.correlation_id, header.client_id, offset
    )


@cache
def request_type(api_key: int, api_version: int) -> Any:
    return load_request_schema(api_key, api_version)


@cache
def response_type(api_key: int, api_version: int) -> Any:
    return load_response_schema(api_key, api_version)


_READERS: dict[type, Any] = {}
_WRITERS: dict[type, Any] = {}


def _reader(entity_type: type) -> Any:
    reader = _READERS.get(entity_type)
    if reader is None:
        reader = _READERS[entity_type] = entity_reader(entity_type)
    return reader


def _writer(entity_type: type) -> Any:
    writer = _WRITERS.get(entity_type)
    if writer is None:
        writer = _WRITERS[entity_type] = entity_writer(entity_type)
    return writer


def compact_length(count: int) -> bytes:
    """A compact array's (or string's) length as a flexible version writes it: count + 1,
    an unsigned varint (one byte below 127 elements)."""
    if count < 0x7F:
        return bytes((count + 1,))
    out = io.BytesIO()
    write_unsigned_varint(out, uvarint(count + 1))
    return out.getvalue()


def is_flexible(api_key: int, api_version: int) -> bool:
    return bool(request_type(api_key, api_version).__flexible__)


def decode_request(header: RequestHeader, frame: bytes | memoryview) -> Any:
    """Decode the body of a request whose header was parsed (and tags skipped if flexible)."""
    entity_type = request_type(header.api_key, header.api_version)
    # before kio sees it: kio reserves an array's claimed count up front, and a failed
    # reservation aborts the process (protocol.bounds)
    check_lengths(entity_type, frame, header.body_offset)
    try:
        entity, size = _reader(entity_type)(frame, header.body_offset)
    except Exception as error:
        raise InvalidRequest(
            f"cannot decode {entity_type.__name__} v{header.api_version}: {error}"
        ) from error
    # Bytes after the body are ignored, as Kafka's request parser does: librdkafka 2.x, for
    # one, sends three extra bytes after a Metadata v12 request for all topics.
    return entity


@dataclass(frozen=True, slots=True)
class EncodedBody:
    """A body encoded ahead of time (what `encode_entity` gives for the whole response or
    request), sent as it is: a Metadata response spliced from per-topic encodings, an
    AlterPartition request written from a leader's proposals (`flexible_header` matters
    for a response only: a request's header follows its API key and version)."""

    data: bytes
    flexible_header: bool


def encode_entity(entity: Any) -> bytes:
    """The wire encoding of one kio entity (a response body, or a part of one)."""
    buffer = io.BytesIO()
    _writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def encode_response(correlation_id: int, response: Any) -> bytes:
    """Encode a kio response entity (or an EncodedBody) with its header and size prefix."""
    if isinstance(response, EncodedBody):
        header = _SIZE.pack(correlation_id) + (b"\0" if response.flexible_header else b"")
        return _SIZE.pack(len(header) + len(response.data)) + header + response.data
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    flexible_header = response.__flexible__ and response.__api_key__ != API_VERSIONS_KEY
    buffer.write(_SIZE.pack(correlation_id))
    if flexible_header:
        buffer.write(b"\0")  # no tagged fields in the response header
    _writer(type(response))(buffer, response)
    data = buffer.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    del data
    return buffer.getvalue()


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, request: Any
) -> bytes:
    """Encode a request (a kio entity or an EncodedBody) with header and size prefix (used
    by our own clients and tests)."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    encoded_client = None if client_id is None else client_id.encode()
    buffer.write(
        _HEADER_FIXED.pack(
            api_key,
            api_version,
            correlation_id,
            -1 if encoded_client is None else len(encoded_client),
        )
    )
    if encoded_client:
        buffer.write(encoded_client)
    if is_flexible(api_key, api_version):
        buffer.write(b"\0")
    if isinstance(request, EncodedBody):
        buffer.write(request.data)
    else:
        _writer(type(request))(buffer, request)
    data = buffer.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    del data
    return buffer.getvalue()


def decode_response(api_key: int, api_version: int, frame: bytes | memoryview) -> tuple[int, Any]:
    """Decode a response frame (without its size prefix): (correlation_id, entity)."""
    (correlation_id,) = _SIZE.unpack_from(frame)
    offset = 4
    entity_type = response_type(api_key, api_version)
    if entity_type.__flexible__ and api_key != API_VERSIONS_KEY:
        header = skip_header_tags(RequestHeader(0, 0, 0, None, offset), frame)
        offset = header.body_offset
    check_lengths(entity_type, frame, offset)  # a peer's answer may be hostile too
    entity, _ = _reader(entity_type)(frame, offset)
    return correlation_id, entity
