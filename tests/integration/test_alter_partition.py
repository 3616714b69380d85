"""AlterPartition (KIP-497) on the controller listener of a real node, at the wire.

Three stand-in brokers register with the node's controller over its controller listener
(BrokerRegistration, BrokerHeartbeat), so that the test knows their broker epochs and owns
the partitions it creates on them: no replica manager sends AlterPartition behind its back.
The node's own broker folds the resulting PartitionChangeRecords, so Metadata through the
broker listener shows what the controller decided.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kio.schema.alter_partition.v2 import request as ap2
from kio.schema.alter_partition.v3 import request as ap3
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4 import request as reg
from kio.schema.create_topics.v7 import request as ct
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from pykraft.protocol.api import ApiKey
from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient
from tests.integration import waits

T = TypeVar("T")
ALTER_PARTITION = 56
STAND_INS = (101, 102, 103)
CONFIGS = {"broker.session.timeout.ms": "600000"}


def wait_for(predicate: Callable[[], T | None], what: str, timeout_s: float = 20.0) -> T:
    return waits.wait_for(predicate, what, timeout_s)


class StandIns:
    """Brokers that exist only as registrations made over the controller listener."""

    def __init__(self, node: LocalCluster) -> None:
        self.node = node
        self.address = f"127.0.0.1:{node.controller_port}"
        self.wire = WireClient(self.address)
        self.epochs: dict[int, int] = {}
        versions = self.wire.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
            client_software_name="test", client_software_version="1"))
        self.features = tuple(
            reg.Feature(name=f.name, min_supported_version=f.min_version_level,
                        max_supported_version=f.max_version_level)
            for f in versions.finalized_features)

    def register(self, broker_id: int) -> int:
        request = reg.BrokerRegistrationRequest(
            broker_id=broker_id, cluster_id=self.node.cluster_id,
            incarnation_id=uuid.uuid4(),
            listeners=(reg.Listener(name="PLAINTEXT", host="127.0.0.1", port=1,
                                    security_protocol=0),),
            features=self.features, rack=None, is_migrating_zk_broker=False,
            log_dirs=(uuid.uuid4(),), previous_broker_epoch=-1)
        answer = self.wire.request(ApiKey.BROKER_REGISTRATION, 4, request)
        assert answer.error_code == ErrorCode.none, answer
        self.epochs[broker_id] = answer.broker_epoch
        return int(answer.broker_epoch)

    def heartbeat(self, broker_id: int, *, want_fence: bool = False) -> Any:
        return self.wire.request(ApiKey.BROKER_HEARTBEAT, 1, BrokerHeartbeatRequest(
            broker_id=broker_id, broker_epoch=self.epochs[broker_id],
            current_metadata_offset=1 << 40, want_fence=want_fence, want_shut_down=False))

    def start(self, broker_ids: tuple[int, ...] = STAND_INS) -> None:
        for broker_id in broker_ids:
            self.register(broker_id)
        for broker_id in broker_ids:
            wait_for(lambda b=broker_id: not self.heartbeat(b).is_fenced,  # type: ignore[misc]
                     f"broker {broker_id} unfenced")

    def create_topic(self, name: str, assignments: dict[int, tuple[int, ...]],
                     configs: dict[str, str] | None = None) -> uuid.UUID:
        request = ct.CreateTopicsRequest(
            topics=(ct.CreatableTopic(
                name=name, num_partitions=-1, replication_factor=-1,
                assignments=tuple(ct.CreatableReplicaAssignment(partition_index=p,
                                                                broker_ids=ids)
                                  for p, ids in assignments.items()),
                configs=tuple(ct.CreatableTopicConfig(name=k, value=v)
                              for k, v in (configs or {}).items())),),
            timeout=datetime.timedelta(seconds=10), validate_only=False)
        (result,) = self.wire.request(ApiKey.CREATE_TOPICS, 7, request).topics
        assert result.error_code == ErrorCode.none, result
        return uuid.UUID(str(result.topic_id))

    def alter(self, sender: int, topic_id: uuid.UUID, isr: tuple[int, ...], *,
              leader_epoch: int = 0, partition_epoch: int = 0, version: int = 3,
              broker_epoch: int | None = None, member_epochs: dict[int, int] | None = None,
              partition: int = 0) -> Any:
        epochs = self.epochs if member_epochs is None else member_epochs
        if version >= 3:
            item: Any = ap3.PartitionData(
                partition_index=partition, leader_epoch=leader_epoch,
                new_isr_with_epochs=tuple(ap3.BrokerState(broker_id=b,
                                                          broker_epoch=epochs.get(b, -1))
                                          for b in isr),
                leader_recovery_state=0, partition_epoch=partition_epoch)
            request: Any = ap3.AlterPartitionRequest(
                broker_id=sender,
                broker_epoch=self.epochs[sender] if broker_epoch is None else broker_epoch,
                topics=(ap3.TopicData(topic_id=topic_id, partitions=(item,)),))
        else:
            item = ap2.PartitionData(partition_index=partition, leader_epoch=leader_epoch,
                                     new_isr=isr, leader_recovery_state=0,
                                     partition_epoch=partition_epoch)
            request = ap2.AlterPartitionRequest(
                broker_id=sender,
                broker_epoch=self.epochs[sender] if broker_epoch is None else broker_epoch,
                topics=(ap2.TopicData(topic_id=topic_id, partitions=(item,)),))
        return self.wire.request(ALTER_PARTITION, version, request)

    def close(self) -> None:
        self.wire.close()


def partition_state(node: LocalCluster, topic: str, index: int = 0) -> tuple[Any, ...]:
    """(leader, leader epoch, replicas, isr) as the node's broker serves it."""
    with WireClient(node.bootstrap_servers) as client:
        answer = client.request(ApiKey.METADATA, 12, MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    (found,) = answer.topics
    for p in found.partitions:
        if p.partition_index == index:
            return (p.leader_id, p.leader_epoch, tuple(p.replica_nodes), tuple(p.isr_nodes))
    raise AssertionError(f"no partition {index} of {topic}")


@pytest.fixture(scope="module")
def node() -> Iterator[LocalCluster]:
    with LocalCluster(configs=CONFIGS) as running:
        yield running


@pytest.fixture(scope="module")
def stand_ins(node: LocalCluster) -> Iterator[StandIns]:
    brokers = StandIns(node)
    brokers.start()
    yield brokers
    brokers.close()


def only(answer: Any) -> Any:
    assert answer.error_code == ErrorCode.none, answer
    ((partition,),) = [t.partitions for t in answer.topics]
    return partition


def test_the_leader_shrinks_and_expands_the_isr(node: LocalCluster,
                                                stand_ins: StandIns) -> None:
    topic_id = stand_ins.create_topic("ap-shrink", {0: STAND_INS})
    shrunk = only(stand_ins.alter(101, topic_id, (101, 102)))
    assert shrunk.error_code == ErrorCode.none
    assert (shrunk.leader_id, shrunk.leader_epoch, tuple(shrunk.isr),
            shrunk.partition_epoch) == (101, 0, (101, 102), 1)
    wait_for(lambda: partition_state(node, "ap-shrink") == (101, 0, STAND_INS, (101, 102)),
             "the shrunk ISR in the broker's metadata")
    grown = only(stand_ins.alter(101, topic_id, (101, 102, 103), partition_epoch=1, version=2))
    assert (grown.error_code, tuple(grown.isr), grown.partition_epoch) == (
        ErrorCode.none, (101, 102, 103), 2)
    wait_for(lambda: partition_state(node, "ap-shrink")[3] == STAND_INS, "the ISR grown back")


def test_refusals(node: LocalCluster, stand_ins: StandIns) -> None:
    topic_id = stand_ins.create_topic("ap-refused", {0: STAND_INS})
    stale = stand_ins.alter(101, topic_id, (101,), broker_epoch=stand_ins.epochs[101] - 1)
    assert stale.error_code == ErrorCode.stale_broker_epoch and stale.topics == ()
    cases = [
        (stand_ins.alter(102, topic_id, (101, 102)), ErrorCode.invalid_request),
        (stand_ins.alter(101, topic_id, (102, 103)), ErrorCode.invalid_request),
        (stand_ins.alter(101, topic_id, (101, 104)), ErrorCode.invalid_request),
        (stand_ins.alter(101, topic_id, (101,), leader_epoch=3), ErrorCode.not_controller),
        (stand_ins.alter(101, topic_id, (101, 102),
                         member_epochs={101: stand_ins.epochs[101],
                                        102: stand_ins.epochs[102] + 1}),
         ErrorCode.ineligible_replica),
        (stand_ins.alter(101, topic_id, (101,), partition=7),
         ErrorCode.unknown_topic_or_partition),
    ]
    for answer, code in cases:
        assert only(answer).error_code == code, (answer, code)
    unknown = stand_ins.alter(101, uuid.uuid4(), (101,))
    assert only(unknown).error_code == ErrorCode.unknown_topic_id
    # a change, then the old epochs are refused
    assert only(stand_ins.alter(101, topic_id, (101, 102))).partition_epoch == 1
    old = only(stand_ins.alter(101, topic_id, (101,), partition_epoch=0))
    assert old.error_code == ErrorCode.invalid_update_version
    wait_for(lambda: partition_state(node, "ap-refused")[3] == (101, 102), "the one change")


def test_a_fenced_replica_cannot_join_and_a_fenced_leader_loses_leadership(
    node: LocalCluster, stand_ins: StandIns
) -> None:
    topic_id = stand_ins.create_topic("ap-fenced", {0: (101, 103)})
    only(stand_ins.alter(101, topic_id, (101,)))
    assert stand_ins.heartbeat(103, want_fence=True).is_fenced
    refused = only(stand_ins.alter(101, topic_id, (101, 103), partition_epoch=1))
    assert refused.error_code == ErrorCode.ineligible_replica
    wait_for(lambda: not stand_ins.heartbeat(103).is_fenced, "103 unfenced again")
    joined = only(stand_ins.alter(101, topic_id, (101, 103), partition_epoch=1))
    assert joined.error_code == ErrorCode.none and tuple(joined.isr) == (101, 103)
    # the leader fenced: 103 leads at a new leader epoch; 101's epoch is now fenced
    assert stand_ins.heartbeat(101, want_fence=True).is_fenced
    wait_for(lambda: partition_state(node, "ap-fenced")[:2] == (103, 1), "103 leading")
    wait_for(lambda: not stand_ins.heartbeat(101).is_fenced, "101 unfenced again")
    late = only(stand_ins.alter(101, topic_id, (101, 103), partition_epoch=2))
    assert late.error_code == ErrorCode.invalid_request  # no longer the leader
    back = only(stand_ins.alter(103, topic_id, (103, 101), leader_epoch=1, partition_epoch=3))
    assert back.error_code == ErrorCode.none and tuple(back.isr) == (103, 101)
