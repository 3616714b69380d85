"""A minimal blocking Kafka protocol client for tests: send one kio request, read its answer.

Real clients hide error codes behind retries; tests of the protocol edge need to see exactly
what the broker answered, at an exact API version.
"""

from __future__ import annotations

import socket
import struct
import time
from types import TracebackType
from typing import Any

from pykraft.protocol.framing import decode_response, encode_request


class WireClient:
    def __init__(self, bootstrap: str, *, timeout_s: float = 10.0,
                 client_id: str = "wire-test") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.client_id = client_id
        self._correlation_id = 0
        self.last_response_bytes = 0  # size of the last response frame (benchmarks)
        # time.monotonic() when the last response frame was read, before it was decoded
        self.last_response_at = 0.0

    def send(self, api_key: int, api_version: int, request: Any) -> int:
        """Send without reading a response (produce with acks=0); return the correlation id."""
        self._correlation_id += 1
        frame = encode_request(api_key, api_version, self._correlation_id, self.client_id,
                               request)
        self.sock.sendall(frame)
        return self._correlation_id

    def request(self, api_key: int, api_version: int, request: Any) -> Any:
        correlation_id = self.send(api_key, api_version, request)
        answered_id, response = self.receive(api_key, api_version)
        if answered_id != correlation_id:
            raise AssertionError(f"correlation id {answered_id}, expected {correlation_id}")
        return response

    def receive(self, api_key: int, api_version: int) -> tuple[int, Any]:
        (size,) = struct.unpack(">i", self._read_exactly(4))
        self.last_response_bytes = 4 + size
        body = self._read_exactly(size)
        self.last_response_at = time.monotonic()
        return decode_response(api_key, api_version, body)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_exactly(self, size: int) -> bytes:
        chunks, remaining = [], size
        while remaining:
            chunk = self.sock.recv(min(remaining, 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def is_closed_by_peer(self, wait_s: float = 2.0) -> bool:
        """True when the broker closes the connection within `wait_s`."""
        self.sock.settimeout(wait_s)
        try:
            return self.sock.recv(1) == b""
        except TimeoutError:
            return False
        except ConnectionError:
            return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
