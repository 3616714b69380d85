"""`pykraft metadata-quorum` and `pykraft dump-log --cluster-metadata-decoder`, run as a user
runs them (subprocesses) against a real node and the metadata log it wrote."""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

from kio.schema.describe_quorum.v2.request import (
    DescribeQuorumRequest,
    PartitionData,
    TopicData,
)
from kio.schema.types import TopicName
from kio.static.primitive import i32

from pykraft.metadata.codec import encode_metadata_record
from pykraft.metadata.records import TopicRecord
from pykraft.raft.control import (
    leader_change_record,
    snapshot_footer_record,
    snapshot_header_record,
)
from pykraft.raft.messages import SnapshotId
from pykraft.raft.snapshot import build_snapshot, snapshot_file_name
from pykraft.records.batch import iter_headers
from pykraft.records.record import build_batch, iter_records
from pykraft.storage.checkpoint import kafka_uuid_string
from pykraft.testing.wire import WireClient
from tests.integration.tool_helpers import eventually, pykraft

METADATA_SEGMENT = Path("__cluster_metadata-0") / "00000000000000000000.log"


def wire_describe_quorum(address: str) -> Any:
    request = DescribeQuorumRequest(
        topics=(
            TopicData(
                topic_name=TopicName("__cluster_metadata"),
                partitions=(PartitionData(partition_index=i32(0)),),
            ),
        )
    )
    with WireClient(address) as client:
        response = client.request(55, 2, request)
    return response.topics[0].partitions[0]


def status_fields(stdout: str) -> dict[str, str]:
    fields = {}
    for line in stdout.splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.strip()
    return fields


# -- metadata-quorum -----------------------------------------------------------------------


def test_status_matches_describe_quorum(pykraft_cluster: Any) -> None:
    controller = f"127.0.0.1:{pykraft_cluster.controller_port}"
    for option, address in (
        ("--bootstrap-controller", controller),
        ("--bootstrap-server", pykraft_cluster.bootstrap_servers),
    ):
        before = wire_describe_quorum(address)
        result = pykraft("metadata-quorum", option, address, "describe", "--status")
        after = wire_describe_quorum(address)
        assert result.returncode == 0, result.stderr
        fields = status_fields(result.stdout)
        assert list(fields) == [
            "ClusterId",
            "LeaderId",
            "LeaderEpoch",
            "HighWatermark",
            "MaxFollowerLag",
            "MaxFollowerLagTimeMs",
            "CurrentVoters",
            "CurrentObservers",
        ]
        assert fields["ClusterId"] == pykraft_cluster.cluster_id
        assert int(fields["LeaderId"]) == before.leader_id == pykraft_cluster.node_id
        assert int(fields["LeaderEpoch"]) == before.leader_epoch == after.leader_epoch
        assert before.high_watermark <= int(fields["HighWatermark"]) <= after.high_watermark
        assert before.high_watermark > 0
        assert fields["MaxFollowerLag"] == "0" and fields["MaxFollowerLagTimeMs"] == "0"
        assert json.loads(fields["CurrentVoters"]) == [
            {"id": pykraft_cluster.node_id, "endpoints": [f"CONTROLLER://{controller}"]}
        ]
        assert fields["CurrentObservers"] == "[]"


def test_replication_lists_the_leader(pykraft_cluster: Any) -> None:
    controller = f"127.0.0.1:{pykraft_cluster.controller_port}"
    before = wire_describe_quorum(controller)
    started_ms = int(time.time() * 1000)
    result = pykraft(
        "metadata-quorum", "--bootstrap-controller", controller, "describe", "--replication"
    )
    finished_ms = int(time.time() * 1000)
    after = wire_describe_quorum(controller)
    assert result.returncode == 0, result.stderr
    rows = [[cell.strip() for cell in line.split("\t")[:-1]] for line in result.stdout.splitlines()]
    assert rows[0] == [
        "NodeId",
        "DirectoryId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    ]
    assert len(rows) == 2
    node_id, directory_id, end_offset, lag, fetched, caught_up, status = rows[1]
    assert (node_id, lag, status) == (str(pykraft_cluster.node_id), "0", "Leader")
    assert directory_id == "AAAAAAAAAAAAAAAAAAAAAA"  # the node does not report it (yet)
    assert before.high_watermark <= int(end_offset) <= after.current_voters[0].log_end_offset
    assert started_ms - 5000 <= int(fetched) <= finished_ms
    assert started_ms - 5000 <= int(caught_up) <= finished_ms

    readable = pykraft(
        "metadata-quorum",
        "--bootstrap-controller",
        controller,
        "describe",
        "--replication",
        "--human-readable",
    )
    assert readable.returncode == 0, readable.stderr
    assert re.search(r"\t\d+ ms ago\s*\t\d+ ms ago\s*\tLeader\s*\t$", readable.stdout, re.MULTILINE)


def test_an_unreachable_controller_is_a_one_line_error(pykraft_cluster: Any) -> None:
    with WireClient(pykraft_cluster.bootstrap_servers):
        pass  # the node is up: only the address below is wrong
    result = pykraft(
        "metadata-quorum", "--bootstrap-controller", "127.0.0.1:1", "describe", "--status"
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == "Error: cannot connect to 127.0.0.1:1 (Connection refused)\n"


def test_a_dead_server_is_skipped_for_the_next(pykraft_cluster: Any) -> None:
    controller = f"127.0.0.1:{pykraft_cluster.controller_port}"
    result = pykraft(
        "metadata-quorum",
        "--bootstrap-controller",
        f"127.0.0.1:1,{controller}",
        "describe",
        "--status",
    )
    assert result.returncode == 0, result.stderr
    assert status_fields(result.stdout)["LeaderId"] == str(pykraft_cluster.node_id)


# -- dump-log --cluster-metadata-decoder ---------------------------------------------------


def new_topic(bootstrap: str) -> tuple[str, str]:
    """Create a topic with the topics tool; return its name and its id as the tool prints."""
    name = f"quorum-tools-{uuid.uuid4().hex[:8]}"
    created = pykraft(
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
    assert created.returncode == 0, created.stderr

    def described() -> str:
        result = pykraft("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", name)
        assert result.returncode == 0, result.stderr
        match = re.search(r"TopicId: (\S+)", result.stdout)
        assert match is not None, result.stdout
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", match.group(1)), "Kafka's URL-safe form"
        return match.group(1)

    return name, eventually(described)


def payloads(stdout: str) -> list[dict[str, Any]]:
    return [
        json.loads(line.split(" payload: ", 1)[1])
        for line in stdout.splitlines()
        if " payload: " in line
    ]


def test_dump_log_decodes_the_nodes_metadata_log(pykraft_cluster: Any) -> None:
    name, topic_id = new_topic(pykraft_cluster.bootstrap_servers)
    segment = pykraft_cluster.log_dir / METADATA_SEGMENT

    def dumped() -> list[dict[str, Any]]:
        result = pykraft("dump-log", "--cluster-metadata-decoder", "--files", str(segment))
        assert result.returncode == 0, result.stderr
        records = payloads(result.stdout)
        assert {"name": name, "topicId": topic_id} in [
            record["data"] for record in records if record["type"] == "TOPIC_RECORD"
        ]
        return records

    records = eventually(dumped)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_type.setdefault(record["type"], []).append(record["data"])
    assert {
        "name": "metadata.version",
        "featureLevel": by_type["FEATURE_LEVEL_RECORD"][0]["featureLevel"],
    } in by_type["FEATURE_LEVEL_RECORD"]
    assert pykraft_cluster.node_id in [r["brokerId"] for r in by_type["REGISTER_BROKER_RECORD"]]
    partitions = [r for r in by_type["PARTITION_RECORD"] if r["topicId"] == topic_id]
    assert sorted(r["partitionId"] for r in partitions) == [0, 1]
    assert all(r["replicas"] == [pykraft_cluster.node_id] for r in partitions)
    assert {
        "resourceType": 2,
        "resourceName": name,
        "name": "retention.ms",
        "value": "123456",
    } in by_type["CONFIG_RECORD"]
    # the first record of the log is the leader's LeaderChange control record
    result = pykraft("dump-log", "--cluster-metadata-decoder", "--files", str(segment))
    first_record = next(line for line in result.stdout.splitlines() if line.startswith("| "))
    assert " LeaderChange: " in first_record
    leader_change = json.loads(first_record.split(" LeaderChange: ", 1)[1])
    assert leader_change["leaderId"] == pykraft_cluster.node_id


def test_dump_log_of_a_truncated_metadata_segment_fails_after_the_valid_part(
    pykraft_cluster: Any, tmp_path: Path
) -> None:
    new_topic(pykraft_cluster.bootstrap_servers)
    data = (pykraft_cluster.log_dir / METADATA_SEGMENT).read_bytes()
    whole = pykraft("dump-log", "--files", str(pykraft_cluster.log_dir / METADATA_SEGMENT))
    positions = [int(match) for match in re.findall(r" position: (\d+) ", whole.stdout)]
    assert len(positions) >= 3
    cut = positions[-1] + 20  # into the last batch's header
    copy = tmp_path / "00000000000000000000.log"
    copy.write_bytes(data[:cut])
    result = pykraft("dump-log", "--cluster-metadata-decoder", "--files", str(copy))
    assert result.returncode == 1
    batch_lines = [line for line in result.stdout.splitlines() if line.startswith("baseOffset:")]
    assert len(batch_lines) == len(positions) - 1
    assert result.stdout.splitlines()[-1] == (f"Found 20 invalid bytes at the end of {copy.name}")
    assert result.stderr == (
        f"Error: {copy}: 20 invalid bytes at position {positions[-1]} "
        "(a truncated or corrupt batch)\n"
    )


def test_dump_log_decodes_a_hand_built_snapshot(tmp_path: Path) -> None:
    def control(offset: int, record: tuple[bytes, bytes]) -> bytes:
        key, value = record
        return build_batch(
            [(key, value, [], 1)], base_offset=offset, is_control=True, partition_leader_epoch=2
        )

    topic_id = uuid.uuid4()
    snapshot = tmp_path / "00000000000000000004-0000000002.checkpoint"
    snapshot.write_bytes(
        b"".join(
            [
                control(0, snapshot_header_record(last_contained_log_timestamp=1234)),
                control(
                    1,
                    leader_change_record(
                        leader_id=1, voters=frozenset({1}), granting_voters=frozenset({1})
                    ),
                ),
                build_batch(
                    [
                        (
                            None,
                            encode_metadata_record(TopicRecord(name="snap", topic_id=topic_id)),
                            [],
                            1,
                        )
                    ],
                    base_offset=2,
                    partition_leader_epoch=2,
                ),
                control(3, snapshot_footer_record()),
            ]
        )
    )
    result = pykraft("dump-log", "--cluster-metadata-decoder", str(snapshot))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == "Snapshot end offset: 4, epoch: 2"
    records = [line for line in lines if line.startswith("| offset: ")]
    assert records[0].endswith(' SnapshotHeader {"version":0,"lastContainedLogTimestamp":1234}')
    assert ' LeaderChange: {"version":0,"leaderId":1,' in records[1]
    assert records[2].endswith(
        ' payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":"snap","topicId":"'
        f'{kafka_uuid_string(topic_id)}"}}}}'
    )
    assert records[3].endswith(' SnapshotFooter {"version":0}')


def test_a_snapshot_of_the_nodes_log_decodes_to_the_same_records(
    pykraft_cluster: Any, tmp_path: Path
) -> None:
    """The raft module's snapshot writer over the node's committed metadata records: the
    snapshot dumps the same payloads as the segment they came from."""
    new_topic(pykraft_cluster.bootstrap_servers)
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes((pykraft_cluster.log_dir / METADATA_SEGMENT).read_bytes())
    data = segment.read_bytes()
    values = [
        record.value
        for position, header in iter_headers(memoryview(data))
        if not header.is_control
        for record in iter_records(data[position : position + header.size])
        if record.value is not None  # metadata records always have a value
    ]
    end_offset = len(values) + 1
    snapshot_id = SnapshotId(end_offset=end_offset, epoch=1)
    snapshot = tmp_path / snapshot_file_name(snapshot_id)
    snapshot.write_bytes(
        b"".join(
            build_snapshot(
                snapshot_id,
                values,
                last_contained_log_timestamp=1,
                timestamp_ms=1,
                batch_bytes_max=300,
            )
        )
    )
    from_segment = pykraft("dump-log", "--cluster-metadata-decoder", str(segment))
    from_snapshot = pykraft("dump-log", "--cluster-metadata-decoder", str(snapshot))
    assert from_segment.returncode == from_snapshot.returncode == 0, from_snapshot.stderr
    assert payloads(from_snapshot.stdout) == payloads(from_segment.stdout)
    assert len(payloads(from_snapshot.stdout)) == len(values) > 5
    assert f"Snapshot end offset: {end_offset}, epoch: 1" in from_snapshot.stdout
