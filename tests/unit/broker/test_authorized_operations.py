"""KIP-430 authorized operations in Metadata and DescribeCluster, as Kafka answers with no
authorizer configured: every operation the resource type supports when asked, the sentinel
-2147483648 when not; and DescribeCluster v2's fenced brokers (KIP-1073)."""

from __future__ import annotations

import types
from typing import Any

import pytest
from kio.schema.describe_cluster.v2.request import DescribeClusterRequest
from kio.schema.metadata.v10.request import MetadataRequest as MetadataRequestV10
from kio.schema.metadata.v10.request import MetadataRequestTopic as TopicV10
from kio.schema.metadata.v13.request import MetadataRequest as MetadataRequestV13
from kio.schema.metadata.v13.request import MetadataRequestTopic as TopicV13

from pykraft.broker.admin_apis import AdminApis
from pykraft.broker.apis import BrokerApis
from pykraft.broker.metadata_cache import MetadataCache
from pykraft.net.server import RequestContext
from pykraft.protocol.api import CLUSTER_OPERATIONS, TOPIC_OPERATIONS
from pykraft.protocol.framing import encode_response
from tests.unit.controller.controller_harness import Harness

OMITTED = -2147483648
# Kafka's AclOperation codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
# CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12
TOPIC_BITS = {3, 4, 5, 6, 7, 8, 10, 11}
CLUSTER_BITS = {5, 7, 8, 9, 10, 11, 12}


def _bits(field: int) -> set[int]:
    return {bit for bit in range(32) if field >> bit & 1}


def _cache(*, fenced: int = 0) -> MetadataCache:
    harness = Harness()
    harness.start_brokers(2, racks=["r0", "r1"])
    for broker_id in range(2, 2 + fenced):  # registered, never heartbeated: fenced
        harness.register(broker_id)
    harness.create("t1", partitions=2, replication_factor=2)
    cache = MetadataCache(0, "cluster")
    cache.publish(None, harness.controller.image)  # type: ignore[arg-type]
    return cache


def _context(api_key: int, version: int) -> RequestContext:
    header: Any = types.SimpleNamespace(api_key=api_key, api_version=version)
    return RequestContext(header, "PLAINTEXT", "127.0.0.1", 1)


def _broker_apis(cache: MetadataCache) -> BrokerApis:
    replicas: Any = types.SimpleNamespace(server_configs={})
    return BrokerApis(0, cache, replicas, (), auto_create_topics=None)


def test_the_bit_fields_are_kafkas() -> None:
    assert _bits(TOPIC_OPERATIONS) == TOPIC_BITS
    assert _bits(CLUSTER_OPERATIONS) == CLUSTER_BITS


@pytest.mark.parametrize("include", [False, True])
async def test_metadata_v10_reports_topic_and_cluster_operations_when_asked(
        include: bool) -> None:
    cache = _cache()
    apis = _broker_apis(cache)
    for topics in (None, (TopicV10(topic_id=None, name="t1"), TopicV10(topic_id=None,
                                                                        name="nope"))):
        request = MetadataRequestV10(
            topics=topics, allow_auto_topic_creation=False,
            include_cluster_authorized_operations=include,
            include_topic_authorized_operations=include)
        answer = await apis.metadata(_context(3, 10), request)
        entity = cache.metadata_response(
            10, "PLAINTEXT", topics, topic_ops=TOPIC_OPERATIONS if include else OMITTED,
            cluster_ops=CLUSTER_OPERATIONS if include else OMITTED)
        # the all-topics answer is spliced bytes: they are the entity's encoding
        assert encode_response(1, answer) == encode_response(1, entity)
        assert entity.cluster_authorized_operations == (
            CLUSTER_OPERATIONS if include else OMITTED)
        # every topic, an unknown one too (Kafka sets it on each topic it answers)
        assert [t.topic_authorized_operations for t in entity.topics] == (
            [TOPIC_OPERATIONS if include else OMITTED] * len(entity.topics))


async def test_metadata_v13_asks_for_topic_operations_only() -> None:
    cache = _cache()
    apis = _broker_apis(cache)
    for include in (True, False, True):  # cached answers do not leak between the two
        answer = await apis.metadata(_context(3, 13), MetadataRequestV13(
            topics=None, allow_auto_topic_creation=False,
            include_topic_authorized_operations=include))
        entity = cache.metadata_response(
            13, "PLAINTEXT", None, topic_ops=TOPIC_OPERATIONS if include else OMITTED)
        assert encode_response(1, answer) == encode_response(1, entity)
        assert entity.topics[0].topic_authorized_operations == (
            TOPIC_OPERATIONS if include else OMITTED)
        requested = await apis.metadata(_context(3, 13), MetadataRequestV13(
            topics=(TopicV13(topic_id=None, name="t1"),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=include))
        assert requested.topics[0].topic_authorized_operations == (
            TOPIC_OPERATIONS if include else OMITTED)


def _admin(cache: MetadataCache) -> AdminApis:
    return AdminApis(0, cache, None, {}, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("include", [False, True])
async def test_describe_cluster_reports_cluster_operations_when_asked(include: bool) -> None:
    answer = await _admin(_cache()).describe_cluster(_context(60, 2), DescribeClusterRequest(
        include_cluster_authorized_operations=include, include_fenced_brokers=False))
    assert answer.cluster_authorized_operations == (CLUSTER_OPERATIONS if include else OMITTED)


async def test_describe_cluster_v2_lists_fenced_brokers_only_when_asked() -> None:
    admin = _admin(_cache(fenced=1))
    listed = {}
    for include in (False, True):
        answer = await admin.describe_cluster(_context(60, 2), DescribeClusterRequest(
            include_cluster_authorized_operations=False, include_fenced_brokers=include))
        listed[include] = [(b.broker_id, b.is_fenced, b.rack) for b in answer.brokers]
    assert listed[False] == [(0, False, "r0"), (1, False, "r1")]
    assert listed[True] == [(0, False, "r0"), (1, False, "r1"), (2, True, None)]
