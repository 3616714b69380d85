"""Every API key a node serves, over real sockets, authenticated with SASL/PLAIN as alice,
against the StandardAuthorizer and ACLs made with CreateAcls: without the ACL alice gets
Kafka's authorization error, with exactly the bindings Kafka asks for the same request
succeeds (the issue's "done when" 2; the cases are the unit table's,
tests/unit/broker/test_authorization_table.py, which also checks that a refusal changes
nothing and that every served API has a case).

One combined node for the module. Its PLAINTEXT and CONTROLLER listeners are the super user's
(User:ANONYMOUS: the seed, the ACL changes and the node's own connections); alice speaks on a
SASL_PLAINTEXT broker listener and on a second, SASL_PLAINTEXT controller listener.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kio.schema.create_acls.v3 import request as create_acls
from kio.schema.delete_acls.v3 import request as delete_acls
from kio.schema.describe_acls.v3 import request as describe_acls
from kio.schema.errors import ErrorCode

from pykraft.net.sasl_client import ClientSasl, SaslClientExchange
from pykraft.protocol.acls import PatternType, ResourceType
from pykraft.protocol.api import ApiKey
from pykraft.protocol.framing import decode_response, encode_request
from pykraft.testing.local_cluster import LocalCluster
from pykraft.testing.ports import free_port
from pykraft.testing.wire import WireClient
from tests.unit.broker.test_authorization_table import (
    AUTHORIZATION_ERRORS,
    CASES,
    DOOMED,
    DOOMED_GROUP,
    GROWN,
    Call,
    Case,
    G,
    Grant,
    T,
    create_topic,
    find_group_coordinator,
    find_transaction_coordinator,
    init_producer_id,
    offset_commit,
    produce,
)

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ALICE, PASSWORD = "alice", "alice-secret"
TIMEOUT_S = 20.0
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'user_{ALICE}="{PASSWORD}";')


class SaslWire:
    """A blocking connection authenticated as alice: one request, its decoded answer."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self._correlation_id = 1000
        exchange = SaslClientExchange(ClientSasl("PLAIN", ALICE, PASSWORD),
                                      int(time.time() * 1000), client_id="authz")
        frame = exchange.next_request()
        while frame is not None:
            self.sock.sendall(frame)
            exchange.receive(self._frame())
            frame = exchange.next_request()

    def request(self, call: Call) -> Any:
        self._correlation_id += 1
        self.sock.sendall(encode_request(call.api_key, call.version, self._correlation_id,
                                         "authz", call.request()))
        frame = self._frame()
        if call.api_key == ApiKey.DESCRIBE_TRANSACTIONS:
            return _transaction_state_codes(frame)
        answered, response = decode_response(call.api_key, call.version, frame)
        assert answered == self._correlation_id
        return response

    def _frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._exactly(4))
        return self._exactly(size)

    def _exactly(self, size: int) -> bytes:
        chunks = []
        while size:
            chunk = self.sock.recv(size)
            if not chunk:
                raise ConnectionError("the node closed the connection")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


@dataclass(frozen=True)
class TransactionStateCode:
    error_code: ErrorCode


@dataclass(frozen=True)
class TransactionStateCodes:
    transaction_states: tuple[TransactionStateCode, ...]


def _transaction_state_codes(frame: bytes) -> TransactionStateCodes:
    """The error code of each state of a DescribeTransactions v0 answer, read by hand: the
    answer to an id it may not describe (or an unknown one) carries Kafka's start time -1,
    which kio's decoder refuses ("negative timestamp") though Kafka's clients take it.
    Layout: correlation id (4 bytes), header tags (1), throttle time (4), the states' compact
    array length + 1 (1), then the first state's error code; the cases ask for one id."""
    assert frame[4] == 0, "no header tags"
    assert frame[9] == 2, "one transaction state"
    (code,) = struct.unpack_from(">h", frame, 10)
    return TransactionStateCodes((TransactionStateCode(ErrorCode(code)),))


class Node:
    def __init__(self, cluster: LocalCluster, broker: str, controller: str) -> None:
        self.cluster = cluster
        self.admin = WireClient(cluster.bootstrap_servers)  # the super user
        self.alice = {"broker": SaslWire(broker), "controller": SaslWire(controller)}

    def as_admin(self, call: Call) -> Any:
        return self.admin.request(call.api_key, call.version, call.request())

    def grant(self, grants: frozenset[Grant]) -> None:
        if not grants:
            return
        answer = self.admin.request(ApiKey.CREATE_ACLS, 3, create_acls.CreateAclsRequest(
            creations=tuple(create_acls.AclCreation(
                resource_type=int(kind), resource_name=name,
                resource_pattern_type=int(PatternType.LITERAL), principal=f"User:{ALICE}",
                host="*", operation=int(operation), permission_type=3)
                for operation, kind, name in sorted(grants))))
        assert {r.error_code for r in answer.results} == {ErrorCode.none}

    def revoke_all(self) -> None:
        answer = self.admin.request(ApiKey.DELETE_ACLS, 3, delete_acls.DeleteAclsRequest(
            filters=(delete_acls.DeleteAclsFilter(
                resource_type_filter=int(ResourceType.ANY), resource_name_filter=None,
                pattern_type_filter=int(PatternType.ANY), principal_filter=f"User:{ALICE}",
                host_filter=None, operation=1, permission_type=1),)))
        assert {r.error_code for r in answer.filter_results} == {ErrorCode.none}
        # the image and the authorizer are published together: once DescribeAcls (from the
        # image) lists none of alice's bindings, no request of hers is allowed by one
        _until(lambda: not self.admin.request(
            ApiKey.DESCRIBE_ACLS, 3, describe_acls.DescribeAclsRequest(
                resource_type_filter=int(ResourceType.ANY), resource_name_filter=None,
                pattern_type_filter=int(PatternType.ANY), principal_filter=f"User:{ALICE}",
                host_filter=None, operation=1, permission_type=1)).resources)

    def close(self) -> None:
        self.admin.close()
        for connection in self.alice.values():
            connection.close()


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    broker_port, controller_port = free_port(), free_port()
    cluster = LocalCluster(combined=1)
    member = cluster.nodes[1]
    cluster.set_node_configs(1, {
        "listeners": f"PLAINTEXT://127.0.0.1:{member.broker_port},"
                     f"SASL://127.0.0.1:{broker_port},"
                     f"CONTROLLER://127.0.0.1:{member.controller_port},"
                     f"CONTROLLER_SASL://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{member.broker_port},"
                                f"SASL://127.0.0.1:{broker_port}",
        "controller.listener.names": "CONTROLLER,CONTROLLER_SASL",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT,"
                                          "CONTROLLER:PLAINTEXT,CONTROLLER_SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl.plain.sasl.jaas.config": JAAS,
        "listener.name.controller_sasl.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": STANDARD,
        "super.users": "User:ANONYMOUS",
    })
    with cluster:
        running = Node(cluster, f"127.0.0.1:{broker_port}", f"127.0.0.1:{controller_port}")
        try:
            _seed(running)
            yield running
        finally:
            running.close()


def _codes(value: Any) -> set[ErrorCode]:
    from tests.unit.broker.test_authorization_table import _error_codes

    return set(_error_codes(value))


def _until(condition: Any) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the node"
        time.sleep(0.05)


def _seed(node: Node) -> None:
    """As the super user, what the cases act on (the unit table's seed, over the wire)."""
    import functools

    for name, partitions in ((T, 2), (GROWN, 1), (DOOMED, 1)):
        answer = node.as_admin(Call(19, 5, functools.partial(create_topic, name=name,
                                                              partitions=partitions)))
        assert _codes(answer) == {ErrorCode.none}
    for index in (0, 1):
        _until(lambda i=index: _codes(node.as_admin(Call(0, 9, functools.partial(
            produce, index=i)))) == {ErrorCode.none})
    for group in (G, DOOMED_GROUP):
        _until(lambda g=group: _codes(node.as_admin(Call(
            10, 4, functools.partial(find_group_coordinator, group=g)))) == {ErrorCode.none})
        _until(lambda g=group: _codes(node.as_admin(Call(
            8, 8, functools.partial(offset_commit, group=g)))) == {ErrorCode.none})
    _until(lambda: _codes(node.as_admin(Call(10, 4, find_transaction_coordinator)))
           == {ErrorCode.none})
    _until(lambda: _codes(node.as_admin(Call(22, 4, init_producer_id))) == {ErrorCode.none})


@pytest.mark.parametrize(("case", "listener"), [
    pytest.param(case, listener, id=f"{listener}-{case.id}")
    for case in CASES for listener in case.listeners])
def test_refused_without_the_acl_and_allowed_with_it(node: Node, case: Case,
                                                     listener: str) -> None:
    """alice without ACLs: Kafka's error; with the ACLs Kafka asks for: no refusal (the
    bindings reach the authorizer through the metadata log: asked again until they have)."""
    node.revoke_all()
    connection = node.alice[listener]
    codes = _codes(denied := connection.request(case.call))
    if case.refused is None:
        assert not codes & AUTHORIZATION_ERRORS
    else:
        assert case.refused in codes, f"{case.id} answered {codes} without ACLs"
    if case.check is not None:
        case.check(denied, False)
    node.grant(case.needs)
    answers: list[Any] = []

    def allowed() -> bool:
        answers.append(connection.request(case.call))
        return not _codes(answers[-1]) & AUTHORIZATION_ERRORS and (
            case.check is None or _checked(case, answers[-1]))

    _until(allowed)
    if case.allowed_codes is not None:
        assert _codes(answers[-1]) <= case.allowed_codes, _codes(answers[-1])


def _checked(case: Case, answer: Any) -> bool:
    assert case.check is not None
    try:
        case.check(answer, True)
    except AssertionError:
        return False  # the bindings have not reached the authorizer yet
    return True
