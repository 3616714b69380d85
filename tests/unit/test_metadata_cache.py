"""The broker's Metadata answers from its image: the all-topics response spliced from
per-topic encodings is byte for byte the response entity's encoding, in every version, and
after a change only the changed topic is built and encoded again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pykraft.broker.metadata_cache import TOPICS_PER_TURN, MetadataCache
from pykraft.protocol.framing import encode_response
from tests.unit.controller.controller_harness import Harness


def image_with_topics(count: int, partitions: int = 3) -> tuple[Harness, Any]:
    harness = Harness()
    harness.start_brokers(3)
    for index in range(count):
        harness.create(f"t{index:03d}", partitions=partitions, replication_factor=3)
    return harness, harness.controller.image


@pytest.mark.parametrize("version", range(14))
def test_the_spliced_all_topics_response_is_the_entitys_encoding(version: int) -> None:
    _, image = image_with_topics(12)
    cache = MetadataCache(0, "cluster")  # node 0 is a live broker: the controller id shown
    cache.image = image
    entity = cache.metadata_response(version, "PLAINTEXT", None)
    assert len(entity.topics) == 12
    spliced = asyncio.run(cache.all_topics_body(version, "PLAINTEXT"))
    assert encode_response(7, spliced) == encode_response(7, entity)


def test_after_a_change_only_the_changed_topic_is_encoded_again() -> None:
    harness, image = image_with_topics(5)
    cache = MetadataCache(0, "cluster")
    cache.publish(None, image)  # type: ignore[arg-type]
    before = asyncio.run(cache.all_topics_body(12, "PLAINTEXT"))
    encodings = {name: entry[2] for (_, name, _), entry in cache._encoded.items()}
    harness.create("t999", partitions=2, replication_factor=3)
    changed = harness.controller.image  # made by a delta: unchanged topics are shared
    assert changed.topics.by_name["t000"] is image.topics.by_name["t000"]
    cache.publish(None, changed)  # type: ignore[arg-type]
    after = asyncio.run(cache.all_topics_body(12, "PLAINTEXT"))
    assert after != before
    assert set(encodings) < {name for _, name, _ in cache._encoded}
    for (_, name, _), entry in cache._encoded.items():
        if name in encodings:
            assert entry[2] is encodings[name]  # the same bytes object: not encoded again
    assert encode_response(1, after) == encode_response(
        1, cache.metadata_response(12, "PLAINTEXT", None))


def test_a_large_all_topics_body_lets_the_loop_turn_and_leaves_out_a_deleted_topic() -> None:
    """More topics than TOPICS_PER_TURN: the body is spliced over several turns of the
    loop; a topic deleted meanwhile is left out (and the count with it), and a body built
    across a change of image is not cached."""
    count = TOPICS_PER_TURN + 5
    harness, image = image_with_topics(count, partitions=1)
    cache = MetadataCache(0, "cluster")
    cache.publish(None, image)  # type: ignore[arg-type]
    last = f"t{count - 1:03d}"
    harness.run(harness.controller.delete_topics([last]))
    without_last = harness.controller.image

    async def build_while_deleting() -> Any:
        building = asyncio.ensure_future(cache.all_topics_body(12, "PLAINTEXT"))
        await asyncio.sleep(0)  # the first slice is spliced
        assert not building.done()
        cache.publish(None, without_last)  # type: ignore[arg-type]
        return await building

    body = asyncio.run(build_while_deleting())
    names = [topic.name for topic in cache.metadata_response(12, "PLAINTEXT", None).topics]
    assert last not in names and len(names) == count - 1
    assert encode_response(1, body) == encode_response(
        1, cache.metadata_response(12, "PLAINTEXT", None))
    assert cache._all_bodies == {}
