"""SCRAM credentials (RFC 5802, RFC 7677), as Kafka's ScramFormatter derives them.

What is stored (UserScramCredentialRecord, `ScramCredential`) is the salt, the iteration
count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
HMAC(SaltedPassword, "Server Key"): enough to check a client's proof and to prove the server,
never enough to log in as the user.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Final

from pykraft.metadata.registrations import ScramCredential

__all__ = ["ITERATIONS_MAX", "ITERATIONS_MIN", "MECHANISMS", "SCRAM_SHA_256", "SCRAM_SHA_512",
           "Mechanism", "credential", "mechanism_named", "mechanism_of"]

ITERATIONS_MIN: Final = 4096  # Kafka's ScramMechanism minimum
ITERATIONS_MAX: Final = 16384  # Kafka refuses more (AlterUserScramCredentials, KIP-554)
SALT_BYTES: Final = 32


class Mechanism:
    """One SCRAM mechanism: its Kafka name, its code in the metadata records and
    AlterUserScramCredentials, and its hash."""

    def __init__(self, name: str, code: int, hash_name: str) -> None:
        self.name = name
        self.code = code
        self.hash_name = hash_name

    def __repr__(self) -> str:
        return self.name

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: bytes, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password, salt, iterations)

    def client_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Client Key")

    def stored_key(self, client_key: bytes) -> bytes:
        return self.digest(client_key)

    def server_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Server Key")


SCRAM_SHA_256: Final = Mechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512: Final = Mechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS: Final = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
_BY_CODE: Final = {m.code: m for m in MECHANISMS.values()}


def mechanism_named(name: str) -> Mechanism | None:
    return MECHANISMS.get(name.upper())


def mechanism_of(code: int) -> Mechanism | None:
    return _BY_CODE.get(code)


def credential(mechanism: Mechanism, password: str, *, iterations: int = ITERATIONS_MIN,
               salt: bytes | None = None) -> ScramCredential:
    """The stored form of `password` (a fresh random salt unless one is given)."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    salted = mechanism.salted_password(password.encode(), salt, iterations)
    return ScramCredential(salt=salt,
                           stored_key=mechanism.stored_key(mechanism.client_key(salted)),
                           server_key=mechanism.server_key(salted), iterations=iterations)
