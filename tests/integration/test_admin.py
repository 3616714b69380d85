"""Admin APIs through confluent-kafka's AdminClient (and DescribeQuorum on the wire):
partitions, configs, cluster and quorum descriptions, offsets."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)
from kio.schema.describe_quorum.v2.request import (
    DescribeQuorumRequest,
    PartitionData,
    TopicData,
)
from kio.schema.errors import ErrorCode

from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient


def _admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def _topic(admin: AdminClient, partitions: int = 1, **config: str) -> str:
    name = f"admin-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                  config=config)])[name].result(30)
    return name


def _eventually(check: object, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            check()  # type: ignore[operator]
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_describe_cluster(pykraft_cluster: LocalCluster) -> None:
    admin = _admin(pykraft_cluster)  # keep the client alive while its future runs
    description = admin.describe_cluster().result(30)
    assert [node.id for node in description.nodes] == [1]
    assert description.nodes[0].port == pykraft_cluster.broker_port
    assert description.controller.id == 1
    assert description.cluster_id == pykraft_cluster.cluster_id


def test_create_partitions_grows_a_topic(pykraft_cluster: LocalCluster) -> None:
    admin = _admin(pykraft_cluster)
    name = _topic(admin, partitions=2)
    admin.create_partitions([NewPartitions(name, 5)])[name].result(30)
    _eventually(lambda: _assert_equal(len(admin.list_topics(name, timeout=10)
                                          .topics[name].partitions), 5))
    producer = Producer({"bootstrap.servers": pykraft_cluster.bootstrap_servers})
    producer.produce(name, b"to-a-new-partition", partition=4)
    assert producer.flush(30) == 0
    shrink = admin.create_partitions([NewPartitions(name, 3)])[name]
    try:
        shrink.result(30)
        raise AssertionError("shrinking a topic must fail")
    except Exception as error:  # noqa: BLE001 - the KafkaException carries the code
        assert "INVALID_PARTITIONS" in str(error) or "partitions" in str(error).lower()


def test_incremental_and_legacy_alter_configs(pykraft_cluster: LocalCluster) -> None:
    admin = _admin(pykraft_cluster)
    name = _topic(admin, **{"retention.ms": "100000"})
    resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", "200000",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)

    def described() -> dict[str, str]:
        wanted = ConfigResource(ConfigResource.Type.TOPIC, name)
        entries = admin.describe_configs([wanted])[wanted].result(30)
        return {key: entry.value for key, entry in entries.items()}

    _eventually(lambda: _assert_equal(
        (described()["retention.ms"], described()["cleanup.policy"]), ("200000", "compact")))
    bad = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", "not-a-number",
                    incremental_operation=AlterConfigOpType.SET)])
    try:
        admin.incremental_alter_configs([bad])[bad].result(30)
        raise AssertionError("an invalid value must be refused")
    except Exception as error:  # noqa: BLE001
        assert "retention.ms" in str(error)
    assert described()["retention.ms"] == "200000"  # nothing half-applied

    legacy = ConfigResource(ConfigResource.Type.TOPIC, name,
                            set_config={"segment.ms": "3600000"})
    admin.alter_configs([legacy])[legacy].result(30)
    _eventually(lambda: _assert_equal(described()["segment.ms"], "3600000"))
    # legacy AlterConfigs replaces every override: retention.ms is back to its default
    _eventually(lambda: _assert_equal(described()["retention.ms"], "604800000"))


def test_list_offsets_through_admin(pykraft_cluster: LocalCluster) -> None:
    admin = _admin(pykraft_cluster)
    name = _topic(admin)
    producer = Producer({"bootstrap.servers": pykraft_cluster.bootstrap_servers})
    for i in range(10):
        producer.produce(name, b"x", partition=0, timestamp=1_700_000_000_000 + i * 1000)
    assert producer.flush(30) == 0
    partition = TopicPartition(name, 0)
    for spec, expected in ((OffsetSpec.earliest(), 0), (OffsetSpec.latest(), 10),
                           (OffsetSpec.max_timestamp(), 9),
                           (OffsetSpec.for_timestamp(1_700_000_003_500), 4)):
        result = admin.list_offsets({partition: spec})[partition].result(30)
        assert result.offset == expected, spec


def test_describe_topics(pykraft_cluster: LocalCluster) -> None:
    admin = _admin(pykraft_cluster)
    name = _topic(admin, partitions=3)
    description = admin.describe_topics(TopicCollection([name]))[name].result(30)
    assert description.name == name
    assert [p.id for p in description.partitions] == [0, 1, 2]
    assert all(p.leader.id == 1 and [r.id for r in p.isr] == [1]
               for p in description.partitions)


def test_describe_quorum_on_broker_and_controller_listeners(
        pykraft_cluster: LocalCluster) -> None:
    request = DescribeQuorumRequest(topics=(TopicData(
        topic_name="__cluster_metadata", partitions=(PartitionData(partition_index=0),)),))
    for port in (pykraft_cluster.broker_port, pykraft_cluster.controller_port):
        with WireClient(f"127.0.0.1:{port}") as client:
            response = client.request(55, 2, request)
        partition = response.topics[0].partitions[0]
        assert response.error_code == ErrorCode.none
        assert partition.leader_id == 1 and partition.leader_epoch >= 1
        assert partition.high_watermark > 0
        assert [v.replica_id for v in partition.current_voters] == [1]
        assert partition.current_voters[0].log_end_offset >= partition.high_watermark
        assert [n.node_id for n in response.nodes] == [1]


def _assert_equal(actual: object, expected: object) -> None:
    assert actual == expected, f"{actual!r} != {expected!r}"
