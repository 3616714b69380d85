"""The request memory pool and the connection quotas, alone (net/limits.py)."""

from __future__ import annotations

import pytest

from pykraft.net.limits import (
    SMALL_REQUEST_BYTES,
    ConnectionQuotas,
    MemoryPool,
    Reservation,
    TooManyConnections,
    normalize_address,
    parse_per_ip_overrides,
    queued_max_request_bytes,
    quotas_for,
)

MIB = 1024 * 1024


def test_pool_is_non_strict_as_kafkas_socket_server_pool() -> None:
    pool = MemoryPool(64 * MIB)
    main = 64 * MIB - pool.reserve_bytes
    assert pool.reserve_bytes == MIB  # an eighth of the pool, at most 1 MiB
    first = pool.try_allocate(50 * MIB)
    assert first is not None and not first.from_reserve
    # memory is left (13 MiB), so a request larger than what is left still gets it: the pool
    # goes negative by at most one request, and a large request is never starved
    second = pool.try_allocate(50 * MIB)
    assert second is not None and pool.available == main - 100 * MIB < 0
    assert pool.is_out_of_memory()
    assert pool.try_allocate(SMALL_REQUEST_BYTES + 1) is None
    assert pool.reserved_bytes == 100 * MIB
    pool.release(first)
    assert pool.available == main - 50 * MIB > 0 and not pool.is_out_of_memory()
    pool.release(second)
    assert pool.available == main and pool.reserved_bytes == 0


def test_a_request_as_large_as_the_pool_is_granted_whenever_any_memory_is_left() -> None:
    pool = MemoryPool(8 * MIB)
    small = pool.try_allocate(1)
    assert small is not None
    whole = pool.try_allocate(8 * MIB)  # 1 byte short of it is left: still granted
    assert whole is not None
    assert pool.try_allocate(1) is not None and pool.reserved_bytes == 8 * MIB + 2


def test_reserve_serves_small_requests_when_large_ones_exhausted_the_pool() -> None:
    pool = MemoryPool(16 * MIB)
    hog = pool.try_allocate(16 * MIB)
    assert hog is not None and pool.is_out_of_memory()
    assert pool.try_allocate(SMALL_REQUEST_BYTES + 1) is None  # a large one waits
    grants = []
    while (grant := pool.try_allocate(SMALL_REQUEST_BYTES)) is not None:
        assert grant.from_reserve
        grants.append(grant)
    assert len(grants) == MIB // SMALL_REQUEST_BYTES  # the reserve is bounded too
    assert pool.try_allocate(1) is None
    # everything reserved stays under the pool plus one request
    assert pool.reserved_bytes <= 16 * MIB + 16 * MIB - 1
    pool.release(grants[0])
    assert pool.try_allocate(100) is not None
    pool.release(hog)
    assert not pool.is_out_of_memory()


def test_unbounded_pool_always_grants() -> None:
    pool = MemoryPool(-1)
    assert not pool.bounded and pool.try_allocate(1 << 40) is not None
    assert not pool.is_out_of_memory()
    with pytest.raises(ValueError):
        pool.try_allocate(0)


def test_pool_size_defaults_to_a_bound() -> None:
    assert queued_max_request_bytes(None, 104857600) == 104857600
    assert queued_max_request_bytes(None, 200 * MIB) == 200 * MIB  # holds the largest request
    assert queued_max_request_bytes("-1", 104857600) == -1  # Kafka's unbounded, if asked
    assert queued_max_request_bytes("5000000", 1000) == 5000000


def test_per_ip_cap_and_override() -> None:
    quotas = quotas_for(["PLAINTEXT"], max_connections=100, max_connections_per_ip=2,
                        per_ip_overrides={"127.0.0.2": 3, "::ffff:127.0.0.3": 0},
                        listener_max={}, inter_broker_listener=None)
    for _ in range(2):
        quotas.accept("PLAINTEXT", "127.0.0.1")
    with pytest.raises(TooManyConnections, match="127.0.0.1 already has .* maximum of 2"):
        quotas.accept("PLAINTEXT", "127.0.0.1")
    for _ in range(3):
        quotas.accept("PLAINTEXT", "127.0.0.2")
    with pytest.raises(TooManyConnections):
        quotas.accept("PLAINTEXT", "127.0.0.2")
    with pytest.raises(TooManyConnections):  # the override was written IPv4-mapped
        quotas.accept("PLAINTEXT", "127.0.0.3")
    assert quotas.total == 5 and quotas.by_ip == {"127.0.0.1": 2, "127.0.0.2": 3}
    quotas.release("PLAINTEXT", "127.0.0.1")
    quotas.accept("PLAINTEXT", "127.0.0.1")
    with pytest.raises(ValueError):
        quotas.release("PLAINTEXT", "10.0.0.1")


def test_node_and_listener_caps_and_the_protected_inter_broker_listener() -> None:
    quotas = quotas_for(["CLIENTS", "REPLICATION"], max_connections=3,
                        max_connections_per_ip=100, per_ip_overrides={},
                        listener_max={"CLIENTS": 2}, inter_broker_listener="REPLICATION")
    quotas.accept("CLIENTS", "10.0.0.1")
    quotas.accept("CLIENTS", "10.0.0.2")
    with pytest.raises(TooManyConnections, match="listener CLIENTS"):
        quotas.accept("CLIENTS", "10.0.0.3")
    quotas.accept("REPLICATION", "10.0.0.4")
    assert quotas.total == 3
    # the inter-broker listener is not held to max.connections; the others then give way
    quotas.accept("REPLICATION", "10.0.0.5")
    assert quotas.total == 4
    assert quotas.max_connections_exceeded("CLIENTS")
    assert not quotas.max_connections_exceeded("REPLICATION")
    quotas.release("CLIENTS", "10.0.0.1")
    assert not quotas.max_connections_exceeded("CLIENTS")
    with pytest.raises(TooManyConnections, match="max.connections"):
        quotas.accept("CLIENTS", "10.0.0.6")


def test_a_lone_inter_broker_listener_is_not_protected() -> None:
    quotas = quotas_for(["PLAINTEXT"], max_connections=1, max_connections_per_ip=100,
                        per_ip_overrides={}, listener_max={}, inter_broker_listener="PLAINTEXT")
    quotas.accept("PLAINTEXT", "10.0.0.1")
    with pytest.raises(TooManyConnections):
        quotas.accept("PLAINTEXT", "10.0.0.2")
    assert ConnectionQuotas().max_connections == 2**31 - 1


def test_addresses_and_overrides_parse() -> None:
    assert normalize_address("::ffff:10.1.2.3") == "10.1.2.3"
    assert normalize_address("0:0::1") == "::1"
    assert normalize_address("fe80::1%eth0") == "fe80::1"
    assert normalize_address("localhost") == "localhost"
    assert parse_per_ip_overrides("") == {}
    assert parse_per_ip_overrides(" hostName:100, 127.0.0.1:200,[::1]:5") == {
        "hostName": 100, "127.0.0.1": 200, "::1": 5}
    for bad in ("127.0.0.1", "127.0.0.1:x", ":5", "a:-1", "a:99999999999"):
        with pytest.raises(ValueError, match="max.connections.per.ip.overrides"):
            parse_per_ip_overrides(bad)


class _Waiter:
    def __init__(self, limits: object) -> None:
        self.limits = limits
        self.granted: list[Reservation] = []

    def memory_granted(self, reservation: Reservation) -> None:
        self.granted.append(reservation)


def test_waiting_connections_get_memory_in_arrival_order() -> None:
    from pykraft.net.server import NetworkLimits

    limits = NetworkLimits(MemoryPool(8 * MIB))
    hog = limits.pool.try_allocate(8 * MIB)
    assert hog is not None
    large, small, later = _Waiter(limits), _Waiter(limits), _Waiter(limits)
    assert limits.reserve(large, 4 * MIB) is None  # type: ignore[arg-type]
    # a small frame behind it queues too, but the reserve lets it through at once
    assert limits.reserve(small, 100) is None  # type: ignore[arg-type]
    limits.grant_waiting()
    assert small.granted and small.granted[0].from_reserve and not large.granted
    assert limits.reserve(later, 2 * MIB) is None  # type: ignore[arg-type]
    limits.release(hog)
    # memory is back: the first in line gets it, and the next too while any is left
    assert [r.size for r in large.granted] == [4 * MIB]
    assert [r.size for r in later.granted] == [2 * MIB]
    assert limits.reserve(_Waiter(limits), MIB) is not None  # type: ignore[arg-type]
