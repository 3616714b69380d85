"""SASL on a listener, server side (KIP-43, KIP-152, KIP-368), as Kafka's
SaslServerAuthenticator does it; sans-I/O: frames in, encoded frames out, time as `now_ms`.

Theory of operation. A connection to a SASL_PLAINTEXT or SASL_SSL listener owns one
`SaslServerAuthenticator`. Until it has authenticated, every frame goes to the authenticator:

    HANDSHAKE_OR_VERSIONS --ApiVersions--> HANDSHAKE --SaslHandshake--> AUTHENTICATE
    HANDSHAKE_OR_VERSIONS --SaslHandshake--> AUTHENTICATE
    AUTHENTICATE --SaslAuthenticate (or a raw token after handshake v0)...--> COMPLETE
    any state --a bad request, a refused mechanism or credential--> FAILED

ApiVersions is answered by the listener's dispatcher (the decision `PASS_TO_DISPATCHER`),
once; any other request before authentication closes the connection, as Kafka's does. After a
SaslHandshake v0 the tokens come as raw size-prefixed frames without a Kafka header (the
pre-KIP-152 form); after v1 they come in SaslAuthenticate requests. A failure answers Kafka's
error (SASL_AUTHENTICATION_FAILED with Kafka's message, UNSUPPORTED_SASL_MECHANISM with the
enabled mechanisms, ILLEGAL_SASL_STATE) and the connection closes after
`connection.failed.authentication.delay.ms`; what the shell does with `Decision.FAIL`.

In COMPLETE the connection serves requests as `principal`. With a session lifetime
(`connections.max.reauth.ms`, or an OAUTHBEARER token's expiry; KIP-368) a client that spoke
SaslAuthenticate v1+ may re-authenticate by sending SaslHandshake again (same mechanism, same
principal); a request other than that after the session's end closes the connection.

Mechanisms: PLAIN (users from the listener's PlainLoginModule options `user_<name>="<pw>"`,
compared in constant time), SCRAM-SHA-256/512 (RFC 5802/7677; credentials from the metadata
image through `ScramLookup`), OAUTHBEARER with Kafka's unsecured JWS validator (KIP-255) or,
with Kafka's OAuthBearerValidatorCallbackHandler configured, signed tokens checked against a
JWKS the node loads (KIP-768). Secrets never reach a log line or an error message.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import enum
import hmac
import json
import logging
import re
import secrets
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from kio.index import UnknownAPIKey, UnknownEntity
from kio.schema.errors import ErrorCode

from pykraft.errors import InvalidRequest
from pykraft.metadata.registrations import ScramCredential
from pykraft.net import scram
from pykraft.net.principal import KafkaPrincipal
from pykraft.protocol.api import ApiKey, api_name, supports
from pykraft.protocol.entities import make, response_module
from pykraft.protocol.framing import (
    FrameError,
    RequestHeader,
    decode_request,
    encode_response,
    is_flexible,
    parse_request_header,
    skip_header_tags,
)

__all__ = [
    "GSSAPI", "JWKS_VALIDATOR_CLASSES", "MECHANISMS", "OAUTHBEARER", "PLAIN", "SASL_APIS",
    "SASL_SERVER_MAX_RECEIVE_SIZE", "Decision", "JaasConfigError", "JwksSettings",
    "ListenerSasl", "LoginModule", "Outcome", "SaslServerAuthenticator", "State",
    "fetch_jwks", "illegal_state_response", "jaas_module", "parse_jaas_config", "parse_jwks",
    "validate_signed_token", "validate_unsecured_token",
]

log = logging.getLogger(__name__)

PLAIN: Final = "PLAIN"
OAUTHBEARER: Final = "OAUTHBEARER"
GSSAPI: Final = "GSSAPI"
MECHANISMS: Final = (PLAIN, scram.SCRAM_SHA_256.name, scram.SCRAM_SHA_512.name, OAUTHBEARER)
SASL_APIS: Final = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
# Kafka's sasl.server.max.receive.size default: the largest frame read before authentication
SASL_SERVER_MAX_RECEIVE_SIZE: Final = 524288
# Kafka's mechanisms take at most two rounds; a client that keeps a negotiation going past
# this is refused rather than served forever
_ROUNDS_MAX: Final = 8
_SIZE: Final = struct.Struct(">i")

ScramLookup = Callable[[int, str], ScramCredential | None]  # (mechanism code, user)


class JaasConfigError(ValueError):
    """A sasl.jaas.config value that cannot be read; the message says where."""


class _Failure(Exception):
    """Authentication failed; `message` is what the client is told (never a secret)."""

    code: ErrorCode = ErrorCode.sasl_authentication_failed

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail or message  # for the log line only


class _InvalidCredentials(_Failure):
    """Kafka's SaslException: the client gets a generic message, the log the detail."""


class _IllegalState(_Failure):
    code = ErrorCode.illegal_sasl_state


class _UnsupportedMechanism(_Failure):
    code = ErrorCode.unsupported_sasl_mechanism


# -- JAAS configuration (sasl.jaas.config) --------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoginModule:
    class_name: str
    flag: str
    options: Mapping[str, str]


_JAAS_TOKEN: Final = re.compile(r'\s*(?:(?P<quoted>"(?:[^"\\]|\\.)*")|(?P<word>[^\s=;"]+)|'
                                r'(?P<punct>[=;]))', re.DOTALL)
_FLAGS: Final = ("required", "requisite", "sufficient", "optional")
_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), text[1:-1],
                  flags=re.DOTALL)


def parse_jaas_config(text: str) -> list[LoginModule]:
    """`<LoginModule class> <flag> key="value" ...;` (one or more), as Kafka's JaasConfig
    reads sasl.jaas.config. JaasConfigError names what is wrong (never a value)."""
    tokens: list[tuple[str, str]] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _JAAS_TOKEN.match(text, position)
        if match is None or match.end() == position:
            if text[position:].strip() == "":
                break
            raise JaasConfigError(f"unexpected character at offset {position}")
        position = match.end()
        kind = match.lastgroup
        assert kind is not None
        tokens.append((kind, match.group(kind)))
    modules: list[LoginModule] = []
    index = 0
    while index < len(tokens):
        if tokens[index][0] != "word" or index + 1 >= len(tokens):
            raise JaasConfigError("expected a login module class name and a control flag")
        class_name, flag = tokens[index][1], tokens[index + 1][1].lower()
        if tokens[index + 1][0] != "word" or flag not in _FLAGS:
            raise JaasConfigError(f"login module {class_name}: control flag must be one of "
                                  f"{', '.join(_FLAGS)}")
        index += 2
        options: dict[str, str] = {}
        while True:
            if index >= len(tokens):
                raise JaasConfigError(f"login module {class_name}: missing ';' at the end")
            kind, value = tokens[index]
            if (kind, value) == ("punct", ";"):
                index += 1
                break
            if (kind != "word" or index + 2 >= len(tokens)
                    or tokens[index + 1] != ("punct", "=")
                    or tokens[index + 2][0] == "punct"):
                raise JaasConfigError(f"login module {class_name}: expected key=value options")
            raw = tokens[index + 2]
            options[value] = _unquote(raw[1]) if raw[0] == "quoted" else raw[1]
            index += 3
        modules.append(LoginModule(class_name, flag, options))
    if not modules:
        raise JaasConfigError("no login module")
    return modules


# -- what a listener authenticates with ------------------------------------------------------


Get = Callable[[str], str | None]


@dataclass(slots=True)
class ListenerSasl:
    """One listener's SASL settings, read once at start (`from_config`)."""

    listener: str
    enabled_mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=dict)
    oauth_options: Mapping[str, str] = field(default_factory=dict)
    reauth_ms_by_mechanism: Mapping[str, int] = field(default_factory=dict)
    failed_authentication_delay_ms: int = 100
    receive_bytes_max: int = SASL_SERVER_MAX_RECEIVE_SIZE
    # the node sets this once the metadata image is there; None: no SCRAM user exists
    scram_lookup: ScramLookup | None = None
    # OAUTHBEARER with Kafka's OAuthBearerValidatorCallbackHandler (KIP-768): signed tokens
    # checked against the keys of a JWKS, which the node loads (`jwks_keys`) and refreshes
    jwks: JwksSettings | None = None
    jwks_keys: Mapping[str | None, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, get: Get, listener: str) -> ListenerSasl:
        """The listener's settings; ValueError naming the key when they are unusable."""
        prefix = f"listener.name.{listener.lower()}."

        def value(key: str) -> str | None:
            given = get(prefix + key)
            return given if given is not None else get(key)

        mechanisms = tuple(item.strip().upper()
                           for item in (value("sasl.enabled.mechanisms") or GSSAPI).split(",")
                           if item.strip())
        key = f"{prefix}sasl.enabled.mechanisms"
        if not mechanisms:
            raise ValueError(f"{key}: listener {listener} enables no SASL mechanism")
        for mechanism in mechanisms:
            if mechanism == GSSAPI:
                raise ValueError(
                    f"sasl.enabled.mechanisms (or {key}) includes GSSAPI (Kafka's default) for "
                    f"listener {listener}: pykraft does not support Kerberos; enable one or "
                    f"more of {', '.join(MECHANISMS)}")
            if mechanism not in MECHANISMS:
                raise ValueError(f"sasl.enabled.mechanisms (or {key}): unsupported SASL "
                                 f"mechanism {mechanism}; supported: {', '.join(MECHANISMS)}")
        plain_users: dict[str, str] = {}
        if PLAIN in mechanisms:
            module = jaas_module(get, listener, PLAIN, required=True)
            assert module is not None
            plain_users = {name[len("user_"):]: password
                           for name, password in module.options.items()
                           if name.startswith("user_")}
        oauth_options: Mapping[str, str] = {}
        if OAUTHBEARER in mechanisms:
            module = jaas_module(get, listener, OAUTHBEARER, required=True)
            assert module is not None
            oauth_options = dict(module.options)
            _oauth_settings(oauth_options, listener)  # checked now, not at the first client
        jwks = JwksSettings.from_config(get, listener) if OAUTHBEARER in mechanisms else None
        reauth = {mechanism: _reauth_ms(get, prefix, mechanism) for mechanism in mechanisms}
        delay = value("connection.failed.authentication.delay.ms")
        receive = value("sasl.server.max.receive.size")
        return cls(listener, mechanisms, plain_users, oauth_options, reauth,
                   100 if delay is None else int(delay),
                   SASL_SERVER_MAX_RECEIVE_SIZE if receive is None else int(receive),
                   jwks=jwks)

    def server_for(self, mechanism: str, now_ms: int,
                   nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24)) -> _Mechanism:
        if mechanism == PLAIN:
            return _PlainServer(self.plain_users)
        if mechanism == OAUTHBEARER:
            if self.jwks is not None:
                settings, keys = self.jwks, self.jwks_keys
                return _OAuthBearerServer(
                    lambda token, now: validate_signed_token(token, settings, keys, now))
            unsecured = _oauth_settings(self.oauth_options, self.listener)
            return _OAuthBearerServer(
                lambda token, now: validate_unsecured_token(token, unsecured, now))
        found = scram.mechanism_named(mechanism)
        assert found is not None, mechanism
        return _ScramServer(found, self.scram_lookup, nonce)


def jaas_module(get: Get, listener: str, mechanism: str, *,
                required: bool) -> LoginModule | None:
    """The login module of `listener.name.<listener>.<mechanism>.sasl.jaas.config`, where
    Kafka's brokers read it (they take no unprefixed sasl.jaas.config; a static JAAS file is
    not supported here: docs/deviations.md)."""
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = get(key)
    if text is None:
        if required:
            raise ValueError(f"{key} must be set: listener {listener} enables SASL mechanism "
                             f"{mechanism}, whose JAAS login module gives its users or options")
        return None
    try:
        modules = parse_jaas_config(text)
    except JaasConfigError as error:
        raise ValueError(f"{key}: {error}") from None
    if len(modules) != 1:
        raise ValueError(f"{key}: JAAS config property contains {len(modules)} login modules, "
                         "should be 1 module")
    return modules[0]


def _reauth_ms(get: Get, prefix: str, mechanism: str) -> int:
    for key in (f"{prefix}{mechanism.lower()}.connections.max.reauth.ms",
                f"{prefix}connections.max.reauth.ms", "connections.max.reauth.ms"):
        given = get(key)
        if given is not None:
            try:
                return int(given)
            except ValueError:
                raise ValueError(f"Invalid value {given} for configuration {key}: Not a number "
                                 "of type LONG") from None
    return 0


# -- the mechanisms (server side) -------------------------------------------------------------


class _Mechanism(Protocol):
    name: str
    complete: bool
    user: str  # the user claimed so far, for log lines ("" before the client said)

    def evaluate(self, token: bytes, now_ms: int) -> bytes: ...

    @property
    def credential_expiry_ms(self) -> int | None: ...


class _PlainServer:
    """RFC 4616: `authzid NUL user NUL password`, checked against the JAAS users."""

    name = PLAIN

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.user = ""

    @property
    def credential_expiry_ms(self) -> int | None:
        return None

    def evaluate(self, token: bytes, now_ms: int) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise _InvalidCredentials("", detail="the PLAIN response is not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise _InvalidCredentials("", detail=f"Invalid SASL/PLAIN response: expected 3 "
                                                 f"tokens, got {len(parts)}")
        authorization_id, user, password = parts
        self.user = user
        if not user:
            raise _Failure("Authentication failed: username not specified")
        if not password:
            raise _Failure("Authentication failed: password not specified")
        expected = self._users.get(user)
        # compared even for an unknown user, so the time taken does not tell which users exist
        matches = hmac.compare_digest((expected or "\0" + password).encode(), password.encode())
        if expected is None or not matches:
            raise _Failure("Authentication failed: Invalid username or password")
        if authorization_id and authorization_id != user:
            raise _Failure("Authentication failed: Client requested an authorization id that "
                           "is different from username")
        self.complete = True
        return b""


_SCRAM_ATTRIBUTE: Final = re.compile(r"^[a-zA-Z]=")


def _scram_attributes(message: str) -> list[tuple[str, str]]:
    pairs = []
    for item in message.split(","):
        if not _SCRAM_ATTRIBUTE.match(item):
            raise _InvalidCredentials("", detail="malformed SCRAM message")
        pairs.append((item[0], item[2:]))
    return pairs


def _scram_username(sasl_name: str) -> str:
    """RFC 5802 saslname: ',' and '=' come as =2C and =3D, and '=' nowhere else."""
    if re.search(r"=(?!2C|3D)", sasl_name):
        raise _InvalidCredentials("", detail="malformed SCRAM user name")
    return sasl_name.replace("=2C", ",").replace("=3D", "=")


class _ScramServer:
    """RFC 5802 server: client-first -> server-first (nonce, salt, iterations) ->
    client-final (proof checked against StoredKey) -> server-final (ServerSignature)."""

    def __init__(self, mechanism: scram.Mechanism, lookup: ScramLookup | None,
                 nonce: Callable[[], str]) -> None:
        self.name = mechanism.name
        self._mechanism = mechanism
        self._lookup = lookup
        self._nonce = nonce
        self.complete = False
        self.user = ""
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._full_nonce = ""
        self._credential: ScramCredential | None = None

    @property
    def credential_expiry_ms(self) -> int | None:
        return None

    def evaluate(self, token: bytes, now_ms: int) -> bytes:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise _InvalidCredentials("", detail="the SCRAM message is not UTF-8") from None
        if not self._server_first:
            return self._client_first(message)
        return self._client_final(message)

    def _client_first(self, message: str) -> bytes:
        # gs2-header: "n" or "y" (no channel binding), then an optional authzid
        flag, comma, rest = message.partition(",")
        authzid_part, comma2, bare = rest.partition(",")
        if not comma or not comma2 or flag not in ("n", "y"):
            raise _InvalidCredentials("", detail="invalid SCRAM client-first message "
                                                 "(channel binding is not supported)")
        if authzid_part and not authzid_part.startswith("a="):
            raise _InvalidCredentials("", detail="invalid SCRAM gs2 header")
        attributes = _scram_attributes(bare)
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
            raise _InvalidCredentials("", detail="invalid SCRAM client-first message")
        if attributes[0][1] == "" or attributes[1][1] == "":
            raise _InvalidCredentials("", detail="invalid SCRAM client-first message")
        extensions = dict(attributes[2:])
        self.user = _scram_username(attributes[0][1])
        if extensions.get("t") or "tokenauth=true" in bare.split(","):
            raise _InvalidCredentials("", detail="delegation tokens are not supported")
        authorization_id = _scram_username(authzid_part[2:]) if authzid_part else ""
        if authorization_id and authorization_id != self.user:
            raise _Failure("Authentication failed: Client requested an authorization id that "
                           "is different from username")
        credential = self._lookup(self._mechanism.code, self.user) if self._lookup else None
        if credential is None:
            raise _InvalidCredentials("", detail="Authentication failed: Invalid user "
                                                 "credentials (unknown user)")
        if credential.iterations < scram.ITERATIONS_MIN:
            raise _InvalidCredentials("", detail=f"Iterations {credential.iterations} is less "
                                                 f"than the minimum {scram.ITERATIONS_MIN}")
        self._credential = credential
        self._gs2_header = f"{flag},{authzid_part},"
        self._client_first_bare = bare
        self._full_nonce = attributes[1][1] + self._nonce()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._full_nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def _client_final(self, message: str) -> bytes:
        if self.complete or self._credential is None:
            raise _IllegalState("SCRAM exchange already finished")
        without_proof, separator, proof_text = message.rpartition(",p=")
        if not separator:
            raise _InvalidCredentials("", detail="SCRAM client-final message without a proof")
        attributes = dict(_scram_attributes(without_proof))
        try:
            binding = base64.b64decode(attributes.get("c", ""), validate=True)
            proof = base64.b64decode(proof_text, validate=True)
        except (binascii.Error, ValueError):
            raise _InvalidCredentials("", detail="invalid base64 in the SCRAM final "
                                                 "message") from None
        if binding != self._gs2_header.encode():
            raise _InvalidCredentials("", detail="invalid SCRAM channel binding")
        if attributes.get("r") != self._full_nonce:
            raise _InvalidCredentials("", detail="Invalid client nonce in the final client "
                                                 "message.")
        mechanism, credential = self._mechanism, self._credential
        auth_message = ",".join((self._client_first_bare, self._server_first,
                                 without_proof)).encode()
        signature = mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise _InvalidCredentials("", detail="Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(mechanism.digest(client_key), credential.stored_key):
            raise _InvalidCredentials("", detail="Invalid client credentials")
        server_signature = mechanism.hmac(credential.server_key, auth_message)
        self.complete = True
        self._credential = None
        return b"v=" + base64.b64encode(server_signature)


@dataclass(frozen=True, slots=True)
class _OAuthSettings:
    principal_claim: str
    scope_claim: str
    required_scope: tuple[str, ...]
    clock_skew_ms: int


def _oauth_settings(options: Mapping[str, str], listener: str) -> _OAuthSettings:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler options."""
    skew = options.get("unsecuredValidatorAllowableClockSkewMs", "0")
    try:
        skew_ms = int(skew)
        if skew_ms < 0:
            raise ValueError
    except ValueError:
        raise ValueError(f"listener {listener}: OAUTHBEARER option "
                         f"unsecuredValidatorAllowableClockSkewMs must be a non-negative "
                         f"integer: {skew!r}") from None
    return _OAuthSettings(
        principal_claim=options.get("unsecuredValidatorPrincipalClaimName", "").strip()
        or "sub",
        scope_claim=options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope",
        required_scope=tuple(options.get("unsecuredValidatorRequiredScope", "").split()),
        clock_skew_ms=skew_ms)


class _InvalidToken(Exception):
    def __init__(self, reason: str, status: str = "invalid_token") -> None:
        super().__init__(reason)
        self.status = status


def _b64url_json(part: str) -> dict[str, Any]:
    try:
        decoded = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.loads(decoded)
    except (binascii.Error, ValueError, RecursionError):
        raise _InvalidToken("not Base64URL-encoded JSON") from None
    if not isinstance(value, dict):
        raise _InvalidToken("not a JSON object")
    return value


def _number_claim(claims: Mapping[str, Any], name: str, *, required: bool) -> float | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise _InvalidToken(f"Required claim missing: {name}")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _InvalidToken(f"The claim {name} is not a number")
    return float(value)


def validate_unsecured_token(token: str, settings: _OAuthSettings,
                             now_ms: int) -> tuple[str, int]:
    """An unsecured JWS (`header.claims.` with alg none) checked as Kafka's unsecured
    validator checks it; (principal, expiry ms) or _InvalidToken."""
    parts = token.split(".")
    if len(parts) != 3 or parts[2] != "" or not parts[0] or not parts[1]:
        raise _InvalidToken("Unsecured JWS compact serializations must have 3 dot-separated "
                            "Base64URL-encoded values and the third must be empty")
    header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
    if header.get("alg") != "none":
        raise _InvalidToken("Unsecured JWS must have 'alg' header value of 'none'")
    principal = claims.get(settings.principal_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise _InvalidToken(f"Required claim missing or not a string: "
                            f"{settings.principal_claim}")
    expiry = _number_claim(claims, "exp", required=True)
    issued = _number_claim(claims, "iat", required=False)
    assert expiry is not None
    skew = settings.clock_skew_ms
    if issued is not None and issued * 1000 > now_ms + skew:
        raise _InvalidToken(f"The Issued At value ({issued} seconds) was after the indicated "
                            f"time ({now_ms} ms) plus allowable clock skew ({skew} ms)")
    if now_ms - skew >= expiry * 1000:
        raise _InvalidToken(f"The indicated time ({now_ms} ms) minus allowable clock skew "
                            f"({skew} ms) was on or after the Expiration Time value "
                            f"({expiry} seconds)")
    if issued is not None and issued > expiry:
        raise _InvalidToken("The Issued At value must be prior to the Expiration Time value")
    scope = claims.get(settings.scope_claim, [])
    granted = set(scope.split() if isinstance(scope, str) else
                  [s for s in scope if isinstance(s, str)] if isinstance(scope, list) else [])
    missing = [s for s in settings.required_scope if s not in granted]
    if missing:
        raise _InvalidToken(f"The provided scope lacks the required scope: {missing}",
                            status="insufficient_scope")
    return principal, int(expiry * 1000)


# -- KIP-768: signed tokens checked against a JWKS ---------------------------------------------

# the server callback handler class that turns it on (Kafka 4.0's name, and 3.x's)
JWKS_VALIDATOR_CLASSES: Final = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler")
JWKS_BYTES_MAX: Final = 1024 * 1024
_SIGNATURE_HASHES: Final = {"256": "SHA256", "384": "SHA384", "512": "SHA512"}


@dataclass(frozen=True, slots=True)
class JwksSettings:
    """Kafka's sasl.oauthbearer.* keys for the JWKS validator (listener- and
    mechanism-prefixed keys first, as Kafka reads them)."""

    url: str
    refresh_ms: int = 3600000
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str | None = None
    clock_skew_s: int = 30
    sub_claim: str = "sub"
    scope_claim: str = "scope"

    @classmethod
    def from_config(cls, get: Get, listener: str) -> JwksSettings | None:
        prefix = f"listener.name.{listener.lower()}."

        def value(key: str) -> str | None:
            for name in (f"{prefix}oauthbearer.{key}", f"{prefix}{key}", key):
                given = get(name)
                if given is not None and given.strip():
                    return given.strip()
            return None

        # (Kafka reads the handler class with the listener and mechanism prefix only)
        handler = get(f"{prefix}oauthbearer.sasl.server.callback.handler.class")
        handler = handler.strip() if handler is not None and handler.strip() else None
        if handler is None:
            return None
        if handler not in JWKS_VALIDATOR_CLASSES:
            raise ValueError(f"{prefix}oauthbearer.sasl.server.callback.handler.class: "
                             f"unsupported class {handler}; pykraft has Kafka's "
                             f"{JWKS_VALIDATOR_CLASSES[0]} (signed tokens, a JWKS) and, with "
                             "none set, the unsecured validator")
        url = value("sasl.oauthbearer.jwks.endpoint.url")
        if url is None or not url.startswith(("file:", "http://", "https://")):
            raise ValueError("sasl.oauthbearer.jwks.endpoint.url must be a file:, http:// or "
                             f"https:// URL for {handler} on listener {listener}, got {url!r}")
        try:
            return cls(
                url=url,
                refresh_ms=int(value("sasl.oauthbearer.jwks.endpoint.refresh.ms") or 3600000),
                expected_audience=tuple(
                    item.strip() for item in (value("sasl.oauthbearer.expected.audience")
                                              or "").split(",") if item.strip()),
                expected_issuer=value("sasl.oauthbearer.expected.issuer"),
                clock_skew_s=int(value("sasl.oauthbearer.clock.skew.seconds") or 30),
                sub_claim=value("sasl.oauthbearer.sub.claim.name") or "sub",
                scope_claim=value("sasl.oauthbearer.scope.claim.name") or "scope")
        except ValueError as error:
            raise ValueError(f"listener {listener}: sasl.oauthbearer.*: {error}") from None


def parse_jwks(text: str | bytes) -> dict[str | None, Any]:
    """A JWK Set's RSA and EC signing keys by key id (`None` for one without an id);
    ValueError when it is not one. Keys of other kinds or uses are skipped, as Kafka skips
    them."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    curves = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1(), "P-521": ec.SECP521R1()}
    try:
        document = json.loads(text)
        entries = document["keys"]
        if not isinstance(entries, list):
            raise TypeError("keys is not a list")
    except (ValueError, TypeError, KeyError) as error:
        raise ValueError(f"not a JWK Set: {error}") from None
    keys: dict[str | None, Any] = {}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        kid = entry.get("kid") if isinstance(entry.get("kid"), str) else None
        try:
            if entry.get("kty") == "RSA":
                keys[kid] = rsa.RSAPublicNumbers(_b64url_int(entry["e"]),
                                                 _b64url_int(entry["n"])).public_key()
            elif entry.get("kty") == "EC" and entry.get("crv") in curves:
                keys[kid] = ec.EllipticCurvePublicNumbers(
                    _b64url_int(entry["x"]), _b64url_int(entry["y"]),
                    curves[entry["crv"]]).public_key()
        except (KeyError, ValueError, TypeError):
            continue  # an unusable key: the others still count
    if not keys:
        raise ValueError("the JWK Set has no RSA or EC signing key")
    return keys


def fetch_jwks(url: str, timeout_s: float = 10.0) -> dict[str | None, Any]:
    """Blocking: read the JWKS at `url` (file: or http(s)://, at most JWKS_BYTES_MAX).
    OSError or ValueError say why not. The node calls it in a thread."""
    import urllib.request

    if url.startswith("file:"):
        path = url[len("file://"):] if url.startswith("file://") else url[len("file:"):]
        with open(path, "rb") as source:
            data = source.read(JWKS_BYTES_MAX + 1)
    else:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
            data = response.read(JWKS_BYTES_MAX + 1)
    if len(data) > JWKS_BYTES_MAX:
        raise ValueError(f"the JWKS at {url} is over {JWKS_BYTES_MAX} bytes")
    return parse_jwks(data)


def _b64url_bytes(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise _InvalidToken("not Base64URL") from None


def _b64url_int(part: str) -> int:
    return int.from_bytes(_b64url_bytes(part), "big")


def validate_signed_token(token: str, settings: JwksSettings,
                          keys: Mapping[str | None, Any], now_ms: int) -> tuple[str, int]:
    """A JWS signed with RS256/384/512 or ES256/384/512 by a key of the JWKS, checked as
    Kafka's OAuthBearerValidatorCallbackHandler checks it: the signature, `exp` (required),
    `iat` and `nbf` (if present) with the clock skew, the audience and issuer when expected,
    the subject claim. (principal, expiry ms) or _InvalidToken."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    parts = token.split(".")
    if len(parts) != 3 or not all(parts):
        raise _InvalidToken("a signed JWS compact serialization has 3 non-empty parts")
    header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
    signature = _b64url_bytes(parts[2])
    algorithm = str(header.get("alg", ""))
    if algorithm[:2] not in ("RS", "ES") or algorithm[2:] not in _SIGNATURE_HASHES:
        raise _InvalidToken(f"unsupported signature algorithm {algorithm!r}")
    kid = header.get("kid")
    key = keys.get(kid) if kid is not None else (
        next(iter(keys.values())) if len(keys) == 1 else None)
    if key is None:
        raise _InvalidToken(f"no key {kid!r} in the JWKS")
    digest = getattr(hashes, _SIGNATURE_HASHES[algorithm[2:]])()
    signed = f"{parts[0]}.{parts[1]}".encode()
    try:
        if algorithm.startswith("RS") and isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, signed, padding.PKCS1v15(), digest)
        elif algorithm.startswith("ES") and isinstance(key, ec.EllipticCurvePublicKey):
            half = len(signature) // 2
            der = encode_dss_signature(int.from_bytes(signature[:half], "big"),
                                       int.from_bytes(signature[half:], "big"))
            key.verify(der, signed, ec.ECDSA(digest))
        else:
            raise _InvalidToken(f"key {kid!r} does not sign with {algorithm}")
    except InvalidSignature:
        raise _InvalidToken("the signature does not verify") from None
    skew_ms = settings.clock_skew_s * 1000
    expiry = _number_claim(claims, "exp", required=True)
    assert expiry is not None
    if now_ms - skew_ms >= expiry * 1000:
        raise _InvalidToken(f"the token expired at {expiry} (clock skew {skew_ms} ms)")
    for name in ("iat", "nbf"):
        moment = _number_claim(claims, name, required=False)
        if moment is not None and moment * 1000 > now_ms + skew_ms:
            raise _InvalidToken(f"the token's {name} ({moment}) is in the future")
    if settings.expected_issuer is not None and claims.get("iss") != settings.expected_issuer:
        raise _InvalidToken("unexpected issuer")
    if settings.expected_audience:
        audience = claims.get("aud")
        given = {audience} if isinstance(audience, str) else set(
            a for a in audience if isinstance(a, str)) if isinstance(audience, list) else set()
        if not given & set(settings.expected_audience):
            raise _InvalidToken("unexpected audience")
    principal = claims.get(settings.sub_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise _InvalidToken(f"Required claim missing or not a string: {settings.sub_claim}")
    return principal, int(expiry * 1000)


_OAUTH_RESPONSE: Final = re.compile(
    r"^n,(?:a=(?P<authzid>[^,\x01]*))?,\x01(?P<pairs>(?:[^\x01]*\x01)*)\x01$", re.DOTALL)


class _OAuthBearerServer:
    """RFC 7628's client initial response with a bearer token, checked by Kafka's unsecured
    validator. A refused token is answered with the JSON error as a challenge; the client's
    0x01 then ends the exchange with that error (as Kafka's OAuthBearerSaslServer does)."""

    name = OAUTHBEARER

    def __init__(self, validate: Callable[[str, int], tuple[str, int]]) -> None:
        self._validate = validate
        self.complete = False
        self.user = ""
        self._error: str | None = None
        self._reason = ""
        self._expiry_ms: int | None = None

    @property
    def credential_expiry_ms(self) -> int | None:
        return self._expiry_ms

    @property
    def refusal(self) -> str | None:
        """Why the token was refused, while the client has not acknowledged the error."""
        return f"refusing the token: {self._reason}" if self._error is not None else None

    def evaluate(self, token: bytes, now_ms: int) -> bytes:
        if token == b"\x01" and self._error is not None:
            raise _Failure(self._error, detail=f"invalid token: {self._reason}")
        self._error = None
        match = _OAUTH_RESPONSE.match(token.decode("utf-8", "replace"))
        if match is None:
            raise _InvalidCredentials("", detail="Invalid OAUTHBEARER client first message")
        pairs = dict(pair.partition("=")[::2] for pair in match.group("pairs").split("\x01")
                     if pair)
        auth = pairs.get("auth", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise _InvalidCredentials("", detail="Invalid OAUTHBEARER client first message: "
                                                 "no bearer token")
        try:
            principal, expiry_ms = self._validate(value.strip(), now_ms)
        except _InvalidToken as error:
            self._error = json.dumps({"status": error.status}, separators=(",", ":"))
            self.user = "?"
            log.debug("OAUTHBEARER token refused: %s", error)
            self._reason = str(error)
            return self._error.encode()
        self.user = principal
        authorization_id = match.group("authzid") or ""
        if authorization_id and authorization_id != principal:
            raise _Failure(f"Authentication failed: Client requested an authorization id "
                           f"({authorization_id}) that is different from the token's "
                           f"principal name ({principal})")
        self._expiry_ms = expiry_ms
        self.complete = True
        return b""


# -- the per-connection state machine -----------------------------------------------------------


class State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "waiting for ApiVersions or SaslHandshake"
    HANDSHAKE = "waiting for SaslHandshake"
    AUTHENTICATE = "exchanging SASL tokens"
    COMPLETE = "authenticated"
    REAUTH_HANDSHAKE = "re-authenticating: SaslHandshake"
    REAUTH_AUTHENTICATE = "re-authenticating: exchanging SASL tokens"
    FAILED = "failed"


class Decision(enum.Enum):
    RESPOND = "write `response`"
    PASS_TO_DISPATCHER = "serve the frame as any request (ApiVersions, or authenticated)"
    FAIL = "wait the failed-authentication delay, write `response` if any, close"
    CLOSE = "close now"


@dataclass(frozen=True, slots=True)
class Outcome:
    decision: Decision
    response: bytes | None = None  # encoded and size-prefixed
    reason: str = ""  # for the log line of FAIL and CLOSE


_PASS: Final = Outcome(Decision.PASS_TO_DISPATCHER)


class SaslServerAuthenticator:
    """One connection's SASL state (see the module docstring for the transitions)."""

    def __init__(self, sasl: ListenerSasl, apis: dict[int, tuple[int, int]], peer: str,
                 *, nonce: Callable[[], str] | None = None) -> None:
        self._sasl = sasl
        self._apis = apis
        self._peer = peer
        self._nonce = nonce
        self.state = State.HANDSHAKE_OR_VERSIONS
        self.principal: KafkaPrincipal | None = None
        self.mechanism: str | None = None
        self._server: _Mechanism | None = None
        self._kafka_headers = True  # False after SaslHandshake v0: raw tokens
        self._rounds = 0
        self.supports_reauthentication = False  # the client spoke SaslAuthenticate v1+
        self.session_expiry_ms: int | None = None

    @property
    def authenticated(self) -> bool:
        return self.state is State.COMPLETE

    @property
    def frame_bytes_max(self) -> int:
        """The largest frame to read in this state (Kafka's sasl.server.max.receive.size)."""
        return self._sasl.receive_bytes_max

    def receive(self, frame: memoryview, now_ms: int) -> Outcome:
        """A whole frame (no size prefix) that arrived while not COMPLETE, or any frame once
        COMPLETE: then it is either a re-authentication's SaslHandshake or passed on."""
        if self.state is State.FAILED:
            return Outcome(Decision.CLOSE, reason="authentication already failed")
        if self.state is State.COMPLETE and len(frame) >= 2 \
                and int.from_bytes(frame[:2], "big") not in SASL_APIS \
                and (self.session_expiry_ms is None or now_ms < self.session_expiry_ms):
            return _PASS  # the common case, on every request: no header parsed twice
        if self.state in (State.AUTHENTICATE, State.REAUTH_AUTHENTICATE) \
                and not self._kafka_headers:
            return self._raw_token(bytes(frame), now_ms)
        try:
            header = parse_request_header(frame)
        except FrameError as error:
            return Outcome(Decision.CLOSE, reason=str(error))
        if self.state is State.COMPLETE:
            return self._authenticated_request(header, frame, now_ms)
        return self._kafka_request(header, frame, now_ms)

    # -- states ---------------------------------------------------------------------------

    def _authenticated_request(self, header: RequestHeader, frame: memoryview,
                               now_ms: int) -> Outcome:
        if header.api_key == ApiKey.SASL_HANDSHAKE and self.supports_reauthentication:
            self.state = State.REAUTH_HANDSHAKE
            return self._kafka_request(header, frame, now_ms)
        if self.session_expiry_ms is not None and now_ms >= self.session_expiry_ms:
            return Outcome(Decision.CLOSE, reason=f"the SASL session of {self.principal} "
                                                  "expired without re-authentication "
                                                  "(connections.max.reauth.ms)")
        if header.api_key in SASL_APIS:  # Kafka's KafkaApis answers these itself
            return self._respond_illegal_state(header, frame)
        return Outcome(Decision.PASS_TO_DISPATCHER)

    def _kafka_request(self, header: RequestHeader, frame: memoryview, now_ms: int) -> Outcome:
        api_key, state = header.api_key, self.state
        expected = {
            State.HANDSHAKE_OR_VERSIONS: (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE),
            State.HANDSHAKE: (ApiKey.SASL_HANDSHAKE,),
            State.REAUTH_HANDSHAKE: (ApiKey.SASL_HANDSHAKE,),
            State.AUTHENTICATE: (ApiKey.SASL_AUTHENTICATE,),
            State.REAUTH_AUTHENTICATE: (ApiKey.SASL_AUTHENTICATE,),
        }[state]
        if api_key not in expected:
            name = api_name(api_key)
            during = "handshake" if api_key not in SASL_APIS and state in (
                State.HANDSHAKE_OR_VERSIONS, State.HANDSHAKE) else "authentication"
            self.state = State.FAILED
            refused = getattr(self._server, "refusal", None)  # a client that ignored it
            return Outcome(Decision.CLOSE, reason=f"Unexpected Kafka request of type {name} "
                                                  f"during SASL {during}." + (
                                                      f" (after {refused})" if refused else ""))
        if api_key == ApiKey.API_VERSIONS:
            if supports(self._apis, api_key, header.api_version):
                self.state = State.HANDSHAKE
            return Outcome(Decision.PASS_TO_DISPATCHER)
        if not supports(self._apis, api_key, header.api_version):
            self.state = State.FAILED
            return Outcome(Decision.CLOSE, reason=f"Version {header.api_version} is not "
                                                  f"supported for {api_name(api_key)}")
        try:
            request = _decode(header, frame)
        except FrameError as error:
            self.state = State.FAILED
            return Outcome(Decision.CLOSE, reason=str(error))
        if api_key == ApiKey.SASL_HANDSHAKE:
            return self._handshake(header, request, now_ms)
        return self._authenticate(header, request, now_ms)

    def _handshake(self, header: RequestHeader, request: Any, now_ms: int) -> Outcome:
        version = header.api_version
        mechanism = str(request.mechanism)
        enabled = self._sasl.enabled_mechanisms
        reauthenticating = self.state is State.REAUTH_HANDSHAKE
        ok = mechanism in enabled and (not reauthenticating or mechanism == self.mechanism)
        module = response_module(ApiKey.SASL_HANDSHAKE, version)
        if not ok:
            error = ErrorCode.unsupported_sasl_mechanism
            response = make(module.SaslHandshakeResponse, error_code=error,
                            mechanisms=tuple(enabled))
            reason = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                      f"re-authentication of mechanism '{self.mechanism}'"
                      if reauthenticating and mechanism in enabled
                      else f"Unsupported SASL mechanism {mechanism}")
            return self._fail(encode_response(header.correlation_id, response), reason, "")
        self._kafka_headers = version >= 1
        if reauthenticating and not self._kafka_headers:
            return self._fail(None, "re-authentication needs SaslHandshake v1", "")
        self.mechanism = mechanism
        self._server = self._sasl.server_for(mechanism, now_ms, *(
            (self._nonce,) if self._nonce is not None else ()))
        self._rounds = 0
        self.state = State.REAUTH_AUTHENTICATE if reauthenticating else State.AUTHENTICATE
        response = make(module.SaslHandshakeResponse, error_code=ErrorCode.none,
                        mechanisms=tuple(enabled))
        return Outcome(Decision.RESPOND, encode_response(header.correlation_id, response))

    def _authenticate(self, header: RequestHeader, request: Any, now_ms: int) -> Outcome:
        version = header.api_version
        if version > 0:
            self.supports_reauthentication = True
        module = response_module(ApiKey.SASL_AUTHENTICATE, version)
        try:
            token, lifetime_ms = self._evaluate(bytes(request.auth_bytes), now_ms)
        except _Failure as failure:
            response = make(module.SaslAuthenticateResponse, error_code=failure.code,
                            error_message=self._client_message(failure), auth_bytes=b"",
                            session_lifetime=_millis(0))
            return self._fail(encode_response(header.correlation_id, response),
                              failure.detail, self._server.user if self._server else "")
        response = make(module.SaslAuthenticateResponse, error_code=ErrorCode.none,
                        error_message=None, auth_bytes=token,
                        session_lifetime=_millis(lifetime_ms))
        return Outcome(Decision.RESPOND, encode_response(header.correlation_id, response))

    def _raw_token(self, token: bytes, now_ms: int) -> Outcome:
        """After SaslHandshake v0: the token is the whole frame, and so is the answer; a
        failure can only close the connection (there is no field for an error)."""
        try:
            answer, _ = self._evaluate(token, now_ms)
        except _Failure as failure:
            return self._fail(None, failure.detail, self._server.user if self._server else "")
        return Outcome(Decision.RESPOND, _SIZE.pack(len(answer)) + answer)

    def _evaluate(self, token: bytes, now_ms: int) -> tuple[bytes, int]:
        """One round of the mechanism; (its answer, the session lifetime once complete)."""
        server = self._server
        assert server is not None
        self._rounds += 1
        if self._rounds > _ROUNDS_MAX:
            raise _IllegalState(f"more than {_ROUNDS_MAX} SASL rounds")
        if server.complete:
            raise _IllegalState("SASL authentication already complete")
        answer = server.evaluate(token, now_ms)
        if not server.complete:
            return answer, 0
        principal = KafkaPrincipal.user(server.user)
        if self.state is State.REAUTH_AUTHENTICATE and principal != self.principal:
            raise _Failure(f"Cannot change principals during re-authentication from "
                           f"{self.principal}: {principal}")
        self.principal = principal
        self.state = State.COMPLETE
        lifetime_ms = self._session_lifetime_ms(server.credential_expiry_ms, now_ms)
        self.session_expiry_ms = now_ms + lifetime_ms if lifetime_ms or \
            server.credential_expiry_ms is not None else None
        return answer, lifetime_ms

    def _session_lifetime_ms(self, credential_expiry_ms: int | None, now_ms: int) -> int:
        """Kafka's calcCompletionTimesAndReturnSessionLifetimeMs: connections.max.reauth.ms,
        shortened to the credential's (OAUTHBEARER token's) remaining life."""
        assert self.mechanism is not None
        reauth_ms = self._sasl.reauth_ms_by_mechanism.get(self.mechanism, 0)
        if credential_expiry_ms is None:
            return max(0, reauth_ms)
        remaining = max(0, credential_expiry_ms - now_ms)
        return min(remaining, reauth_ms) if reauth_ms > 0 else remaining

    def _client_message(self, failure: _Failure) -> str:
        if isinstance(failure, _InvalidCredentials):
            during = "re-authentication" if self.state is State.REAUTH_AUTHENTICATE \
                else "authentication"
            return (f"Authentication failed during {during} due to invalid credentials with "
                    f"SASL mechanism {self.mechanism}")
        return failure.message

    def _fail(self, response: bytes | None, detail: str, user: str) -> Outcome:
        self.state = State.FAILED
        who = f" as user {user!r}" if user else ""
        return Outcome(Decision.FAIL, response,
                       reason=f"SASL authentication{who} with mechanism {self.mechanism or '-'} "
                              f"failed: {detail}")

    def _respond_illegal_state(self, header: RequestHeader, frame: memoryview) -> Outcome:
        response = illegal_state_response(header, frame)
        if response is None:
            return Outcome(Decision.CLOSE, reason="malformed SASL request")
        return Outcome(Decision.RESPOND, response)


def illegal_state_response(header: RequestHeader, frame: memoryview) -> bytes | None:
    """Kafka's answer to SaslHandshake/SaslAuthenticate on a connection that is not
    authenticating (a PLAINTEXT or SSL listener, or one already authenticated):
    ILLEGAL_SASL_STATE. None when the request cannot be read (close the connection)."""
    try:
        request = _decode(header, frame)
    except FrameError:
        return None
    del request
    if header.api_key == ApiKey.SASL_HANDSHAKE:
        module = response_module(header.api_key, header.api_version)
        response = make(module.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state,
                        mechanisms=())
    else:
        module = response_module(header.api_key, header.api_version)
        response = make(module.SaslAuthenticateResponse, error_code=ErrorCode.illegal_sasl_state,
                        error_message="Unexpected SASL authenticate request", auth_bytes=b"",
                        session_lifetime=_millis(0))
    return encode_response(header.correlation_id, response)


def _decode(header: RequestHeader, frame: memoryview) -> Any:
    try:
        if is_flexible(header.api_key, header.api_version):
            header = skip_header_tags(header, frame)
        return decode_request(header, frame)
    except (InvalidRequest, UnknownAPIKey, UnknownEntity, FrameError, ValueError) as error:
        raise FrameError(f"malformed {api_name(header.api_key)} request: {error}") from None


def _millis(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)
