"""Every key Kafka's broker and controller configuration (KafkaConfig) defines, with its type.

The table below lists the keys of Kafka 4.0's `KafkaConfig` definition -- the merged ConfigDefs
of ServerConfigs, KRaftConfigs, QuorumConfig, SocketServerConfigs, ReplicationConfigs, the log
and cleaner configs, the group, share and transaction coordinators" configs, quotas, metrics,
security (ssl, sasl), delegation tokens, the password encoder and tiered storage -- as
(type, lowest, highest, allowed strings). It was built from Kafka's source (trunk at 4.0's
development, October 2024; ZooKeeper's keys left out, as 4.0 removed them) and is kept here
so that no run depends on anything outside the package.

`server/config.py` uses it to tell three kinds of key apart: keys pykraft acts on, keys Kafka
knows that pykraft accepts and ignores (one warning line each), and keys Kafka does not know
(accepted with a warning, as Kafka logs them and starts). A value is checked against its
Kafka type and range either way, so `num.io.threads=eight` is refused as Kafka refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from pykraft.errors import InvalidConfig
from pykraft.storage import log_config
from pykraft.storage.log_config import ConfigType

__all__ = ["KAFKA_KEYS", "KafkaKey", "check_kafka_value", "listener_prefixed_key"]


@dataclass(frozen=True, slots=True)
class KafkaKey:
    type: ConfigType  # Kafka's CLASS is a "string" here: a class name pykraft never loads
    minimum: float | None = None  # Kafka's Range validator, when the key has one
    maximum: float | None = None
    choices: tuple[str, ...] = ()  # Kafka's ValidString, when the key has one


def _key(type_: ConfigType, minimum: float | None = None, maximum: float | None = None, *,
         choices: tuple[str, ...] = ()) -> KafkaKey:
    return KafkaKey(type_, minimum, maximum, choices)


def check_kafka_value(name: str, key: KafkaKey, value: str) -> None:
    """Raise InvalidConfig, in Kafka's words, unless `value` parses as `key`'s type and range."""
    parsed = log_config.parse_value(name, key.type, value)
    if isinstance(parsed, bool) or not isinstance(parsed, int | float):
        if key.choices and isinstance(parsed, str) and parsed not in key.choices:
            raise InvalidConfig(f"Invalid value {value} for configuration {name}: String must "
                                f"be one of: {', '.join(key.choices)}")
        return
    if key.minimum is not None and parsed < key.minimum:
        raise InvalidConfig(f"Invalid value {value} for configuration {name}: Value must be "
                            f"at least {_number(key.minimum)}")
    if key.maximum is not None and parsed > key.maximum:
        raise InvalidConfig(f"Invalid value {value} for configuration {name}: Value must be "
                            f"no more than {_number(key.maximum)}")


def listener_prefixed_key(name: str) -> tuple[str, str] | None:
    """`listener.name.<listener>.<key>` -> (LISTENER, key); a SASL mechanism's own keys
    (`listener.name.l.plain.sasl.jaas.config`) come back with the mechanism in the key."""
    if not name.startswith("listener.name."):
        return None
    listener, _, key = name[len("listener.name."):].partition(".")
    if not listener or not key:
        return None
    return listener.upper(), key


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


KAFKA_KEYS: Final[Mapping[str, KafkaKey]] = {
    # ServerConfigs
    "authorizer.class.name": _key("string"),
    "background.threads": _key("int", 1),
    "broker.id": _key("int"),
    "broker.id.generation.enable": _key("boolean"),
    "broker.rack": _key("string"),
    "compression.gzip.level": _key("int"),
    "compression.lz4.level": _key("int"),
    "compression.type": _key("string"),
    "compression.zstd.level": _key("int"),
    "controlled.shutdown.enable": _key("boolean"),
    "controlled.shutdown.max.retries": _key("int"),
    "controlled.shutdown.retry.backoff.ms": _key("long"),
    "delete.topic.enable": _key("boolean"),
    "early.start.listeners": _key("string"),
    "fetch.max.bytes": _key("int", 1024),
    "max.incremental.fetch.session.cache.slots": _key("int", 0),
    "max.request.partition.size.limit": _key("int", 1),
    "message.max.bytes": _key("int", 0),
    "num.io.threads": _key("int", 1),
    "num.replica.alter.log.dirs.threads": _key("int"),
    "request.timeout.ms": _key("int"),
    "reserved.broker.max.id": _key("int", 0),
    "socket.connection.setup.timeout.max.ms": _key("long"),
    "socket.connection.setup.timeout.ms": _key("long"),
    "unstable.api.versions.enable": _key("boolean"),
    "unstable.feature.versions.enable": _key("boolean"),
    # KRaftConfigs
    "broker.heartbeat.interval.ms": _key("int"),
    "broker.session.timeout.ms": _key("int"),
    "controller.listener.names": _key("string"),
    "eligible.leader.replicas.enable": _key("boolean"),
    "initial.broker.registration.timeout.ms": _key("int"),
    "metadata.log.dir": _key("string"),
    "metadata.log.max.record.bytes.between.snapshots": _key("long", 1),
    "metadata.log.max.snapshot.interval.ms": _key("long", 0),
    "metadata.log.segment.bytes": _key("int", 12),
    "metadata.log.segment.min.bytes": _key("int", 12),
    "metadata.log.segment.ms": _key("long"),
    "metadata.max.idle.interval.ms": _key("int", 0),
    "metadata.max.retention.bytes": _key("long"),
    "metadata.max.retention.ms": _key("long"),
    "node.id": _key("int"),
    "process.roles": _key("list"),
    "sasl.mechanism.controller.protocol": _key("string"),
    "server.max.startup.time.ms": _key("long", 0),
    # QuorumConfig
    "controller.quorum.append.linger.ms": _key("int"),
    "controller.quorum.bootstrap.servers": _key("list"),
    "controller.quorum.election.backoff.max.ms": _key("int"),
    "controller.quorum.election.timeout.ms": _key("int"),
    "controller.quorum.fetch.timeout.ms": _key("int"),
    "controller.quorum.request.timeout.ms": _key("int"),
    "controller.quorum.retry.backoff.ms": _key("int"),
    "controller.quorum.voters": _key("list"),
    # SocketServerConfigs
    "advertised.listeners": _key("string"),
    "connection.failed.authentication.delay.ms": _key("int", 0),
    "connections.max.idle.ms": _key("long"),
    "control.plane.listener.name": _key("string"),
    "listener.security.protocol.map": _key("string"),
    "listeners": _key("string"),
    "max.connection.creation.rate": _key("int", 0),
    "max.connections": _key("int", 0),
    "max.connections.per.ip": _key("int", 0),
    "max.connections.per.ip.overrides": _key("string"),
    "num.network.threads": _key("int", 1),
    "queued.max.request.bytes": _key("long"),
    "queued.max.requests": _key("int", 1),
    "socket.listen.backlog.size": _key("int", 1),
    "socket.receive.buffer.bytes": _key("int"),
    "socket.request.max.bytes": _key("int", 1),
    "socket.send.buffer.bytes": _key("int"),
    # ReplicationConfigs
    "auto.leader.rebalance.enable": _key("boolean"),
    "controller.socket.timeout.ms": _key("int"),
    "default.replication.factor": _key("int"),
    "delete.records.purgatory.purge.interval.requests": _key("int"),
    "fetch.purgatory.purge.interval.requests": _key("int"),
    "inter.broker.listener.name": _key("string"),
    "inter.broker.protocol.version": _key("string"),
    "leader.imbalance.check.interval.seconds": _key("long", 1),
    "leader.imbalance.per.broker.percentage": _key("int"),
    "num.replica.fetchers": _key("int"),
    "producer.purgatory.purge.interval.requests": _key("int"),
    "replica.fetch.backoff.ms": _key("int", 0),
    "replica.fetch.max.bytes": _key("int", 0),
    "replica.fetch.min.bytes": _key("int"),
    "replica.fetch.response.max.bytes": _key("int", 0),
    "replica.fetch.wait.max.ms": _key("int"),
    "replica.high.watermark.checkpoint.interval.ms": _key("long"),
    "replica.lag.time.max.ms": _key("long"),
    "replica.selector.class": _key("string"),
    "replica.socket.receive.buffer.bytes": _key("int"),
    "replica.socket.timeout.ms": _key("int"),
    "security.inter.broker.protocol": _key("string"),
    "unclean.leader.election.enable": _key("boolean"),
    "unclean.leader.election.interval.ms": _key("long", 1),
    # LogConfig
    "alter.config.policy.class.name": _key("string"),
    "auto.create.topics.enable": _key("boolean"),
    "create.topic.policy.class.name": _key("string"),
    "log.cleanup.policy": _key("list"),
    "log.dir": _key("string"),
    "log.dir.failure.timeout.ms": _key("long", 1),
    "log.dirs": _key("string"),
    "log.flush.interval.messages": _key("long", 1),
    "log.flush.interval.ms": _key("long"),
    "log.flush.offset.checkpoint.interval.ms": _key("int", 0),
    "log.flush.scheduler.interval.ms": _key("long"),
    "log.flush.start.offset.checkpoint.interval.ms": _key("int", 0),
    "log.index.interval.bytes": _key("int", 0),
    "log.index.size.max.bytes": _key("int", 4),
    "log.initial.task.delay.ms": _key("long", 0),
    "log.message.downconversion.enable": _key("boolean"),
    "log.message.format.version": _key("string"),
    "log.message.timestamp.after.max.ms": _key("long", 0),
    "log.message.timestamp.before.max.ms": _key("long", 0),
    "log.message.timestamp.difference.max.ms": _key("long", 0),
    "log.message.timestamp.type": _key("string", choices=("CreateTime", "LogAppendTime")),
    "log.preallocate": _key("boolean"),
    "log.retention.bytes": _key("long"),
    "log.retention.check.interval.ms": _key("long", 1),
    "log.retention.hours": _key("int"),
    "log.retention.minutes": _key("int"),
    "log.retention.ms": _key("long"),
    "log.roll.hours": _key("int", 1),
    "log.roll.jitter.hours": _key("int", 0),
    "log.roll.jitter.ms": _key("long"),
    "log.roll.ms": _key("long"),
    "log.segment.bytes": _key("int", 14),
    "log.segment.delete.delay.ms": _key("long", 0),
    "min.insync.replicas": _key("int", 1),
    "num.partitions": _key("int", 1),
    "num.recovery.threads.per.data.dir": _key("int", 1),
    # CleanerConfig
    "log.cleaner.backoff.ms": _key("long", 0),
    "log.cleaner.dedupe.buffer.size": _key("long"),
    "log.cleaner.delete.retention.ms": _key("long", 0),
    "log.cleaner.enable": _key("boolean"),
    "log.cleaner.io.buffer.load.factor": _key("double"),
    "log.cleaner.io.buffer.size": _key("int", 0),
    "log.cleaner.io.max.bytes.per.second": _key("double"),
    "log.cleaner.max.compaction.lag.ms": _key("long", 1),
    "log.cleaner.min.cleanable.ratio": _key("double", 0, 1),
    "log.cleaner.min.compaction.lag.ms": _key("long", 0),
    "log.cleaner.threads": _key("int", 0),
    # GroupCoordinatorConfig
    "group.consumer.assignors": _key("list"),
    "group.consumer.heartbeat.interval.ms": _key("int", 1),
    "group.consumer.max.heartbeat.interval.ms": _key("int", 1),
    "group.consumer.max.session.timeout.ms": _key("int", 1),
    "group.consumer.max.size": _key("int", 1),
    "group.consumer.migration.policy": _key("string"),
    "group.consumer.min.heartbeat.interval.ms": _key("int", 1),
    "group.consumer.min.session.timeout.ms": _key("int", 1),
    "group.consumer.session.timeout.ms": _key("int", 1),
    "group.coordinator.append.linger.ms": _key("int", 0),
    "group.coordinator.new.enable": _key("boolean"),
    "group.coordinator.rebalance.protocols": _key("list"),
    "group.coordinator.threads": _key("int", 1),
    "group.initial.rebalance.delay.ms": _key("int"),
    "group.max.session.timeout.ms": _key("int"),
    "group.max.size": _key("int", 1),
    "group.min.session.timeout.ms": _key("int"),
    "group.share.heartbeat.interval.ms": _key("int", 1),
    "group.share.max.heartbeat.interval.ms": _key("int", 1),
    "group.share.max.session.timeout.ms": _key("int", 1),
    "group.share.max.size": _key("int", 10, 1000),
    "group.share.min.heartbeat.interval.ms": _key("int", 1),
    "group.share.min.session.timeout.ms": _key("int", 1),
    "group.share.session.timeout.ms": _key("int", 1),
    "offset.metadata.max.bytes": _key("int"),
    "offsets.commit.timeout.ms": _key("int", 1),
    "offsets.load.buffer.size": _key("int", 1),
    "offsets.retention.check.interval.ms": _key("long", 1),
    "offsets.retention.minutes": _key("int", 1),
    "offsets.topic.compression.codec": _key("int"),
    "offsets.topic.num.partitions": _key("int", 1),
    "offsets.topic.replication.factor": _key("short", 1),
    "offsets.topic.segment.bytes": _key("int", 1),
    # ShareGroupConfig
    "group.share.delivery.count.limit": _key("int", 2, 10),
    "group.share.enable": _key("boolean"),
    "group.share.max.groups": _key("short", 1, 100),
    "group.share.max.record.lock.duration.ms": _key("int", 30000, 3600000),
    "group.share.min.record.lock.duration.ms": _key("int", 1000, 30000),
    "group.share.partition.max.record.locks": _key("int", 100, 10000),
    "group.share.record.lock.duration.ms": _key("int", 1000, 3600000),
    "share.fetch.max.fetch.records": _key("int"),
    "share.fetch.purgatory.purge.interval.requests": _key("int"),
    # ShareCoordinatorConfig
    "share.coordinator.append.linger.ms": _key("int", 0),
    "share.coordinator.load.buffer.size": _key("int", 1),
    "share.coordinator.snapshot.update.records.per.snapshot": _key("int", 0),
    "share.coordinator.state.topic.compression.codec": _key("int"),
    "share.coordinator.state.topic.min.isr": _key("short", 1),
    "share.coordinator.state.topic.num.partitions": _key("int", 1),
    "share.coordinator.state.topic.replication.factor": _key("short", 1),
    "share.coordinator.state.topic.segment.bytes": _key("int", 1),
    "share.coordinator.threads": _key("int", 1),
    "share.coordinator.write.timeout.ms": _key("int", 1),
    # TransactionLogConfig
    "producer.id.expiration.check.interval.ms": _key("int", 1),
    "producer.id.expiration.ms": _key("int", 1),
    "transaction.partition.verification.enable": _key("boolean"),
    "transaction.state.log.load.buffer.size": _key("int", 1),
    "transaction.state.log.min.isr": _key("int", 1),
    "transaction.state.log.num.partitions": _key("int", 1),
    "transaction.state.log.replication.factor": _key("short", 1),
    "transaction.state.log.segment.bytes": _key("int", 1),
    # TransactionStateManagerConfig
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": _key("int", 1),
    "transaction.max.timeout.ms": _key("int", 1),
    "transaction.remove.expired.transaction.cleanup.interval.ms": _key("int", 1),
    "transactional.id.expiration.ms": _key("int", 1),
    # QuotaConfig
    "alter.log.dirs.replication.quota.window.num": _key("int", 1),
    "alter.log.dirs.replication.quota.window.size.seconds": _key("int", 1),
    "client.quota.callback.class": _key("string"),
    "controller.quota.window.num": _key("int", 1),
    "controller.quota.window.size.seconds": _key("int", 1),
    "quota.window.num": _key("int", 1),
    "quota.window.size.seconds": _key("int", 1),
    "replication.quota.window.num": _key("int", 1),
    "replication.quota.window.size.seconds": _key("int", 1),
    # MetricConfigs
    "kafka.metrics.polling.interval.secs": _key("int", 1),
    "kafka.metrics.reporters": _key("list"),
    "metric.reporters": _key("list"),
    "metrics.num.samples": _key("int", 1),
    "metrics.recording.level": _key("string"),
    "metrics.sample.window.ms": _key("long", 1),
    "telemetry.max.bytes": _key("int", 1),
    # BrokerSecurityConfigs
    "connections.max.reauth.ms": _key("long"),
    "principal.builder.class": _key("string"),
    "sasl.client.callback.handler.class": _key("string"),
    "sasl.enabled.mechanisms": _key("list"),
    "sasl.jaas.config": _key("password"),
    "sasl.kerberos.kinit.cmd": _key("string"),
    "sasl.kerberos.min.time.before.relogin": _key("long"),
    "sasl.kerberos.principal.to.local.rules": _key("list"),
    "sasl.kerberos.service.name": _key("string"),
    "sasl.kerberos.ticket.renew.jitter": _key("double"),
    "sasl.kerberos.ticket.renew.window.factor": _key("double"),
    "sasl.login.callback.handler.class": _key("string"),
    "sasl.login.class": _key("string"),
    "sasl.login.connect.timeout.ms": _key("int"),
    "sasl.login.read.timeout.ms": _key("int"),
    "sasl.login.refresh.buffer.seconds": _key("short"),
    "sasl.login.refresh.min.period.seconds": _key("short"),
    "sasl.login.refresh.window.factor": _key("double"),
    "sasl.login.refresh.window.jitter": _key("double"),
    "sasl.login.retry.backoff.max.ms": _key("long"),
    "sasl.login.retry.backoff.ms": _key("long"),
    "sasl.mechanism.inter.broker.protocol": _key("string"),
    "sasl.oauthbearer.clock.skew.seconds": _key("int"),
    "sasl.oauthbearer.expected.audience": _key("list"),
    "sasl.oauthbearer.expected.issuer": _key("string"),
    "sasl.oauthbearer.jwks.endpoint.refresh.ms": _key("long"),
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": _key("long"),
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": _key("long"),
    "sasl.oauthbearer.jwks.endpoint.url": _key("string"),
    "sasl.oauthbearer.scope.claim.name": _key("string"),
    "sasl.oauthbearer.sub.claim.name": _key("string"),
    "sasl.oauthbearer.token.endpoint.url": _key("string"),
    "sasl.server.callback.handler.class": _key("string"),
    "sasl.server.max.receive.size": _key("int"),
    "security.providers": _key("string"),
    "ssl.allow.dn.changes": _key("boolean"),
    "ssl.allow.san.changes": _key("boolean"),
    "ssl.cipher.suites": _key("list"),
    "ssl.client.auth": _key("string"),
    "ssl.enabled.protocols": _key("list"),
    "ssl.endpoint.identification.algorithm": _key("string"),
    "ssl.engine.factory.class": _key("string"),
    "ssl.key.password": _key("password"),
    "ssl.keymanager.algorithm": _key("string"),
    "ssl.keystore.certificate.chain": _key("password"),
    "ssl.keystore.key": _key("password"),
    "ssl.keystore.location": _key("string"),
    "ssl.keystore.password": _key("password"),
    "ssl.keystore.type": _key("string"),
    "ssl.principal.mapping.rules": _key("string"),
    "ssl.protocol": _key("string"),
    "ssl.provider": _key("string"),
    "ssl.secure.random.implementation": _key("string"),
    "ssl.trustmanager.algorithm": _key("string"),
    "ssl.truststore.certificates": _key("password"),
    "ssl.truststore.location": _key("string"),
    "ssl.truststore.password": _key("password"),
    "ssl.truststore.type": _key("string"),
    # DelegationTokenManagerConfigs
    "delegation.token.expiry.check.interval.ms": _key("long", 1),
    "delegation.token.expiry.time.ms": _key("long", 1),
    "delegation.token.max.lifetime.ms": _key("long", 1),
    "delegation.token.secret.key": _key("password"),
    # PasswordEncoderConfigs
    "password.encoder.cipher.algorithm": _key("string"),
    "password.encoder.iterations": _key("int", 1024),
    "password.encoder.key.length": _key("int", 8),
    "password.encoder.keyfactory.algorithm": _key("string"),
    "password.encoder.old.secret": _key("password"),
    "password.encoder.secret": _key("password"),
    # RemoteLogManagerConfig
    "log.local.retention.bytes": _key("long", -2),
    "log.local.retention.ms": _key("long", -2),
    "remote.fetch.max.wait.ms": _key("int", 1),
    "remote.list.offsets.request.timeout.ms": _key("long", 1),
    "remote.log.index.file.cache.total.size.bytes": _key("long", 1),
    "remote.log.manager.copier.thread.pool.size": _key("int"),
    "remote.log.manager.copy.max.bytes.per.second": _key("long", 1),
    "remote.log.manager.copy.quota.window.num": _key("int", 1),
    "remote.log.manager.copy.quota.window.size.seconds": _key("int", 1),
    "remote.log.manager.expiration.thread.pool.size": _key("int"),
    "remote.log.manager.fetch.max.bytes.per.second": _key("long", 1),
    "remote.log.manager.fetch.quota.window.num": _key("int", 1),
    "remote.log.manager.fetch.quota.window.size.seconds": _key("int", 1),
    "remote.log.manager.task.interval.ms": _key("long", 1),
    "remote.log.manager.task.retry.backoff.max.ms": _key("long", 1),
    "remote.log.manager.task.retry.backoff.ms": _key("long", 1),
    "remote.log.manager.task.retry.jitter": _key("double", 0, 0.5),
    "remote.log.manager.thread.pool.size": _key("int", 1),
    "remote.log.metadata.custom.metadata.max.bytes": _key("int", 0),
    "remote.log.metadata.manager.class.name": _key("string"),
    "remote.log.metadata.manager.class.path": _key("string"),
    "remote.log.metadata.manager.impl.prefix": _key("string"),
    "remote.log.metadata.manager.listener.name": _key("string"),
    "remote.log.reader.max.pending.tasks": _key("int", 1),
    "remote.log.reader.threads": _key("int", 1),
    "remote.log.storage.manager.class.name": _key("string"),
    "remote.log.storage.manager.class.path": _key("string"),
    "remote.log.storage.manager.impl.prefix": _key("string"),
    "remote.log.storage.system.enable": _key("boolean"),
}
