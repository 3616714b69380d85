"""Live fuzz: mutated frames of every API a node serves, on both its listeners, over a few
persistent connections to a real node process.

Each frame is first put through the listener's own decoding path here (fuzz.decode_like_
listener), which says what the node must do with it:

- it decodes: the node answers within ANSWER_SECONDS, on the same connection, with a
  response of the same correlation id that decodes as that API's response (a Kafka error
  code, not a closed connection). Produce with acks=0 has no answer: a ping after it must be
  answered instead.
- it does not decode: the node closes the connection (ApiVersions of a version it lacks is
  answered, with its v0 body).
- it is incomplete (its size claims more bytes than were sent): nothing is owed; the
  connection is dropped by us.

Requests that would change durable state in proportion to their input, or stop the node
serving the final check, are rewritten before they are sent (see `_tame`): CreateTopics,
CreatePartitions, AlterConfigs, IncrementalAlterConfigs and UpdateFeatures become
validate_only; DeleteTopics and reassignments never name the protected topics; a long poll
waits at most LONG_POLL_MS; UpdateFeatures v0 (no validate_only) is not sent decodable.
JoinGroup and SyncGroup may legitimately wait for other members: they go on connections of
their own, whose answers are checked when they come.

Throughout, the node process stays alive and its RSS does not grow by more than
RSS_GROWTH_MAX_KIB over the second half of the run; its log holds no unexpected-error
traceback; at the end a real client (confluent-kafka) produces to and consumes from a new
topic.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import random
import re
import select
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.serial.errors import OutOfBoundValue

from pykraft.broker.group_apis import JOIN_GROUP, SYNC_GROUP
from pykraft.protocol.api import ApiKey, supports
from pykraft.protocol.framing import decode_response, encode_request, parse_request_header
from pykraft.testing import LocalCluster
from pykraft.testing.fuzz import (
    BROKER_LISTENER_APIS,
    CONTROLLER_LISTENER_APIS,
    DECODE_ERRORS,
    TOPIC,
    Seed,
    case_rng,
    decode_like_listener,
    fresh_seed,
    mutate,
    seed_frames,
)
from pykraft.testing.wire import WireClient
from tests.fuzz.runs import Rate, Run, rss_kib, run_for
from tests.integration.test_clients_round_trip import create_topic

ANSWER_SECONDS = 5.0
CLOSE_SECONDS = 5.0
LONG_POLL_MS = 200
WAITING_SECONDS = 60.0  # a JoinGroup or SyncGroup parked longer than this is given up
WAITING_MAX = 16  # parked connections at once; further waiting requests are not sent
CONNECTIONS = {"broker": 3, "controller": 1}
RSS_GROWTH_MAX_KIB = 128 << 10
FRESH_SHARE = 0.4  # cases that are new random requests (most reach a handler), not mutants
LIVENESS_EVERY = 500  # cases between checks that the process lives, and RSS samples
NODE_CONFIGS = {
    "auto.create.topics.enable": "false",  # mutated names must not become topics
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
}
PROTECTED = frozenset({TOPIC, "fuzz-final"})
WAITING_APIS = frozenset({JOIN_GROUP, SYNC_GROUP})
LISTENER_APIS = {"broker": BROKER_LISTENER_APIS, "controller": CONTROLLER_LISTENER_APIS}
SEEDS = {name: seed_frames(apis, random.Random(f"live-seeds:{name}"))
         for name, apis in LISTENER_APIS.items()}
_UNEXPECTED = re.compile(r"unexpected error|Traceback", re.IGNORECASE)


class Skip(Exception):
    """This decodable request is not sent (it would change what the fuzz must keep)."""


def _protected(name: object) -> bool:
    return isinstance(name, str) and (name in PROTECTED or name.startswith("__"))


def _tame(api_key: int, version: int, request: Any, cluster_id: str, node_id: int) -> Any:
    """The request with its durable or waiting effects bounded (see the module doc)."""
    fields = {field.name for field in dataclasses.fields(request)}
    changes: dict[str, Any] = {}
    if "validate_only" in fields:
        changes["validate_only"] = True
    elif api_key == ApiKey.UPDATE_FEATURES:
        raise Skip("UpdateFeatures v0 has no validate_only")
    if "max_wait" in fields and request.max_wait > datetime.timedelta(milliseconds=LONG_POLL_MS):
        changes["max_wait"] = datetime.timedelta(milliseconds=LONG_POLL_MS)
    if api_key == ApiKey.DELETE_TOPICS:
        if "topic_names" in fields:
            changes["topic_names"] = tuple(n for n in request.topic_names if not _protected(n))
        if "topics" in fields:
            changes["topics"] = tuple(t for t in request.topics
                                      if t.name is not None and not _protected(t.name))
    if api_key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
        changes["topics"] = tuple(t for t in request.topics if not _protected(t.name))
    if "broker_id" in fields and request.broker_id == node_id:
        changes["broker_id"] = node_id + 1000  # never this node's own registration
    if "cluster_id" in fields and request.cluster_id == cluster_id:
        raise Skip("a quorum or lifecycle request for this very cluster")
    return dataclasses.replace(request, **changes) if changes else request


@dataclasses.dataclass
class Parked:
    sock: socket.socket
    correlation_id: int
    api_key: int
    api_version: int
    since: float
    case: int


class Node:
    """The node under fuzz: its listeners, connections, and what it must answer."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.addresses = {"broker": ("127.0.0.1", cluster.broker_port),
                          "controller": ("127.0.0.1", cluster.controller_port)}
        self.connections: dict[str, list[socket.socket | None]] = {
            name: [None] * count for name, count in CONNECTIONS.items()}
        self.parked: list[Parked] = []
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.current = ""  # the case being sent, for a failure's note

    def connect(self, listener: str) -> socket.socket:
        sock = socket.create_connection(self.addresses[listener], timeout=ANSWER_SECONDS)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def connection(self, listener: str, slot: int) -> socket.socket:
        sock = self.connections[listener][slot]
        if sock is None:
            sock = self.connections[listener][slot] = self.connect(listener)
        return sock

    def drop(self, listener: str, slot: int) -> None:
        sock = self.connections[listener][slot]
        if sock is not None:
            sock.close()
        self.connections[listener][slot] = None

    def close(self) -> None:
        for name, socks in self.connections.items():
            for slot in range(len(socks)):
                self.drop(name, slot)
        for parked in self.parked:
            parked.sock.close()


def _read_exactly(sock: socket.socket, size: int, deadline: float) -> bytes:
    chunks, remaining = [], size
    while remaining:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            raise ConnectionError("closed by the node")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _answer(sock: socket.socket, api_key: int, api_version: int, correlation_id: int,
            seconds: float = ANSWER_SECONDS) -> None:
    """Read one response: it must come in time, carry the correlation id and decode."""
    deadline = time.monotonic() + seconds
    (size,) = struct.unpack(">i", _read_exactly(sock, 4, deadline))
    assert 0 < size < 1 << 30, f"response size {size}"
    data = _read_exactly(sock, size, deadline)
    (answered,) = struct.unpack_from(">i", data)
    assert answered == correlation_id, f"correlation id {answered}, sent {correlation_id}"
    try:
        decode_response(api_key, api_version, data)
    except OutOfBoundValue as error:
        # kio reads a timestamp field as a datetime and refuses -1, which Kafka sends for
        # "none" (DescribeTransactions of a transaction not started); Java clients read it
        if "negative timestamp" not in str(error):
            raise


def _closed(sock: socket.socket, seconds: float = CLOSE_SECONDS) -> bool:
    """True when the node closes the connection within `seconds` (bytes it sends first, such
    as answers to requests before the bad one, are read past)."""
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            if not sock.recv(1 << 16):
                return True
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return False


def _ping(sock: socket.socket, correlation_id: int) -> None:
    sock.sendall(encode_request(ApiKey.API_VERSIONS, 3, correlation_id, "fuzz-ping",
                                ApiVersionsRequest(client_software_name="fuzz",
                                                   client_software_version="1")))
    _answer(sock, ApiKey.API_VERSIONS, 3, correlation_id)


def _one_case(node: Node, run: Run, index: int, cluster_id: str) -> str:
    rng = case_rng(run.seed, run.layer, index)
    listener = "broker" if rng.random() < 0.85 else "controller"
    seeds: list[Seed] = SEEDS[listener]
    if rng.random() < FRESH_SHARE:
        seed = fresh_seed(LISTENER_APIS[listener], rng)
        kind, frame = "fresh", seed.frame
    else:
        seed, kind, frame = mutate(rng, seeds)
    slot = rng.randrange(CONNECTIONS[listener])
    node.current = (f"{kind} of api {seed.api_key} v{seed.api_version} to the {listener} "
                    f"listener: {frame.hex()}")
    try:
        decoded = decode_like_listener(frame, LISTENER_APIS[listener])
    except DECODE_ERRORS:
        return _expect_close(node, listener, slot, frame)
    if decoded is None:  # the node waits for bytes that never come: nothing is owed
        node.connection(listener, slot).sendall(frame)
        node.drop(listener, slot)
        return "incomplete"
    header, request = decoded
    try:
        tamed = _tame(header.api_key, header.api_version, request, cluster_id,
                      node.cluster.node_id)
    except Skip:
        return "skipped"
    if tamed is not request:
        frame = encode_request(header.api_key, header.api_version, header.correlation_id,
                               header.client_id, tamed)
        node.current += f"\nsent tamed: {frame.hex()}"
    if header.api_key in WAITING_APIS:
        return _park(node, listener, frame, header.api_key, header.api_version,
                     header.correlation_id, index)
    sock = node.connection(listener, slot)
    sock.sendall(frame)
    if header.api_key == ApiKey.PRODUCE and request.acks == 0:
        _ping(sock, header.correlation_id ^ 0x5A5A)
        return "acks=0"
    _answer(sock, header.api_key, header.api_version, header.correlation_id)
    return "answered"


def _expect_close(node: Node, listener: str, slot: int, frame: bytes) -> str:
    sock = node.connection(listener, slot)
    header = None
    try:
        header = parse_request_header(frame[4:])
    except DECODE_ERRORS:
        pass
    sock.sendall(frame)
    (size,) = struct.unpack_from(">i", frame)
    if (header is not None and header.api_key == ApiKey.API_VERSIONS
            and not supports(dict(LISTENER_APIS[listener]), header.api_key, header.api_version)
            and 0 < size == len(frame) - 4):
        # a version it lacks is answered with ApiVersions v0 (KIP-511)
        _answer(sock, ApiKey.API_VERSIONS, 0, header.correlation_id)
        return "answered v0"
    assert _closed(sock), "the node kept a connection open after an undecodable frame"
    node.drop(listener, slot)
    return "closed"


def _park(node: Node, listener: str, frame: bytes, api_key: int, version: int,
          correlation_id: int, index: int) -> str:
    if len(node.parked) >= WAITING_MAX:
        return "skipped"
    sock = node.connect(listener)
    sock.sendall(frame)
    node.parked.append(Parked(sock, correlation_id, api_key, version, time.monotonic(), index))
    return "parked"


def _check_parked(node: Node, run: Run, *, final: bool = False) -> None:
    """Check the answers of parked requests that came. One still waiting WAITING_SECONDS
    after it was sent (at the end: waited for until then) is given up: a group may
    legitimately wait for members that never come."""
    still = []
    for parked in node.parked:
        left = parked.since + WAITING_SECONDS - time.monotonic()
        ready, _, _ = select.select([parked.sock], [], [], max(0.0, left) if final else 0.0)
        if ready:
            try:
                _answer(parked.sock, parked.api_key, parked.api_version, parked.correlation_id)
            except BaseException as failure:
                failure.add_note(f"parked case {parked.case}: api {parked.api_key} "
                                 f"v{parked.api_version}")
                failure.add_note(run.replay(parked.case))
                raise
            node.outcomes["parked answered"] += 1
            parked.sock.close()
        elif final or left <= 0:
            node.outcomes["parked unanswered"] += 1
            parked.sock.close()
        else:
            still.append(parked)
    node.parked = still


def _served(address: str) -> dict[int, tuple[int, int]]:
    with WireClient(address) as client:
        response = client.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
            client_software_name="fuzz", client_software_version="1"))
    return {int(api.api_key): (int(api.min_version), int(api.max_version))
            for api in response.api_keys}


def _real_client_round_trip(bootstrap: str) -> None:
    create_topic(bootstrap, "fuzz-final", partitions=1)
    marker = uuid.uuid4().hex.encode()
    producer = Producer({"bootstrap.servers": bootstrap})
    for number in range(10):
        producer.produce("fuzz-final", key=marker, value=b"after-fuzz-%d" % number,
                         partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("fuzz-final", 0, 0)])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 10 and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=100, timeout=1):
            assert message.error() is None, message.error()
            assert message.key() == marker
            values.append(message.value())
    consumer.close()
    assert values == [b"after-fuzz-%d" % number for number in range(10)]


@pytest.fixture
def fuzz_node() -> Iterator[LocalCluster]:
    with LocalCluster(configs=NODE_CONFIGS) as cluster:
        yield cluster


def _fuzz(cluster: LocalCluster, run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    assert cluster.process is not None
    pid = cluster.process.pid
    # the fuzz covers what the node serves: an API added later is seeded, or this fails
    assert _served(cluster.bootstrap_servers) == dict(BROKER_LISTENER_APIS)
    assert _served(f"127.0.0.1:{cluster.controller_port}") == dict(CONTROLLER_LISTENER_APIS)
    create_topic(cluster.bootstrap_servers, TOPIC, partitions=3)
    node = Node(cluster)
    rate = Rate(run, capsys)
    rss_start = rss_kib(pid)
    rss_half: int | None = None
    done = 0
    try:
        for index in run.indexes:
            try:
                outcome = _one_case(node, run, index, cluster.cluster_id)
            except BaseException as failure:
                failure.add_note(f"live case {index}: {node.current}; node log tail:\n"
                                 f"{cluster.tail_log(20)}")
                failure.add_note(run.replay(index))
                raise
            node.outcomes[outcome] += 1
            done += 1
            if done % LIVENESS_EVERY == 0:
                assert cluster.process.poll() is None, "the node process died"
                _check_parked(node, run)
            if done == run.count // 2:
                rss_half = rss_kib(pid)
        _check_parked(node, run, final=True)
    finally:
        node.close()
    assert cluster.process.poll() is None, "the node process died"
    rss_end = rss_kib(pid)
    rate.report(done, f", node RSS {rss_start} -> {rss_half} -> {rss_end} KiB",
                ", ".join(f"{outcome}: {n}" for outcome, n in sorted(node.outcomes.items())))
    if rss_half is not None:
        assert rss_end - rss_half < RSS_GROWTH_MAX_KIB, (rss_half, rss_end)
    _real_client_round_trip(cluster.bootstrap_servers)
    unexpected = [line for line in cluster.log_path.read_text(errors="replace").splitlines()
                  if _UNEXPECTED.search(line)]
    assert not unexpected, "\n".join(unexpected[:20])


def test_live_fuzz(fuzz_node: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    _fuzz(fuzz_node, run_for("live", "tests/fuzz/test_live.py::test_live_fuzz",
                             ci_cases=400, slow=False), capsys)


@pytest.mark.slow
@pytest.mark.timeout(3 * 3600)
def test_live_fuzz_long(fuzz_node: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    _fuzz(fuzz_node, run_for("live", "tests/fuzz/test_live.py::test_live_fuzz_long",
                             ci_cases=0, slow=True), capsys)
