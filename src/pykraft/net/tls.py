"""TLS contexts from Kafka's `ssl.*` keys, and the principal of a certificate.

`server_context(get, listener)` is a listener's side, `client_context(get, listener)` the node's
own side when it connects to another node's listener. Each key is read with Kafka's listener
prefix first: `listener.name.<listener, lower case>.ssl.keystore.location` wins over
`ssl.keystore.location`. (`get` gives a key's value, or None when it is not set.)

Key stores (`ssl.keystore.*`): `PEM` -- a file holding the private key (PKCS#8, encrypted
with `ssl.key.password` or not) and the certificate chain, or both inline in
`ssl.keystore.key` / `ssl.keystore.certificate.chain`; `PKCS12` (read with `cryptography`,
`ssl.keystore.password`). Kafka's default type is JKS; Java reads a PKCS12 file under that
type too, and so do we, but a real JKS or JCEKS file is refused with a readable message: no
well-kept Python library reads it (docs/deviations.md). Trust stores (`ssl.truststore.*`)
likewise: PEM (a file, or inline `ssl.truststore.certificates`) or PKCS12; none configured
means the system's trust store, as Java falls back to its own.

Everything read is checked at start (`SslConfigError` names the key: an unreadable file, a
wrong password, a key that is not the certificate's), so a node never starts with a listener
that cannot serve a handshake. Keys reach OpenSSL through an anonymous in-memory file: a
decrypted key never touches the disk.

The principal of a verified client certificate is its subject as Java's X500Principal prints
it in RFC 2253 form (`CN=alice,OU=eng,O=pykraft,C=US`), mapped through
`ssl.principal.mapping.rules` (Kafka's SslPrincipalMapper: `DEFAULT`,
`RULE:pattern/replacement/[LU]`, the first rule that matches wins).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
import ssl
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.name import _ASN1Type

__all__ = [
    "NoMatchingRule",
    "PrincipalMapper",
    "SslConfigError",
    "client_context",
    "client_hostname_check",
    "principal_name",
    "server_context",
    "x500_name",
]

log = logging.getLogger(__name__)

Get = Callable[[str], str | None]

# Kafka's defaults (SslConfigs / BrokerSecurityConfigs)
DEFAULT_STORE_TYPE: Final = "JKS"
DEFAULT_ENABLED_PROTOCOLS: Final = "TLSv1.2,TLSv1.3"
DEFAULT_CLIENT_AUTH: Final = "none"
DEFAULT_ENDPOINT_IDENTIFICATION: Final = "https"
DEFAULT_MAPPING_RULES: Final = "DEFAULT"

# The ssl.* keys this module acts on (server/config.py declares them used).
SSL_KEYS: Final = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.client.auth", "ssl.enabled.protocols", "ssl.protocol", "ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm", "ssl.principal.mapping.rules",
})

_PROTOCOLS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH: Final = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                       "required": ssl.CERT_REQUIRED}
_JKS_MAGIC: Final = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS
_PEM_BLOCK: Final = re.compile(
    rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----", re.DOTALL)
# Java (IANA) names of TLS 1.2 suites -> OpenSSL's. TLS 1.3 suites keep their IANA names in
# OpenSSL, but Python cannot restrict them: they are accepted and OpenSSL's TLS 1.3 set used.
_IANA_TO_OPENSSL: Final = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
}
_TLS13_SUITES: Final = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                                  "TLS_CHACHA20_POLY1305_SHA256"})


class SslConfigError(ValueError):
    """An ssl.* setting the node cannot use; the message names the key."""


class NoMatchingRule(ValueError):
    """No ssl.principal.mapping.rules rule applies to a certificate's name."""


# -- reading keys ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Keys:
    get: Get
    listener: str | None

    def value(self, key: str) -> tuple[str, str | None]:
        """(the key the value came from, the value): the listener-prefixed key first."""
        if self.listener:
            prefixed = f"listener.name.{self.listener.lower()}.{key}"
            value = self.get(prefixed)
            if value is not None:
                return prefixed, value
        return key, self.get(key)

    def text(self, key: str, default: str) -> tuple[str, str]:
        name, value = self.value(key)
        return name, default if value is None else value


def _read_file(key: str, location: str) -> bytes:
    try:
        with open(location, "rb") as file:
            return file.read()
    except OSError as error:
        raise SslConfigError(f"cannot read {location} ({key}): "
                             f"{error.strerror or error}") from None


@dataclass(frozen=True, slots=True)
class KeyMaterial:
    key: PrivateKeyTypes
    chain: tuple[x509.Certificate, ...]  # the leaf first

    def pem(self) -> bytes:
        key = self.key.private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())
        return key + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in self.chain)


def _pem_blocks(data: bytes, kind: Callable[[bytes], bool]) -> list[bytes]:
    return [match.group(0) for match in _PEM_BLOCK.finditer(data) if kind(match.group(1))]


def _certificates(data: bytes, source: str) -> list[x509.Certificate]:
    certificates = []
    for block in _pem_blocks(data, lambda label: label == b"CERTIFICATE"):
        try:
            certificates.append(x509.load_pem_x509_certificate(block))
        except ValueError as error:
            raise SslConfigError(f"{source}: a certificate cannot be read: {error}") from None
    return certificates


def _pem_material(key_data: bytes, key_source: str, chain_data: bytes, chain_source: str,
                  password_key: str, password: str | None) -> KeyMaterial:
    blocks = _pem_blocks(key_data, lambda label: label.endswith(b"PRIVATE KEY"))
    if len(blocks) != 1:
        raise SslConfigError(f"{key_source}: expected one PEM private key, found {len(blocks)}")
    try:
        key = serialization.load_pem_private_key(
            blocks[0], password.encode() if password else None)
    except TypeError:  # cryptography: encrypted without a password, or the other way round
        if password:
            raise SslConfigError(f"{key_source}: the key is not encrypted, but {password_key} "
                                 "is set") from None
        raise SslConfigError(f"{key_source}: the key is encrypted; set {password_key}") from None
    except ValueError:
        raise SslConfigError(f"{key_source}: the key cannot be read: wrong {password_key}, or "
                             "not a PEM private key") from None
    chain = _certificates(chain_data, chain_source)
    if not chain:
        raise SslConfigError(f"{chain_source}: no PEM certificate found")
    return _checked(KeyMaterial(key, tuple(chain)), chain_source)


def _checked(material: KeyMaterial, source: str) -> KeyMaterial:
    der = serialization.Encoding.DER
    info = serialization.PublicFormat.SubjectPublicKeyInfo
    if material.key.public_key().public_bytes(der, info) != material.chain[0].public_key(
            ).public_bytes(der, info):
        raise SslConfigError(f"{source}: the private key does not belong to the first "
                             "certificate of the chain")
    leaf = material.chain[0]
    if leaf.not_valid_after_utc < datetime.datetime.now(datetime.UTC):
        log.warning("%s: the certificate %s expired at %s; peers will refuse it", source,
                    x500_name(leaf), leaf.not_valid_after_utc.isoformat())
    return material


def _refuse_jks(data: bytes, key: str, location: str) -> None:
    if data[:4] in _JKS_MAGIC:
        raise SslConfigError(
            f"{location} ({key}) is a Java JKS/JCEKS key store, which pykraft cannot read; "
            f"convert it with `keytool -importkeystore -srckeystore {location} "
            "-destkeystore store.p12 -deststoretype PKCS12` and set the type to PKCS12")


def _pkcs12(data: bytes, key: str, location: str, password_key: str,
            password: str | None) -> tuple[PrivateKeyTypes | None, list[x509.Certificate]]:
    _refuse_jks(data, key, location)
    try:
        loaded = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        raise SslConfigError(f"{location} ({key}) cannot be read as PKCS12: wrong "
                             f"{password_key}, or not a PKCS12 file") from None
    certificates = [c.certificate for c in ([loaded.cert] if loaded.cert else [])]
    certificates += [c.certificate for c in loaded.additional_certs]
    return loaded.key, certificates


def load_keystore(keys: _Keys) -> KeyMaterial | None:
    """The key and chain the ssl.keystore.* keys name, or None when none is set."""
    type_key, store_type = keys.text("ssl.keystore.type", DEFAULT_STORE_TYPE)
    store_type = store_type.upper()
    location_key, location = keys.value("ssl.keystore.location")
    chain_key, inline_chain = keys.value("ssl.keystore.certificate.chain")
    inline_key_key, inline_key = keys.value("ssl.keystore.key")
    password_key, store_password = keys.value("ssl.keystore.password")
    key_password_key, key_password = keys.value("ssl.key.password")
    if inline_key or inline_chain:
        if store_type != "PEM":
            raise SslConfigError(f"SSL private key can be specified only for PEM, but key "
                                 f"store type is {store_type} ({type_key})")
        if not inline_key or not inline_chain:
            raise SslConfigError(f"{inline_key_key} and {chain_key} must be set together")
        if location:
            raise SslConfigError(f"{location_key} cannot be set with {inline_key_key}")
        return _pem_material(inline_key.encode(), inline_key_key, inline_chain.encode(),
                             chain_key, key_password_key, key_password)
    if not location:
        return None
    data = _read_file(location_key, location)
    if store_type == "PEM":
        if store_password:
            raise SslConfigError(f"SSL key store password cannot be specified with PEM "
                                 f"format, only key password may be specified "
                                 f"({password_key})")
        source = f"{location} ({location_key})"
        return _pem_material(data, source, data, source, key_password_key, key_password)
    if store_type in ("PKCS12", "JKS"):  # Java reads a PKCS12 file as a JKS store too
        key, chain = _pkcs12(data, location_key, location, password_key, store_password)
        if key is None or not chain:
            raise SslConfigError(f"{location} ({location_key}) holds no private key with "
                                 "its certificate")
        return _checked(KeyMaterial(key, tuple(chain)), f"{location} ({location_key})")
    raise SslConfigError(f"Invalid value {store_type} for configuration {type_key}: pykraft "
                         "reads PEM and PKCS12 key stores")


def load_truststore(keys: _Keys) -> list[x509.Certificate] | None:
    """The trusted certificates the ssl.truststore.* keys name, or None when none is set."""
    type_key, store_type = keys.text("ssl.truststore.type", DEFAULT_STORE_TYPE)
    store_type = store_type.upper()
    location_key, location = keys.value("ssl.truststore.location")
    inline_key, inline = keys.value("ssl.truststore.certificates")
    password_key, password = keys.value("ssl.truststore.password")
    if inline:
        if store_type != "PEM":
            raise SslConfigError(f"SSL trust store certs can be specified only for PEM, but "
                                 f"trust store type is {store_type} ({type_key})")
        if location:
            raise SslConfigError(f"{location_key} cannot be set with {inline_key}")
        found = _certificates(inline.encode(), inline_key)
        source = inline_key
    elif not location:
        return None
    else:
        data = _read_file(location_key, location)
        source = f"{location} ({location_key})"
        if store_type == "PEM":
            if password:
                raise SslConfigError(f"SSL trust store password cannot be specified for PEM "
                                     f"format ({password_key})")
            found = _certificates(data, source)
        elif store_type in ("PKCS12", "JKS"):
            _, found = _pkcs12(data, location_key, location, password_key, password)
        else:
            raise SslConfigError(f"Invalid value {store_type} for configuration {type_key}: "
                                 "pykraft reads PEM and PKCS12 trust stores")
    if not found:
        raise SslConfigError(f"{source}: no certificate found")
    return found


# -- contexts --------------------------------------------------------------------------


@contextlib.contextmanager
def _in_memory_file(data: bytes, *, memory: bool = True) -> Iterator[str]:
    """A path OpenSSL can read `data` from: an anonymous memory file where Linux has them
    (a decrypted key never reaches a disk), else a private temporary file, gone at once."""
    if memory and hasattr(os, "memfd_create"):
        fd = os.memfd_create("pykraft-tls", 0)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, path = tempfile.mkstemp(prefix="pykraft-tls-")  # mode 0600
    try:
        os.write(fd, data)
        os.close(fd)
        yield path
    finally:
        os.unlink(path)


def _load_material(context: ssl.SSLContext, material: KeyMaterial, source: str) -> None:
    for memory in (True, False):  # (no memfd or /proc/self/fd, as in some sandboxes)
        try:
            with _in_memory_file(material.pem(), memory=memory) as path:
                context.load_cert_chain(path)
            return
        except ssl.SSLError as error:
            raise SslConfigError(f"{source}: OpenSSL refuses the key or certificate: "
                                 f"{error.reason or error}") from None
        except OSError as error:
            if not memory:
                raise SslConfigError(f"{source}: cannot hand the key to OpenSSL: "
                                     f"{error}") from None


def _trust(context: ssl.SSLContext, keys: _Keys, purpose: ssl.Purpose) -> None:
    trusted = load_truststore(keys)
    if trusted is None:
        context.load_default_certs(purpose)
        return
    pem = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in trusted)
    try:
        context.load_verify_locations(cadata=pem)
    except ssl.SSLError as error:
        raise SslConfigError(f"ssl.truststore.*: OpenSSL refuses a certificate: "
                             f"{error.reason or error}") from None


def _protocols(context: ssl.SSLContext, keys: _Keys, *, client: bool) -> None:
    protocol_key, protocol = keys.text("ssl.protocol", "TLSv1.3")
    if protocol not in ("TLS", *_PROTOCOLS):
        raise SslConfigError(f"Invalid value {protocol} for configuration {protocol_key}: "
                             "pykraft supports TLS, TLSv1.2 and TLSv1.3")
    enabled_key, enabled_text = keys.text("ssl.enabled.protocols", DEFAULT_ENABLED_PROTOCOLS)
    enabled = [part.strip() for part in enabled_text.split(",") if part.strip()]
    unknown = [name for name in enabled if name not in _PROTOCOLS]
    if unknown or not enabled:
        raise SslConfigError(f"Invalid value {enabled_text} for configuration {enabled_key}: "
                             "pykraft supports TLSv1.2 and TLSv1.3")
    versions = sorted(_PROTOCOLS[name] for name in enabled)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    # Kafka: a client whose ssl.protocol is TLSv1.2 does not use TLSv1.3, whatever is enabled
    if client and protocol == "TLSv1.2":
        if versions[0] > ssl.TLSVersion.TLSv1_2:
            raise SslConfigError(f"{protocol_key}=TLSv1.2 but {enabled_key} allows only "
                                 f"{enabled_text}")
        context.maximum_version = ssl.TLSVersion.TLSv1_2


def _ciphers(context: ssl.SSLContext, keys: _Keys) -> None:
    suites_key, suites = keys.value("ssl.cipher.suites")
    if not suites or not suites.strip():
        return  # OpenSSL's defaults (Kafka's: the JVM's)
    names = [part.strip() for part in suites.split(",") if part.strip()]
    tls12 = []
    for name in names:
        if name in _TLS13_SUITES:
            continue
        tls12.append(_IANA_TO_OPENSSL.get(name, name))
    if not tls12:  # only TLS 1.3 suites: OpenSSL's TLS 1.3 set (Python cannot narrow it)
        return
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # one suite at a time: name the bad one
    for name in tls12:
        try:
            probe.set_ciphers(name)
        except ssl.SSLError:
            raise SslConfigError(f"Invalid value {suites} for configuration {suites_key}: "
                                 f"unknown or unavailable cipher suite {name}") from None
    context.set_ciphers(":".join(tls12))


def server_context(get: Get, listener: str, *, sasl: bool = False) -> ssl.SSLContext:
    """The server side of an SSL or (`sasl`) SASL_SSL listener. SslConfigError names the key.
    On SASL_SSL only the listener-prefixed ssl.client.auth counts (KIP-684): a broker-wide
    ssl.client.auth meant for SSL listeners does not make SASL clients bring certificates."""
    keys = _Keys(get, listener)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols(context, keys, client=False)
    _ciphers(context, keys)
    material = load_keystore(keys)
    if material is None:
        raise SslConfigError(
            f"listener {listener} uses TLS but has no key store: set "
            f"listener.name.{listener.lower()}.ssl.keystore.location (or ssl.keystore.location), "
            "or ssl.keystore.key and ssl.keystore.certificate.chain with ssl.keystore.type=PEM")
    _load_material(context, material, f"the key store of listener {listener}")
    auth_key, auth = keys.text("ssl.client.auth", DEFAULT_CLIENT_AUTH)
    if sasl and auth_key == "ssl.client.auth":
        auth = DEFAULT_CLIENT_AUTH
    mode = _CLIENT_AUTH.get(auth.strip().lower())
    if mode is None:
        raise SslConfigError(f"Invalid value {auth} for configuration {auth_key}: String must "
                             "be one of: required, requested, none")
    context.verify_mode = mode
    if mode != ssl.CERT_NONE:
        _trust(context, keys, ssl.Purpose.CLIENT_AUTH)
    mapper_key, rules = keys.text("ssl.principal.mapping.rules", DEFAULT_MAPPING_RULES)
    try:
        PrincipalMapper.parse(rules)
    except ValueError as error:
        raise SslConfigError(f"Invalid value {rules} for configuration {mapper_key}: "
                             f"{error}") from None
    return context


def client_context(get: Get, listener: str) -> ssl.SSLContext:
    """The node's side of a connection to `listener` on another node (Kafka's inter-broker
    and controller clients read the listener's prefixed keys): its trust store to check the
    peer, its key store when the peer asks for a certificate."""
    keys = _Keys(get, listener)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols(context, keys, client=True)
    _ciphers(context, keys)
    context.check_hostname = client_hostname_check(get, listener)
    context.verify_mode = ssl.CERT_REQUIRED
    _trust(context, keys, ssl.Purpose.SERVER_AUTH)
    material = load_keystore(keys)
    if material is not None:
        _load_material(context, material, f"the key store of listener {listener}")
    return context


def client_hostname_check(get: Get, listener: str) -> bool:
    """ssl.endpoint.identification.algorithm: https checks the peer's host name, empty not."""
    key, algorithm = _Keys(get, listener).text("ssl.endpoint.identification.algorithm",
                                               DEFAULT_ENDPOINT_IDENTIFICATION)
    if not algorithm.strip():
        return False
    if algorithm.strip().lower() == "https":
        return True
    raise SslConfigError(f"Invalid value {algorithm} for configuration {key}: pykraft "
                         "supports https or an empty value")


def principal_mapper(get: Get, listener: str) -> PrincipalMapper:
    """The listener's ssl.principal.mapping.rules (checked by server_context already)."""
    return PrincipalMapper.parse(_Keys(get, listener).text("ssl.principal.mapping.rules",
                                                           DEFAULT_MAPPING_RULES)[1])


# -- names and principals --------------------------------------------------------------


def _der_length(length: int) -> bytes:
    if length < 0x80:
        return bytes([length])
    encoded = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(encoded)]) + encoded


def _attribute(attribute: x509.NameAttribute[str | bytes]) -> str:
    """One attribute as Java's RFC 2253 form prints it: a keyword Java knows (CN, C, L, ST,
    O, OU, STREET, DC, UID) with the value escaped, any other type as its dotted OID and
    `#` with the hex of the value's DER encoding."""
    if attribute.oid in x509.name._NAMEOID_TO_NAME:
        return attribute.rfc4514_string()
    value = attribute.value
    kind = getattr(attribute, "_type", _ASN1Type.UTF8String)
    if isinstance(value, bytes):
        raw = value
    elif kind == _ASN1Type.BMPString:
        raw = value.encode("utf-16-be")
    elif kind == _ASN1Type.UniversalString:
        raw = value.encode("utf-32-be")
    elif kind in (_ASN1Type.PrintableString, _ASN1Type.IA5String):
        raw = value.encode("ascii", "replace")
    else:
        raw = value.encode()
    der = bytes([int(kind.value)]) + _der_length(len(raw)) + raw
    return f"{attribute.oid.dotted_string}=#{der.hex()}"


def x500_name(certificate: x509.Certificate) -> str:
    """The subject in RFC 2253 form, as Java's X500Principal.getName() gives it: the RDNs
    last first, joined by commas, multi-valued ones by `+`."""
    return ",".join("+".join(_attribute(a) for a in rdn)
                    for rdn in reversed(certificate.subject.rdns))


def principal_name(der: bytes, mapper: PrincipalMapper) -> str:
    """The user name a DER client certificate maps to (NoMatchingRule, ValueError)."""
    return mapper.name(x500_name(x509.load_der_x509_certificate(der)))


# Kafka's rule grammar: DEFAULT, or RULE:pattern/replacement/ with an optional L or U, the
# pattern and replacement taking `\x` escapes; anything else is kept to be refused whole.
_RULE: Final = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER: Final = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_RULE_PARSER: Final = re.compile(_RULE)
_BACK_REFERENCE: Final = re.compile(r"\$(\d+)")


@dataclass(frozen=True, slots=True)
class _MappingRule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        groups = self.pattern.groups
        # Java's String.replaceAll, so a pattern that also matches the empty end adds one
        # more replacement, exactly as Kafka's does
        result = self.pattern.sub(lambda m: _java_replacement(self.replacement, m, groups),
                                  name)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return (f"RULE:{self.pattern.pattern}/{self.replacement}"
                + (f"/{self.case}" if self.case else ""))


def _java_replacement(replacement: str, match: re.Match[str], groups: int) -> str:
    """`replacement` expanded as Java's Matcher does (`$n` a group, `\\x` a literal x),
    where a reference to a group the pattern lacks is literal text, as Kafka pre-escapes it
    (a longer number is cut back to a group that exists: `$12` with one group is `$1` `2`)."""
    out = []
    index = 0
    while index < len(replacement):
        char = replacement[index]
        if char == "\\" and index + 1 < len(replacement):
            out.append(replacement[index + 1])
            index += 2
            continue
        reference = _BACK_REFERENCE.match(replacement, index) if char == "$" else None
        if reference is None or groups == 0:
            out.append(char)
            index += 1
            continue
        digits = reference.group(1)
        number, used = int(digits[0]), 1
        while used < len(digits) and number * 10 + int(digits[used]) <= groups:
            number, used = number * 10 + int(digits[used]), used + 1
        if number > groups:
            out.append(char)
            index += 1
            continue
        out.append(match.group(number) or "")
        index += 1 + used
    return "".join(out)


class PrincipalMapper:
    """Kafka's SslPrincipalMapper: the first rule that applies names the user."""

    def __init__(self, rules: list[_MappingRule]) -> None:
        self.rules = rules

    @classmethod
    def parse(cls, text: str | None) -> PrincipalMapper:
        """ValueError (Kafka's "Invalid rule" message) on a malformed list."""
        if text is None:
            text = DEFAULT_MAPPING_RULES
        rules = []
        for split in _RULE_SPLITTER.finditer(text.strip()):
            step = split.group(1)
            parsed = _RULE_PARSER.match(step)
            if parsed is None:
                raise ValueError(f"Invalid rule: {step}")
            if parsed.end() != len(step):
                raise ValueError(f"Invalid rule: `{step}`, unmatched substring: "
                                 f"`{step[parsed.end():]}`")
            if parsed.group(1) is not None:
                rules.append(_MappingRule(None))
            elif parsed.group(2) is not None:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as error:
                    raise ValueError(f"Invalid rule: `{step}`: {error}") from None
                rules.append(_MappingRule(pattern, parsed.group(3), parsed.group(4)))
            # else an empty rule: ignored
        return cls(rules)

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self}")

    def __str__(self) -> str:
        return "[" + ", ".join(str(rule) for rule in self.rules) + "]"
