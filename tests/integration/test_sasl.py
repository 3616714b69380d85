"""SASL_PLAINTEXT and SASL_SSL listeners on one real node of this module's own:
confluent-kafka, kafka-python and aiokafka each produce and consume over both with PLAIN
(users from the listener's JAAS config), SCRAM-SHA-256 and SCRAM-SHA-512 (credentials from
`storage format --add-scram`, and one added at runtime with AlterUserScramCredentials) and
OAUTHBEARER (unsecured tokens; signed ones against a JWKS on another listener, KIP-768); a
wrong password, an unknown user and an expired token each fail with the client's
authentication error while the node keeps serving everyone else. Raw requests check what no
client shows: the order of requests before authentication, the failed-authentication delay,
ILLEGAL_SASL_STATE on a PLAINTEXT listener, re-authentication (KIP-368) on a listener with
connections.max.reauth.ms, and hundreds of hostile attempts."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode

from pykraft.net.sasl_client import (
    ClientSasl,
    SaslAuthenticationError,
    SaslClientExchange,
    authenticate,
)
from pykraft.protocol.api import ApiKey
from pykraft.protocol.entities import make
from pykraft.protocol.framing import request_type
from pykraft.testing import LocalCluster
from pykraft.testing.certs import CertificateAuthority
from pykraft.testing.ports import free_port
from pykraft.testing.wire import WireClient
from tests.integration.tool_helpers import confluent_round_trip as shared_round_trip
from tests.integration.tool_helpers import eventually

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
# (user, password) per mechanism; OAUTHBEARER's user is its token's subject
USERS = {"PLAIN": ("alice", "alice-secret"), "SCRAM-SHA-256": ("bob", "bob-secret"),
         "SCRAM-SHA-512": ("carol", "carol-secret"), "OAUTHBEARER": ("dave", "")}
REAUTH_MS = 1500


@dataclass
class SaslNode:
    cluster: LocalCluster
    sasl: str  # host:port of the SASL_PLAINTEXT listener
    reauth: str  # host:port of the one with connections.max.reauth.ms
    jwks: str  # host:port of the one whose OAUTHBEARER checks signed tokens (KIP-768)
    sign: Any  # (claims) -> a token signed with the JWKS's key
    sasl_ssl: str  # host:port of a SASL_SSL listener with the same mechanisms and users
    ca: Path  # the CA the SASL_SSL listener's certificate comes from

    def address(self, protocol: str) -> str:
        return self.sasl_ssl if protocol == "SASL_SSL" else self.sasl


def _jwks_signer() -> tuple[str, Any]:
    """A JWK Set with one RSA key, and a function signing RS256 tokens with it."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    numbers = key.public_key().public_numbers()

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    def number(value: int) -> str:
        return b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))

    jwks = json.dumps({"keys": [{"kty": "RSA", "kid": "k1", "use": "sig",
                                 "n": number(numbers.n), "e": number(numbers.e)}]})

    def sign(claims: dict[str, Any]) -> str:
        signed = (b64(json.dumps({"alg": "RS256", "kid": "k1"}).encode()) + "."
                  + b64(json.dumps(claims).encode()))
        signature = key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signed}.{b64(signature)}"

    return jwks, sign


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslNode]:
    sasl_port, reauth_port, jwks_port, ssl_port = free_port(), free_port(), free_port(), \
        free_port()
    certificates = CertificateAuthority.create().issue("node-1").write_pem(
        tmp_path_factory.mktemp("certs"))
    cluster = LocalCluster()
    jwks, sign = _jwks_signer()
    jwks_path = cluster.data_dir / "jwks.json"
    jwks_path.write_text(jwks)
    broker, controller = cluster.broker_port, cluster.controller_port
    cluster.extra_configs.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller},"
                     f"SASL://127.0.0.1:{sasl_port},REAUTH://127.0.0.1:{reauth_port},"
                     f"JWKS://127.0.0.1:{jwks_port},SASLSSL://127.0.0.1:{ssl_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker},SASL://127.0.0.1:{sasl_port},"
                                f"REAUTH://127.0.0.1:{reauth_port},JWKS://127.0.0.1:{jwks_port},"
                                f"SASLSSL://127.0.0.1:{ssl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
                                          "SASL:SASL_PLAINTEXT,REAUTH:SASL_PLAINTEXT,"
                                          "JWKS:SASL_PLAINTEXT,SASLSSL:SASL_SSL",
        "listener.name.saslssl.ssl.keystore.type": "PEM",
        "listener.name.saslssl.ssl.keystore.location": str(certificates.keystore),
        "listener.name.saslssl.sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "listener.name.saslssl.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_alice="alice-secret";',
        "listener.name.saslssl.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "listener.name.jwks.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.jwks.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "listener.name.jwks.oauthbearer.sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        "sasl.oauthbearer.jwks.endpoint.url": f"file://{jwks_path}",
        "sasl.oauthbearer.expected.audience": "pykraft",
        "listener.name.sasl.sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "listener.name.sasl.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_alice="alice-secret" user_erin="erin-secret";',
        "listener.name.sasl.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "listener.name.reauth.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.reauth.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_alice="alice-secret";',
        "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
        "group.initial.rebalance.delay.ms": "0",
    })
    cluster._write_config()
    try:  # formatted here with the bootstrap credentials; start() leaves it as it is
        result = subprocess.run(
            [sys.executable, "-m", "pykraft", "storage", "format", "--config",
             str(cluster.config_path), "--cluster-id", cluster.cluster_id,
             "--add-scram", "SCRAM-SHA-256=[name=bob,password=bob-secret]",
             "--add-scram", "SCRAM-SHA-512=[name=carol,password=carol-secret]"],
            capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        cluster.start()
        yield SaslNode(cluster, f"127.0.0.1:{sasl_port}", f"127.0.0.1:{reauth_port}",
                       f"127.0.0.1:{jwks_port}", sign, f"127.0.0.1:{ssl_port}",
                       certificates.ca)
    finally:
        cluster.close()


def _topic() -> str:
    return f"sasl-{uuid.uuid4().hex[:8]}"


def unsecured_token(subject: str, expires_in_s: float) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = time.time()
    claims = {"sub": subject, "iat": now - 120, "exp": now + expires_in_s}
    return f"{part({'alg': 'none'})}.{part(claims)}."


# -- confluent-kafka ---------------------------------------------------------------------


def confluent_config(node: SaslNode, mechanism: str, user: str, password: str,
                     protocol: str = "SASL_PLAINTEXT") -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": node.address(protocol),
                              "security.protocol": protocol,
                              "sasl.mechanism": mechanism}
    if protocol == "SASL_SSL":
        config["ssl.ca.location"] = str(node.ca)
    if mechanism == "OAUTHBEARER":  # librdkafka makes the unsecured token itself
        config.update({"enable.sasl.oauthbearer.unsecure.jwt": True,
                       "sasl.oauthbearer.config": f"principal={user}"})
    else:
        config.update({"sasl.username": user, "sasl.password": password})
    return config


def confluent_round_trip(config: dict[str, Any]) -> None:
    shared_round_trip(config, _topic(), b"over sasl")


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_produces_and_consumes(node: SaslNode, mechanism: str,
                                               protocol: str) -> None:
    """librdkafka authenticates with each mechanism, then produces and consumes."""
    user, password = USERS[mechanism]
    confluent_round_trip(confluent_config(node, mechanism, user, password, protocol))


def confluent_authentication_error(config: dict[str, Any]) -> KafkaError:
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() < deadline, errors
        producer.poll(0.2)
    return next(e for e in errors if e.code() == KafkaError._AUTHENTICATION)


@pytest.mark.parametrize(("mechanism", "user", "password", "message"), [
    ("PLAIN", "alice", "wrong", "Authentication failed: Invalid username or password"),
    ("PLAIN", "nobody", "x", "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-256", "bob", "wrong", "Authentication failed during authentication due to "
     "invalid credentials with SASL mechanism SCRAM-SHA-256"),
    ("SCRAM-SHA-512", "nobody", "x", "Authentication failed during authentication due to "
     "invalid credentials with SASL mechanism SCRAM-SHA-512"),
], ids=["plain-password", "plain-user", "scram-password", "scram-user"])
def test_confluent_kafka_bad_credentials_fail_with_kafkas_message(
        node: SaslNode, mechanism: str, user: str, password: str, message: str) -> None:
    """librdkafka reports _AUTHENTICATION with Kafka's message; others keep being served."""
    error = confluent_authentication_error(confluent_config(node, mechanism, user, password))
    assert message in error.str()
    confluent_round_trip(confluent_config(node, "PLAIN", "alice", "alice-secret"))


def test_confluent_kafka_wrong_password_over_sasl_ssl(node: SaslNode) -> None:
    """Over TLS too: _AUTHENTICATION with Kafka's message, then a good login is served."""
    error = confluent_authentication_error(
        confluent_config(node, "SCRAM-SHA-512", "carol", "wrong", "SASL_SSL"))
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in error.str()
    confluent_round_trip(confluent_config(node, "SCRAM-SHA-512", "carol", "carol-secret",
                                          "SASL_SSL"))


def test_scram_credential_added_at_runtime_counts_from_the_next_login(node: SaslNode) -> None:
    """AlterUserScramCredentials (through the PLAINTEXT listener) commits a credential the
    SASL listener accepts as soon as the broker's image has it."""
    admin = AdminClient({"bootstrap.servers": node.cluster.bootstrap_servers})
    upsert = UserScramCredentialUpsertion(
        "frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"frank-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=15)
    config = confluent_config(node, "SCRAM-SHA-512", "frank", "frank-secret")
    confluent_round_trip(config)


# -- kafka-python ---------------------------------------------------------------------------


def kafka_python_config(node: SaslNode, mechanism: str, user: str, password: str,
                        token: str | None = None,
                        protocol: str = "SASL_PLAINTEXT") -> dict[str, Any]:
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Tokens(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return token or unsecured_token(user, 600)

    config: dict[str, Any] = {"bootstrap_servers": node.address(protocol),
                              "security_protocol": protocol,
                              "sasl_mechanism": mechanism}
    if protocol == "SASL_SSL":
        config["ssl_cafile"] = str(node.ca)
    if mechanism == "OAUTHBEARER":
        config["sasl_oauth_token_provider"] = Tokens()
    else:
        config.update(sasl_plain_username=user, sasl_plain_password=password)
    return config


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_produces_and_consumes(node: SaslNode, mechanism: str,
                                            protocol: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

    user, password = USERS[mechanism]
    config = kafka_python_config(node, mechanism, user, password, protocol=protocol)
    topic = _topic()
    producer = KafkaProducer(**config)
    try:
        producer.send(topic, b"over sasl").get(timeout=15)
    finally:
        producer.close()
    consumer = KafkaConsumer(**config)
    try:
        consumer.assign([KafkaTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 15
        values: list[bytes] = []
        while not values and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(record.value for record in records)
        assert values == [b"over sasl"]
    finally:
        consumer.close()


@pytest.mark.parametrize(("mechanism", "token", "expected"), [
    ("PLAIN", None, "Authentication failed: Invalid username or password"),
    ("OAUTHBEARER", "expired", '{"status":"invalid_token"}'),
], ids=["wrong-password", "expired-token"])
def test_kafka_python_refused_with_sasl_authentication_failed(
        node: SaslNode, caplog: pytest.LogCaptureFixture, mechanism: str, token: str | None,
        expected: str) -> None:
    """kafka-python's connection fails with SaslAuthenticationFailedError carrying Kafka's
    message (its producer then gives up bootstrapping)."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    config = kafka_python_config(node, mechanism, "alice", "wrong",
                                 unsecured_token("alice", -60) if token else None)
    with caplog.at_level(logging.WARNING, logger="kafka"), \
            pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaProducer(**config, bootstrap_timeout_ms=2000)
    failures = [r.getMessage() for r in caplog.records
                if "SaslAuthenticationFailedError" in r.getMessage()]
    assert failures and expected in failures[0], [r.getMessage() for r in caplog.records]


# -- aiokafka -------------------------------------------------------------------------------


def aiokafka_config(node: SaslNode, mechanism: str, user: str, password: str,
                    token: str | None = None,
                    protocol: str = "SASL_PLAINTEXT") -> dict[str, Any]:
    from aiokafka.abc import AbstractTokenProvider

    class Tokens(AbstractTokenProvider):  # type: ignore[misc]
        async def token(self) -> str:
            return token or unsecured_token(user, 600)

    config: dict[str, Any] = {"bootstrap_servers": node.address(protocol),
                              "security_protocol": protocol,
                              "sasl_mechanism": mechanism}
    if protocol == "SASL_SSL":
        from aiokafka.helpers import create_ssl_context

        config["ssl_context"] = create_ssl_context(cafile=str(node.ca))
    if mechanism == "OAUTHBEARER":
        config["sasl_oauth_token_provider"] = Tokens()
    else:
        config.update(sasl_plain_username=user, sasl_plain_password=password)
    return config


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_produces_and_consumes(node: SaslNode, mechanism: str, protocol: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTopicPartition

    user, password = USERS[mechanism]
    config = aiokafka_config(node, mechanism, user, password, protocol=protocol)
    topic = _topic()

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**config)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"over sasl")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**config)
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            batches = await consumer.getmany(timeout_ms=10000)
            return [record.value for records in batches.values() for record in records]
        finally:
            await consumer.stop()

    assert asyncio.run(asyncio.wait_for(run(), 60)) == [b"over sasl"]


def test_aiokafka_refused(node: SaslNode, caplog: pytest.LogCaptureFixture) -> None:
    """A wrong password: aiokafka's SaslAuthenticationFailed with Kafka's message. An expired
    token: aiokafka does not answer OAUTHBEARER's error challenge (as against Kafka), so it
    sees the connection closed, and the node's log says which token check failed."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    async def start(config: dict[str, Any]) -> None:
        producer = AIOKafkaProducer(**config)
        try:
            await producer.start()
        finally:
            await producer.stop()

    with caplog.at_level(logging.ERROR, logger="aiokafka"), \
            pytest.raises(KafkaConnectionError):
        asyncio.run(start(aiokafka_config(node, "PLAIN", "alice", "wrong")))
    assert any("SaslAuthenticationFailed: Authentication failed: Invalid username or password"
               in r.getMessage() for r in caplog.records), caplog.records
    with pytest.raises(KafkaConnectionError):
        asyncio.run(start(aiokafka_config(node, "OAUTHBEARER", "dave", "",
                                          unsecured_token("dave", -60))))
    eventually(lambda: _logged(node, "refusing the token: The indicated time"))
    confluent_round_trip(confluent_config(node, "OAUTHBEARER", "dave", ""))


def _logged(node: SaslNode, text: str) -> None:
    assert text in node.cluster.log_path.read_text(errors="replace")


# -- raw requests ------------------------------------------------------------------------------


def _entity(api_key: int, version: int, **fields: Any) -> Any:
    return make(request_type(api_key, version), **fields)


def _metadata() -> Any:
    return _entity(ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                   include_topic_authorized_operations=False)


def _authenticate(wire: WireClient, sasl: ClientSasl) -> SaslClientExchange:
    exchange = SaslClientExchange(sasl, int(time.time() * 1000))
    frame = exchange.next_request()
    while frame is not None:
        wire.send_raw(frame)
        (size,) = struct.unpack(">i", wire._read_exactly(4))
        exchange.receive(wire._read_exactly(size))
        frame = exchange.next_request()
    return exchange


def test_only_api_versions_and_sasl_before_authentication(node: SaslNode) -> None:
    """ApiVersions is served before authentication and lists both SASL APIs; Metadata
    before authentication closes the connection, as Kafka's SaslServerAuthenticator does."""
    with WireClient(node.sasl) as wire:
        versions = wire.request(ApiKey.API_VERSIONS, 3, _entity(
            ApiKey.API_VERSIONS, 3, client_software_name="wire", client_software_version="1"))
        listed = {key.api_key: (key.min_version, key.max_version) for key in versions.api_keys}
        assert listed[ApiKey.SASL_HANDSHAKE] == (0, 1)
        assert listed[ApiKey.SASL_AUTHENTICATE] == (0, 2)
        _authenticate(wire, ClientSasl("PLAIN", "erin", "erin-secret"))
        metadata = wire.request(ApiKey.METADATA, 12, _metadata())
        assert [broker.node_id for broker in metadata.brokers] == [1]
    with WireClient(node.sasl) as wire:
        wire.send(ApiKey.METADATA, 12, _metadata())
        assert wire.is_closed_by_peer()


def test_sasl_requests_on_a_plaintext_listener_are_illegal_state(node: SaslNode) -> None:
    with WireClient(node.cluster.bootstrap_servers) as wire:
        handshake = wire.request(ApiKey.SASL_HANDSHAKE, 1, _entity(
            ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN"))
        assert handshake.error_code == ErrorCode.illegal_sasl_state
        assert wire.request(ApiKey.METADATA, 12, _metadata()).brokers  # still served


def test_failed_authentication_answers_after_the_delay_and_closes(node: SaslNode) -> None:
    """Our own client against the node: Kafka's error arrives no sooner than
    connection.failed.authentication.delay.ms (100), then the connection is closed."""
    async def attempt(sasl: ClientSasl) -> float:
        host, port = node.sasl.split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        started = time.monotonic()
        try:
            with pytest.raises(SaslAuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
                await authenticate(reader, writer, sasl)
            elapsed = time.monotonic() - started
            assert await asyncio.wait_for(reader.read(1), 5) == b""  # closed
            return elapsed
        finally:
            writer.close()

    elapsed = asyncio.run(attempt(ClientSasl("SCRAM-SHA-256", "bob", "wrong")))
    assert elapsed >= 0.09


def test_reauthentication_on_a_listener_with_a_session_lifetime(node: SaslNode) -> None:
    """connections.max.reauth.ms: SaslAuthenticate answers the lifetime; re-authenticating
    on the same connection is served; past the session's end, a request that is not
    re-authentication closes the connection (KIP-368)."""
    sasl = ClientSasl("PLAIN", "alice", "alice-secret")
    with WireClient(node.reauth) as wire:
        started = time.monotonic()
        assert _authenticate(wire, sasl).session_lifetime_ms == REAUTH_MS
        assert wire.request(ApiKey.METADATA, 12, _metadata()).brokers
        again = _authenticate(wire, sasl)
        renewed = time.monotonic()
        assert again.session_lifetime_ms == REAUTH_MS
        assert wire.request(ApiKey.METADATA, 12, _metadata()).brokers
        assert renewed - started < REAUTH_MS / 1000, "too slow to tell a renewal apart"
        time.sleep(max(0.0, renewed + REAUTH_MS / 1000 + 0.2 - time.monotonic()))
        wire.send(ApiKey.METADATA, 12, _metadata())
        assert wire.is_closed_by_peer()
    _logged(node, "expired without re-authentication")


def test_librdkafka_reauthenticates_across_sessions(node: SaslNode) -> None:
    """librdkafka re-authenticates before its session ends (KIP-368): a producer keeps
    delivering for several session lifetimes without losing a message."""
    config = confluent_config(node, "PLAIN", "alice", "alice-secret")
    config["bootstrap.servers"] = node.reauth
    topic = _topic()
    producer = Producer(config)
    delivered: list[Any] = []
    ends = time.monotonic() + 3 * REAUTH_MS / 1000
    sent = 0
    while time.monotonic() < ends:
        producer.produce(topic, b"%d" % sent, on_delivery=lambda e, _: delivered.append(e))
        sent += 1
        producer.flush(10)
        time.sleep(0.1)
    assert producer.flush(15) == 0
    assert delivered == [None] * sent


def _rss_kib(node: SaslNode) -> int:
    assert node.cluster.process is not None
    status = open(f"/proc/{node.cluster.process.pid}/status").read()  # noqa: SIM115
    return int(next(line.split()[1] for line in status.splitlines()
                    if line.startswith("VmRSS:")))


class HostileAttempts:
    """Hostile SASL attempts over real sockets, of seven kinds in turn: garbage instead of a
    request, a size prefix far over sasl.server.max.receive.size, an unknown mechanism,
    random tokens after a good handshake, a truncated request then nothing, random raw tokens
    after handshake v0, and (with `slow`) a request trickled a byte at a time then abandoned,
    which only connections.max.idle.ms ends."""

    def __init__(self, address: str, *, seed: int, slow: bool = False) -> None:
        import random

        from pykraft.protocol.framing import encode_request

        self.host, port = address.split(":")
        self.port = int(port)
        self.rng = random.Random(seed)
        self.kinds = 7 if slow else 6
        self.encode = encode_request
        self.handshake = encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, "fuzz", _entity(
            ApiKey.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512"))

    def frames(self, kind: int) -> list[bytes]:
        rng, encode = self.rng, self.encode
        if kind == 0:
            return [rng.randbytes(rng.randint(1, 64))]
        if kind == 1:
            return [struct.pack(">i", 600_000) + b"\0" * 16]
        if kind == 2:
            return [encode(ApiKey.SASL_HANDSHAKE, 1, 1, "fuzz", _entity(
                ApiKey.SASL_HANDSHAKE, 1, mechanism=rng.choice(["GSSAPI", "X" * 300, ""])))]
        if kind == 3:
            return [self.handshake, encode(ApiKey.SASL_AUTHENTICATE, 2, 2, "fuzz", _entity(
                ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=rng.randbytes(200)))]
        if kind in (4, 6):
            return [self.handshake[:rng.randint(5, len(self.handshake) - 1)]]
        return [encode(ApiKey.SASL_HANDSHAKE, 0, 1, "fuzz", _entity(
            ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN")), struct.pack(">i", 40)
            + rng.randbytes(40)]

    async def attempt(self, index: int) -> None:
        kind = index % self.kinds
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            for frame in self.frames(kind):
                if kind == 6:  # slow: a byte at a time, then silence until the node closes
                    for byte in frame:
                        writer.write(bytes([byte]))
                        await writer.drain()
                        await asyncio.sleep(0.05)
                    assert await asyncio.wait_for(reader.read(1), 30) == b""
                    return
                writer.write(frame)
            await writer.drain()
            if kind in (0, 4):
                return  # garbage may be a frame's start: dropped half-way
            # the node answers (then closes) or closes: either ends the wait
            await asyncio.wait_for(reader.read(65536), 10)
        finally:
            writer.close()

    def run(self, start: int, count: int, at_once: int) -> None:
        async def batches() -> None:
            for first in range(start, start + count, at_once):
                await asyncio.gather(*(self.attempt(i) for i in range(
                    first, min(first + at_once, start + count))))

        asyncio.run(batches())


def _open_fds(process: Any) -> int:
    return len(list(Path(f"/proc/{process.pid}/fd").iterdir()))


def test_garbage_sasl_attempts_crash_nothing_and_hold_nothing(node: SaslNode) -> None:
    """Hundreds of hostile attempts (HostileAttempts, without the slow kind), 50 at a time:
    every one is answered or closed, the node keeps serving and its memory does not grow
    with them."""
    attempts = HostileAttempts(node.sasl, seed=19)
    attempts.run(0, 300, 50)  # warm up: the first attempts size the node's caches
    before = _rss_kib(node)
    attempts.run(300, 600, 50)
    grown = _rss_kib(node) - before
    assert grown < 8 * 1024, f"RSS grew {grown} KiB over 600 attempts"
    confluent_round_trip(confluent_config(node, "SCRAM-SHA-512", "carol", "carol-secret"))
    assert "Traceback" not in node.cluster.log_path.read_text(errors="replace")


@pytest.mark.slow
def test_ten_thousand_hostile_attempts_with_slow_ones(tmp_path: Path) -> None:
    """Issue 19's bound: 10,000 hostile attempts, slow ones among them (ended by
    connections.max.idle.ms, 1 s here), 100 at a time against a node of its own: nothing
    crashes, every connection is let go (open descriptors back to where they were), memory
    stays flat, and a client is served after."""
    port = free_port()
    cluster = LocalCluster(data_dir=tmp_path / "node")
    cluster.extra_configs.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{cluster.broker_port},"
                     f"CONTROLLER://127.0.0.1:{cluster.controller_port},"
                     f"SASL://127.0.0.1:{port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{cluster.broker_port},"
                                f"SASL://127.0.0.1:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
                                          "SASL:SASL_PLAINTEXT",
        "listener.name.sasl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_alice="alice-secret";',
        "connections.max.idle.ms": "1000",
    })
    cluster._write_config()
    with cluster:  # (started by the context manager)
        assert cluster.process is not None
        attempts = HostileAttempts(f"127.0.0.1:{port}", seed=1919, slow=True)
        attempts.run(0, 1000, 100)
        time.sleep(2)  # the last slow ones reach the idle timeout
        rss, fds = _rss_kib_of(cluster), _open_fds(cluster.process)
        attempts.run(1000, 9000, 100)
        eventually(lambda: _at_most(_open_fds(cluster.process), fds), timeout_s=10)
        grown = _rss_kib_of(cluster) - rss
        assert grown < 16 * 1024, f"RSS grew {grown} KiB over 9,000 attempts"
        sasl = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                "sasl.password": "alice-secret"}
        confluent_round_trip(sasl)
        assert "Traceback" not in cluster.log_path.read_text(errors="replace")


def _at_most(value: int, bound: int) -> None:
    assert value <= bound, (value, bound)


def _rss_kib_of(cluster: LocalCluster) -> int:
    assert cluster.process is not None
    status = Path(f"/proc/{cluster.process.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines()
                    if line.startswith("VmRSS:")))


def test_signed_tokens_against_the_jwks(node: SaslNode,
                                        caplog: pytest.LogCaptureFixture) -> None:
    """KIP-768: on the listener with Kafka's OAuthBearerValidatorCallbackHandler, kafka-python
    and aiokafka log in with an RS256 token the JWKS's key signed, and produce and consume;
    an expired signed token, one for another audience and an unsecured one are refused."""
    now = time.time()
    claims = {"sub": "svc", "aud": "pykraft", "iat": now, "exp": now + 600}
    signed = node.sign(claims)
    for mechanism_config in (kafka_python_config, aiokafka_config):
        config = mechanism_config(node, "OAUTHBEARER", "svc", "", signed)
        config["bootstrap_servers"] = node.jwks
        if mechanism_config is kafka_python_config:
            from kafka import KafkaProducer

            producer = KafkaProducer(**config)
            try:
                producer.send(_topic(), b"signed").get(timeout=15)
            finally:
                producer.close()
        else:
            from aiokafka import AIOKafkaProducer

            async def produce(config: dict[str, Any] = config) -> None:
                producer = AIOKafkaProducer(**config)
                await producer.start()
                try:
                    await producer.send_and_wait(_topic(), b"signed")
                finally:
                    await producer.stop()

            asyncio.run(asyncio.wait_for(produce(), 60))
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    for refused in (node.sign({**claims, "exp": now - 60, "iat": now - 120}),
                    node.sign({**claims, "aud": "someone-else"}),
                    unsecured_token("svc", 600)):
        config = kafka_python_config(node, "OAUTHBEARER", "svc", "", refused)
        config["bootstrap_servers"] = node.jwks
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kafka"), \
                pytest.raises(KafkaTimeoutError):
            KafkaProducer(**config, bootstrap_timeout_ms=1500)
        assert any('{"status":"invalid_token"}' in r.getMessage() for r in caplog.records)
