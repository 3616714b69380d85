"""Striped replica placement: constraints, balance and determinism."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.controller.placement import UsableBroker, place_replicas
from pykraft.errors import InvalidReplicationFactor


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[UsableBroker], int]:
    """A set of brokers (some fenced, some racked) and a replication factor that fits it."""
    ids = draw(st.lists(st.integers(0, 50), min_size=1, max_size=12, unique=True))
    rack_choices: list[list[str | None]] = [[None], ["a", "b"], ["a", "b", "c"], [None, "x"]]
    racks = draw(st.sampled_from(rack_choices))
    brokers = [
        UsableBroker(id=i, rack=draw(st.sampled_from(racks)), fenced=draw(st.booleans()))
        for i in ids
    ]
    if all(broker.fenced for broker in brokers):
        first = brokers[0]
        brokers[0] = UsableBroker(id=first.id, rack=first.rack, fenced=False)
    replication_factor = draw(st.integers(1, len(brokers)))
    return brokers, replication_factor


@settings(max_examples=200, deadline=None)
@given(cluster=clusters(), partition_count=st.integers(1, 40), seed=st.integers(0, 2**32))
def test_replica_sets_are_distinct_registered_brokers_led_by_unfenced(
    cluster: tuple[list[UsableBroker], int], partition_count: int, seed: int
) -> None:
    """Every replica set has RF distinct known brokers and an unfenced first replica."""
    brokers, replication_factor = cluster
    by_id = {broker.id: broker for broker in brokers}
    placements = place_replicas(
        brokers,
        partition_count=partition_count,
        replication_factor=replication_factor,
        rng=random.Random(seed),
    )
    assert len(placements) == partition_count
    unfenced_count = sum(1 for broker in brokers if not broker.fenced)
    single_rack = len({broker.rack for broker in brokers}) == 1
    for replicas in placements:
        assert len(replicas) == replication_factor
        assert len(set(replicas)) == replication_factor
        assert all(replica in by_id for replica in replicas)
        assert not by_id[replicas[0]].fenced
        if single_rack and replication_factor <= unfenced_count:
            # Fenced brokers are only a fallback once the unfenced ones are used up.
            assert all(not by_id[replica].fenced for replica in replicas)


@settings(max_examples=150, deadline=None)
@given(
    broker_count=st.integers(1, 10),
    replication_factor=st.integers(1, 10),
    partition_count=st.integers(1, 200),
    seed=st.integers(0, 2**32),
)
def test_leaders_are_balanced_within_one(
    broker_count: int, replication_factor: int, partition_count: int, seed: int
) -> None:
    """Over many partitions of one topic each unfenced broker leads about the same number."""
    replication_factor = min(replication_factor, broker_count)
    brokers = [UsableBroker(id=i, rack=None, fenced=False) for i in range(broker_count)]
    placements = place_replicas(
        brokers,
        partition_count=partition_count,
        replication_factor=replication_factor,
        rng=random.Random(seed),
    )
    leaders = Counter(replicas[0] for replicas in placements)
    counts = [leaders.get(broker.id, 0) for broker in brokers]
    assert max(counts) - min(counts) <= 1


@settings(max_examples=100, deadline=None)
@given(
    rack_size=st.integers(1, 4),
    rack_count=st.integers(2, 4),
    partition_count=st.integers(1, 120),
    seed=st.integers(0, 2**32),
)
def test_replicas_spread_over_racks(
    rack_size: int, rack_count: int, partition_count: int, seed: int
) -> None:
    """With equal racks and RF = rack count, every replica set covers every rack once.

    (Leaders are not balanced within one across racks: as in Kafka, a rack's cycle also
    advances when it supplies a follower, so one broker of a rack may lead twice in a row.)
    """
    brokers = [
        UsableBroker(id=rack * 10 + i, rack=f"rack{rack}", fenced=False)
        for rack in range(rack_count)
        for i in range(rack_size)
    ]
    rack_of = {broker.id: broker.rack for broker in brokers}
    replication_factor = min(rack_count, len(brokers))
    placements = place_replicas(
        brokers,
        partition_count=partition_count,
        replication_factor=replication_factor,
        rng=random.Random(seed),
    )
    for replicas in placements:
        assert len({rack_of[replica] for replica in replicas}) == replication_factor
    leader_racks = Counter(rack_of[replicas[0]] for replicas in placements)
    counts = [leader_racks.get(f"rack{rack}", 0) for rack in range(rack_count)]
    assert max(counts) - min(counts) <= 1  # the rack cursor moves one rack per partition


def test_placement_is_deterministic_given_the_seed() -> None:
    """The same seed and brokers give the same placements; another seed usually differs."""
    brokers = [UsableBroker(id=i, rack=None, fenced=i == 3) for i in range(6)]

    def place(seed: int) -> list[tuple[int, ...]]:
        return place_replicas(
            brokers, partition_count=30, replication_factor=3, rng=random.Random(seed)
        )

    assert place(7) == place(7)
    assert any(place(7) != place(seed) for seed in range(8, 12))


def test_striping_pattern_with_three_racks() -> None:
    """Consecutive partitions start in consecutive racks (the stripes)."""
    brokers = [
        UsableBroker(id=rack * 3 + i, rack="abc"[rack], fenced=False)
        for rack in range(3)
        for i in range(3)
    ]
    placements = place_replicas(
        brokers, partition_count=3, replication_factor=3, rng=random.Random(1)
    )
    first_racks = ["abc"[replicas[0] // 3] for replicas in placements]
    assert sorted(first_racks) == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("brokers", "replication_factor", "message"),
    [
        ([UsableBroker(1, None, False)], 0, "the replication factor must be positive"),
        ([UsableBroker(1, None, False)], -2, "the replication factor must be positive"),
        (
            [UsableBroker(1, None, False), UsableBroker(2, None, True)],
            3,
            "The target replication factor of 3 cannot be reached because only 2 broker(s)",
        ),
        ([UsableBroker(1, None, True)], 1, "All brokers are currently fenced."),
        ([], 1, "All brokers are currently fenced."),
    ],
)
def test_impossible_replication_factors_are_refused(
    brokers: list[UsableBroker], replication_factor: int, message: str
) -> None:
    """Replication factor <= 0, above the broker count, or no unfenced broker: refused."""
    with pytest.raises(InvalidReplicationFactor, match=re.escape(message)):
        place_replicas(
            brokers, partition_count=1, replication_factor=replication_factor, rng=random.Random(0)
        )
