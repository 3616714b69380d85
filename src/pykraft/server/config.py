"""Server configuration: Kafka's `server.properties` keys, defaults and validation.

`ServerConfig.load(path, overrides)` reads a Java-properties file (or nothing: the
single-node defaults), applies `--override key=value` pairs, checks every known key's value
and stops with a `ConfigError` naming the key when one is invalid. Unknown keys are kept (the
log and topic defaults are resolved by `storage.log_config`) and reported as warnings.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pykraft.storage import log_config


class ConfigError(ValueError):
    """An invalid configuration; the message names the key."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    listener_name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class ServerKey:
    name: str
    type: str  # int, long, double, boolean, string, list, password
    default: str | None
    check: Callable[[str], bool] | None = None
    expect: str = ""


def _at_least(minimum: int) -> Callable[[str], bool]:
    return lambda value: int(value) >= minimum


_ROLES: Final = {"broker", "controller"}

SERVER_KEYS: Final[dict[str, ServerKey]] = {
    key.name: key
    for key in (
        ServerKey("node.id", "int", None, _at_least(0), "a non-negative integer"),
        ServerKey(
            "process.roles",
            "list",
            None,
            lambda v: {r.strip() for r in v.split(",") if r.strip()} <= _ROLES
            and bool(v.strip()),
            "a subset of broker,controller",
        ),
        ServerKey("listeners", "list", "PLAINTEXT://:9092"),
        ServerKey("advertised.listeners", "list", None),
        ServerKey("controller.listener.names", "list", None),
        ServerKey(
            "listener.security.protocol.map",
            "list",
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
            "SASL_SSL:SASL_SSL",
        ),
        ServerKey("inter.broker.listener.name", "string", None),
        ServerKey("controller.quorum.voters", "list", ""),
        ServerKey("controller.quorum.bootstrap.servers", "list", ""),
        ServerKey("controller.quorum.election.timeout.ms", "int", "1000", _at_least(1)),
        ServerKey("controller.quorum.fetch.timeout.ms", "int", "2000", _at_least(1)),
        ServerKey("log.dirs", "list", None),
        ServerKey("log.dir", "string", "/tmp/kafka-logs"),
        ServerKey("metadata.log.dir", "string", None),
        ServerKey("num.partitions", "int", "1", _at_least(1)),
        ServerKey("default.replication.factor", "int", "1", _at_least(1)),
        ServerKey("auto.create.topics.enable", "boolean", "true"),
        ServerKey("delete.topic.enable", "boolean", "true"),
        ServerKey("message.max.bytes", "int", "1048588", _at_least(0)),
        ServerKey("socket.request.max.bytes", "int", "104857600", _at_least(1)),
        ServerKey("log.retention.check.interval.ms", "long", "300000", _at_least(1)),
        ServerKey("log.flush.scheduler.interval.ms", "long", "9223372036854775807", _at_least(0)),
        ServerKey("log.flush.offset.checkpoint.interval.ms", "int", "60000", _at_least(0)),
        ServerKey("broker.heartbeat.interval.ms", "int", "2000", _at_least(1)),
        ServerKey("broker.session.timeout.ms", "int", "9000", _at_least(1)),
        ServerKey("broker.rack", "string", None),
        ServerKey("num.network.threads", "int", "3", _at_least(1)),
        ServerKey("num.io.threads", "int", "8", _at_least(1)),
        ServerKey("num.recovery.threads.per.data.dir", "int", "1", _at_least(1)),
        ServerKey("offsets.topic.replication.factor", "short", "3", _at_least(1)),
        ServerKey("transaction.state.log.replication.factor", "short", "3", _at_least(1)),
        ServerKey("transaction.state.log.min.isr", "int", "2", _at_least(1)),
        ServerKey("group.initial.rebalance.delay.ms", "int", "3000", _at_least(0)),
        ServerKey("replica.lag.time.max.ms", "long", "30000", _at_least(0)),
        ServerKey("min.insync.replicas", "int", "1", _at_least(1)),
        ServerKey("metadata.log.max.record.bytes.between.snapshots", "long", "20971520"),
        ServerKey("metadata.log.max.snapshot.interval.ms", "long", "3600000"),
        ServerKey("socket.send.buffer.bytes", "int", "102400"),
        ServerKey("socket.receive.buffer.bytes", "int", "102400"),
    )
}

_INT_TYPES: Final = {"int": (-(2**31), 2**31 - 1), "short": (-(2**15), 2**15 - 1),
                     "long": (-(2**63), 2**63 - 1)}
_LISTENER: Final = re.compile(r"^([A-Za-z0-9_]+)://(\[[0-9a-fA-F:]+\]|[^:\[\]]*):(\d+)$")


def single_node_defaults(data_dir: str) -> dict[str, str]:
    """What `pykraft server start` with no config runs: one combined node on loopback."""
    return {
        "node.id": "1",
        "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "advertised.listeners": "PLAINTEXT://127.0.0.1:9092",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": "1@127.0.0.1:9093",
        "log.dirs": data_dir,
    }


def read_properties(text: str) -> dict[str, str]:
    """Parse Java-properties text: `key=value` or `key: value`, # and ! comments, `\\` joins."""
    properties: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        match = re.match(r"^((?:[^=:\s\\]|\\.)+)\s*[=:\s]\s*(.*)$", logical)
        if match:
            properties[match.group(1).replace("\\", "")] = match.group(2).strip()
        elif logical:
            properties[logical] = ""
        logical = ""
    return properties


def parse_endpoints(value: str, key: str) -> list[Endpoint]:
    endpoints = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        match = _LISTENER.match(item)
        if match is None:
            raise ConfigError(f"Invalid value {item!r} for configuration {key}: "
                              "expected LISTENER_NAME://host:port")
        name, host, port = match.group(1), match.group(2).strip("[]"), int(match.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError(f"Invalid port {port} in {key}")
        endpoints.append(Endpoint(name.upper(), host, port))
    names = [endpoint.listener_name for endpoint in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(f"Each listener must have a different name in {key}: {value!r}")
    return endpoints


def parse_voters(value: str) -> dict[int, tuple[str, int]]:
    voters: dict[int, tuple[str, int]] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        match = re.match(r"^(\d+)@(\[[0-9a-fA-F:]+\]|[^:@]+):(\d+)$", item)
        if match is None:
            raise ConfigError(f"Invalid value {item!r} for configuration "
                              "controller.quorum.voters: expected id@host:port")
        voters[int(match.group(1))] = (match.group(2).strip("[]"), int(match.group(3)))
    return voters


def _check_value(key: ServerKey, value: str) -> None:
    try:
        if key.type in _INT_TYPES:
            low, high = _INT_TYPES[key.type]
            if not low <= int(value) <= high:
                raise ValueError
        elif key.type == "double":
            float(value)
        elif key.type == "boolean" and value.lower() not in ("true", "false"):
            raise ValueError
        if key.check is not None and not key.check(value):
            raise ValueError
    except ValueError:
        expectation = key.expect or f"a {key.type}"
        raise ConfigError(
            f"Invalid value {value!r} for configuration {key.name}: must be {expectation}"
        ) from None


class ServerConfig:
    """Validated server configuration. `values` holds every given key as a string."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = dict(values)
        self.warnings: list[str] = []
        for name, value in self.values.items():
            key = SERVER_KEYS.get(name)
            if key is not None:
                _check_value(key, value)
            elif not self._is_known_elsewhere(name):
                self.warnings.append(f"unknown configuration {name!r} was supplied; ignored")
        self._validate_shape()

    @staticmethod
    def _is_known_elsewhere(name: str) -> bool:
        server_keys = {d.server_key for d in log_config.TOPIC_CONFIGS.values() if d.server_key}
        return name in server_keys or name.startswith(("log.", "listener.name."))

    @classmethod
    def load(cls, path: str | Path | None, overrides: Sequence[str] = ()) -> ServerConfig:
        if path is None:
            data_dir = os.environ.get("PYKRAFT_DATA", "./data")
            values = single_node_defaults(data_dir)
        else:
            try:
                values = read_properties(Path(path).read_text(encoding="utf-8"))
            except OSError as error:
                raise ConfigError(f"cannot read config file {path}: {error.strerror}") from None
        for override in overrides:
            name, sep, value = override.partition("=")
            if not sep or not name.strip():
                raise ConfigError(f"--override expects key=value, got {override!r}")
            values[name.strip()] = value.strip()
        return cls(values)

    def get(self, name: str) -> str | None:
        if name in self.values:
            return self.values[name]
        key = SERVER_KEYS.get(name)
        return key.default if key else None

    def get_int(self, name: str) -> int:
        value = self.get(name)
        if value is None:
            raise ConfigError(f"Missing required configuration {name}")
        return int(value)

    def get_bool(self, name: str) -> bool:
        return (self.get(name) or "false").lower() == "true"

    def get_list(self, name: str) -> list[str]:
        return [part.strip() for part in (self.get(name) or "").split(",") if part.strip()]

    @property
    def node_id(self) -> int:
        return self.get_int("node.id")

    @property
    def roles(self) -> frozenset[str]:
        return frozenset(self.get_list("process.roles"))

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.get_list("log.dirs") or [self.get("log.dir") or "/tmp/kafka-logs"]
        return [Path(d) for d in dirs]

    @property
    def metadata_log_dir(self) -> Path:
        explicit = self.get("metadata.log.dir")
        return Path(explicit) if explicit else self.log_dirs[0]

    @property
    def listeners(self) -> list[Endpoint]:
        return parse_endpoints(self.get("listeners") or "", "listeners")

    @property
    def advertised_listeners(self) -> list[Endpoint]:
        given = self.get("advertised.listeners")
        if not given:
            return [e for e in self.listeners if e.listener_name not in self.controller_listeners]
        return parse_endpoints(given, "advertised.listeners")

    @property
    def controller_listeners(self) -> list[str]:
        return [name.upper() for name in self.get_list("controller.listener.names")]

    @property
    def security_protocols(self) -> dict[str, str]:
        mapping = {}
        for item in self.get_list("listener.security.protocol.map"):
            name, _, protocol = item.partition(":")
            mapping[name.strip().upper()] = protocol.strip().upper()
        return mapping

    @property
    def voters(self) -> dict[int, tuple[str, int]]:
        return parse_voters(self.get("controller.quorum.voters") or "")

    @property
    def inter_broker_listener(self) -> str:
        given = self.get("inter.broker.listener.name")
        if given:
            return given.upper()
        brokers = [e for e in self.listeners if e.listener_name not in self.controller_listeners]
        return brokers[0].listener_name if brokers else "PLAINTEXT"

    def _validate_shape(self) -> None:
        if self.get("node.id") is None:
            raise ConfigError("Missing required configuration node.id")
        if self.get("process.roles") is None:
            raise ConfigError("Missing required configuration process.roles "
                              "(pykraft runs in KRaft mode only)")
        listeners = self.listeners
        names = {e.listener_name for e in listeners}
        protocols = self.security_protocols
        for name in names:
            if name not in protocols:
                raise ConfigError(f"listener {name} has no entry in listener.security.protocol.map")
            if protocols[name] != "PLAINTEXT":
                raise ConfigError(f"listener {name} uses {protocols[name]}; "
                                  "only PLAINTEXT listeners are supported yet")
        controller_names = self.controller_listeners
        if not controller_names:
            raise ConfigError("controller.listener.names must be set in KRaft mode")
        voters = self.voters
        if not voters:
            raise ConfigError("controller.quorum.voters must name at least one voter")
        if "controller" in self.roles:
            if self.node_id not in voters:
                raise ConfigError(f"node.id {self.node_id} has the controller role but is not "
                                  "in controller.quorum.voters")
            if not names & set(controller_names):
                raise ConfigError("a controller needs a listener named in "
                                  "controller.listener.names")
        if "broker" in self.roles and not names - set(controller_names):
            raise ConfigError("a broker needs a listener that is not a controller listener")
        if "broker" not in self.roles and names - set(controller_names):
            raise ConfigError("a controller-only node may only have controller listeners")
        if len(voters) > 1:
            raise ConfigError("controller.quorum.voters names several voters; the multi-voter "
                              "quorum is not supported yet (one voter only)")
