"""Replica placement for new partitions: Kafka's KRaft "striped" placement.

Theory of operation. Brokers are grouped by rack (brokers without a rack share one
anonymous rack). Inside a rack, unfenced and fenced brokers are kept in two separate
sorted cycles, each with a random starting point drawn from the injected `random.Random`.
Racks are kept in sorted order, also with a random starting point.

Each partition is placed in its own *round*:

1. The leader (first replica) is the next *unfenced* broker of the first rack, counting
   from the rack cursor, that still has one this round. Leaders are never fenced.
2. Followers are taken one per rack, walking the racks from the rack cursor and skipping
   the leader's rack on the first pass, each rack handing out its next unfenced broker and,
   only once those are used up this round, its next fenced one. The walk wraps around until
   the replication factor is reached.
3. The rack cursor advances by one, and every cycle starts one broker further along in
   the next round. This produces the characteristic stripes:

       racks A, B, C with brokers A0..A2, B0..B2, C0..C2, all cursors at zero:
       partition 0: A0 B0 C0      partition 1: B1 C1 A1      partition 2: C2 A2 B2

4. Once as many partitions have been placed as there are unfenced brokers, the rack order
   and every cycle are shuffled (with the same rng), so that large topics do not repeat
   the same replica sets over and over.

Why: spreading replicas over racks is the first goal (a rack failure loses at most one
replica of a partition when racks >= replication factor), spreading them over brokers the
second, and leaders are balanced because each round's leader comes from a cycle that moves
on by one: with one rack and no fenced broker, any `n` consecutive partitions of one
request have `n` distinct leaders.

Invariants (checked): a replica set never names a broker twice; its first broker is
unfenced; only brokers passed in are used. Brokers in controlled shutdown must not be
passed in at all (the caller filters them), as Kafka does.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from pykraft.errors import InvalidReplicationFactor, invariant

__all__ = ["UsableBroker", "place_replicas"]


@dataclass(frozen=True, slots=True)
class UsableBroker:
    """A registered broker that may receive replicas (not in controlled shutdown)."""

    id: int
    rack: str | None
    fenced: bool


class _Cycle:
    """Brokers of one kind (fenced or unfenced) in one rack, handed out round-robin.

    Within a round each broker is handed out at most once; a new round starts one broker
    further along than the previous one.
    """

    __slots__ = ("brokers", "start", "taken", "round")

    def __init__(self, brokers: list[int], rng: random.Random) -> None:
        self.brokers = sorted(brokers)
        self.start = rng.randrange(len(self.brokers)) if self.brokers else 0
        self.taken = 0
        self.round = 0

    def next(self, round_index: int) -> int | None:
        count = len(self.brokers)
        if count == 0:
            return None
        if round_index != self.round:
            self.round = round_index
            self.taken = 0
            self.start = (self.start + 1) % count
        if self.taken >= count:
            return None
        broker = self.brokers[(self.start + self.taken) % count]
        self.taken += 1
        return broker

    def shuffle(self, rng: random.Random) -> None:
        rng.shuffle(self.brokers)


class _Rack:
    __slots__ = ("unfenced", "fenced")

    def __init__(self, unfenced: list[int], fenced: list[int], rng: random.Random) -> None:
        self.unfenced = _Cycle(unfenced, rng)
        self.fenced = _Cycle(fenced, rng)

    def next_any(self, round_index: int) -> int | None:
        broker = self.unfenced.next(round_index)
        return broker if broker is not None else self.fenced.next(round_index)


class _Striper:
    """The placement state for one request: racks, cursors and the round counter."""

    def __init__(self, brokers: Sequence[UsableBroker], rng: random.Random) -> None:
        self.rng = rng
        by_rack: dict[str | None, tuple[list[int], list[int]]] = {}
        for broker in brokers:
            unfenced, fenced = by_rack.setdefault(broker.rack, ([], []))
            (fenced if broker.fenced else unfenced).append(broker.id)
        # Sorted with the anonymous rack first, so placement depends only on the seed.
        self.rack_names = sorted(by_rack, key=lambda name: (name is not None, name or ""))
        self.racks = {
            name: _Rack(unfenced, fenced, rng) for name, (unfenced, fenced) in by_rack.items()
        }
        self.unfenced_count = sum(1 for broker in brokers if not broker.fenced)
        self.rack_cursor = rng.randrange(len(self.rack_names)) if self.rack_names else 0
        # `round` only grows, so a cycle idle for a while never mistakes a new round for
        # the one it last served; `rounds_since_shuffle` is what triggers the reshuffle.
        self.round = 1
        self.rounds_since_shuffle = 0

    def place_one(self, replication_factor: int) -> tuple[int, ...]:
        if self.rounds_since_shuffle == self.unfenced_count and self.unfenced_count > 1:
            self._shuffle()
            self.rounds_since_shuffle = 0
        rack_count = len(self.rack_names)
        self.rack_cursor %= rack_count
        leader_rack, leader = self._leader()
        replicas = [leader]
        skip_rack: int | None = leader_rack
        rack_index = self.rack_cursor
        steps_max = rack_count * (replication_factor + 1) + rack_count
        for _ in range(steps_max):
            if len(replicas) == replication_factor:
                break
            if rack_index == skip_rack:
                skip_rack = None
            else:
                broker = self.racks[self.rack_names[rack_index]].next_any(self.round)
                if broker is not None:
                    replicas.append(broker)
            rack_index = (rack_index + 1) % rack_count
        invariant(len(replicas) == replication_factor, "striped placement ran out of brokers")
        invariant(len(set(replicas)) == len(replicas), "replica set %s repeats a broker",
                  replicas)
        self.round += 1
        self.rounds_since_shuffle += 1
        self.rack_cursor += 1
        return tuple(replicas)

    def _leader(self) -> tuple[int, int]:
        rack_count = len(self.rack_names)
        for step in range(rack_count):
            rack_index = (self.rack_cursor + step) % rack_count
            broker = self.racks[self.rack_names[rack_index]].unfenced.next(self.round)
            if broker is not None:
                return rack_index, broker
        raise InvalidReplicationFactor("All brokers are currently fenced.")

    def _shuffle(self) -> None:
        self.rng.shuffle(self.rack_names)
        for rack in self.racks.values():
            rack.unfenced.shuffle(self.rng)
            rack.fenced.shuffle(self.rng)


def check_replication_factor(replication_factor: int, brokers: Sequence[UsableBroker]) -> None:
    """Raise `InvalidReplicationFactor` (Kafka's messages) when no placement is possible."""
    if replication_factor <= 0:
        raise InvalidReplicationFactor(
            f"Invalid replication factor {replication_factor}: "
            "the replication factor must be positive."
        )
    if not any(not broker.fenced for broker in brokers):
        raise InvalidReplicationFactor("All brokers are currently fenced.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactor(
            f"The target replication factor of {replication_factor} cannot be reached "
            f"because only {len(brokers)} broker(s) are registered."
        )


def place_replicas(
    brokers: Sequence[UsableBroker],
    *,
    partition_count: int,
    replication_factor: int,
    rng: random.Random,
) -> list[tuple[int, ...]]:
    """Replica sets for `partition_count` new partitions, first replica = preferred leader."""
    check_replication_factor(replication_factor, brokers)
    invariant(len({broker.id for broker in brokers}) == len(brokers), "usable brokers repeat an id")
    striper = _Striper(brokers, rng)
    return [striper.place_one(replication_factor) for _ in range(partition_count)]
