"""The raft transport on real sockets, one side at a time: a request that cannot be sent or is
never answered is dropped (no answer delivered, nothing raised) and the lane reconnects for
the next one; a refused connection, or one closed before the answer, is reported to the core
as Unreachable with the request's correlation id (silence is not); the inbound handler
answers with the node's answer, or REQUEST_TIMED_OUT; the controller listener's dispatcher
routes the quorum's RPCs to RaftApis."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from pykraft.broker.apis import ApiGroup
from pykraft.net.server import Listener, RequestContext
from pykraft.protocol.framing import RequestHeader
from pykraft.raft import codec
from pykraft.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    InboundMessage,
    OutboundMessage,
    RaftRequest,
    RaftResponse,
    Unreachable,
    VoteRequest,
    VoteResponse,
)
from pykraft.raft.network import RaftApis, RaftChannels, RaftDispatcher
from pykraft.server.controller_apis import ControllerApis
from pykraft.testing.ports import free_port

CLUSTER = "cluster-for-network-tests"


class Endpoint:
    """A node that answers every request with `answer` (None: never answers)."""

    def __init__(self, answer: RaftResponse | None) -> None:
        self.answer = answer
        self.requests: list[tuple[int, RaftRequest]] = []

    @property
    def voters(self) -> frozenset[int]:
        return frozenset({1, 2, 3})

    @property
    def leader_id_and_epoch(self) -> tuple[int, int]:
        return 2, 7

    async def handle_request(self, source_id: int, body: RaftRequest) -> RaftResponse | None:
        self.requests.append((source_id, body))
        return self.answer


async def serve(port: int, endpoint: Endpoint) -> Listener:
    listener = Listener("CONTROLLER", "127.0.0.1", port,
                        RaftDispatcher(RaftApis(endpoint, CLUSTER)),
                        request_bytes_max=1 << 20, on_fatal=lambda error: None)
    await listener.start()
    return listener


def channels_to(port: int, received: list[InboundMessage], **options: int) -> RaftChannels:
    channels = RaftChannels(1, CLUSTER, {2: ("127.0.0.1", port)}, **options)
    channels.connect(received.append)
    return channels


BEGIN_BODY = BeginQuorumEpochRequest(leader_id=1, leader_epoch=7)
BEGIN = OutboundMessage(2, 41, BEGIN_BODY)


async def wait_until(condition: Any, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


async def test_an_answer_comes_back_with_the_cores_correlation_id() -> None:
    port = free_port()
    endpoint = Endpoint(BeginQuorumEpochResponse(ErrorCode.none, 1, 7))
    listener = await serve(port, endpoint)
    received: list[InboundMessage] = []
    channels = channels_to(port, received)
    try:
        channels.send(BEGIN)
        await wait_until(lambda: received)
        assert received == [InboundMessage(2, 41, BeginQuorumEpochResponse(ErrorCode.none, 1, 7))]
        assert endpoint.requests == [(1, BEGIN.body)]
    finally:
        await channels.close()
        await listener.close()


async def test_an_unreachable_voter_drops_requests_and_is_reached_once_it_listens() -> None:
    """Refused connections: each request is dropped and reported Unreachable (the first
    refused, the next two dropped during the lane's backoff), nothing raised."""
    port = free_port()
    received: list[InboundMessage] = []
    channels = channels_to(port, received, retry_backoff_ms=20, request_timeout_ms=300)
    try:
        for _ in range(3):
            channels.send(BEGIN)
        await asyncio.sleep(0.1)
        assert received == [InboundMessage(2, 41, Unreachable())] * 3
        assert channels.unreachable_reports == 3
        received.clear()
        endpoint = Endpoint(BeginQuorumEpochResponse(ErrorCode.none, 1, 7))
        listener = await serve(port, endpoint)
        try:
            answer = BeginQuorumEpochResponse(ErrorCode.none, 1, 7)
            async with asyncio.timeout(5):
                while answer not in [message.body for message in received]:
                    channels.send(BEGIN)  # the core resends by its timers; so do we here
                    await asyncio.sleep(0.05)
        finally:
            await listener.close()
    finally:
        await channels.close()


async def test_a_request_never_answered_is_dropped_and_the_lane_reconnects() -> None:
    """A server that reads and never answers: the request times out, its connection is
    closed, and the next request goes out on a new connection."""
    port = free_port()
    connections: list[asyncio.StreamWriter] = []

    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        await reader.read()  # until the client closes

    server = await asyncio.start_server(mute, "127.0.0.1", port)
    received: list[InboundMessage] = []
    channels = channels_to(port, received, request_timeout_ms=150, retry_backoff_ms=10)
    try:
        channels.send(BEGIN)
        await wait_until(lambda: len(connections) == 1)
        await asyncio.sleep(0.3)
        channels.send(BEGIN)
        await wait_until(lambda: len(connections) == 2)
        assert received == []  # a timeout is silence, not a report of an unreachable peer
    finally:
        await channels.close()
        server.close()
        for writer in connections:
            writer.close()
        await server.wait_closed()


async def test_the_first_request_after_the_peer_restarted_gets_through() -> None:
    """The lane's connection died with the peer's old process: the next request goes out on
    a new connection and is answered, neither lost nor reported unreachable."""
    port = free_port()
    answer = BeginQuorumEpochResponse(ErrorCode.none, 1, 7)
    listener = await serve(port, Endpoint(answer))
    received: list[InboundMessage] = []
    channels = channels_to(port, received)
    try:
        channels.send(BEGIN)
        await wait_until(lambda: received)
        await listener.close()  # the peer's process ends ...
        listener = await serve(port, Endpoint(answer))  # ... and a new one listens
        received.clear()
        channels.send(BEGIN)
        await wait_until(lambda: received, timeout_s=1.0)
        assert received == [InboundMessage(2, 41, answer)]
        assert channels.unreachable_reports == 0
    finally:
        await channels.close()
        await listener.close()


async def test_a_connection_closed_before_the_answer_is_reported_unreachable() -> None:
    """A peer that dies while it holds a parked fetch closes the connection: the fetch is
    reported Unreachable at once, long before the request timeout."""
    port = free_port()
    connections: list[asyncio.StreamWriter] = []

    async def dying(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        await reader.readexactly(4)  # the request arrives; then the process "dies"
        writer.transport.abort()  # RST, as the kernel does for a killed process

    server = await asyncio.start_server(dying, "127.0.0.1", port)
    received: list[InboundMessage] = []
    channels = channels_to(port, received, request_timeout_ms=5_000)
    try:
        channels.send(OutboundMessage(2, 9, FetchRequest(1, 7, 0, 0)))
        await wait_until(lambda: received, timeout_s=1.0)
        assert received == [InboundMessage(2, 9, Unreachable())]
    finally:
        await channels.close()
        server.close()
        await server.wait_closed()


async def test_fetches_and_votes_travel_on_separate_connections() -> None:
    """A fetch the leader parks must not hold up a vote to the same node."""
    port = free_port()
    gate = asyncio.Event()

    class Parking(Endpoint):
        async def handle_request(self, source_id: int, body: RaftRequest) -> RaftResponse | None:
            if isinstance(body, FetchRequest):
                await gate.wait()
                return FetchResponse(ErrorCode.none, 2, 7, -1)
            return await super().handle_request(source_id, body)

    listener = await serve(port, Parking(VoteResponse(ErrorCode.none, 2, 7, False, 8)))
    received: list[InboundMessage] = []
    channels = channels_to(port, received)
    try:
        channels.send(OutboundMessage(2, 5, FetchRequest(1, 7, 0, 0)))
        channels.send(OutboundMessage(2, 6, VoteRequest(8, 1, 7, 10)))
        await wait_until(lambda: len(received) == 1)
        assert received[0].correlation_id == 6
        gate.set()
        await wait_until(lambda: len(received) == 2)
    finally:
        await channels.close()
        await listener.close()


def context(api_key: int, version: int) -> RequestContext:
    return RequestContext(RequestHeader(api_key, version, 1, "test", 0), "CONTROLLER",
                          "127.0.0.1", 5000)


async def test_no_answer_from_the_node_is_request_timed_out() -> None:
    apis = RaftApis(Endpoint(None), CLUSTER)
    _, version, entity = codec.encode_request(BEGIN_BODY, cluster_id=CLUSTER, destination_id=2)
    answer = await apis.handle(context(codec.BEGIN_QUORUM_EPOCH, version), entity)
    partition = answer.topics[0].partitions[0]
    assert (partition.error_code, partition.leader_id, partition.leader_epoch) == (
        ErrorCode.request_timed_out, 2, 7)


async def test_a_refused_request_never_reaches_the_node() -> None:
    endpoint = Endpoint(BeginQuorumEpochResponse(ErrorCode.none, 1, 7))
    apis = RaftApis(endpoint, CLUSTER)
    _, version, entity = codec.encode_request(BEGIN_BODY, cluster_id="other", destination_id=2)
    answer = await apis.handle(context(codec.BEGIN_QUORUM_EPOCH, version), entity)
    assert answer.error_code == ErrorCode.inconsistent_cluster_id
    assert endpoint.requests == []


async def test_the_controller_listener_serves_the_quorum_rpcs_through_raft_apis() -> None:
    endpoint = Endpoint(FetchResponse(ErrorCode.none, 2, 7, 12))
    raft_apis = RaftApis(endpoint, CLUSTER)
    groups: Sequence[ApiGroup] = [raft_apis]
    admin: Any = SimpleNamespace(handlers=dict, cache=SimpleNamespace(image=None))
    dispatcher = ControllerApis(admin, groups)
    for api_key, versions in codec.RAFT_APIS.items():
        assert dispatcher.apis[api_key] == versions
    _, version, entity = codec.encode_request(FetchRequest(3, 7, 12, 7), cluster_id=CLUSTER,
                                              destination_id=2)
    answer = await dispatcher.handle(context(codec.FETCH, version), entity)
    decoded = codec.decode_response(FetchRequest(3, 7, 12, 7), answer)
    assert decoded == FetchResponse(ErrorCode.none, 2, 7, 12)
    assert endpoint.requests == [(3, FetchRequest(3, 7, 12, 7))]


class SlowEndpoint(Endpoint):
    delay_s = 0.0

    async def handle_request(self, source_id: int, body: RaftRequest) -> RaftResponse | None:
        await asyncio.sleep(self.delay_s)
        return await super().handle_request(source_id, body)


async def test_an_answer_that_arrived_while_the_loop_was_held_is_not_timed_out() -> None:
    """The peer (on a thread of its own, as another process would be) answers while this
    node's loop is held past the request timeout: the answer, waiting in the socket, is
    read and delivered, not dropped as timed out -- the silence was this node's own."""
    port = free_port()
    endpoint = SlowEndpoint(BeginQuorumEpochResponse(ErrorCode.none, 1, 7))
    peer_loop = asyncio.new_event_loop()
    started = threading.Event()

    def run_peer() -> None:
        asyncio.set_event_loop(peer_loop)
        listener = peer_loop.run_until_complete(serve(port, endpoint))
        started.set()
        peer_loop.run_forever()
        peer_loop.run_until_complete(listener.close())

    peer = threading.Thread(target=run_peer, daemon=True)
    peer.start()
    started.wait(5)
    received: list[InboundMessage] = []
    channels = channels_to(port, received, request_timeout_ms=200)
    try:
        channels.send(BEGIN)  # connect and answer once, so the next one is a plain send
        await wait_until(lambda: received)
        received.clear()
        endpoint.delay_s = 0.1
        channels.send(BEGIN)
        for _ in range(3):  # the lane writes it out
            await asyncio.sleep(0)
        time.sleep(0.6)  # held past the 200 ms request timeout; the answer comes at 100 ms
        assert len(endpoint.requests) == 2
        await wait_until(lambda: received, timeout_s=2)
        assert received == [InboundMessage(2, 41, BeginQuorumEpochResponse(ErrorCode.none, 1, 7))]
    finally:
        await channels.close()
        peer_loop.call_soon_threadsafe(peer_loop.stop)
        peer.join(5)
