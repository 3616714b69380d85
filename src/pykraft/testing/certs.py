"""A throwaway certificate authority and the certificates tests (and examples) need for TLS.

    ca = CertificateAuthority.create("pykraft test CA")
    node = ca.issue("node-1", hosts=("localhost", "127.0.0.1"))
    files = node.write_pem(tmp_path / "node-1")        # key + chain, cert, key, CA files
    node.write_pkcs12(tmp_path / "node-1.p12", "secret")
    ca.write_pem(tmp_path / "ca.pem")                   # a PEM trust store

Keys are EC P-256: quick to make, and every client (librdkafka, Python's ssl) takes them.
Nothing here is fit for production: the CA's key lives in memory and certificates are made
for the tests' lifetime.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "Identity", "PemFiles"]

_VALIDITY = datetime.timedelta(days=2)


def _pem_key(key: ec.EllipticCurvePrivateKey, password: str | None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             encryption)


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str, organizational_unit: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
             x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pykraft")]
    if organizational_unit:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, organizational_unit))
    parts.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(parts)


@dataclass(frozen=True, slots=True)
class PemFiles:
    keystore: Path  # key and chain in one file (Kafka's ssl.keystore.type=PEM location)
    certificate: Path  # the chain alone (leaf first), for clients that take two files
    key: Path  # the key alone
    ca: Path  # the issuing CA's certificate (a PEM trust store)


@dataclass(frozen=True, slots=True)
class Identity:
    """A key and the certificate the CA issued for it."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    ca_certificate: x509.Certificate

    def key_pem(self, password: str | None = None) -> bytes:
        return _pem_key(self.key, password)

    def chain_pem(self) -> bytes:
        return _pem_cert(self.certificate) + _pem_cert(self.ca_certificate)

    def write_pem(self, directory: Path, password: str | None = None) -> PemFiles:
        """keystore.pem (key then chain), cert.pem, key.pem and ca.pem in `directory`; the
        key encrypted (PKCS#8) when a password is given."""
        directory.mkdir(parents=True, exist_ok=True)
        key = self.key_pem(password)
        files = PemFiles(directory / "keystore.pem", directory / "cert.pem",
                         directory / "key.pem", directory / "ca.pem")
        files.keystore.write_bytes(key + self.chain_pem())
        files.certificate.write_bytes(self.chain_pem())
        files.key.write_bytes(key)
        files.ca.write_bytes(_pem_cert(self.ca_certificate))
        for path in (files.keystore, files.key):
            path.chmod(0o600)
        return files

    def write_pkcs12(self, path: Path, password: str) -> Path:
        """A PKCS12 key store (key, certificate, the CA as its chain)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            b"pykraft", self.key, self.certificate, [self.ca_certificate],
            serialization.BestAvailableEncryption(password.encode())))
        path.chmod(0o600)
        return path


class CertificateAuthority:
    def __init__(self, key: ec.EllipticCurvePrivateKey, certificate: x509.Certificate) -> None:
        self.key = key
        self.certificate = certificate

    @classmethod
    def create(cls, common_name: str = "pykraft test CA") -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(common_name)
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
        return cls(key, certificate)

    def pem(self) -> bytes:
        return _pem_cert(self.certificate)

    def write_pem(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.pem())
        return path

    def write_pkcs12_truststore(self, path: Path, password: str) -> Path:
        """The CA's certificate alone in a PKCS12 file (a trust store)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            None, None, None, [self.certificate],
            serialization.BestAvailableEncryption(password.encode())))
        return path

    def issue(self, common_name: str, *, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
              organizational_unit: str | None = None,
              expired: bool = False) -> Identity:
        """A certificate for `common_name`, good as a server's (its host names and addresses
        in subjectAltName) and as a client's."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start = now - (3 * _VALIDITY if expired else datetime.timedelta(minutes=5))
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizational_unit))
            .issuer_name(self.certificate.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self.key.public_key()), critical=False))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return Identity(key, builder.sign(self.key, hashes.SHA256()), self.certificate)
