"""What a peer can make the listeners hold: request bytes and connections (sans-I/O).

`MemoryPool` is Kafka's SimpleMemoryPool as its SocketServer uses it (non-strict): a frame's
whole size is reserved before its body is read, and a reservation succeeds whenever any memory
is left, so the pool may go negative by one request and a request as large as the pool is
never starved; when nothing is left, connections are not read until a request finishes. One
addition: a small slice of the pool is kept for small requests, so that large half-sent
requests (a slow or hostile client's) cannot stop ApiVersions, metadata, heartbeats or a
follower's fetches. Everything reserved stays under `size + largest request - 1`.

`ConnectionQuotas` is Kafka's ConnectionQuotas without the rate quotas: `max.connections` for
the node, `listener.name.<name>.max.connections` per listener, `max.connections.per.ip` and
its overrides per client address; the inter-broker listener is exempt from the node-wide cap
when there are other listeners (which then give up their least recently used connections).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

UNLIMITED: Final = 2**31 - 1  # Kafka's Int.MaxValue default of the connection caps

# Frames of at most this size may use the reserve: every request a client needs to stay
# alive (ApiVersions, Metadata, heartbeats, commits, a follower's fetch) is far smaller.
SMALL_REQUEST_BYTES: Final = 64 * 1024
RESERVE_BYTES_MAX: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Reservation:
    size: int
    from_reserve: bool = False


class MemoryPool:
    """Bytes reserved for requests being read or handled (`queued.max.request.bytes`)."""

    def __init__(self, size_bytes: int) -> None:
        """`size_bytes` <= 0: unbounded, as Kafka's MemoryPool.NONE."""
        self.size_bytes = size_bytes
        self.bounded = size_bytes > 0
        # an eighth of a small pool, at most 1 MiB of a large one: the rest serves any request
        self.reserve_bytes = min(RESERVE_BYTES_MAX, size_bytes // 8) if self.bounded else 0
        self.available = size_bytes - self.reserve_bytes
        self.reserve_available = self.reserve_bytes

    @property
    def reserved_bytes(self) -> int:
        """What is reserved now (in the main pool and the reserve)."""
        if not self.bounded:
            return 0
        return self.size_bytes - self.available - self.reserve_available

    def is_out_of_memory(self) -> bool:
        return self.bounded and self.available <= 0

    def try_allocate(self, size: int) -> Reservation | None:
        """Reserve `size` bytes (> 0), or None when the pool is exhausted for a request of
        that size; the caller waits for a `release` and tries again."""
        if size <= 0:
            raise ValueError(f"requested size {size} <= 0")
        if not self.bounded:
            return Reservation(size)
        if self.available >= 1:  # non-strict, as Kafka's SocketServer pool: may go negative
            self.available -= size
            return Reservation(size)
        if size <= SMALL_REQUEST_BYTES and self.reserve_available >= size:
            self.reserve_available -= size
            return Reservation(size, from_reserve=True)
        return None

    def release(self, reservation: Reservation) -> None:
        if not self.bounded:
            return
        if reservation.from_reserve:
            self.reserve_available += reservation.size
        else:
            self.available += reservation.size


def normalize_address(host: str) -> str:
    """One spelling per address: IPv4-mapped IPv6 as IPv4, IPv6 compressed; other text as is."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def parse_per_ip_overrides(value: str, key: str = "max.connections.per.ip.overrides",
                           ) -> dict[str, int]:
    """`host:count,host:count` (Kafka's format; an IPv6 host may be bracketed) -> {host: count}.
    ValueError names the key and the bad item."""
    overrides: dict[str, int] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"Invalid value {value} for configuration {key}: "
                             f"expected host:count, got {item!r}")
        number = int(count)
        if number > UNLIMITED:
            raise ValueError(f"Invalid value {value} for configuration {key}: "
                             f"{number} is not a 32-bit int")
        overrides[host] = number
    return overrides


class TooManyConnections(Exception):
    """A connection refused at accept; the message says which cap."""


@dataclass
class ConnectionQuotas:
    """Connection counts of one group of listeners (a combined node's broker listeners and
    controller listeners are two groups, as Kafka runs two SocketServers)."""

    max_connections: int = UNLIMITED
    max_connections_per_ip: int = UNLIMITED
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)  # normalized addresses
    listener_max: Mapping[str, int] = field(default_factory=dict)
    inter_broker_listener: str | None = None
    total: int = 0
    by_ip: dict[str, int] = field(default_factory=dict)
    by_listener: dict[str, int] = field(default_factory=dict)

    def add_listener(self, name: str) -> None:
        self.by_listener.setdefault(name, 0)

    def is_protected(self, listener: str) -> bool:
        """Kafka's protected listener: the inter-broker one, when the group has others, is
        not held to max.connections (the others make room for it)."""
        return listener == self.inter_broker_listener and len(self.by_listener) > 1

    def max_for_ip(self, address: str) -> int:
        return self.per_ip_overrides.get(address, self.max_connections_per_ip)

    def accept(self, listener: str, address: str) -> None:
        """Count a new connection, or raise TooManyConnections (then nothing is counted).
        Kafka's acceptor waits for a slot under the listener or node cap; we refuse."""
        listener_count = self.by_listener.get(listener, 0)
        listener_max = self.listener_max.get(listener, UNLIMITED)
        if listener_count >= listener_max:
            raise TooManyConnections(f"listener {listener} has the configured maximum of "
                                     f"{listener_max} connections")
        if not self.is_protected(listener) and self.total >= self.max_connections:
            raise TooManyConnections(f"the node has the configured maximum of "
                                     f"{self.max_connections} connections (max.connections)")
        ip_count = self.by_ip.get(address, 0)
        ip_max = self.max_for_ip(address)
        if ip_count >= ip_max:
            raise TooManyConnections(f"address {address} already has the configured maximum "
                                     f"of {ip_max} connections")
        self.by_ip[address] = ip_count + 1
        self.by_listener[listener] = listener_count + 1
        self.total += 1

    def release(self, listener: str, address: str) -> None:
        count = self.by_ip.get(address, 0)
        if count <= 0:
            raise ValueError(f"no connection counted for {address}")
        if count == 1:
            del self.by_ip[address]
        else:
            self.by_ip[address] = count - 1
        self.by_listener[listener] -= 1
        self.total -= 1

    def max_connections_exceeded(self, listener: str) -> bool:
        """Whether `listener` should close one of its connections: the protected listener
        took the node over max.connections."""
        return self.total > self.max_connections and not self.is_protected(listener)


def quotas_for(listeners: Iterable[str], *, max_connections: int, max_connections_per_ip: int,
               per_ip_overrides: Mapping[str, int], listener_max: Mapping[str, int],
               inter_broker_listener: str | None) -> ConnectionQuotas:
    quotas = ConnectionQuotas(
        max_connections=max_connections, max_connections_per_ip=max_connections_per_ip,
        per_ip_overrides={normalize_address(h): n for h, n in per_ip_overrides.items()},
        listener_max=dict(listener_max), inter_broker_listener=inter_broker_listener)
    for name in listeners:
        quotas.add_listener(name)
    return quotas


QUEUED_MAX_REQUEST_BYTES_DEFAULT: Final = 104857600


def queued_max_request_bytes(given: str | None, socket_request_max_bytes: int) -> int:
    """The pool's size: `queued.max.request.bytes` as given (<= 0: unbounded, as Kafka), and
    when not given 100 MiB, or socket.request.max.bytes if that is larger (Kafka's default is
    unbounded; ours bounds, and a pool must hold the largest request)."""
    if given is not None and given.strip():
        return int(given)
    return max(QUEUED_MAX_REQUEST_BYTES_DEFAULT, socket_request_max_bytes)
