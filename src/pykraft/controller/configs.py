"""Dynamic configuration: topic overrides and dynamic broker configs as ConfigRecords.

Theory of operation. Dynamic configs live in the metadata log as ConfigRecords keyed by
(resource type, resource name, key); a null value deletes the key. Two resource types are
stored: TOPIC (name = topic name), BROKER (name = broker id, or "" for the cluster-wide
default every broker inherits) and GROUP (KIP-848: name = group id, any group, existing or
not; values checked against the broker's group.consumer/share min and max settings).

IncrementalAlterConfigs applies per-key operations to a resource's current overrides:
SET replaces, DELETE removes, APPEND/SUBTRACT add or remove items of a LIST-typed key
(starting from the key's default when unset). Legacy AlterConfigs replaces the whole set.
Either way the resulting set is validated as a whole, and a resource either changes as
asked or not at all; other resources of the request are independent.

As in Kafka, a TOPIC record is only written when the value changes, while a BROKER record
is always written (brokers reload the key when they see the record, even if equal).

The effective value of a topic key, reported by CreateTopics, is the first of: the
topic's override, this controller's own dynamic broker config, the cluster-wide dynamic
broker config, the node's static properties, the key's default (`storage.log_config`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

import immutables

from pykraft.controller.config import ControllerConfig
from pykraft.controller.naming import validate_topic_name
from pykraft.controller.requests import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResult,
    CreatableTopicConfig,
    LegacyAlterConfigsResource,
)
from pykraft.controller.state import ControllerState
from pykraft.errors import (
    BrokerIdNotRegistered,
    ErrorCode,
    InvalidConfig,
    InvalidRequest,
    KafkaError,
    UnknownTopicOrPartition,
)
from pykraft.metadata.records import ConfigRecord
from pykraft.metadata.registrations import ConfigResourceType
from pykraft.storage.log_config import (
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    parse_value,
    server_default,
    validate_topic_configs,
)

__all__ = [
    "DYNAMIC_BROKER_CONFIGS",
    "DYNAMIC_UPDATABLE_BROKER_KEYS",
    "LISTENER_ONLY_SECURITY_KEYS",
    "broker_config_synonyms",
    "broker_default_values",
    "effective_server_configs",
    "scala_set",
    "GROUP_CONFIGS",
    "BrokerConfigDef",
    "GroupConfigDef",
    "group_config_values",
    "validate_group_configs",
    "effective_topic_config",
    "effective_topic_configs",
    "check_topic_creation_configs",
    "incremental_alter_configs",
    "legacy_alter_configs",
]

TOPIC: Final = int(ConfigResourceType.TOPIC)
BROKER: Final = int(ConfigResourceType.BROKER)
GROUP: Final = int(ConfigResourceType.GROUP)


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    """A per-group config (KIP-848, Kafka's GroupConfig): its default is the broker's
    `server_key`; a value must lie within the broker's [`min_key`, `max_key`]."""

    name: str
    server_key: str
    default: int  # of server_key, when the node does not set it
    minimum: int  # GroupConfig's ConfigDef atLeast
    min_key: str
    min_default: int
    max_key: str
    max_default: int
    documentation: str

    def server_value(self, server_configs: Mapping[str, str], key: str, default: int) -> int:
        text = server_configs.get(key)
        try:
            return default if text is None or not text.strip() else int(text)
        except ValueError:
            return default


GROUP_CONFIGS: Final = {d.name: d for d in (
    GroupConfigDef("consumer.session.timeout.ms", "group.consumer.session.timeout.ms", 45_000,
                   1, "group.consumer.min.session.timeout.ms", 45_000,
                   "group.consumer.max.session.timeout.ms", 60_000,
                   "The timeout to detect client failures when using the consumer group "
                   "protocol."),
    GroupConfigDef("consumer.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms",
                   5000, 1, "group.consumer.min.heartbeat.interval.ms", 5000,
                   "group.consumer.max.heartbeat.interval.ms", 15_000,
                   "The heartbeat interval given to the members of a consumer group."),
    GroupConfigDef("share.session.timeout.ms", "group.share.session.timeout.ms", 45_000, 1,
                   "group.share.min.session.timeout.ms", 45_000,
                   "group.share.max.session.timeout.ms", 60_000,
                   "The timeout to detect client failures when using the share group "
                   "protocol."),
    GroupConfigDef("share.heartbeat.interval.ms", "group.share.heartbeat.interval.ms", 5000, 1,
                   "group.share.min.heartbeat.interval.ms", 5000,
                   "group.share.max.heartbeat.interval.ms", 15_000,
                   "The heartbeat interval given to the members of a share group."),
    GroupConfigDef("share.record.lock.duration.ms", "group.share.record.lock.duration.ms",
                   30_000, 1000, "group.share.min.record.lock.duration.ms", 15_000,
                   "group.share.max.record.lock.duration.ms", 60_000,
                   "The record acquisition lock duration in milliseconds for share groups."),
)}


def group_config_values(server_configs: Mapping[str, str],
                        overrides: Mapping[str, str]) -> dict[str, tuple[str, bool]]:
    """Every group config of one group: (value, set on the group) — an override, else the
    broker's group.* value it defaults to (Kafka's GroupConfig.fromProps)."""
    values = {}
    for name, definition in GROUP_CONFIGS.items():
        if name in overrides:
            values[name] = (overrides[name], True)
        else:
            values[name] = (str(definition.server_value(
                server_configs, definition.server_key, definition.default)), False)
    return values


def validate_group_configs(configs: Mapping[str, str], server_configs: Mapping[str, str]) -> None:
    """Kafka's GroupConfigManager.validate: known names, integers at least the key's minimum,
    each within the broker's min/max, each session timeout above its heartbeat interval
    (unset keys take the broker's values). Raises InvalidConfig with Kafka's message."""
    for name in configs:
        if name not in GROUP_CONFIGS:
            raise InvalidConfig(f"Unknown group config name: {name}")
    values: dict[str, int] = {}
    for name, definition in GROUP_CONFIGS.items():
        text = configs.get(name)
        if text is None:
            values[name] = definition.server_value(server_configs, definition.server_key,
                                                   definition.default)
            continue
        try:
            value = int(text.strip())
        except ValueError:
            raise InvalidConfig(f"Invalid value {text} for configuration {name}: Not a number "
                                "of type INT") from None
        if not -(1 << 31) <= value < (1 << 31):
            raise InvalidConfig(f"Invalid value {text} for configuration {name}: Not a number "
                                "of type INT")
        if value < definition.minimum:
            raise InvalidConfig(f"Invalid value {value} for configuration {name}: Value must "
                                f"be at least {definition.minimum}")
        values[name] = value
    for name in ("consumer.heartbeat.interval.ms", "consumer.session.timeout.ms",
                 "share.heartbeat.interval.ms", "share.session.timeout.ms",
                 "share.record.lock.duration.ms"):
        definition = GROUP_CONFIGS[name]
        low = definition.server_value(server_configs, definition.min_key,
                                      definition.min_default)
        high = definition.server_value(server_configs, definition.max_key,
                                       definition.max_default)
        if values[name] < low:
            raise InvalidConfig(f"{name} must be greater than or equal to {definition.min_key}")
        if values[name] > high:
            raise InvalidConfig(f"{name} must be less than or equal to {definition.max_key}")
    for kind in ("consumer", "share"):
        if values[f"{kind}.session.timeout.ms"] <= values[f"{kind}.heartbeat.interval.ms"]:
            raise InvalidConfig(f"{kind}.session.timeout.ms must be greater than "
                                f"{kind}.heartbeat.interval.ms")


@dataclass(frozen=True, slots=True)
class BrokerConfigDef:
    """A broker config that may be changed at run time.

    `topic_key` names the topic config this server key is the default of (its values are
    checked by that topic config's rules); otherwise `type` and `minimum` check values.
    """

    name: str
    type: ConfigType
    default: str | None
    minimum: int | None = None
    per_broker_only: bool = False  # may not be set at the cluster-wide default level
    topic_key: str | None = None

    def check(self, value: str) -> None:
        """Raise InvalidConfig (naming this key) unless `value` is valid."""
        if self.topic_key is not None:
            TOPIC_CONFIGS[self.topic_key].parse(value, key=self.name)
            return
        parsed = parse_value(self.name, self.type, value)
        if self.minimum is not None and isinstance(parsed, int) and parsed < self.minimum:
            raise InvalidConfig(
                f"Invalid value {value} for configuration {self.name}: "
                f"Value must be at least {self.minimum}"
            )


def _synonym_defs() -> dict[str, BrokerConfigDef]:
    """`log.retention.ms` and the like: the primary server synonym of each topic config."""
    found: dict[str, BrokerConfigDef] = {}
    for definition in TOPIC_CONFIGS.values():
        key = definition.server_key
        if key is None or definition.internal or definition.synonyms[0].scale != 1:
            continue
        found[key] = BrokerConfigDef(
            key, definition.type, definition.default, topic_key=definition.name
        )
    return found


_B = BrokerConfigDef
_OTHER_DYNAMIC: Final = (
    _B("num.io.threads", "int", "8", 1),
    _B("num.network.threads", "int", "3", 1),
    _B("num.replica.fetchers", "int", "1", 1),
    _B("num.recovery.threads.per.data.dir", "int", "1", 1),
    _B("background.threads", "int", "10", 1),
    _B("log.cleaner.threads", "int", "1", 0),
    _B("log.cleaner.dedupe.buffer.size", "long", "134217728"),
    _B("log.cleaner.io.buffer.size", "int", "524288", 0),
    _B("log.cleaner.io.buffer.load.factor", "double", "0.9"),
    _B("log.cleaner.io.max.bytes.per.second", "double", "1.7976931348623157E308"),
    _B("log.cleaner.backoff.ms", "long", "15000", 0),
    _B("max.connections", "int", "2147483647", 0),
    _B("max.connections.per.ip", "int", "2147483647", 0),
    _B("max.connections.per.ip.overrides", "string", ""),
    _B("max.connection.creation.rate", "int", "2147483647", 0),
    _B("metric.reporters", "list", ""),
    _B("producer.id.expiration.ms", "int", "86400000", 1),
    _B("transaction.partition.verification.enable", "boolean", "true"),
    _B("follower.replication.throttled.rate", "long", "9223372036854775807", 0),
    _B("leader.replication.throttled.rate", "long", "9223372036854775807", 0),
    _B("listeners", "list", None, per_broker_only=True),
    _B("advertised.listeners", "list", None, per_broker_only=True),
    _B("listener.security.protocol.map", "list", None, per_broker_only=True),
)

DYNAMIC_BROKER_CONFIGS: Final[Mapping[str, BrokerConfigDef]] = immutables.Map(
    {**_synonym_defs(), **{definition.name: definition for definition in _OTHER_DYNAMIC}}
)

# Kafka 4.0's DynamicBrokerConfig.AllDynamicConfigs plus the broker quota configs: every other
# key of Kafka's broker configuration (KafkaConfig) is read-only, refused by
# IncrementalAlterConfigs/AlterConfigs of a BROKER resource ("Cannot update these configs
# dynamically"); keys Kafka does not know are custom (plugin) configs, kept as Kafka keeps them.
_SSL_RECONFIGURABLE: Final = frozenset({  # SslConfigs.RECONFIGURABLE_CONFIGS
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates"})
# only as listener.name.<listener>.<key>, never bare (Kafka's securityConfigsWithoutListenerPrefix)
LISTENER_ONLY_SECURITY_KEYS: Final = _SSL_RECONFIGURABLE
_LISTENER_RECONFIGURABLE: Final = frozenset({  # DynamicListenerConfig.ReconfigurableConfigs
    "advertised.listeners", "listeners", "listener.security.protocol.map",
    "principal.builder.class", "ssl.protocol", "ssl.provider", "ssl.cipher.suites",
    "ssl.enabled.protocols", "ssl.keystore.type", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.key.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.endpoint.identification.algorithm",
    "ssl.secure.random.implementation", "ssl.client.auth", "ssl.engine.factory.class",
    "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config", "sasl.enabled.mechanisms",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
    "max.connections", "max.connection.creation.rate", "num.network.threads"})
DYNAMIC_UPDATABLE_BROKER_KEYS: Final = frozenset(
    {d.server_key for d in TOPIC_CONFIGS.values()  # DynamicLogConfig: each primary synonym
     if d.server_key is not None and d.name != "message.format.version"}
    | _SSL_RECONFIGURABLE | _LISTENER_RECONFIGURABLE
    | {"log.cleaner.threads", "log.cleaner.dedupe.buffer.size",  # LogCleaner
       "log.cleaner.io.buffer.load.factor", "log.cleaner.io.buffer.size", "message.max.bytes",
       "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms"}
    | {"num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
       "background.threads"}  # DynamicThreadPool
    | {"metric.reporters"}
    | {"max.connections.per.ip", "max.connections.per.ip.overrides", "max.connections",
       "max.connection.creation.rate"}  # SocketServer
    | {"producer.id.expiration.ms", "transaction.partition.verification.enable"}
    | {"remote.log.index.file.cache.total.size.bytes", "remote.fetch.max.wait.ms",
       "remote.log.manager.copy.max.bytes.per.second",
       "remote.log.manager.fetch.max.bytes.per.second",
       "remote.list.offsets.request.timeout.ms"}  # DynamicRemoteLogConfig
    | {"leader.replication.throttled.rate", "follower.replication.throttled.rate",
       "replica.alter.log.dirs.io.max.bytes.per.second"}  # QuotaConfig.brokerQuotaConfigs
)


def scala_set(names: Iterable[str]) -> str:
    """Names as Kafka's messages print a Scala Set: `Set(log.dirs, node.id)` (sorted here,
    where Scala's order is a hash's)."""
    return "Set(" + ", ".join(sorted(names)) + ")"


def broker_config_synonyms(name: str) -> list[str]:
    """Kafka's DynamicBrokerConfig.brokerConfigSynonyms: the server keys that set the same
    value as `name`, highest precedence first (log.retention.ms before .minutes, .hours)."""
    if name == "log.flush.interval.ms":  # the scheduler's interval is its default
        return [name, "log.flush.scheduler.interval.ms"]
    for group in _SYNONYM_GROUPS:
        if name in group:
            return list(group)
    return [name]


_SYNONYM_GROUPS: Final = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def broker_default_values() -> dict[str, str]:
    """Kafka's defaults of the log.* server keys (its staticDefaultConfigs): a key with
    coarser synonyms has none (log.retention.ms), the coarsest carries it (log.retention.hours
    = 168)."""
    defaults: dict[str, str] = {}
    for definition in TOPIC_CONFIGS.values():
        if definition.internal or not definition.synonyms or definition.default is None:
            continue
        last = definition.synonyms[-1]  # the only one, or the coarsest (or the fallback)
        defaults[last.name] = (definition.default if last.scale == 1
                               else str(int(definition.default) // last.scale))
    return defaults


def effective_server_configs(
    static: Mapping[str, str], cluster_default: Mapping[str, str], per_broker: Mapping[str, str]
) -> dict[str, str]:
    """The configuration a broker runs with: its static properties overlaid with the
    cluster-wide dynamic configs, then with its own (Kafka's DynamicBrokerConfig merges them
    the same way: a plain overlay, key by key)."""
    merged = dict(static)
    merged.update(cluster_default)
    merged.update(per_broker)
    return merged


# Broker keys Kafka knows but will only read at start-up (the controller's own check; the
# broker's edge refuses every read-only key of Kafka's, see DYNAMIC_UPDATABLE_BROKER_KEYS).
_STATIC_BROKER_KEYS: Final = frozenset(
    {
        "node.id",
        "broker.id",
        "process.roles",
        "log.dir",
        "log.dirs",
        "metadata.log.dir",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "controller.listener.names",
        "inter.broker.listener.name",
        "num.partitions",
        "default.replication.factor",
        "auto.create.topics.enable",
        "delete.topic.enable",
        "broker.session.timeout.ms",
        "broker.heartbeat.interval.ms",
        "offsets.topic.replication.factor",
        "offsets.topic.num.partitions",
        "transaction.state.log.replication.factor",
        "transaction.state.log.num.partitions",
        "group.initial.rebalance.delay.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "log.roll.hours",
        "log.roll.jitter.hours",
    }
)


# -- effective topic configs ----------------------------------------------------------


def _dynamic_layers(
    state: ControllerState, config: ControllerConfig
) -> tuple[tuple[Mapping[str, str], ConfigSource], ...]:
    configs = state.image.configs
    return (
        (configs.get(BROKER, str(config.node_id)), ConfigSource.DYNAMIC_BROKER_CONFIG),
        (configs.get(BROKER, ""), ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
    )


def _resolve(
    name: str,
    overrides: Mapping[str, str],
    layers: Iterable[tuple[Mapping[str, str], ConfigSource]],
    config: ControllerConfig,
) -> tuple[str | None, ConfigSource]:
    if name in overrides:
        return overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG
    definition = TOPIC_CONFIGS[name]
    for layer, source in layers:
        for synonym in definition.synonyms:
            raw = layer.get(synonym.name)
            if raw is not None:
                if synonym.scale != 1:
                    raw = str(int(raw.strip()) * synonym.scale)
                return raw, source
    return server_default(name, config.server_configs)


def effective_topic_config(
    state: ControllerState, config: ControllerConfig, topic: str, name: str
) -> str | None:
    """The value topic `topic` runs with for key `name`."""
    overrides = state.image.configs.get(TOPIC, topic)
    value, _ = _resolve(name, overrides, _dynamic_layers(state, config), config)
    return value


def effective_topic_configs(
    state: ControllerState, config: ControllerConfig, overrides: Mapping[str, str]
) -> tuple[CreatableTopicConfig, ...]:
    """Every (non-internal) topic config a topic with `overrides` gets, sorted by name."""
    layers = _dynamic_layers(state, config)
    result = []
    for name in sorted(TOPIC_CONFIGS):
        definition = TOPIC_CONFIGS[name]
        if definition.internal:
            continue
        value, source = _resolve(name, overrides, layers, config)
        sensitive = definition.type == "password"
        result.append(
            CreatableTopicConfig(
                name=name,
                value=None if sensitive else value,
                read_only=False,
                config_source=source,
                is_sensitive=sensitive,
            )
        )
    return tuple(result)


def check_topic_creation_configs(
    configs: Mapping[str, str | None], config: ControllerConfig
) -> None:
    """The configs of a CreateTopics topic: no nulls, every key known and valid."""
    nulls = [name for name, value in configs.items() if value is None]
    if nulls:
        raise InvalidConfig("Null value not supported for topic configs: " + ",".join(nulls))
    validate_topic_configs(configs, config.server_configs)


# -- resources ------------------------------------------------------------------------


def _check_resource(resource_type: int, name: str) -> None:
    """The resource must be one we store, well named, and exist."""
    if resource_type == TOPIC:
        if not name:
            raise InvalidRequest("Default topic resources are not allowed.")
        validate_topic_name(name)
    elif resource_type == GROUP:
        if not name:
            raise InvalidRequest("Default group resources are not allowed.")
    elif resource_type == BROKER:
        if not name:
            return
        try:
            broker_id = int(name)
        except ValueError:
            raise InvalidRequest("Unable to parse broker name as a base 10 number.") from None
        if broker_id < 0:
            raise InvalidRequest("Invalid negative broker ID.")
    else:
        raise InvalidRequest(f"Unknown resource type {resource_type}")


def _check_exists(
    state: ControllerState, config: ControllerConfig, resource_type: int, name: str
) -> None:
    if resource_type == TOPIC and name not in state.image.topics.by_name:
        raise UnknownTopicOrPartition(f"The topic '{name}' does not exist.")
    if resource_type == BROKER and name:
        broker_id = int(name)
        known = broker_id in state.image.cluster.brokers or broker_id in config.controller_ids
        if not known and broker_id != config.node_id:
            raise BrokerIdNotRegistered(f"No node with id {broker_id} found.")


def _check_broker_configs(name: str, configs: Mapping[str, str]) -> None:
    static = sorted(key for key in configs if key in _STATIC_BROKER_KEYS)
    if static:
        raise InvalidRequest("Cannot update these configs dynamically: " + scala_set(static))
    if not name:
        per_broker = sorted(
            key
            for key in configs
            if key in DYNAMIC_BROKER_CONFIGS and DYNAMIC_BROKER_CONFIGS[key].per_broker_only
        )
        if per_broker:
            raise InvalidRequest(
                "Cannot update these configs at default cluster level, broker id must be "
                "specified: " + scala_set(per_broker)
            )
    for key, value in configs.items():
        definition = DYNAMIC_BROKER_CONFIGS.get(key)
        if definition is not None:
            definition.check(value)
        # Keys we do not know are kept, as Kafka keeps custom (plugin) configs.


def _validate_result(
    config: ControllerConfig, resource_type: int, name: str, result: Mapping[str, str]
) -> None:
    if resource_type == TOPIC:
        validate_topic_configs(result, config.server_configs)
    elif resource_type == GROUP:
        validate_group_configs(result, config.server_configs)
    else:
        _check_broker_configs(name, result)


def _default(resource_type: int, key: str) -> str | None:
    if resource_type == TOPIC:
        definition = TOPIC_CONFIGS.get(key)
        return None if definition is None else definition.default
    if resource_type == GROUP:
        return None  # no group config is a LIST: APPEND/SUBTRACT are refused before this
    broker_definition = DYNAMIC_BROKER_CONFIGS.get(key)
    return None if broker_definition is None else broker_definition.default


def _is_list(resource_type: int, key: str) -> bool:
    if resource_type == TOPIC:
        definition = TOPIC_CONFIGS.get(key)
        return definition is not None and definition.type == "list"
    if resource_type == GROUP:
        return False
    broker_definition = DYNAMIC_BROKER_CONFIGS.get(key)
    return broker_definition is not None and broker_definition.type == "list"


def _apply_op(resource_type: int, current: str | None, alter: AlterableConfig) -> str | None:
    match alter.op:
        case AlterConfigOp.SET:
            return alter.value
        case AlterConfigOp.DELETE:
            return None
        case AlterConfigOp.APPEND | AlterConfigOp.SUBTRACT:
            if not _is_list(resource_type, alter.name):
                raise InvalidConfig(
                    f"Can't {alter.op.name} to key {alter.name} because its type is not LIST."
                )
            base = current if current is not None else _default(resource_type, alter.name)
            items = [item for item in (base or "").split(",") if item]
            for item in (alter.value or "").split(","):
                if alter.op == AlterConfigOp.APPEND and item not in items:
                    items.append(item)
                elif alter.op == AlterConfigOp.SUBTRACT and item in items:
                    items.remove(item)
            return ",".join(items)
    raise InvalidRequest(f"Unknown config operation {alter.op}")


def _config_records(
    resource_type: int,
    name: str,
    current: Mapping[str, str],
    changes: Mapping[str, str | None],
) -> list[ConfigRecord]:
    return [
        ConfigRecord(resource_type=resource_type, resource_name=name, name=key, value=value)
        for key, value in changes.items()
        if resource_type == BROKER or current.get(key) != value
    ]


def _incremental_resource(
    state: ControllerState, config: ControllerConfig, resource: AlterConfigsResource
) -> list[ConfigRecord]:
    rtype, name = resource.resource_type, resource.resource_name
    _check_resource(rtype, name)
    keys = [alter.name for alter in resource.configs]
    if len(set(keys)) != len(keys):
        raise InvalidRequest("Error due to duplicate config keys")
    current = state.image.configs.get(rtype, name)
    changes: dict[str, str | None] = {}
    for alter in resource.configs:
        try:
            op = AlterConfigOp(alter.op)
        except ValueError:
            raise InvalidRequest(f"Unknown config operation {alter.op}") from None
        changed = AlterableConfig(alter.name, op, alter.value)
        changes[alter.name] = _apply_op(rtype, current.get(alter.name), changed)
    result = {key: value for key, value in current.items() if key not in changes}
    result.update({key: value for key, value in changes.items() if value is not None})
    _validate_result(config, rtype, name, result)
    _check_exists(state, config, rtype, name)
    return _config_records(rtype, name, current, changes)


def _legacy_resource(
    state: ControllerState, config: ControllerConfig, resource: LegacyAlterConfigsResource
) -> list[ConfigRecord]:
    rtype, name = resource.resource_type, resource.resource_name
    _check_resource(rtype, name)
    nulls = [key for key, value in resource.configs.items() if value is None]
    if nulls:
        kind = {TOPIC: "topic", GROUP: "group"}.get(rtype, "broker")
        raise InvalidConfig(f"Null value not supported for {kind} configs: " + ",".join(nulls))
    wanted = {key: value for key, value in resource.configs.items() if value is not None}
    _validate_result(config, rtype, name, wanted)
    _check_exists(state, config, rtype, name)
    current = state.image.configs.get(rtype, name)
    changes: dict[str, str | None] = dict(wanted)
    changes.update({key: None for key in current.keys() if key not in wanted})
    return _config_records(rtype, name, current, changes)


_Resource = TypeVar("_Resource", AlterConfigsResource, LegacyAlterConfigsResource)


def _alter(
    resources: Sequence[_Resource],
    decide: Callable[[_Resource], list[ConfigRecord]],
) -> tuple[list[ConfigRecord], tuple[AlterConfigsResult, ...]]:
    """Decide each resource on its own; a resource named twice is refused as Kafka does."""
    seen: dict[tuple[int, str], int] = {}
    for resource in resources:
        key = (resource.resource_type, resource.resource_name)
        seen[key] = seen.get(key, 0) + 1
    records: list[ConfigRecord] = []
    results: list[AlterConfigsResult] = []
    reported: set[tuple[int, str]] = set()
    for resource in resources:
        key = (resource.resource_type, resource.resource_name)
        if seen[key] > 1:
            if key not in reported:
                reported.add(key)
                results.append(
                    AlterConfigsResult(*key, ErrorCode.invalid_request, "Duplicate resource.")
                )
            continue
        try:
            records.extend(decide(resource))
        except KafkaError as error:
            results.append(AlterConfigsResult(*key, error.code, str(error) or None))
            continue
        results.append(AlterConfigsResult(*key))
    return records, tuple(results)


def incremental_alter_configs(
    state: ControllerState,
    config: ControllerConfig,
    resources: Sequence[AlterConfigsResource],
) -> tuple[list[ConfigRecord], tuple[AlterConfigsResult, ...]]:
    """Records and per-resource results of an IncrementalAlterConfigs request."""

    return _alter(resources, lambda resource: _incremental_resource(state, config, resource))


def legacy_alter_configs(
    state: ControllerState,
    config: ControllerConfig,
    resources: Sequence[LegacyAlterConfigsResource],
) -> tuple[list[ConfigRecord], tuple[AlterConfigsResult, ...]]:
    """Records and per-resource results of a (legacy, full-replace) AlterConfigs request."""

    return _alter(resources, lambda resource: _legacy_resource(state, config, resource))
