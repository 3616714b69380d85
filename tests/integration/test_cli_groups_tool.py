"""`pykraft consumer-groups` (offset deletion, the reset scenarios, the CSV plan, --verbose)
and `pykraft features disable`, run as a user runs them against the session's real node,
with real clients committing the offsets."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.group_helpers import poll_until
from tests.integration.tool_helpers import pykraft


def tool(*argv: str) -> subprocess.CompletedProcess[str]:
    result = pykraft(*argv, timeout_s=90)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def topic_with_records(bootstrap: str, counts: tuple[int, ...]) -> str:
    """A topic with counts[p] records in partition p."""
    name = unique("groups-tool")
    created = tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", name,
                   "--partitions", str(len(counts)), "--replication-factor", "1")
    assert created.returncode == 0, created.stderr
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, count in enumerate(counts):
        for i in range(count):
            producer.produce(name, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0
    return name


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    committer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                     asynchronous=False)
    committer.close()


def committed_rows(bootstrap: str, group: str) -> dict[tuple[str, int], str]:
    """--describe's CURRENT-OFFSET per partition (a group without members)."""
    described = tool("consumer-groups", "--bootstrap-server", bootstrap, "--describe",
                     "--group", group)
    assert described.returncode == 0, described.stderr
    assert described.stderr == f"\nConsumer group '{group}' has no active members.\n"
    rows = [line.split() for line in described.stdout.strip().splitlines()[1:]]
    return {(row[1], int(row[2])): row[3] for row in rows}


def test_reset_scenarios_export_and_from_file(pykraft_cluster: Any, tmp_path: Path) -> None:
    bootstrap = pykraft_cluster.bootstrap_servers
    topic, group = topic_with_records(bootstrap, (5, 3)), unique("reset-group")
    commit(bootstrap, group, {(topic, 0): 2})
    base = ("consumer-groups", "--bootstrap-server", bootstrap, "--reset-offsets", "--group",
            group, "--topic", topic)

    # --to-current keeps a committed offset and takes the log end where there is none;
    # --export prints the plan as Kafka's topic,partition,offset CSV
    exported = tool(*base, "--to-current", "--export", "--dry-run")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.splitlines() == [f"{topic},0,2", f"{topic},1,3", ""]

    # a day back: every record is newer, so the first offset; no time back: the end
    day = tool(*base, "--by-duration", "P1D", "--dry-run")
    assert [line.split()[-1] for line in day.stdout.splitlines()[1:]] == ["0", "0"], day.stderr
    now = tool(*base, "--by-duration", "PT0S", "--dry-run")
    assert [line.split()[-1] for line in now.stdout.splitlines()[1:]] == ["5", "3"], now.stderr
    assert committed_rows(bootstrap, group) == {(topic, 0): "2"}  # dry runs change nothing

    # the plan read back from a file; an offset past the end is clamped to it, as Kafka does
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{topic},0,4\n{topic},1,99\n")
    executed = tool("consumer-groups", "--bootstrap-server", bootstrap, "--reset-offsets",
                    "--group", group, "--from-file", str(plan), "--execute")
    assert executed.returncode == 0, executed.stderr
    assert executed.stdout.split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET",
                                       group, topic, "0", "4", group, topic, "1", "3"]
    assert committed_rows(bootstrap, group) == {(topic, 0): "4", (topic, 1): "3"}

    # the group-qualified form names other groups: none for this one is Kafka's error
    other = tmp_path / "other.csv"
    other.write_text(f"other-group,{topic},0,1\n")
    missing = tool("consumer-groups", "--bootstrap-server", bootstrap, "--reset-offsets",
                   "--group", group, "--from-file", str(other), "--execute")
    assert missing.returncode == 1
    assert f"No reset plan for group {group} found" in missing.stderr

    shift = tool(*base, "--shift-by", "-1", "--execute")
    assert shift.returncode == 0, shift.stderr
    assert committed_rows(bootstrap, group) == {(topic, 0): "3", (topic, 1): "2"}


def test_delete_offsets(pykraft_cluster: Any) -> None:
    bootstrap = pykraft_cluster.bootstrap_servers
    topic, group = topic_with_records(bootstrap, (2, 2)), unique("delete-offsets-group")
    commit(bootstrap, group, {(topic, 0): 1, (topic, 1): 2})
    base = ("consumer-groups", "--bootstrap-server", bootstrap, "--delete-offsets", "--group",
            group)

    deleted = tool(*base, "--topic", f"{topic}:0")
    assert deleted.returncode == 0, deleted.stderr
    lines = deleted.stdout.splitlines()
    assert lines[0] == f"Request succeed for deleting offsets with topic {topic}:0 group {group}"
    assert [line.split() for line in lines[2:]] == [["TOPIC", "PARTITION", "STATUS"],
                                                    [topic, "0", "Successful"]]
    assert committed_rows(bootstrap, group) == {(topic, 1): "2"}

    # a whole topic, and one that does not exist: its row says so, the request fails
    unknown = unique("no-such-topic")
    mixed = tool(*base, "--topic", topic, "--topic", unknown)
    assert mixed.returncode == 1
    assert mixed.stdout.splitlines()[1] == (
        "Error: Encounter some partition level error, see the follow-up details:")
    rows = [line.split(None, 2) for line in mixed.stdout.strip().splitlines()[3:]]
    assert rows == [[topic, "0", "Successful"], [topic, "1", "Successful"],
                    [unknown, "Not", "Provided Error: :This server does not host this "
                     "topic-partition."]]  # by name: "groups-tool-..." before "no-such-..."
    # no offsets and no members left: the group is gone, as in Kafka
    described = tool("consumer-groups", "--bootstrap-server", bootstrap, "--describe",
                     "--group", group)
    assert described.returncode == 1
    assert f"Error: Consumer group '{group}' does not exist." in described.stderr

    nobody = unique("no-such-group")
    gone = tool("consumer-groups", "--bootstrap-server", bootstrap, "--delete-offsets",
                "--group", nobody, "--topic", topic)
    assert gone.returncode == 1
    assert gone.stdout.splitlines()[1] == f"Error: '{nobody}' does not exist."


def test_describe_members_verbose_and_states(pykraft_cluster: Any) -> None:
    bootstrap = pykraft_cluster.bootstrap_servers
    topic, group = topic_with_records(bootstrap, (1, 1)), unique("verbose-group")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "client.id": "verbose-client", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        poll_until([consumer], lambda: len(consumer.assignment()) == 2)
        members = tool("consumer-groups", "--bootstrap-server", bootstrap, "--describe",
                       "--group", group, "--members", "--verbose")
        assert members.returncode == 0, members.stderr
        header, row = members.stdout.strip().splitlines()
        assert header.split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                  "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                                  "TARGET-ASSIGNMENT"]
        assert row.split()[0] == group
        # a classic group: no epochs, no target; the assignment in Kafka 4's topic:p,p form
        assert row.split()[3:] == ["verbose-client", "2", "-", f"{topic}:0,1", "-", "-"]

        consumer.commit(offsets=[TopicPartition(topic, 0, 1, leader_epoch=0)],
                        asynchronous=False)
        offsets = tool("consumer-groups", "--bootstrap-server", bootstrap, "--describe",
                       "--group", group, "--verbose")
        assert offsets.returncode == 0, offsets.stderr
        header, *rows = [line.split() for line in offsets.stdout.strip().splitlines()]
        assert header[:7] == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET",
                              "LOG-END-OFFSET", "LAG"]
        assert rows[0][:7] == [group, topic, "0", "0", "1", "1", "0"]  # the epoch committed
        assert rows[1][:4] == [group, topic, "1", "-"]  # owned, nothing committed

        state = tool("consumer-groups", "--bootstrap-server", bootstrap, "--describe",
                     "--group", group, "--state", "--verbose")
        assert state.returncode == 0, state.stderr
        header, row = state.stdout.strip().splitlines()
        assert header.split()[-3:] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
        assert row.split()[-4:] == ["Stable", "-", "-", "1"]

        listed = tool("consumer-groups", "--bootstrap-server", bootstrap, "--list", "--state",
                      "Stable")
        assert [group, "Stable"] in [line.split() for line in listed.stdout.splitlines()]
    finally:
        consumer.close()

    # no group in a state: Kafka's header alone
    dead = tool("consumer-groups", "--bootstrap-server", bootstrap, "--list", "--state", "Dead")
    assert (dead.returncode, dead.stdout.split()) == (0, ["GROUP", "STATE"]), dead.stderr
    missing = tool("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group",
                   "no-such-group-at-all")
    assert missing.returncode == 1
    assert "Error: Consumer group 'no-such-group-at-all' does not exist." in missing.stderr


def test_disabling_an_unknown_feature_is_refused(pykraft_cluster: Any) -> None:
    disabled = tool("features", "--bootstrap-server", pykraft_cluster.bootstrap_servers,
                    "disable", "--feature", "no.such.feature")
    assert disabled.returncode == 1
    assert disabled.stdout.strip() == (
        "Could not disable no.such.feature. INVALID_UPDATE_VERSION: The update failed for all "
        "features since the following feature had an error: Invalid update version 0 for "
        "feature no.such.feature. Feature no.such.feature not found.")
    assert "1 out of 1 operation(s) failed." in disabled.stderr
