"""The tools' security properties: Java client keys in, librdkafka's out, and the checks
that refuse what cannot work with one readable line (tests/unit/cli/test_cli_security_client.py
covers ProtocolClient's TLS and SASL)."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from pykraft.cli.args import UsageError, parse_properties
from pykraft.cli.client_config import client_config, parse_jaas_config, security_settings

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="alice" password="alice-secret";')
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="admin" password="p=w \\"x\\";";')
OAUTH_JAAS = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
              'unsecuredLoginStringClaim_sub="bob" unsecuredLoginListClaim_scope=",read,write" '
              'unsecuredLoginLifetimeSeconds="600" unsecuredLoginExtension_traceId="42";')


def _certificate(name: str, key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))


@pytest.fixture(scope="module")
def identity() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    return key, _certificate("tool", key)


def _pem(certificate: x509.Certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> str:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             encryption).decode()


def _translated(properties: dict[str, str]) -> dict[str, object]:
    warnings: list[str] = []
    config = client_config("h:1", properties, warn=warnings.append)
    assert warnings == []
    del config["bootstrap.servers"]
    return config


def test_jaas_config_is_read_as_kafka_writes_it() -> None:
    """Quoted values keep '=', ';' and escaped quotes; bare values end at a space."""
    jaas = parse_jaas_config(SCRAM_JAAS)
    assert jaas.module == "org.apache.kafka.common.security.scram.ScramLoginModule"
    assert jaas.options == {"username": "admin", "password": 'p=w "x";'}
    bare = parse_jaas_config("a.B optional username=u password=p ;")
    assert bare.options == {"username": "u", "password": "p"}


@pytest.mark.parametrize(("text", "message"), [
    ("a.B required username=u", "must end with ';'"),
    ("a.B username=u;", "a login module class and a flag"),
    ("a.B required username=u; c.D required x=y;", "more than one login module"),
    ('a.B required username="u;', "cannot read the options"),
])
def test_a_broken_jaas_config_is_one_readable_line(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_jaas_config(text)


def test_sasl_plain_and_scram_become_username_and_password() -> None:
    assert _translated({"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
                        "sasl.jaas.config": PLAIN_JAAS}) == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": "alice", "sasl.password": "alice-secret"}
    config = _translated({"security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM_JAAS})
    assert (config["sasl.mechanism"], config["sasl.password"]) == ("SCRAM-SHA-512", 'p=w "x";')


def test_unsecured_oauthbearer_becomes_librdkafkas_unsecure_jwt() -> None:
    config = _translated({"security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": OAUTH_JAAS})
    assert config == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": "true",
        "sasl.oauthbearer.config": "principalClaimName=sub principal=bob lifeSeconds=600 "
                                   "scopeClaimName=scope scope=read,write "
                                   "extension_traceId=42"}
    login = security_settings({"security.protocol": "SASL_SSL",
                               "sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": OAUTH_JAAS})
    assert login.sasl is not None and login.sasl.claims == {"sub": "bob",
                                                            "scope": ["read", "write"]}


@pytest.mark.parametrize(("properties", "message"), [
    ({"security.protocol": "TLS"}, "security.protocol: String must be one of"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": PLAIN_JAAS},
     "SASL mechanism GSSAPI is not supported"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
     "sasl.jaas.config must be set"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
      "sasl.jaas.config": PLAIN_JAAS}, "takes org.apache.kafka.common.security.scram"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                          "required username=u;"}, "must give username and password"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
      "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
                          " required;"}, "unsecuredLoginStringClaim_sub"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
     "https or empty"),
    ({"security.protocol": "SSL", "ssl.truststore.type": "BKS"}, "one of JKS, PKCS12, PEM"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ca.pem"},
     "cannot read ssl.truststore.location /nonexistent/ca.pem"),
])
def test_security_settings_that_cannot_work_are_refused(properties: dict[str, str],
                                                        message: str) -> None:
    with pytest.raises(UsageError, match=message):
        client_config("h:1", properties)


def test_a_refusal_never_echoes_the_password() -> None:
    with pytest.raises(UsageError) as refused:
        security_settings({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                           "sasl.jaas.config": PLAIN_JAAS})
    assert "alice-secret" not in str(refused.value)


def test_pem_trust_and_key_stores_become_librdkafka_locations(
        tmp_path: Path, identity: tuple[ec.EllipticCurvePrivateKey, x509.Certificate]) -> None:
    """A PEM key store (key and chain in one file) serves as both of librdkafka's locations;
    an empty endpoint identification algorithm is librdkafka's none."""
    key, certificate = identity
    (tmp_path / "ca.pem").write_text(_pem(certificate))
    (tmp_path / "keystore.pem").write_text(_key_pem(key, "kp") + _pem(certificate))
    config = _translated({
        "security.protocol": "SSL", "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tmp_path / "ca.pem"), "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tmp_path / "keystore.pem"), "ssl.key.password": "kp",
        "ssl.endpoint.identification.algorithm": ""})
    assert config == {
        "security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "none",
        "ssl.ca.location": str(tmp_path / "ca.pem"),
        "ssl.certificate.location": str(tmp_path / "keystore.pem"),
        "ssl.key.location": str(tmp_path / "keystore.pem"), "ssl.key.password": "kp"}


def test_pkcs12_stores_convert_the_trust_store_and_pass_the_key_store(
        tmp_path: Path, identity: tuple[ec.EllipticCurvePrivateKey, x509.Certificate]) -> None:
    """librdkafka reads no PKCS12 trust store: its certificates become ssl.ca.pem. A PKCS12
    key store, under type PKCS12 or Kafka's default JKS (Java reads it so too), is
    librdkafka's ssl.keystore.location."""
    key, certificate = identity
    trust = tmp_path / "trust.p12"
    trust.write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [certificate], serialization.BestAvailableEncryption(b"tp")))
    keystore = tmp_path / "keystore.p12"
    keystore.write_bytes(pkcs12.serialize_key_and_certificates(
        b"tool", key, certificate, None, serialization.BestAvailableEncryption(b"kp")))
    config = _translated({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS,
        "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(trust),
        "ssl.truststore.password": "tp", "ssl.keystore.location": str(keystore),
        "ssl.keystore.password": "kp"})
    assert config["ssl.ca.pem"] == _pem(certificate)
    assert (config["ssl.keystore.location"], config["ssl.keystore.password"]) == (
        str(keystore), "kp")
    assert config["ssl.endpoint.identification.algorithm"] == "https"  # Kafka's default
    with pytest.raises(UsageError, match="the wrong ssl.truststore.password"):
        client_config("h:1", {"security.protocol": "SSL", "ssl.truststore.type": "PKCS12",
                              "ssl.truststore.location": str(trust),
                              "ssl.truststore.password": "nope"})


def test_inline_pem_stores_survive_a_properties_file(
        identity: tuple[ec.EllipticCurvePrivateKey, x509.Certificate]) -> None:
    """Continuation lines lose their line breaks in a properties file; the PEM blocks are
    wrapped again for OpenSSL, as Kafka's PEM parser ignores the whitespace."""
    key, certificate = identity
    def continued(pem: str) -> str:
        return " \\\n  ".join(pem.strip().splitlines())
    text = (f"security.protocol=SSL\nssl.keystore.type=PEM\nssl.truststore.type=PEM\n"
            f"ssl.truststore.certificates={continued(_pem(certificate))}\n"
            f"ssl.keystore.certificate.chain={continued(_pem(certificate))}\n"
            f"ssl.keystore.key={continued(_key_pem(key))}\n")
    config = _translated(parse_properties(text))
    assert config["ssl.ca.pem"] == _pem(certificate)
    assert config["ssl.certificate.pem"] == _pem(certificate)
    assert config["ssl.key.pem"] == _key_pem(key)


def test_jks_and_mistyped_stores_are_refused_with_the_fix(tmp_path: Path) -> None:
    jks = tmp_path / "trust.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02" + bytes(64))
    with pytest.raises(UsageError, match="is a JKS key store, which pykraft's tools cannot "
                                         "read: convert it"):
        client_config("h:1", {"security.protocol": "SSL",
                              "ssl.truststore.location": str(jks)})
    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    with pytest.raises(UsageError, match="is a PEM file: set ssl.truststore.type=PEM"):
        client_config("h:1", {"security.protocol": "SSL", "ssl.truststore.location": str(pem)})
    with pytest.raises(UsageError, match="ssl.keystore.location .* holds no PEM private key"):
        client_config("h:1", {"security.protocol": "SSL", "ssl.keystore.type": "PEM",
                              "ssl.keystore.location": str(pem)})


def test_java_only_security_keys_are_warned_about_and_dropped() -> None:
    warnings: list[str] = []
    config = client_config("h:1", {"ssl.enabled.protocols": "TLSv1.3",
                                   "ssl.keymanager.algorithm": "SunX509"},
                           warn=warnings.append)
    assert config == {"bootstrap.servers": "h:1"}
    assert warnings == [
        "WARN: ignoring Java client property ssl.enabled.protocols (no librdkafka equivalent)",
        "WARN: ignoring Java client property ssl.keymanager.algorithm (no librdkafka "
        "equivalent)"]


def test_plaintext_properties_add_nothing() -> None:
    """A file without security keys gives librdkafka's defaults, as before."""
    assert client_config("h:1", {"acks": "all"}) == {"bootstrap.servers": "h:1", "acks": "all"}


def test_librdkafka_loads_every_translated_store(
        tmp_path: Path, identity: tuple[ec.EllipticCurvePrivateKey, x509.Certificate]) -> None:
    """librdkafka reads the stores when a client is made: each translation is one it takes
    (an encrypted PEM key store in one file, a PKCS12 key store, inline PEM, a PKCS12 trust
    store turned PEM)."""
    from confluent_kafka import Producer

    key, certificate = identity
    (tmp_path / "keystore.pem").write_text(_key_pem(key, "kp") + _pem(certificate))
    (tmp_path / "keystore.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"tool", key, certificate, None, serialization.BestAvailableEncryption(b"kp")))
    (tmp_path / "trust.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [certificate], serialization.BestAvailableEncryption(b"tp")))
    trust = {"ssl.truststore.type": "PKCS12", "ssl.truststore.location":
             str(tmp_path / "trust.p12"), "ssl.truststore.password": "tp"}
    key_stores = [
        {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(tmp_path / "keystore.pem"),
         "ssl.key.password": "kp"},
        {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(tmp_path / "keystore.p12"),
         "ssl.keystore.password": "kp"},
        {"ssl.keystore.type": "PEM", "ssl.keystore.key": _key_pem(key),
         "ssl.keystore.certificate.chain": _pem(certificate)},
    ]
    for key_store in key_stores:
        config = client_config("127.0.0.1:1", {"security.protocol": "SSL", **trust, **key_store})
        Producer(config).flush(0)  # a store librdkafka cannot read raises KafkaException


def test_a_hostile_pem_file_costs_one_pass(tmp_path: Path) -> None:
    """Sixty thousand BEGIN lines and no END: refused in well under a second (a lazy
    pattern would rescan the rest of the file from every line)."""
    import time

    hostile = tmp_path / "hostile.pem"
    hostile.write_text("-----BEGIN CERTIFICATE-----\n" * 60_000)
    started = time.monotonic()
    with pytest.raises(UsageError, match="holds no PEM certificate"):
        client_config("h:1", {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                              "ssl.truststore.location": str(hostile)})
    assert time.monotonic() - started < 1.0
