"""Topic names: what is legal (Kafka's rules and messages) and how new topic ids are drawn."""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Container
from typing import Final

from pykraft.errors import InvalidTopic, InvariantViolation

__all__ = [
    "MAX_TOPIC_NAME_LENGTH",
    "METADATA_TOPIC_ID",
    "new_topic_id",
    "validate_topic_name",
]

MAX_TOPIC_NAME_LENGTH: Final = 249  # leaves room for "-<partition>" in a 255-byte file name
_LEGAL: Final = re.compile(r"[a-zA-Z0-9._-]+")
METADATA_TOPIC_ID: Final = uuid.UUID(int=1)  # Kafka reserves it for __cluster_metadata
_ZERO_UUID: Final = uuid.UUID(int=0)


def validate_topic_name(name: str) -> None:
    """Raise `InvalidTopic` with Kafka's message unless `name` is a legal topic name."""
    reason = None
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        reason = (
            f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
        )
    elif not _LEGAL.fullmatch(name):
        reason = (
            f"'{name}' contains one or more characters other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    if reason is not None:
        raise InvalidTopic(f"Topic name is invalid: {reason}")


def _starts_with_dash(topic_id: uuid.UUID) -> bool:
    # Kafka prints ids as unpadded URL-safe base64, where 62 ('-') as the first six bits
    # would make an id look like a command-line option; Kafka never hands such ids out.
    return topic_id.int >> 122 == 62


def new_topic_id(rng: random.Random, in_use: Container[uuid.UUID]) -> uuid.UUID:
    """A random (version 4) topic id: never zero, never the metadata topic's, never taken."""
    for _ in range(1000):
        candidate = uuid.UUID(int=rng.getrandbits(128), version=4)
        if candidate in (_ZERO_UUID, METADATA_TOPIC_ID) or candidate in in_use:
            continue
        if not _starts_with_dash(candidate):
            return candidate
    raise InvariantViolation("1000 random topic ids in a row were unusable: a broken rng")
