"""The listener under its limits, in process over real loopback sockets: request memory is
reserved before a body is read and released when the handler is done, connections over the
quotas are closed at accept, idle ones after connections.max.idle.ms."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from pykraft.net import server as server_module
from pykraft.net.limits import MemoryPool, quotas_for
from pykraft.net.server import READ_AHEAD_BYTES, Listener, NetworkLimits, RequestContext
from pykraft.protocol.framing import encode_request

MIB = 1024 * 1024


class _Echo:
    """Answers ApiVersions v3 (with a v0 body: enough for these tests); `gate`, when set,
    holds every handler until it is set."""

    apis: dict[int, tuple[int, int]] = {18: (3, 3)}

    def __init__(self) -> None:
        self.handled = 0
        self.gate: asyncio.Event | None = None

    async def handle(self, context: RequestContext, request: Any) -> Any | None:
        if self.gate is not None:
            await self.gate.wait()
        self.handled += 1
        return ApiVersionsResponse(error_code=ErrorCode.none, api_keys=())

    def unsupported_api_versions_response(self) -> Any:
        return ApiVersionsResponse(error_code=ErrorCode.unsupported_version, api_keys=())


def _frame(size: int | None = None, correlation_id: int = 1) -> bytes:
    """An ApiVersions request, padded to `size` bytes (trailing bytes are ignored)."""
    body = encode_request(18, 3, correlation_id, "t", ApiVersionsRequest(
        client_software_name="t", client_software_version="1"))[4:]
    if size is not None:
        body += bytes(size - len(body))
    return struct.pack(">i", len(body)) + body


async def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


class _Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        # a muted connection is not drained: do not wait for all of it
        try:
            await asyncio.wait_for(self.writer.drain(), 0.2)
        except TimeoutError:
            pass

    async def answer(self, timeout_s: float = 5.0) -> int:
        """The correlation id of the next response."""
        head = await asyncio.wait_for(self.reader.readexactly(8), timeout_s)
        size, correlation_id = struct.unpack(">ii", head)
        await self.reader.readexactly(size - 4)
        return int(correlation_id)

    async def closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        try:
            return await asyncio.wait_for(self.reader.read(1), timeout_s) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
async def clients() -> AsyncIterator[list[_Client]]:
    opened: list[_Client] = []
    yield opened
    for client in opened:
        client.close()


async def _serve(limits: NetworkLimits, dispatcher: Any = None, name: str = "PLAINTEXT",
                 request_bytes_max: int = 8 * MIB) -> Listener:
    listener = Listener(name, "127.0.0.1", 0, dispatcher or _Echo(),
                        request_bytes_max=request_bytes_max, on_fatal=lambda error: None,
                        limits=limits)
    await listener.start()
    return listener


async def _connect(listener: Listener, clients: list[_Client]) -> _Client:
    client = _Client(*await asyncio.open_connection("127.0.0.1", listener.port))
    clients.append(client)
    return client


def _states(limits: NetworkLimits) -> list[str]:
    return sorted(c._state.name for c in limits.connections)


async def test_bodies_wait_for_memory_and_small_requests_use_the_reserve(
        clients: list[_Client]) -> None:
    limits = NetworkLimits(MemoryPool(4 * MIB))  # 3.5 MiB for any request, 0.5 for small
    listener = await _serve(limits)
    try:
        hangers = [await _connect(listener, clients) for _ in range(3)]
        for hanger in hangers:  # each announces 3 MiB and sends 1 MiB of it
            await hanger.send(_frame(3 * MIB)[:1 * MIB + 4])
            await asyncio.sleep(0.05)
        # two fit (the second takes the pool negative, as Kafka's); the third waits, muted
        await _until(lambda: _states(limits) == ["BODY", "BODY", "WAITING"])
        assert limits.pool.reserved_bytes == 6 * MIB
        waiting = next(c for c in limits.connections if c._state.name == "WAITING")
        # no body buffer: only the bounded read-ahead holds what it sent
        assert waiting._body is None and 4 <= len(waiting._pending) <= READ_AHEAD_BYTES
        # a small request is still served, from the reserve
        fresh = await _connect(listener, clients)
        await fresh.send(_frame(correlation_id=7))
        assert await fresh.answer() == 7
        # the first hanger leaves: its 3 MiB go to the one waiting
        hangers[0].close()
        await _until(lambda: sorted(_states(limits)) == ["BODY", "BODY", "HEADER"])
        assert limits.pool.reserved_bytes == 6 * MIB
        # the rest of its frame arrives: answered, and its memory comes back
        hanger = hangers[1]
        await hanger.send(_frame(3 * MIB)[1 * MIB + 4:])
        assert await hanger.answer() == 1
        await _until(lambda: limits.pool.reserved_bytes == 3 * MIB)
        hangers[2].close()
        await _until(lambda: limits.pool.reserved_bytes == 0)
    finally:
        await listener.close()
    assert limits.pool.reserved_bytes == 0 and limits.quotas.total == 0


async def test_memory_is_held_until_the_handler_finishes(clients: list[_Client]) -> None:
    limits = NetworkLimits(MemoryPool(4 * MIB))
    echo = _Echo()
    echo.gate = asyncio.Event()
    listener = await _serve(limits, echo)
    try:
        client = await _connect(listener, clients)
        await client.send(_frame(2 * MIB))
        await _until(lambda: _states(limits) == ["HANDLING"])
        assert limits.pool.reserved_bytes == 2 * MIB
        echo.gate.set()
        assert await client.answer() == 1
        await _until(lambda: limits.pool.reserved_bytes == 0)
    finally:
        await listener.close()


async def test_idle_connections_are_closed_busy_ones_are_not(clients: list[_Client]) -> None:
    limits = NetworkLimits(MemoryPool(4 * MIB), connections_max_idle_ms=300)
    echo = _Echo()
    listener = await _serve(limits, echo)
    try:
        quiet = await _connect(listener, clients)
        stalled = await _connect(listener, clients)  # half a frame, then nothing
        await stalled.send(_frame(2 * MIB)[:MIB])
        echo.gate = asyncio.Event()
        busy = await _connect(listener, clients)
        await busy.send(_frame())
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await quiet.closed_by_peer() and await stalled.closed_by_peer()
        assert 0.25 < loop.time() - started < 2.0
        assert limits.pool.reserved_bytes < 2 * MIB  # the stalled frame's memory is back
        await asyncio.sleep(0.4)  # the handler runs longer than the idle time: kept
        echo.gate.set()
        assert await busy.answer() == 1
        assert await busy.closed_by_peer()  # then idle, and closed
        await _until(lambda: limits.quotas.total == 0 and limits.pool.reserved_bytes == 0)
    finally:
        await listener.close()


async def test_connections_over_the_per_ip_cap_are_closed_at_accept(
        clients: list[_Client]) -> None:
    quotas = quotas_for(["PLAINTEXT"], max_connections=100, max_connections_per_ip=2,
                        per_ip_overrides={}, listener_max={}, inter_broker_listener=None)
    limits = NetworkLimits(MemoryPool(4 * MIB), quotas)
    listener = await _serve(limits)
    try:
        first, second = [await _connect(listener, clients) for _ in range(2)]
        third = await _connect(listener, clients)
        assert await third.closed_by_peer()
        for client in (first, second):
            await client.send(_frame(correlation_id=3))
            assert await client.answer() == 3
        first.close()
        await _until(lambda: quotas.total == 1)
        fourth = await _connect(listener, clients)
        await fourth.send(_frame(correlation_id=4))
        assert await fourth.answer() == 4
    finally:
        await listener.close()


async def test_the_inter_broker_listener_takes_the_least_recently_used_connection(
        clients: list[_Client]) -> None:
    quotas = quotas_for(["CLIENTS", "REPLICATION"], max_connections=2,
                        max_connections_per_ip=100, per_ip_overrides={}, listener_max={},
                        inter_broker_listener="REPLICATION")
    limits = NetworkLimits(MemoryPool(4 * MIB), quotas)
    outside = await _serve(limits, name="CLIENTS")
    inside = await _serve(limits, name="REPLICATION")
    try:
        older, newer = [await _connect(outside, clients) for _ in range(2)]
        await older.send(_frame(correlation_id=1))
        assert await older.answer() == 1
        await asyncio.sleep(0.05)
        await newer.send(_frame(correlation_id=2))
        assert await newer.answer() == 2
        refused = await _connect(outside, clients)
        assert await refused.closed_by_peer()
        follower = await _connect(inside, clients)  # over max.connections: allowed
        assert await older.closed_by_peer()  # the least recently active client gave way
        await follower.send(_frame(correlation_id=5))
        assert await follower.answer() == 5
        await newer.send(_frame(correlation_id=6))
        assert await newer.answer() == 6
        assert quotas.total == 2
    finally:
        await outside.close()
        await inside.close()


async def test_oversized_and_garbled_frames_still_close_only_their_connection(
        clients: list[_Client]) -> None:
    limits = NetworkLimits(MemoryPool(4 * MIB))
    listener = await _serve(limits, request_bytes_max=MIB)
    try:
        oversized = await _connect(listener, clients)
        await oversized.send(struct.pack(">i", MIB + 1))
        garbled = await _connect(listener, clients)
        await garbled.send(struct.pack(">i", 3) + b"abc")
        assert await oversized.closed_by_peer() and await garbled.closed_by_peer()
        good = await _connect(listener, clients)
        await good.send(_frame(correlation_id=9))
        assert await good.answer() == 9
        await _until(lambda: limits.pool.reserved_bytes == 0)
    finally:
        await listener.close()


async def test_pipelined_frames_are_answered_in_order_across_read_ahead_and_bodies(
        clients: list[_Client]) -> None:
    limits = NetworkLimits(MemoryPool(4 * MIB))
    listener = await _serve(limits)
    try:
        client = await _connect(listener, clients)
        # small frames that share reads, a large one that spans the read-ahead and its body,
        # a frame split inside its size prefix
        sizes = [None] * 50 + [3 * MIB, None, READ_AHEAD_BYTES - 4, READ_AHEAD_BYTES + 1, None]
        data = b"".join(_frame(size, correlation_id=index) for index, size in enumerate(sizes))
        for start in range(0, len(data), 7 * 1024 + 3):
            client.writer.write(data[start:start + 7 * 1024 + 3])
        await client.writer.drain()
        for index in range(len(sizes)):
            assert await client.answer() == index
        await _until(lambda: limits.pool.reserved_bytes == 0)
    finally:
        await listener.close()


async def test_a_request_then_the_end_of_the_stream_is_still_answered(
        clients: list[_Client]) -> None:
    limits = NetworkLimits(MemoryPool(4 * MIB))
    echo = _Echo()
    echo.gate = asyncio.Event()
    listener = await _serve(limits, echo)
    try:
        client = await _connect(listener, clients)
        client.writer.write(_frame(correlation_id=1) + _frame(correlation_id=2))
        client.writer.write_eof()  # half-closed, as Kafka answers what it had read
        await _until(lambda: echo.gate is not None and _states(limits) == ["HANDLING"])
        echo.gate.set()
        assert await client.answer() == 1 and await client.answer() == 2
        assert await client.closed_by_peer()
        truncated = await _connect(listener, clients)
        truncated.writer.write(_frame(correlation_id=3)[:-2])
        truncated.writer.write_eof()
        assert await truncated.closed_by_peer()
        await _until(lambda: limits.quotas.total == 0 and limits.pool.reserved_bytes == 0)
    finally:
        await listener.close()


async def test_the_controller_client_reconnects_after_an_idle_close() -> None:
    from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0

    from pykraft.server.controller_client import ActiveControllerClient

    class _EchoV0(_Echo):
        apis = {18: (0, 0)}

    limits = NetworkLimits(MemoryPool(4 * MIB), connections_max_idle_ms=200)
    listener = await _serve(limits, _EchoV0(), name="CONTROLLER")
    client = ActiveControllerClient(2, {1: ("127.0.0.1", listener.port)}, lambda: 1,
                                    request_timeout_ms=2000)
    try:
        assert (await client.send(18, 0, ApiVersionsV0()))[0] == 1
        await _until(lambda: limits.quotas.total == 0)  # closed as idle by the listener
        await asyncio.sleep(0.05)
        # a forwarded request that is not idempotent must not meet the dead connection
        assert (await client.send(18, 0, ApiVersionsV0()))[0] == 1
    finally:
        await client.close()
        await listener.close()


async def test_a_response_slow_to_encode_is_logged_with_its_api_and_size(
        clients: list[_Client], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The loop watch shows the encoder holding the loop, not the request it answers."""
    limits = NetworkLimits(MemoryPool(4 * MIB))
    listener = await _serve(limits)
    try:
        client = await _connect(listener, clients)
        with caplog.at_level(logging.WARNING, logger="pykraft.net.server"):
            await client.send(_frame(correlation_id=1))
            assert await client.answer() == 1
            assert not [r for r in caplog.records if "encoding" in r.getMessage()]
            monkeypatch.setattr(server_module, "SLOW_ENCODE_S", 0.0)
            await client.send(_frame(correlation_id=2))
            assert await client.answer() == 2
        [said] = [r.getMessage() for r in caplog.records if "encoding" in r.getMessage()]
        assert said.startswith("encoding a response to API_VERSIONS v3 (") and "'t'" in said
    finally:
        await listener.close()
