"""The topic names Kafka reserves, and which of them clients may not create or write.

- `__cluster_metadata` is not a topic at all: it is the Raft log of the metadata quorum, in
  the `__cluster_metadata-0` directory of the metadata log dir. A topic of that name would
  share that directory with a partition, so no one may create it, not even a coordinator.
- `__consumer_offsets`, `__transaction_state` and `__share_group_state` are internal topics
  (Kafka's `Topic.isInternal`): their coordinators create them, with the configs they rely
  on, and are the only ones that write to them. Clients may read them.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CONSUMER_OFFSETS_TOPIC",
    "INTERNAL_TOPICS",
    "METADATA_TOPIC",
    "RESERVED_TOPICS",
    "SHARE_GROUP_STATE_TOPIC",
    "TRANSACTION_STATE_TOPIC",
]

METADATA_TOPIC: Final = "__cluster_metadata"
CONSUMER_OFFSETS_TOPIC: Final = "__consumer_offsets"
TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
SHARE_GROUP_STATE_TOPIC: Final = "__share_group_state"

INTERNAL_TOPICS: Final = frozenset(
    {CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC})
RESERVED_TOPICS: Final = INTERNAL_TOPICS | {METADATA_TOPIC}
