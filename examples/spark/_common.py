"""Shared bits of the example pipelines: topic creation and sample data, with confluent-kafka."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def ensure_topic(bootstrap: str, topic: str, partitions: int,
                 config: Mapping[str, str] | None = None) -> None:
    """Create the topic unless it exists (any partition count is kept as it is)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        return
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                  config=dict(config or {}))])[topic].result(30)


def partition_counts(bootstrap: str, topics: Iterable[str]) -> dict[str, int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    return {t: len(metadata.topics[t].partitions) for t in topics if t in metadata.topics}


def produce_json(bootstrap: str, topic: str, events: Iterable[tuple[str, dict[str, object]]]
                 ) -> int:
    """Produce (key, JSON document) pairs; return how many, once all are acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    count = 0
    for key, document in events:
        while True:
            try:
                producer.produce(topic, json.dumps(document).encode(), key.encode())
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
    if producer.flush(60):
        raise RuntimeError("sample events not acknowledged")
    return count
