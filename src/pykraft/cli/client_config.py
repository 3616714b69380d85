"""Client configuration for the tools: Kafka (Java client) property names in, librdkafka out.

The tools run on confluent-kafka, whose librdkafka core understands most Java client
property names (`acks`, `linger.ms`, `batch.size`, `compression.type`, `group.id`,
`auto.offset.reset`, the security settings). People paste their Java client files into
`--producer.config` and friends, so the few Java-only names are translated or dropped with
a warning instead of failing with librdkafka's "No such configuration property".

The security keys (`security.protocol`, `sasl.mechanism`, `sasl.jaas.config`, the `ssl.*`
key and trust stores) are read once by `security_settings`, checked, and given to librdkafka
under its own names (`librdkafka_security`) or to `protocol_client.ProtocolClient`, which
speaks TLS and SASL itself.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Final, TextIO, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from pykraft.cli.args import UsageError, parse_bootstrap_servers

__all__ = [
    "DEFAULT_API_TIMEOUT_MS",
    "ErrorReporter",
    "JaasConfig",
    "KeyStore",
    "SECURITY_KEYS",
    "TLS_TUNING_KEYS",
    "SaslLogin",
    "SecuritySettings",
    "TrustStore",
    "admin_client",
    "client_config",
    "librdkafka_security",
    "normalize_pem",
    "parse_jaas_config",
    "producer_defaults",
    "result_of",
    "kafka_error_message",
    "security_settings",
    "timeout_seconds",
    "warn",
]

T = TypeVar("T")

DEFAULT_API_TIMEOUT_MS: Final = 30_000
# An admin call is given the request timeout; waiting a little longer for its future lets
# librdkafka's own error (which says what timed out) arrive before a bare TimeoutError.
RESULT_GRACE_S: Final = 5.0

# Settings of the Java clients that mean nothing to librdkafka (serialisation is the tool's
# business here; blocking and batching limits are librdkafka's own).
_DROPPED: Final = frozenset(
    {
        "key.serializer",
        "value.serializer",
        "key.deserializer",
        "value.deserializer",
        "max.block.ms",
        "max.poll.records",
        "interceptor.classes",
        "default.api.timeout.ms",  # read by the tools themselves, see timeout_seconds
    }
)


def client_config(
    bootstrap_servers: str | None,
    properties: Mapping[str, str],
    *,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """librdkafka configuration from Java-style properties; `bootstrap_servers` wins.

    Raises UsageError when no bootstrap server is given either way, as Kafka's tools do, and
    for security settings that cannot work (naming the key).
    """
    security = security_settings(properties)
    config: dict[str, Any] = {}
    for key, value in properties.items():
        if key in SECURITY_KEYS:
            continue
        if key in _DROPPED or key in _JAVA_ONLY_SECURITY:
            if key != "default.api.timeout.ms" and warn is not None:
                warn(f"WARN: ignoring Java client property {key} (no librdkafka equivalent)")
            continue
        if key == "buffer.memory":
            config["queue.buffering.max.kbytes"] = str(max(1, _int_property(key, value) // 1024))
            continue
        config[key] = value
    if SECURITY_KEYS.intersection(properties):
        config.update(librdkafka_security(security))
    if bootstrap_servers:
        config["bootstrap.servers"] = parse_bootstrap_servers(bootstrap_servers)
    if not config.get("bootstrap.servers"):
        raise UsageError("--bootstrap-server must be specified")
    return config


# Kafka's producer gives up on a record after delivery.timeout.ms (2 minutes); librdkafka's
# message.timeout.ms (the same setting) defaults to 5 minutes. The tools keep Kafka's bound,
# so a producer tool facing an unreachable cluster reports it as Kafka's would.
KAFKA_DELIVERY_TIMEOUT_MS: Final = 120_000


def producer_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with Kafka's producer defaults where librdkafka's differ and none is set."""
    if "delivery.timeout.ms" not in config and "message.timeout.ms" not in config:
        config["message.timeout.ms"] = KAFKA_DELIVERY_TIMEOUT_MS
    return config


def timeout_seconds(properties: Mapping[str, str]) -> float:
    """How long an admin or metadata call may take: Kafka's `default.api.timeout.ms`."""
    raw = properties.get("default.api.timeout.ms")
    timeout_ms = DEFAULT_API_TIMEOUT_MS if raw is None else _int_property("timeout", raw)
    if timeout_ms <= 0:
        raise UsageError(f"default.api.timeout.ms must be positive, got {timeout_ms}")
    return timeout_ms / 1000


def _int_property(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{key} must be an integer, got '{value}'") from None


class ErrorReporter:
    """librdkafka `error_cb`: one warning line per kind of error, and the last one kept.

    librdkafka retries a refused connection every second and calls back each time; a user
    needs to see "connection refused" once, and again only if something else goes wrong.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._reported: set[int] = set()
        self.last: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        self.last = error
        if error.code() in self._reported:
            return
        self._reported.add(error.code())
        stream = self._stream if self._stream is not None else sys.stderr
        print(f"WARN: {error.str()}", file=stream, flush=True)

    def describe_last(self) -> str:
        return "" if self.last is None else f" (last client error: {self.last.str()})"


def admin_client(config: Mapping[str, Any]) -> tuple[AdminClient, ErrorReporter]:
    """An AdminClient whose connection errors reach the user once each, as WARN lines.

    Without `error_cb` and `log_level` 0, librdkafka logs every failed reconnect (one line a
    second) until the call's timeout: thirty lines for one unreachable bootstrap server.
    """
    errors = ErrorReporter()
    settings = dict(config)
    settings["error_cb"] = errors
    settings.setdefault("log_level", 0)
    return AdminClient(settings), errors


def result_of(future: Future[T], timeout_s: float) -> T:
    """An admin call's result, waiting past its request timeout of `timeout_s`."""
    return future.result(timeout_s + RESULT_GRACE_S)


def kafka_error_message(exception: KafkaException) -> str:
    """The readable part of a confluent-kafka exception (its KafkaError's text)."""
    error = exception.args[0] if exception.args else None
    return error.str() if isinstance(error, KafkaError) else str(exception)


def warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- security: Kafka's client keys, read once for librdkafka and for ProtocolClient ---------
#
# A tool's properties file is a Java client's: `security.protocol`, `sasl.mechanism`,
# `sasl.jaas.config` and the `ssl.*` store keys. librdkafka names the same things otherwise
# (sasl.username, ssl.ca.location ...) and reads no JKS and no PKCS12 trust store. The
# checked reading below serves both paths: librdkafka gets its translation, and
# ProtocolClient (whose TLS context net/tls.py makes from the same keys, as the node's own)
# gets the SASL login, so a file works alike for the confluent-kafka tools and the others.

SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_STORE_TYPES: Final = ("JKS", "PKCS12", "PEM")
_STORE_BYTES_MAX: Final = 16 * 1024 * 1024  # a key or trust store is kilobytes
_KEY_BLOCKS: Final = ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "RSA PRIVATE KEY",
                      "EC PRIVATE KEY")
_JKS_MAGIC: Final = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS
_LOGIN_MODULES: Final = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": "PLAIN",
    "org.apache.kafka.common.security.scram.ScramLoginModule": "SCRAM",
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule": "OAUTHBEARER",
}
_JAAS_FLAGS: Final = ("required", "requisite", "sufficient", "optional")
# TLS versions and cipher suites: ProtocolClient honours them (net/tls.py reads Java's
# names); librdkafka has no equivalent of the first two and takes OpenSSL's cipher names
TLS_TUNING_KEYS: Final = frozenset({"ssl.enabled.protocols", "ssl.protocol", "ssl.cipher.suites"})
# Java client keys with no librdkafka equivalent (the TLS and SASL machinery of the JVM);
# warned about and dropped, as the serialiser classes are.
_JAVA_ONLY_SECURITY: Final = TLS_TUNING_KEYS | frozenset({
    "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.secure.random.implementation",
    "ssl.engine.factory.class", "ssl.provider", "sasl.login.class",
    "sasl.client.callback.handler.class",
    "sasl.login.callback.handler.class", "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds", "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms", "sasl.login.retry.backoff.ms",
    "sasl.login.retry.backoff.max.ms",
})
# the keys read below, which never reach librdkafka under their Java names
SECURITY_KEYS: Final = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.jaas.config", "ssl.truststore.location",
    "ssl.truststore.type", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
})
_JAAS_OPTION: Final = re.compile(r'\s*([^\s=;"]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')
# a block's body holds no "-----": each match attempt stops at the next marker, so a file
# of a million BEGIN lines costs one pass, not one pass per line
_PEM_BLOCK: Final = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----((?:[^-]|-(?!----))*)-----END \1-----")


@dataclass(frozen=True, slots=True)
class JaasConfig:
    """One login module of `sasl.jaas.config`: its class name and options."""

    module: str
    options: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class TrustStore:
    location: str | None = None  # a PEM file, read as it is
    pem: str | None = None  # certificates in PEM (inline, or converted from PKCS12)


@dataclass(frozen=True, slots=True)
class KeyStore:
    location: str | None = None  # a PEM file (key and chain) or a PKCS12 file
    kind: str = "PEM"  # PEM or PKCS12
    password: str | None = None  # the PKCS12 store's, or the PEM key's (ssl.key.password)
    certificate_pem: str | None = None  # inline ssl.keystore.certificate.chain
    key_pem: str | None = None  # inline ssl.keystore.key


@dataclass(frozen=True, slots=True)
class SaslLogin:
    mechanism: str
    username: str = ""
    password: str = ""
    # OAUTHBEARER: the unsecured token's claims and SASL extensions (KIP-255, KIP-342)
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    claims: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    lifetime_s: int = 3600
    extensions: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    """A tool's security properties, checked: what to connect with."""

    protocol: str = "PLAINTEXT"
    sasl: SaslLogin | None = None
    truststore: TrustStore | None = None  # None: the system's trust store
    keystore: KeyStore | None = None
    check_hostname: bool = True  # ssl.endpoint.identification.algorithm=https, Kafka's default

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_jaas_config(text: str) -> JaasConfig:
    """`<LoginModule class> <flag> key=value key="value" ... ;` as a Kafka client takes it
    (exactly one module). UsageError says what is wrong, never echoing a value."""
    body = text.strip()
    if not body.endswith(";"):
        raise UsageError("sasl.jaas.config must end with ';'")
    body = body[:-1].strip()
    parts = body.split(None, 2)
    if len(parts) < 2 or parts[1].lower() not in _JAAS_FLAGS:
        raise UsageError("sasl.jaas.config must start with a login module class and a flag "
                         "(required, requisite, sufficient or optional)")
    rest = parts[2] if len(parts) > 2 else ""
    options: dict[str, str] = {}
    position = 0
    while position < len(rest):
        match = _JAAS_OPTION.match(rest, position)
        if match is None:
            if rest[position:].strip() == "":
                break
            if ";" in rest[position:]:
                raise UsageError("sasl.jaas.config holds more than one login module; a client "
                                 "takes exactly one")
            raise UsageError(f"sasl.jaas.config: cannot read the options from character "
                             f"{len(parts[0]) + len(parts[1]) + 2 + position}")
        quoted, bare = match.group(2), match.group(3)
        options[match.group(1)] = (re.sub(r"\\(.)", r"\1", quoted) if quoted is not None
                                   else bare or "")
        position = match.end()
    return JaasConfig(parts[0], options)


def security_settings(properties: Mapping[str, str]) -> SecuritySettings:
    """The checked security settings of a tool's properties; UsageError names the key."""
    protocol = properties.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise UsageError(f"Invalid value {properties['security.protocol']} for configuration "
                         f"security.protocol: String must be one of: "
                         f"{', '.join(SECURITY_PROTOCOLS)}")
    settings = SecuritySettings(protocol=protocol)
    if settings.uses_sasl:
        settings = dataclasses.replace(settings, sasl=_sasl_login(properties))
    if settings.uses_tls:
        algorithm = properties.get("ssl.endpoint.identification.algorithm", "https").strip()
        if algorithm.lower() not in ("", "https"):
            raise UsageError(f"Invalid value {algorithm} for configuration "
                             "ssl.endpoint.identification.algorithm: https or empty")
        settings = dataclasses.replace(settings, truststore=_truststore(properties),
                                       keystore=_keystore(properties),
                                       check_hostname=algorithm != "")
    return settings


def _sasl_login(properties: Mapping[str, str]) -> SaslLogin:
    mechanism = properties.get("sasl.mechanism", "GSSAPI").strip().upper()  # Kafka's default
    if mechanism not in SASL_MECHANISMS:
        raise UsageError(f"SASL mechanism {mechanism} is not supported by pykraft's tools "
                         f"(sasl.mechanism: one of {', '.join(SASL_MECHANISMS)})")
    text = properties.get("sasl.jaas.config")
    if text is None:
        raise UsageError(f"sasl.jaas.config must be set for SASL mechanism {mechanism}")
    jaas = parse_jaas_config(text)
    family = _LOGIN_MODULES.get(jaas.module)
    if family is None or not mechanism.startswith(family):
        expected = next(module for module, kind in _LOGIN_MODULES.items()
                        if mechanism.startswith(kind))
        raise UsageError(f"sasl.jaas.config names {jaas.module}; SASL mechanism {mechanism} "
                         f"takes {expected}")
    if family == "OAUTHBEARER":
        return _unsecured_login(jaas.options)
    username, password = jaas.options.get("username"), jaas.options.get("password")
    if not username or password is None:
        raise UsageError(f"sasl.jaas.config for {mechanism} must give username and password")
    return SaslLogin(mechanism, username=username, password=password)


def _unsecured_login(options: Mapping[str, str]) -> SaslLogin:
    """Kafka's unsecured OAUTHBEARER login options (KIP-255): the token's claims
    (unsecuredLoginStringClaim_<name>, ...NumberClaim_<name>, ...ListClaim_<name> whose first
    character separates the items), unsecuredLoginPrincipalClaimName (sub),
    unsecuredLoginScopeClaimName (scope), unsecuredLoginLifetimeSeconds (3600) and
    unsecuredLoginExtension_<name>."""
    claims: dict[str, Any] = {}
    extensions: dict[str, str] = {}
    for key, value in options.items():
        kind, _, name = key.partition("_")
        if not name:
            continue
        if kind == "unsecuredLoginStringClaim":
            claims[name] = value
        elif kind == "unsecuredLoginNumberClaim":
            try:
                claims[name] = float(value) if "." in value else int(value)
            except ValueError:
                raise UsageError(f"sasl.jaas.config: {key} must be a number") from None
        elif kind == "unsecuredLoginListClaim":
            claims[name] = [item for item in value[1:].split(value[:1]) if item] if value else []
        elif kind == "unsecuredLoginExtension":
            extensions[name] = value
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "sub")
    if not isinstance(claims.get(principal_claim), str) or not claims[principal_claim]:
        raise UsageError(f"sasl.jaas.config for OAUTHBEARER must give the principal claim: "
                         f"unsecuredLoginStringClaim_{principal_claim}=\"<name>\"")
    lifetime = options.get("unsecuredLoginLifetimeSeconds", "3600")
    try:
        lifetime_s = int(lifetime)
    except ValueError:
        raise UsageError("sasl.jaas.config: unsecuredLoginLifetimeSeconds must be an integer "
                         f"(got '{lifetime}')") from None
    return SaslLogin("OAUTHBEARER", username=claims[principal_claim],
                     principal_claim=principal_claim,
                     scope_claim=options.get("unsecuredLoginScopeClaimName", "scope"),
                     claims=claims, lifetime_s=lifetime_s, extensions=extensions)


def _store_type(properties: Mapping[str, str], key: str) -> str:
    kind = properties.get(key, "JKS").strip().upper()  # Kafka's default type
    if kind not in _STORE_TYPES:
        raise UsageError(f"Invalid value {properties[key]} for configuration {key}: "
                         f"one of {', '.join(_STORE_TYPES)}")
    return kind


def _read_store(key: str, location: str) -> bytes:
    try:
        with open(location, "rb") as file:
            return file.read(_STORE_BYTES_MAX + 1)  # one byte more tells a file too large
    except OSError as error:
        raise UsageError(f"cannot read {key} {location}: {error.strerror or error}") from None


def _binary_kind(key: str, location: str, data: bytes, declared: str) -> str:
    """What a store file holds: PEM or PKCS12. Java reads a PKCS12 file under type JKS
    (keystore.type.compat), so that is accepted; a real JKS or JCEKS file is refused."""
    if len(data) > _STORE_BYTES_MAX:
        raise UsageError(f"{key} {location} is larger than {_STORE_BYTES_MAX} bytes")
    if data[:4] in _JKS_MAGIC:
        raise UsageError(
            f"{key} {location} is a JKS key store, which pykraft's tools cannot read: convert "
            f"it with keytool -importkeystore -deststoretype PKCS12 and set "
            f"{key.rsplit('.', 1)[0]}.type=PKCS12")
    if declared == "PEM" or data.lstrip().startswith(b"-----BEGIN"):
        if declared != "PEM":
            raise UsageError(f"{key} {location} is a PEM file: set "
                             f"{key.rsplit('.', 1)[0]}.type=PEM")
        return "PEM"
    return "PKCS12"


def _truststore(properties: Mapping[str, str]) -> TrustStore | None:
    kind = _store_type(properties, "ssl.truststore.type")
    inline = properties.get("ssl.truststore.certificates")
    location = properties.get("ssl.truststore.location")
    if inline is not None:
        if kind != "PEM":
            raise UsageError("ssl.truststore.certificates is read with ssl.truststore.type=PEM")
        if location is not None:
            raise UsageError("set ssl.truststore.location or ssl.truststore.certificates, "
                             "not both")
        return TrustStore(pem=normalize_pem(inline, "ssl.truststore.certificates",
                                            ("CERTIFICATE",)))
    if location is None:
        return None
    data = _read_store("ssl.truststore.location", location)
    if _binary_kind("ssl.truststore.location", location, data, kind) == "PEM":
        normalize_pem(data.decode("latin-1"), f"ssl.truststore.location {location}",
                      ("CERTIFICATE",))
        return TrustStore(location=location)
    password = properties.get("ssl.truststore.password")
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        raise UsageError(f"cannot read ssl.truststore.location {location} as PKCS12: not a "
                         "PKCS12 file, or the wrong ssl.truststore.password") from None
    certificates = [entry.certificate for entry in store.additional_certs]
    if store.cert is not None:
        certificates.append(store.cert.certificate)
    if not certificates:
        raise UsageError(f"ssl.truststore.location {location} holds no certificate")
    return TrustStore(pem="".join(
        c.public_bytes(serialization.Encoding.PEM).decode() for c in certificates))


def _keystore(properties: Mapping[str, str]) -> KeyStore | None:
    kind = _store_type(properties, "ssl.keystore.type")
    location = properties.get("ssl.keystore.location")
    key = properties.get("ssl.keystore.key")
    chain = properties.get("ssl.keystore.certificate.chain")
    if key is not None or chain is not None:
        if kind != "PEM" or key is None or chain is None or location is not None:
            raise UsageError("inline key stores take ssl.keystore.type=PEM with both "
                             "ssl.keystore.key and ssl.keystore.certificate.chain, and no "
                             "ssl.keystore.location")
        return KeyStore(kind="PEM", password=properties.get("ssl.key.password"),
                        key_pem=normalize_pem(key, "ssl.keystore.key", _KEY_BLOCKS),
                        certificate_pem=normalize_pem(chain, "ssl.keystore.certificate.chain",
                                                      ("CERTIFICATE",)))
    if location is None:
        return None
    data = _read_store("ssl.keystore.location", location)
    if _binary_kind("ssl.keystore.location", location, data, kind) == "PEM":
        text = data.decode("latin-1")
        normalize_pem(text, f"ssl.keystore.location {location}", _KEY_BLOCKS)
        normalize_pem(text, f"ssl.keystore.location {location}", ("CERTIFICATE",))
        return KeyStore(location=location, kind="PEM",
                        password=properties.get("ssl.key.password"))
    password = properties.get("ssl.keystore.password")
    try:
        pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        raise UsageError(f"cannot read ssl.keystore.location {location} as PKCS12: not a "
                         "PKCS12 file, or the wrong ssl.keystore.password") from None
    return KeyStore(location=location, kind="PKCS12", password=password)


def normalize_pem(text: str, key: str, kinds: tuple[str, ...]) -> str:
    """The PEM blocks of `kinds` in `text`, each re-wrapped at 64 columns. Kafka's PEM parser
    ignores the whitespace inside a block, so a properties file may hold a certificate on one
    joined line (continuation lines lose their line breaks); OpenSSL does not."""
    blocks = []
    for match in _PEM_BLOCK.finditer(text.replace("\\n", "\n")):
        if match.group(1) not in kinds:
            continue
        lines = [line.strip() for line in match.group(2).strip().splitlines()]
        headers = [line for line in lines if ":" in line]  # an old-style encrypted key's
        body = "".join(line for line in lines if ":" not in line).replace(" ", "")
        wrapped = [body[i:i + 64] for i in range(0, len(body), 64)]
        head = headers + [""] if headers else []
        blocks.append("\n".join([f"-----BEGIN {match.group(1)}-----", *head, *wrapped,
                                 f"-----END {match.group(1)}-----"]) + "\n")
    if not blocks:
        raise UsageError(f"{key} holds no PEM {' or '.join(kinds[:2]).lower()}")
    return "".join(blocks)


def librdkafka_security(settings: SecuritySettings) -> dict[str, str]:
    """librdkafka's names for `settings`."""
    config = {"security.protocol": settings.protocol}
    if settings.sasl is not None:
        sasl = settings.sasl
        config["sasl.mechanism"] = sasl.mechanism
        if sasl.mechanism == "OAUTHBEARER":
            config["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
            config["sasl.oauthbearer.config"] = _oauthbearer_config(sasl)
        else:
            config["sasl.username"] = sasl.username
            config["sasl.password"] = sasl.password
    if settings.uses_tls:
        config["ssl.endpoint.identification.algorithm"] = (
            "https" if settings.check_hostname else "none")
        trust = settings.truststore
        if trust is not None and trust.location is not None:
            config["ssl.ca.location"] = trust.location
        elif trust is not None and trust.pem is not None:
            config["ssl.ca.pem"] = trust.pem
        keys = settings.keystore
        if keys is not None and keys.kind == "PKCS12":
            config["ssl.keystore.location"] = str(keys.location)
            if keys.password is not None:
                config["ssl.keystore.password"] = keys.password
        elif keys is not None:
            if keys.location is not None:  # librdkafka finds the key and the chain in one file
                config["ssl.certificate.location"] = keys.location
                config["ssl.key.location"] = keys.location
            else:
                config["ssl.certificate.pem"] = str(keys.certificate_pem)
                config["ssl.key.pem"] = str(keys.key_pem)
            if keys.password is not None:
                config["ssl.key.password"] = keys.password
    return config


def _oauthbearer_config(sasl: SaslLogin) -> str:
    """librdkafka's unsecured-token settings (`principal=... scope=... lifeSeconds=...
    extension_<name>=...`). It makes tokens with the principal, scope, iat and exp claims
    only; other claims the JAAS options give are left out."""
    parts = [f"principalClaimName={sasl.principal_claim}", f"principal={sasl.username}",
             f"lifeSeconds={sasl.lifetime_s}"]
    scope = sasl.claims.get(sasl.scope_claim)
    if scope:
        parts += [f"scopeClaimName={sasl.scope_claim}",
                  "scope=" + (",".join(scope) if isinstance(scope, list) else str(scope))]
    parts += [f"extension_{name}={value}" for name, value in sasl.extensions.items()]
    return " ".join(parts)
