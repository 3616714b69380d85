"""Every key Kafka's KafkaConfig accepts is accepted here: used, or ignored with one warning
line naming it; unknown keys warn too; a value of the wrong Kafka type is refused in Kafka's
words; and each role is checked only for what Kafka checks on that role."""

from __future__ import annotations

import pytest

from pykraft.server.config import (
    SERVER_KEYS,
    ConfigError,
    ServerConfig,
    is_known_key,
    is_used_key,
)
from pykraft.server.kafka_keys import KAFKA_KEYS, KafkaKey

COMBINED = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "log.dirs": "/data/a",
}
CONTROLLER_ONLY = {
    "node.id": "1",
    "process.roles": "controller",
    "listeners": "CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "log.dirs": "/data/a",
}
BROKER_ONLY = {
    "node.id": "4",
    "process.roles": "broker",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "log.dirs": "/data/b",
}


def refused(values: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as caught:
        ServerConfig(values)
    return str(caught.value)


# -- per role, as KafkaConfig.validateValues ------------------------------------------


def test_a_controller_only_node_takes_the_broker_keys_templates_set_everywhere() -> None:
    config = ServerConfig({**CONTROLLER_ONLY, "inter.broker.listener.name": "PLAINTEXT",
                           "listener.security.protocol.map":
                               "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                           "advertised.listeners": "CONTROLLER://127.0.0.1:9093"})
    assert config.roles == {"controller"}
    assert config.advertised_listeners == []  # no broker listener to register
    assert [e.port for e in config.advertised_controller_listeners] == [9093]


def test_the_inter_broker_listener_is_checked_only_on_brokers() -> None:
    message = refused({**BROKER_ONLY, "inter.broker.listener.name": "INTERNAL",
                       "listener.security.protocol.map":
                           "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"})
    assert message == ("inter.broker.listener.name must be a listener name defined in "
                       "advertised.listeners. The valid options based on currently configured "
                       "listeners are PLAINTEXT")
    # without the key, Kafka's inter-broker listener is named after its protocol: PLAINTEXT
    message = refused({**BROKER_ONLY, "listeners": "BROKER://127.0.0.1:9092",
                       "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,BROKER:PLAINTEXT"})
    assert "inter.broker.listener.name must be a listener name" in message


def test_a_listener_name_missing_from_the_protocol_map_is_refused_on_every_role() -> None:
    message = refused({**CONTROLLER_ONLY, "inter.broker.listener.name": "INTERNAL"})
    assert message == ("Listener with name INTERNAL defined in inter.broker.listener.name not "
                       "found in listener.security.protocol.map.")
    assert refused({**COMBINED, "inter.broker.listener.name": "PLAINTEXT",
                    "security.inter.broker.protocol": "PLAINTEXT"}) == (
        "Only one of inter.broker.listener.name and security.inter.broker.protocol should "
        "be set.")


def test_the_quorum_may_be_named_by_bootstrap_servers_instead_of_voters() -> None:
    values = {**COMBINED, "controller.quorum.bootstrap.servers": "127.0.0.1:9093"}
    del values["controller.quorum.voters"]
    config = ServerConfig(values)
    assert config.voters == {} and config.quorum_bootstrap_servers == [("127.0.0.1", 9093)]
    config.adopt_bootstrap_voters({1: ("127.0.0.1", 9093)})  # from `storage format --standalone`
    assert config.voters == {1: ("127.0.0.1", 9093)}
    assert "controller.quorum.bootstrap.servers" in refused(
        {**values, "controller.quorum.bootstrap.servers": "nohostport"})


@pytest.mark.parametrize(("values", "message"), [
    ({**BROKER_ONLY, "controller.listener.names": ""},
     "controller.listener.names must contain at least one value when running KRaft with just "
     "the broker role"),
    ({**BROKER_ONLY, "controller.listener.names": "CTL",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"},
     "Controller listener with name CTL defined in controller.listener.names not found in "
     "listener.security.protocol.map"),
    ({**CONTROLLER_ONLY, "controller.listener.names": "CONTROLLER,OTHER"},
     "controller.listener.names must only contain values appearing in the 'listeners' "
     "configuration when running the KRaft controller role"),
    ({**COMBINED, "control.plane.listener.name": "PLAINTEXT"},
     "control.plane.listener.name is not supported in KRaft mode."),
    ({**CONTROLLER_ONLY, "listeners": "CONTROLLER://0.0.0.0:9093"},
     "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. Use a routable "
     "IP address."),
    ({**COMBINED, "process.roles": "broker,"},
     "Invalid value broker, for configuration process.roles: String must be one of: broker, "
     "controller"),
])
def test_kafka_refusals_per_role(values: dict[str, str], message: str) -> None:
    assert refused(values).startswith(message)


# -- Kafka's keys: used, ignored with a warning, or unknown ---------------------------


def test_kafka_keys_pykraft_ignores_warn_once_each_naming_the_key() -> None:
    config = ServerConfig({**COMBINED, "num.network.threads": "3", "num.io.threads": "8",
                           "ssl.keymanager.algorithm": "SunX509",
                           "password.encoder.iterations": "4096",
                           "listener.name.plaintext.ssl.provider": "SunJSSE",
                           "config.providers": "file", "num.partitions": "3"})
    ignored = ["num.network.threads", "num.io.threads", "ssl.keymanager.algorithm",
               "password.encoder.iterations", "listener.name.plaintext.ssl.provider",
               "config.providers"]
    assert len(config.warnings) == len(ignored)
    for name, warning in zip(ignored, config.warnings, strict=True):
        assert warning == (f"The configuration '{name}' is a Kafka config that pykraft does "
                           "not use; it is ignored")


def test_the_ssl_keys_pykraft_acts_on_do_not_warn() -> None:
    config = ServerConfig({**COMBINED, "ssl.keystore.location": "/k.p12",
                           "listener.name.plaintext.ssl.keystore.password": "secret",
                           "ssl.principal.mapping.rules": "DEFAULT"})
    assert config.warnings == []


def test_an_authorizer_class_pykraft_lacks_is_refused() -> None:
    """authorizer.class.name names Kafka's StandardAuthorizer or nothing: another class
    stops the node at its configuration, naming the one it could use."""
    with pytest.raises(ConfigError, match="pykraft provides one authorizer, "
                       "org.apache.kafka.metadata.authorizer.StandardAuthorizer"):
        ServerConfig({**COMBINED,
                      "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    config = ServerConfig({**COMBINED, "authorizer.class.name":
                           "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                           "super.users": "User:admin;User:broker",
                           "allow.everyone.if.no.acl.found": "true"})
    assert config.warnings == []


def test_unknown_keys_warn_but_do_not_stop_the_node() -> None:
    config = ServerConfig({**COMBINED, "confluent.support.metrics.enable": "false"})
    assert config.warnings == ["The configuration 'confluent.support.metrics.enable' was "
                               "supplied but isn't a known config; it is ignored"]


@pytest.mark.parametrize(("key", "value", "reason"), [
    ("num.io.threads", "eight", "Not a number of type INT"),
    ("num.network.threads", "0", "Value must be at least 1"),
    ("background.threads", "1.5", "Not a number of type INT"),
    ("sasl.login.refresh.buffer.seconds", "40000", "Not a number of type SHORT"),
    ("remote.log.manager.task.retry.jitter", "0.7", "Value must be no more than 0.5"),
    ("group.share.max.size", "5", "Value must be at least 10"),
    ("metrics.num.samples", "x", "Not a number of type INT"),
    ("remote.log.storage.system.enable", "yes", "Expected value to be either true or false"),
    ("delegation.token.expiry.time.ms", "0", "Value must be at least 1"),
    ("sasl.kerberos.ticket.renew.jitter", "half", "Not a number of type DOUBLE"),
    ("listener.name.plaintext.connections.max.reauth.ms", "soon",
     "Not a number of type LONG"),
])
def test_a_wrong_type_for_a_kafka_key_is_refused_in_kafkas_words(key: str, value: str,
                                                                   reason: str) -> None:
    assert refused({**COMBINED, key: value}) == (
        f"Invalid value {value} for configuration {key}: {reason}")


def _valid_value(key: KafkaKey) -> str:
    if key.choices:
        return key.choices[0]
    match key.type:
        case "boolean":
            return "false"
        case "int" | "long" | "short":
            return str(int(key.minimum) if key.minimum is not None and key.minimum > 1 else 1)
        case "double":
            return str(key.minimum if key.minimum is not None else 0.5)
        case _:
            return "x"


# keys whose value takes part in the node's shape, checked by the tests above
_SHAPE_KEYS = {"control.plane.listener.name", "security.inter.broker.protocol",
               "early.start.listeners"}


@pytest.mark.parametrize("name", sorted(name for name in KAFKA_KEYS
                                        if not is_used_key(name) and name not in _SHAPE_KEYS))
def test_every_kafka_key_pykraft_ignores_is_accepted_with_a_warning(name: str) -> None:
    config = ServerConfig({**COMBINED, name: _valid_value(KAFKA_KEYS[name])})
    assert config.warnings == [f"The configuration '{name}' is a Kafka config that pykraft "
                               "does not use; it is ignored"]


def test_the_keys_pykraft_declares_are_kafkas_or_its_own() -> None:
    # (min.incremental.fetch.session.eviction.ms is Kafka 4.0's, newer than the table)
    own = {name for name in SERVER_KEYS if name.startswith("pykraft.")}
    newer = {"min.incremental.fetch.session.eviction.ms"}
    # the StandardAuthorizer's own keys, which Kafka's authorizer reads, not KafkaConfig
    authorizer = {"super.users", "allow.everyone.if.no.acl.found"}
    assert set(SERVER_KEYS) - set(KAFKA_KEYS) == own | newer | authorizer
    assert all(is_known_key(name) for name in KAFKA_KEYS)
    assert len(KAFKA_KEYS) > 300


@pytest.mark.parametrize(("changes", "message"), [
    ({"replica.fetch.wait.max.ms": "40000"},
     "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms to prevent "
     "unnecessary socket timeouts"),
    ({"replica.fetch.wait.max.ms": "3000", "replica.lag.time.max.ms": "2000"},
     "replica.fetch.wait.max.ms should always be less than or equal to replica.lag.time.max.ms "
     "to prevent frequent changes in ISR"),
    ({"log.cleaner.threads": "4", "log.cleaner.dedupe.buffer.size": "4194304"},
     "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread."),
    ({"broker.id": "2"}, "You must set `node.id` to the same value as `broker.id`."),
])
def test_kafkas_cross_key_rules(changes: dict[str, str], message: str) -> None:
    assert refused({**COMBINED, **changes}) == message


def test_the_cross_key_rules_pass_kafkas_defaults_and_test_settings() -> None:
    ServerConfig({**COMBINED, "replica.fetch.wait.max.ms": "200",
                  "replica.lag.time.max.ms": "2000", "log.cleaner.threads": "0"})
