"""Asyncio listeners: read size-prefixed frames, dispatch them in order, write responses.

Like Kafka's SocketServer, a connection has at most one request in process: the next frame is
read only after the previous response was queued (the channel is "muted" meanwhile). That
keeps responses in request order without bookkeeping, and gives backpressure for free: a
client that floods requests is simply not read. A frame that is garbled, truncated, oversized
or of an unknown API closes its connection; nothing else is affected.

What peers can make the node hold is bounded per group of listeners (`NetworkLimits`: a
combined node's broker listeners are one group, its controller listeners another, as Kafka's
BrokerServer and ControllerServer each have a SocketServer). A frame's body is read only after
its whole size was reserved from the group's pool (`queued.max.request.bytes`), and straight
into a buffer of that size: the bytes of a half-received frame are the ones reserved. Beyond
that a connection holds at most READ_AHEAD_BYTES (16 KiB) read ahead of its frame (the next
size prefix, small pipelined requests). While the pool is exhausted a connection is not read
further (Kafka mutes it); a reservation is released when its request's handler has finished.
Connections over `max.connections`, `listener.name.<name>.max.connections` or
`max.connections.per.ip` are closed at accept, and one with no request in process that has
read nothing for `connections.max.idle.ms` is closed.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, cast, runtime_checkable

from kio.index import UnknownAPIKey, UnknownEntity

from pykraft.errors import InvalidRequest, InvariantViolation
from pykraft.net.limits import (
    UNLIMITED,
    ConnectionQuotas,
    MemoryPool,
    Reservation,
    TooManyConnections,
    normalize_address,
    parse_per_ip_overrides,
    queued_max_request_bytes,
    quotas_for,
)
from pykraft.net.principal import ANONYMOUS, KafkaPrincipal
from pykraft.net.sasl import (
    SASL_APIS,
    Decision,
    ListenerSasl,
    Outcome,
    SaslServerAuthenticator,
    illegal_state_response,
)
from pykraft.net.tls import PrincipalMapper, principal_name
from pykraft.protocol.api import ApiKey, api_name, supports
from pykraft.protocol.framing import (
    FrameError,
    RequestHeader,
    decode_request,
    encode_response,
    is_flexible,
    parse_request_header,
    skip_header_tags,
)

log = logging.getLogger(__name__)

_SIZE: Final = struct.Struct(">i")
# a response that takes longer to encode is logged with its API and size: the loop watch
# shows the encoder holding the loop, not which request it was answering
SLOW_ENCODE_S: Final = 0.5


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: RequestHeader
    listener_name: str
    client_host: str
    client_port: int
    # who the connection authenticated as (TLS client certificate or SASL), and how
    principal: KafkaPrincipal = ANONYMOUS
    security_protocol: str = "PLAINTEXT"


@runtime_checkable
class ConnectionObserver(Protocol):
    """A dispatcher that wants to know when a client's connection ends."""

    def connection_closed(self, client_host: str, client_port: int) -> None: ...


class Dispatcher(Protocol):
    """What a listener serves: the API table and the handler for decoded requests."""

    @property
    def apis(self) -> dict[int, tuple[int, int]]: ...

    async def handle(self, context: RequestContext, request: Any) -> Any | None:
        """Return the response entity, or None for no response (produce with acks=0)."""
        ...

    def unsupported_api_versions_response(self) -> Any:
        """The ApiVersions v0 answer to an ApiVersions request of a version we lack."""
        ...


class NetworkLimits:
    """The memory pool, connection quotas and idle timeout shared by a group of listeners,
    and the group's connections (for the pool's waiting line and for closing the least
    recently used one when the protected listener took the node over max.connections)."""

    def __init__(self, pool: MemoryPool | None = None, quotas: ConnectionQuotas | None = None,
                 *, connections_max_idle_ms: int = -1) -> None:
        self.pool = pool if pool is not None else MemoryPool(-1)
        self.quotas = quotas if quotas is not None else ConnectionQuotas()
        self.connections_max_idle_ms = connections_max_idle_ms  # < 0: never
        self.connections: set[_Connection] = set()
        # what every connection of the group reads into, outside frame bodies (reads are
        # one at a time on the loop; each copies out what it read before the next)
        self.scratch = bytearray(READ_AHEAD_BYTES)
        # connections whose frame size is known and waits for memory, in arrival order: the
        # first gets memory first, so a large request is not overtaken forever by small ones
        self._waiting: dict[_Connection, int] = {}

    @classmethod
    def from_config(cls, get: Callable[[str], str | None], listeners: Sequence[str],
                    inter_broker_listener: str | None) -> NetworkLimits:
        """The limits of the listeners named, from server config values (`get` gives a key's
        value or its default). ValueError when an override names a host that cannot be
        resolved (Kafka resolves them when it starts, too)."""

        def number(key: str, default: int) -> int:
            value = get(key)
            return int(value) if value is not None else default

        overrides: dict[str, int] = {}
        for host, count in parse_per_ip_overrides(get("max.connections.per.ip.overrides")
                                                  or "").items():
            for address in _resolve(host):
                overrides[address] = count
        pool = MemoryPool(queued_max_request_bytes(
            get("queued.max.request.bytes"), number("socket.request.max.bytes", 104857600)))
        quotas = quotas_for(
            listeners,
            max_connections=number("max.connections", UNLIMITED),
            max_connections_per_ip=number("max.connections.per.ip", UNLIMITED),
            per_ip_overrides=overrides,
            listener_max={name: int(value) for name in listeners
                          if (value := get(f"listener.name.{name.lower()}.max.connections"))
                          is not None},
            inter_broker_listener=inter_broker_listener)
        return cls(pool, quotas,
                   connections_max_idle_ms=number("connections.max.idle.ms", 600000))

    def reserve(self, connection: _Connection, size: int) -> Reservation | None:
        """Memory for a frame of `size` bytes now, or None: then `connection` is in the
        waiting line and `memory_granted` is called on it once there is memory."""
        if not self._waiting:
            reservation = self.pool.try_allocate(size)
            if reservation is not None:
                return reservation
        self._waiting[connection] = size
        return None

    def release(self, reservation: Reservation) -> None:
        self.pool.release(reservation)
        self.grant_waiting()

    def forget(self, connection: _Connection) -> None:
        self._waiting.pop(connection, None)

    def grant_waiting(self) -> None:
        for connection, size in list(self._waiting.items()):
            if self.pool.available < 1 and self.pool.reserve_available <= 0:
                return
            reservation = self.pool.try_allocate(size)
            if reservation is not None:  # else the next ones may still fit the reserve
                del self._waiting[connection]
                connection.memory_granted(reservation)

    def close_excess(self) -> None:
        """Kafka's closeExcessConnections: while the protected (inter-broker) listener holds
        the node over max.connections, the other listeners close their least recently used
        connections."""
        quotas = self.quotas
        while quotas.total > quotas.max_connections:
            candidates = [c for c in self.connections if not c.closing
                          and quotas.max_connections_exceeded(c.listener.name)]
            if not candidates:
                return
            victim = min(candidates, key=lambda c: c.last_active)
            victim.close_now("the node is over max.connections; closing its least recently "
                             "used connection")


def _resolve(host: str) -> list[str]:
    literal = normalize_address(host)
    if literal != host or ":" in host or host.replace(".", "").isdigit():
        return [literal]
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as error:
        raise ValueError(f"max.connections.per.ip.overrides: cannot resolve host {host}: "
                         f"{error}") from None
    return sorted({normalize_address(str(info[4][0])) for info in infos})


class _State(enum.Enum):
    HEADER = "reading a size prefix"
    WAITING = "waiting for memory"
    BODY = "reading a frame"
    HANDLING = "handling a request"
    WRITING = "writing a response"


_BUSY: Final = (_State.WAITING, _State.HANDLING)  # not idle, whatever the clock says
# What a connection may read ahead of the frame it is on, unreserved: the next size prefix
# and small requests of a client that pipelines them, so that they take one read and one
# turn of the loop instead of three. Bounded per connection, as Kafka's TLS channels keep
# their own read buffers outside its pool.
READ_AHEAD_BYTES: Final = 16 * 1024
# How long a connection whose authentication failed stays open after its error response,
# unless the client closes first (see _end_authentication)
FAILED_AUTHENTICATION_LINGER_S: Final = 0.5
# How long a TLS handshake may take from accept: a stalled or garbage one holds its
# connection (and its place in the quotas) no longer than this.
TLS_HANDSHAKE_TIMEOUT_S: Final = 10.0


class _Connection(asyncio.BufferedProtocol):
    """One client connection. Bytes outside a frame's body are read into a buffer shared by
    the group's connections and kept (at most READ_AHEAD_BYTES) in `_pending`; a body is read
    straight into its reserved buffer. One task handles the frames in order."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.limits = listener.limits
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.host, self.port, self.address = "?", 0, "?"
        self.last_active = self.loop.time()
        self.closing = False
        self._counted = False  # in the quotas
        self._task: asyncio.Task[None] | None = None
        self._state = _State.HEADER
        self._pending = bytearray()  # read, not yet part of a frame
        self._body: bytearray | None = None
        self._filled = 0  # of the body
        self._reservation: Reservation | None = None
        self._ready: bytearray | None = None  # a whole frame the task has not taken yet
        self._failure: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._reading = True
        self._eof = False
        self._write_paused = False
        self._idle_timer: asyncio.TimerHandle | None = None
        # SASL listeners: the connection's authentication (net/sasl.py), else None
        self._sasl: SaslServerAuthenticator | None = None
        # who the connection speaks for: a verified client certificate's user on an SSL
        # listener, else ANONYMOUS
        self.principal = ANONYMOUS
        self._tls_pending = False  # TLS listener, handshake not yet handed to TLS
        # TLS has the transport, but start_tls has not returned its own to us yet: what
        # TLS delivers meanwhile (its first read follows the handshake at once) is read as
        # usual, but reading cannot be paused until we hold TLS's transport
        self._tls_swapping = False

    # -- transport callbacks -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername") or ("?", 0)
        self.host, self.port = str(peer[0]), int(peer[1])
        self.address = normalize_address(self.host)
        if self.listener._closing:
            self.closing = True
            self.transport.close()
            return
        try:
            self.limits.quotas.accept(self.listener.name, self.address)
        except TooManyConnections as refused:
            log.info("rejected connection from %s:%d on listener %s: %s", self.host, self.port,
                     self.listener.name, refused)
            self.closing = True
            self.transport.abort()
            return
        self._counted = True
        self.limits.connections.add(self)
        if self.listener.sasl is not None:
            self._sasl = SaslServerAuthenticator(self.listener.sasl,
                                                 self.listener.dispatcher.apis,
                                                 f"{self.host}:{self.port}")
        if self.listener.ssl_context is not None:
            # nothing is read as Kafka frames before the handshake: its bytes go to TLS.
            # (uvloop starts reading after connection_made whatever it paused: what it
            # reads meanwhile is kept and handed to TLS, see _feed_tls.)
            self._tls_pending = True
            self.transport.pause_reading()
            self._reading = False
        self._task = self.loop.create_task(self._run())
        self.listener._connections.add(self._task)
        self._arm_idle_timer(self.last_active)
        self.limits.close_excess()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._state is _State.BODY:
            assert self._body is not None
            return memoryview(self._body)[self._filled:]
        room = READ_AHEAD_BYTES - len(self._pending)  # > 0, or reading would be paused
        if self._tls_swapping:  # (reading cannot be paused yet: never offer no room)
            room = max(room, 1024)
        return memoryview(self.limits.scratch)[:room]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self.loop.time()
        if self._tls_pending:  # the start of the handshake, read before TLS took over
            self._pending += memoryview(self.limits.scratch)[:nbytes]
            if len(self._pending) >= READ_AHEAD_BYTES:
                self._transport().pause_reading()
            return
        if self._state is _State.BODY:
            self._filled += nbytes
            if self._filled == len(self._body or b""):
                self._frame_complete()
        else:  # the shared buffer is reused by the next read of any connection: copy out
            self._pending += memoryview(self.limits.scratch)[:nbytes]
            if self._state is _State.HEADER:
                self._advance()
        self._sync_reading()

    def eof_received(self) -> bool:
        self._eof = True
        # a request in process, or whole in the read-ahead, is still answered (Kafka sees the
        # end only once it reads again); the transport then stays open for writing
        keep_open = self._state in (_State.HANDLING, _State.WRITING) or (
            self._state is _State.WAITING
            and len(self._pending) - 4 >= _SIZE.unpack_from(self._pending)[0])
        if not keep_open:
            self._fail(ConnectionResetError("connection closed by the client"))
        # TLS has no half-close: its transport closes after a close_notify whatever this
        # returns (and asyncio warns on True), so the answer in process is dropped there
        return keep_open and self.listener.ssl_context is None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.limits.forget(self)
        if self._failure is None:
            self._failure = ConnectionResetError(str(exc) if exc else "connection closed")
        self._wake()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake()

    # -- called by the group -----------------------------------------------------------

    def memory_granted(self, reservation: Reservation) -> None:
        if self.closing:  # (the group's grant loop is running: it goes on to the next)
            self.limits.pool.release(reservation)
            return
        self._start_body(reservation)
        self._sync_reading()

    def close_now(self, reason: str) -> None:
        """Close at once (idle, or making room): a pending response is dropped, as a client
        that does not read could otherwise hold the connection open."""
        if self.closing:
            return
        log.info("closing connection from %s:%d on listener %s: %s", self.host, self.port,
                 self.listener.name, reason)
        self.closing = True
        self.limits.forget(self)
        self._uncount()  # now, so that close_excess sees the room it made
        self._transport().abort()

    # -- reading frames ----------------------------------------------------------------

    def _advance(self) -> None:
        """In HEADER: start the next frame if its size prefix has been read."""
        if len(self._pending) < 4:
            if self._eof:
                self._fail(ConnectionResetError("connection closed by the client"))
            return
        (size,) = _SIZE.unpack_from(self._pending)
        if size <= 0 or size > self._frame_bytes_max():
            self._fail(FrameError(f"request of {size} bytes (socket.request.max.bytes="
                                  f"{self.listener.request_bytes_max}, "
                                  f"sasl.server.max.receive.size before authentication)"))
            return
        self._state = _State.WAITING
        reservation = self.limits.reserve(self, size)
        if reservation is not None:
            self._start_body(reservation)
            return
        # not read further until a request finishes somewhere in the group (Kafka's channel
        # muted for memory pressure)
        self._sync_reading()
        self.limits.grant_waiting()  # a small frame may have the reserve at once

    def _start_body(self, reservation: Reservation) -> None:
        self._reservation = reservation
        body = self._body = bytearray(reservation.size)
        taken = min(reservation.size, len(self._pending) - 4)
        body[:taken] = memoryview(self._pending)[4:4 + taken]
        del self._pending[:4 + taken]
        self._filled = taken
        self._state = _State.BODY
        if taken == reservation.size:
            self._frame_complete()
        elif self._eof:
            self._fail(ConnectionResetError("connection closed by the client"))

    def _frame_complete(self) -> None:
        self._state = _State.HANDLING
        self._ready, self._body = self._body, None
        self._wake()

    def _sync_reading(self) -> None:
        """Read while a frame's bytes are wanted and the read-ahead has room; not while
        waiting for memory (Kafka mutes the channel), nor after a failure or the end."""
        if self._tls_swapping:
            return  # synced once start_tls hands us TLS's transport
        transport = self._transport()
        want = (not self.closing and self._failure is None and not self._eof
                and self._state is not _State.WAITING
                and (self._state is _State.BODY or len(self._pending) < READ_AHEAD_BYTES))
        if want and not self._reading:
            self._reading = True
            transport.resume_reading()
        elif not want and self._reading:
            self._reading = False
            transport.pause_reading()

    # -- the connection's task ---------------------------------------------------------

    async def _run(self) -> None:
        task = asyncio.current_task()
        try:
            await self._serve()
        except (ConnectionError, asyncio.CancelledError):
            pass
        except FrameError as error:
            log.info("closing connection from %s:%s: %s", self.host, self.port, error)
        except InvariantViolation as error:
            self.listener.on_fatal(error)
        except Exception:
            log.exception("closing connection from %s:%s after an unexpected error",
                          self.host, self.port)
        finally:
            if task is not None:
                self.listener._connections.discard(task)
            self._shutdown()
            dispatcher = self.listener.dispatcher
            if isinstance(dispatcher, ConnectionObserver):
                dispatcher.connection_closed(self.host, self.port)

    async def _serve(self) -> None:
        if self.listener.ssl_context is not None:
            await self._start_tls(self.listener.ssl_context)
        while True:
            frame = await self._next_frame()
            ended: Outcome | None = None
            try:
                outcome = self._sasl_step(frame)
                if outcome is None or outcome.decision is Decision.PASS_TO_DISPATCHER:
                    response = await self.listener._respond(frame, self.host, self.port,
                                                            self.principal)
                elif outcome.decision is Decision.RESPOND:
                    response = outcome.response
                else:
                    response, ended = None, outcome
            finally:
                del frame  # the frame's bytes go before its reservation does
                self._release_memory()
            if ended is not None:
                await self._end_authentication(ended)
                return
            if self.closing:
                return
            self._state = _State.WRITING
            if response is not None:
                self._transport().write(response)
                while self._write_paused:
                    await self._wait()
            self.last_active = self.loop.time()
            self._state = _State.HEADER
            self._advance()  # the next frame may have been read ahead already
            self._sync_reading()

    # -- TLS -----------------------------------------------------------------------------

    async def _start_tls(self, context: ssl.SSLContext) -> None:
        """The server side of the handshake, on the accepted connection (so that a failed
        one is logged here with the peer and OpenSSL's reason, which asyncio's own accept
        path would keep to itself); then frames are read from the TLS transport."""
        raw = self._transport()
        # runs after start_tls has put its TLS protocol on the transport, before that
        # protocol's connection_made starts the handshake
        self.loop.call_soon(self._feed_tls, raw)
        try:
            tls = await self.loop.start_tls(
                raw, self, context, server_side=True,
                ssl_handshake_timeout=self.listener.tls_handshake_timeout_s)
        except (ssl.SSLError, OSError, TimeoutError, EOFError) as error:
            if not self.listener._closing:  # (a timeout may have closed the connection)
                log.info("TLS handshake with %s:%d on listener %s failed: %s", self.host,
                         self.port, self.listener.name, _tls_reason(error))
            raise ConnectionResetError("TLS handshake failed") from None
        if tls is None or self.closing:
            raise ConnectionResetError("closed during the TLS handshake")
        self.transport = tls
        self._tls_swapping = False
        self.principal = self._certificate_principal(tls.get_extra_info("ssl_object"))
        self._reading = True  # a new TLS transport reads from the start
        self._sync_reading()

    def _feed_tls(self, raw: asyncio.Transport) -> None:
        """Hand the bytes read before TLS took the transport over to its protocol (through
        the BufferedProtocol calls the transport itself would make)."""
        protocol = raw.get_protocol()
        if protocol is self:
            return
        self._tls_pending, self._tls_swapping = False, True
        if not self._pending:
            return
        # (uvloop's TLS protocol has the calls without subclassing asyncio's class)
        protocol = cast(asyncio.BufferedProtocol, protocol)
        data, self._pending = self._pending, bytearray()
        offset = 0
        while offset < len(data):
            buffer = memoryview(protocol.get_buffer(len(data) - offset))
            count = min(len(buffer), len(data) - offset)
            buffer[:count] = data[offset:offset + count]
            protocol.buffer_updated(count)
            offset += count

    def _certificate_principal(self, ssl_object: ssl.SSLObject | None) -> KafkaPrincipal:
        """SSL: the user the verified client certificate's name maps to; SASL_SSL: ANONYMOUS
        until SASL authenticates."""
        if self.listener.security_protocol != "SSL" or ssl_object is None:
            return ANONYMOUS
        der = ssl_object.getpeercert(binary_form=True)
        if not der:
            return ANONYMOUS
        try:
            return KafkaPrincipal.user(principal_name(der, self.listener.principal_mapper))
        except ValueError as error:  # NoMatchingRule, an unreadable certificate
            log.info("refusing the TLS connection from %s:%d on listener %s: %s", self.host,
                     self.port, self.listener.name, error)
            raise ConnectionResetError("no principal for the certificate") from None

    # -- SASL (net/sasl.py decides; this only moves its frames) ----------------------------

    def _sasl_step(self, frame: memoryview) -> Outcome | None:
        """What the connection's SASL state makes of a frame; None: an ordinary request.
        On a listener without SASL, SaslHandshake and SaslAuthenticate are answered
        ILLEGAL_SASL_STATE, as Kafka's KafkaApis answers them."""
        authenticator = self._sasl
        if authenticator is None:
            if len(frame) < 2 or int.from_bytes(frame[:2], "big") not in SASL_APIS:
                return None
            response = illegal_state_response(parse_request_header(frame), frame)
            if response is None:
                raise FrameError("malformed SASL request")
            return Outcome(Decision.RESPOND, response)
        outcome = authenticator.receive(frame, int(time.time() * 1000))
        if authenticator.authenticated and authenticator.principal is not None:
            self.principal = authenticator.principal
        return outcome

    async def _end_authentication(self, outcome: Outcome) -> None:
        """Close after a refused authentication (FAIL: Kafka's error response after
        connection.failed.authentication.delay.ms, so a guesser gains no speed) or a request
        SASL does not allow (CLOSE: at once). The frame's memory is already released; the
        connection keeps only its place in the quotas meanwhile."""
        log.info("closing connection from %s:%d on listener %s: %s", self.host, self.port,
                 self.listener.name, outcome.reason)
        if outcome.decision is not Decision.FAIL:
            return
        assert self.listener.sasl is not None
        delay_ms = self.listener.sasl.failed_authentication_delay_ms
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000)
        if outcome.response is None or self.closing:
            return
        self._transport().write(outcome.response)  # close() below flushes it first
        # A client that reads the answer and the close in one go may drop the answer
        # (kafka-python does): the peer gets a moment to read it and close first.
        deadline = self.loop.time() + FAILED_AUTHENTICATION_LINGER_S
        while not (self._eof or self.closing or self._failure is not None) \
                and self.loop.time() < deadline:
            await asyncio.sleep(0.01)

    def _frame_bytes_max(self) -> int:
        """Before authentication a frame is at most sasl.server.max.receive.size."""
        authenticator = self._sasl
        if authenticator is not None and not authenticator.authenticated:
            return min(self.listener.request_bytes_max, authenticator.frame_bytes_max)
        return self.listener.request_bytes_max

    async def _next_frame(self) -> memoryview:
        while self._ready is None:
            await self._wait()
        frame, self._ready = self._ready, None
        return memoryview(frame).toreadonly()  # the decoders read buffers, not only bytes

    async def _wait(self) -> None:
        if self._failure is not None:
            raise self._failure
        self._waiter = self.loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self._failure is not None:
            raise self._failure

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        self._sync_reading()
        self._wake()

    def _release_memory(self) -> None:
        reservation, self._reservation = self._reservation, None
        if reservation is not None:
            self.limits.release(reservation)

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self.limits.quotas.release(self.listener.name, self.address)

    def _shutdown(self) -> None:
        self.closing = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self.limits.forget(self)
        self._body = self._ready = None
        self._pending = bytearray()
        self._release_memory()
        self._uncount()
        self.limits.connections.discard(self)
        self._transport().close()

    def _transport(self) -> asyncio.Transport:
        assert self.transport is not None
        return self.transport

    # -- connections.max.idle.ms -------------------------------------------------------

    def _arm_idle_timer(self, since: float) -> None:
        idle_ms = self.limits.connections_max_idle_ms
        if idle_ms >= 0:
            self._idle_timer = self.loop.call_at(since + idle_ms / 1000, self._check_idle)

    def _check_idle(self) -> None:
        if self.closing:
            return
        now = self.loop.time()
        if self._state in _BUSY:
            self._arm_idle_timer(now)
        elif now >= self.last_active + self.limits.connections_max_idle_ms / 1000:
            self.close_now(f"nothing read for connections.max.idle.ms="
                           f"{self.limits.connections_max_idle_ms}")
        else:
            self._arm_idle_timer(self.last_active)


class Listener:
    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        dispatcher: Dispatcher,
        *,
        request_bytes_max: int,
        on_fatal: Callable[[BaseException], None],
        limits: NetworkLimits | None = None,
        ssl_context: ssl.SSLContext | None = None,
        security_protocol: str = "PLAINTEXT",
        principal_mapper: PrincipalMapper | None = None,
        tls_handshake_timeout_s: float = TLS_HANDSHAKE_TIMEOUT_S,
        sasl: ListenerSasl | None = None,
    ) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.dispatcher = dispatcher
        self.request_bytes_max = request_bytes_max
        self.on_fatal = on_fatal
        # TLS (SSL and SASL_SSL listeners): None is plaintext
        self.ssl_context = ssl_context
        self.security_protocol = security_protocol
        self.principal_mapper = principal_mapper or PrincipalMapper.parse(None)
        self.tls_handshake_timeout_s = tls_handshake_timeout_s
        # SASL_PLAINTEXT and SASL_SSL listeners: what connections authenticate with
        self.sasl = sasl
        # no limits given (tools, tests of one layer): Kafka's defaults, unbounded
        self.limits = limits if limits is not None else NetworkLimits()
        self.limits.quotas.add_listener(name)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._closing = False

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), self.host, self.port, reuse_address=True
        )
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        log.info("listener %s on %s:%d", self.name, self.host, self.port)

    async def close(self) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
        # a connection accepted just before has its handler task scheduled but not started:
        # let it run its first step, which sees `_closing` and closes the connection
        await asyncio.sleep(0)
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _respond(self, frame: memoryview, host: str, port: int,
                       principal: KafkaPrincipal = ANONYMOUS) -> bytes | None:
        header = parse_request_header(frame)
        if not supports(self.dispatcher.apis, header.api_key, header.api_version):
            if header.api_key == ApiKey.API_VERSIONS:
                return encode_response(
                    header.correlation_id, self.dispatcher.unsupported_api_versions_response()
                )
            raise FrameError(
                f"unsupported API {header.api_key} v{header.api_version} "
                f"from client {header.client_id!r}"
            )
        try:
            if is_flexible(header.api_key, header.api_version):
                header = skip_header_tags(header, frame)
            request = decode_request(header, frame)
        except (InvalidRequest, UnknownAPIKey, UnknownEntity) as error:
            raise FrameError(str(error)) from error
        context = RequestContext(header, self.name, host, port, principal,
                                 self.security_protocol)
        response = await self.dispatcher.handle(context, request)
        if response is None:
            return None
        started = time.perf_counter()
        encoded = encode_response(header.correlation_id, response)
        took = time.perf_counter() - started
        if took >= SLOW_ENCODE_S:
            log.warning("encoding a response to %s v%d (%d bytes) for client %r took %.1f s",
                        api_name(header.api_key), header.api_version, len(encoded),
                        header.client_id, took)
        return encoded


def _tls_reason(error: BaseException) -> str:
    """OpenSSL's reason for a failed handshake, in one line."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"{error.reason}: {error.verify_message}"
    if isinstance(error, ssl.SSLError):
        return str(error.reason or error)
    if isinstance(error, TimeoutError):
        return "timed out"
    return str(error) or type(error).__name__


Handler = Callable[[RequestContext, Any], Awaitable[Any | None]]
