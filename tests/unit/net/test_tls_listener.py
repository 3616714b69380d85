"""The listener over TLS, in process over real loopback sockets, on asyncio's loop and on
uvloop's (the node's): the principal of a client certificate reaches the handler, an untrusted
certificate is refused with OpenSSL's reason logged with the peer, and a garbage or stalled
handshake is closed within the handshake timeout, while other clients are served."""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import uvloop
from kio.schema.api_versions.v0.response import ApiVersionsResponse
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from pykraft.net.connect import ClientSecurity, open_connection
from pykraft.net.principal import KafkaPrincipal
from pykraft.net.server import Listener, RequestContext
from pykraft.net.tls import client_context, principal_mapper, server_context
from pykraft.protocol.framing import encode_request
from pykraft.testing.certs import CertificateAuthority, PemFiles


class _Recorder:
    apis: dict[int, tuple[int, int]] = {18: (3, 3)}

    def __init__(self) -> None:
        self.contexts: list[RequestContext] = []

    async def handle(self, context: RequestContext, request: Any) -> Any | None:
        self.contexts.append(context)
        return ApiVersionsResponse(error_code=ErrorCode.none, api_keys=())

    def unsupported_api_versions_response(self) -> Any:
        return ApiVersionsResponse(error_code=ErrorCode.unsupported_version, api_keys=())


_REQUEST = encode_request(18, 3, 7, "t", ApiVersionsRequest(client_software_name="t",
                                                            client_software_version="1"))


async def _round_trip(port: int, security: ClientSecurity) -> int:
    reader, writer = await open_connection("127.0.0.1", port, security)
    try:
        writer.write(_REQUEST)
        await writer.drain()
        size, correlation_id = struct.unpack(">ii", await reader.readexactly(8))
        await reader.readexactly(size - 4)
        return int(correlation_id)
    finally:
        writer.close()


class _Setup:
    def __init__(self, tmp_path: Path) -> None:
        ca = CertificateAuthority.create()
        self.node = ca.issue("node").write_pem(tmp_path / "node")
        self.alice = ca.issue("alice", organizational_unit="eng").write_pem(tmp_path / "alice")
        stranger = CertificateAuthority.create("another CA")
        self.mallory = stranger.issue("mallory").write_pem(tmp_path / "mallory")

    def server(self, **extra: str) -> dict[str, str]:
        return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.node.keystore),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.node.ca),
                **extra}

    def client(self, identity: PemFiles | None, trust: PemFiles | None = None) -> ClientSecurity:
        values = {"ssl.truststore.type": "PEM",
                  "ssl.truststore.location": str((trust or self.node).ca)}
        if identity is not None:
            values |= {"ssl.keystore.type": "PEM",
                       "ssl.keystore.location": str(identity.keystore)}
        return ClientSecurity("SSL", client_context(values.get, "SSL"))


async def _with_listener(values: dict[str, str], body: Callable[[Listener, _Recorder],
                                                                Awaitable[None]],
                         handshake_timeout_s: float = 10.0) -> None:
    recorder = _Recorder()
    listener = Listener("SSL", "127.0.0.1", 0, recorder, request_bytes_max=1 << 20,
                        on_fatal=lambda error: None, security_protocol="SSL",
                        ssl_context=server_context(values.get, "SSL"),
                        principal_mapper=principal_mapper(values.get, "SSL"),
                        tls_handshake_timeout_s=handshake_timeout_s)
    await listener.start()
    try:
        await body(listener, recorder)
    finally:
        await listener.close()


def _run(loop_name: str, scenario: Callable[[], Awaitable[None]]) -> None:
    factory = uvloop.new_event_loop if loop_name == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(asyncio.wait_for(scenario(), 30))


LOOPS = pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])


@LOOPS
def test_principal_from_the_client_certificate(loop_name: str, tmp_path: Path) -> None:
    setup = _Setup(tmp_path)
    values = setup.server(**{"ssl.client.auth": "requested",
                             "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=eng.*$/$1/U,"
                                                            "DEFAULT"})

    recorder_holder: list[_Recorder] = []

    async def capture() -> None:
        async def body(listener: Listener, recorder: _Recorder) -> None:
            recorder_holder.append(recorder)
            assert await _round_trip(listener.port, setup.client(None)) == 7
            assert await _round_trip(listener.port, setup.client(setup.alice)) == 7
        await _with_listener(values, body)

    _run(loop_name, capture)
    contexts = recorder_holder[0].contexts
    assert [c.principal for c in contexts] == [KafkaPrincipal.user("ANONYMOUS"),
                                               KafkaPrincipal.user("ALICE")]
    assert {c.security_protocol for c in contexts} == {"SSL"}


@LOOPS
def test_an_untrusted_client_certificate_is_refused_and_logged(
        loop_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    setup = _Setup(tmp_path)
    values = setup.server(**{"ssl.client.auth": "required"})

    async def scenario() -> None:
        async def body(listener: Listener, recorder: _Recorder) -> None:
            # TLS 1.3: the client learns of the refusal at its first read, not the handshake
            with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
                await _round_trip(listener.port, setup.client(setup.mallory))
            with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
                await _round_trip(listener.port, setup.client(None))
            assert await _round_trip(listener.port, setup.client(setup.alice)) == 7
            assert [str(c.principal) for c in recorder.contexts] == [
                "User:CN=alice,OU=eng,O=pykraft,C=US"]
        await _with_listener(values, body)

    with caplog.at_level(logging.INFO, logger="pykraft.net.server"):
        _run(loop_name, scenario)
    refusals = [r.getMessage() for r in caplog.records if "TLS handshake with" in r.getMessage()]
    assert any("certificate verify failed" in line.lower()
               or "CERTIFICATE_VERIFY_FAILED" in line for line in refusals), refusals
    assert any("PEER_DID_NOT_RETURN_A_CERTIFICATE" in line for line in refusals), refusals
    assert all(line.startswith("TLS handshake with 127.0.0.1:") for line in refusals)


@LOOPS
def test_a_client_that_does_not_trust_the_node_fails_its_handshake(loop_name: str,
                                                                   tmp_path: Path) -> None:
    setup = _Setup(tmp_path)

    async def scenario() -> None:
        async def body(listener: Listener, recorder: _Recorder) -> None:
            with pytest.raises(ssl.SSLCertVerificationError):
                await _round_trip(listener.port, setup.client(None, trust=setup.mallory))
        await _with_listener(setup.server(), body)

    _run(loop_name, scenario)


@LOOPS
def test_garbage_and_stalled_handshakes_are_closed(loop_name: str, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    setup = _Setup(tmp_path)

    async def scenario() -> None:
        async def body(listener: Listener, recorder: _Recorder) -> None:
            loop = asyncio.get_running_loop()
            garbage_reader, garbage = await asyncio.open_connection("127.0.0.1", listener.port)
            garbage.write(b"\x00\x00\x00\x10" + bytes(range(16)) * 4)  # a Kafka frame, no TLS
            stalled_reader, stalled = await asyncio.open_connection("127.0.0.1", listener.port)
            stalled.write(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
            started = loop.time()
            assert await asyncio.wait_for(garbage_reader.read(), 5) == b""
            assert await _round_trip(listener.port, setup.client(None)) == 7  # others served
            assert await asyncio.wait_for(stalled_reader.read(), 5) == b""
            assert loop.time() - started < 4
            for writer in (garbage, stalled):
                writer.close()
            await asyncio.sleep(0.05)
            assert listener.limits.quotas.total == 0  # nothing left counted
        await _with_listener(setup.server(), body, handshake_timeout_s=0.5)

    with caplog.at_level(logging.INFO, logger="pykraft.net.server"):
        _run(loop_name, scenario)
    lines = [r.getMessage() for r in caplog.records if "TLS handshake with" in r.getMessage()]
    assert len(lines) == 2, lines


@LOOPS
def test_the_node_checks_the_peers_host_name_unless_told_not_to(loop_name: str,
                                                                 tmp_path: Path) -> None:
    """ssl.endpoint.identification.algorithm=https (Kafka's default): a peer whose
    certificate does not name the address connected to is refused; empty: accepted."""
    ca = CertificateAuthority.create()
    elsewhere = ca.issue("node", hosts=("kafka9.example.com",)).write_pem(tmp_path / "node")
    server = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(elsewhere.keystore)}
    trust = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(elsewhere.ca)}
    checking = ClientSecurity("SSL", client_context(trust.get, "SSL"))
    lenient = ClientSecurity("SSL", client_context(
        {**trust, "ssl.endpoint.identification.algorithm": ""}.get, "SSL"))

    async def scenario() -> None:
        async def body(listener: Listener, recorder: _Recorder) -> None:
            with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
                await _round_trip(listener.port, checking)
            assert await _round_trip(listener.port, lenient) == 7
        await _with_listener(server, body)

    _run(loop_name, scenario)
