"""In-process fuzz of request decoding: every API and version a listener serves, from real
requests mutated (bit flips, cuts, splices, lying lengths and sizes, random bodies).

Property: the listener's own path (size check, header, header tags, decode_request) either
gives a request or raises what the listener turns into a closed connection; never another
exception, never more than a bounded time or memory. Memory includes reservations that were
never touched: kio reserved an array's claimed count before reading it, and VmPeak (virtual
size) shows a 16 GiB reservation that overcommit let through, where RSS would not.
"""

from __future__ import annotations

import random
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from pykraft.errors import InvalidRequest
from pykraft.protocol.api import ApiKey
from pykraft.protocol.framing import (
    decode_response,
    encode_response,
    is_flexible,
    parse_request_header,
    response_type,
    skip_header_tags,
)
from pykraft.testing.fuzz import (
    BROKER_LISTENER_APIS,
    CONTROLLER_LISTENER_APIS,
    DECODE_ERRORS,
    build_entity,
    case_rng,
    decode_like_listener,
    fresh_seed,
    mutate,
    seed_frames,
)
from tests.fuzz.runs import Rate, Run, rss_kib, run_for

CASE_SECONDS_MAX = 1.0  # a small frame decodes in microseconds; a second is a hang
VM_PEAK_GROWTH_MAX_KIB = 1 << 20  # 1 GiB of address space, reserved or not
RSS_GROWTH_MAX_KIB = 64 << 10  # over the second half of a run
FRESH_SHARE = 0.1

LISTENERS = {"broker": BROKER_LISTENER_APIS, "controller": CONTROLLER_LISTENER_APIS}
SEEDS = {name: seed_frames(apis, random.Random(f"seeds:{name}"))
         for name, apis in LISTENERS.items()}


def _vm_peak_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmPeak:"):
            return int(line.split()[1])
    raise RuntimeError("no VmPeak")


def _body_offset(frame: bytes) -> int:
    header = parse_request_header(frame[4:])
    if is_flexible(header.api_key, header.api_version):
        header = skip_header_tags(header, frame[4:])
    return 4 + header.body_offset


@pytest.mark.parametrize("listener", sorted(LISTENERS))
def test_every_served_request_decodes_to_what_was_sent(listener: str) -> None:
    """Seeds of every served API and version (ten each, random fields) decode to the entity
    that was encoded: the length check ahead of kio refuses nothing a client may send."""
    apis = LISTENERS[listener]
    seeds = seed_frames(apis, random.Random(f"round-trip:{listener}"), per_version=10)
    served = {(key, version) for key, (low, high) in apis.items()
              for version in range(low, high + 1)}
    assert {(seed.api_key, seed.api_version) for seed in seeds} == served
    for seed in seeds:
        decoded = decode_like_listener(seed.frame, apis)
        assert decoded is not None
        assert decoded[1] == seed.entity, (seed.api_key, seed.api_version)


# OffsetFetch v9 whose topics (a compact array) claim 2^32 - 2 entries in 40 bytes: kio
# reserved 32 GiB for them, and the failed reservation aborted the node (fuzz case 1483)
OFFSET_FETCH_HUGE_TOPICS = bytes.fromhex(
    "0000003a000900096609c1d7ffff00020966757a7a2d74786e0278000003e8ffffffff0f7a2d6f746865"
    "7201000c66757a7a2d7461726765740100000100")


def test_a_huge_array_claim_is_refused_before_it_is_reserved() -> None:
    before = _vm_peak_kib()
    with pytest.raises(InvalidRequest, match="an array of 4294967294"):
        decode_like_listener(OFFSET_FETCH_HUGE_TOPICS, BROKER_LISTENER_APIS)
    assert _vm_peak_kib() - before < VM_PEAK_GROWTH_MAX_KIB


# BrokerRegistration v1 whose listeners (a non-nullable compact array) are null: kio gave the
# handler None, which it iterated (TypeError, connection closed with a traceback; live fuzz
# case 265). Kafka refuses it: "non-nullable field listeners was serialized as null".
BROKER_REGISTRATION_NULL_LISTENERS = bytes.fromhex(
    "0000009f003e000128a68c1e0000004adf8e650966757a7a2d74786effffffff0f0000000000000000000000"
    "0000000000030c66757a7a2d7461726765740966757a7a2d74786e03e8000300135f5f636f6e73756d6572"
    "5f6f666673657473135f5f636f6e73756d65725f6f6666736574730002630c00040103e87fff000c66757a"
    "7a2d74617267657400028000000c66757a7a2d74617267657492b1000200000100")


def test_null_in_a_non_nullable_field_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="null in a non-nullable field"):
        decode_like_listener(BROKER_REGISTRATION_NULL_LISTENERS, CONTROLLER_LISTENER_APIS)


LIES = (struct.pack(">i", 2**31 - 1), b"\xff\xff\xff\xff\x0f", struct.pack(">h", 2**15 - 1))


@pytest.mark.parametrize("listener", sorted(LISTENERS))
def test_every_length_field_lying_fails_fast(listener: str) -> None:
    """Each served request with a huge length written at every byte of its body, as an
    int32, an int16 and a 5-byte varint: refused or decoded, quickly, reserving nothing."""
    apis = LISTENERS[listener]
    seeds = {(seed.api_key, seed.api_version): seed for seed in SEEDS[listener]}
    before = _vm_peak_kib()
    cases = 0
    for seed in seeds.values():
        start = _body_offset(seed.frame)
        for position in range(start, len(seed.frame)):
            for lie in LIES:
                body = bytearray(seed.frame[4:])
                at = position - 4
                body[at:at + len(lie)] = lie
                frame = struct.pack(">i", len(body)) + bytes(body)
                began = time.perf_counter()
                try:
                    decode_like_listener(frame, apis)
                except DECODE_ERRORS:
                    pass
                assert time.perf_counter() - began < CASE_SECONDS_MAX, frame.hex()
                cases += 1
    assert cases > 1000
    assert _vm_peak_kib() - before < VM_PEAK_GROWTH_MAX_KIB


def _fuzz(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    names = sorted(LISTENERS)
    rate = Rate(run, capsys)
    vm_before = _vm_peak_kib()
    rss_half: int | None = None
    done = 0
    for index in run.indexes:
        rng = case_rng(run.seed, run.layer, index)
        listener = rng.choice(names)
        # now and then a new random request mutated, for values no fixed seed has
        seeds = ([fresh_seed(LISTENERS[listener], rng)] if rng.random() < FRESH_SHARE
                 else SEEDS[listener])
        seed, kind, frame = mutate(rng, seeds)
        began = time.perf_counter()
        try:
            decode_like_listener(frame, LISTENERS[listener])
        except DECODE_ERRORS:
            pass
        except BaseException as failure:
            failure.add_note(f"case {index}: {kind} of api {seed.api_key} "
                             f"v{seed.api_version} on the {listener} listener, "
                             f"frame {frame.hex()}")
            failure.add_note(run.replay(index))
            raise
        elapsed = time.perf_counter() - began
        assert elapsed < CASE_SECONDS_MAX, (
            f"case {index} took {elapsed:.2f} s: frame {frame.hex()}\n{run.replay(index)}")
        done += 1
        if done == run.count // 2:
            rss_half = rss_kib()
    rss_end = rss_kib()
    rate.report(done, f", RSS {rss_half} -> {rss_end} KiB")
    assert _vm_peak_kib() - vm_before < VM_PEAK_GROWTH_MAX_KIB
    if rss_half is not None:
        assert rss_end - rss_half < RSS_GROWTH_MAX_KIB


def test_decode_fuzz(capsys: pytest.CaptureFixture[str]) -> None:
    _fuzz(run_for("decode", "tests/fuzz/test_decode.py::test_decode_fuzz",
                  ci_cases=5_000, slow=False), capsys)


@pytest.mark.slow
@pytest.mark.timeout(3 * 3600)
def test_decode_fuzz_long(capsys: pytest.CaptureFixture[str]) -> None:
    _fuzz(run_for("decode", "tests/fuzz/test_decode.py::test_decode_fuzz_long",
                  ci_cases=0, slow=True), capsys)


# -- responses: what a node decodes of its peers' answers (Raft, replica fetcher, the
# controller channel), as hostile as any request; their callers close on any exception

ALL_APIS = {**BROKER_LISTENER_APIS, **CONTROLLER_LISTENER_APIS}


def _random_responses(rng: random.Random, per_version: int) -> list[tuple[int, int, Any, bytes]]:
    out = []
    for api_key, (low, high) in sorted(ALL_APIS.items()):
        for version in range(low, high + 1):
            for _ in range(per_version):
                entity = build_entity(response_type(api_key, version), rng)
                out.append((api_key, version, entity, encode_response(7, entity)[4:]))
    return out


def test_every_served_response_decodes_to_what_was_sent() -> None:
    for api_key, version, entity, frame in _random_responses(random.Random("responses"), 10):
        correlation_id, decoded = decode_response(api_key, version, frame)
        assert (correlation_id, decoded) == (7, entity), (api_key, version)


def test_every_length_field_of_a_response_lying_fails_fast() -> None:
    before = _vm_peak_kib()
    for api_key, version, _, frame in _random_responses(random.Random("lying"), 1):
        for at in range(4, len(frame)):
            for lie in LIES:
                body = bytearray(frame)
                body[at:at + len(lie)] = lie
                began = time.perf_counter()
                try:
                    decode_response(api_key, version, bytes(body))
                except Exception:  # their callers close the connection on any exception
                    pass
                assert time.perf_counter() - began < CASE_SECONDS_MAX, body.hex()
    assert _vm_peak_kib() - before < VM_PEAK_GROWTH_MAX_KIB


def test_a_response_claiming_a_huge_array_is_refused_before_it_is_reserved() -> None:
    entity = build_entity(response_type(ApiKey.METADATA, 12), random.Random(1))
    frame = bytearray(encode_response(7, entity)[4:])
    # correlation id, header tags, throttle time: then the brokers' compact array length
    frame[9:10] = b"\xff\xff\xff\xff\x0f"
    before = _vm_peak_kib()
    with pytest.raises(InvalidRequest, match="an array of 4294967294"):
        decode_response(ApiKey.METADATA, 12, bytes(frame))
    assert _vm_peak_kib() - before < VM_PEAK_GROWTH_MAX_KIB
