"""ServerConfig: Java-properties parsing, Kafka keys and defaults, and the checks that stop
start-up with a message naming the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pykraft.server.config import (
    SERVER_KEYS,
    ConfigError,
    Endpoint,
    ServerConfig,
    parse_endpoints,
    parse_voters,
    read_properties,
    single_node_defaults,
)

BASE = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "log.dirs": "/data/a",
}


def config(**changes: str | None) -> ServerConfig:
    """BASE with keys changed (dots spelled as underscores; None removes the key)."""
    values = dict(BASE)
    for name, value in changes.items():
        key = name.replace("_", ".")
        if value is None:
            values.pop(key, None)
        else:
            values[key] = value
    return ServerConfig(values)


def error_of(**changes: str | None) -> str:
    with pytest.raises(ConfigError) as caught:
        config(**changes)
    message = str(caught.value)
    assert "\n" not in message
    return message


# -- read_properties: java.util.Properties syntax ---------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=b", {"a": "b"}),
        ("a = b", {"a": "b"}),
        ("a:b\nc : d", {"a": "b", "c": "d"}),
        ("a b", {"a": "b"}),  # whitespace alone separates too
        ("a=b=c", {"a": "b=c"}),  # only the first separator counts
        ("a", {"a": ""}),
        ("a=", {"a": ""}),
        ("# comment\n! also a comment\n   # indented comment\n\nx=1", {"x": "1"}),
        ("a=#not a comment", {"a": "#not a comment"}),
        ("a=1\r\nb=2\rc=3", {"a": "1", "b": "2", "c": "3"}),
        ("a=1\na=2", {"a": "2"}),  # the last one wins
    ],
)
def test_read_properties_separators_and_comments(text: str, expected: dict[str, str]) -> None:
    assert read_properties(text) == expected


def test_read_properties_line_continuations() -> None:
    text = "listeners=PLAINTEXT://h:1,\\\n    CONTROLLER://h:2\nnext=x\n"
    assert read_properties(text) == {"listeners": "PLAINTEXT://h:1,CONTROLLER://h:2",
                                     "next": "x"}
    # an even number of trailing backslashes is an escaped backslash, not a continuation
    assert read_properties("a=b\\\\\nc=d") == {"a": "b\\", "c": "d"}
    # three: an escaped backslash, then a continuation
    assert read_properties("a=b\\\\\\\n  c") == {"a": "b\\c"}
    # a continuation into a blank line ends the logical line there
    assert read_properties("a=b\\\n\nc=d") == {"a": "b", "c": "d"}
    # a continued line that looks like a comment is part of the value
    assert read_properties("a=1,\\\n  #2") == {"a": "1,#2"}


def test_read_properties_escapes() -> None:
    assert read_properties(r"key\=with\:seps\ and\ spaces = v") == {
        "key=with:seps and spaces": "v"}
    assert read_properties(r"a=tab\there\nnewline") == {"a": "tab\there\nnewline"}
    assert read_properties(r"a=caf\u00e9") == {"a": "café"}
    assert read_properties(r"a=\q") == {"a": "q"}  # an unknown escape is the character


def test_a_config_file_is_trimmed_and_validated(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a Kafka-style file\n"
        "node.id = 3   \n"
        "process.roles: broker,controller\n"
        "listeners=PLAINTEXT://127.0.0.1:19092,\\\n"
        "          CONTROLLER://127.0.0.1:19093\n"
        "controller.listener.names=CONTROLLER\n"
        "controller.quorum.voters=3@127.0.0.1:19093\n"
        "log.dirs=/d1, /d2\n"
        "num.partitions=4\n",
        encoding="utf-8",
    )
    loaded = ServerConfig.load(path)
    assert loaded.node_id == 3
    assert loaded.values["node.id"] == "3"
    assert loaded.log_dirs == [Path("/d1"), Path("/d2")]
    assert loaded.listeners == [Endpoint("PLAINTEXT", "127.0.0.1", 19092),
                                Endpoint("CONTROLLER", "127.0.0.1", 19093)]
    assert loaded.get_int("num.partitions") == 4
    assert loaded.warnings == []


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in BASE.items()) + "num.partitions=2\n",
                    encoding="utf-8")
    loaded = ServerConfig.load(path, ["num.partitions=7", "log.segment.bytes = 2097152"])
    assert loaded.get_int("num.partitions") == 7
    assert loaded.get("log.segment.bytes") == "2097152"
    with pytest.raises(ConfigError, match="num.partitions"):
        ServerConfig.load(path, ["num.partitions=abc"])
    with pytest.raises(ConfigError, match="--override expects key=value"):
        ServerConfig.load(path, ["num.partitions"])


def test_unreadable_config_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file .*missing.properties"):
        ServerConfig.load(tmp_path / "missing.properties")
    binary = tmp_path / "binary.properties"
    binary.write_bytes(b"node.id=\xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        ServerConfig.load(binary)


# -- the no-config quick start ---------------------------------------------------------


def test_no_config_is_one_combined_node_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYKRAFT_DATA", raising=False)
    loaded = ServerConfig.load(None)
    assert loaded.node_id == 1
    assert loaded.roles == {"broker", "controller"}
    assert loaded.listeners == [Endpoint("PLAINTEXT", "127.0.0.1", 9092),
                                Endpoint("CONTROLLER", "127.0.0.1", 9093)]
    assert loaded.advertised_listeners == [Endpoint("PLAINTEXT", "127.0.0.1", 9092)]
    assert loaded.voters == {1: ("127.0.0.1", 9093)}
    assert loaded.log_dirs == [Path("./data")]
    assert loaded.metadata_log_dir == Path("./data")
    assert loaded.warnings == []


def test_no_config_honours_pykraft_data_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYKRAFT_DATA", "/somewhere/else")
    loaded = ServerConfig.load(None, ["num.partitions=3"])
    assert loaded.log_dirs == [Path("/somewhere/else")]
    assert loaded.get_int("num.partitions") == 3
    monkeypatch.setenv("PYKRAFT_DATA", "")  # set but empty: still ./data, not log.dir
    assert ServerConfig.load(None).log_dirs == [Path("./data")]


def test_single_node_defaults_pass_validation() -> None:
    assert ServerConfig(single_node_defaults("/x")).inter_broker_listener == "PLAINTEXT"


# -- defaults and typed getters ----------------------------------------------------------


def test_unset_keys_read_as_kafka_defaults() -> None:
    loaded = config()
    assert loaded.get_int("num.partitions") == 1
    assert loaded.get_int("message.max.bytes") == 1048588
    assert loaded.get_bool("auto.create.topics.enable") is True
    assert loaded.get("broker.rack") is None
    assert loaded.get("no.such.key") is None
    assert SERVER_KEYS["log.retention.check.interval.ms"].default == "300000"


def test_log_dir_is_used_when_log_dirs_is_absent() -> None:
    assert config(log_dirs=None, log_dir="/single").log_dirs == [Path("/single")]
    assert config(log_dirs=None).log_dirs == [Path("/tmp/kafka-logs")]
    assert config(metadata_log_dir="/meta").metadata_log_dir == Path("/meta")


def test_broker_id_is_a_synonym_of_node_id() -> None:
    assert config(node_id=None, broker_id="1").node_id == 1
    assert config(broker_id="1").node_id == 1
    assert config(node_id="001", broker_id="1").node_id == 1
    assert "broker.id" in error_of(node_id=None, broker_id="x")
    assert "broker.id" in error_of(broker_id="2")


def test_empty_listener_host_is_advertised_as_the_host_name() -> None:
    loaded = config(listeners="PLAINTEXT://:9092,CONTROLLER://127.0.0.1:9093")
    [advertised] = loaded.advertised_listeners
    assert advertised.listener_name == "PLAINTEXT" and advertised.port == 9092
    assert advertised.host != ""


# -- invalid values: ConfigError naming the key ----------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num.partitions", "abc"),
        ("num.partitions", "0"),
        ("num.partitions", "1.5"),
        ("num.partitions", "1_000"),  # Python's int() takes it; Kafka does not
        ("num.partitions", "2147483648"),  # beyond INT
        ("node.id", "-5"),
        ("node.id", ""),
        ("message.max.bytes", "-1"),
        ("auto.create.topics.enable", "maybe"),
        ("offsets.topic.replication.factor", "40000"),  # beyond SHORT
        ("controller.quorum.election.timeout.ms", "0"),
        ("metadata.log.segment.bytes", "abc"),
        # topic-default synonyms, checked by the topic config's rules
        ("log.segment.bytes", "abc"),
        ("log.segment.bytes", "10"),
        ("log.retention.hours", "x"),
        ("log.retention.ms", "1e3"),
        ("log.cleanup.policy", "bogus"),
        ("compression.type", "foo"),
        ("log.message.timestamp.type", "Sometime"),
        # dynamic broker keys
        ("log.cleaner.threads", "x"),
        ("producer.id.expiration.ms", "0"),
        # replication and leadership
        ("replica.fetch.max.bytes", "lots"),
        ("replica.socket.timeout.ms", "0"),
        ("auto.leader.rebalance.enable", "yes"),
        ("leader.imbalance.check.interval.seconds", "0"),
        ("transaction.max.timeout.ms", "0"),
        ("transactional.id.expiration.ms", "soon"),
    ],
)
def test_invalid_values_name_the_key(key: str, value: str) -> None:
    message = error_of(**{key.replace(".", "_"): value})
    assert key in message
    assert message.startswith(f"Invalid value {value} for configuration {key}:")


def test_values_are_trimmed_before_checking() -> None:
    assert config(num_partitions=" 4 ").get_int("num.partitions") == 4
    assert config(log_segment_bytes=" 2097152").values["log.segment.bytes"] == "2097152"


def test_scaled_retention_synonyms_are_accepted() -> None:
    loaded = config(log_retention_hours="1", log_retention_minutes="-1")
    assert loaded.get("log.retention.hours") == "1"


def test_inconsistent_topic_defaults_are_rejected() -> None:
    message = error_of(log_cleaner_min_compaction_lag_ms="10",
                       log_cleaner_max_compaction_lag_ms="5")
    assert "min.compaction.lag.ms" in message


# -- unknown keys ------------------------------------------------------------------------


def test_unknown_keys_are_kept_and_warned_about() -> None:
    loaded = ServerConfig({**BASE, "no.such.setting": "1", "log.bogus.thing": "2"})
    assert loaded.values["no.such.setting"] == "1"
    assert len(loaded.warnings) == 2
    assert any("'no.such.setting'" in warning for warning in loaded.warnings)
    assert any("'log.bogus.thing'" in warning for warning in loaded.warnings)


def test_known_keys_of_other_modules_are_not_warned_about() -> None:
    known = {
        "log.retention.hours": "24", "log.roll.hours": "1", "log.flush.interval.messages": "5",
        "log.cleaner.threads": "2", "max.connections": "100", "compression.type": "lz4",
        "offsets.topic.num.partitions": "10", "metadata.log.segment.ms": "60000",
        "listener.name.plaintext.max.connections": "10",
    }
    assert ServerConfig({**BASE, **known}).warnings == []


# -- endpoints and voters ---------------------------------------------------------------


def test_parse_endpoints() -> None:
    assert parse_endpoints("PLAINTEXT://h:1, controller://[::1]:2,EXTERNAL://:3", "listeners") == [
        Endpoint("PLAINTEXT", "h", 1), Endpoint("CONTROLLER", "::1", 2),
        Endpoint("EXTERNAL", "", 3)]
    assert parse_endpoints("", "listeners") == []


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("garbage", "expected LISTENER_NAME://host:port"),
        ("PLAINTEXT://h", "expected LISTENER_NAME://host:port"),
        ("PLAINTEXT://h:port", "expected LISTENER_NAME://host:port"),
        ("PLAIN TEXT://h:1", "expected LISTENER_NAME://host:port"),
        ("PLAINTEXT://h:65536", "out of range"),
        ("PLAINTEXT://h:1,PLAINTEXT://g:2", "different name"),
        ("A://h:1,B://h:1", "different host:port"),
    ],
)
def test_parse_endpoints_errors(value: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as caught:
        parse_endpoints(value, "listeners")
    assert "listeners" in str(caught.value)


def test_parse_voters() -> None:
    assert parse_voters("1@h:9093, 2@[::1]:9094") == {1: ("h", 9093), 2: ("::1", 9094)}
    assert parse_voters("") == {}


@pytest.mark.parametrize("value", ["x", "1@h", "a@h:1", "1@:1", "1@h:99999", "-1@h:1",
                                   "1@h:1,1@g:2"])
def test_parse_voters_errors(value: str) -> None:
    with pytest.raises(ConfigError, match="controller.quorum.voters"):
        parse_voters(value)


# -- the node's shape ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"node_id": None}, "Missing required configuration node.id"),
        ({"process_roles": None}, "Missing required configuration process.roles"),
        ({"process_roles": ""}, "process.roles"),
        ({"process_roles": "foo"},
         "Invalid value foo for configuration process.roles: String must be one of: broker, "
         "controller"),
        ({"process_roles": "broker,broker"}, "Duplicate role names found in `process.roles`"),
        ({"listeners": "garbage"}, "listeners"),
        # unset, CONTROLLER is not mapped to PLAINTEXT by default (Kafka's effective map)
        ({"controller_listener_names": None},
         "No security protocol defined for listener CONTROLLER"),
        # the controller role needs a controller listener
        ({"listeners": "PLAINTEXT://127.0.0.1:9092"}, "controller.listener.names"),
        # the broker role needs a listener that is not a controller listener
        ({"listeners": "CONTROLLER://127.0.0.1:9093"},
         "There must be at least one broker advertised listener"),
        # a controller-only node has only controller listeners
        ({"process_roles": "controller"},
         "listeners config must only contain KRaft controller listeners"),
        # a broker-only node is not a voter
        ({"process_roles": "broker", "listeners": "PLAINTEXT://127.0.0.1:9092"},
         "node id 1 must not be included in the set of voters"),
        ({"controller_quorum_voters": "2@127.0.0.1:9093"},
         "node id 1 must be included in the set of voters"),
        ({"controller_quorum_voters": ""}, "either controller.quorum.bootstrap.servers must"),
        ({"listener_security_protocol_map": "CONTROLLER:PLAINTEXT"},
         "No security protocol defined for listener PLAINTEXT"),
        ({"listener_security_protocol_map": "CONTROLLER:PLAINTEXT,PLAINTEXT:TLS"},
         "unknown security protocol TLS for listener PLAINTEXT"),
        ({"inter_broker_listener_name": "CONTROLLER"}, "inter.broker.listener.name"),
        ({"advertised_listeners": "bad"}, "advertised.listeners"),
        ({"advertised_listeners": "OTHER://h:1"},
         "No security protocol defined for listener OTHER"),
        ({"advertised_listeners": "CONTROLLER://h:9093"},
         "There must be at least one broker advertised listener"),
        ({"listener_security_protocol_map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,X:PLAINTEXT",
          "advertised_listeners": "PLAINTEXT://h:9092,X://h:1"},
         "advertised.listeners listener names must be equal to or a subset"),
        ({"inter_broker_listener_name": "OTHER"}, "Listener with name OTHER defined in"),
        ({"listeners": "PLAINTEXT://0.0.0.0:9092,CONTROLLER://127.0.0.1:9093"},
         "cannot use the nonroutable meta-address 0.0.0.0"),
    ],
)
def test_shape_errors(changes: dict[str, str | None], fragment: str) -> None:
    assert re.search(fragment, error_of(**changes))


def test_a_routable_advertised_listener_makes_a_wildcard_bind_fine() -> None:
    loaded = config(listeners="PLAINTEXT://0.0.0.0:9092,CONTROLLER://127.0.0.1:9093",
                    advertised_listeners="PLAINTEXT://broker.example:9092")
    assert loaded.advertised_listeners == [Endpoint("PLAINTEXT", "broker.example", 9092)]
    assert loaded.listeners[0].host == "0.0.0.0"


def test_several_voters_make_a_quorum() -> None:
    loaded = config(controller_quorum_voters="1@127.0.0.1:9093,2@127.0.0.1:9095,3@h:9097")
    assert loaded.voters == {1: ("127.0.0.1", 9093), 2: ("127.0.0.1", 9095), 3: ("h", 9097)}
    assert "must be included in the set of voters" in error_of(
        controller_quorum_voters="2@127.0.0.1:9095,3@h:9097")


def test_dedicated_roles() -> None:
    controller = config(process_roles="controller", listeners="CONTROLLER://127.0.0.1:9093",
                        advertised_listeners=None)
    assert controller.roles == {"controller"} and controller.advertised_listeners == []
    broker = config(node_id="4", process_roles="broker",
                    listeners="PLAINTEXT://127.0.0.1:9092",
                    controller_quorum_voters="1@127.0.0.1:9093")
    assert broker.roles == {"broker"} and broker.node_id not in broker.voters
    # a broker-only node dials the controllers; it does not listen as one
    assert "must not contain a value appearing in the 'listeners'" in error_of(
        node_id="4", process_roles="broker", controller_quorum_voters="1@127.0.0.1:9093")
    # a controller-only node must be a voter
    assert "must be included in the set of voters" in error_of(
        node_id="4", process_roles="controller", listeners="CONTROLLER://127.0.0.1:9093",
        advertised_listeners=None, controller_quorum_voters="1@127.0.0.1:9093")


def test_metrics_listener_is_host_and_port_or_nothing() -> None:
    assert config().metrics_listener is None
    assert config(pykraft_metrics_listener="127.0.0.1:9404").metrics_listener == (
        "127.0.0.1", 9404)
    assert config(pykraft_metrics_listener="[::1]:0").metrics_listener == ("::1", 0)
    for bad in ("9404", "host:", "host:99999", "http://h:1"):
        message = error_of(pykraft_metrics_listener=bad)
        assert "pykraft.metrics.listener" in message and bad in message


def test_group_coordinator_keys_are_known_and_checked_together() -> None:
    given = config(group_consumer_session_timeout_ms="50000",
                   group_consumer_assignors="range")
    assert given.warnings == []
    assert "group.consumer.min.session.timeout.ms" in error_of(
        group_consumer_session_timeout_ms="1000")
    assert "group.consumer.assignors" in error_of(group_consumer_assignors="fastest")
