"""Request/response framing: header versions, round trips, and garbage rejected cleanly."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from pykraft.errors import InvalidRequest
from pykraft.protocol.api import BROKER_APIS
from pykraft.protocol.entities import NO_THROTTLE, make, response_module
from pykraft.protocol.framing import (
    FrameError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    is_flexible,
    parse_request_header,
    request_type,
    response_type,
    skip_header_tags,
)


def _frame(data: bytes) -> bytes:
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    return data[4:]


def test_flexible_request_round_trips_with_header_v2() -> None:
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="orders"),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    frame = _frame(encode_request(3, 12, 77, "client-a", request))
    header = parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (3, 12, 77)
    assert header.client_id == "client-a"
    header = skip_header_tags(header, frame)
    assert decode_request(header, frame) == request


def test_null_client_id_is_accepted() -> None:
    frame = _frame(encode_request(18, 3, 5, None, ApiVersionsRequest(
        client_software_name="x", client_software_version="1")))
    header = parse_request_header(frame)
    assert header.client_id is None


def test_api_versions_response_header_has_no_tagged_fields() -> None:
    module = response_module(18, 3)
    response = make(module.ApiVersionsResponse, error_code=0, api_keys=(),
                    throttle_time=NO_THROTTLE)
    data = _frame(encode_response(9, response))
    # correlation id, then straight into the body: error_code int16 = 0
    assert data[:4] == struct.pack(">i", 9)
    assert data[4:6] == b"\x00\x00"
    correlation_id, decoded = decode_response(18, 3, data)
    assert correlation_id == 9 and decoded == response


def test_flexible_response_header_has_tagged_fields() -> None:
    module = response_module(3, 12)
    response = make(module.MetadataResponse, throttle_time=NO_THROTTLE, brokers=(),
                    cluster_id="c", controller_id=1, topics=())
    data = _frame(encode_response(4, response))
    assert data[4] == 0  # empty tag buffer of response header v1
    assert decode_response(3, 12, data) == (4, response)


def test_trailing_bytes_are_ignored_as_kafka_does() -> None:
    """librdkafka 2.16 sends 3 bytes after a Metadata v12 body for all topics (captured)."""
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    header = skip_header_tags(parse_request_header(frame), frame)
    request = decode_request(header, frame)
    assert request.topics is None and request.allow_auto_topic_creation is False


def test_truncated_body_is_invalid() -> None:
    frame = _frame(encode_request(3, 12, 1, "c", MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="orders"),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)))
    header = skip_header_tags(parse_request_header(frame), frame)
    with pytest.raises(InvalidRequest):
        decode_request(header, frame[:-6])


def test_truncated_header_is_a_frame_error() -> None:
    with pytest.raises(FrameError):
        parse_request_header(b"\x00\x03\x00")
    with pytest.raises(FrameError):
        parse_request_header(struct.pack(">hhih", 3, 1, 1, 50) + b"short")


def test_every_advertised_version_has_kio_entities() -> None:
    for api_key, (low, high) in BROKER_APIS.items():
        for version in range(low, high + 1):
            assert request_type(api_key, version).__version__ == version
            assert response_type(api_key, version).__version__ == version
            assert is_flexible(api_key, version) in (True, False)


@given(st.binary(max_size=200))
def test_garbage_never_escapes_as_anything_but_frame_or_request_errors(data: bytes) -> None:
    try:
        header = parse_request_header(data)
        if (header.api_key, header.api_version) == (3, 12):
            header = skip_header_tags(header, data)
            decode_request(header, data)
    except (FrameError, InvalidRequest):
        pass


def test_api_versions_answers_every_version() -> None:
    """ApiVersions v0 (aiokafka's first request) has no feature fields; v3+ has them."""
    from kio.schema.errors import ErrorCode

    from pykraft.broker.apis import api_versions_response
    from pykraft.metadata.image import MetadataImage

    image = MetadataImage.EMPTY
    for version in range(0, 5):
        response = api_versions_response(BROKER_APIS, image, version, ErrorCode.none)
        data = _frame(encode_response(1, response))
        assert decode_response(18, version, data)[1] == response
        assert {k.api_key for k in response.api_keys} == set(BROKER_APIS)
