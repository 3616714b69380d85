"""get-offsets, log-dirs, broker-api-versions and the verifiable producer and consumer, as a
user (or Kafka's system tests) runs them, against the session's real node."""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

from pykraft.cli.broker_api_versions import CLIENT_APIS
from tests.integration.tool_helpers import eventually, pykraft


def _topic(bootstrap: str, prefix: str, partitions: int = 2) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    created = pykraft("topics", "--bootstrap-server", bootstrap, "--create", "--topic", name,
                      "--partitions", str(partitions), "--replication-factor", "1")
    assert created.returncode == 0, created.stderr
    return name


def _events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def _produce(bootstrap: str, topic: str, count: int, *extra: str) -> list[dict[str, Any]]:
    result = pykraft("verifiable-producer", "--bootstrap-server", bootstrap, "--topic", topic,
                     "--max-messages", str(count), *extra)
    assert result.returncode == 0, result.stderr
    return _events(result.stdout)


@pytest.fixture
def bootstrap(pykraft_cluster: Any) -> str:
    return str(pykraft_cluster.bootstrap_servers)


def test_verifiable_producer_events(bootstrap: str) -> None:
    """Kafka's VerifiableProducer events: startup, one success per record with its offset,
    values `prefix.i`, keys cycling, then shutdown_complete and tool_data."""
    topic = _topic(bootstrap, "vprod")
    events = _produce(bootstrap, topic, 9, "--repeating-keys", "3", "--value-prefix", "7",
                      "--acks", "1")
    assert [e["name"] for e in events] == (["startup_complete"] + ["producer_send_success"] * 9
                                           + ["shutdown_complete", "tool_data"])
    sends = events[1:10]
    assert all(list(e) == ["timestamp", "name", "key", "value", "topic", "partition", "offset"]
               for e in sends)
    assert sorted(e["value"] for e in sends) == [f"7.{i}" for i in range(9)]
    by_value = {e["value"]: e for e in sends}
    assert [by_value[f"7.{i}"]["key"] for i in range(9)] == ["0", "1", "2"] * 3
    # one key, one partition (the Java client's murmur2 partitioner)
    assert len({(e["key"], e["partition"]) for e in sends}) == 3
    for partition in {e["partition"] for e in sends}:
        offsets = sorted(e["offset"] for e in sends if e["partition"] == partition)
        assert offsets == list(range(len(offsets)))
    tool_data = events[-1]
    assert list(tool_data) == ["timestamp", "name", "sent", "acked", "target_throughput",
                               "avg_throughput"]
    assert (tool_data["sent"], tool_data["acked"], tool_data["target_throughput"]) == (9, 9, -1)
    assert tool_data["avg_throughput"] > 0


def test_verifiable_producer_stops_on_sigterm(bootstrap: str) -> None:
    """An unbounded, throttled producer ends on SIGTERM with its last two events, as the
    system tests stop it."""
    topic = _topic(bootstrap, "vprod-term", partitions=1)
    process = subprocess.Popen(
        [sys.executable, "-m", "pykraft", "verifiable-producer", "--bootstrap-server",
         bootstrap, "--topic", topic, "--throughput", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while len([e for e in seen if e["name"] == "producer_send_success"]) < 3:
            assert time.monotonic() < deadline, seen
            seen.append(json.loads(process.stdout.readline()))
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, err
    events = seen + _events(out)
    assert [e["name"] for e in events[-2:]] == ["shutdown_complete", "tool_data"]
    sent, acked = events[-1]["sent"], events[-1]["acked"]
    assert acked == len([e for e in events if e["name"] == "producer_send_success"])
    assert 3 <= acked <= sent
    assert events[-1]["target_throughput"] == 20


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_verifiable_consumer_events(bootstrap: str, protocol: str) -> None:
    """Kafka's VerifiableConsumer events under both group protocols: assignment, records
    cut at --max-messages, a commit per poll without auto-commit, revocation on close."""
    topic = _topic(bootstrap, f"vcons-{protocol}")
    _produce(bootstrap, topic, 12, "--repeating-keys", "4")
    group = f"vgroup-{uuid.uuid4().hex[:8]}"
    result = pykraft("verifiable-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
                     "--group-id", group, "--group-protocol", protocol, "--max-messages", "10",
                     "--verbose", "--session-timeout", "10000")
    assert result.returncode == 0, result.stderr
    events = _events(result.stdout)
    names = [e["name"] for e in events]
    assert names[0] == "startup_complete" and names[-1] == "shutdown_complete"
    assert names[-2] == "partitions_revoked"
    assigned = [e for e in events if e["name"] == "partitions_assigned"]
    assert sorted(p["partition"] for e in assigned for p in e["partitions"]) == [0, 1]
    consumed = [e for e in events if e["name"] == "records_consumed"]
    assert sum(p["count"] for e in consumed for p in e["partitions"]) == 10
    assert len([e for e in events if e["name"] == "record_data"]) == 10
    commits = [e for e in events if e["name"] == "offsets_committed"]
    assert len(commits) == len(consumed) and all(e["success"] for e in commits)
    assert list(commits[0]) == ["timestamp", "name", "offsets", "success"]
    summary = consumed[0]["partitions"][0]
    assert list(summary) == ["topic", "partition", "count", "minOffset", "maxOffset"]
    last = {(o["topic"], o["partition"]): o["offset"] for e in commits for o in e["offsets"]}
    assert sum(last.values()) == 10

    described = pykraft("consumer-groups", "--bootstrap-server", bootstrap, "--describe",
                        "--group", group)
    assert described.returncode == 0, described.stderr
    committed = sum(int(line.split()[3]) for line in described.stdout.splitlines()
                    if line.startswith(group))
    assert committed == 10


def test_get_offsets(bootstrap: str) -> None:
    """GetOffsetShell's filters and times, `topic:partition:offset` lines in Kafka's order."""
    topic = _topic(bootstrap, "offsets", partitions=3)
    before_ms = int(time.time() * 1000) - 1
    sends = _produce(bootstrap, topic, 8, "--repeating-keys", "2")[1:9]
    ends = {p: 1 + max(e["offset"] for e in sends if e["partition"] == p)
            for p in {e["partition"] for e in sends}}

    def lines(*argv: str) -> list[str]:
        result = pykraft("get-offsets", "--bootstrap-server", bootstrap, *argv)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    assert lines("--topic", topic) == [f"{topic}:{p}:{ends.get(p, 0)}" for p in range(3)]
    assert lines("--topic", topic, "--time", "-2") == [f"{topic}:{p}:0" for p in range(3)]
    # an empty partition has no offset at or after a timestamp: no line, as in Kafka
    assert lines("--topic", topic, "--time", str(before_ms)) \
        == [f"{topic}:{p}:0" for p in sorted(ends)]
    assert lines("--topic", topic, "--time", "max-timestamp") \
        == [line for line in lines("--topic", topic, "--time", "-3")]
    assert len(lines("--topic", topic, "--time", "-3")) == len(ends)
    assert lines("--topic", topic, "--time", str(int(time.time() * 1000) + 3_600_000)) == []
    assert lines("--topic", topic, "--partitions", "2,0") \
        == [f"{topic}:{p}:{ends.get(p, 0)}" for p in (0, 2)]
    assert lines("--topic-partitions", f"{topic}:1-") \
        == [f"{topic}:{p}:{ends.get(p, 0)}" for p in (1, 2)]
    assert all(not line.startswith("__") for line in lines("--exclude-internal-topics"))

    bad = pykraft("get-offsets", "--bootstrap-server", bootstrap, "--time", "yesterday")
    assert bad.returncode == 1 and bad.stderr.startswith("Error: Malformed time argument yesterday")
    none = pykraft("get-offsets", "--bootstrap-server", bootstrap, "--topic", "no-such-.*")
    assert (none.returncode, none.stderr) == (
        1, "Error: Could not match any topic-partitions with the specified filters\n")


def test_log_dirs(bootstrap: str, pykraft_cluster: Any) -> None:
    """kafka-log-dirs.sh's lines and JSON (keys in Kafka's order), sizes from the broker's
    DescribeLogDirs, --topic-list filtering and an unknown broker refused."""
    topic = _topic(bootstrap, "logdirs")
    _produce(bootstrap, topic, 4, "--repeating-keys", "2")
    node = pykraft_cluster.node_id

    def described() -> dict[str, Any]:
        result = pykraft("log-dirs", "--describe", "--bootstrap-server", bootstrap,
                         "--topic-list", topic)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[:2] == ["Querying brokers for log directories information",
                             f"Received log directory information from brokers {node}"]
        assert len(lines) == 3
        assert lines[2].startswith(f'{{"brokers":[{{"broker":{node},"logDirs":[{{"partitions":[')
        assert lines[2].endswith('],"version":1}')
        document: dict[str, Any] = json.loads(lines[2])
        partitions = document["brokers"][0]["logDirs"][0]["partitions"]
        assert sum(p["size"] for p in partitions) > 0
        return document

    document = eventually(described)
    log_dir = document["brokers"][0]["logDirs"][0]
    assert list(log_dir) == ["partitions", "error", "logDir"]
    assert log_dir["error"] is None and log_dir["logDir"]
    assert [p["partition"] for p in log_dir["partitions"]] == [f"{topic}-0", f"{topic}-1"]
    assert all(list(p) == ["partition", "size", "offsetLag", "isFuture"]
               and p["offsetLag"] == 0 and p["isFuture"] is False
               for p in log_dir["partitions"])

    missing = pykraft("log-dirs", "--describe", "--bootstrap-server", bootstrap,
                      "--broker-list", f"{node},99")
    assert missing.returncode == 1
    assert missing.stderr == ("Error: The given brokers do not exist from --broker-list: 99. "
                              f"Current existent brokers: {node}\n")


def test_broker_api_versions(bootstrap: str, pykraft_cluster: Any) -> None:
    """NodeApiVersions' text: one block per broker, Kafka's API names, usable versions."""
    result = pykraft("broker-api-versions", "--bootstrap-server", bootstrap)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    node = pykraft_cluster.node_id
    assert lines[0] == f"{bootstrap} (id: {node} rack: null isFenced: false) -> ("
    assert lines[-1] == ")"
    body = lines[1:-1]
    line = re.compile(r"\t[A-Za-z]+\((\d+)\): (\d+( to \d+)? \[usable: \d+\]|UNSUPPORTED),?")
    assert all(line.fullmatch(text) for text in body), body
    keys = [int(line.fullmatch(text).group(1)) for text in body]  # type: ignore[union-attr]
    assert keys == sorted(keys)
    assert all(text.endswith(",") for text in body[:-1]) and not body[-1].endswith(",")
    assert re.fullmatch(r"\tProduce\(0\): 3 to \d+ \[usable: \d+\],", body[0])
    assert "\tApiVersions(18): 0 to 4 [usable: 4]," in body
    assert set(keys) >= CLIENT_APIS  # an API the broker does not list is UNSUPPORTED


_DOCUMENTED_TOOLS = ("topics", "console-producer", "console-consumer", "delete-records",
                     "leader-election", "reassign-partitions", "log-cleaner", "perf", "cluster",
                     "configs", "get-offsets", "broker-api-versions", "log-dirs",
                     "verifiable-producer", "verifiable-consumer")


def _undocumented(parser: argparse.ArgumentParser, path: str) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += _undocumented(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_option_has_help() -> None:
    """`pykraft TOOL --help` describes every option of these tools (and exits 0)."""
    from pykraft.cli.main import build_parser

    commands = next(action for action in build_parser()._actions
                    if isinstance(action, argparse._SubParsersAction))
    missing = [line for tool in _DOCUMENTED_TOOLS
               for line in _undocumented(commands.choices[tool], tool)]
    assert missing == []
    result = pykraft("configs", "--help")
    assert result.returncode == 0 and "--add-config-file" in result.stdout
