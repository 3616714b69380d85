"""ProtocolClient speaks TLS and SASL as the tool's properties say, against a small server
made here with the standard library (one layer: the client): trust, host name checks, mTLS
from PEM and PKCS12 key stores, PLAIN, SCRAM and unsecured OAUTHBEARER (the mechanisms are
net/sasl_client.py's, tested with RFC 7677's vector in tests/unit/net/test_sasl.py), and each
refusal as one readable line."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import secrets
import socket
import ssl
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID
from kio.schema.errors import ErrorCode

from pykraft.cli.args import CommandError
from pykraft.cli.protocol_client import (
    AuthenticationFailed,
    ProtocolClient,
    check_login,
)
from pykraft.net import scram
from pykraft.protocol.framing import (
    decode_request,
    encode_response,
    parse_request_header,
    response_type,
    skip_header_tags,
)
from pykraft.protocol.framing import is_flexible as flexible

# -- a throwaway CA --------------------------------------------------------------------------


@dataclass
class Identity:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate


def _issue(name: str, issuer: Identity | None, hosts: tuple[str, ...] = ()) -> Identity:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer.certificate.subject if issuer else subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None),
                              critical=True))
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    signer = issuer.key if issuer else key
    return Identity(key, builder.sign(signer, hashes.SHA256()))


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _key(identity: Identity, password: bytes | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password) if password
        else serialization.NoEncryption())
    return identity.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8, encryption)


@dataclass
class Pki:
    directory: Path
    ca: Identity
    server: Identity
    client: Identity
    stranger_ca: Identity

    def file(self, name: str, data: bytes) -> str:
        path = self.directory / name
        path.write_bytes(data)
        return str(path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    ca = _issue("test CA", None)
    return Pki(tmp_path_factory.mktemp("pki"), ca, _issue("server", ca, ("127.0.0.1",)),
               _issue("tool-user", ca), _issue("stranger CA", None))


# -- the server ------------------------------------------------------------------------------

SCRAM_ITERATIONS = 4096


@dataclass
class Server:
    """Serves one connection at a time on 127.0.0.1: TLS when given a context, then
    ApiVersions, SaslHandshake and SaslAuthenticate (PLAIN, SCRAM, OAUTHBEARER) and Metadata;
    what it saw is recorded for the test."""

    context: ssl.SSLContext | None
    mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-512", "OAUTHBEARER")
    users: dict[str, str] = field(default_factory=lambda: {"alice": "alice-secret"})
    seen: list[str] = field(default_factory=list)
    peer_subjects: list[str] = field(default_factory=list)
    tokens: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            try:
                connection = (self.context.wrap_socket(raw, server_side=True)
                              if self.context else raw)
            except (ssl.SSLError, OSError) as error:
                self.seen.append(f"handshake failed: {error}")
                raw.close()
                continue
            with connection:
                if isinstance(connection, ssl.SSLSocket):
                    peer = connection.getpeercert()
                    if peer:
                        self.peer_subjects.append(str(peer["subject"]))
                try:
                    self._converse(connection)
                except (ConnectionError, OSError):
                    pass

    def _converse(self, connection: socket.socket) -> None:
        state: dict[str, Any] = {}
        while True:
            size = struct.unpack(">i", _read(connection, 4))[0]
            frame = _read(connection, size)
            header = parse_request_header(frame)
            if flexible(header.api_key, header.api_version):
                header = skip_header_tags(header, frame)
            request = decode_request(header, frame)
            self.seen.append(f"{header.api_key}v{header.api_version}")
            answer, close = self._answer(header.api_key, header.api_version, request, state)
            connection.sendall(encode_response(header.correlation_id, answer))
            if close:
                return

    def _answer(self, api_key: int, version: int, request: Any,
                state: dict[str, Any]) -> tuple[Any, bool]:
        module = sys.modules[response_type(api_key, version).__module__]
        if api_key == 18:
            return module.ApiVersionsResponse(
                error_code=ErrorCode.none, api_keys=tuple(
                    module.ApiVersion(api_key=key, min_version=low, max_version=high)
                    for key, low, high in ((18, 0, 3), (17, 0, 1), (36, 0, 2), (3, 12, 12))),
                throttle_time=datetime.timedelta(0), supported_features=(),
                finalized_features_epoch=-1, finalized_features=(),
                zk_migration_ready=False), False
        if api_key == 17:
            state["mechanism"] = request.mechanism
            known = request.mechanism in self.mechanisms
            return module.SaslHandshakeResponse(
                error_code=ErrorCode.none if known else ErrorCode.unsupported_sasl_mechanism,
                mechanisms=self.mechanisms), not known
        if api_key == 36:
            challenge, error = self._sasl(state, bytes(request.auth_bytes))
            return module.SaslAuthenticateResponse(
                error_code=ErrorCode.sasl_authentication_failed if error else ErrorCode.none,
                error_message=error, auth_bytes=challenge,
                session_lifetime=datetime.timedelta(0)), error is not None
        return module.MetadataResponse(
            throttle_time=datetime.timedelta(0), brokers=(), cluster_id="c",
            controller_id=1, topics=()), False

    def _sasl(self, state: dict[str, Any], token: bytes) -> tuple[bytes, str | None]:
        mechanism = state["mechanism"]
        if mechanism == "PLAIN":
            _, user, password = token.decode().split("\0")
            state["user"] = user
            if self.users.get(user) == password:
                return b"", None
            return b"", "Authentication failed: Invalid username or password"
        if mechanism == "OAUTHBEARER":
            if token == b"\x01":
                return b"", "Authentication failed: invalid token"
            auth = token.decode().split("\x01")[1]
            payload = auth.removeprefix("auth=Bearer ").split(".")[1]
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            self.tokens.append(claims)
            if claims.get("sub") in self.users:
                return b"", None
            return b'{"status":"invalid_token"}', None
        return _scram_server(self.users, scram.SCRAM_SHA_512, state, token)

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept(); close() alone does not
        self.sock.close()
        self.thread.join(timeout=5)


def _scram_server(users: dict[str, str], mechanism: scram.Mechanism, state: dict[str, Any],
                  token: bytes) -> tuple[bytes, str | None]:
    text = token.decode()
    if "nonce" not in state:
        bare = text.removeprefix("n,,")
        fields = dict(part.split("=", 1) for part in bare.split(","))
        password = users.get(fields["n"], secrets.token_hex(8))
        salt = secrets.token_bytes(16)
        state.update(bare=bare, nonce=fields["r"] + secrets.token_urlsafe(12),
                     credential=scram.credential(mechanism, password, salt=salt,
                                                 iterations=SCRAM_ITERATIONS))
        state["first"] = (f"r={state['nonce']},s={base64.b64encode(salt).decode()},"
                          f"i={SCRAM_ITERATIONS}")
        return state["first"].encode(), None
    without_proof, _, proof = text.rpartition(",p=")
    message = f"{state['bare']},{state['first']},{without_proof}".encode()
    credential = state["credential"]
    signature = mechanism.hmac(credential.stored_key, message)
    client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature, strict=True))
    if mechanism.stored_key(client_key) != credential.stored_key:
        return b"", ("Authentication failed during authentication due to invalid credentials "
                     "with SASL mechanism SCRAM-SHA-512")
    return b"v=" + base64.b64encode(mechanism.hmac(credential.server_key, message)), None


def _read(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _server_context(pki: Pki, *, require_client: bool = False) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.file("server.pem", _key(pki.server) + _pem(pki.server.certificate)))
    if require_client:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=_pem(pki.ca.certificate).decode())
    return context


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(context: ssl.SSLContext | None, **options: Any) -> Server:
        servers.append(Server(context, **options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _trust(pki: Pki) -> dict[str, str]:
    return {"ssl.truststore.type": "PEM",
            "ssl.truststore.location": pki.file("ca.pem", _pem(pki.ca.certificate))}


# -- TLS -------------------------------------------------------------------------------------


def test_tls_with_the_trust_store_serves_requests(pki: Pki, serve: Callable[..., Server]) -> None:
    server = serve(_server_context(pki))
    with ProtocolClient(f"127.0.0.1:{server.port}", timeout_s=5,
                        properties={"security.protocol": "SSL", **_trust(pki)}) as client:
        client.request(3, "Metadata", (12, 12), lambda module, version: module.MetadataRequest(
            topics=(), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
    assert server.seen == ["18v3", "3v12"]


def test_an_untrusted_server_certificate_is_one_line(pki: Pki,
                                                     serve: Callable[..., Server]) -> None:
    server = serve(_server_context(pki))
    stranger = {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                "ssl.truststore.location": pki.file("stranger.pem",
                                                    _pem(pki.stranger_ca.certificate))}
    with pytest.raises(CommandError, match=r"^SSL handshake with 127\.0\.0\.1:\d+ failed: "
                                           r"unable to get local issuer certificate$"):
        ProtocolClient(f"127.0.0.1:{server.port}", timeout_s=5, properties=stranger)


def test_the_host_name_is_checked_unless_endpoint_identification_is_empty(
        pki: Pki, serve: Callable[..., Server]) -> None:
    """The certificate names 127.0.0.1 only: `localhost` fails Kafka's default https check
    and passes with ssl.endpoint.identification.algorithm empty."""
    server = serve(_server_context(pki))
    properties = {"security.protocol": "SSL", **_trust(pki)}
    with pytest.raises(CommandError, match="failed: Hostname mismatch"):
        ProtocolClient(f"localhost:{server.port}", timeout_s=5, properties=properties)
    properties["ssl.endpoint.identification.algorithm"] = ""
    ProtocolClient(f"localhost:{server.port}", timeout_s=5, properties=properties).close()


@pytest.mark.parametrize("store", ["PEM", "PKCS12", "inline"])
def test_mutual_tls_presents_the_key_store(pki: Pki, serve: Callable[..., Server],
                                           store: str) -> None:
    server = serve(_server_context(pki, require_client=True))
    chain = _pem(pki.client.certificate) + _pem(pki.ca.certificate)
    keys = {
        "PEM": {"ssl.keystore.type": "PEM", "ssl.key.password": "kp",
                "ssl.keystore.location": pki.file("client.pem", _key(pki.client, b"kp") + chain)},
        "PKCS12": {"ssl.keystore.type": "PKCS12", "ssl.keystore.password": "sp",
                   "ssl.keystore.location": pki.file("client.p12",
                                                     pkcs12.serialize_key_and_certificates(
                       b"tool", pki.client.key, pki.client.certificate, [pki.ca.certificate],
                       serialization.BestAvailableEncryption(b"sp")))},
        "inline": {"ssl.keystore.type": "PEM", "ssl.keystore.key": _key(pki.client).decode(),
                   "ssl.keystore.certificate.chain": chain.decode()},
    }[store]
    properties = {"security.protocol": "SSL", **_trust(pki), **keys}
    ProtocolClient(f"127.0.0.1:{server.port}", timeout_s=5, properties=properties).close()
    assert server.peer_subjects == ["((('commonName', 'tool-user'),),)"]


def test_a_wrong_key_password_is_one_line(pki: Pki) -> None:
    chain = _pem(pki.client.certificate)
    properties = {"security.protocol": "SSL", "ssl.keystore.type": "PEM",
                  "ssl.key.password": "wrong",
                  "ssl.keystore.location": pki.file("client-kp.pem",
                                                    _key(pki.client, b"kp") + chain)}
    with pytest.raises(CommandError, match=r"client-kp.pem \(ssl.keystore.location\): the key "
                                           "cannot be read: wrong ssl.key.password"):
        ProtocolClient("127.0.0.1:1", timeout_s=5, properties=properties)


# -- SASL ------------------------------------------------------------------------------------


def _sasl(mechanism: str, jaas: str, protocol: str = "SASL_PLAINTEXT") -> dict[str, str]:
    module = {"PLAIN": "plain.PlainLoginModule", "SCRAM-SHA-512": "scram.ScramLoginModule",
              "OAUTHBEARER": "oauthbearer.OAuthBearerLoginModule"}[mechanism]
    return {"security.protocol": protocol, "sasl.mechanism": mechanism,
            "sasl.jaas.config": f"org.apache.kafka.common.security.{module} required {jaas};"}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_sasl_ssl_logs_in_after_api_versions(pki: Pki, serve: Callable[..., Server],
                                             mechanism: str) -> None:
    """Kafka's client order: ApiVersions, SaslHandshake v1, SaslAuthenticate (PLAIN one
    round, SCRAM two), then the tool's requests."""
    server = serve(_server_context(pki))
    properties = {**_sasl(mechanism, 'username="alice" password="alice-secret"', "SASL_SSL"),
                  **_trust(pki)}
    with ProtocolClient(f"127.0.0.1:{server.port}", timeout_s=5, properties=properties):
        pass
    rounds = 1 if mechanism == "PLAIN" else 2
    assert server.seen == ["18v3", "17v1"] + ["36v2"] * rounds


@pytest.mark.parametrize(("mechanism", "message"), [
    ("PLAIN", "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-512", "Authentication failed during authentication due to invalid credentials "
                      "with SASL mechanism SCRAM-SHA-512"),
])
def test_a_wrong_password_is_kafkas_one_line(serve: Callable[..., Server], mechanism: str,
                                             message: str) -> None:
    server = serve(None)
    properties = _sasl(mechanism, 'username="alice" password="wrong"')
    with pytest.raises(AuthenticationFailed) as refused:
        ProtocolClient(f"127.0.0.1:{server.port}", timeout_s=5, properties=properties)
    assert str(refused.value) == message


def test_an_unsecured_oauthbearer_token_carries_the_jaas_claims(
        serve: Callable[..., Server]) -> None:
    server = serve(None)
    jaas = ('unsecuredLoginStringClaim_sub="alice" unsecuredLoginListClaim_scope="|a|b" '
            'unsecuredLoginLifetimeSeconds="60"')
    ProtocolClient(f"127.0.0.1:{server.port}", timeout_s=5,
                   properties=_sasl("OAUTHBEARER", jaas)).close()
    (claims,) = server.tokens
    assert (claims["sub"], claims["scope"], claims["exp"] - claims["iat"]) == (
        "alice", ["a", "b"], 60)
    refused = _sasl("OAUTHBEARER", 'unsecuredLoginStringClaim_sub="mallory"')
    with pytest.raises(AuthenticationFailed, match="^Authentication failed: invalid token$"):
        ProtocolClient(f"127.0.0.1:{server.port}", timeout_s=5, properties=refused)


def test_a_mechanism_the_server_does_not_enable_is_named(serve: Callable[..., Server]) -> None:
    server = serve(None, mechanisms=("SCRAM-SHA-512",))
    with pytest.raises(AuthenticationFailed, match=r"Client SASL mechanism 'PLAIN' not enabled "
                                                   r"in the server, enabled mechanisms are "
                                                   r"\['SCRAM-SHA-512'\]"):
        ProtocolClient(f"127.0.0.1:{server.port}", timeout_s=5,
                       properties=_sasl("PLAIN", 'username="a" password="b"'))


def test_check_login_refuses_a_wrong_password_and_leaves_the_rest_to_the_client(
        serve: Callable[..., Server]) -> None:
    """The confluent-kafka tools' login check: a refused login is raised at once; an
    unreachable server is left for the client to report; PLAINTEXT makes no connection."""
    server = serve(None)
    wrong = _sasl("PLAIN", 'username="alice" password="wrong"')
    with pytest.raises(AuthenticationFailed, match="Invalid username or password"):
        check_login({"bootstrap.servers": f"127.0.0.1:{server.port}"}, wrong)
    check_login({"bootstrap.servers": "127.0.0.1:1"}, wrong)
    check_login({"bootstrap.servers": f"127.0.0.1:{server.port}"}, {})
    assert server.seen == ["18v3", "17v1", "36v2"]


def test_enabled_protocols_are_honoured(pki: Pki, serve: Callable[..., Server]) -> None:
    """ssl.enabled.protocols reaches the context (net/tls.py's client side): a TLS 1.3-only
    tool cannot talk to a TLS 1.2-only server, and says so in one line."""
    context = _server_context(pki)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    server = serve(context)
    properties = {"security.protocol": "SSL", **_trust(pki), "ssl.enabled.protocols": "TLSv1.3"}
    with pytest.raises(CommandError, match=r"^SSL handshake with 127\.0\.0\.1:\d+ failed: "):
        ProtocolClient(f"127.0.0.1:{server.port}", timeout_s=5, properties=properties)
    properties["ssl.enabled.protocols"] = "TLSv1.2,TLSv1.3"
    ProtocolClient(f"127.0.0.1:{server.port}", timeout_s=5, properties=properties).close()
