"""Loading a coordinator's partition (`__consumer_offsets`, `__transaction_state`) by
replaying its log, shared by the group and the transaction coordinator's shells.

The log is read by offset, as Kafka's coordinator loader does: a chunk of batches
(LOAD_BATCHES_PER_YIELD) at a time, synchronously, from the partition's log as it is at
that moment; then the task yields, and the next chunk starts at the offset after the last
batch read, from the partition's current log again. No `Log` nor segment is held across an
await, so whatever runs on the event loop meanwhile is safe: a replica move's swap
(AlterReplicaLogDirs closes the old log and installs its copy, with the same offsets),
retention (a chunk starts at the log start if that went past it), and the cleaner's swap
of compacted segments (offsets and batch bounds are kept; what a chunk reads after a
cleaning is what the earlier chunks' records became, which replays to the same state as
long as a load lasts less than delete.retention.ms, Kafka's own bound for a reader of a
compacted log).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Container
from typing import Final, Protocol

from pykraft.broker.replica_manager import Partition, ReplicaManager
from pykraft.records.batch import BatchHeader

__all__ = ["LOAD_BATCHES_PER_YIELD", "LoadingCore", "leading_partition", "load_partition"]

LOAD_BATCHES_PER_YIELD: Final = 64  # let other tasks run while a big partition loads


class LoadingCore(Protocol):
    """What a coordinator core offers its shell for a load."""

    def begin_load(self, partition: int, leader_epoch: int) -> None: ...

    def leader_epoch(self, partition: int) -> int | None: ...

    def unload(self, partition: int) -> None: ...

    def complete_load(self, partition: int, now_ms: int) -> None: ...


def leading_partition(replicas: ReplicaManager, node_id: int, topic: str, index: int,
                      epoch: int) -> Partition | None:
    """The partition as it is now, if this broker leads it at `epoch`."""
    partition = replicas.get_partition(topic, index)
    if partition is None or partition.leader_id != node_id or partition.leader_epoch != epoch:
        return None
    return partition


async def load_partition(
    core: LoadingCore,
    leading: Callable[[], Partition | None],
    index: int,
    epoch: int,
    *,
    replay: Callable[[BatchHeader, bytes], int],
    pending_loads: Container[int],
    now_ms: Callable[[], int],
) -> int | None:
    """Replay partition `index`'s log into `core` (`replay` takes each batch and says how
    many records it loaded): the number of records, or None when the load was given up
    because the partition was unloaded, elected again (a newer load is pending) or is no
    longer led here at `epoch` (`leading` gives it as it is now, or None)."""
    partition = leading()
    if partition is None:
        return None
    core.begin_load(index, epoch)
    records, offset = 0, partition.log.log_start_offset
    while True:
        log_ = partition.log  # looked up again after each await (module docstring)
        read = 0
        for header, batch in itertools.islice(
                log_.iter_batches(max(offset, log_.log_start_offset)), LOAD_BATCHES_PER_YIELD):
            records += replay(header, batch)
            offset, read = header.last_offset + 1, read + 1
        if read < LOAD_BATCHES_PER_YIELD:
            break
        await asyncio.sleep(0)
        if core.leader_epoch(index) != epoch or index in pending_loads:
            return None  # unloaded, or a newer election, while we yielded
        partition = leading()
        if partition is None:  # deleted or led elsewhere: the metadata says so next
            core.unload(index)
            return None
    core.complete_load(index, now_ms())
    return records
