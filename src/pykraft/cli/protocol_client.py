"""A small blocking Kafka protocol client for the tools that need an API no client library
offers (DescribeQuorum: neither librdkafka nor kafka-python sends it).

One connection at a time, one request at a time. The client tries the bootstrap servers in
order until one accepts the connection, asks it ApiVersions, and then sends each request at
the highest version both sides speak. Every failure is a `CommandError` with one readable
line: a refused connection, a timeout, a closed connection, no common version.

Security comes from the tool's properties (`--command-config`), checked by
`client_config.security_settings` as for the confluent-kafka tools: for SSL and SASL_SSL,
TLS with the node's own client side of net/tls.py (the trust store, or the system's; the
key store when the server asks for a certificate; the host name checked unless
ssl.endpoint.identification.algorithm is empty), then for SASL_PLAINTEXT and SASL_SSL, after
ApiVersions, SaslHandshake v1 and SaslAuthenticate rounds as Kafka's Java client sends them
(KIP-152) with PLAIN, SCRAM-SHA-256/512 (RFC 5802) or an unsecured OAUTHBEARER token
(KIP-255), through the node's own sans-I/O exchange (net/sasl_client.py; it sends no
OAUTHBEARER SASL extensions). A refused login is `AuthenticationFailed`: one line, as
Kafka's tools print it.
"""

from __future__ import annotations

import itertools
import socket
import ssl
import struct
import sys
import time
from collections.abc import Callable, Mapping
from types import ModuleType, TracebackType
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.cli.args import CommandError
from pykraft.cli.client_config import SaslLogin, security_settings, timeout_seconds
from pykraft.net.sasl_client import ClientSasl, SaslAuthenticationError, SaslClientExchange
from pykraft.net.tls import SslConfigError, client_context
from pykraft.protocol.framing import decode_response, encode_request, request_type

__all__ = [
    "AuthenticationFailed",
    "ProtocolClient",
    "TlsHandshakeFailed",
    "active_controller",
    "check_login",
    "error_message",
    "error_name",
    "find_coordinator",
    "request_module",
    "ssl_context",
    "topic_partition_counts",
]

METADATA: Final = 3
FIND_COORDINATOR: Final = 10
DESCRIBE_CLUSTER: Final = 60
_CONTROLLER_ENDPOINTS: Final = 2  # DescribeCluster's endpoint type for controllers (KIP-919)
_RETRY_BACKOFF_S: Final = 0.2
API_VERSIONS: Final = 18
SASL_HANDSHAKE: Final = 17
_REQUEST_HEAD: Final = struct.Struct(">hhi")  # api key, version, correlation id
_API_VERSIONS_VERSION: Final = 3
_SIZE: Final = struct.Struct(">i")
_ERROR_CODE: Final = struct.Struct(">h")
_MAX_RESPONSE_BYTES: Final = 100 * 1024 * 1024


def request_module(api_key: int, api_version: int) -> ModuleType:
    """The kio module of a request version, which also holds its nested entity classes."""
    return sys.modules[request_type(api_key, api_version).__module__]


def error_name(code: int) -> str:
    """Kafka's name of an error code: 6 -> NOT_LEADER_OR_FOLLOWER."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error code {code}"


# Kafka's own descriptions of the errors the tools report most (its Errors enum), so a tool
# says what Kafka's would; other codes are reported by name.
_MESSAGES: Final = {
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.transactional_id_not_found: "The transactionalId could not be found.",
    ErrorCode.group_id_not_found: "The group id does not exist.",
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.not_coordinator: "This is not the correct coordinator.",
    ErrorCode.leader_not_available: "There is no leader for this topic-partition as we are "
                                    "in the middle of a leadership election.",
    ErrorCode.broker_id_not_registered: "The given broker ID was not registered.",
    ErrorCode.group_subscribed_to_topic: "The consumer group is actively subscribed to the "
                                         "topic.",
    ErrorCode.non_empty_group: "The group is not empty.",
    ErrorCode.invalid_group_id: "The configured groupId is invalid.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.not_controller: "This is not the correct controller for this cluster.",
}


def error_message(code: int) -> str:
    """Kafka's description of an error code where the tools know it, else its name."""
    try:
        return _MESSAGES.get(ErrorCode(code)) or error_name(code)
    except ValueError:
        return error_name(code)


class _WithoutError:
    """A v0 ApiVersions answer to our v3 request: its version ranges are what we need."""

    error_code = ErrorCode.none

    def __init__(self, api_keys: Any) -> None:
        self.api_keys = api_keys


class ProtocolClient:
    """Connected to the first reachable of `bootstrap` (`host:port[,host:port...]`)."""

    def __init__(self, bootstrap: str, *, timeout_s: float, client_id: str = "pykraft-cli",
                 properties: Mapping[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.client_id = client_id
        # the tool's properties, passed on to the clients this one leads to (coordinators,
        # other brokers, the active controller)
        self.properties: Mapping[str, str] = properties or {}
        self.security = security_settings(self.properties)
        self._ssl_context = ssl_context(self.properties) if self.security.uses_tls else None
        self._correlation_id = 0
        self._sock: socket.socket | None = None
        self.address = ""
        self._versions: dict[int, tuple[int, int]] = {}
        self.api_versions: Any = None  # the server's ApiVersions answer (features from v3)
        # True when `active_controller` found this server as the active controller; False
        # for one that could not say (an older server), where asking again cannot help
        self.found_active = False
        self._connect([server.strip() for server in bootstrap.split(",") if server.strip()])

    def _connect(self, servers: list[str]) -> None:
        failures = []
        for server in servers:
            host, _, port = server.rpartition(":")
            host = host.strip("[]")
            try:
                self._sock = socket.create_connection((host, int(port)), timeout=self.timeout_s)
            except (OSError, ValueError) as error:
                reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
                failures.append(f"{server} ({reason})")
                continue
            self.address = server
            try:
                if self._ssl_context is not None:
                    self._sock = self._tls(self._sock, host)
                self._versions = self._api_versions()
                if self.security.sasl is not None:
                    self._authenticate(self.security.sasl)
            except CommandError:
                self.close()
                raise
            return
        raise CommandError(f"cannot connect to {', '.join(failures) or 'no server given'}")

    def _api_versions(self) -> dict[int, tuple[int, int]]:
        request = request_type(API_VERSIONS, _API_VERSIONS_VERSION)(
            client_software_name="pykraft-cli", client_software_version="1"
        )
        frame = self._round_trip(API_VERSIONS, _API_VERSIONS_VERSION, request)
        # The body starts with the error code whatever the version; a server that does not
        # speak v3 answers UNSUPPORTED_VERSION in v0, with its ranges (KIP-511).
        (error_code,) = _ERROR_CODE.unpack_from(frame, _SIZE.size)
        version = 0 if error_code == ErrorCode.unsupported_version else _API_VERSIONS_VERSION
        try:
            _, response = decode_response(API_VERSIONS, version, frame)
        except Exception as error:
            raise CommandError(
                f"cannot decode ApiVersions v{version} from {self.address}: {error}"
            ) from error
        if response.error_code == ErrorCode.unsupported_version and version == 0:
            response = _WithoutError(response.api_keys)
        if response.error_code != ErrorCode.none:
            raise CommandError(
                f"{self.address} refused ApiVersions: {error_name(response.error_code)}"
            )
        self.api_versions = response
        return {
            int(api.api_key): (int(api.min_version), int(api.max_version))
            for api in response.api_keys
        }

    def _tls(self, sock: socket.socket, host: str) -> socket.socket:
        """`sock` after a TLS handshake with `host`; a refused one is one line, as Kafka's
        clients report an SslAuthenticationException."""
        assert self._ssl_context is not None
        try:
            return self._ssl_context.wrap_socket(sock, server_hostname=host)
        except ssl.SSLCertVerificationError as error:
            sock.close()
            raise TlsHandshakeFailed(f"SSL handshake with {self.address} failed: "
                                     f"{error.verify_message or error.reason}") from None
        except ssl.SSLError as error:
            sock.close()
            raise TlsHandshakeFailed(f"SSL handshake with {self.address} failed: "
                                     f"{error.reason or error}") from None
        except TimeoutError:
            sock.close()
            raise TlsHandshakeFailed(f"SSL handshake with {self.address} took more than "
                                     f"{self.timeout_s:g} s") from None
        except OSError as error:
            sock.close()
            raise TlsHandshakeFailed(f"SSL handshake with {self.address} failed: "
                                     f"{error.strerror or error or 'connection closed'}") \
                from None

    def _authenticate(self, login: SaslLogin) -> None:
        """SaslHandshake v1, then SaslAuthenticate until the mechanism is done: the node's
        own sans-I/O exchange (net/sasl_client.py), driven over this blocking socket. The
        server's refusals are read here first, to report them in Kafka's words."""
        assert self._sock is not None
        exchange = SaslClientExchange(
            client_sasl(login), int(time.time() * 1000), client_id=self.client_id,
            correlation_ids=itertools.count(self._correlation_id + 1))
        frame = exchange.next_request()
        while frame is not None:
            api_key, version, self._correlation_id = _REQUEST_HEAD.unpack_from(frame, 4)
            response = self._frame_round_trip(self._sock, frame)
            _raise_refusal(api_key, version, response, login.mechanism, self.address)
            try:
                exchange.receive(response)
            except SaslAuthenticationError as error:
                raise AuthenticationFailed(f"Authentication failed: {error}") from None
            frame = exchange.next_request()

    def version_for(self, api_key: int, name: str, ours: tuple[int, int]) -> int:
        """The highest version of `api_key` both sides speak."""
        theirs = self._versions.get(api_key)
        if theirs is None:
            raise CommandError(f"{self.address} does not serve {name}")
        low, high = max(ours[0], theirs[0]), min(ours[1], theirs[1])
        if low > high:
            raise CommandError(
                f"{self.address} serves {name} versions {theirs[0]}-{theirs[1]}; "
                f"this tool speaks {ours[0]}-{ours[1]}"
            )
        return high

    def request(
        self,
        api_key: int,
        name: str,
        ours: tuple[int, int],
        build: Callable[[ModuleType, int], Any],
    ) -> tuple[int, Any]:
        """Send the request `build(module, version)` makes; return (version, response)."""
        version = self.version_for(api_key, name, ours)
        frame = self._round_trip(api_key, version, build(request_module(api_key, version), version))
        try:
            _, response = decode_response(api_key, version, frame)
        except Exception as error:
            raise CommandError(
                f"cannot decode {name} v{version} from {self.address}: {error}"
            ) from error
        return version, response

    def _round_trip(self, api_key: int, version: int, request: Any) -> bytes:
        sock = self._sock
        if sock is None:
            raise CommandError("not connected")
        self._correlation_id += 1
        frame = encode_request(api_key, version, self._correlation_id, self.client_id, request)
        return self._frame_round_trip(sock, frame)

    def _frame_round_trip(self, sock: socket.socket, frame: bytes) -> bytes:
        """Send an encoded request (correlation id `self._correlation_id`), return the
        response frame after its size."""
        try:
            sock.sendall(frame)
            (size,) = _SIZE.unpack(self._read_exactly(sock, _SIZE.size))
            if not 4 <= size <= _MAX_RESPONSE_BYTES:
                raise CommandError(f"{self.address} sent a response of {size} bytes")
            response = self._read_exactly(sock, size)
        except TimeoutError:
            raise CommandError(
                f"no answer from {self.address} within {self.timeout_s:g} s"
            ) from None
        except OSError as error:
            raise CommandError(
                f"connection to {self.address} failed: {error.strerror or error}"
            ) from error
        (correlation_id,) = _SIZE.unpack_from(response)
        if correlation_id != self._correlation_id:
            raise CommandError(
                f"{self.address} answered correlation id {correlation_id}, "
                f"expected {self._correlation_id}"
            )
        return response

    def _read_exactly(self, sock: socket.socket, size: int) -> bytes:
        chunks, remaining = [], size
        while remaining:
            chunk = sock.recv(min(remaining, 1 << 20))
            if not chunk:
                raise CommandError(f"{self.address} closed the connection")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> ProtocolClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AuthenticationFailed(CommandError):
    """The server refused the login (SASL_AUTHENTICATION_FAILED and friends); the message is
    the line Kafka's tools print: "Authentication failed: ..."."""


class TlsHandshakeFailed(CommandError):
    """The TLS handshake failed: an untrusted certificate, a host name that does not match,
    a server that is not speaking TLS."""


def check_login(config: Mapping[str, Any], properties: Mapping[str, str]) -> None:
    """Before a confluent-kafka client starts with `config` (client_config's translation of
    `properties`): log in once to the first reachable bootstrap server with the tool's
    security settings, so that a refused login or an untrusted certificate is the tool's
    one line at once. librdkafka retries those quietly until the call's timeout and then
    reports only "Broker transport failure"; Kafka's Java tools fail at once with the
    authentication error. Nothing to check for PLAINTEXT; a server
    that cannot be reached is left to the client, which reports it as before."""
    if security_settings(properties).protocol == "PLAINTEXT":
        return
    try:
        ProtocolClient(str(config["bootstrap.servers"]), timeout_s=timeout_seconds(properties),
                       client_id="pykraft-login-check", properties=properties).close()
    except (AuthenticationFailed, TlsHandshakeFailed):
        raise
    except CommandError:
        pass


# -- TLS -------------------------------------------------------------------------------------


def ssl_context(properties: Mapping[str, str]) -> ssl.SSLContext:
    """The client side of TLS from a tool's ssl.* keys, made as the node makes its own
    (net/tls.py: PEM, inline and PKCS12 stores, the system's trust store when none is set,
    ssl.enabled.protocols, ssl.cipher.suites, the host name check); a setting it cannot use
    is one line naming the key."""
    try:
        return client_context(properties.get, "")
    except SslConfigError as error:
        raise CommandError(str(error)) from None


# -- SASL -----------------------------------------------------------------------------------


def client_sasl(login: SaslLogin) -> ClientSasl:
    """The node's client-side credentials from a tool's login."""
    if login.mechanism == "OAUTHBEARER":
        return ClientSasl(login.mechanism, token_claims=dict(login.claims),
                          token_lifetime_s=login.lifetime_s,
                          principal_claim=login.principal_claim)
    return ClientSasl(login.mechanism, login.username, login.password)


def _raise_refusal(api_key: int, version: int, frame: bytes, mechanism: str,
                   address: str) -> None:
    """AuthenticationFailed with the server's own words for a refused SaslHandshake or
    SaslAuthenticate (Kafka's tools print the server's message as it is)."""
    try:
        _, answer = decode_response(api_key, version, frame)
    except Exception:
        return  # the exchange reports an unreadable answer itself
    code = int(answer.error_code)
    if code == ErrorCode.none:
        return
    if api_key == SASL_HANDSHAKE and code == ErrorCode.unsupported_sasl_mechanism:
        raise AuthenticationFailed(
            f"Client SASL mechanism '{mechanism}' not enabled in the server, enabled "
            f"mechanisms are {list(answer.mechanisms)}")
    if api_key == SASL_HANDSHAKE and code == ErrorCode.illegal_sasl_state:
        # what a listener without SASL answers: the properties name the wrong listener
        raise AuthenticationFailed(
            f"Authentication failed: {address} does not take SASL (ILLEGAL_SASL_STATE): is "
            f"security.protocol right for this listener?")
    text = getattr(answer, "error_message", None) or error_name(code)
    raise AuthenticationFailed(text if text.startswith("Authentication failed")
                               else f"Authentication failed: {text}")


def find_coordinator(client: ProtocolClient, key: str, *, key_type: int) -> str:
    """The `host:port` of the coordinator of a group (key type 0) or transactional id (1)."""
    def build(module: ModuleType, version: int) -> Any:
        if version >= 4:
            return module.FindCoordinatorRequest(key_type=key_type, coordinator_keys=(key,))
        return module.FindCoordinatorRequest(key=key, key_type=key_type)

    version, answer = client.request(FIND_COORDINATOR, "FindCoordinator", (1, 6), build)
    found = answer.coordinators[0] if version >= 4 else answer
    if found.error_code != ErrorCode.none:
        raise CommandError(f"cannot find the coordinator of '{key}': "
                           f"{error_message(found.error_code)}")
    return f"{found.host}:{found.port}"


def topic_partition_counts(client: ProtocolClient, topics: list[str]) -> dict[str, int | None]:
    """How many partitions each topic has; None for one that does not exist."""
    def build(module: ModuleType, version: int) -> Any:
        return module.MetadataRequest(
            topics=tuple(module.MetadataRequestTopic(topic_id=None, name=name)
                         for name in topics),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)

    _, answer = client.request(METADATA, "Metadata", (12, 12), build)
    counts: dict[str, int | None] = dict.fromkeys(topics)
    for topic in answer.topics:
        if topic.error_code == ErrorCode.none and topic.name in counts:
            counts[topic.name] = len(topic.partitions)
    return counts


def active_controller(bootstrap: str, *, timeout_s: float, client_id: str,
                      call: str, properties: Mapping[str, str] | None = None) -> ProtocolClient:
    """A client connected to the active controller, found from any of the controllers in
    `bootstrap` as Kafka's admin client does with bootstrap.controllers (KIP-919): each is
    asked DescribeCluster for the controllers' endpoints and the active one's id. Through an
    election (no active controller, or one not reachable yet) it asks again until
    `timeout_s` has passed, then fails as Kafka's does: "Timed out waiting for a node
    assignment. Call: `call`". When none of `bootstrap` accepts a connection the error is
    at once that (a wrong address is not an election). A server that does not describe its
    controllers (an older one) is used as it is. Every connection is made with the tool's
    security `properties`; a refused login ends the search at once."""
    servers = [server.strip() for server in bootstrap.split(",") if server.strip()]
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        unreachable = []
        for server in servers:
            remaining = max(0.1, deadline - time.monotonic())
            try:
                client = ProtocolClient(server, timeout_s=min(timeout_s, remaining),
                                        client_id=client_id, properties=properties)
            except AuthenticationFailed:
                raise
            except CommandError as error:
                last = str(error)
                unreachable.append(last)
                continue
            try:
                leader = _controller_address(client)
            except CommandError as error:
                client.close()
                last = str(error)
                continue
            if leader is None:  # an older server: it answers what it can itself
                return client
            client.close()
            if leader == "":
                last = f"{server} knows no active controller"
                continue
            try:
                active = ProtocolClient(leader, timeout_s=timeout_s, client_id=client_id,
                                        properties=properties)
            except AuthenticationFailed:
                raise
            except CommandError as error:
                last = str(error)
                continue
            active.found_active = True
            return active
        if len(unreachable) == len(servers):  # no controller there at all: say so at once
            raise CommandError("; ".join(unreachable))
        if time.monotonic() + _RETRY_BACKOFF_S >= deadline:
            detail = f" (last: {last})" if last else ""
            raise CommandError(f"Timed out waiting for a node assignment. Call: {call}{detail}")
        time.sleep(_RETRY_BACKOFF_S)


def _controller_address(client: ProtocolClient) -> str | None:
    """The active controller's host:port as `client`'s server describes it; "" when it knows
    of none; None when it does not describe controllers."""
    def build(module: ModuleType, version: int) -> Any:
        return module.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                             endpoint_type=_CONTROLLER_ENDPOINTS)

    try:
        client.version_for(DESCRIBE_CLUSTER, "DescribeCluster", (1, 1))
    except CommandError:
        return None
    _, answer = client.request(DESCRIBE_CLUSTER, "DescribeCluster", (1, 1), build)
    if answer.error_code != ErrorCode.none or int(answer.endpoint_type) != _CONTROLLER_ENDPOINTS:
        return None
    for controller in answer.brokers:
        if controller.broker_id == answer.controller_id:
            host = str(controller.host)
            return f"[{host}]:{controller.port}" if ":" in host else f"{host}:{controller.port}"
    return ""
