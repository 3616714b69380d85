"""`pykraft transactions` find-hanging, list --duration-filter and describe-producers
--broker-id, run as a user runs them against the session's real node: a hanging
transaction (a transactional batch no coordinator knows of, written with a raw Produce) is
found and aborted; a live producer's open transaction is not hanging."""

from __future__ import annotations

import datetime
import subprocess
import time
import uuid
from typing import Any

from confluent_kafka import Producer
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from pykraft.records.record import build_batch
from pykraft.testing.wire import WireClient
from tests.integration.tool_helpers import pykraft

HEADER = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
          "StartOffset", "LastTimestamp", "Duration(min)"]


def tool(*argv: str) -> subprocess.CompletedProcess[str]:
    result = pykraft(*argv, timeout_s=90)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def new_topic(bootstrap: str) -> str:
    name = f"txn-tool-{uuid.uuid4().hex[:8]}"
    created = tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", name,
                   "--partitions", "2", "--replication-factor", "1")
    assert created.returncode == 0, created.stderr
    return name


def write_orphan_transaction(bootstrap: str, topic: str, producer_id: int) -> None:
    """A transactional batch with no transactional id: the partition holds an open
    transaction that no coordinator will ever end (what find-hanging is for)."""
    batch = build_batch([(b"k", b"orphan", (), int(time.time() * 1000) - 1000)],
                        producer_id=producer_id, producer_epoch=0, base_sequence=0,
                        is_transactional=True)
    request = ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
        topic_data=(TopicProduceData(name=topic, partition_data=(
            PartitionProduceData(index=0, records=batch),)),))
    with WireClient(bootstrap) as client:
        response = client.request(0, 9, request)
    assert response.responses[0].partition_responses[0].error_code == 0


def test_find_hanging_finds_an_orphan_and_not_a_live_transaction(pykraft_cluster: Any) -> None:
    bootstrap = pykraft_cluster.bootstrap_servers
    node_id = str(pykraft_cluster.node_id)
    topic = new_topic(bootstrap)
    base = ("transactions", "--bootstrap-server", bootstrap)

    # nothing open yet: Kafka's header alone
    empty = tool(*base, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert (empty.returncode, empty.stdout.split()) == (0, HEADER), empty.stderr

    live = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"live-{topic}"})
    live.init_transactions(30)
    live.begin_transaction()
    live.produce(topic, b"open", partition=1)
    assert live.flush(30) == 0
    orphan_id = 880_000 + uuid.uuid4().int % 10_000
    write_orphan_transaction(bootstrap, topic, orphan_id)
    try:
        # --max-transaction-timeout 0: every open transaction is old enough to look at
        found = tool(*base, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
        assert found.returncode == 0, found.stderr
        header, *rows = [line.split() for line in found.stdout.splitlines()]
        assert header == HEADER
        assert [row[:6] for row in rows] == [[topic, "0", str(orphan_id), "0", "-1", "0"]]
        # by broker: the same partition is among those the broker holds
        by_broker = tool(*base, "find-hanging", "--broker-id", node_id,
                         "--max-transaction-timeout", "0")
        assert [topic, "0", str(orphan_id)] in [line.split()[:3]
                                               for line in by_broker.stdout.splitlines()]
        # the default 15 minutes: neither is that old
        recent = tool(*base, "find-hanging", "--topic", topic, "--partition", "0")
        assert recent.stdout.split() == HEADER, recent.stderr

        producers = tool(*base, "describe-producers", "--topic", topic, "--partition", "0",
                         "--broker-id", node_id)
        assert producers.returncode == 0, producers.stderr
        assert producers.stdout.splitlines()[1].split()[0] == str(orphan_id)

        # the live one is listed (running longer than 0 ms), not as running for a day (the
        # node is shared with other tests, whose transactional ids may be listed too)
        listed = tool(*base, "list", "--duration-filter", "0")
        assert f"live-{topic}" in [line.split()[0] for line in listed.stdout.splitlines()]
        day = tool(*base, "list", "--duration-filter", str(86_400_000))
        day_lines = [line.split() for line in day.stdout.splitlines()]
        assert (day.returncode, day_lines[0]) == (0, [
            "TransactionalId", "Coordinator", "ProducerId", "TransactionState"]), day.stderr
        assert f"live-{topic}" not in [line[0] for line in day_lines[1:]]

        aborted = tool(*base, "abort", "--topic", topic, "--partition", "0", "--start-offset",
                       "0")
        assert aborted.returncode == 0, aborted.stderr
        after = tool(*base, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
        assert after.stdout.split() == HEADER, after.stderr
    finally:
        live.abort_transaction(30)


def test_find_hanging_needs_a_scope() -> None:
    unscoped = tool("transactions", "--bootstrap-server", "127.0.0.1:1", "find-hanging")
    assert unscoped.returncode == 1
    assert unscoped.stderr == ("Error: The `find-hanging` command requires either --topic or "
                               "--broker-id to limit the scope of the search\n")
    partition_only = tool("transactions", "--bootstrap-server", "127.0.0.1:1", "find-hanging",
                          "--broker-id", "1", "--partition", "0")
    assert partition_only.returncode == 1
    assert "The --partition argument requires --topic to be provided" in partition_only.stderr
