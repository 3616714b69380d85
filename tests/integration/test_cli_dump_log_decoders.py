"""`pykraft dump-log --offsets-decoder` and `--transaction-log-decoder` on the segments a real
node wrote for a real consumer group and a real transactional producer: Kafka 4's key and
payload JSON, and the errors for records that are not the decoder's."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from pykraft.records.record import build_batch
from tests.integration.group_helpers import poll_until
from tests.integration.tool_helpers import eventually, pykraft


def segments(log_dir: Path, topic: str) -> list[str]:
    return sorted(str(path) for path in log_dir.glob(f"{topic}-*/*.log")
                  if path.stat().st_size > 0)


def decoded(log_dir: Path, topic: str, option: str) -> list[tuple[dict[str, Any], Any]]:
    """Every record's (key, payload) of the topic's segments, as the tool decodes them."""
    def dump() -> subprocess.CompletedProcess[str]:
        result = pykraft("dump-log", option, "--files", ",".join(segments(log_dir, topic)))
        assert result.returncode == 0, result.stderr  # a batch being appended: read again
        return result

    result = eventually(dump, timeout_s=10)
    records = []
    for line in result.stdout.splitlines():
        if not line.startswith("| offset: ") or " key: " not in line:
            continue
        key, _, payload = line.split(" key: ", 1)[1].partition(" payload: ")
        records.append((json.loads(key), payload if payload == "<DELETE>"
                        else json.loads(payload)))
    return records


def test_offsets_and_transaction_log_decoders(pykraft_cluster: Any, tmp_path: Path) -> None:
    bootstrap, log_dir = pykraft_cluster.bootstrap_servers, pykraft_cluster.log_dir
    suffix = uuid.uuid4().hex[:8]
    topic, group, txn_id = f"decoders-{suffix}", f"decoders-group-{suffix}", f"txn-{suffix}"
    created = pykraft("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                      "--partitions", "1", "--replication-factor", "1")
    assert created.returncode == 0, created.stderr

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"value", partition=0)
    producer.commit_transaction(30)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    poll_until([consumer], lambda: len(consumer.assignment()) == 1)
    consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    consumer.close()

    def offsets_decoded() -> None:
        records = decoded(log_dir, "__consumer_offsets", "--offsets-decoder")
        commits = [payload for key, payload in records
                   if key == {"type": "1", "data": {"group": group, "topic": topic,
                                                     "partition": 0}}]
        assert commits, records[-3:]
        assert commits[-1]["version"] in {"3", "4"}
        assert commits[-1]["data"]["offset"] == 1
        assert set(commits[-1]["data"]) >= {"offset", "leaderEpoch", "metadata",
                                            "commitTimestamp"}
        groups = [payload for key, payload in records
                  if key == {"type": "2", "data": {"group": group}} and payload != "<DELETE>"]
        with_members = [g for g in groups if g["data"]["members"]]
        assert with_members, groups
        member = with_members[0]["data"]["members"][0]
        assert with_members[0]["data"]["protocolType"] == "consumer"
        # the consumer protocol's bytes shown decoded, as Kafka's tool shows them
        assert member["subscription"]["topics"] == [topic]
        assert member["assignment"]["assignedPartitions"] == [{"topic": topic,
                                                               "partitions": [0]}]

    eventually(offsets_decoded, timeout_s=15)

    def transactions_decoded() -> None:
        records = decoded(log_dir, "__transaction_state", "--transaction-log-decoder")
        states = [payload for key, payload in records
                  if key == {"type": "0", "data": {"transactionalId": txn_id}}]
        assert states, records[-3:]
        last = states[-1]["data"]
        assert last["transactionStatus"] == 4  # CompleteCommit
        assert {"producerId", "producerEpoch", "transactionTimeoutMs", "transactionPartitions",
                "transactionLastUpdateTimestampMs", "transactionStartTimestampMs"} <= set(last)
        ongoing = [s["data"] for s in states if s["data"]["transactionStatus"] == 1]
        assert any(s["transactionPartitions"] == [{"topic": topic, "partitionIds": [0]}]
                   for s in ongoing), states

    eventually(transactions_decoded, timeout_s=15)

    # a segment that is not the decoder's: each record reported, the exit code 1
    other = tmp_path / "00000000000000000000.log"
    other.write_bytes(build_batch([(None, b"no key", (), 0), (b"\x00\x0fjunk", b"v", (), 0),
                                  (b"\x00\x01\xff", b"v", (), 0)]))
    result = pykraft("dump-log", "--offsets-decoder", "--files", str(other))
    assert result.returncode == 1
    lines = [line for line in result.stdout.splitlines() if line.startswith("| offset:")]
    assert lines[0].endswith(" key: Error at offset 0, skipping. the record has no key")
    assert lines[1].endswith(" key: Unknown record type 15 at offset 1, skipping.")  # share
    assert " key: Error at offset 2, skipping. malformed __consumer_offsets record" in lines[2]
    assert "Traceback" not in result.stderr
