"""`pykraft dump-log --cluster-metadata-decoder` on metadata segments and snapshots built here
with our batch builder, metadata codec and control records."""

from __future__ import annotations

import base64
import io
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.k_raft_version_record.v0 import KRaftVersionRecord
from kio.schema.snapshot_footer_record.v0 import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0 import SnapshotHeaderRecord
from kio.schema.voters_record.v0 import VotersRecord
from kio.schema.voters_record.v0.data import Endpoint, KRaftVersionFeature, Voter
from kio.serial import entity_writer

from pykraft.cli.main import main
from pykraft.cli.metadata_decoder import metadata_record_json, record_type_name
from pykraft.metadata.codec import encode_metadata_record
from pykraft.metadata.records import (
    FeatureLevelRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UserScramCredentialRecord,
    ZkMigrationStateRecord,
)
from pykraft.raft.control import leader_change_record
from pykraft.records.record import ControlRecordType, build_batch, control_record_key
from pykraft.storage.checkpoint import kafka_uuid_string

T0 = 1_700_000_000_000
TOPIC_ID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
DIRECTORY_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")


def dump(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = main(["dump-log", *argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def entity_bytes(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def control_batch(offset: int, control_type: ControlRecordType, value: bytes) -> bytes:
    return build_batch(
        [(control_record_key(control_type), value, [], T0)],
        base_offset=offset,
        is_control=True,
        partition_leader_epoch=3,
    )


def metadata_batch(offset: int, *records: Any) -> bytes:
    return build_batch(
        [(None, encode_metadata_record(record), [], T0 + 1) for record in records],
        base_offset=offset,
        partition_leader_epoch=3,
    )


def snapshot_batches() -> list[bytes]:
    header = SnapshotHeaderRecord(version=0, last_contained_log_timestamp=T0 + 9)
    voters = VotersRecord(
        version=0,
        voters=(
            Voter(
                voter_id=1,
                voter_directory_id=DIRECTORY_ID,
                endpoints=(Endpoint(name="CONTROLLER", host="127.0.0.1", port=19093),),
                k_raft_version_feature=KRaftVersionFeature(
                    min_supported_version=0, max_supported_version=1
                ),
            ),
        ),
    )
    return [
        control_batch(0, ControlRecordType.SNAPSHOT_HEADER, entity_bytes(header)),
        control_batch(
            1,
            ControlRecordType.KRAFT_VERSION,
            entity_bytes(KRaftVersionRecord(version=0, k_raft_version=1)),
        ),
        control_batch(2, ControlRecordType.KRAFT_VOTERS, entity_bytes(voters)),
        metadata_batch(
            3,
            FeatureLevelRecord(name="metadata.version", feature_level=21),
            TopicRecord(name="orders", topic_id=TOPIC_ID),
            PartitionRecord(
                partition_id=0,
                topic_id=TOPIC_ID,
                replicas=(1,),
                isr=(1,),
                leader=1,
                leader_epoch=0,
                partition_epoch=0,
                directories=(DIRECTORY_ID,),
            ),
        ),
        control_batch(
            6, ControlRecordType.SNAPSHOT_FOOTER, entity_bytes(SnapshotFooterRecord(version=0))
        ),
    ]


def write_snapshot(directory: Path, batches: list[bytes], tail: bytes = b"") -> Path:
    path = directory / "00000000000000000007-0000000003.checkpoint"
    path.write_bytes(b"".join(batches) + tail)
    return path


def payloads(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line.split(" payload: ", 1)[1]) for line in lines if " payload: " in line]


def test_a_snapshot_decodes_control_and_metadata_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_snapshot(tmp_path, snapshot_batches())
    code, lines, err = dump(capsys, "--cluster-metadata-decoder", "--files", str(path))
    assert (code, err) == (0, "")
    assert lines[:2] == [f"Dumping {path}", "Snapshot end offset: 7, epoch: 3"]
    records = [line for line in lines if line.startswith("| offset: ")]
    assert len(records) == 7
    assert records[0].endswith(
        ' SnapshotHeader {"version":0,"lastContainedLogTimestamp":1700000000009}'
    )
    assert records[1].endswith(' KRaftVersion {"version":0,"kRaftVersion":1}')
    directory = kafka_uuid_string(DIRECTORY_ID)
    assert records[2].endswith(
        ' KRaftVoters {"version":0,"voters":[{"voterId":1,"voterDirectoryId":"'
        + directory
        + '","endpoints":[{"name":"CONTROLLER","host":"127.0.0.1","port":19093}],'
        '"kRaftVersionFeature":{"minSupportedVersion":0,"maxSupportedVersion":1}}]}'
    )
    assert records[6].endswith(' SnapshotFooter {"version":0}')
    topic_id = kafka_uuid_string(TOPIC_ID)
    assert records[4] == (
        "| offset: 4 CreateTime: 1700000000001 keySize: -1 valueSize: 27 sequence: -1 "
        'headerKeys: [] payload: {"type":"TOPIC_RECORD","version":0,'
        f'"data":{{"name":"orders","topicId":"{topic_id}"}}}}'
    )
    assert payloads(lines) == [
        {
            "type": "FEATURE_LEVEL_RECORD",
            "version": 0,
            "data": {"name": "metadata.version", "featureLevel": 21},
        },
        {"type": "TOPIC_RECORD", "version": 0, "data": {"name": "orders", "topicId": topic_id}},
        {
            "type": "PARTITION_RECORD",
            "version": PartitionRecord.LATEST_VERSION,
            "data": {
                "partitionId": 0,
                "topicId": topic_id,
                "replicas": [1],
                "isr": [1],
                "removingReplicas": [],
                "addingReplicas": [],
                "leader": 1,
                "leaderEpoch": 0,
                "partitionEpoch": 0,
                "directories": [directory],
            },
        },
    ]


def test_a_leader_change_prints_by_name_in_every_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key, value = leader_change_record(
        leader_id=2, voters=frozenset({1, 2, 3}), granting_voters=frozenset({2, 3})
    )
    batch = build_batch([(key, value, [], T0)], base_offset=0, is_control=True)
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(batch + metadata_batch(1, TopicRecord(name="t", topic_id=TOPIC_ID)))
    expected = (
        ' LeaderChange: {"version":0,"leaderId":2,"voters":[{"voterId":1},'
        '{"voterId":2},{"voterId":3}],"grantingVoters":[{"voterId":2},{"voterId":3}]}'
    )
    for flags in (["--deep-iteration"], ["--cluster-metadata-decoder"]):
        code, lines, _ = dump(capsys, *flags, "--files", str(segment))
        assert code == 0
        assert lines[3].startswith("| offset: 0 ") and lines[3].endswith(expected)
    # without the decoder the metadata record is bytes, as Kafka prints it
    _, lines, _ = dump(capsys, "--print-data-log", "--files", str(segment))
    assert '"type"' not in lines[-1]


def test_files_may_be_listed_as_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_snapshot(tmp_path, snapshot_batches())
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(metadata_batch(0, TopicRecord(name="x", topic_id=TOPIC_ID)))
    code, lines, _ = dump(capsys, "--cluster-metadata-decoder", str(segment), str(path))
    assert code == 0
    assert [line for line in lines if line.startswith("Dumping ")] == [
        f"Dumping {segment}",
        f"Dumping {path}",
    ]


def test_a_truncated_snapshot_prints_the_valid_batches_then_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    batches = snapshot_batches()
    whole = b"".join(batches[:4])
    path = write_snapshot(tmp_path, batches[:4], tail=batches[4][:30])
    code, lines, err = dump(capsys, "--cluster-metadata-decoder", "--files", str(path))
    assert code == 1
    assert sum(line.startswith("baseOffset: ") for line in lines) == 4
    assert lines[-1] == f"Found 30 invalid bytes at the end of {path.name}"
    assert err.startswith(f"Error: {path}: 30 invalid bytes at position {len(whole)}")
    assert "does not end with a SnapshotFooter" in err
    # Kafka's plain dump of the same file reports the bytes and exits 0
    code, lines, err = dump(capsys, "--files", str(path))
    assert (code, err) == (0, "")
    assert lines[-1] == f"Found 30 invalid bytes at the end of {path.name}"


def test_a_snapshot_cut_between_batches_misses_its_footer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_snapshot(tmp_path, snapshot_batches()[:4])
    code, _, err = dump(capsys, "--cluster-metadata-decoder", "--files", str(path))
    assert code == 1
    assert err == (
        f"Error: {path}: the snapshot does not end with a SnapshotFooter record (truncated?)\n"
    )


def test_a_corrupt_batch_and_an_undecodable_record_are_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = metadata_batch(0, TopicRecord(name="a", topic_id=TOPIC_ID))
    flipped = bytearray(metadata_batch(1, TopicRecord(name="b", topic_id=TOPIC_ID)))
    flipped[-3] ^= 0xFF  # inside the records: the CRC no longer matches
    unknown = build_batch([(None, b"\x01\x7f\x00\x00", [], T0)], base_offset=2)  # api key 127
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(good + bytes(flipped) + unknown)
    code, lines, err = dump(capsys, "--cluster-metadata-decoder", "--files", str(segment))
    assert code == 1
    assert "isvalid: false" in lines[4]
    assert lines[5] == "| records not decoded: the batch's CRC does not match"
    assert lines[7].endswith(" payload: Error at 2, skipping. unknown metadata record api key 127")
    assert "the batch at position" in err and "the record at offset 2 does not decode" in err


def test_json_follows_kafkas_converters() -> None:
    """camelCase names in schema order, tagged fields only when set, bytes in base64,
    uuids in Kafka's form, type names in upper snake case."""
    partition = PartitionRecord(
        partition_id=3,
        topic_id=TOPIC_ID,
        leader=1,
        leader_recovery_state=1,
        eligible_leader_replicas=(2,),
    )
    data = json.loads(metadata_record_json(partition, 2))["data"]
    assert list(data) == [
        "partitionId",
        "topicId",
        "replicas",
        "isr",
        "removingReplicas",
        "addingReplicas",
        "leader",
        "leaderRecoveryState",
        "leaderEpoch",
        "partitionEpoch",
        "directories",
        "eligibleLeaderReplicas",
    ]
    assert (
        "leaderRecoveryState"
        not in json.loads(
            metadata_record_json(PartitionRecord(partition_id=3, topic_id=TOPIC_ID), 2)
        )["data"]
    )
    scram = UserScramCredentialRecord(
        name="u", mechanism=1, salt=b"\x00\xff", stored_key=b"k", server_key=b"", iterations=4096
    )
    scram_data = json.loads(metadata_record_json(scram, 0))["data"]
    assert scram_data["salt"] == base64.b64encode(b"\x00\xff").decode()
    broker = RegisterBrokerRecord(broker_id=1, incarnation_id=uuid.UUID(int=0), rack=None)
    broker_json = json.loads(metadata_record_json(broker, 0))
    assert broker_json["data"]["incarnationId"] == "AAAAAAAAAAAAAAAAAAAAAA"
    assert "isMigratingZkBroker" not in broker_json["data"]  # version 2+ only
    assert record_type_name(ZkMigrationStateRecord()) == "ZK_MIGRATION_STATE_RECORD"
    assert re.fullmatch(r"[A-Z_]+", record_type_name(broker))


def test_bootstrap_checkpoint_is_named_as_kafka_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bootstrap.checkpoint"
    path.write_bytes(b"".join(snapshot_batches()))
    code, lines, _ = dump(capsys, "--cluster-metadata-decoder", "--files", str(path))
    assert code == 0
    assert lines[1] == "KRaft bootstrap snapshot"


def test_a_control_record_claiming_billions_of_voters_is_reported_as_damage() -> None:
    """dump-log reads files anyone may hand it: a count must not make kio reserve 32 GiB,
    which aborts the process (run in a child, so a regression fails one test, not all)."""
    import subprocess
    import sys

    hostile = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\xff\xff\xff\xff\x0f" + b"\x00"
    code = ("from pykraft.cli.metadata_decoder import control_record_json\n"
            "from pykraft.errors import CorruptRecord\n"
            "from pykraft.records.record import ControlRecordType\n"
            "try:\n"
            f"    control_record_json(ControlRecordType.LEADER_CHANGE, {hostile!r})\n"
            "except CorruptRecord as error:\n    print('damage:', error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("damage: malformed LEADER_CHANGE control record")
