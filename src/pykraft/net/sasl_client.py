"""SASL, client side: how the node (and, later, the sync tools) authenticates its own
connections to SASL_PLAINTEXT and SASL_SSL listeners.

`ClientSasl` is what to authenticate with: a mechanism and a user name with a password (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512) or the claims of an unsecured OAUTHBEARER token (KIP-255).
`SaslClientExchange` is the sans-I/O conversation, SaslHandshake v1 then SaslAuthenticate v2
until the mechanism is done: it makes the request frames and reads the response frames, so
an asyncio shell (`authenticate`, used by net/connect.py's `open_connection`) and a blocking
one can drive the same code.

A node's own credentials come from its config as Kafka's brokers read theirs:
`sasl.mechanism.inter.broker.protocol` or `sasl.mechanism.controller.protocol` names the
mechanism (Kafka's default, GSSAPI, is refused: no Kerberos here), and the login module of
`listener.name.<listener>.<mechanism>.sasl.jaas.config` on the listener reached gives
`username` and `password` (PLAIN, SCRAM) or the `unsecuredLogin*` options (OAUTHBEARER).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import itertools
import json
import secrets
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.net import scram
from pykraft.net.sasl import GSSAPI, MECHANISMS, OAUTHBEARER, PLAIN, jaas_module
from pykraft.protocol.api import ApiKey
from pykraft.protocol.entities import make
from pykraft.protocol.framing import FrameError, decode_response, encode_request, request_type

__all__ = ["ClientSasl", "SaslAuthenticationError", "SaslClientExchange", "authenticate",
           "client_sasl_from_config", "unsecured_token"]

_SIZE: Final = struct.Struct(">i")
_HANDSHAKE_VERSION: Final = 1
_AUTHENTICATE_VERSION: Final = 2
# what the node reads of an answer during authentication (Kafka's own answers are small)
RESPONSE_BYTES_MAX: Final = 1024 * 1024
_ROUNDS_MAX: Final = 8

Get = Callable[[str], str | None]


class SaslAuthenticationError(ConnectionError):
    """The peer refused the authentication (or broke the protocol); the message says why,
    never with the secret."""


@dataclass(frozen=True, slots=True)
class ClientSasl:
    mechanism: str
    username: str = ""
    password: str = field(default="", repr=False)
    # OAUTHBEARER: the claims of the unsecured token made at each authentication
    token_claims: Mapping[str, Any] = field(default_factory=dict)
    token_lifetime_s: int = 3600
    principal_claim: str = "sub"

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"unsupported SASL mechanism {self.mechanism}; supported: "
                             f"{', '.join(MECHANISMS)}")


def client_sasl_from_config(get: Get, listener: str, purpose: str) -> ClientSasl:
    """The node's credentials for `listener` ("inter.broker" or "controller" picks the
    sasl.mechanism.*.protocol key). ValueError naming the key when they are missing."""
    key = f"sasl.mechanism.{purpose}.protocol"
    mechanism = (get(key) or GSSAPI).strip().upper()
    if mechanism == GSSAPI:
        raise ValueError(f"{key} is GSSAPI (Kafka's default) but listener {listener} uses SASL: "
                         "pykraft does not support Kerberos; set it to one of "
                         f"{', '.join(MECHANISMS)}")
    if mechanism not in MECHANISMS:
        raise ValueError(f"{key}: unsupported SASL mechanism {mechanism}; supported: "
                         f"{', '.join(MECHANISMS)}")
    module = jaas_module(get, listener, mechanism, required=True)
    assert module is not None
    options = module.options
    jaas_key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    if mechanism == OAUTHBEARER:
        principal_claim = options.get("unsecuredLoginPrincipalClaimName", "sub") or "sub"
        claims: dict[str, Any] = {}
        for name, value in options.items():
            if name.startswith("unsecuredLoginStringClaim_"):
                claims[name[len("unsecuredLoginStringClaim_"):]] = value
            elif name.startswith("unsecuredLoginNumberClaim_"):
                try:
                    claims[name[len("unsecuredLoginNumberClaim_"):]] = float(value)
                except ValueError:
                    raise ValueError(f"{jaas_key}: option {name} is not a number") from None
            elif name.startswith("unsecuredLoginListClaim_") and value:
                claims[name[len("unsecuredLoginListClaim_"):]] = value[1:].split(value[0])
        if not isinstance(claims.get(principal_claim), str):
            raise ValueError(f"{jaas_key}: option unsecuredLoginStringClaim_{principal_claim} "
                             "(the node's principal) must be set")
        lifetime = options.get("unsecuredLoginLifetimeSeconds", "3600")
        try:
            lifetime_s = int(lifetime)
        except ValueError:
            raise ValueError(f"{jaas_key}: option unsecuredLoginLifetimeSeconds is not an "
                             "integer") from None
        return ClientSasl(mechanism, token_claims=claims, token_lifetime_s=lifetime_s,
                          principal_claim=principal_claim)
    username, password = options.get("username"), options.get("password")
    if not username or not password:
        raise ValueError(f"{jaas_key}: options username and password must be set: the node "
                         f"authenticates its own connections to listener {listener} with them")
    return ClientSasl(mechanism, username, password)


def unsecured_token(claims: Mapping[str, Any], now_ms: int, lifetime_s: int) -> str:
    """An unsecured JWS (alg none, KIP-255) carrying `claims` plus iat and exp."""
    def encode(value: Mapping[str, Any]) -> str:
        text = json.dumps(value, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(text).rstrip(b"=").decode()

    body = {**claims, "iat": now_ms / 1000, "exp": now_ms / 1000 + lifetime_s}
    return f"{encode({'alg': 'none'})}.{encode(body)}."


# -- mechanisms ---------------------------------------------------------------------------


def _scram_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class _Mechanism:
    """One mechanism's client: `first()` is the initial token, `answer(challenge)` the next
    (None when the challenge was the server's last word)."""

    def __init__(self, sasl: ClientSasl, now_ms: int,
                 nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24)) -> None:
        self.sasl = sasl
        self.now_ms = now_ms
        self.complete = False
        self._nonce = nonce
        self._scram_state: tuple[str, str] | None = None  # (client-first-bare, nonce)
        self._server_signature: bytes | None = None
        self._oauth_refused = False

    def first(self) -> bytes:
        sasl = self.sasl
        if sasl.mechanism == PLAIN:
            return f"\0{sasl.username}\0{sasl.password}".encode()
        if sasl.mechanism == OAUTHBEARER:
            token = unsecured_token(sasl.token_claims, self.now_ms, sasl.token_lifetime_s)
            return f"n,,\x01auth=Bearer {token}\x01\x01".encode()
        nonce = self._nonce()
        bare = f"n={_scram_name(sasl.username)},r={nonce}"
        self._scram_state = (bare, nonce)
        return f"n,,{bare}".encode()

    def answer(self, challenge: bytes) -> bytes | None:
        mechanism = self.sasl.mechanism
        if mechanism == PLAIN:
            self.complete = True
            return None
        if mechanism == OAUTHBEARER:
            if challenge:  # the server's JSON error: acknowledged, then it fails the exchange
                self._oauth_refused = True
                return b"\x01"
            self.complete = True
            return None
        if self._server_signature is None:
            return self._scram_final(challenge)
        self._scram_verify(challenge)
        return None

    def _scram_final(self, challenge: bytes) -> bytes:
        assert self._scram_state is not None
        bare, nonce = self._scram_state
        found = scram.mechanism_named(self.sasl.mechanism)
        assert found is not None
        try:
            server_first = challenge.decode()
            attributes = dict(item.split("=", 1) for item in server_first.split(","))
            full_nonce, salt = attributes["r"], base64.b64decode(attributes["s"])
            iterations = int(attributes["i"])
        except (UnicodeDecodeError, ValueError, KeyError) as error:
            raise SaslAuthenticationError(f"invalid SCRAM server-first message: {error}") \
                from None
        if not full_nonce.startswith(nonce) or len(full_nonce) == len(nonce):
            raise SaslAuthenticationError("invalid SCRAM server nonce")
        if not scram.ITERATIONS_MIN <= iterations <= scram.ITERATIONS_MAX:
            raise SaslAuthenticationError(f"SCRAM iterations {iterations} out of range")
        salted = found.salted_password(self.sasl.password.encode(), salt, iterations)
        client_key = found.client_key(salted)
        without_proof = f"c=biws,r={full_nonce}"
        auth_message = f"{bare},{server_first},{without_proof}".encode()
        signature = found.hmac(found.stored_key(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = found.hmac(found.server_key(salted), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _scram_verify(self, challenge: bytes) -> None:
        assert self._server_signature is not None
        expected = b"v=" + base64.b64encode(self._server_signature)
        if not hmac.compare_digest(challenge, expected):
            raise SaslAuthenticationError("the server's SCRAM signature does not match: it "
                                          "does not know this user's credential")
        self.complete = True


# -- the exchange ---------------------------------------------------------------------------


class SaslClientExchange:
    """SaslHandshake v1, then SaslAuthenticate v2 rounds; frames in and out, no I/O.

        exchange = SaslClientExchange(sasl, now_ms)
        frame = exchange.next_request()
        while frame is not None:
            send(frame)
            exchange.receive(read_frame())  # SaslAuthenticationError when refused
            frame = exchange.next_request()
    """

    def __init__(self, sasl: ClientSasl, now_ms: int, *, client_id: str = "pykraft",
                 correlation_ids: itertools.count[int] | None = None,
                 nonce: Callable[[], str] | None = None) -> None:
        self.sasl = sasl
        self._mechanism = _Mechanism(sasl, now_ms, *((nonce,) if nonce else ()))
        self._client_id = client_id
        self._ids = correlation_ids or itertools.count(1)
        self._pending: tuple[int, int, int] | None = None  # (api key, version, correlation)
        self._token: bytes | None = None  # the next token to send
        self._handshaken = False
        self._rounds = 0
        self.done = False
        self.session_lifetime_ms = 0

    def next_request(self) -> bytes | None:
        """The next request frame (size-prefixed), or None when authenticated."""
        if self.done:
            return None
        correlation_id = next(self._ids)
        if not self._handshaken:
            request = make(request_type(ApiKey.SASL_HANDSHAKE, _HANDSHAKE_VERSION),
                           mechanism=self.sasl.mechanism)
            self._pending = (ApiKey.SASL_HANDSHAKE, _HANDSHAKE_VERSION, correlation_id)
            return encode_request(ApiKey.SASL_HANDSHAKE, _HANDSHAKE_VERSION, correlation_id,
                                  self._client_id, request)
        assert self._token is not None
        self._rounds += 1
        if self._rounds > _ROUNDS_MAX:
            raise SaslAuthenticationError(f"more than {_ROUNDS_MAX} SASL rounds")
        request = make(request_type(ApiKey.SASL_AUTHENTICATE, _AUTHENTICATE_VERSION),
                       auth_bytes=self._token)
        self._pending = (ApiKey.SASL_AUTHENTICATE, _AUTHENTICATE_VERSION, correlation_id)
        return encode_request(ApiKey.SASL_AUTHENTICATE, _AUTHENTICATE_VERSION, correlation_id,
                              self._client_id, request)

    def receive(self, frame: bytes) -> None:
        """A response frame without its size prefix."""
        assert self._pending is not None, "receive() before next_request()"
        api_key, version, correlation_id = self._pending
        self._pending = None
        try:
            answered, response = decode_response(api_key, version, frame)
        except (FrameError, ValueError, Exception) as error:  # kio raises several kinds
            raise SaslAuthenticationError(f"unreadable {ApiKey(api_key).name} response: "
                                          f"{error}") from None
        if answered != correlation_id:
            raise SaslAuthenticationError("SASL response for another request")
        if api_key == ApiKey.SASL_HANDSHAKE:
            self._handshake(response)
        else:
            self._authenticate(response)

    def _handshake(self, response: Any) -> None:
        error = ErrorCode(response.error_code)
        if error is ErrorCode.unsupported_sasl_mechanism:
            raise SaslAuthenticationError(
                f"the peer does not enable SASL mechanism {self.sasl.mechanism}; it enables "
                f"{', '.join(response.mechanisms)}")
        if error is not ErrorCode.none:
            raise SaslAuthenticationError(f"SaslHandshake failed: {error.name.upper()}")
        self._handshaken = True
        self._token = self._mechanism.first()

    def _authenticate(self, response: Any) -> None:
        error = ErrorCode(response.error_code)
        if error is not ErrorCode.none:
            raise SaslAuthenticationError(
                f"SASL authentication with {self.sasl.mechanism} failed: {error.name.upper()}: "
                f"{response.error_message or ''}".rstrip(": "))
        next_token = self._mechanism.answer(bytes(response.auth_bytes))
        if next_token is None:
            if not self._mechanism.complete:
                raise SaslAuthenticationError("SASL exchange ended early")
            self.done = True
            lifetime = response.session_lifetime
            self.session_lifetime_ms = int(lifetime.total_seconds() * 1000) \
                if hasattr(lifetime, "total_seconds") else int(lifetime)
            return
        self._token = next_token


async def authenticate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       sasl: ClientSasl) -> None:
    """Authenticate a fresh connection; SaslAuthenticationError (a ConnectionError) when
    the peer refuses, OSError when the connection fails."""
    exchange = SaslClientExchange(sasl, int(time.time() * 1000))
    frame = exchange.next_request()
    while frame is not None:
        writer.write(frame)
        await writer.drain()
        try:
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            if not 0 < size <= RESPONSE_BYTES_MAX:
                raise SaslAuthenticationError(f"SASL response of {size} bytes")
            exchange.receive(await reader.readexactly(size))
        except asyncio.IncompleteReadError:
            raise SaslAuthenticationError(
                "the peer closed the connection during SASL authentication (a refused "
                "mechanism, or SASL not enabled on its listener)") from None
        frame = exchange.next_request()
