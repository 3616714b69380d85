"""A topic's partitions in the metadata image, by index: a tuple, not a hash trie.

Kafka numbers a topic's partitions 0..n-1 (CreateTopics, then CreatePartitions adding
n..m-1), so a tuple holding partition i's registration at position i is the whole map.
The garbage collector walks one object per topic where an `immutables.Map` made about two
trie nodes per partition (a census of 20,000 partitions in the controller harness: 1.9 of
the 5.9 objects tracked per partition), and every full collection of a node at 300,000
partitions walked them all. A lookup is an index. `update` copies the tuple: O(n) in the
topic's partitions per applied delta, against the trie's O(log n), which only a topic of
hundreds of thousands of partitions changed batch after batch would feel.

A hole (an index past the end of what was replayed) holds None and counts as absent; a log
written by pykraft or Kafka has none, and one HOLE_MAX past the end is refused (a record
naming partition 2**31 - 1 must not make a tuple of that length).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final, TypeVar, overload

from pykraft.errors import invariant
from pykraft.metadata.registrations import PartitionRegistration

__all__ = ["EMPTY_PARTITIONS", "HOLE_MAX", "PartitionMap"]

HOLE_MAX: Final = 1_000_000
_T = TypeVar("_T")


class PartitionMap(Mapping[int, PartitionRegistration]):
    __slots__ = ("_items", "_count")

    def __init__(self, items: tuple[PartitionRegistration | None, ...] = (),
                 count: int | None = None) -> None:
        self._items = items
        self._count = sum(1 for item in items if item is not None) if count is None else count

    def __getitem__(self, index: int) -> PartitionRegistration:
        items = self._items
        if type(index) is int and 0 <= index < len(items):
            found = items[index]
            if found is not None:
                return found
        raise KeyError(index)

    @overload
    def get(self, index: int, /) -> PartitionRegistration | None: ...
    @overload
    def get(self, index: int, default: PartitionRegistration, /) -> PartitionRegistration: ...
    @overload
    def get(self, index: int, default: _T, /) -> PartitionRegistration | _T: ...

    def get(self, index: int, default: object = None, /) -> object:
        items = self._items
        if type(index) is int and 0 <= index < len(items):
            found = items[index]
            if found is not None:
                return found
        return default

    def __contains__(self, index: object) -> bool:
        items = self._items
        return type(index) is int and 0 <= index < len(items) and items[index] is not None

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[int]:
        if self._count == len(self._items):
            return iter(range(self._count))
        return (index for index, item in enumerate(self._items) if item is not None)

    def keys(self) -> list[int]:  # type: ignore[override]
        """The indexes, ascending (a list: callers iterate or sort it)."""
        return list(self)

    def values(self) -> list[PartitionRegistration]:  # type: ignore[override]
        return [item for item in self._items if item is not None]

    def items(self) -> list[tuple[int, PartitionRegistration]]:  # type: ignore[override]
        """(index, registration) pairs by ascending index."""
        return [(index, item) for index, item in enumerate(self._items) if item is not None]

    def update(self, changes: Mapping[int, PartitionRegistration]) -> PartitionMap:
        """A new map with `changes` (new or replaced partitions) applied."""
        if not changes:
            return self
        items = list(self._items)
        count = self._count
        top = max(changes)
        if top >= len(items):
            invariant(top < len(items) + HOLE_MAX,
                      "partition %d is %d past the topic's last", top, top - len(items))
            items.extend([None] * (top + 1 - len(items)))
        for index, registration in changes.items():
            invariant(index >= 0, "partition %d", index)
            if items[index] is None:
                count += 1
            items[index] = registration
        return PartitionMap(tuple(items), count)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PartitionMap):
            return self._items == other._items or self.items() == other.items()
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self.items()))

    def __repr__(self) -> str:
        return f"PartitionMap({dict(self.items())!r})"


EMPTY_PARTITIONS: Final = PartitionMap()
