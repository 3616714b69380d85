"""The controller's replicated state: the metadata image plus the indexes decisions need.

Theory of operation. `ControllerState` is an immutable value. Its `image` is the same
`MetadataImage` every broker folds from the log; the rest are indexes over that image that
the controller needs to decide quickly at the scale of millions of partitions, plus the
one fact the image does not keep, the log offset of each broker's registration:

- `registration_offsets`: broker id -> offset of its latest RegisterBrokerRecord. A fenced
  broker is unfenced only once its metadata offset reaches that record (KIP-631).
- `isr_members`, `leaders`: broker id -> the partitions whose ISR holds it / it leads, for
  fencing and controlled shutdown (which partitions must change) without a full scan.
- `leaderless`: the partitions without a leader, for re-electing when a broker unfences.
  Each set of partitions is a map of topic id -> bit mask of indexes (`_Partitions`).
- `collision_names`: for topics whose names contain '.' or '_', the name with '.' turned
  into '_' -> the real name (Kafka refuses a topic whose name collides with one of these).

`StateBuilder` is the fold: records are replayed into a `MetadataDelta` and `build()`
applies the delta once and updates the indexes from what the delta says changed, so a
batch of records costs one image application. Every index is derivable from the image
alone (`ControllerState.from_image` does so); tests check that folding records gives
the same indexes as deriving them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeAlias

import immutables

from pykraft.errors import InvariantViolation, invariant
from pykraft.metadata.image import MetadataDelta, MetadataImage, TopicImage
from pykraft.metadata.partition_map import EMPTY_PARTITIONS
from pykraft.metadata.records import MetadataRecord, RegisterBrokerRecord, UnregisterBrokerRecord
from pykraft.metadata.registrations import NO_LEADER, PartitionRegistration

__all__ = [
    "PartitionKey",
    "ControllerState",
    "StateBuilder",
    "has_collision_chars",
    "unify_collision_chars",
]

PartitionKey: TypeAlias = tuple[uuid.UUID, int]  # (topic id, partition index)
# A set of partitions: per topic id, a bit mask of partition indexes (bit i: partition i).
# An int is no object for the garbage collector to walk, where a map of (topic id, index)
# keys made a key tuple and trie nodes per partition and broker: 2.5 of the 4.6 objects a
# controller tracked per partition (the census of 20,000 partitions in the harness).
_Partitions: TypeAlias = immutables.Map[uuid.UUID, int]
_Members: TypeAlias = immutables.Map[int, _Partitions]  # by broker


def _topic_order(topic_id: uuid.UUID) -> int:
    """UUIDs compare by their int, without UUID.__lt__ for each comparison."""
    return topic_id.int


def _keys(partitions: Mapping[uuid.UUID, int] | None) -> tuple[PartitionKey, ...]:
    """The partitions of a set, by topic id then index (the order of the keys themselves)."""
    if not partitions:
        return ()
    keys: list[PartitionKey] = []
    for topic_id in sorted(partitions.keys(), key=_topic_order):
        bits = bin(partitions[topic_id])[:1:-1]  # bit i at position i: linear in the mask
        keys.extend((topic_id, index) for index, bit in enumerate(bits) if bit == "1")
    return tuple(keys)


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    """'.' and '_' become the same character in metric names, so such names collide."""
    return name.replace(".", "_")


@dataclass(frozen=True, slots=True)
class ControllerState:
    image: MetadataImage
    registration_offsets: immutables.Map[int, int]
    isr_members: _Members
    leaders: _Members
    leaderless: _Partitions
    collision_names: immutables.Map[str, str]

    @classmethod
    def from_image(
        cls, image: MetadataImage, registration_offsets: immutables.Map[int, int] | None = None
    ) -> ControllerState:
        """Derive every index from `image` (a snapshot load; also the reference for tests).
        Without known registration offsets, a broker's epoch stands in for its offset."""
        if registration_offsets is None:
            registration_offsets = immutables.Map(
                {broker_id: broker.epoch for broker_id, broker in image.cluster.brokers.items()}
            )
        empty = _empty_state(image, registration_offsets)
        builder = _IndexBuilder(empty)
        for topic in image.topics.by_id.values():
            builder.add_topic(topic)
        return builder.finish(image, registration_offsets)

    def partitions_with_isr_member_led_first(self, broker_id: int
                                             ) -> tuple[PartitionKey, ...]:
        """The partitions whose ISR holds `broker_id`, those it leads first: the changes that take
        it out of every ISR then move its leaderships in their first batches, so that a
        fenced broker's partitions have leaders again, and a stopping broker's clients are
        sent elsewhere, early in a change of 300,000 partitions rather than throughout it
        (its other partitions only lose a follower from their ISR)."""
        members = self.isr_members.get(broker_id)
        led = self.leaders.get(broker_id)
        if not members or not led:
            return _keys(members)
        first, rest = {}, {}
        for topic_id, mask in members.items():
            leading = mask & led.get(topic_id, 0)
            if leading:
                first[topic_id] = leading
            if mask & ~leading:
                rest[topic_id] = mask & ~leading
        return _keys(first) + _keys(rest)

    def partitions_led_by(self, broker_id: int) -> tuple[PartitionKey, ...]:
        return _keys(self.leaders.get(broker_id))

    def has_leaderships(self, broker_id: int) -> bool:
        found = self.leaders.get(broker_id)
        return found is not None and len(found) > 0

    def leaderless_partitions(self) -> tuple[PartitionKey, ...]:
        return _keys(self.leaderless)

    def partition(self, key: PartitionKey) -> PartitionRegistration:
        found = self.image.partition(key[0], key[1])
        if found is None:  # the message only then: formatting the key's UUID is slow
            raise InvariantViolation(f"indexed partition {key} is not in the image")
        return found

    def colliding_topic(self, name: str) -> str | None:
        """An existing topic whose name collides with `name` (and is not `name` itself)."""
        if not has_collision_chars(name):
            return None
        found = self.collision_names.get(unify_collision_chars(name))
        return None if found == name else found


def _empty_state(
    image: MetadataImage, registration_offsets: immutables.Map[int, int]
) -> ControllerState:
    return ControllerState(
        image=image,
        registration_offsets=registration_offsets,
        isr_members=immutables.Map(),
        leaders=immutables.Map(),
        leaderless=immutables.Map(),
        collision_names=immutables.Map(),
    )


EMPTY_STATE = _empty_state(MetadataImage.EMPTY, immutables.Map())


class _IndexBuilder:
    """Mutable copies of a state's indexes, changed partition by partition, then frozen."""

    def __init__(self, base: ControllerState) -> None:
        self.isr_members: dict[int, immutables.MapMutation[uuid.UUID, int]] = {}
        self.leaders: dict[int, immutables.MapMutation[uuid.UUID, int]] = {}
        self.base = base
        self.leaderless = base.leaderless.mutate()
        self.collision_names = base.collision_names.mutate()

    def _members(
        self,
        which: dict[int, immutables.MapMutation[uuid.UUID, int]],
        base: _Members,
        broker: int,
    ) -> immutables.MapMutation[uuid.UUID, int]:
        found = which.get(broker)
        if found is None:
            current = base.get(broker)
            found = which[broker] = (current or immutables.Map()).mutate()
        return found

    def change_partition(
        self,
        key: PartitionKey,
        old: PartitionRegistration | None,
        new: PartitionRegistration | None,
    ) -> None:
        # only what differs is touched: most changes move a leader or one ISR member, and
        # each index update hashes the key (a UUID, in Python) -- 100,000 of them per fence
        topic_id, bit = key[0], 1 << key[1]
        old_isr = old.isr if old is not None else ()
        new_isr = new.isr if new is not None else ()
        if old_isr != new_isr:
            for broker in set(old_isr).difference(new_isr):
                _remove(self._members(self.isr_members, self.base.isr_members, broker),
                        topic_id, bit)
            for broker in set(new_isr).difference(old_isr):
                _add(self._members(self.isr_members, self.base.isr_members, broker),
                     topic_id, bit)
        old_leader = old.leader if old is not None else NO_LEADER
        new_leader = new.leader if new is not None else NO_LEADER
        if old_leader == new_leader and old is not None and new is not None:
            return
        if old_leader != new_leader and old_leader != NO_LEADER:
            _remove(self._members(self.leaders, self.base.leaders, old_leader), topic_id, bit)
        if old_leader != new_leader and new_leader != NO_LEADER:
            _add(self._members(self.leaders, self.base.leaders, new_leader), topic_id, bit)
        if new is not None and new_leader == NO_LEADER:
            _add(self.leaderless, topic_id, bit)
        else:
            _remove(self.leaderless, topic_id, bit)

    def add_topic(self, topic: TopicImage) -> None:
        if has_collision_chars(topic.name):
            self.collision_names[unify_collision_chars(topic.name)] = topic.name
        for index, partition in topic.partitions.items():
            self.change_partition((topic.topic_id, index), None, partition)

    def remove_topic(self, topic: TopicImage) -> None:
        if has_collision_chars(topic.name):
            self.collision_names.pop(unify_collision_chars(topic.name), None)
        for index, partition in topic.partitions.items():
            self.change_partition((topic.topic_id, index), partition, None)

    def finish(
        self, image: MetadataImage, registration_offsets: immutables.Map[int, int]
    ) -> ControllerState:
        return ControllerState(
            image=image,
            registration_offsets=registration_offsets,
            isr_members=_finish_members(self.base.isr_members, self.isr_members),
            leaders=_finish_members(self.base.leaders, self.leaders),
            leaderless=self.leaderless.finish(),
            collision_names=self.collision_names.finish(),
        )


def _add(partitions: immutables.MapMutation[uuid.UUID, int], topic_id: uuid.UUID,
         bit: int) -> None:
    partitions[topic_id] = partitions.get(topic_id, 0) | bit


def _remove(partitions: immutables.MapMutation[uuid.UUID, int], topic_id: uuid.UUID,
            bit: int) -> None:
    mask = partitions.get(topic_id, 0)
    if mask & bit:
        mask ^= bit
        if mask:
            partitions[topic_id] = mask
        else:
            del partitions[topic_id]


def _finish_members(
    base: _Members, changed: dict[int, immutables.MapMutation[uuid.UUID, int]]
) -> _Members:
    if not changed:
        return base
    members = base.mutate()
    for broker, mutation in changed.items():
        partitions = mutation.finish()
        if partitions:
            members[broker] = partitions
        else:
            members.pop(broker, None)
    return members.finish()


class StateBuilder:
    """Folds records into the next `ControllerState` (one image application per build)."""

    def __init__(self, base: ControllerState) -> None:
        self.base = base
        self.delta = MetadataDelta(base.image)
        self.registration_offsets = base.registration_offsets.mutate()
        self.offset = base.image.offset
        self.epoch = base.image.epoch
        self.replayed = 0

    def replay(self, record: MetadataRecord, offset: int, epoch: int) -> None:
        invariant(offset > self.offset, "offset %d does not pass %d", offset, self.offset)
        self.delta.replay(record)
        if isinstance(record, RegisterBrokerRecord):
            self.registration_offsets[record.broker_id] = offset
        elif isinstance(record, UnregisterBrokerRecord):
            self.registration_offsets.pop(record.broker_id, None)
        self.offset, self.epoch = offset, epoch
        self.replayed += 1

    def build(self) -> ControllerState:
        if self.replayed == 0:
            return self.base
        base_topics = self.base.image.topics.by_id
        image = self.delta.apply(self.offset, self.epoch)
        indexes = _IndexBuilder(self.base)
        for topic_id in self.delta.deleted_topic_ids:
            indexes.remove_topic(base_topics[topic_id])
        for topic_id, topic in self.delta.changed_topics.items():
            previous = base_topics.get(topic_id)
            if previous is None:
                if has_collision_chars(topic.name):
                    indexes.collision_names[unify_collision_chars(topic.name)] = topic.name
                previous_partitions: Mapping[int, PartitionRegistration] = EMPTY_PARTITIONS
            else:
                previous_partitions = previous.partitions
            for index, partition in self.delta.changed_partitions(topic_id).items():
                old = previous_partitions.get(index)
                if old is not partition:
                    indexes.change_partition((topic_id, index), old, partition)
        return indexes.finish(image, self.registration_offsets.finish())


def fold(
    base: ControllerState, records: Iterable[MetadataRecord], first_offset: int, epoch: int
) -> ControllerState:
    """`base` with `records` replayed at consecutive offsets from `first_offset`."""
    builder = StateBuilder(base)
    for position, record in enumerate(records):
        builder.replay(record, first_offset + position, epoch)
    return builder.build()
