"""The node's own outgoing connections, secured as the listener they reach asks.

Kafka's brokers reach each other over the inter-broker listener (`inter.broker.listener.name`,
else the listener named after `security.inter.broker.protocol`) and the controllers over the
first of `controller.listener.names`, each with the security protocol
`listener.security.protocol.map` gives that listener and the client side of its listener-
prefixed ssl.* keys (`listener.name.<listener>.ssl.truststore.location` ...). `ClientSecurity`
is that choice made once at start; `open_connection` opens a TCP connection with it: TLS for
SSL and SASL_SSL (the peer's certificate checked against the trust store, its host name when
ssl.endpoint.identification.algorithm is https), then SASL for SASL_PLAINTEXT and SASL_SSL
(net/sasl_client.py).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from pykraft.net.sasl_client import ClientSasl, authenticate, client_sasl_from_config
from pykraft.net.tls import client_context

__all__ = ["ClientSecurity", "ClientSecurityError", "open_connection"]

Get = Callable[[str], str | None]

# a peer that accepts the TCP connection but stalls the handshake holds a connection attempt
# no longer than this (callers have their own request timeouts on top)
TLS_HANDSHAKE_TIMEOUT_S: Final = 10.0
_TLS_PROTOCOLS: Final = ("SSL", "SASL_SSL")
_SASL_PROTOCOLS: Final = ("SASL_PLAINTEXT", "SASL_SSL")


class ClientSecurityError(ValueError):
    """The node cannot secure its own connections as configured; the message says why."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    security_protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    ssl_context: ssl.SSLContext | None = None
    sasl: ClientSasl | None = None

    @property
    def check_hostname(self) -> bool:
        """Whether the peer's certificate must name the host connected to (https)."""
        return self.ssl_context is not None and self.ssl_context.check_hostname

    @classmethod
    def for_listener(cls, get: Get, protocols: Mapping[str, str], listener: str,
                     purpose: str) -> ClientSecurity | None:
        """How the node reaches `listener` on other nodes (None: plaintext). `purpose` is
        "inter.broker" or "controller" (which sasl.mechanism.*.protocol applies).
        ClientSecurityError, or tls.SslConfigError naming the key, when it cannot."""
        protocol = protocols.get(listener.upper(), "PLAINTEXT")
        if protocol == "PLAINTEXT":
            return None
        if protocol not in (*_TLS_PROTOCOLS, *_SASL_PROTOCOLS):
            raise ClientSecurityError(f"listener {listener}: unknown security protocol "
                                      f"{protocol}")
        context = client_context(get, listener) if protocol in _TLS_PROTOCOLS else None
        sasl = None
        if protocol in _SASL_PROTOCOLS:
            try:
                sasl = client_sasl_from_config(get, listener, purpose)
            except ValueError as error:
                raise ClientSecurityError(str(error)) from None
        return cls(protocol, context, sasl)


async def open_connection(
    host: str, port: int, security: ClientSecurity | None, *,
    handshake_timeout_s: float = TLS_HANDSHAKE_TIMEOUT_S,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to host:port, with TLS and SASL done when `security` asks for them.
    Raises OSError (ssl.SSLError for a refused handshake, e.g. a certificate that fails
    verification) or sasl_client.SaslAuthenticationError (a ConnectionError); nothing is
    left open then."""
    if security is None or security.security_protocol == "PLAINTEXT":
        return await asyncio.open_connection(host, port)
    if security.ssl_context is not None:
        reader, writer = await asyncio.open_connection(
            host, port, ssl=security.ssl_context, server_hostname=host,
            ssl_handshake_timeout=handshake_timeout_s)
    else:
        reader, writer = await asyncio.open_connection(host, port)
    if security.sasl is not None:
        try:
            await authenticate(reader, writer, security.sasl)
        except BaseException:
            writer.close()
            raise
    return reader, writer
