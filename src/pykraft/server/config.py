"""Server configuration: Kafka's `server.properties` keys, defaults and validation.

`ServerConfig.load(path, overrides)` reads a Java-properties file (or nothing: the
single-node defaults), applies `--override key=value` pairs, checks every value it knows how
to check and stops with a `ConfigError` naming the key when one is invalid, as Kafka's
KafkaConfig does before the node touches its disks. Checked are this module's own keys, the
server synonyms of topic configs (`log.segment.bytes`, `log.retention.hours`, ...) with the
topic config's rules, the dynamic broker keys of `controller.configs`, and every other key of
Kafka's KafkaConfig by its Kafka type and range (`kafka_keys.py`), listener-prefixed ones too.

Every key is kept. A key pykraft acts on is silent; a Kafka key pykraft ignores gets one
warning naming it as ignored; a key Kafka does not know gets Kafka's "supplied but isn't a
known config" warning, and the node still starts, as Kafka's does.

The node's shape is checked per role exactly where Kafka's KafkaConfig.validateValues checks
it, with its messages: a controller-only node is not checked for broker keys (templates set
inter.broker.listener.name on every node), a broker's inter-broker listener must be one of its
advertised listeners, and the quorum is named by controller.quorum.voters or
controller.quorum.bootstrap.servers (the voters then come from `storage format`, see
storage_tool.py).
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

from pykraft.broker.authorizer import STANDARD_AUTHORIZER_CLASS, AuthorizerSettings
from pykraft.broker.group_coordinator.core import GroupConfig
from pykraft.controller.configs import DYNAMIC_BROKER_CONFIGS
from pykraft.errors import InvalidConfig
from pykraft.net.limits import parse_per_ip_overrides
from pykraft.net.sasl import ListenerSasl
from pykraft.net.sasl_client import client_sasl_from_config
from pykraft.net.tls import SSL_KEYS
from pykraft.server.kafka_keys import KAFKA_KEYS, check_kafka_value, listener_prefixed_key
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
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
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
        # DescribeTopicPartitions' cap on partitions per response (broker/partition_apis.py)
        ServerKey("max.request.partition.size.limit", "int", "2000", 1),
        # how long the transaction coordinator waits on a broker's WriteTxnMarkers
        ServerKey("request.timeout.ms", "int", "30000"),
        # picks the inter-broker listener when inter.broker.listener.name is unset
        ServerKey("security.inter.broker.protocol", "string", "PLAINTEXT"),
        # the authorizer (authorizer_settings): empty = none, every request allowed
        ServerKey("authorizer.class.name", "string", ""),
        ServerKey("super.users", "string", ""),
        ServerKey("allow.everyone.if.no.acl.found", "boolean", "false"),
        # unset: 100 MiB, or socket.request.max.bytes if larger (Kafka's -1, unbounded, is
        # still accepted); see net/limits.py and docs/deviations.md
        ServerKey("queued.max.request.bytes", "long", None),
        ServerKey("max.connections", "int", "2147483647", 0),
        ServerKey("max.connections.per.ip", "int", "2147483647", 0),
        ServerKey("max.connections.per.ip.overrides", "string", ""),
        ServerKey("connections.max.idle.ms", "long", "600000"),
        # SASL (net/sasl.py, net/sasl_client.py); GSSAPI, Kafka's default, is refused
        ServerKey("sasl.enabled.mechanisms", "list", "GSSAPI"),
        ServerKey("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI"),
        ServerKey("sasl.mechanism.controller.protocol", "string", "GSSAPI"),
        ServerKey("connections.max.reauth.ms", "long", "0"),
        ServerKey("connection.failed.authentication.delay.ms", "int", "100", 0),
        ServerKey("sasl.server.max.receive.size", "int", "524288"),
        # OAUTHBEARER's JWKS validator (KIP-768, net/sasl.py's JwksSettings)
        ServerKey("sasl.oauthbearer.jwks.endpoint.url", "string", None),
        ServerKey("sasl.oauthbearer.jwks.endpoint.refresh.ms", "long", None),
        ServerKey("sasl.oauthbearer.expected.audience", "list", None),
        ServerKey("sasl.oauthbearer.expected.issuer", "string", None),
        ServerKey("sasl.oauthbearer.clock.skew.seconds", "int", None),
        ServerKey("sasl.oauthbearer.sub.claim.name", "string", None),
        ServerKey("sasl.oauthbearer.scope.claim.name", "string", None),
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
        ServerKey("replica.selector.class", "string", None),  # KIP-392 (broker.replica_manager)
        ServerKey("controlled.shutdown.enable", "boolean", "true"),
        ServerKey("initial.broker.registration.timeout.ms", "int", "60000", 1),
        ServerKey("num.network.threads", "int", "3", 1),
        ServerKey("num.io.threads", "int", "8", 1),
        ServerKey("num.recovery.threads.per.data.dir", "int", "1", 1),  # log loading threads
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
        ServerKey("metadata.max.retention.bytes", "long", "104857600"),
        ServerKey("metadata.max.retention.ms", "long", "604800000"),
        ServerKey("socket.send.buffer.bytes", "int", "102400"),
        ServerKey("socket.receive.buffer.bytes", "int", "102400"),
        # pykraft's own: host:port of the Prometheus endpoint (server/metrics.py); "" for none
        ServerKey("pykraft.metrics.listener", "string", ""),
        # pykraft's own: the most a produced batch may decompress to while its records are
        # checked (records/validate.py); past it the batch gets MESSAGE_TOO_LARGE
        ServerKey("pykraft.produce.decompressed.batch.max.bytes", "long", "134217728",
                  1048576),
        # pykraft's own, a deliberate bug for the fault campaign (testing/chaos) to catch:
        # the leader's high watermark follows its own log end, ignoring the ISR, so acks=all
        # acknowledges records no follower has. Never set it on a cluster that holds data.
        ServerKey("pykraft.testing.unsafe.leader.high.watermark", "boolean", "false"),
    )
}

_ROLES: Final = ("broker", "controller")
_SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_CLEANER_THREADS_DEFAULT: Final = "1"  # Kafka's CleanerConfig defaults
_CLEANER_DEDUPE_BUFFER_BYTES_DEFAULT: Final = str(128 * 1024 * 1024)
# Keys this module declares (or that `controller.configs` accepts dynamically) that pykraft
# does not act on: threads and socket buffers of the JVM's network layer, fetcher threads,
# plug-ins. Like every other Kafka key pykraft ignores, each gets one warning.
_NOT_ACTED_ON: Final = frozenset({
    "num.network.threads", "num.io.threads",
    "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "background.threads",
    "num.replica.fetchers", "metric.reporters", "max.connection.creation.rate",
    "transaction.partition.verification.enable", "log.cleaner.io.buffer.size",
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
})
# Prefixes Kafka hands to plug-ins (config providers, tiered storage's managers): Kafka
# knows them, pykraft has no such plug-ins.
_PLUGIN_PREFIXES: Final = ("config.providers", "rlmm.config.", "rsm.config.",
                           "remote.log.metadata.", "remote.log.storage.")
# Server keys that set a topic config's default (log.segment.bytes -> segment.bytes, ...).
_TOPIC_SYNONYMS: Final = {
    synonym.name: definition.name
    for definition in log_config.TOPIC_CONFIGS.values()
    for synonym in definition.synonyms
}
_LISTENER: Final = re.compile(r"^([A-Za-z0-9_-]+)://(\[[0-9a-fA-F:]+\]|[^:\[\]]*):(\d+)$")
_VOTER: Final = re.compile(r"^(\d+)@(\[[0-9a-fA-F:]+\]|[^:@\[\]]+):(\d+)$")
_NON_ROUTABLE_HOSTS: Final = ("0.0.0.0", "::")  # Kafka checks 0.0.0.0; "::" is as bad
_ADDRESS: Final = re.compile(r"^(\[[0-9a-fA-F:]+\]|[^:\[\]]+):(\d+)$")
_IGNORED_WARNING: Final = ("The configuration '{}' is a Kafka config that pykraft does not use; "
                           "it is ignored")
_UNKNOWN_WARNING: Final = ("The configuration '{}' was supplied but isn't a known config; "
                           "it is ignored")
_LISTENER_MAX_CONNECTIONS: Final = re.compile(r"^listener\.name\.[^.]+\.max\.connections$")
# the listener- (and mechanism-) prefixed SASL keys the node reads (net/sasl.py)
_LISTENER_SASL_KEY: Final = re.compile(
    r"^listener\.name\.[^.]+\.(?:(?:plain|scram-sha-256|scram-sha-512|oauthbearer)\."
    r"(?:sasl\.jaas\.config|connections\.max\.reauth\.ms)|sasl\.enabled\.mechanisms|"
    r"connections\.max\.reauth\.ms|connection\.failed\.authentication\.delay\.ms|"
    r"sasl\.server\.max\.receive\.size|oauthbearer\.sasl\.server\.callback\.handler\.class|"
    r"(?:oauthbearer\.)?sasl\.oauthbearer\.(?:jwks\.endpoint\.url|jwks\.endpoint\.refresh\.ms|"
    r"expected\.audience|expected\.issuer|clock\.skew\.seconds|sub\.claim\.name|"
    r"scope\.claim\.name))$", re.IGNORECASE)


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


def parse_endpoints(value: str, key: str, *, distinct: bool = True) -> list[Endpoint]:
    """`NAME://host:port,...`; every name once and, unless `distinct` is False (Kafka's
    advertised.listeners), every host:port once."""
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
    if distinct and len(set(addresses)) != len(addresses):
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


def parse_quorum_bootstrap_servers(value: str) -> list[tuple[str, int]]:
    """controller.quorum.bootstrap.servers: `host:port,...`."""
    servers = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        try:
            address = parse_address("controller.quorum.bootstrap.servers", item)
        except InvalidConfig as error:
            raise ConfigError(str(error)) from None
        if address is not None:
            servers.append(address)
    return servers


def authorizer_settings(values: Mapping[str, str]) -> AuthorizerSettings:
    """The authorizer keys: `authorizer.class.name` (empty: no authorizer, as Kafka's default;
    Kafka 4.0's StandardAuthorizer; any other class is refused, as Kafka refuses a class it
    cannot load), `super.users` (principals separated by semicolons, Kafka's
    StandardAuthorizer.getConfiguredSuperUsers) and `allow.everyone.if.no.acl.found`."""
    class_name = values.get("authorizer.class.name", "").strip()
    if class_name and class_name != STANDARD_AUTHORIZER_CLASS:
        raise ConfigError(
            f"Invalid value {class_name} for configuration authorizer.class.name: pykraft "
            f"provides one authorizer, {STANDARD_AUTHORIZER_CLASS} (or leave the key empty "
            f"for none)")
    super_users = frozenset(
        user.strip() for user in values.get("super.users", "").split(";") if user.strip())
    allow_everyone = values.get("allow.everyone.if.no.acl.found", "false").strip().lower()
    return AuthorizerSettings(class_name, super_users, allow_everyone == "true")


def _routable_name(endpoint: Endpoint) -> Endpoint:
    """An empty listener host is advertised as this machine's canonical host name."""
    if endpoint.host:
        return endpoint
    return Endpoint(endpoint.listener_name, _canonical_host_name(), endpoint.port)


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
        elif key is None and name in KAFKA_KEYS:  # a key Kafka types, even if we ignore it
            check_kafka_value(name, KAFKA_KEYS[name], value)
        prefixed = listener_prefixed_key(name)
        if prefixed is not None and prefixed[1] in KAFKA_KEYS:
            check_kafka_value(name, KAFKA_KEYS[prefixed[1]], value)
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
    """Whether Kafka knows the key (pykraft may still ignore it: `is_used_key`)."""
    return (name in SERVER_KEYS or name in _TOPIC_SYNONYMS or name in DYNAMIC_BROKER_CONFIGS
            or name in KAFKA_KEYS or listener_prefixed_key(name) is not None
            or name.startswith(_PLUGIN_PREFIXES))


def is_used_key(name: str) -> bool:
    """Whether pykraft acts on the key (the topic defaults count: they are what a topic
    created without its own value gets, and what DescribeConfigs reports)."""
    if (_LISTENER_MAX_CONNECTIONS.match(name) or _LISTENER_SASL_KEY.match(name)
            or _is_tls_key(name)):
        return True
    known = name in SERVER_KEYS or name in _TOPIC_SYNONYMS or name in DYNAMIC_BROKER_CONFIGS
    return known and name not in _NOT_ACTED_ON


def _is_tls_key(name: str) -> bool:
    """An ssl.* key net/tls.py acts on, plain or listener-prefixed."""
    prefixed = listener_prefixed_key(name)
    return (prefixed[1] if prefixed else name) in SSL_KEYS


def key_warning(name: str) -> str | None:
    """The one warning line a key gets: Kafka's but ignored, unknown, or none (used)."""
    if is_used_key(name):
        return None
    return (_IGNORED_WARNING if is_known_key(name) else _UNKNOWN_WARNING).format(name)


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
            warning = key_warning(name)
            if warning is not None:
                self.warnings.append(warning)
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
        self._validate_replication_and_cleaner()
        self._validate_sasl()
        authorizer_settings(self.values)  # a class we do not have: refused at start

    def _validate_replication_and_cleaner(self) -> None:
        """KafkaConfig's cross-key rules of the replica fetcher and the log cleaner."""
        wait_ms = self.get_int("replica.fetch.wait.max.ms")
        if wait_ms > self.get_int("replica.socket.timeout.ms"):
            raise ConfigError("replica.socket.timeout.ms should always be at least "
                              "replica.fetch.wait.max.ms to prevent unnecessary socket timeouts")
        if wait_ms > self.get_int("replica.lag.time.max.ms"):
            raise ConfigError("replica.fetch.wait.max.ms should always be less than or equal to "
                              "replica.lag.time.max.ms to prevent frequent changes in ISR")
        threads = int(self.get("log.cleaner.threads") or _CLEANER_THREADS_DEFAULT)
        buffer_bytes = int(self.get("log.cleaner.dedupe.buffer.size")
                           or _CLEANER_DEDUPE_BUFFER_BYTES_DEFAULT)
        if threads > 0 and buffer_bytes // threads <= 1024 * 1024:
            raise ConfigError("log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner "
                              "thread.")

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
        delay_ms = self.get_int("connection.failed.authentication.delay.ms")
        if 0 <= idle_ms <= delay_ms:
            raise ConfigError(f"connection.failed.authentication.delay.ms="
                              f"{delay_ms} should always be less than "
                              f"connections.max.idle.ms={idle_ms} to prevent failed "
                              "authentication responses from timing out")

    def _validate_sasl(self) -> None:
        """Each SASL listener's mechanisms and JAAS login modules, and the node's own
        credentials for the SASL listeners it connects to (the inter-broker listener on a
        broker, the controller listener on every node), read now so that a mistake stops the
        node before it starts, naming the key."""
        protocols = self.security_protocols
        sasl = ("SASL_PLAINTEXT", "SASL_SSL")
        try:
            for endpoint in self.listeners:
                if protocols.get(endpoint.listener_name) in sasl:
                    ListenerSasl.from_config(self.get, endpoint.listener_name)
            if "broker" in self.roles and protocols.get(self.inter_broker_listener) in sasl:
                client_sasl_from_config(self.get, self.inter_broker_listener, "inter.broker")
            controllers = self.controller_listeners
            if controllers and protocols.get(controllers[0]) in sasl:
                client_sasl_from_config(self.get, controllers[0], "controller")
        except ValueError as error:
            raise ConfigError(str(error)) from None

    def _apply_broker_id_synonym(self) -> None:
        """Kafka's node.id and broker.id name the same thing; either may be given."""
        node_id, broker_id = self.values.get("node.id"), self.values.get("broker.id")
        if node_id is None and broker_id is not None:
            self.values["node.id"] = broker_id
        elif node_id is not None and broker_id is not None and int(node_id) != int(broker_id):
            raise ConfigError("You must set `node.id` to the same value as `broker.id`.")

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

    def _advertised_or_listeners(self) -> list[Endpoint]:
        """advertised.listeners when the key is given (even empty), else listeners."""
        given = self.get("advertised.listeners")
        if given is None:
            return self.listeners
        return parse_endpoints(given, "advertised.listeners", distinct=False)

    @property
    def advertised_listeners(self) -> list[Endpoint]:
        """The broker's advertised listeners (Kafka's effectiveAdvertisedBrokerListeners):
        advertised.listeners, or listeners, without the controller listeners; an empty host
        means this machine's canonical host name."""
        controllers = self.controller_listeners
        return [_routable_name(e) for e in self._advertised_or_listeners()
                if e.listener_name not in controllers]

    @property
    def advertised_controller_listeners(self) -> list[Endpoint]:
        """Per controller listener name: its advertised.listeners entry, else its listener
        (Kafka's effectiveAdvertisedControllerListeners); an empty host means this machine's
        canonical host name."""
        return [_routable_name(e) for e in self.controller_endpoints()]

    def controller_endpoints(self) -> list[Endpoint]:
        """advertised_controller_listeners as written: an empty host stays empty."""
        advertised = self._advertised_or_listeners()
        listeners = self.listeners
        found = []
        for name in self.controller_listeners:
            endpoint = next((e for e in advertised if e.listener_name == name), None) or next(
                (e for e in listeners if e.listener_name == name), None)
            if endpoint is not None:
                found.append(endpoint)
        return found

    @property
    def controller_listeners(self) -> list[str]:
        return [name.upper() for name in self.get_list("controller.listener.names")]

    @property
    def security_protocols(self) -> dict[str, str]:
        """Kafka's effectiveListenerSecurityProtocolMap: the map as given; when it is not
        given, the default one plus PLAINTEXT for each controller listener name (unless a
        listener or controller name is an SSL or SASL one)."""
        mapping = {}
        for item in self.get_list("listener.security.protocol.map"):
            name, _, protocol = item.partition(":")
            mapping[name.strip().upper()] = protocol.strip().upper()
        if "listener.security.protocol.map" not in self.values:
            names = [*self.controller_listeners,
                     *(item.partition(":")[0].strip().upper()
                       for item in self.get_list("listeners"))]
            if not any(name in _SECURITY_PROTOCOLS[1:] for name in names):
                for name in self.controller_listeners:
                    mapping.setdefault(name, "PLAINTEXT")
        return mapping

    @property
    def voters(self) -> dict[int, tuple[str, int]]:
        """controller.quorum.voters, or the voters `storage format --standalone` /
        `--initial-controllers` wrote (set by `adopt_bootstrap_voters` at start-up)."""
        return parse_voters(self.get("controller.quorum.voters") or "")

    def adopt_bootstrap_voters(self, voters: Mapping[int, tuple[str, int]]) -> None:
        """The voter set formatted into the metadata log dir, for a node configured with
        controller.quorum.bootstrap.servers only (pykraft's quorum is static; see
        storage_tool.py). They are written into `values` as controller.quorum.voters: the
        node then runs exactly as a node given that static set (its controller listener, for
        one, describes the controllers from it to admin clients, KIP-919)."""
        self.values["controller.quorum.voters"] = ",".join(
            f"{node_id}@[{host}]:{port}" if ":" in host else f"{node_id}@{host}:{port}"
            for node_id, (host, port) in sorted(voters.items()))

    def validate_voters(self) -> None:
        """The role checks that depend on the voter set, again after adopting one."""
        if "controller" in self.roles and self.node_id not in self.voters:
            raise ConfigError("If process.roles contains the 'controller' role, the node id "
                              f"{self.node_id} must be included in the set of voters "
                              f"controller.quorum.voters={self._voter_ids_text()}")
        if self.roles == {"broker"} and self.node_id in self.voters:
            raise ConfigError("If process.roles contains just the 'broker' role, the node id "
                              f"{self.node_id} must not be included in the set of voters "
                              f"controller.quorum.voters={self._voter_ids_text()}")

    @property
    def quorum_bootstrap_servers(self) -> list[tuple[str, int]]:
        return parse_quorum_bootstrap_servers(
            self.get("controller.quorum.bootstrap.servers") or "")

    @property
    def inter_broker_listener(self) -> str:
        """inter.broker.listener.name, else the listener named after
        security.inter.broker.protocol (PLAINTEXT), as Kafka picks it."""
        given = self.get("inter.broker.listener.name")
        if given:
            return given.upper()
        return (self.get("security.inter.broker.protocol") or "PLAINTEXT").upper()

    # -- the shape of the node, checked as Kafka's KafkaConfig checks it -------------------
    #
    # KafkaConfig.validateValues checks each role only for what that role uses: a key meant
    # for brokers (inter.broker.listener.name, advertised.listeners' broker entries) is not
    # checked on a controller-only node, so the templates that set it on every node work.

    def _validate_shape(self) -> None:
        if self.get("node.id") is None:
            raise ConfigError("Missing required configuration node.id which has no default "
                              "value")
        self._validate_roles()
        self._validate_listeners()
        self._validate_inter_broker_protocol()
        roles = self.roles
        self._validate_quorum_servers()
        if self.get("control.plane.listener.name"):
            raise ConfigError("control.plane.listener.name is not supported in KRaft mode.")
        if roles == {"broker"}:
            self._validate_broker_only()
        else:
            self._validate_controller_role(controller_only=roles == {"controller"})
        if "broker" in roles:
            self._validate_broker_role()
        self._validate_routable()

    def _validate_roles(self) -> None:
        raw = self.get("process.roles")
        if raw is None or not raw.strip():
            raise ConfigError("Missing required configuration process.roles which has no "
                              "default value (pykraft runs in KRaft mode only: broker, "
                              "controller or both)")
        roles = [role.strip() for role in raw.split(",")]
        for role in roles:
            if role not in _ROLES:  # ConfigDef's ValidList.in, before KafkaConfig's own
                raise ConfigError(f"Invalid value {raw} for configuration process.roles: "
                                  "String must be one of: broker, controller")
        if len(set(roles)) != len(roles):
            raise ConfigError(f"Duplicate role names found in `process.roles`: {raw}")

    def _validate_listeners(self) -> None:
        listeners = self.listeners
        protocols = self.security_protocols
        for endpoint in listeners:
            if endpoint.listener_name not in protocols:
                raise ConfigError(f"Error creating broker listeners from "
                                  f"'{self.get('listeners')}': No security protocol defined "
                                  f"for listener {endpoint.listener_name}")
        self._validate_security_protocols()
        given = self.get("advertised.listeners")
        if given:
            for endpoint in parse_endpoints(given, "advertised.listeners", distinct=False):
                if endpoint.listener_name not in protocols:
                    raise ConfigError(f"Error creating broker listeners from '{given}': No "
                                      "security protocol defined for listener "
                                      f"{endpoint.listener_name}")

    def _validate_security_protocols(self) -> None:
        """Every protocol of listener.security.protocol.map is one Kafka knows (the TLS
        settings of SSL and SASL_SSL listeners are checked when the node builds them,
        net/tls.py)."""
        for name, protocol in self.security_protocols.items():
            if protocol not in _SECURITY_PROTOCOLS:
                raise ConfigError(f"Invalid value {self.get('listener.security.protocol.map')} "
                                  "for configuration listener.security.protocol.map: "
                                  f"unknown security protocol {protocol} for listener {name} "
                                  f"(one of {', '.join(_SECURITY_PROTOCOLS)})")

    def _validate_inter_broker_protocol(self) -> None:
        """Kafka resolves the inter-broker listener's protocol on every role."""
        name = self.get("inter.broker.listener.name")
        if name and "security.inter.broker.protocol" in self.values:
            raise ConfigError("Only one of inter.broker.listener.name and "
                              "security.inter.broker.protocol should be set.")
        if name and name.upper() not in self.security_protocols:
            raise ConfigError(f"Listener with name {name.upper()} defined in "
                              "inter.broker.listener.name not found in "
                              "listener.security.protocol.map.")
        protocol = self.get("security.inter.broker.protocol") or "PLAINTEXT"
        if not name and protocol not in _SECURITY_PROTOCOLS:
            raise ConfigError(f"Invalid security protocol `{protocol}` defined in "
                              "security.inter.broker.protocol")

    def _validate_quorum_servers(self) -> None:
        # both parsed: a malformed entry is an error whatever the role
        parse_voters(self.get("controller.quorum.voters") or "")
        parse_quorum_bootstrap_servers(self.get("controller.quorum.bootstrap.servers") or "")
        if not self.get_list("controller.quorum.voters") and not self.get_list(
                "controller.quorum.bootstrap.servers"):
            raise ConfigError("If using process.roles, either "
                              "controller.quorum.bootstrap.servers must contain the set of "
                              "bootstrap controllers or controller.quorum.voters must contain "
                              "a parseable set of controllers.")

    def _voter_ids_text(self) -> str:
        return "Set(" + ", ".join(str(voter) for voter in sorted(self.voters)) + ")"

    def _validate_broker_only(self) -> None:
        if self.node_id in self.voters:
            raise ConfigError("If process.roles contains just the 'broker' role, the node id "
                              f"{self.node_id} must not be included in the set of voters "
                              f"controller.quorum.voters={self._voter_ids_text()}")
        names = self.controller_listeners
        if not names:
            raise ConfigError("controller.listener.names must contain at least one value "
                              "when running KRaft with just the broker role")
        if any(e.listener_name in names for e in self.listeners):
            raise ConfigError("controller.listener.names must not contain a value appearing "
                              "in the 'listeners' configuration when running KRaft with just "
                              "the broker role")
        for name in names:
            if name not in self.security_protocols:
                raise ConfigError(f"Controller listener with name {name} defined in "
                                  "controller.listener.names not found in "
                                  "listener.security.protocol.map")

    def _validate_controller_role(self, *, controller_only: bool) -> None:
        names = self.controller_listeners
        listener_names = {e.listener_name for e in self.listeners}
        if controller_only and any(e.listener_name not in names for e in self.listeners):
            raise ConfigError("The listeners config must only contain KRaft controller "
                              "listeners from controller.listener.names when "
                              "process.roles=controller")
        voters = self.voters
        if voters and self.node_id not in voters:
            raise ConfigError("If process.roles contains the 'controller' role, the node id "
                              f"{self.node_id} must be included in the set of voters "
                              f"controller.quorum.voters={self._voter_ids_text()}")
        if not any(name in listener_names for name in names):
            raise ConfigError("controller.listener.names must contain at least one value "
                              "appearing in the 'listeners' configuration when running the "
                              "KRaft controller role")
        if any(name not in listener_names for name in names):
            raise ConfigError("controller.listener.names must only contain values appearing "
                              "in the 'listeners' configuration when running the KRaft "
                              "controller role")

    def _validate_broker_role(self) -> None:
        advertised = [e.listener_name for e in self.advertised_listeners]
        if not advertised:
            raise ConfigError("There must be at least one broker advertised listener. Perhaps "
                              "all listeners appear in controller.listener.names?")
        if self.inter_broker_listener not in advertised:
            raise ConfigError("inter.broker.listener.name must be a listener name defined in "
                              "advertised.listeners. The valid options based on currently "
                              f"configured listeners are {','.join(advertised)}")
        listener_names = [e.listener_name for e in self.listeners]
        if not set(advertised) <= set(listener_names):
            raise ConfigError("advertised.listeners listener names must be equal to or a "
                              "subset of the ones defined in listeners. Found "
                              f"{','.join(advertised)}. The valid options based on the current "
                              f"configuration are {','.join(listener_names)}")

    def _validate_routable(self) -> None:
        for endpoint in [*self.advertised_listeners, *self.advertised_controller_listeners]:
            if endpoint.host in _NON_ROUTABLE_HOSTS:
                raise ConfigError("advertised.listeners cannot use the nonroutable "
                                  f"meta-address {endpoint.host}. Use a routable IP address.")
