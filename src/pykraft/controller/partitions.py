"""Partition changes: leader election and ISR updates as PartitionChangeRecords.

Theory of operation. A change starts from a partition's registration and a *target ISR*
and asks: who should lead? The rules (Kafka's, without eligible leader replicas):

0. A *preferred* election (ElectLeaders, leader rebalancing) first tries the preferred
   replica, the first of the assignment, if it is in the target ISR and acceptable.
1. The current leader stays if it is still in the target ISR and still acceptable.
2. Otherwise the first replica, in replica order, that is in the target ISR and acceptable
   becomes leader: the preferred replica when it qualifies.
3. Otherwise, only if unclean election is allowed for the topic, the first acceptable
   replica at all becomes leader, the ISR becomes just that replica, and the partition is
   marked RECOVERING. This can lose acknowledged data, which is why it is opt-in.
4. Otherwise there is no leader (-1).

The ISR in the record becomes the target ISR, with one exception: an ISR is never emptied.
When the last in-sync replica goes (its broker is fenced), the partition loses its leader
but keeps that replica in its ISR, so that when the broker comes back it can lead again
without an unclean election.

"Acceptable" is decided by the caller: usually "registered, unfenced and not in controlled
shutdown", minus a broker being fenced, plus a broker being unfenced.

The record only carries what changes (the image's `merge` keeps the rest); a new leader
(even the same broker again) bumps the leader epoch when replayed. Before metadata.version
3.6-IV0 an ISR shrink must bump the leader epoch too, so the record then names the
unchanged leader explicitly.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from enum import Enum

from pykraft.controller.features import bumps_leader_epoch_on_isr_shrink
from pykraft.metadata.records import PartitionChangeRecord
from pykraft.metadata.registrations import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    PartitionRegistration,
)

__all__ = ["Election", "build_partition_change", "complete_reassignment"]


class Election(Enum):
    """Which election to run when the current leader cannot stay."""

    ONLINE = "online"  # only from the ISR
    UNCLEAN = "unclean"  # from the ISR, else any acceptable replica
    PREFERRED = "preferred"  # the preferred replica when it qualifies, else as ONLINE


def _elect(
    partition: PartitionRegistration,
    replicas: tuple[int, ...],
    target_isr: tuple[int, ...],
    is_acceptable_leader: Callable[[int], bool],
    election: Election,
) -> tuple[int, bool]:
    """The leader to have and whether choosing it was unclean."""

    def valid(replica: int) -> bool:
        return replica in target_isr and is_acceptable_leader(replica)

    if election == Election.PREFERRED and replicas and valid(replicas[0]):
        return replicas[0], False
    if partition.leader != NO_LEADER and valid(partition.leader):
        return partition.leader, False
    for replica in replicas:
        if valid(replica):
            return replica, False
    if election == Election.UNCLEAN:
        for replica in replicas:
            if is_acceptable_leader(replica):
                return replica, True
    return NO_LEADER, False


def build_partition_change(
    partition: PartitionRegistration,
    topic_id: uuid.UUID,
    partition_id: int,
    *,
    target_isr: tuple[int, ...],
    is_acceptable_leader: Callable[[int], bool],
    metadata_version: int,
    election: Election = Election.ONLINE,
    target_replicas: tuple[int, ...] | None = None,
    target_adding: tuple[int, ...] | None = None,
    target_removing: tuple[int, ...] | None = None,
) -> PartitionChangeRecord | None:
    """The record that moves `partition` to `target_isr` (and to `target_replicas`,
    `target_adding`, `target_removing` when given) with a fitting leader; None when
    nothing would change. A reassignment whose adding replicas are all in the target ISR
    completes in the same record."""
    replicas = partition.replicas if target_replicas is None else target_replicas
    adding = partition.adding_replicas if target_adding is None else target_adding
    removing = partition.removing_replicas if target_removing is None else target_removing
    if adding or removing:
        completed = complete_reassignment(replicas, adding, removing, target_isr)
        if completed is not None:
            replicas, target_isr = completed
            adding = removing = ()
    leader, unclean = _elect(partition, replicas, target_isr, is_acceptable_leader, election)
    record_leader = NO_LEADER_CHANGE
    record_isr: tuple[int, ...] | None = None
    recovery_state = -1
    if leader != partition.leader:
        record_leader = leader
        if unclean:
            record_isr = (leader,)
            if partition.leader_recovery_state != LeaderRecoveryState.RECOVERING:
                recovery_state = int(LeaderRecoveryState.RECOVERING)
    if record_isr is None and target_isr and target_isr != partition.isr:
        record_isr = target_isr
    if (
        bumps_leader_epoch_on_isr_shrink(metadata_version)
        and record_leader == NO_LEADER_CHANGE
        and record_isr is not None
        and not set(partition.isr) <= set(record_isr)
    ):
        record_leader = partition.leader
    record_replicas = None if replicas == partition.replicas else replicas
    record_adding = None if adding == partition.adding_replicas else adding
    record_removing = None if removing == partition.removing_replicas else removing
    if (
        record_leader == NO_LEADER_CHANGE
        and record_isr is None
        and recovery_state == -1
        and record_replicas is None
        and record_adding is None
        and record_removing is None
    ):
        return None
    return PartitionChangeRecord(
        partition_id=partition_id,
        topic_id=topic_id,
        isr=record_isr,
        leader=record_leader,
        replicas=record_replicas,
        removing_replicas=record_removing,
        adding_replicas=record_adding,
        leader_recovery_state=recovery_state,
    )


def complete_reassignment(
    replicas: tuple[int, ...],
    adding: tuple[int, ...],
    removing: tuple[int, ...],
    target_isr: tuple[int, ...],
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(replicas, ISR) once a reassignment is done: every adding replica is in the ISR and
    the ISR keeps a member after the removing replicas leave. None while it is not."""
    isr = tuple(replica for replica in target_isr if replica not in removing)
    if not isr or any(replica not in isr for replica in adding):
        return None
    return tuple(replica for replica in replicas if replica not in removing), isr
