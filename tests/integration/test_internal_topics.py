"""The internal topics get their own settings whichever way they come to exist: a group's or a
transactional id's first FindCoordinator, a client's Metadata request that auto-creates them,
or an administrator's CreateTopics (Kafka's AutoTopicCreationManager). Before, a Metadata
request made `__consumer_offsets` with `num.partitions` partitions and no compaction, and the
groups that hash past those partitions never found a coordinator.

Three nodes, each making the two topics by two different paths, so every path is seen for
both topics. `num.partitions` differs from the internal counts so a wrong path shows."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from kio.schema.create_topics.v7.request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient

OFFSETS = "__consumer_offsets"
TXN_STATE = "__transaction_state"
CONFIGS = {"num.partitions": "2", "offsets.topic.num.partitions": "7",
           "transaction.state.log.num.partitions": "5", "auto.create.topics.enable": "true"}
EXPECTED = {OFFSETS: 7, TXN_STATE: 5}
ONE_SECOND = datetime.timedelta(seconds=1)

Path = Callable[[WireClient, str], None]


def _by_metadata(client: WireClient, topic: str) -> None:
    request = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                              allow_auto_topic_creation=True,
                              include_topic_authorized_operations=False)
    client.request(3, 12, request)


def _by_find_coordinator(client: WireClient, topic: str) -> None:
    key_type = 0 if topic == OFFSETS else 1
    lookup = FindCoordinatorRequest(key_type=key_type, coordinator_keys=("some-id",))
    client.request(10, 4, lookup)


def _by_admin(client: WireClient, topic: str) -> None:
    (result,) = client.request(19, 7, _create(topic, -1)).topics
    assert (result.error_code, result.error_message) == (ErrorCode.none, None)
    assert result.num_partitions == EXPECTED[topic]


def _create(topic: str, partitions: int, **configs: str) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=(CreatableTopic(
        name=topic, num_partitions=partitions, replication_factor=-1, assignments=(),
        configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in configs.items())),),
        timeout=ONE_SECOND * 10, validate_only=False)


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[LocalCluster]]:
    with LocalCluster(configs=CONFIGS) as a, LocalCluster(configs=CONFIGS) as b, \
            LocalCluster(configs=CONFIGS) as c:
        yield [a, b, c]


# node index, topic, path: each topic by each path, each node making both topics
CASES = [(0, OFFSETS, _by_metadata), (0, TXN_STATE, _by_admin),
         (1, OFFSETS, _by_admin), (1, TXN_STATE, _by_find_coordinator),
         (2, OFFSETS, _by_find_coordinator), (2, TXN_STATE, _by_metadata)]


@pytest.mark.parametrize(("index", "topic", "path"), CASES,
                         ids=[f"{topic}-{path.__name__}" for _, topic, path in CASES])
def test_internal_topic_gets_its_own_settings(nodes: list[LocalCluster], index: int,
                                              topic: str, path: Path) -> None:
    node = nodes[index]
    with WireClient(node.bootstrap_servers) as client:
        path(client, topic)
    admin = AdminClient({"bootstrap.servers": node.bootstrap_servers})
    deadline = time.monotonic() + 20
    while (found := admin.list_topics(topic, timeout=10).topics.get(topic)) is None \
            or found.error is not None or not found.partitions:
        assert time.monotonic() < deadline, f"{topic} was not created"
        time.sleep(0.1)
    assert len(found.partitions) == EXPECTED[topic]
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].value == "104857600"
    if topic == TXN_STATE:
        assert configs["unclean.leader.election.enable"].value == "false"
        assert configs["min.insync.replicas"].value == "1"  # capped by the one broker


def test_an_admin_cannot_make_an_internal_topic_its_coordinator_could_not_use(
        nodes: list[LocalCluster]) -> None:
    with WireClient(nodes[0].bootstrap_servers) as client:
        (wrong_count,) = client.request(19, 7, _create(OFFSETS, 3)).topics
        (not_compact,) = client.request(19, 7, _create(
            TXN_STATE, -1, **{"cleanup.policy": "delete"})).topics
        (metadata,) = client.request(19, 7, _create("__cluster_metadata", 1)).topics
    assert wrong_count.error_code == ErrorCode.invalid_partitions
    assert wrong_count.error_message == (
        "__consumer_offsets must have offsets.topic.num.partitions=7 partitions: its "
        "coordinator hashes ids over that many (asked for 3).")
    assert not_compact.error_code == ErrorCode.invalid_config
    assert metadata.error_code == ErrorCode.invalid_request
    assert metadata.error_message == "Creation of internal topic __cluster_metadata is prohibited."
