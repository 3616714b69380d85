"""The classic group's states and its one transition table (Kafka's ClassicGroupState).

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
      ^                 |      ^                                                 |
      |   no members    |      +---- member joins, leaves, expires, sync timeout +
      +-----------------+                                                        |
    Stable <------------------- leader's SyncGroup ------------------------------+
      |  member joins with new metadata, leaves or expires --> PreparingRebalance
    any --> Dead (the group is deleted or its partition unloaded)

A group replayed from `__consumer_offsets` is created directly in Stable (with members) or
Empty (without): creation is not a transition.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Final

from pykraft.errors import InvariantViolation

__all__ = ["GroupState", "IllegalTransition", "TRANSITIONS", "check_transition"]


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class IllegalTransition(InvariantViolation):
    """Only a bug moves a group along an edge the table lacks."""


TRANSITIONS: Final[Mapping[GroupState, frozenset[GroupState]]] = MappingProxyType({
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset({
        GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD}),
    GroupState.COMPLETING_REBALANCE: frozenset({
        GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset({GroupState.DEAD}),
})


def check_transition(current: GroupState, target: GroupState) -> GroupState:
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(f"group state {current.value} -> {target.value}")
    return target
