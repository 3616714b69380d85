"""A digest of a MetadataImage that is equal on every node holding the same image.

Nodes compare their images by this digest (exposed on /metrics as
`pykraft_metadata_image_info{offset,digest}`): two nodes that applied the metadata log to
the same offset must show the same digest. The image is walked into a canonical form --
maps and sets sorted, dataclasses as their fields in order, ids as strings -- since the
iteration order of its hash maps depends on the process's string hashing, then hashed with
SHA-256. The offset and epoch of the image are part of the digest.

Each topic enters the canonical form as the SHA-256 of its own canonical form. Successive
images share the topics a change did not touch (structural sharing), so `DigestCache`
hashes a topic once per topic object: a new image costs the topics that changed, not the
100,000 partitions of all of them. Walking all of them took seconds on a node of 100,000
partitions; done on the event loop for each scrape of /metrics, it kept a new quorum
leader from answering its followers' fetches for over 2 s, and the quorum elected again.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import immutables

from pykraft.metadata.image import MetadataImage, TopicImage
from pykraft.metadata.registrations import PartitionRegistration

TopicDigest = Callable[[TopicImage], str]


def topic_digest(topic: TopicImage) -> str:
    """The hex SHA-256 of one topic's canonical form."""
    return hashlib.sha256(repr(_canonical(topic, topic_digest, whole=True)).encode()).hexdigest()


def _canonical(value: Any, topics: TopicDigest = topic_digest, *, whole: bool = False) -> Any:
    """`value` in canonical form; a topic (unless `whole`) as its digest, from `topics`."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if isinstance(value, TopicImage) and not whole:
        return ("topic", topics(value))
    if isinstance(value, enum.Enum):
        return (type(value).__name__, value.value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple(
            (f.name, _canonical(getattr(value, f.name), topics))
            for f in dataclasses.fields(value)))
    if isinstance(value, PartitionRegistration):  # a NamedTuple, named as a dataclass is
        return (type(value).__name__, tuple(
            (name, _canonical(field, topics))
            for name, field in zip(value._fields, value, strict=True)))
    if isinstance(value, Mapping | immutables.Map):
        return ("map", tuple(sorted(
            ((_canonical(k, topics), _canonical(v, topics)) for k, v in value.items()),
            key=repr)))
    if isinstance(value, frozenset | set):
        return ("set", tuple(sorted((_canonical(v, topics) for v in value), key=repr)))
    if isinstance(value, tuple | list):
        return tuple(_canonical(v, topics) for v in value)
    raise TypeError(f"no canonical form for {type(value).__name__}")


def image_digest(image: MetadataImage, topics: TopicDigest = topic_digest) -> str:
    """The hex SHA-256 of the image's canonical form; `topics` gives each topic's digest
    (`topic_digest`, or a cache of it)."""
    return hashlib.sha256(repr(_canonical(image, topics)).encode()).hexdigest()


class DigestCache:
    """The digest of the latest image asked for, computed once per image object, each
    topic once per topic object. Scrapes call it from the metrics server's threads, off
    the event loop; one at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._image: MetadataImage | None = None
        self._digest = ""
        # id(topic) -> (topic, its digest), for the topics of the last image: the topic is
        # held, so that its id names no other object while the entry is kept
        self._topics: dict[int, tuple[TopicImage, str]] = {}

    def digest(self, image: MetadataImage) -> str:
        with self._lock:
            if image is not self._image:
                known = self._topics
                seen: dict[int, tuple[TopicImage, str]] = {}

                def cached(topic: TopicImage) -> str:
                    found = (seen.get(id(topic)) or known.get(id(topic))
                             or (topic, topic_digest(topic)))
                    seen[id(topic)] = found
                    return found[1]

                self._digest = image_digest(image, cached)
                self._image, self._topics = image, seen
            return self._digest
