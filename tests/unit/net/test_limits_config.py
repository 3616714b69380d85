"""The socket server's limit keys: validated as KafkaConfig validates them, and turned into
one group of limits per side of the node."""

from __future__ import annotations

import pytest

from pykraft.net.server import NetworkLimits
from pykraft.server.config import ConfigError, ServerConfig, single_node_defaults

MIB = 1024 * 1024


def _config(**values: str) -> ServerConfig:
    return ServerConfig({**single_node_defaults("/data"), **values})


@pytest.mark.parametrize(("values", "message"), [
    ({"queued.max.request.bytes": "1000"},
     "queued.max.request.bytes (1000) must be larger or equal to socket.request.max.bytes"),
    ({"queued.max.request.bytes": "many"}, "queued.max.request.bytes"),
    ({"max.connections": "-1"}, "max.connections: Value must be at least 0"),
    ({"max.connections.per.ip": "2147483648"}, "max.connections.per.ip"),
    ({"max.connections.per.ip": "0"},
     "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides"),
    ({"max.connections.per.ip.overrides": "127.0.0.1=5"}, "expected host:count"),
    ({"listener.name.plaintext.max.connections": "-2"},
     "listener.name.plaintext.max.connections: Value must be at least 0"),
    ({"listener.name.plaintext.max.connections": "x"},
     "listener.name.plaintext.max.connections"),
    ({"connections.max.idle.ms": "100"}, "should always be less than connections.max.idle.ms"),
    ({"connections.max.idle.ms": "soon"}, "connections.max.idle.ms"),
])
def test_invalid_values_stop_start_up_naming_the_key(values: dict[str, str],
                                                     message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")
                       .replace(")", r"\)")):
        _config(**values)


def test_valid_values_are_accepted_and_known() -> None:
    config = _config(**{"queued.max.request.bytes": "-1", "max.connections": "0",
                        "max.connections.per.ip": "0",
                        "max.connections.per.ip.overrides": "127.0.0.1:10",
                        "listener.name.plaintext.max.connections": "7",
                        "connections.max.idle.ms": "-1"})
    assert config.warnings == []
    _config(**{"socket.request.max.bytes": "1000", "queued.max.request.bytes": "1000",
               "connections.max.idle.ms": "101"})


def test_each_side_of_a_combined_node_gets_its_own_limits() -> None:
    config = _config(**{"max.connections": "5", "max.connections.per.ip": "0",
                        "max.connections.per.ip.overrides": "127.0.0.1:3,[::1]:4",
                        "listener.name.plaintext.max.connections": "2",
                        "connections.max.idle.ms": "1000"})
    broker = NetworkLimits.from_config(config.get, ["PLAINTEXT"], "PLAINTEXT")
    assert broker.pool.size_bytes == 104857600  # bounded by default, unlike Kafka's -1
    assert broker.connections_max_idle_ms == 1000
    assert broker.quotas.max_connections == 5
    assert broker.quotas.listener_max == {"PLAINTEXT": 2}
    assert broker.quotas.per_ip_overrides == {"127.0.0.1": 3, "::1": 4}
    assert broker.quotas.max_for_ip("10.0.0.1") == 0
    assert not broker.quotas.is_protected("PLAINTEXT")  # alone in its group
    controller = NetworkLimits.from_config(config.get, ["CONTROLLER"], None)
    assert controller.pool is not broker.pool and controller.quotas is not broker.quotas
    assert controller.quotas.listener_max == {}
    unbounded = _config(**{"queued.max.request.bytes": "-1",
                           "socket.request.max.bytes": str(200 * MIB)})
    assert not NetworkLimits.from_config(unbounded.get, ["PLAINTEXT"], None).pool.bounded
    larger = _config(**{"socket.request.max.bytes": str(200 * MIB)})
    assert NetworkLimits.from_config(larger.get, ["PLAINTEXT"], None).pool.size_bytes == \
        200 * MIB


def test_an_override_host_that_does_not_resolve_is_an_error() -> None:
    config = _config(**{"max.connections.per.ip.overrides": "no-such-host.invalid:3"})
    with pytest.raises(ValueError, match="cannot resolve host no-such-host.invalid"):
        NetworkLimits.from_config(config.get, ["PLAINTEXT"], None)
