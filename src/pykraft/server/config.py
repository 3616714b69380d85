"""Server configuration: Kafka's `server.properties` keys, defaults and validation.

`ServerConfig.load(path, overrides)` reads a Java-properties file (or nothing: the
single-node defaults), applies `--override key=value` pairs, checks every value it knows how
to check and stops with a `ConfigError` naming the key when one is invalid, as Kafka's
KafkaConfig does before the node touches its disks. Checked are this module's own keys, the
server synonyms of topic configs (`log.segment.bytes`, `log.retention.hours`, ...) with the
topic config's rules, and the dynamic broker keys of `controller.configs`. Other keys are kept
and reported as warnings, as Kafka logs "supplied but isn't a known config".
"""

from __future__ import annotations

import functools
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pykraft.broker.group_coordinator.core import GroupConfig
from pykraft.controller.configs import DYNAMIC_BROKER_CONFIGS
from pykraft.errors import InvalidConfig
from pykraft.net.limits import parse_per_ip_overrides
from pykraft.storage import log_config
from pykraft.storage.log_config import ConfigType
from pykraft.storage.meta_properties import parse_java_properties


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
    type: ConfigType
    default: str | None
    minimum: int | None = None  # for the integer types


SERVER_KEYS: Final[dict[str, ServerKey]] = {
    key.name: key
    for key in (
        ServerKey("node.id", "int", None, 0),
        ServerKey("broker.id", "int", None, 0),
        ServerKey("process.roles", "list", None),
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
        ServerKey("controller.quorum.election.timeout.ms", "int", "1000", 1),
        ServerKey("controller.quorum.fetch.timeout.ms", "int", "2000", 1),
        ServerKey("controller.quorum.election.backoff.max.ms", "int", "1000", 0),
        ServerKey("controller.quorum.request.timeout.ms", "int", "2000", 1),
        ServerKey("controller.quorum.retry.backoff.ms", "int", "20", 0),
        ServerKey("controller.quorum.append.linger.ms", "int", "25", 0),
        ServerKey("log.dirs", "list", None),
        ServerKey("log.dir", "string", "/tmp/kafka-logs"),
        ServerKey("metadata.log.dir", "string", None),
        ServerKey("metadata.log.segment.bytes", "int", "1073741824", 1048576),
        ServerKey("metadata.log.segment.ms", "long", "604800000", 1),
        ServerKey("num.partitions", "int", "1", 1),
        ServerKey("default.replication.factor", "int", "1", 1),
        ServerKey("auto.create.topics.enable", "boolean", "true"),
        ServerKey("delete.topic.enable", "boolean", "true"),
        ServerKey("message.max.bytes", "int", "1048588", 0),
        ServerKey("socket.request.max.bytes", "int", "104857600", 1),
        # unset: 100 MiB, or socket.request.max.bytes if larger (Kafka's -1, unbounded, is
        # still accepted); see net/limits.py and docs/deviations.md
        ServerKey("queued.max.request.bytes", "long", None),
        ServerKey("max.connections", "int", "2147483647", 0),
        ServerKey("max.connections.per.ip", "int", "2147483647", 0),
        ServerKey("max.connections.per.ip.overrides", "string", ""),
        ServerKey("connections.max.idle.ms", "long", "600000"),
        ServerKey("log.retention.check.interval.ms", "long", "300000", 1),
        ServerKey("log.cleaner.enable", "boolean", "true"),
        ServerKey("group.min.session.timeout.ms", "int", "6000", 0),
        ServerKey("group.max.session.timeout.ms", "int", "1800000", 0),
        ServerKey("group.max.size", "int", "2147483647", 1),
        ServerKey("group.consumer.session.timeout.ms", "int", "45000", 1),
        ServerKey("group.consumer.min.session.timeout.ms", "int", "45000", 1),
        ServerKey("group.consumer.max.session.timeout.ms", "int", "60000", 1),
        ServerKey("group.consumer.heartbeat.interval.ms", "int", "5000", 1),
        ServerKey("group.consumer.assignors", "list", "uniform,range"),
        ServerKey("group.consumer.max.size", "int", "2147483647", 1),
        ServerKey("offset.metadata.max.bytes", "int", "4096", 0),
        ServerKey("offsets.retention.minutes", "int", "10080", 1),
        ServerKey("offsets.retention.check.interval.ms", "long", "600000", 1),
        ServerKey("log.flush.scheduler.interval.ms", "long", "9223372036854775807", 0),
        ServerKey("log.flush.offset.checkpoint.interval.ms", "int", "60000", 0),
        ServerKey("broker.heartbeat.interval.ms", "int", "2000", 1),
        ServerKey("broker.session.timeout.ms", "int", "9000", 1),
        ServerKey("broker.rack", "string", None),
        ServerKey("controlled.shutdown.enable", "boolean", "true"),
        ServerKey("initial.broker.registration.timeout.ms", "int", "60000", 1),
        ServerKey("num.network.threads", "int", "3", 1),
        ServerKey("num.io.threads", "int", "8", 1),
        ServerKey("num.recovery.threads.per.data.dir", "int", "1", 1),
        ServerKey("offsets.topic.num.partitions", "int", "50", 1),
        ServerKey("offsets.topic.replication.factor", "short", "3", 1),
        ServerKey("transaction.state.log.num.partitions", "int", "50", 1),
        ServerKey("transaction.state.log.replication.factor", "short", "3", 1),
        ServerKey("transaction.state.log.min.isr", "int", "2", 1),
        ServerKey("transaction.state.log.segment.bytes", "int", "104857600", 1),
        ServerKey("transaction.max.timeout.ms", "int", "900000", 1),
        ServerKey("transactional.id.expiration.ms", "int", "604800000", 1),
        ServerKey("producer.id.expiration.ms", "int", "86400000", 1),
        ServerKey("producer.id.expiration.check.interval.ms", "int", "600000", 1),
        ServerKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int",
                  "10000", 1),
        ServerKey("transaction.remove.expired.transaction.cleanup.interval.ms", "int",
                  "3600000", 1),
        ServerKey("group.initial.rebalance.delay.ms", "int", "3000", 0),
        ServerKey("replica.lag.time.max.ms", "long", "30000", 0),
        ServerKey("min.insync.replicas", "int", "1", 1),
        ServerKey("replica.fetch.wait.max.ms", "int", "500", 0),
        ServerKey("replica.fetch.min.bytes", "int", "1", 1),
        ServerKey("replica.fetch.max.bytes", "int", "1048576", 0),
        ServerKey("fetch.max.bytes", "int", "57671680", 1024),
        ServerKey("replica.fetch.response.max.bytes", "int", "10485760", 0),
        ServerKey("replica.fetch.backoff.ms", "int", "1000", 0),
        ServerKey("max.incremental.fetch.session.cache.slots", "int", "1000", 0),
        ServerKey("min.incremental.fetch.session.eviction.ms", "int", "120000", 0),
        ServerKey("replica.socket.timeout.ms", "int", "30000", 1),
        ServerKey("auto.leader.rebalance.enable", "boolean", "true"),
        ServerKey("leader.imbalance.check.interval.seconds", "long", "300", 1),
        ServerKey("leader.imbalance.per.broker.percentage", "int", "10", 0),
        ServerKey("unclean.leader.election.interval.ms", "long", "300000", 1),
        ServerKey("metadata.log.max.record.bytes.between.snapshots", "long", "20971520", 1),
        ServerKey("metadata.log.max.snapshot.interval.ms", "long", "3600000", 0),
        ServerKey("socket.send.buffer.bytes", "int", "102400"),
        ServerKey("socket.receive.buffer.bytes", "int", "102400"),
        # pykraft's own: host:port of the Prometheus endpoint (server/metrics.py); "" for none
        ServerKey("pykraft.metrics.listener", "string", ""),
        # pykraft's own: the most a produced batch may decompress to while its records are
        # checked (records/validate.py); past it the batch gets MESSAGE_TOO_LARGE
        ServerKey("pykraft.produce.decompressed.batch.max.bytes", "long", "134217728",
                  1048576),
    )
}

_ROLES: Final = ("broker", "controller")
# Kafka's connection.failed.authentication.delay.ms default (pykraft has no SASL yet), which
# KafkaConfig requires to be below connections.max.idle.ms
_FAILED_AUTHENTICATION_DELAY_MS: Final = 100
# Server keys that set a topic config's default (log.segment.bytes -> segment.bytes, ...).
_TOPIC_SYNONYMS: Final = {
    synonym.name: definition.name
    for definition in log_config.TOPIC_CONFIGS.values()
    for synonym in definition.synonyms
}
_LISTENER: Final = re.compile(r"^([A-Za-z0-9_]+)://(\[[0-9a-fA-F:]+\]|[^:\[\]]*):(\d+)$")
_VOTER: Final = re.compile(r"^(\d+)@(\[[0-9a-fA-F:]+\]|[^:@\[\]]+):(\d+)$")
_NON_ROUTABLE_HOSTS: Final = ("0.0.0.0", "::")
_ADDRESS: Final = re.compile(r"^(\[[0-9a-fA-F:]+\]|[^:\[\]]+):(\d+)$")
_LISTENER_MAX_CONNECTIONS: Final = re.compile(r"^listener\.name\.[^.]+\.max\.connections$")


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
    """Parse Java-properties text as `java.util.Properties.load` does (values untrimmed):
    `key=value`, `key: value` or `key value`, # and ! comments, `\\` continues a line,
    and the escapes `\\t \\n \\r \\f`, `\\u` with four hex digits, and `\\<any>`."""
    return parse_java_properties(text)


def parse_endpoints(value: str, key: str) -> list[Endpoint]:
    endpoints = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        match = _LISTENER.match(item)
        if match is None:
            raise ConfigError(f"Invalid value {item} for configuration {key}: "
                              "expected LISTENER_NAME://host:port")
        name, host, port = match.group(1), match.group(2).strip("[]"), int(match.group(3))
        if port > 65535:
            raise ConfigError(f"Invalid value {item} for configuration {key}: "
                              f"port {port} is out of range")
        endpoints.append(Endpoint(name.upper(), host, port))
    names = [endpoint.listener_name for endpoint in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(f"Each listener must have a different name in {key}: {value}")
    addresses = [(endpoint.host, endpoint.port) for endpoint in endpoints if endpoint.port]
    if len(set(addresses)) != len(addresses):
        raise ConfigError(f"Each listener must have a different host:port in {key}: {value}")
    return endpoints


def parse_voters(value: str) -> dict[int, tuple[str, int]]:
    voters: dict[int, tuple[str, int]] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        match = _VOTER.match(item)
        if match is None or int(match.group(3)) > 65535 or int(match.group(1)) >= 2**31:
            raise ConfigError(f"Invalid value {item} for configuration "
                              "controller.quorum.voters: expected id@host:port")
        voter_id = int(match.group(1))
        if voter_id in voters:
            raise ConfigError(f"Invalid value {value} for configuration "
                              f"controller.quorum.voters: voter {voter_id} is named twice")
        voters[voter_id] = (match.group(2).strip("[]"), int(match.group(3)))
    return voters


def _check_value(name: str, value: str) -> None:
    """Raise ConfigError (naming the key) unless `value` is valid for a key we know."""
    try:
        key = SERVER_KEYS.get(name)
        if key is not None:
            parsed = log_config.parse_value(name, key.type, value)
            if key.minimum is not None and isinstance(parsed, int) and parsed < key.minimum:
                raise InvalidConfig(f"Invalid value {value} for configuration {name}: "
                                    f"Value must be at least {key.minimum}")
        if name == "pykraft.metrics.listener":
            parse_address(name, value)
        if name == "max.connections.per.ip.overrides":
            parse_per_ip_overrides(value)
        if _LISTENER_MAX_CONNECTIONS.match(name):
            parsed = log_config.parse_value(name, "int", value)
            if isinstance(parsed, int) and parsed < 0:
                raise InvalidConfig(f"Invalid value {value} for configuration {name}: "
                                    "Value must be at least 0")
        if name in _TOPIC_SYNONYMS:  # the topic config's rules, on the scaled value
            log_config.server_default(_TOPIC_SYNONYMS[name], {name: value})
        elif name in DYNAMIC_BROKER_CONFIGS and key is None:
            DYNAMIC_BROKER_CONFIGS[name].check(value)
    except (InvalidConfig, ValueError) as error:
        raise ConfigError(str(error)) from None


def parse_address(name: str, value: str) -> tuple[str, int] | None:
    """`host:port` -> (host, port); "" -> None. InvalidConfig names the key."""
    if not value.strip():
        return None
    match = _ADDRESS.match(value.strip())
    if match is None or not 0 <= int(match.group(2)) <= 65535:
        raise InvalidConfig(f"Invalid value {value} for configuration {name}: "
                            "expected host:port")
    return match.group(1).strip("[]"), int(match.group(2))


def is_known_key(name: str) -> bool:
    return (name in SERVER_KEYS or name in _TOPIC_SYNONYMS or name in DYNAMIC_BROKER_CONFIGS
            or name.startswith("listener.name."))


@functools.cache
def _canonical_host_name() -> str:
    """The name an empty listener host is advertised under, as Kafka does."""
    return socket.getfqdn()


class ServerConfig:
    """Validated server configuration. `values` holds every given key as a (trimmed) string."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = {name.strip(): value.strip() for name, value in values.items()}
        self.warnings: list[str] = []
        for name, value in self.values.items():
            _check_value(name, value)
            if not is_known_key(name):
                self.warnings.append(f"The configuration '{name}' was supplied but isn't a "
                                     "known config; it is ignored")
        self._apply_broker_id_synonym()
        try:  # cross-key rules of the topic defaults (min.compaction.lag.ms <= max...)
            log_config.LogConfig.from_configs({}, self.values)
        except InvalidConfig as error:
            raise ConfigError(f"the log.* keys set inconsistent topic defaults: {error}") from None
        try:  # cross-key rules of the group coordinator (session within min/max, assignors)
            GroupConfig.from_properties(self.values)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        self._validate_shape()
        self._validate_socket_limits()

    def _validate_socket_limits(self) -> None:
        """KafkaConfig's cross-key rules of the socket server's limits."""
        queued = self.get("queued.max.request.bytes")
        request_max = self.get_int("socket.request.max.bytes")
        if queued is not None and 0 < int(queued) < request_max:
            raise ConfigError(f"queued.max.request.bytes ({queued}) must be larger or equal to "
                              f"socket.request.max.bytes ({request_max})")
        if self.get_int("max.connections.per.ip") == 0 and not parse_per_ip_overrides(
                self.get("max.connections.per.ip.overrides") or ""):
            raise ConfigError("max.connections.per.ip can be set to zero only if "
                              "max.connections.per.ip.overrides property is set.")
        idle_ms = self.get_int("connections.max.idle.ms")
        if 0 <= idle_ms <= _FAILED_AUTHENTICATION_DELAY_MS:
            raise ConfigError(f"connection.failed.authentication.delay.ms="
                              f"{_FAILED_AUTHENTICATION_DELAY_MS} should always be less than "
                              f"connections.max.idle.ms={idle_ms} to prevent failed "
                              "authentication responses from timing out")

    def _apply_broker_id_synonym(self) -> None:
        """Kafka's node.id and broker.id name the same thing; either may be given."""
        node_id, broker_id = self.values.get("node.id"), self.values.get("broker.id")
        if node_id is None and broker_id is not None:
            self.values["node.id"] = broker_id
        elif node_id is not None and broker_id is not None and int(node_id) != int(broker_id):
            raise ConfigError(f"broker.id ({broker_id}) and node.id ({node_id}) must match "
                              "when both are set")

    @classmethod
    def load(cls, path: str | Path | None, overrides: Sequence[str] = ()) -> ServerConfig:
        if path is None:
            values = single_node_defaults(os.environ.get("PYKRAFT_DATA") or "./data")
        else:
            try:
                values = read_properties(Path(path).read_text(encoding="utf-8"))
            except OSError as error:
                raise ConfigError(f"cannot read config file {path}: "
                                  f"{error.strerror or error}") from None
            except UnicodeDecodeError as error:
                raise ConfigError(f"config file {path} is not UTF-8 text: {error}") from None
        for override in overrides:
            name, sep, value = override.partition("=")
            if not sep or not name.strip():
                raise ConfigError(f"--override expects key=value, got {override!r}")
            values[name.strip()] = value
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
    def metrics_listener(self) -> tuple[str, int] | None:
        """Where to serve Prometheus metrics (pykraft.metrics.listener), if anywhere."""
        return parse_address("pykraft.metrics.listener",
                             self.get("pykraft.metrics.listener") or "")

    @property
    def metadata_log_dir(self) -> Path:
        explicit = self.get("metadata.log.dir")
        return Path(explicit) if explicit else self.log_dirs[0]

    @property
    def listeners(self) -> list[Endpoint]:
        return parse_endpoints(self.get("listeners") or "", "listeners")

    @property
    def advertised_listeners(self) -> list[Endpoint]:
        """advertised.listeners, or the non-controller listeners; an empty host means this
        machine's canonical host name."""
        given = self.get("advertised.listeners")
        if given:
            endpoints = parse_endpoints(given, "advertised.listeners")
        else:
            controllers = self.controller_listeners
            endpoints = [e for e in self.listeners if e.listener_name not in controllers]
        return [e if e.host else Endpoint(e.listener_name, _canonical_host_name(), e.port)
                for e in endpoints]

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

    # -- the shape of the node, checked as Kafka's KafkaConfig checks it -------------------

    def _validate_shape(self) -> None:
        if self.get("node.id") is None:
            raise ConfigError("Missing required configuration node.id which has no default "
                              "value")
        self._validate_roles()
        names = self._validate_listeners()
        self._validate_advertised(names)
        self._validate_quorum(names)

    def _validate_roles(self) -> None:
        raw = self.get("process.roles")
        if raw is None or not raw.strip():
            raise ConfigError("Missing required configuration process.roles "
                              "(pykraft runs in KRaft mode only: broker, controller or both)")
        roles = [role.strip() for role in raw.split(",")]
        for role in roles:
            if role not in _ROLES:
                raise ConfigError(f"Invalid value {raw} for configuration process.roles: "
                                  f"unknown role {role!r} (expected broker, controller or both)")
        if len(set(roles)) != len(roles):
            raise ConfigError(f"Invalid value {raw} for configuration process.roles: "
                              "duplicate role names")

    def _validate_listeners(self) -> set[str]:
        listeners = self.listeners
        names = {e.listener_name for e in listeners}
        protocols = self.security_protocols
        for name in sorted(names):
            if name not in protocols:
                raise ConfigError(f"listener {name} (in listeners) has no entry in "
                                  "listener.security.protocol.map")
            if protocols[name] != "PLAINTEXT":
                raise ConfigError(f"listener {name} uses {protocols[name]}; "
                                  "only PLAINTEXT listeners are supported yet")
        controller_names = self.controller_listeners
        if not controller_names:
            raise ConfigError("controller.listener.names must be set in KRaft mode")
        if "controller" in self.roles and not names & set(controller_names):
            raise ConfigError("controller.listener.names: the controller role needs one of "
                              f"{', '.join(controller_names)} in listeners")
        if "broker" in self.roles and not names - set(controller_names):
            raise ConfigError("listeners: the broker role needs a listener that is not in "
                              "controller.listener.names")
        if "controller" not in self.roles and names & set(controller_names):
            raise ConfigError("controller.listener.names must not name a listener in listeners "
                              "on a broker-only node (process.roles=broker): "
                              f"{', '.join(sorted(names & set(controller_names)))}")
        if "broker" not in self.roles and names - set(controller_names):
            raise ConfigError("listeners: a controller-only node may only have the listeners "
                              "named in controller.listener.names")
        inter_broker = self.get("inter.broker.listener.name")
        if inter_broker and inter_broker.upper() not in names - set(controller_names):
            raise ConfigError(f"inter.broker.listener.name {inter_broker} must be a "
                              "non-controller listener in listeners")
        return names

    def _validate_advertised(self, names: set[str]) -> None:
        given = self.get("advertised.listeners")
        advertised = parse_endpoints(given, "advertised.listeners") if given else []
        unknown = sorted({e.listener_name for e in advertised} - names)
        if unknown:
            raise ConfigError(f"advertised.listeners names {', '.join(unknown)}, which "
                              f"listeners does not define (it has {', '.join(sorted(names))})")
        controllers = set(self.controller_listeners)
        if "broker" in self.roles and {e.listener_name for e in advertised} & controllers:
            raise ConfigError("advertised.listeners must not contain the controller listeners "
                              "(controller.listener.names): clients only talk to brokers")
        effective = advertised or [e for e in self.listeners if e.listener_name not in controllers]
        for endpoint in effective:
            if endpoint.host in _NON_ROUTABLE_HOSTS:
                raise ConfigError(
                    f"advertised.listeners cannot use the non-routable address {endpoint.host} "
                    f"(listener {endpoint.listener_name}): advertise a routable host")

    def _validate_quorum(self, names: set[str]) -> None:
        voters = self.voters
        if not voters:
            raise ConfigError("controller.quorum.voters must name at least one voter "
                              "(controller.quorum.bootstrap.servers, the dynamic quorum, is "
                              "not supported yet)")
        if "controller" in self.roles and self.node_id not in voters:
            raise ConfigError(f"node.id {self.node_id} has the controller role but is not "
                              "in controller.quorum.voters")
        if "controller" not in self.roles and self.node_id in voters:
            raise ConfigError(f"node.id {self.node_id} is in controller.quorum.voters but "
                              "process.roles does not contain controller")
