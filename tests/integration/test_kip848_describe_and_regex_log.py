"""KIP-848 groups against one real node, as Kafka 4.0 has them: DescribeGroups describes
classic groups only (a consumer-protocol group is "not a classic group": Dead, and
GROUP_ID_NOT_FOUND from v6), and a regex subscription's resolution is logged in
`__consumer_offsets` (ConsumerGroupRegularExpression, record type 16) and taken from the log
by the coordinator that loads the group after a restart: the member keeps its assignment at
the same epochs; a topic created after the restart comes with the next resolution."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest as DescribeGroupsV5
from kio.schema.describe_groups.v6.request import DescribeGroupsRequest as DescribeGroupsV6
from kio.schema.errors import ErrorCode
from kio.schema.types import GroupId

from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient
from tests.integration import test_cli_dump_log_decoders as dump_log
from tests.integration.group_helpers import poll_until

CONFIGS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
    "group.consumer.heartbeat.interval.ms": "200",
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(configs=CONFIGS) as node:
        yield node


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "group.protocol": "consumer", "auto.offset.reset": "earliest"})


def _describe(bootstrap: str, group: str) -> Any:
    with WireClient(bootstrap) as client:
        [described] = client.request(69, 0, ConsumerGroupDescribeRequest(
            group_ids=(GroupId(group),), include_authorized_operations=False)).groups
    assert described.error_code == ErrorCode.none, described
    return described


def test_describe_groups_of_a_consumer_protocol_group_is_kafkas(cluster: LocalCluster) -> None:
    """kafka-python's describe_groups (DescribeGroups) on a group confluent-kafka made with
    group.protocol=consumer: Dead, no protocol type, no members, as Kafka 4.0's coordinator
    answers for a group that is not classic; on the wire v5 carries no error, v6
    GROUP_ID_NOT_FOUND with Kafka's message."""
    bootstrap, group = cluster.bootstrap_servers, "kip848-described"
    _create(bootstrap, "described", 2)
    consumer = _consumer(bootstrap, group)
    try:
        consumer.subscribe(["described"])
        poll_until([consumer], lambda: len(consumer.assignment()) == 2)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            result = admin.describe_groups([group])[group]
        finally:
            admin.close()
        assert result["group_state"] == "Dead" and result["members"] == []
        assert result["protocol_type"] == ""
        assert result["error"] is None or "is not a classic group" in result["error"]
        with WireClient(bootstrap) as client:
            [v5] = client.request(15, 5, DescribeGroupsV5(
                groups=(GroupId(group),), include_authorized_operations=False)).groups
            [v6] = client.request(15, 6, DescribeGroupsV6(
                groups=(GroupId(group),), include_authorized_operations=False)).groups
        assert (v5.error_code, v5.group_state, v5.protocol_type, v5.members) == (
            ErrorCode.none, "Dead", "", ())
        assert (v6.error_code, v6.group_state, v6.error_message) == (
            ErrorCode.group_id_not_found, "Dead", f"Group {group} is not a classic group.")
        assert len(_describe(bootstrap, group).members) == 1  # ConsumerGroupDescribe does
    finally:
        consumer.close()


def _regex_records(cluster: LocalCluster, group: str) -> list[Any]:
    return [payload for key, payload in dump_log.decoded(cluster.log_dir, "__consumer_offsets",
                                                         "--offsets-decoder")
            if key["type"] == "16" and key["data"]["groupId"] == group]


def test_a_regex_resolution_is_logged_and_survives_a_restart(cluster: LocalCluster) -> None:
    """The resolution of ^rx-.* is in the log (dump-log shows record type 16 with its
    topics); after the node restarts, the member keeps its partitions at the same group
    and member epoch (no resolution bumped them); a topic created after the restart that
    the regex matches is assigned with the next resolution (a new group epoch, a new
    record)."""
    bootstrap, group = cluster.bootstrap_servers, "kip848-regex-log"
    _create(bootstrap, "rx-a", 2)
    consumer = _consumer(bootstrap, group)
    try:
        consumer.subscribe(["^rx-.*"])
        poll_until([consumer], lambda: len(consumer.assignment()) == 2)
        before = _describe(bootstrap, group)
        [(member_before,)] = [(m.member_epoch,) for m in before.members]
        [record] = _regex_records(cluster, group)
        assert record["data"]["topics"] == ["rx-a"]

        cluster.stop()
        cluster.start()
        deadline = time.monotonic() + 30
        while True:  # the member heartbeats again to the reloaded coordinator
            consumer.poll(0.1)
            try:
                after = _describe(bootstrap, group)
            except (AssertionError, OSError):
                after = None
            if after is not None and after.members and after.group_state == "Stable":
                break
            assert time.monotonic() < deadline, after
        assert after.group_epoch == before.group_epoch
        assert [m.member_epoch for m in after.members] == [member_before]
        assert len(consumer.assignment()) == 2

        _create(bootstrap, "rx-b", 1)
        poll_until([consumer], lambda: len(consumer.assignment()) == 3, timeout_s=30)
        assert _describe(bootstrap, group).group_epoch > before.group_epoch
        records = _regex_records(cluster, group)
        assert [r["data"]["topics"] for r in records][-1] == ["rx-a", "rx-b"]
    finally:
        consumer.close()
