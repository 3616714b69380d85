"""What the wire tools (configs, log-dirs, broker-api-versions) ask of any node first: the
brokers of the cluster and the topics, from one Metadata request over a `ProtocolClient`.

Kafka's admin client learns the same from its metadata; these tools then talk to each broker
by the address the cluster advertises, as Kafka's do.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.cli.args import CommandError
from pykraft.cli.protocol_client import ProtocolClient, error_name

__all__ = ["BrokerNode", "Cluster", "describe_cluster", "error_text"]

METADATA: Final = 3
_METADATA_VERSIONS: Final = (9, 12)  # flexible versions; Kafka 4.0 serves 0-12


@dataclass(frozen=True, slots=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        # Kafka's Node.toString (4.0); Metadata lists only unfenced brokers
        rack = "null" if self.rack is None else self.rack
        return f"{self.address} (id: {self.node_id} rack: {rack} isFenced: false)"


@dataclass(frozen=True, slots=True)
class Cluster:
    brokers: tuple[BrokerNode, ...]
    topics: tuple[tuple[str, bool, tuple[int, ...]], ...]  # (name, is_internal, partitions)

    def broker(self, node_id: int) -> BrokerNode:
        for broker in self.brokers:
            if broker.node_id == node_id:
                return broker
        raise CommandError(f"broker {node_id} is not a live broker of the cluster "
                           f"(brokers: {', '.join(str(b.node_id) for b in self.brokers)})")


def describe_cluster(client: ProtocolClient, *, with_topics: bool) -> Cluster:
    """The live brokers and, if asked, every topic with its partition ids."""

    def build(module: ModuleType, version: int) -> Any:
        return module.MetadataRequest(topics=None if with_topics else (),
                                      allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=False)

    _, response = client.request(METADATA, "Metadata", _METADATA_VERSIONS, build)
    brokers = tuple(sorted(
        (BrokerNode(int(b.node_id), str(b.host), int(b.port), b.rack) for b in response.brokers),
        key=lambda broker: broker.node_id))
    topics = tuple(sorted(
        (str(t.name), bool(t.is_internal),
         tuple(sorted(int(p.partition_index) for p in t.partitions)))
        for t in response.topics
        if t.error_code == ErrorCode.none and t.name is not None))
    return Cluster(brokers, topics)


def error_text(code: int, message: str | None) -> str:
    """`NAME: message` as Kafka's exceptions print, or the name alone."""
    name = error_name(code)
    return f"{name}: {message}" if message else name
