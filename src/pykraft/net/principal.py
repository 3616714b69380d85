"""Who a connection speaks for: Kafka's KafkaPrincipal ("User:alice").

A PLAINTEXT connection, and an SSL one without a client certificate, is `User:ANONYMOUS`; an
SSL connection with a verified client certificate is the user its distinguished name maps to
(`ssl.principal.mapping.rules`); a SASL connection is the user it authenticated as. ACLs and
`super.users` name principals in this `Type:name` form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["ANONYMOUS", "USER_TYPE", "KafkaPrincipal"]

USER_TYPE: Final = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """`Type:name` (the name may hold colons); ValueError without a type."""
        kind, colon, name = text.partition(":")
        if not colon or not kind:
            raise ValueError(f"expected a principal of the form Type:name, got {text!r}")
        return cls(kind, name)

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)


ANONYMOUS: Final = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
