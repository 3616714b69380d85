"""The broker's view of cluster metadata, and the Metadata responses built from it.

The cache holds the latest published MetadataImage. Metadata responses for "all topics" are
memoized per (image, version, listener): an unchanged image answers every client's periodic
refresh with the same entity. Each topic's part of a response is memoized too, per
(response version, TopicImage, broker registrations): images share unchanged topics'
objects, so after a change to a few partitions only their topics are built again. The
all-topics response is answered as bytes (`all_topics_body`): the response without topics,
encoded, with the topics' own cached encodings spliced in where its empty array was, so a
change to one partition costs the encoding of its topic, not of every partition; a topic is
encoded straight from the image (metadata_topics.py: 2 us a partition, kio's entities took
24), since a broker rejoining 100,000 ISRs changes every topic between two polls. The
splicing lets the event loop turn every TOPICS_PER_TURN topics: while every topic changes
(a 300,000-partition creation or fence), building it at once held a broker for seconds.
"""

from __future__ import annotations

import asyncio
import random
import re
import types
import typing
import uuid
from functools import cache
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.errors import invariant
from pykraft.metadata.codec import write_unsigned_varint
from pykraft.metadata.image import MetadataDelta, MetadataImage, TopicImage
from pykraft.protocol.api import AUTHORIZED_OPERATIONS_OMITTED, ApiKey
from pykraft.protocol.entities import NO_THROTTLE, make, response_module
from pykraft.protocol.framing import EncodedBody, encode_entity
from pykraft.protocol.metadata_topics import encode_partition, encode_topic

INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})
FIRST_FLEXIBLE_METADATA: Final = 9
TOPICS_PER_TURN: Final = 100  # topics spliced into an all-topics Metadata body per loop turn
_LEGAL_TOPIC: Final = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def legal_topic_name(name: str) -> bool:
    return bool(_LEGAL_TOPIC.match(name)) and name not in (".", "..")


class MetadataCache:
    def __init__(self, node_id: int, cluster_id: str) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.image = MetadataImage.EMPTY
        # keyed by (version, listener, topic operations, cluster operations)
        self._all_topics: dict[tuple[int, str, int, int], Any] = {}
        # (response module, topic name, topic operations) -> [its TopicImage, the brokers
        # map, its entity]
        self._topics: dict[tuple[Any, str, int], list[Any]] = {}
        # (version, topic name, topic operations) -> (its TopicImage, the brokers map, its
        # encoding): the parts of all-topics bodies
        self._encoded: dict[tuple[int, str, int], tuple[TopicImage, Any, bytes]] = {}
        self._all_bodies: dict[tuple[int, str, int, int], EncodedBody] = {}
        self._rng = random.Random()

    def publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.image = image
        self._all_topics.clear()
        self._all_bodies.clear()
        if len(self._topics) > 2 * len(image.topics.by_name) + 100:
            self._topics.clear()  # deleted topics' entries, or versions no longer asked for
        if len(self._encoded) > 2 * len(image.topics.by_name) + 100:
            self._encoded.clear()

    def live_brokers(self, listener_name: str) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of unfenced brokers with an endpoint for this listener."""
        found = []
        for broker in self.image.cluster.brokers.values():
            if broker.fenced:
                continue
            endpoint = broker.listeners.get(listener_name)
            if endpoint is not None:
                found.append((broker.id, endpoint.host, endpoint.port, broker.rack))
        return sorted(found)

    def fenced_brokers(self, listener_name: str) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of the fenced brokers with an endpoint for this listener
        (DescribeCluster v2's include_fenced_brokers, KIP-1073)."""
        found = []
        for broker in self.image.cluster.brokers.values():
            endpoint = broker.listeners.get(listener_name)
            if broker.fenced and endpoint is not None:
                found.append((broker.id, endpoint.host, endpoint.port, broker.rack))
        return sorted(found)

    def controller_id(self, brokers: list[tuple[int, str, int, str | None]]) -> int:
        """KRaft convention: clients are shown a random live broker as "the controller";
        admin requests sent there are forwarded to the active controller."""
        if not brokers:
            return -1
        ids = [broker[0] for broker in brokers]
        return self.node_id if self.node_id in ids else self._rng.choice(ids)

    def metadata_response(self, version: int, listener_name: str, requested: Any, *,
                          topic_ops: int = AUTHORIZED_OPERATIONS_OMITTED,
                          cluster_ops: int = AUTHORIZED_OPERATIONS_OMITTED) -> Any:
        """`topic_ops` / `cluster_ops`: the KIP-430 authorized operations each topic / the
        cluster is shown with (the sentinel when the request did not ask)."""
        if requested is None:
            key = (version, listener_name, topic_ops, cluster_ops)
            cached = self._all_topics.get(key)
            if cached is None:
                cached = self._all_topics[key] = self._build(
                    version, listener_name, None, topic_ops, cluster_ops)
            return cached
        return self._build(version, listener_name, requested, topic_ops, cluster_ops)

    async def all_topics_body(self, version: int, listener_name: str, *,
                              topic_ops: int = AUTHORIZED_OPERATIONS_OMITTED,
                              cluster_ops: int = AUTHORIZED_OPERATIONS_OMITTED) -> EncodedBody:
        """The encoded Metadata response for all topics (what `metadata_response` gives for
        `requested` None), spliced from the topics' cached encodings, TOPICS_PER_TURN topics
        per turn of the event loop: built at once, 300,000 partitions held a broker's loop
        for 9.5 s while every topic changed, its heartbeats stopped and it was fenced. A
        topic is taken from the image current when its turn comes (a topic deleted
        meanwhile is left out); the body is cached only if the image did not change."""
        key = (version, listener_name, topic_ops, cluster_ops)
        cached = self._all_bodies.get(key)
        if cached is not None:
            return cached
        image = self.image
        module = response_module(ApiKey.METADATA, version)
        flexible = version >= FIRST_FLEXIBLE_METADATA
        shell = encode_entity(self._response(module, listener_name, (), cluster_ops=cluster_ops))
        # after the topics array: ClusterAuthorizedOperations (v8-v10), ErrorCode (v13+),
        # the tagged fields
        tail = ((4 if 8 <= version <= 10 else 0) + (2 if version >= 13 else 0)
                + (1 if flexible else 0))
        empty = b"\x01" if flexible else b"\0\0\0\0"  # the empty array's length
        cut = len(shell) - tail - len(empty)
        invariant(shell[cut:cut + len(empty)] == empty,
                  f"no empty topics array where Metadata v{version} has it")
        names = sorted(image.topics.by_name.keys())
        parts: list[bytes] = []
        for start in range(0, len(names), TOPICS_PER_TURN):
            if start:
                await asyncio.sleep(0)
            for name in names[start:start + TOPICS_PER_TURN]:
                encoded = self._topic_encoding(version, name, topic_ops)
                if encoded is not None:
                    parts.append(encoded)
        length = bytearray()
        if flexible:
            write_unsigned_varint(length, len(parts) + 1)
        else:
            length += len(parts).to_bytes(4, "big")
        body = EncodedBody(
            b"".join([shell[:cut], length, *parts, shell[cut + len(empty):]]), flexible)
        if self.image is image:
            self._all_bodies[key] = body
        return body

    def _topic_encoding(self, version: int, name: str, ops: int) -> bytes | None:
        """The topic's cached encoding, made if need be (straight from the image, not
        through entities: metadata_topics.py); None if it is not in the image."""
        topic = self.image.topics.by_name.get(name)
        if topic is None:
            return None
        brokers = self.image.cluster.brokers
        cached = self._encoded.get((version, name, ops))
        if cached is not None and cached[0] is topic and cached[1] is brokers:
            return cached[2]
        partitions = topic.partitions
        encoded = encode_topic(
            version, ErrorCode.none, name, topic.topic_id, name in INTERNAL_TOPICS,
            (encode_partition(version, ErrorCode.none if r.leader >= 0
                              else ErrorCode.leader_not_available,
                              index, r.leader, r.leader_epoch, r.replicas, r.isr,
                              self._offline(r.replicas))
             for index, r in partitions.items()),  # by index (PartitionMap)
            len(partitions), ops)
        self._encoded[(version, name, ops)] = (topic, brokers, encoded)
        return encoded

    def _build(self, version: int, listener_name: str, requested: Any, topic_ops: int,
               cluster_ops: int) -> Any:
        module = response_module(ApiKey.METADATA, version)
        brokers = self.live_brokers(listener_name)
        image = self.image
        if requested is None:
            names = sorted(image.topics.by_name.keys())
            topics = [self._topic(module, name, None, topic_ops) for name in names]
        else:
            topics = [self._requested_topic(module, wanted, topic_ops) for wanted in requested]
        return self._response(module, listener_name, tuple(topics), brokers,
                              cluster_ops=cluster_ops)

    def _response(self, module: Any, listener_name: str, topics: tuple[Any, ...],
                  brokers: list[tuple[int, str, int, str | None]] | None = None, *,
                  cluster_ops: int = AUTHORIZED_OPERATIONS_OMITTED) -> Any:
        if brokers is None:
            brokers = self.live_brokers(listener_name)
        return make(
            module.MetadataResponse,
            throttle_time=NO_THROTTLE,
            brokers=tuple(
                make(module.MetadataResponseBroker, node_id=i, host=h, port=p, rack=r)
                for i, h, p, r in brokers
            ),
            cluster_id=self.cluster_id,
            controller_id=self.controller_id(brokers),
            topics=topics,
            cluster_authorized_operations=cluster_ops,  # v8-v10
            error_code=ErrorCode.none,  # v13+ (KIP-1102): Kafka 4.0's brokers answer NONE too
        )

    def _requested_topic(self, module: Any, wanted: Any, ops: int) -> Any:
        name = wanted.name
        topic_id = getattr(wanted, "topic_id", None)
        if name is None and not _names_nullable(module):
            # v10-v11 have topic ids in requests but not yet their lookup (Kafka: "Topic
            # IDs are not supported in requests for version 11")
            return self._topic_error(module, None, topic_id, ErrorCode.invalid_request, ops)
        if name is None and topic_id is not None:
            found = self.image.topics.by_id.get(topic_id)
            if found is None:
                return self._topic_error(module, None, topic_id, ErrorCode.unknown_topic_id,
                                         ops)
            name = found.name
        if name is None:
            return self._topic_error(module, None, topic_id, ErrorCode.invalid_request, ops)
        return self._topic(module, name, topic_id, ops)

    def _topic(self, module: Any, name: str, topic_id: Any, ops: int) -> Any:
        topic = self.image.topics.by_name.get(name)
        if topic is None:
            code = (ErrorCode.invalid_topic_exception if not legal_topic_name(name)
                    else ErrorCode.unknown_topic_or_partition)
            return self._topic_error(module, name, topic_id, code, ops)
        brokers = self.image.cluster.brokers
        cached = self._topics.get((module, name, ops))
        if cached is not None and cached[0] is topic and cached[1] is brokers:
            return cached[2]
        entity = self._build_topic(module, topic, ops)
        self._topics[(module, name, ops)] = [topic, brokers, entity]
        return entity

    def _build_topic(self, module: Any, topic: TopicImage, ops: int) -> Any:
        name = topic.name
        partitions = []
        for index, registration in topic.partitions.items():  # by index (PartitionMap)
            leader = registration.leader
            code = ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available
            partitions.append(make(
                module.MetadataResponsePartition,
                error_code=code,
                partition_index=index,
                leader_id=leader,
                leader_epoch=registration.leader_epoch,
                replica_nodes=tuple(registration.replicas),
                isr_nodes=tuple(registration.isr),
                offline_replicas=tuple(self._offline(registration.replicas)),
            ))
        return make(
            module.MetadataResponseTopic,
            error_code=ErrorCode.none,
            name=name,
            topic_id=topic.topic_id,
            is_internal=name in INTERNAL_TOPICS,
            partitions=tuple(partitions),
            topic_authorized_operations=ops,  # v8+
        )

    def _offline(self, replicas: Any) -> list[int]:
        brokers = self.image.cluster.brokers
        return [r for r in replicas if r not in brokers or brokers[r].fenced]

    def _topic_error(self, module: Any, name: str | None, topic_id: Any, code: ErrorCode,
                     ops: int) -> Any:
        if name is None and not _names_nullable(module):
            # a topic asked for by id only, in v10-v11 (whose requests have ids, but whose
            # responses cannot carry a null name): answered with an empty one, not a
            # response that cannot be encoded (found by tests/fuzz)
            name = ""
        return make(module.MetadataResponseTopic, error_code=code, name=name,
                    topic_id=topic_id or uuid.UUID(int=0), is_internal=False, partitions=(),
                    topic_authorized_operations=ops)


@cache
def _names_nullable(module: Any) -> bool:
    """Whether this Metadata response version may carry a topic without a name (v12+)."""
    hint = typing.get_type_hints(module.MetadataResponseTopic)["name"]
    return typing.get_origin(hint) in (typing.Union, types.UnionType)
