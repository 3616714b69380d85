"""Ports for test clusters: distinct, and outside the range the kernel hands out itself."""

from __future__ import annotations

import socket

from pykraft.testing.ports import _bindable, _ephemeral_range, free_port, free_ports


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = free_ports(200)
    assert len(set(ports)) == 200
    low, _ = _ephemeral_range()
    assert all(1024 <= port < low for port in ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))


def test_a_port_someone_listens_on_is_not_bindable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert not _bindable(sock.getsockname()[1])
