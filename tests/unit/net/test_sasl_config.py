"""SASL keys in a node's config (server/config.py's _validate_sasl): mistakes stop the node
before it starts, naming the key; the keys the node reads are not warned about."""

from __future__ import annotations

import pytest

from pykraft.server.config import ConfigError, ServerConfig

PLAIN_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              'username="admin" password="admin-secret" user_admin="admin-secret";')
NODE = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/tmp/unused",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,"
                 "SASL://127.0.0.1:9094",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
                                      "SASL:SASL_PLAINTEXT",
    "advertised.listeners": "PLAINTEXT://127.0.0.1:9092,SASL://127.0.0.1:9094",
}


def test_a_sasl_listener_with_its_keys_is_accepted_without_warnings() -> None:
    config = ServerConfig({**NODE,
                           "listener.name.sasl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                           "listener.name.sasl.plain.sasl.jaas.config": PLAIN_JAAS,
                           "listener.name.sasl.scram-sha-512.connections.max.reauth.ms": "60000",
                           "connection.failed.authentication.delay.ms": "50"})
    assert config.warnings == []


@pytest.mark.parametrize(("extra", "message"), [
    ({}, "GSSAPI"),  # Kafka's default mechanism
    ({"sasl.enabled.mechanisms": "PLAIN"}, "listener.name.sasl.plain.sasl.jaas.config"),
    ({"sasl.enabled.mechanisms": "PLAIN",
      "listener.name.sasl.plain.sasl.jaas.config": "PlainLoginModule required user_a=\"x\""},
     "missing ';'"),
    ({"sasl.enabled.mechanisms": "OAUTHBEARER",
      "listener.name.sasl.oauthbearer.sasl.jaas.config":
          'x.OAuthBearerLoginModule required unsecuredValidatorAllowableClockSkewMs="-1";'},
     "unsecuredValidatorAllowableClockSkewMs"),
    ({"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl.plain.sasl.jaas.config":
      PLAIN_JAAS, "inter.broker.listener.name": "SASL"},
     "sasl.mechanism.inter.broker.protocol is GSSAPI"),
    ({"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl.plain.sasl.jaas.config":
      PLAIN_JAAS, "connection.failed.authentication.delay.ms": "700000"},
     "should always be less than connections.max.idle.ms"),
])
def test_refused_with_the_key_named(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ServerConfig({**NODE, **extra})


def test_the_node_logs_in_to_a_sasl_inter_broker_listener_with_its_jaas_user() -> None:
    ServerConfig({**NODE, "sasl.enabled.mechanisms": "PLAIN",
                  "listener.name.sasl.plain.sasl.jaas.config": PLAIN_JAAS,
                  "inter.broker.listener.name": "SASL",
                  "sasl.mechanism.inter.broker.protocol": "PLAIN"})
    with pytest.raises(ConfigError, match="username and password"):
        ServerConfig({**NODE, "sasl.enabled.mechanisms": "PLAIN",
                      "listener.name.sasl.plain.sasl.jaas.config":
                          'x.PlainLoginModule required user_admin="s";',
                      "inter.broker.listener.name": "SASL",
                      "sasl.mechanism.inter.broker.protocol": "PLAIN"})
