"""Every API a node serves asks the authorizer with Kafka's resource and operation: walked
over the broker's and the controller's API tables, so that an API added later without an
entry here fails `test_every_served_api_has_an_entry`.

One real combined node runs in-process for the module; its dispatchers are driven directly
with a request context of our principal, and given a fake authorizer at the node's seam (the
`authorizer` attribute the node sets): one that allows nothing, then one that allows exactly
the (operation, resource) pairs Kafka's KafkaApis / ControllerApis ask for that request.
Refused, each request answers Kafka's authorization error and changes nothing (topics,
configs, quotas, every partition's log, the group's and the transaction's state are compared
before and after); allowed, it answers no authorization error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import sys
import types
import typing
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from pykraft.net.principal import KafkaPrincipal
from pykraft.net.server import RequestContext
from pykraft.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from pykraft.protocol.framing import RequestHeader, request_type
from pykraft.testing.batches import frame_batch, raw_record
from pykraft.testing.local_cluster import LocalCluster

Op = AclOperation
TOPIC, GROUP, CLUSTER, TXN = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                              ResourceType.TRANSACTIONAL_ID)
ALICE = KafkaPrincipal.user("alice")
T = "authz-t"  # two partitions, with records
GROWN = "authz-grow"  # one partition, for CreatePartitions
DOOMED = "authz-doomed"  # for DeleteTopics
NEW = "authz-new"  # for CreateTopics
G = "authz-g"  # a group with a committed offset
DOOMED_GROUP = "authz-g-doomed"  # for DeleteGroups
X = "authz-txn"  # a transactional id with a producer
Grant = tuple[AclOperation, ResourceType, str]
AUTHORIZATION_ERRORS = frozenset({
    ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed,
    ErrorCode.cluster_authorization_failed, ErrorCode.transactional_id_authorization_failed})
# APIs whose handlers other modules own and test (broker.acl_apis, broker.credential_apis)
# (and SaslHandshake / SaslAuthenticate, which come before a principal exists: Kafka
# authorizes neither)
AUTHORIZED_ELSEWHERE = frozenset({29, 30, 31, 50, 51, 17, 36})


class Grants:
    """A fake authorizer: allows exactly `grants`, to the test's principal only."""

    def __init__(self, grants: frozenset[Grant] = frozenset()) -> None:
        self.grants = grants
        self.asked: list[Grant] = []

    def authorize(self, context: RequestContext, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        assert context.principal == ALICE, "asked about the request's principal"
        self.asked.append((operation, resource_type, name))
        return (operation, resource_type, name) in self.grants

    def authorize_by_resource_type(self, context: RequestContext, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        assert context.principal == ALICE
        return any(g[0] == operation and g[1] == resource_type for g in self.grants)


# -- building requests -------------------------------------------------------------------


def _zero(hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return None
    if origin is tuple:
        return ()
    if isinstance(hint, type):
        if issubclass(hint, bool):
            return False
        if issubclass(hint, datetime.timedelta):
            return datetime.timedelta(seconds=5)
        if issubclass(hint, int):
            return -1
        if issubclass(hint, str):
            return ""
        if issubclass(hint, bytes):
            return b""
    raise TypeError(f"no default for {hint!r}")


def entity(cls: type, **values: Any) -> Any:
    """`cls` with those of `values` its version has, its other required fields empty (-1,
    "", (), None)."""
    names = {each.name for each in dataclasses.fields(cls)}
    values = {name: value for name, value in values.items() if name in names}
    hints = typing.get_type_hints(cls)
    for each in dataclasses.fields(cls):
        if (each.init and each.name not in values and each.default is dataclasses.MISSING
                and each.default_factory is dataclasses.MISSING):
            values[each.name] = _zero(hints[each.name])
    return cls(**values)


@dataclass(frozen=True)
class Call:
    api_key: int
    version: int
    build: Callable[[Any], Any]  # the request module -> the request

    def request(self) -> Any:
        cls = request_type(self.api_key, self.version)
        return self.build(sys.modules[cls.__module__])


def records(*, producer_id: int = -1, transactional: bool = False) -> bytes:
    return frame_batch(raw_record(0, None, b"authz"), 1, producer_id=producer_id,
                       producer_epoch=0 if producer_id >= 0 else -1,
                       base_sequence=0 if producer_id >= 0 else -1,
                       attributes=0x10 if transactional else 0)


def one(item: Any) -> tuple[Any, ...]:
    return (item,)


SECONDS_5 = datetime.timedelta(seconds=5)
SECONDS_60 = datetime.timedelta(seconds=60)


def produce(m: Any, *, txn: str | None = None, batch: bytes | None = None,
            index: int = 0) -> Any:
    partition = entity(m.PartitionProduceData, index=index, records=batch or records())
    topic = entity(m.TopicProduceData, name=T, partition_data=one(partition))
    return entity(m.ProduceRequest, transactional_id=txn, acks=1, timeout=SECONDS_5,
                  topic_data=one(topic))


def produce_transactional(m: Any) -> Any:
    return produce(m, txn=X, batch=records(producer_id=0, transactional=True))


def fetch(m: Any, replica_id: int = -1) -> Any:
    partition = entity(m.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=0,
                       log_start_offset=-1, partition_max_bytes=1 << 20, last_fetched_epoch=-1)
    topic = entity(m.FetchTopic, topic=T, partitions=one(partition))
    return entity(m.FetchRequest, replica_id=replica_id, max_wait=datetime.timedelta(0),
                  min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
                  session_epoch=-1, rack_id="", topics=one(topic), forgotten_topics_data=())


def follower_fetch(m: Any) -> Any:
    return fetch(m, replica_id=7)


def list_offsets(m: Any) -> Any:
    partition = entity(m.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1,
                       timestamp=-1)
    topic = entity(m.ListOffsetsTopic, name=T, partitions=one(partition))
    return entity(m.ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=one(topic))


def metadata(m: Any) -> Any:
    return entity(m.MetadataRequest, topics=one(entity(m.MetadataRequestTopic, topic_id=None,
                                                       name=T)),
                  allow_auto_topic_creation=False, include_topic_authorized_operations=True)


def offset_commit(m: Any, group: str = G) -> Any:
    partition = entity(m.OffsetCommitRequestPartition, partition_index=0, committed_offset=2,
                       committed_leader_epoch=-1, committed_metadata="")
    topic = entity(m.OffsetCommitRequestTopic, name=T, partitions=one(partition))
    return entity(m.OffsetCommitRequest, group_id=group, generation_id_or_member_epoch=-1,
                  member_id="", group_instance_id=None, topics=one(topic))


def offset_fetch(m: Any) -> Any:
    topic = entity(m.OffsetFetchRequestTopics, name=T, partition_indexes=(0,))
    group = entity(m.OffsetFetchRequestGroup, group_id=G, member_id=None, member_epoch=-1,
                   topics=one(topic))
    return entity(m.OffsetFetchRequest, require_stable=False, groups=one(group))


def find_group_coordinator(m: Any, group: str = G) -> Any:
    return entity(m.FindCoordinatorRequest, key_type=0, coordinator_keys=one(group))


def find_transaction_coordinator(m: Any) -> Any:
    return entity(m.FindCoordinatorRequest, key_type=1, coordinator_keys=one(X))


def join_group(m: Any) -> Any:
    protocol = entity(m.JoinGroupRequestProtocol, name="range", metadata=b"")
    return entity(m.JoinGroupRequest, group_id="authz-join", session_timeout=SECONDS_60,
                  rebalance_timeout=SECONDS_60, member_id="", group_instance_id=None,
                  protocol_type="consumer", protocols=one(protocol))


def heartbeat(m: Any) -> Any:
    return entity(m.HeartbeatRequest, group_id=G, generation_id=1, member_id="m",
                  group_instance_id=None)


def leave_group(m: Any) -> Any:
    return entity(m.LeaveGroupRequest, group_id=G,
                  members=one(entity(m.MemberIdentity, member_id="m", group_instance_id=None)))


def sync_group(m: Any) -> Any:
    return entity(m.SyncGroupRequest, group_id=G, generation_id=1, member_id="m",
                  group_instance_id=None, assignments=())


def describe_groups(m: Any) -> Any:
    return entity(m.DescribeGroupsRequest, groups=one(G), include_authorized_operations=True)


def list_groups(m: Any) -> Any:
    return entity(m.ListGroupsRequest, states_filter=())


def create_topic(m: Any, name: str = NEW, partitions: int = 1) -> Any:
    topic = entity(m.CreatableTopic, name=name, num_partitions=partitions,
                   replication_factor=1, assignments=(), configs=())
    return entity(m.CreateTopicsRequest, validate_only=False, timeout=SECONDS_5,
                  topics=one(topic))


def delete_topic(m: Any) -> Any:
    return entity(m.DeleteTopicsRequest, timeout=SECONDS_5,
                  topics=one(entity(m.DeleteTopicState, name=DOOMED, topic_id=None)))


def delete_records(m: Any) -> Any:
    partition = entity(m.DeleteRecordsPartition, partition_index=1, offset=1)
    topic = entity(m.DeleteRecordsTopic, name=T, partitions=one(partition))
    return entity(m.DeleteRecordsRequest, timeout=SECONDS_5, topics=one(topic))


def init_producer_id(m: Any, txn: str | None = X) -> Any:
    return entity(m.InitProducerIdRequest, transactional_id=txn,
                  transaction_timeout=SECONDS_60, producer_id=-1, producer_epoch=-1)


def init_idempotent_producer(m: Any) -> Any:
    return init_producer_id(m, txn=None)


def offset_for_leader_epoch(m: Any) -> Any:
    partition = entity(m.OffsetForLeaderPartition, partition=0, current_leader_epoch=-1,
                       leader_epoch=0)
    topic = entity(m.OffsetForLeaderTopic, topic=T, partitions=one(partition))
    return entity(m.OffsetForLeaderEpochRequest, replica_id=-1, topics=one(topic))


def add_partitions_v3(m: Any) -> Any:
    topic = entity(m.AddPartitionsToTxnTopic, name=T, partitions=(0,))
    return entity(m.AddPartitionsToTxnRequest, v3_and_below_transactional_id=X,
                  v3_and_below_producer_id=123456, v3_and_below_producer_epoch=0,
                  v3_and_below_topics=one(topic), transactions=())


def add_partitions_v5(m: Any) -> Any:
    topic = entity(m.AddPartitionsToTxnTopic, name=T, partitions=(0,))
    txn = entity(m.AddPartitionsToTxnTransaction, transactional_id=X, producer_id=123456,
                 producer_epoch=0, verify_only=True, topics=one(topic))
    return entity(m.AddPartitionsToTxnRequest, transactions=one(txn))


def add_offsets(m: Any) -> Any:
    return entity(m.AddOffsetsToTxnRequest, transactional_id=X, producer_id=123456,
                  producer_epoch=0, group_id=G)


def end_txn(m: Any) -> Any:
    return entity(m.EndTxnRequest, transactional_id=X, producer_id=123456, producer_epoch=0,
                  committed=False)


def write_txn_markers(m: Any) -> Any:
    topic = entity(m.WritableTxnMarkerTopic, name=T, partition_indexes=(1,))
    marker = entity(m.WritableTxnMarker, producer_id=987654, producer_epoch=0,
                    transaction_result=False, coordinator_epoch=0, topics=one(topic))
    return entity(m.WriteTxnMarkersRequest, markers=one(marker))


def txn_offset_commit(m: Any) -> Any:
    partition = entity(m.TxnOffsetCommitRequestPartition, partition_index=0,
                       committed_offset=2, committed_leader_epoch=-1, committed_metadata="")
    topic = entity(m.TxnOffsetCommitRequestTopic, name=T, partitions=one(partition))
    return entity(m.TxnOffsetCommitRequest, transactional_id=X, group_id=G, producer_id=0,
                  producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None,
                  topics=one(topic))


def describe_configs(resource_type: int, name: str) -> Callable[[Any], Any]:
    def build(m: Any) -> Any:
        resource = entity(m.DescribeConfigsResource, resource_type=resource_type,
                          resource_name=name, configuration_keys=None)
        return entity(m.DescribeConfigsRequest, include_synonyms=False,
                      include_documentation=False, resources=one(resource))
    return build


def alter_configs(m: Any) -> Any:
    config = entity(m.AlterableConfig, name="retention.ms", value="3600000")
    resource = entity(m.AlterConfigsResource, resource_type=2, resource_name=T,
                      configs=one(config))
    return entity(m.AlterConfigsRequest, validate_only=False, resources=one(resource))


def incremental_alter_configs(m: Any) -> Any:
    config = entity(m.AlterableConfig, name="retention.ms", config_operation=0,
                    value="3600000")
    resource = entity(m.AlterConfigsResource, resource_type=2, resource_name=T,
                      configs=one(config))
    return entity(m.IncrementalAlterConfigsRequest, validate_only=False,
                  resources=one(resource))


def alter_replica_log_dirs(m: Any) -> Any:
    return entity(m.AlterReplicaLogDirsRequest, dirs=())


def describe_log_dirs(m: Any) -> Any:
    return entity(m.DescribeLogDirsRequest, topics=None)


def create_partitions(m: Any) -> Any:
    topic = entity(m.CreatePartitionsTopic, name=GROWN, count=2, assignments=None)
    return entity(m.CreatePartitionsRequest, validate_only=False, timeout=SECONDS_5,
                  topics=one(topic))


def delete_groups(m: Any) -> Any:
    return entity(m.DeleteGroupsRequest, groups_names=one(DOOMED_GROUP))


def elect_leaders(m: Any) -> Any:
    return entity(m.ElectLeadersRequest, election_type=0, timeout=SECONDS_5,
                  topic_partitions=one(entity(m.TopicPartitions, topic=T, partitions=(0,))))


def alter_reassignments(m: Any) -> Any:
    return entity(m.AlterPartitionReassignmentsRequest, timeout=SECONDS_5, topics=())


def list_reassignments(m: Any) -> Any:
    return entity(m.ListPartitionReassignmentsRequest, timeout=SECONDS_5, topics=None)


def offset_delete(m: Any) -> Any:
    partition = entity(m.OffsetDeleteRequestPartition, partition_index=1)
    topic = entity(m.OffsetDeleteRequestTopic, name=T, partitions=one(partition))
    return entity(m.OffsetDeleteRequest, group_id=G, topics=one(topic))


def describe_client_quotas(m: Any) -> Any:
    return entity(m.DescribeClientQuotasRequest, components=(), strict=False)


def alter_client_quotas(m: Any) -> Any:
    quota = entity(m.OpData, key="producer_byte_rate", value=1000.0, remove=False)
    user = entity(m.EntityData, entity_type="user", entity_name="authz-u")
    return entity(m.AlterClientQuotasRequest, validate_only=False,
                  entries=one(entity(m.EntryData, entity=one(user), ops=one(quota))))


def describe_quorum(m: Any) -> Any:
    partition = entity(m.PartitionData, partition_index=0)
    return entity(m.DescribeQuorumRequest, topics=one(
        entity(m.TopicData, topic_name="__cluster_metadata", partitions=one(partition))))


def update_features(m: Any) -> Any:
    return entity(m.UpdateFeaturesRequest, timeout=SECONDS_5, feature_updates=(),
                  validate_only=False)


def describe_cluster(m: Any) -> Any:
    return entity(m.DescribeClusterRequest, include_cluster_authorized_operations=True,
                  endpoint_type=1, include_fenced_brokers=False)


def describe_controllers(m: Any) -> Any:
    return entity(m.DescribeClusterRequest, include_cluster_authorized_operations=False,
                  endpoint_type=2, include_fenced_brokers=False)


def describe_producers(m: Any) -> Any:
    return entity(m.DescribeProducersRequest,
                  topics=one(entity(m.TopicRequest, name=T, partition_indexes=(0,))))


def unregister_broker(m: Any) -> Any:
    return entity(m.UnregisterBrokerRequest, broker_id=99)


def describe_transactions(m: Any) -> Any:
    return entity(m.DescribeTransactionsRequest, transactional_ids=one(X))


def list_transactions(m: Any) -> Any:
    return entity(m.ListTransactionsRequest, state_filters=(), producer_id_filters=(),
                  duration_filter=-1)


def consumer_group_heartbeat(m: Any) -> Any:
    return entity(m.ConsumerGroupHeartbeatRequest, group_id="authz-cg", member_id="",
                  member_epoch=0, instance_id=None, rack_id=None,
                  rebalance_timeout=SECONDS_60, subscribed_topic_names=one(T),
                  server_assignor=None, topic_partitions=())


def consumer_group_describe(m: Any) -> Any:
    return entity(m.ConsumerGroupDescribeRequest, group_ids=one(G),
                  include_authorized_operations=True)


def describe_topic_partitions(m: Any) -> Any:
    return entity(m.DescribeTopicPartitionsRequest, topics=one(entity(m.TopicRequest, name=T)),
                  response_partition_limit=100, cursor=None)


def api_versions(m: Any) -> Any:
    return entity(m.ApiVersionsRequest, client_software_name="authz",
                  client_software_version="1")


def vote(m: Any) -> Any:
    return entity(m.VoteRequest, cluster_id="not-this-cluster", voter_id=1, topics=())


def begin_quorum_epoch(m: Any) -> Any:
    return entity(m.BeginQuorumEpochRequest, cluster_id="not-this-cluster", voter_id=1,
                  topics=(), leader_endpoints=())


def end_quorum_epoch(m: Any) -> Any:
    return entity(m.EndQuorumEpochRequest, cluster_id="not-this-cluster", topics=(),
                  leader_endpoints=())


def raft_fetch(m: Any) -> Any:
    return entity(m.FetchRequest, cluster_id="not-this-cluster",
                  max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20,
                  isolation_level=0, session_id=0, session_epoch=-1, topics=(),
                  forgotten_topics_data=(), rack_id="")


def fetch_snapshot(m: Any) -> Any:
    return entity(m.FetchSnapshotRequest, cluster_id="not-this-cluster", replica_id=99,
                  max_bytes=1 << 20, topics=())


def broker_registration(m: Any) -> Any:
    return entity(m.BrokerRegistrationRequest, broker_id=99, cluster_id="not-this-cluster",
                  incarnation_id=uuid.uuid4(), listeners=(), features=(), rack=None,
                  is_migrating_zk_broker=False, log_dirs=(), previous_broker_epoch=-1)


def broker_heartbeat(m: Any) -> Any:
    return entity(m.BrokerHeartbeatRequest, broker_id=99, broker_epoch=1,
                  current_metadata_offset=0, want_fence=True, want_shut_down=False,
                  offline_log_dirs=())


def alter_partition(m: Any) -> Any:
    return entity(m.AlterPartitionRequest, broker_id=99, broker_epoch=1, topics=())


def allocate_producer_ids(m: Any) -> Any:
    return entity(m.AllocateProducerIdsRequest, broker_id=99, broker_epoch=1)


@dataclass(frozen=True)
class Case:
    """One API: its request, what Kafka asks to allow it, and what a refusal answers."""

    call: Call
    needs: frozenset[Grant]
    refused: ErrorCode | None  # None: nothing refused, the answer is filtered instead
    allowed_codes: frozenset[ErrorCode] | None = None  # None: anything but authorization
    check: Callable[[Any, bool], None] | None = None  # (response, allowed) -> asserts
    name: str = ""
    listeners: tuple[str, ...] = ("broker",)

    @property
    def id(self) -> str:
        return self.name or self.call.build.__name__


def grants(*items: Grant) -> frozenset[Grant]:
    return frozenset(items)


NONE = frozenset({ErrorCode.none})
BOTH = ("broker", "controller")
CONTROLLER = ("controller",)
CLUSTER_ACTION = (Op.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)


def on_cluster(operation: AclOperation) -> frozenset[Grant]:
    return grants((operation, CLUSTER, CLUSTER_NAME))


def _listed_groups(response: Any, allowed: bool) -> None:
    assert (G in {g.group_id for g in response.groups}) == allowed


def _listed_transactions(response: Any, allowed: bool) -> None:
    assert (X in {t.transactional_id for t in response.transaction_states}) == allowed


def _cluster_ops(response: Any, allowed: bool) -> None:
    # KIP-430: the principal's own operations on the cluster, DESCRIBE only when allowed
    assert response.cluster_authorized_operations == ((1 << Op.DESCRIBE) if allowed else 0)


def _no_data(response: Any, allowed: bool) -> None:
    partitions = [p for t in response.responses for p in t.partitions]
    assert partitions, "the refused partition is answered"
    assert all(bool(p.records) == allowed for p in partitions)


def _no_partitions(response: Any, allowed: bool) -> None:
    (topic,) = response.topics
    assert bool(topic.partitions) == allowed
    if not allowed:  # a topic named by name: its id is not told (the zero id: None decoded)
        assert topic.topic_id in (None, uuid.UUID(int=0))


TAF = ErrorCode.topic_authorization_failed
GAF = ErrorCode.group_authorization_failed
CAF = ErrorCode.cluster_authorization_failed
TXAF = ErrorCode.transactional_id_authorization_failed


BROKER_CASES: list[Case] = [
    Case(Call(0, 9, produce), grants((Op.WRITE, TOPIC, T)), TAF, NONE),
    Case(Call(0, 9, produce_transactional), grants((Op.WRITE, TOPIC, T), (Op.WRITE, TXN, X)),
         TXAF),
    Case(Call(1, 12, fetch), grants((Op.READ, TOPIC, T)), TAF, NONE, _no_data),
    Case(Call(1, 12, follower_fetch), grants(CLUSTER_ACTION), TAF),
    Case(Call(2, 7, list_offsets), grants((Op.DESCRIBE, TOPIC, T)), TAF, NONE),
    Case(Call(3, 12, metadata), grants((Op.DESCRIBE, TOPIC, T)), TAF, NONE, _no_partitions),
    Case(Call(8, 8, offset_commit), grants((Op.READ, GROUP, G), (Op.READ, TOPIC, T)), GAF,
         NONE),
    Case(Call(9, 8, offset_fetch), grants((Op.DESCRIBE, GROUP, G), (Op.DESCRIBE, TOPIC, T)),
         GAF, NONE),
    Case(Call(10, 4, find_group_coordinator), grants((Op.DESCRIBE, GROUP, G)), GAF, NONE),
    Case(Call(10, 4, find_transaction_coordinator), grants((Op.DESCRIBE, TXN, X)), TXAF, NONE),
    Case(Call(11, 5, join_group), grants((Op.READ, GROUP, "authz-join")), GAF,
         frozenset({ErrorCode.member_id_required})),
    Case(Call(12, 4, heartbeat), grants((Op.READ, GROUP, G)), GAF),
    Case(Call(13, 4, leave_group), grants((Op.READ, GROUP, G)), GAF),
    Case(Call(14, 4, sync_group), grants((Op.READ, GROUP, G)), GAF),
    Case(Call(15, 5, describe_groups), grants((Op.DESCRIBE, GROUP, G)), GAF, NONE),
    Case(Call(16, 4, list_groups), grants((Op.DESCRIBE, GROUP, G)), None, NONE,
         _listed_groups),
    Case(Call(19, 5, create_topic),  # the answer's configs need DESCRIBE_CONFIGS
         grants((Op.CREATE, TOPIC, NEW), (Op.DESCRIBE_CONFIGS, TOPIC, NEW)), TAF,
         listeners=BOTH),
    Case(Call(20, 6, delete_topic), grants((Op.DELETE, TOPIC, DOOMED)), TAF, listeners=BOTH),
    Case(Call(21, 2, delete_records), grants((Op.DELETE, TOPIC, T)), TAF, NONE),
    Case(Call(22, 4, init_producer_id), grants((Op.WRITE, TXN, X)), TXAF,
         frozenset({ErrorCode.none, ErrorCode.concurrent_transactions})),
    Case(Call(22, 4, init_idempotent_producer), on_cluster(Op.IDEMPOTENT_WRITE), CAF, NONE),
    Case(Call(22, 4, init_idempotent_producer), grants((Op.WRITE, TOPIC, T)), CAF, NONE,
         name="init_producer_id_kip_679"),  # WRITE on some topic is enough
    Case(Call(23, 4, offset_for_leader_epoch), grants((Op.DESCRIBE, TOPIC, T)), TAF, NONE),
    Case(Call(23, 4, offset_for_leader_epoch), grants(CLUSTER_ACTION), TAF, NONE,
         name="offset_for_leader_epoch_follower"),
    Case(Call(24, 3, add_partitions_v3), grants((Op.WRITE, TXN, X), (Op.WRITE, TOPIC, T)),
         TXAF),
    Case(Call(24, 5, add_partitions_v5),
         grants(CLUSTER_ACTION, (Op.WRITE, TXN, X), (Op.WRITE, TOPIC, T)), CAF),
    Case(Call(25, 3, add_offsets), grants((Op.WRITE, TXN, X), (Op.READ, GROUP, G)), TXAF),
    Case(Call(26, 3, end_txn), grants((Op.WRITE, TXN, X)), TXAF),
    Case(Call(27, 1, write_txn_markers), grants(CLUSTER_ACTION), CAF),
    Case(Call(28, 3, txn_offset_commit),
         grants((Op.WRITE, TXN, X), (Op.READ, GROUP, G), (Op.READ, TOPIC, T)), TXAF),
    Case(Call(32, 4, describe_configs(2, T)), grants((Op.DESCRIBE_CONFIGS, TOPIC, T)), TAF,
         NONE, name="describe_topic_configs", listeners=BOTH),
    Case(Call(32, 4, describe_configs(4, "")), on_cluster(Op.DESCRIBE_CONFIGS), CAF, NONE,
         name="describe_broker_configs"),
    Case(Call(32, 4, describe_configs(32, G)), grants((Op.DESCRIBE_CONFIGS, GROUP, G)), GAF,
         NONE, name="describe_group_configs"),
    Case(Call(33, 2, alter_configs), grants((Op.ALTER_CONFIGS, TOPIC, T)), TAF, NONE,
         listeners=BOTH),
    Case(Call(34, 2, alter_replica_log_dirs), on_cluster(Op.ALTER), None, NONE),
    Case(Call(35, 4, describe_log_dirs), on_cluster(Op.DESCRIBE), CAF, NONE),
    Case(Call(37, 3, create_partitions), grants((Op.ALTER, TOPIC, GROWN)), TAF,
         listeners=BOTH),
    Case(Call(42, 2, delete_groups), grants((Op.DELETE, GROUP, DOOMED_GROUP)), GAF, NONE),
    Case(Call(43, 2, elect_leaders), on_cluster(Op.ALTER), CAF, listeners=BOTH),
    Case(Call(44, 1, incremental_alter_configs), grants((Op.ALTER_CONFIGS, TOPIC, T)), TAF,
         NONE, listeners=BOTH),
    Case(Call(45, 0, alter_reassignments), on_cluster(Op.ALTER), CAF, NONE, listeners=BOTH),
    Case(Call(46, 0, list_reassignments), on_cluster(Op.DESCRIBE), CAF, NONE,
         listeners=BOTH),
    Case(Call(47, 0, offset_delete), grants((Op.DELETE, GROUP, G), (Op.READ, TOPIC, T)), GAF,
         NONE),
    Case(Call(48, 1, describe_client_quotas), on_cluster(Op.DESCRIBE_CONFIGS), CAF, NONE),
    Case(Call(49, 1, alter_client_quotas), on_cluster(Op.ALTER_CONFIGS), CAF, NONE,
         listeners=BOTH),
    Case(Call(55, 2, describe_quorum), on_cluster(Op.DESCRIBE), CAF, NONE, listeners=BOTH),
    Case(Call(57, 1, update_features), on_cluster(Op.ALTER), CAF, NONE, listeners=BOTH),
    Case(Call(60, 1, describe_cluster), on_cluster(Op.DESCRIBE), None, NONE, _cluster_ops),
    Case(Call(60, 1, describe_controllers), on_cluster(Op.ALTER), CAF, NONE,
         listeners=CONTROLLER),
    Case(Call(61, 0, describe_producers), grants((Op.READ, TOPIC, T)), TAF, NONE),
    Case(Call(64, 0, unregister_broker), on_cluster(Op.ALTER), CAF, listeners=BOTH),
    Case(Call(65, 0, describe_transactions), grants((Op.DESCRIBE, TXN, X)), TXAF, NONE),
    Case(Call(66, 1, list_transactions), grants((Op.DESCRIBE, TXN, X)), None, NONE,
         _listed_transactions),
    Case(Call(68, 0, consumer_group_heartbeat),
         grants((Op.READ, GROUP, "authz-cg"), (Op.DESCRIBE, TOPIC, T)), GAF),
    Case(Call(69, 0, consumer_group_describe), grants((Op.DESCRIBE, GROUP, G)), GAF),
    Case(Call(75, 0, describe_topic_partitions), grants((Op.DESCRIBE, TOPIC, T)), TAF, NONE),
    Case(Call(18, 3, api_versions), grants(), None, NONE, listeners=BOTH),
]

# the controller listener's own: the quorum's and the brokers' RPCs (CLUSTER_ACTION only)
CONTROLLER_CASES: list[Case] = [
    Case(Call(52, 2, vote), grants(CLUSTER_ACTION), CAF, listeners=CONTROLLER),
    Case(Call(53, 1, begin_quorum_epoch), grants(CLUSTER_ACTION), CAF, listeners=CONTROLLER),
    Case(Call(54, 1, end_quorum_epoch), grants(CLUSTER_ACTION), CAF, listeners=CONTROLLER),
    Case(Call(1, 17, raft_fetch), grants(CLUSTER_ACTION), CAF, listeners=CONTROLLER),
    Case(Call(59, 1, fetch_snapshot), grants(CLUSTER_ACTION), CAF, listeners=CONTROLLER),
    Case(Call(62, 4, broker_registration), grants(CLUSTER_ACTION), CAF, listeners=CONTROLLER),
    Case(Call(63, 1, broker_heartbeat), grants(CLUSTER_ACTION), CAF, listeners=CONTROLLER),
    Case(Call(56, 3, alter_partition), grants(CLUSTER_ACTION), CAF, listeners=CONTROLLER),
    Case(Call(67, 0, allocate_producer_ids), grants(CLUSTER_ACTION), CAF,
         listeners=CONTROLLER),
]


CASES = BROKER_CASES + CONTROLLER_CASES


# -- the node --------------------------------------------------------------------------------


@dataclass
class Node:
    cluster: LocalCluster
    loop: asyncio.AbstractEventLoop
    node: Any
    dispatchers: dict[str, Any] = field(default_factory=dict)
    listener_names: dict[str, str] = field(default_factory=dict)

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    def send(self, listener: str, call: Call, authorizer: Any = None) -> Any:
        dispatcher = self.dispatchers[listener]
        if authorizer is not None:
            dispatcher.authorizer = authorizer
        context = RequestContext(RequestHeader(call.api_key, call.version, 1, "authz", 0),
                                 self.listener_names[listener], "127.0.0.1", 40000,
                                 principal=ALICE)
        return self.run(dispatcher.handle(context, call.request()))

    def state(self) -> Any:
        """What a refused request must leave as it was."""
        image = self.node.cache.image
        logs = sorted((p.topic, p.index, p.log.log_end_offset, p.log.log_start_offset)
                      for p in self.node.replicas.partitions())
        groups = self.node.groups.core
        offsets = groups.fetch_offsets(G, None)
        return ({name: len(t.partitions) for name, t in image.topics.by_name.items()},
                image.configs, image.client_quotas, logs,
                sorted((g.group_id, str(g.state)) for g in groups.list_groups()),
                offsets, repr(self.node.transactions.shell.core.describe(X)))


def _error_codes(value: Any) -> Iterator[ErrorCode]:
    if dataclasses.is_dataclass(value):
        for each in dataclasses.fields(value):
            inner = getattr(value, each.name)
            if each.name.endswith("error_code") and inner is not None:
                yield ErrorCode(inner)
            else:
                yield from _error_codes(inner)
    elif isinstance(value, tuple):
        for item in value:
            yield from _error_codes(item)


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    with LocalCluster(in_process=True, configs={"num.partitions": "1"}) as cluster:
        running = Node(cluster, cluster._loop, cluster._node)  # noqa: SLF001 - in-process
        for listener in running.node.listeners:
            kind = "controller" if type(listener.dispatcher).__name__ == "ControllerApis" \
                else "broker"
            running.dispatchers[kind] = listener.dispatcher
            running.listener_names[kind] = listener.name
        _seed(running)
        yield running


def _seed(node: Node) -> None:
    """Topics with records, a group with an offset, a transactional id with a producer."""
    for name, partitions in ((T, 2), (GROWN, 1), (DOOMED, 1)):
        response = node.send("broker", Call(19, 5, functools.partial(
            create_topic, name=name, partitions=partitions)))
        assert response.topics[0].error_code == ErrorCode.none
    _wait(lambda: all(node.node.replicas.get_partition(T, i) is not None for i in (0, 1)))
    for index in (0, 1):
        for _ in range(3):
            response = node.send("broker", Call(0, 9, functools.partial(produce, index=index)))
            assert set(_error_codes(response)) == {ErrorCode.none}
    for group in (G, DOOMED_GROUP):
        _wait(lambda g=group: set(_error_codes(node.send("broker", Call(
            10, 4, functools.partial(find_group_coordinator, group=g))))) == {ErrorCode.none})
        response = node.send("broker", Call(8, 8, functools.partial(offset_commit,
                                                                    group=group)))
        assert set(_error_codes(response)) == {ErrorCode.none}
    _wait(lambda: set(_error_codes(node.send("broker", Call(
        10, 4, find_transaction_coordinator)))) == {ErrorCode.none})
    _wait(lambda: set(_error_codes(node.send("broker", Call(
        22, 4, init_producer_id)))) == {ErrorCode.none})


def _wait(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the node"
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def _allow_all_after(node: Node) -> Iterator[None]:
    yield
    from pykraft.broker.authorizer import ALLOW_ALL

    for dispatcher in node.dispatchers.values():
        dispatcher.authorizer = ALLOW_ALL


# -- the tests -------------------------------------------------------------------------------


def test_every_served_api_has_an_entry(node: Node) -> None:
    """An API added to a listener without a case here fails this test."""
    for listener in ("broker", "controller"):
        served = set(node.dispatchers[listener].apis)
        covered = {case.call.api_key for case in CASES if listener in case.listeners}
        assert served - AUTHORIZED_ELSEWHERE <= covered, (
            f"{listener} APIs without an authorization case: "
            f"{sorted(served - AUTHORIZED_ELSEWHERE - covered)}")
        assert covered <= served


@pytest.mark.parametrize(("case", "listener"), [
    pytest.param(case, listener, id=f"{listener}-{case.id}")
    for case in CASES for listener in case.listeners])
def test_refused_without_the_acl_and_allowed_with_it(node: Node, case: Case,
                                                     listener: str) -> None:
    """Denied: Kafka's error, nothing changed; allowed exactly what Kafka asks: no refusal."""
    before = node.state()
    denied = node.send(listener, case.call, Grants())
    assert node.state() == before, "a refused request changed the node's state"
    codes = set(_error_codes(denied))
    if case.refused is None:
        assert not codes & AUTHORIZATION_ERRORS
    else:
        assert case.refused in codes, f"{case.id} answered {codes} to a principal without ACLs"
        # and nothing else went wrong (the other partitions of a refused AddPartitionsToTxn
        # are not attempted)
        assert codes - {ErrorCode.none, ErrorCode.operation_not_attempted} == {case.refused}
    if case.check is not None:
        case.check(denied, False)
    asked = Grants(case.needs)
    allowed = node.send(listener, case.call, asked)
    codes = set(_error_codes(allowed))
    assert not codes & AUTHORIZATION_ERRORS, f"{case.id} refused with {case.needs}: {codes}"
    if case.allowed_codes is not None:
        assert codes <= case.allowed_codes, codes
    if case.check is not None:
        case.check(allowed, True)


def _metadata_all(m: Any, *, operations: bool = False) -> Any:
    return entity(m.MetadataRequest, topics=None, allow_auto_topic_creation=False,
                  include_topic_authorized_operations=operations)


def _metadata_named(*names: str, create: bool = False) -> Callable[[Any], Any]:
    def build(m: Any) -> Any:
        return entity(m.MetadataRequest, topics=tuple(
            entity(m.MetadataRequestTopic, topic_id=None, name=name) for name in names),
            allow_auto_topic_creation=create, include_topic_authorized_operations=False)
    return build


def test_metadata_of_all_topics_lists_only_those_the_principal_may_describe(
        node: Node) -> None:
    """All topics: the describable ones with the principal's own KIP-430 operations; the
    others are not named at all."""
    answer = node.send("broker", Call(3, 12, functools.partial(_metadata_all, operations=True)),
                       Grants(grants((Op.READ, TOPIC, T), (Op.DESCRIBE, TOPIC, T),
                                     (Op.DESCRIBE, TOPIC, GROWN))))
    assert sorted(t.name for t in answer.topics) == sorted([T, GROWN])
    operations = {t.name: t.topic_authorized_operations for t in answer.topics}
    assert operations == {T: (1 << Op.READ) | (1 << Op.DESCRIBE), GROWN: 1 << Op.DESCRIBE}
    assert not node.send("broker", Call(3, 12, _metadata_all), Grants()).topics


def test_metadata_names_a_refused_topic_alike_whether_it_exists_or_not(node: Node) -> None:
    """TOPIC_AUTHORIZATION_FAILED, no partitions and no id, for an existing and a missing
    topic alike: a principal learns nothing of topics it may not describe."""
    answer = node.send("broker", Call(3, 12, _metadata_named(T, "authz-absent")), Grants())
    assert [(t.name, t.error_code, t.partitions, t.topic_id) for t in answer.topics] == [
        (T, TAF, (), uuid.UUID(int=0)), ("authz-absent", TAF, (), uuid.UUID(int=0))]


def test_metadata_auto_creates_only_with_create(node: Node) -> None:
    """Auto-creation needs CREATE on the cluster or the topic; without it the missing topic
    is refused and not created."""
    wanted = "authz-auto"
    describe = (Op.DESCRIBE, TOPIC, wanted)
    answer = node.send("broker", Call(3, 12, _metadata_named(wanted, create=True)),
                       Grants(grants(describe)))
    assert [t.error_code for t in answer.topics] == [TAF]
    assert node.node.cache.image.topics.by_name.get(wanted) is None
    answer = node.send("broker", Call(3, 12, _metadata_named(wanted, create=True)),
                       Grants(grants(describe, (Op.CREATE, TOPIC, wanted))))
    assert TAF not in set(_error_codes(answer))
    _wait(lambda: node.node.cache.image.topics.by_name.get(wanted) is not None)


def test_created_topic_configs_need_describe_configs(node: Node) -> None:
    """CreateTopics with CREATE alone creates the topic but hides its configs, partition
    count and replication factor (topic_config_error_code TOPIC_AUTHORIZATION_FAILED)."""
    wanted = "authz-hidden-configs"
    answer = node.send("broker", Call(19, 7, functools.partial(create_topic, name=wanted)),
                       Grants(grants((Op.CREATE, TOPIC, wanted))))
    (topic,) = answer.topics
    assert (topic.error_code, topic.topic_config_error_code) == (ErrorCode.none, TAF)
    assert (topic.num_partitions, topic.replication_factor, topic.configs) == (-1, -1, ())
    assert topic.topic_id != uuid.UUID(int=0)


def test_fetch_refuses_only_the_topics_it_may_not_read(node: Node) -> None:
    """One Fetch, two topics: the readable one's records come back, the other is refused
    without records."""
    def two_topics(m: Any) -> Any:
        request = fetch(m)
        other = dataclasses.replace(request.topics[0], topic=GROWN)
        return dataclasses.replace(request, topics=(request.topics[0], other))

    answer = node.send("broker", Call(1, 12, two_topics), Grants(grants((Op.READ, TOPIC, T))))
    by_topic = {t.topic: t.partitions[0] for t in answer.responses}
    assert by_topic[T].error_code == ErrorCode.none and by_topic[T].records
    assert by_topic[GROWN].error_code == TAF and not by_topic[GROWN].records


def test_a_broker_passes_the_controller_listeners_admin_checks(node: Node) -> None:
    """On the controller listener, a principal allowed CLUSTER_ACTION (a broker forwarding
    a request it has authorized) passes the admin APIs' own checks; without it, an admin
    tool talking to the controller gets the API's check."""
    call = Call(33, 2, alter_configs)
    answer = node.send("controller", call, Grants(grants(CLUSTER_ACTION)))
    assert set(_error_codes(answer)) == {ErrorCode.none}
    answer = node.send("controller", call, Grants(grants((Op.DESCRIBE, CLUSTER,
                                                           CLUSTER_NAME))))
    assert set(_error_codes(answer)) == {TAF}
