"""What clients can make a real node hold (issue 17): request bytes (queued.max.request.bytes),
connections (max.connections, max.connections.per.ip and its overrides) and idle connections
(connections.max.idle.ms), seen from outside over raw sockets and a real client."""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

from pykraft.protocol.framing import encode_request
from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient

MIB = 1024 * 1024
FRAME = 50 * MIB  # what each hanging client announces
POOL = 60 * MIB  # queued.max.request.bytes
HANGERS = 12  # 12 x 25 MiB sent: 300 MiB offered, against a bound of 60 + 50 MiB
RSS_MARGIN = 40 * MIB  # the event loop's own churn, a Metadata answer, the producer's topic


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _pid(cluster: LocalCluster) -> int:
    assert cluster.process is not None
    return cluster.process.pid


def _api_versions(correlation_id: int = 1, size: int | None = None) -> bytes:
    """An ApiVersions request, padded with zeros to `size` bytes (trailing bytes are ignored,
    as Kafka's parser ignores them)."""
    body = encode_request(18, 3, correlation_id, "limits", ApiVersionsRequest(
        client_software_name="limits", client_software_version="1"))[4:]
    if size is not None:
        body += bytes(size - len(body))
    return struct.pack(">i", len(body)) + body


def _answers(bootstrap: str, timeout_s: float = 5.0) -> bool:
    with WireClient(bootstrap, timeout_s=timeout_s) as client:
        response = client.request(18, 3, ApiVersionsRequest(
            client_software_name="limits", client_software_version="1"))
        return int(response.error_code) == 0


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    return sock


def _closed_by_peer(sock: socket.socket, wait_s: float = 3.0) -> bool:
    ready, _, _ = select.select([sock], [], [], wait_s)
    if not ready:
        return False
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True


def _answer(sock: socket.socket) -> int | None:
    """The correlation id of the next response on `sock`; None when the node closed it."""
    received = b""
    while len(received) < 8:
        chunk = sock.recv(8 - len(received))
        if not chunk:
            return None
        received += chunk
    size, correlation_id = struct.unpack(">ii", received)
    remaining = size - 4
    while remaining:
        chunk = sock.recv(min(remaining, 65536))
        if not chunk:
            return None
        remaining -= len(chunk)
    return int(correlation_id)


def _ask(sock: socket.socket, correlation_id: int = 1) -> bool:
    """Send ApiVersions on `sock` and read the answer; False when the node closed it."""
    try:
        sock.sendall(_api_versions(correlation_id))
        return _answer(sock) == correlation_id
    except (ConnectionError, TimeoutError):
        return False


def _until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _send_some(socks: list[socket.socket], data: bytes, seconds: float) -> list[int]:
    """Push `data` down every socket without blocking, for at most `seconds`; the node reads
    only the ones it has memory for, so the others fill their kernel buffers and stop."""
    sent = [0] * len(socks)
    for sock in socks:
        sock.setblocking(False)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and min(sent) < len(data):
        progress = False
        for index, sock in enumerate(socks):
            if sent[index] < len(data):
                try:
                    sent[index] += sock.send(data[sent[index]:sent[index] + MIB])
                    progress = True
                except BlockingIOError:
                    pass
        if not progress:
            time.sleep(0.02)
    return sent


@pytest.fixture
def bounded_node() -> Iterator[LocalCluster]:
    with LocalCluster(configs={
        "socket.request.max.bytes": str(FRAME),
        "queued.max.request.bytes": str(POOL),
        "connections.max.idle.ms": "120000",  # the hanging clients stay for the test
        "num.partitions": "1",
    }) as cluster:
        yield cluster


def test_half_sent_large_requests_hold_at_most_the_pool(bounded_node: LocalCluster) -> None:
    node, pid = bounded_node, _pid(bounded_node)
    assert _answers(node.bootstrap_servers)
    baseline = _rss(pid)
    port = node.broker_port
    hangers = [_connect(port) for _ in range(HANGERS)]
    half = _api_versions(size=FRAME)[:4 + FRAME // 2]
    try:
        sent = _send_some(hangers, half, seconds=4.0)
        # two frames had memory (the pool goes negative by one request, as Kafka's); their
        # halves were all read; the others are muted after their size prefix
        assert sorted(sent)[-2:] == [len(half), len(half)], sent
        time.sleep(0.5)
        held = _rss(pid) - baseline
        print(f"RSS baseline {baseline / MIB:.0f} MiB, with {HANGERS} clients each half-way "
              f"through a {FRAME // MIB} MiB request: +{held / MIB:.0f} MiB "
              f"({sum(sent) / MIB:.0f} MiB sent)")
        assert held <= POOL + FRAME + RSS_MARGIN, held / MIB
        # the node still answers, on new connections: small requests have the reserve
        started = time.monotonic()
        assert _answers(node.bootstrap_servers)
        with WireClient(node.bootstrap_servers) as client:
            metadata = client.request(3, 12, MetadataRequest(
                topics=None, allow_auto_topic_creation=False,
                include_topic_authorized_operations=False))
            assert [broker.node_id for broker in metadata.brokers] == [1]
        producer = Producer({"bootstrap.servers": node.bootstrap_servers,
                             "message.timeout.ms": 10000})
        delivered: list[str | None] = []
        producer.produce("limits", b"still served",
                         on_delivery=lambda error, message: delivered.append(
                             None if error is None else str(error)))
        assert producer.flush(12) == 0 and delivered == [None], delivered
        print(f"ApiVersions, Metadata and a produce answered in "
              f"{time.monotonic() - started:.1f} s while they hung")
    finally:
        for sock in hangers:
            sock.close()
    # their memory comes back: RSS falls, and a whole frame as large as the limit is served
    _until(lambda: _rss(pid) - baseline <= RSS_MARGIN, 10, "RSS did not fall back")
    print(f"after they left: +{(_rss(pid) - baseline) / MIB:.0f} MiB")
    with _connect(port) as sock:
        sock.settimeout(20)
        sock.sendall(_api_versions(correlation_id=9, size=FRAME))
        assert _answer(sock) == 9


def test_connection_caps_per_ip_with_override_and_for_the_node() -> None:
    with LocalCluster(configs={
        "max.connections": "8",
        "max.connections.per.ip": "3",
        "max.connections.per.ip.overrides": "127.0.0.2:5",
    }) as node:
        port = node.broker_port
        time.sleep(0.3)  # the readiness checks' connections are gone
        held: list[socket.socket] = []
        try:
            for _ in range(3):
                held.append(_connect(port))
                assert _ask(held[-1])
            over = _connect(port)
            assert _closed_by_peer(over), "the 4th connection from 127.0.0.1 was kept"
            over.close()
            for _ in range(5):  # the override lets 127.0.0.2 have five
                held.append(_connect(port, "127.0.0.2"))
                assert _ask(held[-1])
            over = _connect(port, "127.0.0.2")
            assert _closed_by_peer(over), "the 6th connection from 127.0.0.2 was kept"
            over.close()
            # 8 open: max.connections refuses a third address too
            over = _connect(port, "127.0.0.3")
            assert _closed_by_peer(over), "a 9th connection to the broker listener was kept"
            over.close()
            # the controller listener has its own count: not starved by clients
            with WireClient(f"127.0.0.1:{node.controller_port}") as controller:
                response = controller.request(18, 3, ApiVersionsRequest(
                    client_software_name="limits", client_software_version="1"))
                assert int(response.error_code) == 0
            # a slot freed is a slot taken
            held.pop(0).close()

            def slot() -> bool:
                held.append(_connect(port))
                return _ask(held[-1])

            _until(slot, 5, "no slot after one connection closed")
        finally:
            for sock in held:
                sock.close()


def test_idle_connections_are_closed_after_connections_max_idle_ms() -> None:
    idle_ms = 1500
    with LocalCluster(configs={"connections.max.idle.ms": str(idle_ms),
                               "max.connections.per.ip": "4"}) as node:
        port = node.broker_port
        time.sleep(0.3)
        quiet, chatty, stalled = _connect(port), _connect(port), _connect(port)
        try:
            assert _ask(chatty) and _ask(quiet)
            last_active = {"quiet": time.monotonic()}
            stalled.sendall(_api_versions(size=10 * MIB)[:MIB])  # part of a frame, no more
            last_active["stalled"] = started = time.monotonic()
            closed: dict[str, float] = {}
            correlation_id = 1
            while len(closed) < 2 and time.monotonic() - started < 3 * idle_ms / 1000:
                correlation_id += 1
                assert _ask(chatty, correlation_id), "a connection in use was closed"
                for name, sock in (("quiet", quiet), ("stalled", stalled)):
                    if name not in closed and _closed_by_peer(sock, 0.05):
                        closed[name] = round(time.monotonic() - last_active[name], 2)
                time.sleep(0.2)
            assert set(closed) == {"quiet", "stalled"}, closed
            # the node's clock starts when it has read the bytes, after the client's did
            assert all(idle_ms / 1000 * 0.95 <= at for at in closed.values()), closed
            print(f"closed after {closed} s (connections.max.idle.ms={idle_ms})")
            # their slots are free again: four more are accepted, the fifth is not
            more = [_connect(port) for _ in range(3)]
            assert all(_ask(sock) for sock in more)
            extra = _connect(port)
            assert _closed_by_peer(extra)
            for sock in (*more, extra):
                sock.close()
        finally:
            for sock in (quiet, chatty, stalled):
                sock.close()
