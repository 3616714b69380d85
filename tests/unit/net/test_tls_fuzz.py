"""Hostile TLS handshakes against a listener (in process, uvloop as the node runs, real
loopback sockets): garbage, a real ClientHello cut short or with bits flipped, records that
claim to be huge, and slow ones that stall. Nothing crashes, every connection ends and leaves
the quotas, the memory Python holds does not grow from the first half of the run to the
second, and a good client is served afterwards. PYKRAFT_TLS_FUZZ_CASES sets the number of
attempts (10,000 for the issue's long run; the default keeps CI quick); each case replays from
its seed."""

from __future__ import annotations

import asyncio
import gc
import os
import random
import ssl
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import uvloop
from kio.schema.api_versions.v0.response import ApiVersionsResponse
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from pykraft.net.connect import ClientSecurity, open_connection
from pykraft.net.server import Listener, RequestContext
from pykraft.net.tls import client_context, server_context
from pykraft.protocol.framing import encode_request
from pykraft.testing.certs import CertificateAuthority

CASES = int(os.environ.get("PYKRAFT_TLS_FUZZ_CASES", "1500"))
CONCURRENCY = 50
SEED = 19


class _Echo:
    apis: dict[int, tuple[int, int]] = {18: (3, 3)}

    async def handle(self, context: RequestContext, request: Any) -> Any | None:
        return ApiVersionsResponse(error_code=ErrorCode.none, api_keys=())

    def unsupported_api_versions_response(self) -> Any:
        return ApiVersionsResponse(error_code=ErrorCode.unsupported_version, api_keys=())


def _client_hello(context: ssl.SSLContext) -> bytes:
    """The first flight of a real client, made without a socket."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    sslobj = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    try:
        sslobj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def _case(index: int, hello: bytes) -> tuple[bytes, bool]:
    """(bytes to send, whether to stall after them instead of closing)."""
    rng = random.Random(f"{SEED}-{index}")
    kind = index % 5
    if kind == 0:  # garbage
        return rng.randbytes(rng.randint(1, 4096)), False
    if kind == 1:  # a real ClientHello cut short
        return hello[:rng.randint(1, len(hello) - 1)], False
    if kind == 2:  # a real ClientHello with bits flipped
        data = bytearray(hello)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data), False
    if kind == 3:  # a handshake record that claims the largest length, then junk
        return b"\x16\x03\x01" + struct.pack(">H", 0xFFFF) + rng.randbytes(512), False
    return hello[:rng.randint(0, 5)], True  # slow: a few bytes, then nothing


async def _attempt(port: int, payload: bytes, stall: bool) -> None:
    try:
        reader, writer = await open_connection("127.0.0.1", port, None)
    except OSError:
        return
    try:
        writer.write(payload)
        await writer.drain()
        if stall:  # the listener's handshake deadline ends it
            await asyncio.wait_for(reader.read(), 5)
        # else: gone at once, mid-handshake (the listener sees the end, or an alert it
        # sends finds the connection reset)
    except (OSError, TimeoutError):
        pass
    finally:
        writer.close()


async def _fuzz(tmp_path: Path) -> None:
    ca = CertificateAuthority.create()
    files = ca.issue("node").write_pem(tmp_path / "node")
    values = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(files.keystore)}
    trust = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(files.ca)}
    good = ClientSecurity("SSL", client_context(trust.get, "SSL"))
    assert good.ssl_context is not None
    hello = _client_hello(good.ssl_context)
    fatal: list[BaseException] = []
    listener = Listener("SSL", "127.0.0.1", 0, _Echo(), request_bytes_max=1 << 20,
                        on_fatal=fatal.append,
                        security_protocol="SSL",
                        ssl_context=server_context(values.get, "SSL"),
                        tls_handshake_timeout_s=0.2)
    await listener.start()
    tracemalloc.start()
    try:
        held: list[int] = []
        for start in range(0, CASES, CONCURRENCY):
            cases = [_case(i, hello) for i in range(start, min(CASES, start + CONCURRENCY))]
            await asyncio.gather(*(_attempt(listener.port, data, stall)
                                   for data, stall in cases))
            if start in (CASES // 2 // CONCURRENCY * CONCURRENCY, (CASES - 1) // CONCURRENCY
                         * CONCURRENCY):
                await _settled(listener)
                gc.collect()
                held.append(tracemalloc.get_traced_memory()[0])
        await _settled(listener)
        assert fatal == []
        assert held[-1] - held[0] < 2 * 1024 * 1024, held  # no growth from half to end
        reader, writer = await open_connection("127.0.0.1", listener.port, good)
        writer.write(encode_request(18, 3, 5, "t", ApiVersionsRequest(
            client_software_name="t", client_software_version="1")))
        await writer.drain()
        assert struct.unpack(">ii", await reader.readexactly(8))[1] == 5
        writer.close()
    finally:
        tracemalloc.stop()
        await listener.close()


async def _settled(listener: Listener) -> None:
    """Every connection so far has ended and left the quotas."""
    for _ in range(200):
        if listener.limits.quotas.total == 0 and not listener._connections:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"{listener.limits.quotas.total} connections still counted")


def test_hostile_handshakes_crash_nothing_and_leak_nothing(tmp_path: Path) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(asyncio.wait_for(_fuzz(tmp_path), 240))
