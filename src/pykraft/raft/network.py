"""The quorum's transport: Raft messages over TCP in Kafka's wire protocol.

Outbound (`RaftChannels`). A node sends requests to the other voters' controller listeners
(`controller.quorum.voters`, id@host:port). Each destination has two lanes, each one TCP
connection carrying one request at a time, as a Kafka server serves a connection: Fetch and
FetchSnapshot on one, Vote / BeginQuorumEpoch / EndQuorumEpoch on the other, so that a fetch
the leader parks for up to fetch.max.wait never delays an election. A request that cannot
be sent or answered within controller.quorum.request.timeout.ms is dropped, and so is one
that waited that long in its lane's queue: the core resends by its own timers, exactly as it
does when the simulator loses a message. A lane that cannot connect backs off exponentially
(controller.quorum.retry.backoff.ms doubling up to 1 s); requests for it meanwhile are
dropped. A connection the peer has closed (it restarted) is replaced before use, and a
request that fails on an old connection is sent once more on a new one, so that the first
request after a peer's restart is not lost. A request that fails because the peer refused
the connection, or reset or closed it before answering, or that is dropped during the
backoff, is reported to the core as `Unreachable` (with its correlation id), so that a
follower of a dead leader need not wait out fetch.timeout.ms (core.py); silence and
timeouts are not reported. Each answer is decoded against its request and handed to
`deliver` as an InboundMessage carrying the core's correlation id (the header's correlation
ids are the lane's own).

Inbound (`RaftApis`). On the controller listener the five RPCs are checked by the codec,
given to the node as InboundMessages, and answered with what the core answers for that
(source, correlation id) -- or with REQUEST_TIMED_OUT when the core says nothing in time
(a parked fetch superseded by a newer one from the same replica).

Limits: each lane queues at most LANE_QUEUE_MAX requests; a response frame is at most a
full fetch or snapshot chunk + 1 MiB; the node's inbox is bounded (driver.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from pykraft.errors import InvariantViolation
from pykraft.protocol.api import ApiKey
from pykraft.protocol.entities import NO_THROTTLE, make, response_module
from pykraft.protocol.framing import FrameError, decode_response, encode_request
from pykraft.raft import codec
from pykraft.raft.codec import DecodedRequest, RejectedRequest
from pykraft.raft.core import RaftConfig
from pykraft.raft.messages import (
    FetchRequest,
    FetchSnapshotRequest,
    InboundMessage,
    OutboundMessage,
    RaftRequest,
    RaftResponse,
    Unreachable,
)

__all__ = ["RaftChannels", "RaftEndpoint", "RaftApis", "RaftDispatcher", "LANE_QUEUE_MAX"]

# (host, port) -> a connected stream, TLS and SASL done as the node's config asks
Opener = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]

log = logging.getLogger("pykraft.raft.network")

LANE_QUEUE_MAX: Final = 64
BACKOFF_MAX_MS: Final = 1_000
RESPONSE_SLACK_BYTES: Final = 1 << 20
# A request's timeout is counted in slices of the loop's own time: a slice in which the
# loop was held (its wait ran long) counts for at most SLICE_COUNTED_MS, so that an answer
# that arrived while this node's loop was held is still read (see `_own_time_timeout`).
SLICE_MS: Final = 100
SLICE_COUNTED_MS: Final = 150
_SIZE: Final = struct.Struct(">i")
T = TypeVar("T")


async def _own_time_timeout(work: Awaitable[T], timeout_ms: int) -> T:
    """`work`'s result, or TimeoutError once this node's loop has had `timeout_ms` of its own
    time for it. A loop held meanwhile (a delta of 100,000 partition changes applied, a
    garbage collection) could not read the answer: its stall counts for one slice only,
    else the timer, due in the same turn as the answer waiting in the socket, would drop
    it -- and a broker held for seconds at a time dropped every fetch answer for 12 s."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    budget_ms = float(timeout_ms)
    try:
        while True:
            started = loop.time()
            done, _ = await asyncio.wait({task}, timeout=min(SLICE_MS, budget_ms) / 1000)
            if done:
                return task.result()
            budget_ms -= min((loop.time() - started) * 1000, SLICE_COUNTED_MS)
            if budget_ms <= 0:
                raise TimeoutError
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)  # its connection closed


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _unreachable(error: BaseException) -> bool:
    """The peer refused the connection or closed or reset it before answering (not: it was
    silent until the timeout, or answered garbage)."""
    if isinstance(error, asyncio.IncompleteReadError):
        return True
    return isinstance(error, OSError) and not isinstance(error, TimeoutError)


@dataclass(frozen=True, slots=True)
class _Queued:
    queued_ms: int
    message: OutboundMessage


class _Lane:
    """One connection to one destination, one request at a time."""

    def __init__(self, channels: RaftChannels, destination_id: int, name: str) -> None:
        self.channels = channels
        self.destination_id = destination_id
        self.name = name
        self.queue: asyncio.Queue[_Queued] = asyncio.Queue(maxsize=LANE_QUEUE_MAX)
        self.task: asyncio.Task[None] | None = None
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.backoff_ms = 0
        self.retry_at_ms = 0
        self.correlation_id = 0
        self.busy = False  # a request taken from the queue is not finished yet

    @property
    def idle(self) -> bool:
        return not self.busy and self.queue.empty()

    def offer(self, message: OutboundMessage) -> bool:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(
                self._run(), name=f"raft-lane-{self.destination_id}-{self.name}"
            )
        try:
            self.queue.put_nowait(_Queued(_now_ms(), message))
        except asyncio.QueueFull:
            return False
        return True

    async def _run(self) -> None:
        timeout_ms = self.channels.request_timeout_ms
        while True:
            queued = await self.queue.get()
            self.busy = True
            try:
                await self._handle(queued, timeout_ms)
            finally:
                self.busy = False

    async def _handle(self, queued: _Queued, timeout_ms: int) -> None:
        deadline_ms = queued.queued_ms + timeout_ms
        if _now_ms() >= deadline_ms:
            return  # stale: dropped
        if _now_ms() < self.retry_at_ms:
            self._report_unreachable(queued.message)  # the destination is known to be down
            return
        try:
            response = await _own_time_timeout(
                self._exchange_retrying_stale(queued.message), deadline_ms - _now_ms())
        except (OSError, TimeoutError, asyncio.IncompleteReadError, FrameError) as error:
            self._failed(error)
            if _unreachable(error):
                self._report_unreachable(queued.message)
            return
        except Exception:
            log.exception("raft request to node %d failed", self.destination_id)
            self._failed(None)
            return
        self.backoff_ms = 0
        if response is not None:
            self.channels.deliver(
                InboundMessage(self.destination_id, queued.message.correlation_id, response)
            )

    async def _exchange_retrying_stale(self, message: OutboundMessage) -> RaftResponse | None:
        """Send on the lane's connection; if an old connection turns out dead (the peer
        restarted since: its answer is an EOF or a reset), once more on a new one, so that
        the first request after a peer's restart is not lost."""
        if self.writer is not None and (
            self.writer.is_closing() or (self.reader is not None and self.reader.at_eof())
        ):
            self.close_connection()  # the peer closed it already
        reused = self.writer is not None
        try:
            return await self._exchange(message)
        except (OSError, asyncio.IncompleteReadError) as error:
            if not reused or not _unreachable(error):
                raise
        self.close_connection()
        return await self._exchange(message)

    async def _exchange(self, message: OutboundMessage) -> RaftResponse | None:
        body = message.body
        assert isinstance(body, RaftRequest)
        channels = self.channels
        api_key, version, entity = codec.encode_request(
            body,
            cluster_id=channels.cluster_id,
            destination_id=self.destination_id,
            fetch_max_wait_ms=channels.fetch_max_wait_ms,
            fetch_bytes_max=channels.fetch_bytes_max,
        )
        if self.writer is None:
            host, port = channels.addresses[self.destination_id]
            self.reader, self.writer = await channels.open_connection(host, port)
        reader, writer = self.reader, self.writer
        assert reader is not None
        self.correlation_id = (self.correlation_id + 1) & 0x7FFFFFFF
        writer.write(
            encode_request(api_key, version, self.correlation_id, channels.client_id, entity)
        )
        await writer.drain()
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        if not 4 <= size <= channels.response_bytes_max:
            raise FrameError(f"response of {size} bytes")
        frame = await reader.readexactly(size)
        try:
            correlation_id, answer = decode_response(api_key, version, frame)
        except Exception as error:
            raise FrameError(f"cannot decode the answer: {error}") from error
        if correlation_id != self.correlation_id:
            raise FrameError(f"correlation id {correlation_id}, expected {self.correlation_id}")
        return codec.decode_response(body, answer)

    def _report_unreachable(self, message: OutboundMessage) -> None:
        """Tell the core that `message` will not be answered (see messages.Unreachable)."""
        self.channels.unreachable_reports += 1
        self.channels.deliver(
            InboundMessage(self.destination_id, message.correlation_id, Unreachable())
        )

    def _failed(self, error: BaseException | None) -> None:
        """Close the connection (an answer may still come on it) and back off."""
        self.close_connection()
        self.backoff_ms = min(
            BACKOFF_MAX_MS, max(self.channels.retry_backoff_ms, 2 * self.backoff_ms, 1)
        )
        self.retry_at_ms = _now_ms() + self.backoff_ms
        log.debug("raft lane %s to node %d: %s; retrying in %d ms", self.name,
                  self.destination_id, error, self.backoff_ms)

    def close_connection(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self.close_connection()


class RaftChannels:
    """Outbound requests to the other voters; answers come back through `deliver`."""

    def __init__(
        self,
        node_id: int,
        cluster_id: str,
        addresses: Mapping[int, tuple[str, int]],
        *,
        request_timeout_ms: int = 2_000,
        retry_backoff_ms: int = 20,
        fetch_max_wait_ms: int = 500,
        fetch_bytes_max: int = 8 * 1024 * 1024 + 1024,
        fetch_snapshot_bytes_max: int = 8 * 1024 * 1024,
        open_connection: Opener = asyncio.open_connection,
    ) -> None:
        self.node_id = node_id
        # how a connection to a voter is made: the node's opener does the controller
        # listener's TLS and SASL (net.connect, a layer raft does not import)
        self.open_connection = open_connection
        self.cluster_id = cluster_id
        self.addresses = dict(addresses)
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_bytes_max = fetch_bytes_max
        # the largest answer accepted: a full fetch or snapshot chunk, and its framing
        self.response_bytes_max = (
            max(fetch_bytes_max, fetch_snapshot_bytes_max) + RESPONSE_SLACK_BYTES
        )
        self.client_id = f"raft-client-{node_id}"
        self._deliver: Callable[[InboundMessage], None] | None = None
        self._lanes: dict[tuple[int, bool], _Lane] = {}
        self.dropped = 0  # requests never sent: no address, a full lane
        self.unreachable_reports = 0  # requests reported Unreachable to the core

    @classmethod
    def for_voters(
        cls,
        node_id: int,
        cluster_id: str,
        voters: Mapping[int, tuple[str, int]],
        config: RaftConfig,
        *,
        open_connection: Opener = asyncio.open_connection,
    ) -> RaftChannels:
        """Channels to `voters` (ServerConfig.voters: id -> (host, port)) with the
        timeouts of the node's raft configuration."""
        return cls(
            node_id,
            cluster_id,
            voters,
            request_timeout_ms=config.request_timeout_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            fetch_max_wait_ms=config.fetch_max_wait_ms,
            fetch_bytes_max=config.fetch_bytes_max,
            fetch_snapshot_bytes_max=config.fetch_snapshot_bytes_max,
            open_connection=open_connection,
        )

    def connect(self, deliver: Callable[[InboundMessage], None]) -> None:
        """Where answers go (the node's inbox); set once by the node."""
        self._deliver = deliver

    def deliver(self, message: InboundMessage) -> None:
        if self._deliver is not None:
            self._deliver(message)

    def send(self, message: OutboundMessage) -> None:
        """Send a request; never blocks. Dropped when it cannot be queued."""
        destination = message.destination_id
        if destination not in self.addresses or destination == self.node_id:
            self.dropped += 1
            return
        is_fetch = isinstance(message.body, FetchRequest | FetchSnapshotRequest)
        lane = self._lanes.get((destination, is_fetch))
        if lane is None:
            lane = self._lanes[(destination, is_fetch)] = _Lane(
                self, destination, "fetch" if is_fetch else "quorum"
            )
        if not lane.offer(message):
            self.dropped += 1

    async def flush(self, timeout_ms: int) -> None:
        """Wait until every lane is idle: its requests sent and answered, or dropped."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_ms / 1000):
                while not all(lane.idle for lane in self._lanes.values()):
                    await asyncio.sleep(0.005)

    async def close(self) -> None:
        lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            await lane.close()


class RaftEndpoint(Protocol):
    """What the inbound side needs of the node (driver.RaftNode)."""

    @property
    def voters(self) -> frozenset[int]: ...

    @property
    def leader_id_and_epoch(self) -> tuple[int, int]: ...

    async def handle_request(self, source_id: int, body: RaftRequest) -> RaftResponse | None:
        """Step `body` into the core; the core's answer, or None if none came in time."""
        ...


Handler = Callable[[Any, Any], Awaitable[Any]]


class RaftApis:
    """The handler group for Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch and
    FetchSnapshot on a controller listener (see broker.apis.ApiGroup)."""

    def __init__(self, endpoint: RaftEndpoint, cluster_id: str) -> None:
        self.endpoint = endpoint
        self.cluster_id = cluster_id

    @property
    def versions(self) -> Mapping[int, tuple[int, int]]:
        return codec.RAFT_APIS

    def handlers(self) -> dict[int, Handler]:
        return {api_key: self.handle for api_key in codec.RAFT_APIS}

    async def handle(self, context: Any, request: Any) -> Any:
        api_key = int(context.header.api_key)
        version = int(context.header.api_version)
        leader_id, epoch = self.endpoint.leader_id_and_epoch
        decoded = codec.decode_request(
            api_key,
            version,
            request,
            cluster_id=self.cluster_id,
            voters=self.endpoint.voters,
            leader_id=leader_id,
            leader_epoch=epoch,
        )
        if isinstance(decoded, RejectedRequest):
            log.info("refusing %s from %s:%s: %s", type(request).__name__,
                     context.client_host, context.client_port, decoded.error.name)
            return decoded.response
        assert isinstance(decoded, DecodedRequest)
        answer = await self.endpoint.handle_request(decoded.source_id, decoded.body)
        if answer is None:
            leader_id, epoch = self.endpoint.leader_id_and_epoch
            return codec.error_response(
                api_key, version, ErrorCode.request_timed_out, leader_id, epoch
            )
        if codec.api_key_of(answer) != api_key:  # the message is built only then: the
            # repr of a fetch answer holds all its records
            raise InvariantViolation(f"{answer!r} answers a request of api {api_key}")
        return codec.encode_response(api_key, version, answer)


class RaftDispatcher:
    """A listener that serves the quorum alone: ApiVersions and the raft RPCs (a voter's
    listener before the controller's APIs join it, and the tests of the transport)."""

    def __init__(self, apis: RaftApis) -> None:
        self._apis = apis
        self._handlers = apis.handlers()

    @property
    def apis(self) -> dict[int, tuple[int, int]]:
        return {ApiKey.API_VERSIONS: (0, 4), **codec.RAFT_APIS}

    async def handle(self, context: Any, request: Any) -> Any:
        api_key = int(context.header.api_key)
        if api_key == ApiKey.API_VERSIONS:
            return self._api_versions(int(context.header.api_version), ErrorCode.none)
        return await self._handlers[api_key](context, request)

    def unsupported_api_versions_response(self) -> Any:
        return self._api_versions(0, ErrorCode.unsupported_version)

    def _api_versions(self, version: int, error: ErrorCode) -> Any:
        module = response_module(ApiKey.API_VERSIONS, version)
        keys = tuple(
            make(module.ApiVersion, api_key=key, min_version=low, max_version=high)
            for key, (low, high) in sorted(self.apis.items())
        )
        return make(
            module.ApiVersionsResponse,
            error_code=error,
            api_keys=keys,
            throttle_time=NO_THROTTLE,
            supported_features=(),
            finalized_features_epoch=-1,
            finalized_features=(),
        )
