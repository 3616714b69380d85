"""Our ApiVersions against Kafka 4.0's, over a real socket, and the 4.0 versions of the APIs
that reached them with issue 18 answered with the fields those versions add.

The tables below are what a Kafka 4.0.0 node advertises with its default configuration:
each API's validVersions in clients/src/main/resources/common/message/*.json on the 4.0
branch, KIP-896's new minimums, the APIs Kafka lists for the "broker" and "controller"
listeners, without the unstable ones (the share group APIs) and without the telemetry APIs,
which a 4.0 broker advertises only when a client telemetry reporter is configured (KIP-714).
Every API of those tables is either served at least up to Kafka's max, or named below with
the reason, so that serving a new one, or reaching Kafka's max, shows up here.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any, Final

import pytest
from kio.schema.add_offsets_to_txn.v4.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.describe_cluster.v2.request import DescribeClusterRequest
from kio.schema.end_txn.v5.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest
from kio.schema.list_offsets.v10.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v13.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v11.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.txn_offset_commit.v5.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)

from pykraft.records.record import build_batch
from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient

# api key -> (min, max) that a Kafka 4.0 broker listener advertises
KAFKA_4_0_BROKER: Final[dict[int, tuple[int, int]]] = {
    0: (3, 12),  # Produce
    1: (4, 17),  # Fetch
    2: (1, 10),  # ListOffsets
    3: (0, 13),  # Metadata
    8: (2, 9),  # OffsetCommit
    9: (1, 9),  # OffsetFetch
    10: (0, 6),  # FindCoordinator
    11: (2, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 6),  # DescribeGroups
    16: (0, 5),  # ListGroups
    17: (0, 1),  # SaslHandshake
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 5),  # InitProducerId
    23: (2, 4),  # OffsetForLeaderEpoch
    24: (0, 5),  # AddPartitionsToTxn
    25: (0, 4),  # AddOffsetsToTxn
    26: (0, 5),  # EndTxn
    27: (1, 1),  # WriteTxnMarkers
    28: (0, 5),  # TxnOffsetCommit
    29: (1, 3),  # DescribeAcls
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    34: (1, 2),  # AlterReplicaLogDirs
    35: (1, 4),  # DescribeLogDirs
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    38: (1, 3),  # CreateDelegationToken
    39: (1, 2),  # RenewDelegationToken
    40: (1, 2),  # ExpireDelegationToken
    41: (1, 3),  # DescribeDelegationToken
    42: (0, 2),  # DeleteGroups
    43: (0, 2),  # ElectLeaders
    44: (0, 1),  # IncrementalAlterConfigs
    45: (0, 0),  # AlterPartitionReassignments
    46: (0, 0),  # ListPartitionReassignments
    47: (0, 0),  # OffsetDelete
    48: (0, 1),  # DescribeClientQuotas
    49: (0, 1),  # AlterClientQuotas
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    55: (0, 2),  # DescribeQuorum
    57: (0, 2),  # UpdateFeatures
    60: (0, 2),  # DescribeCluster
    61: (0, 0),  # DescribeProducers
    64: (0, 0),  # UnregisterBroker
    65: (0, 0),  # DescribeTransactions
    66: (0, 1),  # ListTransactions
    68: (0, 1),  # ConsumerGroupHeartbeat
    69: (0, 1),  # ConsumerGroupDescribe
    74: (0, 0),  # ListClientMetricsResources
    75: (0, 0),  # DescribeTopicPartitions
    80: (0, 0),  # AddRaftVoter
    81: (0, 0),  # RemoveRaftVoter
}

# ... and its controller listener
KAFKA_4_0_CONTROLLER: Final[dict[int, tuple[int, int]]] = {
    1: (4, 17),  # Fetch (of the metadata log)
    17: (0, 1),  # SaslHandshake
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    29: (1, 3),  # DescribeAcls
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    38: (1, 3),  # CreateDelegationToken
    39: (1, 2),  # RenewDelegationToken
    40: (1, 2),  # ExpireDelegationToken
    41: (1, 3),  # DescribeDelegationToken
    43: (0, 2),  # ElectLeaders
    44: (0, 1),  # IncrementalAlterConfigs
    45: (0, 0),  # AlterPartitionReassignments
    46: (0, 0),  # ListPartitionReassignments
    49: (0, 1),  # AlterClientQuotas
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    52: (0, 2),  # Vote
    53: (0, 1),  # BeginQuorumEpoch
    54: (0, 1),  # EndQuorumEpoch
    55: (0, 2),  # DescribeQuorum
    56: (2, 3),  # AlterPartition
    57: (0, 2),  # UpdateFeatures
    58: (0, 0),  # Envelope
    59: (0, 1),  # FetchSnapshot
    60: (0, 2),  # DescribeCluster
    62: (0, 4),  # BrokerRegistration
    63: (0, 1),  # BrokerHeartbeat
    64: (0, 0),  # UnregisterBroker
    67: (0, 0),  # AllocateProducerIds
    70: (0, 0),  # ControllerRegistration
    73: (0, 0),  # AssignReplicasToDirs
    80: (0, 0),  # AddRaftVoter
    81: (0, 0),  # RemoveRaftVoter
    82: (0, 0),  # UpdateRaftVoter
}

# Kafka 4.0 serves these on a broker listener; we do not yet (docs/deviations.md)
BROKER_NOT_YET_SERVED: Final[dict[int, str]] = {
    38: "CreateDelegationToken: no delegation tokens",
    39: "RenewDelegationToken: no delegation tokens",
    40: "ExpireDelegationToken: no delegation tokens",
    41: "DescribeDelegationToken: no delegation tokens",
    74: "ListClientMetricsResources: no client metrics (KIP-714)",
    80: "AddRaftVoter: a static quorum",
    81: "RemoveRaftVoter: a static quorum",
}

CONTROLLER_NOT_YET_SERVED: Final[dict[int, str]] = {
    38: "CreateDelegationToken: no delegation tokens",
    39: "RenewDelegationToken: no delegation tokens",
    40: "ExpireDelegationToken: no delegation tokens",
    41: "DescribeDelegationToken: no delegation tokens",
    58: "Envelope: brokers forward with the request itself",
    70: "ControllerRegistration: controllers are known from controller.quorum.voters",
    73: "AssignReplicasToDirs: one log directory per broker for now",
    80: "AddRaftVoter: a static quorum",
    81: "RemoveRaftVoter: a static quorum",
    82: "UpdateRaftVoter: a static quorum",
}

# served, but below Kafka 4.0's max: key -> why
BROKER_BELOW_KAFKA_MAX: Final[dict[int, str]] = {}

# served, but not from Kafka 4.0's min: key -> why
CONTROLLER_ABOVE_KAFKA_MIN: Final[dict[int, str]] = {
    1: "the controller's Fetch serves the metadata log to the quorum only (raft.codec)",
}

TOPIC = "versions"
ONE_SECOND = datetime.timedelta(seconds=1)
TXN_ID = "api-versions-txn"


@pytest.fixture(scope="module")
def node() -> Iterator[LocalCluster]:
    with LocalCluster() as cluster:
        with WireClient(cluster.bootstrap_servers) as client:
            created = client.request(19, 7, CreateTopicsRequest(
                topics=(CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1,
                                       assignments=(), configs=()),),
                timeout=ONE_SECOND, validate_only=False))
            assert created.topics[0].error_code == ErrorCode.none
        yield cluster


@pytest.fixture
def client(node: LocalCluster) -> Iterator[WireClient]:
    with WireClient(node.bootstrap_servers) as wire:
        yield wire


def _advertised(address: str) -> dict[int, tuple[int, int]]:
    with WireClient(address) as wire:
        response = wire.request(18, 3, ApiVersionsRequest(
            client_software_name="api-versions-table", client_software_version="1"))
    assert response.error_code == ErrorCode.none
    return {int(each.api_key): (int(each.min_version), int(each.max_version))
            for each in response.api_keys}


def _compare(ours: dict[int, tuple[int, int]], kafka: dict[int, tuple[int, int]],
             not_served: dict[int, str], below_max: dict[int, str],
             above_min: dict[int, str]) -> list[str]:
    problems = []
    for key, (kafka_min, kafka_max) in sorted(kafka.items()):
        if key not in ours:
            if key not in not_served:
                problems.append(f"api {key}: Kafka 4.0 serves {kafka_min}-{kafka_max}, we do "
                                "not, and it is not listed as not yet served")
            continue
        low, high = ours[key]
        if key in not_served:
            problems.append(f"api {key} is served now ({low}-{high}): take it off the "
                            "not-yet-served list")
        if high < kafka_max and key not in below_max:
            problems.append(f"api {key}: our max {high} < Kafka 4.0's {kafka_max}")
        if high >= kafka_max and key in below_max:
            problems.append(f"api {key} reaches Kafka 4.0's max now: take it off the list of "
                            "exceptions")
        if low > kafka_min and key not in above_min:
            problems.append(f"api {key}: our min {low} > Kafka 4.0's {kafka_min}")
    for listed in (not_served, below_max, above_min):
        problems += [f"api {key} is listed but Kafka 4.0 does not serve it"
                     for key in listed if key not in kafka]
    return problems


def test_broker_listener_serves_kafka_4_0_versions(node: LocalCluster) -> None:
    ours = _advertised(node.bootstrap_servers)
    assert _compare(ours, KAFKA_4_0_BROKER, BROKER_NOT_YET_SERVED, BROKER_BELOW_KAFKA_MAX,
                    {}) == []


def test_controller_listener_serves_kafka_4_0_versions(node: LocalCluster) -> None:
    ours = _advertised(f"127.0.0.1:{node.controller_port}")
    assert _compare(ours, KAFKA_4_0_CONTROLLER, CONTROLLER_NOT_YET_SERVED, {},
                    CONTROLLER_ABOVE_KAFKA_MIN) == []


def test_the_comparison_catches_each_kind_of_gap() -> None:
    """The check above is only as good as its comparison: each kind of gap is reported."""
    kafka = {1: (4, 17), 2: (1, 10), 3: (0, 13)}
    assert _compare({1: (4, 17), 2: (1, 10), 3: (0, 13)}, kafka, {}, {}, {}) == []
    assert len(_compare({1: (4, 16), 2: (1, 10), 3: (0, 13)}, kafka, {}, {}, {})) == 1
    assert len(_compare({1: (4, 17), 2: (1, 10)}, kafka, {}, {}, {})) == 1
    assert len(_compare({1: (5, 17), 2: (1, 10), 3: (0, 13)}, kafka, {}, {}, {})) == 1
    assert len(_compare({1: (4, 17), 2: (1, 10), 3: (0, 13)}, kafka, {3: "x"}, {}, {})) == 1
    assert len(_compare({1: (4, 17), 2: (1, 10), 3: (0, 13)}, kafka, {}, {2: "x"}, {})) == 1
    assert len(_compare({1: (4, 17), 2: (1, 10), 3: (0, 13)}, kafka, {9: "x"}, {}, {})) == 1


# -- the versions that reached Kafka 4.0's with issue 18 ------------------------------------


def _produce(client: WireClient, count: int) -> None:
    batch = build_batch([(b"k", b"v%d" % i, (), 1_700_000_000_000 + i) for i in range(count)])
    response = client.request(0, 11, ProduceRequest(
        acks=1, timeout=ONE_SECOND, transactional_id=None, topic_data=(TopicProduceData(
            name=TOPIC, partition_data=(PartitionProduceData(index=0, records=batch),)),)))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


def _topic_id(client: WireClient) -> uuid.UUID:
    response = client.request(3, 13, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TOPIC),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    topic_id: uuid.UUID = response.topics[0].topic_id
    return topic_id


def test_metadata_v13_has_a_top_level_error_code(client: WireClient) -> None:
    for topics in (None, (MetadataRequestTopic(topic_id=None, name=TOPIC),)):
        response = client.request(3, 13, MetadataRequest(
            topics=topics, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
        assert response.error_code == ErrorCode.none
        assert TOPIC in [topic.name for topic in response.topics]
        assert [broker.node_id for broker in response.brokers] == [1]


def test_fetch_v17_and_list_offsets_v10(client: WireClient) -> None:
    _produce(client, 3)
    offsets = client.request(2, 10, ListOffsetsRequest(
        replica_id=-1, isolation_level=0, timeout=ONE_SECOND, topics=(ListOffsetsTopic(
            name=TOPIC, partitions=(ListOffsetsPartition(partition_index=0, timestamp=-1),)),)))
    partition = offsets.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    end = partition.offset
    assert end >= 3
    fetched = client.request(1, 17, FetchRequest(
        max_wait=datetime.timedelta(0), min_bytes=0, topics=(FetchTopic(
            topic_id=_topic_id(client), partitions=(FetchPartition(
                partition=0, fetch_offset=end - 3, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=()))
    data = fetched.responses[0].partitions[0]
    assert data.error_code == ErrorCode.none
    assert data.high_watermark == end
    assert data.records


def test_describe_cluster_v2_lists_fenced_brokers_only_when_asked(client: WireClient) -> None:
    for include_fenced in (False, True):
        response = client.request(60, 2, DescribeClusterRequest(
            include_cluster_authorized_operations=False, include_fenced_brokers=include_fenced))
        assert response.error_code == ErrorCode.none
        # the one broker is running: listed, not fenced, either way
        assert [(b.broker_id, b.is_fenced) for b in response.brokers] == [(1, False)]


def _begin_transaction(client: WireClient) -> tuple[int, int]:
    found = client.request(10, 4, FindCoordinatorRequest(key_type=1, coordinator_keys=(TXN_ID,)))
    assert found.coordinators[0].error_code == ErrorCode.none
    init = client.request(22, 5, InitProducerIdRequest(
        transactional_id=TXN_ID, transaction_timeout=datetime.timedelta(seconds=60)))
    assert init.error_code == ErrorCode.none
    added = client.request(24, 3, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TXN_ID, v3_and_below_producer_id=init.producer_id,
        v3_and_below_producer_epoch=init.producer_epoch,
        v3_and_below_topics=(AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),)))
    codes = [p.partition_error_code for t in added.results_by_topic_v3_and_below
             for p in t.results_by_partition]
    assert codes == [ErrorCode.none]
    return int(init.producer_id), int(init.producer_epoch)


def _end(client: WireClient, producer_id: int, epoch: int) -> Any:
    return client.request(26, 5, EndTxnRequest(transactional_id=TXN_ID, producer_id=producer_id,
                                               producer_epoch=epoch, committed=False))


def test_end_txn_v5_answers_the_producer_id_and_epoch_to_go_on_with(client: WireClient) -> None:
    """Without transaction.version 2 the end of a transaction bumps no epoch: v5 answers the
    same producer id and epoch (docs/deviations.md); a fenced epoch gets -1 and -1."""
    producer_id, epoch = _begin_transaction(client)
    # TxnOffsetCommit v5 (KIP-890 part 2 too) inside the transaction, as v4 after
    # AddOffsetsToTxn
    group = "api-versions-group"
    found = client.request(10, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=(group,)))
    assert found.coordinators[0].error_code == ErrorCode.none
    added = client.request(25, 4, AddOffsetsToTxnRequest(
        transactional_id=TXN_ID, producer_id=producer_id, producer_epoch=epoch, group_id=group))
    assert added.error_code == ErrorCode.none
    committed = client.request(28, 5, TxnOffsetCommitRequest(
        transactional_id=TXN_ID, group_id=group, producer_id=producer_id, producer_epoch=epoch,
        topics=(TxnOffsetCommitRequestTopic(name=TOPIC, partitions=(
            TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                            committed_metadata=None),)),)))
    assert [p.error_code for p in committed.topics[0].partitions] == [ErrorCode.none]
    stale = _end(client, producer_id, epoch - 1 if epoch > 0 else epoch + 1)
    assert stale.error_code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch)
    assert (stale.producer_id, stale.producer_epoch) == (-1, -1)
    ended = _end(client, producer_id, epoch)
    assert ended.error_code == ErrorCode.none
    assert (ended.producer_id, ended.producer_epoch) == (producer_id, epoch)


# -- KIP-430 authorized operations, seen by a real client -----------------------------------


def test_admin_client_sees_every_operation_allowed(node: LocalCluster) -> None:
    """librdkafka's describe_cluster / describe_topics with include_authorized_operations:
    with no authorizer every operation the resource type supports is allowed, as Kafka
    answers (KIP-430); without the option no operations are reported."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient

    admin = AdminClient({"bootstrap.servers": node.bootstrap_servers})
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=30)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE}
    topic = admin.describe_topics(TopicCollection([TOPIC]), include_authorized_operations=True)[
        TOPIC].result(timeout=30)
    assert set(topic.authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS}
    unasked = admin.describe_cluster().result(timeout=30)
    assert not unasked.authorized_operations


def test_describe_cluster_reports_cluster_operations_on_both_listeners(
        node: LocalCluster) -> None:
    every = sum(1 << code for code in (5, 7, 8, 9, 10, 11, 12))  # Kafka's cluster operations
    for address, endpoint_type in ((node.bootstrap_servers, 1),
                                   (f"127.0.0.1:{node.controller_port}", 2)):
        with WireClient(address) as wire:
            for include, expected in ((True, every), (False, -2147483648)):
                response = wire.request(60, 2, DescribeClusterRequest(
                    include_cluster_authorized_operations=include, endpoint_type=endpoint_type,
                    include_fenced_brokers=False))
                assert response.error_code == ErrorCode.none
                assert response.cluster_authorized_operations == expected
