"""TLS contexts from Kafka's ssl.* keys (every key store type, the listener prefix, the
refusals, naming the key), Kafka's principal mapping rules, and Java's RFC 2253 names."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID

from pykraft.net.connect import ClientSecurity, ClientSecurityError
from pykraft.net.tls import (
    NoMatchingRule,
    PrincipalMapper,
    SslConfigError,
    client_context,
    client_hostname_check,
    server_context,
    x500_name,
)
from pykraft.testing.certs import CertificateAuthority, Identity


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create()


@pytest.fixture(scope="module")
def node(ca: CertificateAuthority) -> Identity:
    return ca.issue("node-1")


def _refused(values: dict[str, str], listener: str = "SSL", *, client: bool = False) -> str:
    with pytest.raises(SslConfigError) as refused:
        (client_context if client else server_context)(values.get, listener)
    return str(refused.value)


# -- key stores ------------------------------------------------------------------------


def test_pem_key_store_file_plain_and_encrypted(node: Identity, tmp_path: Path) -> None:
    plain = node.write_pem(tmp_path / "plain")
    context = server_context({"ssl.keystore.type": "PEM",
                              "ssl.keystore.location": str(plain.keystore)}.get, "SSL")
    assert context.verify_mode == ssl.CERT_NONE  # ssl.client.auth=none, Kafka's default
    encrypted = node.write_pem(tmp_path / "encrypted", password="k3y")
    server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(encrypted.keystore),
                    "ssl.key.password": "k3y"}.get, "SSL")
    assert "the key is encrypted; set ssl.key.password" in _refused(
        {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(encrypted.keystore)})
    assert "wrong ssl.key.password" in _refused(
        {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(encrypted.keystore),
         "ssl.key.password": "nope"})
    assert "SSL key store password cannot be specified with PEM format" in _refused(
        {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(plain.keystore),
         "ssl.keystore.password": "x"})


def test_pem_key_store_inline(node: Identity) -> None:
    values = {"ssl.keystore.type": "PEM", "ssl.keystore.key": node.key_pem().decode(),
              "ssl.keystore.certificate.chain": node.chain_pem().decode()}
    server_context(values.get, "SSL")
    assert "SSL private key can be specified only for PEM" in _refused(
        {**values, "ssl.keystore.type": "PKCS12"})
    assert "must be set together" in _refused(
        {"ssl.keystore.type": "PEM", "ssl.keystore.key": node.key_pem().decode()})


def test_pkcs12_key_store_and_jks_type_reading_pkcs12(node: Identity, tmp_path: Path) -> None:
    store = node.write_pkcs12(tmp_path / "node.p12", "st0re")
    server_context({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(store),
                    "ssl.keystore.password": "st0re"}.get, "SSL")
    # Kafka's default type is JKS; Java reads a PKCS12 file under it too
    server_context({"ssl.keystore.location": str(store),
                    "ssl.keystore.password": "st0re"}.get, "SSL")
    assert "wrong ssl.keystore.password" in _refused(
        {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(store),
         "ssl.keystore.password": "nope"})


def test_a_real_jks_file_is_refused_with_the_conversion(tmp_path: Path) -> None:
    jks = tmp_path / "node.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + bytes(64))
    message = _refused({"ssl.keystore.location": str(jks), "ssl.keystore.password": "x"})
    assert "is a Java JKS/JCEKS key store" in message
    assert "keytool -importkeystore" in message and "ssl.keystore.location" in message


def test_missing_and_unreadable_key_stores_name_the_key(tmp_path: Path) -> None:
    assert "listener SSL uses TLS but has no key store" in _refused({})
    assert "listener.name.ssl.ssl.keystore.location" in _refused({})
    message = _refused({"ssl.keystore.type": "PEM",
                        "ssl.keystore.location": str(tmp_path / "absent.pem")})
    assert message.startswith(f"cannot read {tmp_path / 'absent.pem'} (ssl.keystore.location)")
    assert "No such file" in message


def test_a_key_that_is_not_the_certificates_is_refused(ca: CertificateAuthority,
                                                       tmp_path: Path) -> None:
    one, other = ca.issue("one"), ca.issue("other")
    path = tmp_path / "mixed.pem"
    path.write_bytes(one.key_pem() + other.chain_pem())
    assert "does not belong to the first certificate" in _refused(
        {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(path)})


def test_listener_prefixed_keys_win(node: Identity, tmp_path: Path) -> None:
    files = node.write_pem(tmp_path / "node")
    values = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(tmp_path / "absent"),
              "listener.name.internal.ssl.keystore.location": str(files.keystore)}
    server_context(values.get, "INTERNAL")  # the prefixed location is used
    assert "(ssl.keystore.location)" in _refused(values, "EXTERNAL")
    values["listener.name.internal.ssl.keystore.type"] = "BKS"
    assert _refused(values, "INTERNAL").startswith(
        "Invalid value BKS for configuration listener.name.internal.ssl.keystore.type")


# -- trust stores, client auth, protocols, ciphers --------------------------------------


def test_trust_stores_and_client_auth(ca: CertificateAuthority, node: Identity,
                                      tmp_path: Path) -> None:
    files = node.write_pem(tmp_path / "node")
    base = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(files.keystore)}
    for auth, mode in (("required", ssl.CERT_REQUIRED), ("requested", ssl.CERT_OPTIONAL),
                       ("none", ssl.CERT_NONE)):
        context = server_context({**base, "ssl.client.auth": auth,
                                  "ssl.truststore.type": "PEM",
                                  "ssl.truststore.location": str(files.ca)}.get, "SSL")
        assert context.verify_mode == mode
    inline = server_context({**base, "ssl.client.auth": "required",
                             "ssl.truststore.type": "PEM",
                             "ssl.truststore.certificates": ca.pem().decode()}.get, "SSL")
    assert len(inline.get_ca_certs()) == 1
    p12 = ca.write_pkcs12_truststore(tmp_path / "trust.p12", "tru5t")
    from_p12 = server_context({**base, "ssl.client.auth": "required",
                               "ssl.truststore.type": "PKCS12",
                               "ssl.truststore.location": str(p12),
                               "ssl.truststore.password": "tru5t"}.get, "SSL")
    assert len(from_p12.get_ca_certs()) == 1
    assert "String must be one of: required, requested, none" in _refused(
        {**base, "ssl.client.auth": "always"})
    assert "SSL trust store password cannot be specified for PEM format" in _refused(
        {**base, "ssl.client.auth": "required", "ssl.truststore.type": "PEM",
         "ssl.truststore.location": str(files.ca), "ssl.truststore.password": "x"})


def test_protocols_and_cipher_suites(node: Identity, tmp_path: Path) -> None:
    files = node.write_pem(tmp_path / "node")
    base = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(files.keystore)}
    context = server_context({**base, "ssl.enabled.protocols": "TLSv1.3"}.get, "SSL")
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3
    assert "pykraft supports TLSv1.2 and TLSv1.3" in _refused(
        {**base, "ssl.enabled.protocols": "TLSv1.1,TLSv1.2"})
    # Java's names are mapped to OpenSSL's
    context = server_context({**base, "ssl.cipher.suites":
                              "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_AES_128_GCM_SHA256"
                              }.get, "SSL")
    tls12 = [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES128-GCM-SHA256"]
    assert "unknown or unavailable cipher suite TLS_NOT_A_SUITE" in _refused(
        {**base, "ssl.cipher.suites": "TLS_NOT_A_SUITE"})
    # a client whose ssl.protocol is TLSv1.2 does not use TLSv1.3 (Kafka's documentation)
    client = client_context({"ssl.protocol": "TLSv1.2", "ssl.truststore.type": "PEM",
                             "ssl.truststore.location": str(files.ca)}.get, "SSL")
    assert client.maximum_version == ssl.TLSVersion.TLSv1_2


def test_client_side_host_name_check(node: Identity, tmp_path: Path) -> None:
    files = node.write_pem(tmp_path / "node")
    trust = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(files.ca)}
    assert client_context(trust.get, "SSL").check_hostname  # https: Kafka's default
    off = {**trust, "ssl.endpoint.identification.algorithm": ""}
    assert not client_context(off.get, "SSL").check_hostname
    assert not client_hostname_check(off.get, "SSL")
    assert "supports https or an empty value" in _refused(
        {**trust, "ssl.endpoint.identification.algorithm": "ldaps"}, client=True)


# -- principals ------------------------------------------------------------------------

# Kafka's own examples (SslPrincipalMapperTest, the security documentation)
_RULES = ", ".join([
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
    "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
    "DEFAULT",
])


@pytest.mark.parametrize(("name", "principal"), [
    ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
    ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
    ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
    ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
])
def test_principal_mapping_rules(name: str, principal: str) -> None:
    assert PrincipalMapper.parse(_RULES).name(name) == principal


def test_an_escaped_comma_in_a_rule() -> None:
    mapper = PrincipalMapper.parse(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


@pytest.mark.parametrize(("rules", "parsed"), [
    ("", "[]"),
    ("DEFAULT", "[DEFAULT]"),
    ("RULE://", "[RULE:/]"),
    ("RULE:/.*/L", "[RULE:/.*/L]"),
    ("  RULE:   /     / ,  DEFAULT  ", "[RULE:   /     , DEFAULT]"),
    ("  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
     "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]"),
    (",,RULE://,,,DEFAULT,,", "[RULE:/, DEFAULT]"),
    ("RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/", "[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]"),
])
def test_rule_splitting(rules: str, parsed: str) -> None:
    assert str(PrincipalMapper.parse(rules)) == parsed


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_invalid_rules(rules: str, node: Identity, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        PrincipalMapper.parse(rules)
    files = node.write_pem(tmp_path / "node")
    assert "for configuration ssl.principal.mapping.rules: Invalid rule" in _refused(
        {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(files.keystore),
         "ssl.principal.mapping.rules": rules})


def test_no_matching_rule() -> None:
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=x"):
        PrincipalMapper.parse("RULE:^CN=(.*),OU=eng$/$1/").name("CN=x")


def test_x500_name_as_java_prints_it(ca: CertificateAuthority) -> None:
    identity = ca.issue("alice", organizational_unit="eng")
    assert x500_name(identity.certificate) == "CN=alice,OU=eng,O=pykraft,C=US"
    # a type Java has no keyword for: its OID and the hex of the value's DER encoding
    name = x509.Name([x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b.c"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "a, b")])
    certificate = (x509.CertificateBuilder().subject_name(name)
                   .issuer_name(ca.certificate.subject).public_key(ca.key.public_key())
                   .serial_number(1).not_valid_before(ca.certificate.not_valid_before_utc)
                   .not_valid_after(ca.certificate.not_valid_after_utc)
                   .sign(ca.key, hashes.SHA256()))
    assert x500_name(certificate) == r"CN=a\, b,1.2.840.113549.1.9.1=#16056140622e63"


# -- the node's own connections (net/connect.py) --------------------------------------------


def test_client_security_for_a_listener(node: Identity, tmp_path: Path) -> None:
    files = node.write_pem(tmp_path / "node")
    protocols = {"PLAIN": "PLAINTEXT", "INTERNAL": "SSL", "SASL": "SASL_PLAINTEXT"}
    values = {"listener.name.internal.ssl.truststore.type": "PEM",
              "listener.name.internal.ssl.truststore.location": str(files.ca),
              "listener.name.internal.ssl.endpoint.identification.algorithm": ""}
    assert ClientSecurity.for_listener(values.get, protocols, "PLAIN", "inter.broker") is None
    security = ClientSecurity.for_listener(values.get, protocols, "INTERNAL", "inter.broker")
    assert security is not None and security.security_protocol == "SSL"
    assert security.ssl_context is not None and not security.check_hostname
    assert security.sasl is None
    with pytest.raises(ClientSecurityError, match="sasl.mechanism.controller.protocol"):
        ClientSecurity.for_listener(values.get, protocols, "SASL", "controller")
    with pytest.raises(SslConfigError, match="ssl.truststore.location"):
        ClientSecurity.for_listener({"ssl.truststore.type": "PEM",
                                     "ssl.truststore.location": str(tmp_path / "none")}.get,
                                    protocols, "INTERNAL", "inter.broker")


def test_sasl_ssl_takes_only_the_prefixed_client_auth(node: Identity, tmp_path: Path) -> None:
    """KIP-684: the broker-wide ssl.client.auth is for SSL listeners; a SASL_SSL listener
    asks for certificates only when its own prefixed key says so."""
    files = node.write_pem(tmp_path / "node")
    values = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(files.keystore),
              "ssl.truststore.type": "PEM", "ssl.truststore.location": str(files.ca),
              "ssl.client.auth": "required"}
    assert server_context(values.get, "SSL").verify_mode == ssl.CERT_REQUIRED
    assert server_context(values.get, "SASL_SSL", sasl=True).verify_mode == ssl.CERT_NONE
    values["listener.name.sasl_ssl.ssl.client.auth"] = "required"
    assert server_context(values.get, "SASL_SSL", sasl=True).verify_mode == ssl.CERT_REQUIRED


def test_without_memory_files_the_key_goes_through_a_private_temporary_file(
        node: Identity, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pykraft.net.tls as tls

    def no_memfd(name: str, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(tls.os, "memfd_create", no_memfd)
    monkeypatch.setattr(tls.tempfile, "tempdir", str(tmp_path))
    files = node.write_pem(tmp_path / "node")
    server_context({"ssl.keystore.type": "PEM",
                    "ssl.keystore.location": str(files.keystore)}.get, "SSL")
    assert not list(tmp_path.glob("pykraft-tls-*"))  # gone once loaded
