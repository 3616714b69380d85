"""A TCP relay on loopback for fault tests: cut and heal every connection through it, or
drop chosen Kafka responses (the request reaches the broker, its answer never reaches the
client, and the connection is closed, as a network fault between the two would do).

Dropping reads the Kafka framing of both directions: client -> broker frames give each
correlation id's API key, broker -> client frames start with the correlation id. A client
whose connection closes with requests in flight retries them: a dropped Produce response
makes the client send the same batch again, the duplicate an idempotent producer's
sequence numbers let the broker recognise.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable

__all__ = ["FaultProxy"]

_SIZE = struct.Struct(">i")
_REQUEST_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id
_CORRELATION = struct.Struct(">i")
FRAME_BYTES_MAX = 256 << 20


class FaultProxy:
    """Relay 127.0.0.1:`port` to 127.0.0.1:`target_port`.

    `drop_response(api_key)` is asked for each response; True drops it and closes the
    connection. `target_port` may be set after construction (before the first client
    connects), so a node can advertise the proxy's port before the node's own is known."""

    def __init__(self, target_port: int = 0, *,
                 drop_response: Callable[[int], bool] | None = None) -> None:
        self.target_port = target_port
        self.drop_response = drop_response
        self.dropped = 0
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = int(self.server.getsockname()[1])
        self.is_cut = False
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.is_cut:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), 5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets |= {client, upstream}
            pumps: list[tuple[Callable[..., None], tuple[object, ...]]]
            if self.drop_response is None:
                pumps = [(self._pump, (client, upstream)), (self._pump, (upstream, client))]
            else:
                api_keys: dict[int, int] = {}  # correlation id -> api key, per connection
                pumps = [(self._requests, (client, upstream, api_keys)),
                         (self._responses, (upstream, client, api_keys))]
            for target, args in pumps:
                threading.Thread(target=target, args=args, daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        self._close(source, target)

    def _requests(self, client: socket.socket, upstream: socket.socket,
                  api_keys: dict[int, int]) -> None:
        try:
            while (frame := _read_frame(client)) is not None:
                api_key, _, correlation_id = _REQUEST_HEAD.unpack_from(frame, 4)
                with self._lock:
                    api_keys[correlation_id] = api_key
                upstream.sendall(frame)
        except OSError:
            pass
        self._close(client, upstream)

    def _responses(self, upstream: socket.socket, client: socket.socket,
                   api_keys: dict[int, int]) -> None:
        assert self.drop_response is not None
        try:
            while (frame := _read_frame(upstream)) is not None:
                (correlation_id,) = _CORRELATION.unpack_from(frame, 4)
                with self._lock:
                    api_key = api_keys.pop(correlation_id, -1)
                if self.drop_response(api_key):
                    with self._lock:
                        self.dropped += 1
                    break
                client.sendall(frame)
        except OSError:
            pass
        self._close(upstream, client)

    def _close(self, *sockets: socket.socket) -> None:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
            with self._lock:
                self._sockets.discard(sock)

    def cut(self) -> None:
        """Close every connection through the proxy; new ones are closed at once."""
        self.is_cut = True
        with self._lock:
            doomed, self._sockets = self._sockets, set()
        self._close(*doomed)

    def heal(self) -> None:
        self.is_cut = False

    def close(self) -> None:
        self.cut()
        self.server.close()


def _read_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed frame (size included), or None at end of stream."""
    head = _read_exactly(sock, _SIZE.size)
    if head is None:
        return None
    (size,) = _SIZE.unpack(head)
    if not 0 < size <= FRAME_BYTES_MAX:
        return None
    body = _read_exactly(sock, size)
    return None if body is None else head + body


def _read_exactly(sock: socket.socket, count: int) -> bytes | None:
    chunks, remaining = [], count
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
