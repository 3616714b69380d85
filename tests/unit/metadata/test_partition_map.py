"""PartitionMap is a Mapping[int, PartitionRegistration] like the immutables.Map it
replaced: random update sequences (dense, out of order, with holes) against a dict, and
the indexes a log must not make (negative, far past the end) refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.errors import InvariantViolation
from pykraft.metadata.partition_map import EMPTY_PARTITIONS, HOLE_MAX, PartitionMap
from pykraft.metadata.registrations import (
    MIGRATING_DIRECTORY,
    LeaderRecoveryState,
    PartitionRegistration,
)


def registration(leader: int, epoch: int = 0) -> PartitionRegistration:
    return PartitionRegistration((1, 2, 3), (1, 2, 3), (), (), leader,
                                 LeaderRecoveryState.RECOVERED, epoch, epoch,
                                 (MIGRATING_DIRECTORY,) * 3)


updates = st.lists(st.dictionaries(st.integers(0, 40), st.integers(1, 3).map(registration),
                                   max_size=8), max_size=12)


@settings(max_examples=300, deadline=None)
@given(updates=updates, probes=st.lists(st.integers(-3, 45), max_size=10))
def test_updates_behave_as_a_dict(updates: list[dict[int, PartitionRegistration]],
                                  probes: list[int]) -> None:
    model: dict[int, PartitionRegistration] = {}
    partitions = EMPTY_PARTITIONS
    for changes in updates:
        before = partitions
        partitions = partitions.update(changes)
        model.update(changes)
        assert before is not partitions or not changes
        assert len(partitions) == len(model)
        assert list(partitions) == sorted(model) == partitions.keys()
        assert partitions.items() == sorted(model.items())
        assert partitions.values() == [model[i] for i in sorted(model)]
        assert partitions == model and partitions == PartitionMap(partitions._items)
        assert hash(partitions) == hash(PartitionMap(partitions._items))
    for index in probes:
        assert (index in partitions) == (index in model)
        assert partitions.get(index) == model.get(index)
        if index in model:
            assert partitions[index] is model[index]
        else:
            with pytest.raises(KeyError):
                partitions[index]


def test_indexes_a_log_must_not_make_are_refused() -> None:
    partitions = EMPTY_PARTITIONS.update({0: registration(1), 1: registration(2)})
    with pytest.raises(InvariantViolation):
        partitions.update({-1: registration(1)})
    with pytest.raises(InvariantViolation):  # partition 2**31 - 1: no tuple that long
        partitions.update({2 + HOLE_MAX: registration(1)})
    assert partitions.get("0") is None and "0" not in partitions  # type: ignore[call-overload]
    assert partitions.update({}) is partitions
