"""The SASL state machines (net/sasl.py, net/sasl_client.py), without sockets: the server's
authenticator fed the frames our client exchange makes, and hand-made ones for what a
client may get wrong."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from pykraft.metadata.registrations import ScramCredential
from pykraft.net import scram
from pykraft.net.principal import KafkaPrincipal
from pykraft.net.sasl import (
    Decision,
    JaasConfigError,
    ListenerSasl,
    Outcome,
    SaslServerAuthenticator,
    State,
    parse_jaas_config,
    validate_unsecured_token,
)
from pykraft.net.sasl_client import (
    ClientSasl,
    SaslAuthenticationError,
    SaslClientExchange,
    client_sasl_from_config,
    unsecured_token,
)
from pykraft.protocol.api import BROKER_APIS, ApiKey
from pykraft.protocol.entities import make
from pykraft.protocol.framing import decode_response, encode_request, request_type

NOW_MS = 1_700_000_000_000
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" '
              'user_alice="alice \\"quoted\\" secret";')
OAUTH_JAAS = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
              'unsecuredLoginStringClaim_sub="admin" '
              'unsecuredValidatorAllowableClockSkewMs="1000";')


def _config(values: dict[str, str]) -> Callable[[str], str | None]:
    return values.get


def _listener(**extra: str) -> ListenerSasl:
    values = {
        "listener.name.sasl.sasl.enabled.mechanisms":
            "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
        **extra,
    }
    sasl = ListenerSasl.from_config(_config(values), "SASL")
    credentials = {
        (mechanism.code, "alice"): scram.credential(mechanism, "alice-secret")
        for mechanism in (scram.SCRAM_SHA_256, scram.SCRAM_SHA_512)
    }
    sasl.scram_lookup = lambda code, user: credentials.get((code, user))
    return sasl


def _unframe(frame: bytes) -> memoryview:
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    return memoryview(frame[4:])


def _run(server: SaslServerAuthenticator, client: SaslClientExchange,
         now_ms: int = NOW_MS) -> Outcome:
    """Drive both machines until the client is done or the server stops answering."""
    request = client.next_request()
    while request is not None:
        outcome = server.receive(_unframe(request), now_ms)
        if outcome.decision is not Decision.RESPOND:
            return outcome
        assert outcome.response is not None
        client.receive(bytes(_unframe(outcome.response)))
        request = client.next_request()
    return Outcome(Decision.RESPOND)


def _server(sasl: ListenerSasl | None = None) -> SaslServerAuthenticator:
    return SaslServerAuthenticator(sasl or _listener(), dict(BROKER_APIS), "127.0.0.1:5000")


def _request(api_key: int, version: int, **fields: Any) -> memoryview:
    entity = make(request_type(api_key, version), **fields)
    return _unframe(encode_request(api_key, version, 7, "test", entity))


def _response(outcome: Outcome, api_key: int, version: int) -> Any:
    assert outcome.response is not None
    return decode_response(api_key, version, _unframe(outcome.response))[1]


# -- the JAAS config --------------------------------------------------------------------


def test_jaas_config_reads_options_quotes_and_escapes() -> None:
    [module] = parse_jaas_config(PLAIN_JAAS)
    assert module.class_name == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert module.flag == "required"
    assert module.options["user_alice"] == 'alice "quoted" secret'
    assert module.options["username"] == "admin"
    two = parse_jaas_config("a.B required x=1; c.D optional y=\"2\";")
    assert [m.options for m in two] == [{"x": "1"}, {"y": "2"}]


@pytest.mark.parametrize("text", ["", "a.B required x=1", "a.B sometimes x=1;",
                                  "a.B required x=;", 'a.B required x="open;'])
def test_jaas_config_refuses_malformed_text(text: str) -> None:
    with pytest.raises(JaasConfigError):
        parse_jaas_config(text)


def test_listener_config_refuses_gssapi_and_missing_jaas() -> None:
    with pytest.raises(ValueError, match="GSSAPI"):
        ListenerSasl.from_config(_config({}), "SASL")  # Kafka's default mechanism
    with pytest.raises(ValueError, match="listener.name.sasl.plain.sasl.jaas.config"):
        ListenerSasl.from_config(_config({"sasl.enabled.mechanisms": "PLAIN"}), "SASL")
    with pytest.raises(ValueError, match="unsupported SASL mechanism DIGEST-MD5"):
        ListenerSasl.from_config(_config({"sasl.enabled.mechanisms": "DIGEST-MD5"}), "SASL")
    with pytest.raises(ValueError, match="1 module"):
        ListenerSasl.from_config(_config({
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl.plain.sasl.jaas.config": "a.B required; c.D required;"}),
            "SASL")


def test_listener_prefixed_keys_win() -> None:
    sasl = ListenerSasl.from_config(_config({
        "sasl.enabled.mechanisms": "GSSAPI",
        "listener.name.sasl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "connections.max.reauth.ms": "1000",
        "listener.name.sasl.scram-sha-512.connections.max.reauth.ms": "5000",
        "connection.failed.authentication.delay.ms": "250",
    }), "SASL")
    assert sasl.enabled_mechanisms == ("SCRAM-SHA-512",)
    assert sasl.reauth_ms_by_mechanism == {"SCRAM-SHA-512": 5000}
    assert sasl.failed_authentication_delay_ms == 250


# -- SCRAM against RFC 7677's example ------------------------------------------------------

RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def test_scram_sha_256_server_matches_rfc_7677() -> None:
    credential = scram.credential(scram.SCRAM_SHA_256, "pencil", salt=RFC_SALT)
    sasl = _listener()
    sasl.scram_lookup = lambda code, user: credential if (code, user) == (1, "user") else None
    server = sasl.server_for("SCRAM-SHA-256", NOW_MS, lambda: RFC_SERVER_NONCE)
    server_first = server.evaluate(f"n,,n=user,r={RFC_CLIENT_NONCE}".encode(), NOW_MS)
    assert server_first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    server_final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", NOW_MS)
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.user == "user"


def test_scram_sha_256_client_matches_rfc_7677() -> None:
    from pykraft.net.sasl_client import _Mechanism

    client = _Mechanism(ClientSasl("SCRAM-SHA-256", "user", "pencil"), NOW_MS,
                        lambda: RFC_CLIENT_NONCE)
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.answer(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                          b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert client.answer(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert client.complete
    with pytest.raises(SaslAuthenticationError, match="signature"):
        forged = _Mechanism(ClientSasl("SCRAM-SHA-256", "user", "pencil"), NOW_MS,
                            lambda: RFC_CLIENT_NONCE)
        forged.first()
        forged.answer(b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
        forged.answer(b"v=AAAA")


# -- whole exchanges: our client against our server --------------------------------------


@pytest.mark.parametrize("sasl", [
    ClientSasl("PLAIN", "admin", "admin-secret"),
    ClientSasl("SCRAM-SHA-256", "alice", "alice-secret"),
    ClientSasl("SCRAM-SHA-512", "alice", "alice-secret"),
    ClientSasl("OAUTHBEARER", token_claims={"sub": "bob"}),
], ids=lambda s: s.mechanism)
def test_each_mechanism_authenticates_and_sets_the_principal(sasl: ClientSasl) -> None:
    server = _server()
    client = SaslClientExchange(sasl, NOW_MS)
    outcome = _run(server, client)
    assert outcome.decision is Decision.RESPOND and client.done
    assert server.state is State.COMPLETE
    expected = "bob" if sasl.mechanism == "OAUTHBEARER" else sasl.username
    assert server.principal == KafkaPrincipal.user(expected)
    # authenticated: ordinary requests go to the dispatcher
    metadata = _request(ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)
    assert server.receive(metadata, NOW_MS).decision is Decision.PASS_TO_DISPATCHER


@pytest.mark.parametrize(("sasl", "message"), [
    (ClientSasl("PLAIN", "admin", "wrong"), "Authentication failed: Invalid username or password"),
    (ClientSasl("PLAIN", "nobody", "x"), "Authentication failed: Invalid username or password"),
    (ClientSasl("SCRAM-SHA-256", "alice", "wrong"), "Authentication failed during "
     "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"),
    (ClientSasl("SCRAM-SHA-512", "nobody", "x"), "Authentication failed during "
     "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"),
], ids=["plain-password", "plain-user", "scram-password", "scram-user"])
def test_bad_credentials_fail_with_kafkas_message(sasl: ClientSasl, message: str) -> None:
    server = _server()
    client = SaslClientExchange(sasl, NOW_MS)
    outcome = _run(server, client)
    assert outcome.decision is Decision.FAIL and server.state is State.FAILED
    response = _response(outcome, ApiKey.SASL_AUTHENTICATE, 2)
    assert response.error_code == ErrorCode.sasl_authentication_failed
    assert response.error_message == message
    assert sasl.password not in outcome.reason and "secret" not in outcome.reason
    assert sasl.username in outcome.reason  # the log line names the user
    with pytest.raises(SaslAuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
        client.receive(bytes(_unframe(outcome.response or b"")))
    # nothing more is served on the connection
    assert server.receive(_request(ApiKey.API_VERSIONS, 0), NOW_MS).decision is Decision.CLOSE


def test_unsupported_mechanism_lists_the_enabled_ones() -> None:
    server = _server(_listener(**{"listener.name.sasl.sasl.enabled.mechanisms": "PLAIN"}))
    outcome = server.receive(_request(ApiKey.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512"),
                             NOW_MS)
    assert outcome.decision is Decision.FAIL
    response = _response(outcome, ApiKey.SASL_HANDSHAKE, 1)
    assert response.error_code == ErrorCode.unsupported_sasl_mechanism
    assert list(response.mechanisms) == ["PLAIN"]


def test_only_api_versions_and_handshake_before_authentication() -> None:
    server = _server()
    versions = server.receive(_request(ApiKey.API_VERSIONS, 3, client_software_name="x",
                                       client_software_version="1"), NOW_MS)
    assert versions.decision is Decision.PASS_TO_DISPATCHER and server.state is State.HANDSHAKE
    again = server.receive(_request(ApiKey.API_VERSIONS, 0), NOW_MS)
    assert again.decision is Decision.CLOSE  # once only, as Kafka

    server = _server()
    metadata = _request(ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)
    outcome = server.receive(metadata, NOW_MS)
    assert outcome.decision is Decision.CLOSE
    assert outcome.reason == "Unexpected Kafka request of type METADATA during SASL handshake."

    server = _server()
    server.receive(_request(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN"), NOW_MS)
    outcome = server.receive(metadata, NOW_MS)
    assert outcome.decision is Decision.CLOSE and "during SASL authentication" in outcome.reason


def test_garbage_frames_close_and_never_raise() -> None:
    for frame in (b"", b"\x00", b"\x00\x11\x00\x01", b"\x00\x11\x00\x09" + b"\0" * 20,
                  b"\x00\x11\x00\x01\x00\x00\x00\x01\xff\xff\x7f\xff"):
        outcome = _server().receive(memoryview(frame), NOW_MS)
        assert outcome.decision is Decision.CLOSE, frame


def test_handshake_v0_takes_raw_tokens() -> None:
    server = _server()
    outcome = server.receive(_request(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN"), NOW_MS)
    assert outcome.decision is Decision.RESPOND
    answer = server.receive(memoryview(b"\0admin\0admin-secret"), NOW_MS)
    assert answer == Outcome(Decision.RESPOND, b"\0\0\0\0")  # an empty token, size-prefixed
    assert server.principal == KafkaPrincipal.user("admin")
    assert not server.supports_reauthentication  # v0 clients cannot re-authenticate

    server = _server()
    server.receive(_request(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN"), NOW_MS)
    failed = server.receive(memoryview(b"\0admin\0nope"), NOW_MS)
    assert failed.decision is Decision.FAIL and failed.response is None  # no field for it


def test_authenticated_connection_answers_sasl_requests_illegal_state() -> None:
    server = _server()
    _run(server, SaslClientExchange(ClientSasl("PLAIN", "admin", "admin-secret"), NOW_MS))
    outcome = server.receive(_request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"x"), NOW_MS)
    assert outcome.decision is Decision.RESPOND
    assert _response(outcome, ApiKey.SASL_AUTHENTICATE, 2).error_code == \
        ErrorCode.illegal_sasl_state


# -- OAUTHBEARER's unsecured tokens (KIP-255) -----------------------------------------------


def _token(claims: dict[str, Any], alg: str = "none") -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': alg})}.{part(claims)}."


def _oauth_response(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_expired_token_is_refused_after_the_clients_acknowledgement() -> None:
    server = _server()
    server.receive(_request(ApiKey.SASL_HANDSHAKE, 1, mechanism="OAUTHBEARER"), NOW_MS)
    expired = _token({"sub": "bob", "exp": NOW_MS / 1000 - 5, "iat": NOW_MS / 1000 - 60})
    challenge = server.receive(_request(ApiKey.SASL_AUTHENTICATE, 2,
                                        auth_bytes=_oauth_response(expired)), NOW_MS)
    response = _response(challenge, ApiKey.SASL_AUTHENTICATE, 2)
    assert response.error_code == ErrorCode.none
    assert json.loads(response.auth_bytes) == {"status": "invalid_token"}
    outcome = server.receive(_request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\x01"), NOW_MS)
    assert outcome.decision is Decision.FAIL
    failed = _response(outcome, ApiKey.SASL_AUTHENTICATE, 2)
    assert failed.error_code == ErrorCode.sasl_authentication_failed
    assert failed.error_message == '{"status":"invalid_token"}'
    assert "Expiration Time" in outcome.reason


def test_unsecured_validator_rules() -> None:
    from pykraft.net.sasl import _InvalidToken, _oauth_settings

    settings = _oauth_settings({"unsecuredValidatorAllowableClockSkewMs": "1000",
                                "unsecuredValidatorRequiredScope": "read write"}, "SASL")
    now = NOW_MS / 1000
    good = {"sub": "bob", "exp": now + 60, "iat": now, "scope": "read write other"}
    assert validate_unsecured_token(_token(good), settings, NOW_MS) == ("bob",
                                                                        int((now + 60) * 1000))
    # within the allowed skew, an expiry just passed still counts
    assert validate_unsecured_token(_token({**good, "exp": now - 0.5, "iat": now - 10}),
                                    settings, NOW_MS)[0] \
        == "bob"
    for claims, alg, status in [
        ({**good, "exp": now - 2}, "none", "invalid_token"),
        ({**good, "iat": now + 5}, "none", "invalid_token"),
        ({k: v for k, v in good.items() if k != "exp"}, "none", "invalid_token"),
        ({k: v for k, v in good.items() if k != "sub"}, "none", "invalid_token"),
        ({**good, "scope": "read"}, "none", "insufficient_scope"),
        (good, "HS256", "invalid_token"),
    ]:
        with pytest.raises(_InvalidToken) as refused:
            validate_unsecured_token(_token(claims, alg), settings, NOW_MS)
        assert refused.value.status == status, claims
    for garbage in ("", "a.b", "a.b.c", "!!.??.", _token(good)[:-1] + "sig"):
        with pytest.raises(_InvalidToken):
            validate_unsecured_token(garbage, settings, NOW_MS)


# -- re-authentication (KIP-368) -------------------------------------------------------------


def test_reauthentication_lifetime_expiry_and_same_principal() -> None:
    sasl = _listener(**{"connections.max.reauth.ms": "10000"})
    server = _server(sasl)
    client = SaslClientExchange(ClientSasl("SCRAM-SHA-256", "alice", "alice-secret"), NOW_MS)
    _run(server, client)
    assert client.session_lifetime_ms == 10000
    metadata = _request(ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)
    assert server.receive(metadata, NOW_MS + 9999).decision is Decision.PASS_TO_DISPATCHER
    # re-authenticating in time is served, and starts a new session
    again = SaslClientExchange(ClientSasl("SCRAM-SHA-256", "alice", "alice-secret"), NOW_MS)
    assert _run(server, again, NOW_MS + 9000).decision is Decision.RESPOND and again.done
    assert server.receive(metadata, NOW_MS + 18000).decision is Decision.PASS_TO_DISPATCHER
    # past the session's end, anything but re-authentication closes the connection
    closed = server.receive(metadata, NOW_MS + 19001)
    assert closed.decision is Decision.CLOSE and "expired" in closed.reason
    # another principal may not take the connection over
    other = SaslClientExchange(ClientSasl("PLAIN", "admin", "admin-secret"), NOW_MS)
    server = _server(sasl)
    _run(server, SaslClientExchange(ClientSasl("PLAIN", "alice", "alice \"quoted\" secret"),
                                    NOW_MS))
    outcome = _run(server, other, NOW_MS + 1)
    assert outcome.decision is Decision.FAIL
    assert "Cannot change principals" in _response(
        outcome, ApiKey.SASL_AUTHENTICATE, 2).error_message


def test_token_expiry_bounds_the_session() -> None:
    server = _server(_listener(**{"connections.max.reauth.ms": "3600000"}))
    client = SaslClientExchange(ClientSasl("OAUTHBEARER", token_claims={"sub": "bob"},
                                           token_lifetime_s=60), NOW_MS)
    _run(server, client)
    assert client.session_lifetime_ms == 60000


# -- the node's own credentials ------------------------------------------------------------


def test_client_sasl_from_config() -> None:
    values = {"sasl.mechanism.inter.broker.protocol": "PLAIN",
              "listener.name.sasl.plain.sasl.jaas.config": PLAIN_JAAS,
              "sasl.mechanism.controller.protocol": "OAUTHBEARER",
              "listener.name.sasl.oauthbearer.sasl.jaas.config": OAUTH_JAAS}
    sasl = client_sasl_from_config(_config(values), "SASL", "inter.broker")
    assert (sasl.mechanism, sasl.username, sasl.password) == ("PLAIN", "admin", "admin-secret")
    assert "admin-secret" not in repr(sasl)
    oauth = client_sasl_from_config(_config(values), "SASL", "controller")
    assert oauth.token_claims == {"sub": "admin"}
    with pytest.raises(ValueError, match="GSSAPI"):
        client_sasl_from_config(_config({}), "SASL", "inter.broker")
    with pytest.raises(ValueError, match="username and password"):
        client_sasl_from_config(_config({
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
            "listener.name.sasl.scram-sha-256.sasl.jaas.config": "x.Y required;"}),
            "SASL", "inter.broker")


def test_unsecured_token_shape() -> None:
    header, claims, signature = unsecured_token({"sub": "n"}, NOW_MS, 30).split(".")
    assert signature == ""
    decoded = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    assert decoded["sub"] == "n" and decoded["exp"] - decoded["iat"] == 30


def test_scram_credential_with_too_few_iterations_is_refused() -> None:
    sasl = _listener()
    weak = ScramCredential(b"salt", b"k" * 32, b"s" * 32, 1000)
    sasl.scram_lookup = lambda code, user: weak
    server = _server(sasl)
    outcome = _run(server, SaslClientExchange(ClientSasl("SCRAM-SHA-256", "alice", "x"),
                                              NOW_MS))
    assert outcome.decision is Decision.FAIL and "Iterations 1000" in outcome.reason


def test_a_client_that_ignores_the_token_error_is_closed_with_the_reason() -> None:
    """aiokafka sends its next request instead of answering the error challenge."""
    server = _server()
    server.receive(_request(ApiKey.SASL_HANDSHAKE, 1, mechanism="OAUTHBEARER"), NOW_MS)
    expired = _token({"sub": "bob", "exp": NOW_MS / 1000 - 5})
    server.receive(_request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=_oauth_response(expired)),
                   NOW_MS)
    metadata = _request(ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)
    outcome = server.receive(metadata, NOW_MS)
    assert outcome.decision is Decision.CLOSE
    assert "refusing the token: The indicated time" in outcome.reason


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]),
       st.integers(0, 2), st.lists(st.binary(max_size=300), min_size=1, max_size=4))
def test_garbage_tokens_get_an_outcome_never_an_exception(mechanism: str, version: int,
                                                          tokens: list[bytes]) -> None:
    """Any bytes as SASL tokens (in SaslAuthenticate at each version, or raw after a v0
    handshake) give a decision; none raises, none authenticates."""
    server = _server()
    handshake = 0 if version == 0 and tokens[0][:1] == b"\0" else 1
    server.receive(_request(ApiKey.SASL_HANDSHAKE, handshake, mechanism=mechanism), NOW_MS)
    for token in tokens:
        frame = memoryview(token) if handshake == 0 else _request(
            ApiKey.SASL_AUTHENTICATE, version, auth_bytes=token)
        outcome = server.receive(frame, NOW_MS)
        assert isinstance(outcome, Outcome)
        if outcome.decision in (Decision.FAIL, Decision.CLOSE):
            break
    assert server.principal is None


# -- signed tokens against a JWKS (KIP-768) --------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _number_b64(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


def _jwks_and_signers() -> tuple[str, Callable[[dict[str, Any], str], str]]:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    rsa_public, ec_public = rsa_key.public_key().public_numbers(), \
        ec_key.public_key().public_numbers()
    jwks = json.dumps({"keys": [
        {"kty": "RSA", "kid": "r1", "use": "sig", "n": _number_b64(rsa_public.n),
         "e": _number_b64(rsa_public.e)},
        {"kty": "EC", "kid": "e1", "crv": "P-256", "x": _number_b64(ec_public.x),
         "y": _number_b64(ec_public.y)},
        {"kty": "oct", "kid": "skipped", "k": "c2VjcmV0"},
    ]})

    def sign(claims: dict[str, Any], kid: str) -> str:
        algorithm = "RS256" if kid.startswith("r") else "ES256"
        head = _b64(json.dumps({"alg": algorithm, "kid": kid}).encode())
        body = _b64(json.dumps(claims).encode())
        signed = f"{head}.{body}".encode()
        if kid.startswith("r"):
            signature = rsa_key.sign(signed, padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = decode_dss_signature(ec_key.sign(signed, ec.ECDSA(hashes.SHA256())))
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{head}.{body}.{_b64(signature)}"

    return jwks, sign


def test_signed_tokens_are_checked_against_the_jwks() -> None:
    from pykraft.net.sasl import JwksSettings, _InvalidToken, parse_jwks, validate_signed_token

    jwks, sign = _jwks_and_signers()
    keys = parse_jwks(jwks)
    assert set(keys) == {"r1", "e1"}
    settings = JwksSettings(url="file:/unused", expected_audience=("kafka",),
                            expected_issuer="https://issuer", clock_skew_s=30)
    now = NOW_MS / 1000
    good = {"sub": "svc", "exp": now + 300, "iat": now, "aud": ["kafka", "x"],
            "iss": "https://issuer"}
    for kid in ("r1", "e1"):
        assert validate_signed_token(sign(good, kid), settings, keys, NOW_MS) == (
            "svc", int((now + 300) * 1000))
    forged = sign(good, "r1").rsplit(".", 1)[0] + "." + _b64(b"\0" * 256)
    tampered_body = _b64(json.dumps({**good, "sub": "admin"}).encode())
    head, _, signature = sign(good, "e1").split(".")
    for token in (forged, f"{head}.{tampered_body}.{signature}",
                  sign({**good, "exp": now - 60}, "r1"), sign({**good, "aud": "other"}, "r1"),
                  sign({**good, "iss": "https://evil"}, "e1"),
                  sign({k: v for k, v in good.items() if k != "sub"}, "r1"),
                  sign({**good, "iat": now + 600}, "e1"), sign(good, "e2"),
                  _token(good), "a.b.c", ""):
        with pytest.raises(_InvalidToken):
            validate_signed_token(token, settings, keys, NOW_MS)


def test_jwks_validator_from_config_and_a_login() -> None:
    from pykraft.net.sasl import JWKS_VALIDATOR_CLASSES, parse_jwks

    jwks, sign = _jwks_and_signers()
    values = {
        "listener.name.sasl.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
        "listener.name.sasl.oauthbearer.sasl.server.callback.handler.class":
            JWKS_VALIDATOR_CLASSES[0],
        "sasl.oauthbearer.jwks.endpoint.url": "file:/etc/jwks.json",
        "sasl.oauthbearer.expected.audience": "kafka",
    }
    sasl = ListenerSasl.from_config(_config(values), "SASL")
    assert sasl.jwks is not None and sasl.jwks.expected_audience == ("kafka",)
    sasl.jwks_keys = parse_jwks(jwks)
    token = sign({"sub": "svc", "exp": NOW_MS / 1000 + 60, "aud": "kafka"}, "r1")
    server = _server(sasl)
    server.receive(_request(ApiKey.SASL_HANDSHAKE, 1, mechanism="OAUTHBEARER"), NOW_MS)
    outcome = server.receive(_request(ApiKey.SASL_AUTHENTICATE, 2,
                                      auth_bytes=_oauth_response(token)), NOW_MS)
    assert outcome.decision is Decision.RESPOND and server.principal == KafkaPrincipal.user(
        "svc")
    # an unsecured token is no longer enough
    server = _server(sasl)
    server.receive(_request(ApiKey.SASL_HANDSHAKE, 1, mechanism="OAUTHBEARER"), NOW_MS)
    challenge = server.receive(_request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=_oauth_response(
        _token({"sub": "svc", "exp": NOW_MS / 1000 + 60}))), NOW_MS)
    assert json.loads(_response(challenge, ApiKey.SASL_AUTHENTICATE, 2).auth_bytes) == {
        "status": "invalid_token"}
    with pytest.raises(ValueError, match="unsupported class"):
        ListenerSasl.from_config(_config({
            **values, "listener.name.sasl.oauthbearer.sasl.server.callback.handler.class":
                "com.example.Mine"}), "SASL")
    with pytest.raises(ValueError, match="jwks.endpoint.url"):
        ListenerSasl.from_config(_config({
            **values, "sasl.oauthbearer.jwks.endpoint.url": "ftp://x"}), "SASL")
    with pytest.raises(ValueError, match="JWK Set"):
        parse_jwks('{"keys": [{"kty": "oct", "k": "x"}]}')
