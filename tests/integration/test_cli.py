"""The `pykraft` tools as a user runs them (subprocesses) against a real pykraft node."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import pytest

from tests.integration.tool_helpers import eventually, pykraft

TOPIC_ERROR = "Error while executing topic command : "


def new_topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, *extra: str) -> None:
    result = pykraft(
        "topics",
        "--bootstrap-server",
        bootstrap,
        "--create",
        "--topic",
        name,
        "--partitions",
        "1",
        "--replication-factor",
        "1",
        *extra,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"Created topic {name}.\n"


@pytest.fixture
def bootstrap(pykraft_cluster: Any) -> str:
    return str(pykraft_cluster.bootstrap_servers)


# -- topics --------------------------------------------------------------------------------


def test_topics_create_describe_alter_delete(bootstrap: str, pykraft_cluster: Any) -> None:
    """The whole life of a topic through kafka-topics.sh's verbs and output formats."""
    name = new_topic_name("cli-topic")
    result = pykraft(
        "topics",
        "--bootstrap-server",
        bootstrap,
        "--create",
        "--topic",
        name,
        "--partitions",
        "2",
        "--replication-factor",
        "1",
        "--config",
        "retention.ms=123456",
    )
    assert (result.returncode, result.stdout) == (0, f"Created topic {name}.\n"), result.stderr

    listed = pykraft("topics", "--bootstrap-server", bootstrap, "--list")
    assert name in listed.stdout.splitlines()

    def described() -> list[str]:
        result = pykraft("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", name)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    lines = eventually(described)
    assert re.fullmatch(
        rf"Topic: {name}(\tTopicId: \S+)?\tPartitionCount: 2\tReplicationFactor: 1"
        r"\tConfigs: (.*,)?retention\.ms=123456(,.*)?",
        lines[0],
    ), lines[0]
    node = pykraft_cluster.node_id
    assert lines[1:] == [
        f"\tTopic: {name}\tPartition: {partition}\tLeader: {node}\tReplicas: {node}\tIsr: {node}"
        for partition in (0, 1)
    ]

    result = pykraft(
        "topics", "--bootstrap-server", bootstrap, "--alter", "--topic", name, "--partitions", "4"
    )
    assert result.returncode == 0, result.stderr

    def four_partitions() -> None:
        assert "\tPartitionCount: 4\t" in described()[0]

    eventually(four_partitions)

    result = pykraft(
        "topics",
        "--bootstrap-server",
        bootstrap,
        "--alter",
        "--topic",
        name,
        "--config",
        "retention.ms=999",
        "--delete-config",
        "segment.ms",
    )
    assert result.returncode == 0, result.stderr

    def altered() -> None:
        summary = described()[0]
        assert "retention.ms=999" in summary
        assert "segment.ms=" not in summary

    eventually(altered)

    result = pykraft("topics", "--bootstrap-server", bootstrap, "--delete", "--topic", name)
    assert result.returncode == 0, result.stderr

    def gone() -> None:
        listed = pykraft("topics", "--bootstrap-server", bootstrap, "--list")
        assert name not in listed.stdout.splitlines()

    eventually(gone)


def test_creating_an_existing_topic_fails_unless_if_not_exists(bootstrap: str) -> None:
    name = new_topic_name("cli-exists")
    create_topic(bootstrap, name)
    again = pykraft("topics", "--bootstrap-server", bootstrap, "--create", "--topic", name)
    assert again.returncode == 1
    assert again.stderr.startswith(TOPIC_ERROR)
    assert "already exists" in again.stderr
    assert "Traceback" not in again.stderr
    quiet = pykraft(
        "topics", "--bootstrap-server", bootstrap, "--create", "--topic", name, "--if-not-exists"
    )
    assert (quiet.returncode, quiet.stdout) == (0, "")


def test_missing_topic_is_an_error_unless_if_exists(bootstrap: str) -> None:
    name = new_topic_name("cli-missing")
    missing = pykraft("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", name)
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"{TOPIC_ERROR}Topic '{name}' does not exist as expected"
    quiet = pykraft(
        "topics", "--bootstrap-server", bootstrap, "--delete", "--topic", name, "--if-exists"
    )
    assert (quiet.returncode, quiet.stdout) == (0, "")


# -- console producer and consumer ---------------------------------------------------------


def test_console_round_trip_with_keys_and_headers(bootstrap: str) -> None:
    """Keyed, headered lines in; the consumer prints offset, headers, key and value."""
    name = new_topic_name("cli-console")
    create_topic(bootstrap, name)
    produced = pykraft(
        "console-producer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        name,
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        "--property",
        "parse.headers=true",
        "--property",
        "headers.delimiter=|",
        stdin="h1:x|k1:v1\n|k2:v2\n|:v3\n",
    )
    assert produced.returncode == 0, produced.stderr

    consumed = pykraft(
        "console-consumer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        name,
        "--from-beginning",
        "--max-messages",
        "3",
        "--timeout-ms",
        "30000",
        "--property",
        "print.key=true",
        "--property",
        "print.offset=true",
        "--property",
        "print.headers=true",
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [
        "Offset:0\th1:x\tk1\tv1",
        "Offset:1\tNO_HEADERS\tk2\tv2",
        "Offset:2\tNO_HEADERS\t\tv3",
    ]
    assert "Processed a total of 3 messages" in consumed.stderr


def test_console_consumer_from_partition_offset_and_timeout(bootstrap: str) -> None:
    """--partition/--offset start mid-log; --timeout-ms ends a consumer with nothing new."""
    name = new_topic_name("cli-offset")
    create_topic(bootstrap, name)
    lines = "".join(f"value-{index}\n" for index in range(5))
    produced = pykraft(
        "console-producer", "--bootstrap-server", bootstrap, "--topic", name, stdin=lines
    )
    assert produced.returncode == 0, produced.stderr

    from_offset = pykraft(
        "console-consumer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        name,
        "--partition",
        "0",
        "--offset",
        "3",
        "--timeout-ms",
        "5000",
    )
    assert from_offset.returncode == 0, from_offset.stderr
    assert from_offset.stdout.splitlines() == ["value-3", "value-4"]
    assert "Processed a total of 2 messages" in from_offset.stderr

    latest = pykraft(
        "console-consumer", "--bootstrap-server", bootstrap, "--topic", name, "--timeout-ms", "2000"
    )
    assert (latest.returncode, latest.stdout) == (0, "")
    assert "Processed a total of 0 messages" in latest.stderr


# -- perf ----------------------------------------------------------------------------------

PRODUCE_FINAL = re.compile(
    r"(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
    r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\."
)


def test_perf_produce_then_consume(bootstrap: str) -> None:
    name = new_topic_name("cli-perf")
    create_topic(bootstrap, name)
    produced = pykraft(
        "perf",
        "produce",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        name,
        "--num-records",
        "20000",
        "--record-size",
        "100",
        "--producer-props",
        "acks=1",
    )
    assert produced.returncode == 0, produced.stderr
    final = PRODUCE_FINAL.fullmatch(produced.stdout.splitlines()[-1])
    assert final is not None, produced.stdout
    assert final.group(1) == "20000"

    consumed = pykraft(
        "perf",
        "consume",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        name,
        "--messages",
        "20000",
        "--timeout-ms",
        "30000",
    )
    assert consumed.returncode == 0, consumed.stderr
    header, values = consumed.stdout.splitlines()
    assert header.startswith("start.time, end.time, data.consumed.in.MB")
    columns = values.split(", ")
    assert columns[4] == "20000"
    assert float(columns[2]) == pytest.approx(20000 * 100 / 1024 / 1024, abs=1e-4)


def test_perf_produce_throttles_to_the_requested_throughput(bootstrap: str) -> None:
    """--throughput 500 for 1000 records takes about two seconds, not a few milliseconds."""
    name = new_topic_name("cli-throttle")
    create_topic(bootstrap, name)
    started = time.monotonic()
    produced = pykraft(
        "perf",
        "produce",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        name,
        "--num-records",
        "1000",
        "--record-size",
        "10",
        "--throughput",
        "500",
    )
    assert produced.returncode == 0, produced.stderr
    assert time.monotonic() - started >= 1.9


# -- dump-log on the broker's own files ----------------------------------------------------


def test_dump_log_reads_the_segment_the_broker_wrote(bootstrap: str, pykraft_cluster: Any) -> None:
    name = new_topic_name("cli-dump")
    create_topic(bootstrap, name)
    produced = pykraft(
        "console-producer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        name,
        "--property",
        "parse.key=true",
        stdin="key-a\tpayload-a\nkey-b\tpayload-b\n",
    )
    assert produced.returncode == 0, produced.stderr
    segment = pykraft_cluster.log_dir / f"{name}-0" / "00000000000000000000.log"

    def dumped() -> list[str]:
        result = pykraft("dump-log", "--files", str(segment), "--print-data-log")
        assert result.returncode == 0, result.stderr
        records = [line for line in result.stdout.splitlines() if line.startswith("| offset:")]
        assert len(records) == 2
        return records

    records = eventually(dumped)
    assert records[0].startswith("| offset: 0 CreateTime: ")
    assert records[0].endswith("key: key-a payload: payload-a")
    assert records[1].endswith("key: key-b payload: payload-b")


def test_replica_assignment_creates_and_grows_a_topic(bootstrap: str, pykraft_cluster: Any) -> None:
    """--replica-assignment gives every partition's replicas (it once failed in the client:
    confluent-kafka refuses an assignment without a partition count); --alter lists them all
    and only the new ones are sent, so a list of the wrong length is Kafka's error."""
    name = new_topic_name("cli-assigned")
    node = str(pykraft_cluster.node_id)
    created = pykraft("topics", "--bootstrap-server", bootstrap, "--create", "--topic", name,
                      "--replica-assignment", f"{node},{node}")
    assert (created.returncode, created.stdout) == (0, f"Created topic {name}.\n"), created.stderr

    short = pykraft("topics", "--bootstrap-server", bootstrap, "--alter", "--topic", name,
                    "--partitions", "4", "--replica-assignment", node)
    assert (short.returncode, short.stderr) == (1, f"{TOPIC_ERROR}Attempted to add 2 additional "
                                                   "partition(s), but only 0 assignment(s) "
                                                   "were specified.\n")
    grown = pykraft("topics", "--bootstrap-server", bootstrap, "--alter", "--topic", name,
                    "--partitions", "3", "--replica-assignment", ",".join([node] * 3))
    assert grown.returncode == 0, grown.stderr

    def three_partitions() -> None:
        result = pykraft("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", name)
        assert "\tPartitionCount: 3\t" in result.stdout.splitlines()[0]

    eventually(three_partitions)
