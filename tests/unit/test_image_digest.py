"""The metadata image digest (/metrics' pykraft_metadata_image_info): equal for equal
images, different for different ones, and, through DigestCache, each topic hashed once per
topic object, so a new image costs only the topics it changed; the scrape computes it, not
the event loop that gathered the other metrics."""

from __future__ import annotations

import pytest

from pykraft.server import image_digest as digests
from pykraft.server import metrics
from pykraft.server.image_digest import DigestCache, image_digest
from tests.unit.controller.controller_harness import Harness


@pytest.fixture
def harness() -> Harness:
    harness = Harness()
    harness.start_brokers(3)
    for index in range(5):
        harness.create(f"t{index}", partitions=4, replication_factor=3)
    return harness


def test_equal_images_give_equal_digests_and_a_change_another(harness: Harness) -> None:
    image = harness.controller.image
    assert image_digest(image) == image_digest(harness.replayed_image())
    harness.create("t9", partitions=1, replication_factor=3)
    assert image_digest(harness.controller.image) != image_digest(image)


def test_the_cache_hashes_only_the_topics_a_new_image_changed(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    hashed: list[str] = []
    plain = digests.topic_digest

    def counted(topic: digests.TopicImage) -> str:
        hashed.append(topic.name)
        return plain(topic)

    monkeypatch.setattr(digests, "topic_digest", counted)
    cache = DigestCache()
    first = harness.controller.image
    assert cache.digest(first) == image_digest(first, plain)
    assert sorted(hashed) == ["t0", "t1", "t2", "t3", "t4"]  # each once, by id and by name
    hashed.clear()
    assert cache.digest(first) == image_digest(first, plain)
    assert hashed == []
    harness.create("t5", partitions=2, replication_factor=3)
    second = harness.controller.image
    assert cache.digest(second) == image_digest(second, plain) != image_digest(first, plain)
    assert hashed == ["t5"]


def test_the_scrape_computes_the_digest() -> None:
    asked: list[str] = []

    def digest() -> str:
        asked.append("digest")
        return "abc"

    snapshot = metrics.NodeMetrics(metadata_image_offset=7, metadata_image_digest=digest)
    assert asked == []  # the snapshot carries it uncomputed
    families = {family.name: family for family in metrics._families(snapshot)}
    assert asked == ["digest"]
    [sample] = families["pykraft_metadata_image_info"].samples
    assert sample.labels == {"offset": "7", "digest": "abc"}
