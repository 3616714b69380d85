"""A partition's idempotent-producer state: per producer id, its epoch and its last batches.

Theory of operation (KIP-98, Kafka's ProducerStateManager). An idempotent producer numbers
its batches per partition: batch sequences start at 0 for a new producer epoch and each
batch's first sequence follows the previous batch's last one. The leader keeps, per producer
id, the epoch it last saw and the metadata of the producer's last five batches
(`BATCHES_KEPT`, the most a client has in flight), and checks every producer batch before it
is written:

- an epoch lower than the producer's current one: INVALID_PRODUCER_EPOCH (a zombie);
- a batch equal in epoch and sequence range to one of the last five: a duplicate (a retry
  whose first answer was lost). It is not written again; the producer is answered with the
  offsets the first copy got;
- a new epoch must start at sequence 0, and within an epoch the first sequence must follow
  the last one (sequences wrap at 2^31 - 1): otherwise OUT_OF_ORDER_SEQUENCE_NUMBER;
- a producer the partition has no state for (new, or expired) may start at any sequence
  (Kafka accepts this since KIP-360: the state may have gone with retention).

Batches a coordinator writes for a producer (the group coordinator's TxnOffsetCommit
offsets, with no sequence) get the epoch check only (Kafka's AppendOrigin.COORDINATOR).
A transaction marker carries the epoch of the coordinator that wrote it (the leader epoch of
its `__transaction_state` partition); each producer keeps the newest it has seen, and a
marker from an older coordinator is refused with TRANSACTION_COORDINATOR_FENCED. Without
that, a deposed coordinator's marker delayed by a network partition could land after the
new coordinator had finished the transaction, and end the producer's next one on this
partition (the fault campaign found it: an ABORT from the old coordinator inside a
committed transaction).

Followers and the rebuild from the log apply batches without checks (`apply`). The state is
a fold over the log's batch headers and its markers' coordinator epochs: `Log` builds it on
first use from the newest snapshot at or below its log end plus one pass over the batches
after it, and keeps it current on every append. Snapshots are Kafka's `<offset>.snapshot`
files: a version (1), a CRC32C of what follows it, then one entry per producer (id, epoch,
last sequence, last offset, offset delta, timestamp, coordinator epoch, first offset of its
open transaction).
Like Kafka's, a snapshot keeps only each producer's last batch, so after a restart only a
retry of a producer's last batch is recognised as a duplicate; one of an earlier batch is out
of order, which the client handles.

A producer with no open transaction whose last batch is older than
`producer.id.expiration.ms` is forgotten (`expire`).
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import crc32c

from pykraft.errors import (
    CorruptRecord,
    InvalidProducerEpoch,
    OutOfOrderSequenceNumber,
    TransactionCoordinatorFenced,
)
from pykraft.records.batch import BatchHeader
from pykraft.storage.checkpoint import write_atomically

__all__ = [
    "BATCHES_KEPT",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "ProducerState",
    "ProducerStateEntry",
    "delete_snapshots",
    "list_snapshots",
    "read_snapshot",
    "snapshot_path",
    "write_snapshot",
]

BATCHES_KEPT: Final = 5
SNAPSHOT_SUFFIX: Final = ".snapshot"
SNAPSHOT_VERSION: Final = 1
SEQUENCE_MAX: Final = 0x7FFFFFFF
NO_SEQUENCE: Final = -1
NO_EPOCH: Final = -1
_HEAD: Final = struct.Struct(">hI")  # version, crc32c of everything after it
_COUNT: Final = struct.Struct(">i")
_ENTRY: Final = struct.Struct(">qhiqiqiq")


def increment_sequence(sequence: int, increment: int) -> int:
    """`sequence + increment`, wrapping past 2^31 - 1 to 0 as producers do."""
    if sequence > SEQUENCE_MAX - increment:
        return increment - (SEQUENCE_MAX - sequence) - 1
    return sequence + increment


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (next_sequence == 0
                                                  and last_sequence == SEQUENCE_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended producer batch: its last sequence and offset, and how many more
    records than one it holds (`offset_delta`, equal for offsets and sequences)."""
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_sequence(self) -> int:
        first = self.last_sequence - self.offset_delta
        return first if first >= 0 else first + SEQUENCE_MAX + 1

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1  # -1: no open transaction
    last_timestamp: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(self.producer_id, self.producer_epoch,
                                  deque(self.batches, maxlen=BATCHES_KEPT),
                                  self.coordinator_epoch, self.current_txn_first_offset,
                                  self.last_timestamp)

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        last = increment_sequence(header.base_sequence, header.last_offset_delta)
        for batch in self.batches:
            if batch.first_sequence == header.base_sequence and batch.last_sequence == last:
                return batch
        return None

    def apply(self, header: BatchHeader, coordinator_epoch: int = -1) -> None:
        """Fold one written batch (its offsets assigned) into the entry; a marker's
        `coordinator_epoch` (-1: not a marker, or unreadable) becomes the entry's."""
        if header.producer_epoch != self.producer_epoch:
            self.producer_epoch = header.producer_epoch
            self.batches.clear()  # a new epoch numbers its batches from 0 again
        self.last_timestamp = header.max_timestamp
        if header.is_control:  # a COMMIT or ABORT marker ends the open transaction
            self.current_txn_first_offset = -1
            if coordinator_epoch >= 0:
                self.coordinator_epoch = coordinator_epoch
            return
        if header.is_transactional and self.current_txn_first_offset < 0:
            self.current_txn_first_offset = header.base_offset
        if header.base_sequence >= 0:
            self.batches.append(BatchMetadata(
                increment_sequence(header.base_sequence, header.last_offset_delta),
                header.last_offset, header.last_offset_delta, header.max_timestamp))


@dataclass(slots=True)
class ProducerState:
    """The producers of one partition; `end_offset` is the offset the fold has reached."""
    producers: dict[int, ProducerStateEntry] = field(default_factory=dict)
    end_offset: int = 0

    def check(self, headers: Iterable[BatchHeader], *, sequences: bool = True,
              coordinator_epochs: Sequence[int] = ()) -> BatchMetadata | None:
        """Validate a leader append's producer batches in order (raising
        InvalidProducerEpoch / OutOfOrderSequenceNumber / TransactionCoordinatorFenced),
        without changing the state. Return the first copy of a duplicate batch if there is
        one: the append is then answered with its offsets and nothing is written (as Kafka
        does). With `sequences=False` (a coordinator's own write) only epochs are checked.
        `coordinator_epochs[i]` is the coordinator epoch of the i-th batch if it is a marker
        (-1 otherwise; missing entries count as -1)."""
        pending: dict[int, ProducerStateEntry] = {}
        offset = self.end_offset
        for index, header in enumerate(headers):
            if header.producer_id < 0:
                offset += header.last_offset_delta + 1
                continue
            entry = pending.get(header.producer_id) or self.producers.get(header.producer_id)
            if entry is not None and sequences and not header.is_control:
                duplicate = entry.find_duplicate(header)
                if duplicate is not None:
                    return duplicate
            coordinator_epoch = (coordinator_epochs[index] if header.is_control
                                 and index < len(coordinator_epochs) else -1)
            if entry is not None:
                _check_epoch(entry, header)
                if sequences and not header.is_control:
                    _check_sequence(entry, header)
                if 0 <= coordinator_epoch < entry.coordinator_epoch:
                    raise TransactionCoordinatorFenced(
                        f"marker of coordinator epoch {coordinator_epoch} for producer "
                        f"{header.producer_id}, which has seen coordinator epoch "
                        f"{entry.coordinator_epoch}")
            entry = entry.copy() if entry is not None else ProducerStateEntry(header.producer_id)
            entry.apply(header._replace(base_offset=offset), coordinator_epoch)
            pending[header.producer_id] = entry
            offset += header.last_offset_delta + 1
        return None

    def apply(self, header: BatchHeader, coordinator_epoch: int = -1) -> None:
        """Fold one written batch (offsets assigned; a marker's coordinator epoch) into the
        state."""
        if header.producer_id >= 0:
            entry = self.producers.get(header.producer_id)
            if entry is None:
                entry = self.producers[header.producer_id] = ProducerStateEntry(
                    header.producer_id)
            entry.apply(header, coordinator_epoch)
        self.end_offset = max(self.end_offset, header.next_offset)

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers with no open transaction whose last batch is at least
        `expiration_ms` old; return how many went."""
        expired = [producer_id for producer_id, entry in self.producers.items()
                   if entry.current_txn_first_offset < 0
                   and now_ms - entry.last_timestamp >= expiration_ms]
        for producer_id in expired:
            del self.producers[producer_id]
        return len(expired)


def _check_epoch(entry: ProducerStateEntry, header: BatchHeader) -> None:
    if header.producer_epoch < entry.producer_epoch:
        raise InvalidProducerEpoch(
            f"epoch {header.producer_epoch} of producer {header.producer_id} is smaller than "
            f"the last seen epoch {entry.producer_epoch}")


def _check_sequence(entry: ProducerStateEntry, header: BatchHeader) -> None:
    first = header.base_sequence
    if header.producer_epoch != entry.producer_epoch:
        if first != 0 and entry.producer_epoch != NO_EPOCH:
            raise OutOfOrderSequenceNumber(
                f"invalid sequence number {first} for the new epoch {header.producer_epoch} "
                f"of producer {header.producer_id}: a new epoch starts at 0")
        return
    last = entry.last_sequence
    if last != NO_SEQUENCE and not in_sequence(last, first):
        raise OutOfOrderSequenceNumber(
            f"out of order sequence number for producer {header.producer_id}: {first} "
            f"(incoming first sequence), {last} (current last sequence)")


# -- snapshot files -------------------------------------------------------------------------

def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    """The offsets of the snapshot files in `directory`, ascending."""
    offsets = []
    for name in os.listdir(directory):
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            offsets.append(int(stem))
    return sorted(offsets)


def delete_snapshots(directory: Path, keep: Iterable[int] = (), *, below: int | None = None,
                     above: int | None = None) -> None:
    """Delete the snapshots below `below` or above `above`, except those in `keep`."""
    kept = set(keep)
    for offset in list_snapshots(directory):
        if offset in kept:
            continue
        if (below is not None and offset < below) or (above is not None and offset > above):
            snapshot_path(directory, offset).unlink(missing_ok=True)


def encode_snapshot(state: ProducerState) -> bytes:
    body = bytearray(_COUNT.pack(len(state.producers)))
    for entry in state.producers.values():
        last = entry.batches[-1] if entry.batches else None
        body += _ENTRY.pack(
            entry.producer_id, entry.producer_epoch,
            last.last_sequence if last else NO_SEQUENCE,
            last.last_offset if last else -1, last.offset_delta if last else 0,
            entry.last_timestamp, entry.coordinator_epoch, entry.current_txn_first_offset)
    return _HEAD.pack(SNAPSHOT_VERSION, crc32c.crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes, end_offset: int) -> ProducerState:
    """Raise CorruptRecord for a short, unknown-version or CRC-failing file."""
    if len(data) < _HEAD.size + _COUNT.size:
        raise CorruptRecord(f"producer snapshot of {len(data)} bytes is too short")
    version, crc = _HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptRecord(f"producer snapshot version {version}, expected {SNAPSHOT_VERSION}")
    body = memoryview(data)[_HEAD.size:]
    if crc32c.crc32c(body) != crc:
        raise CorruptRecord("producer snapshot CRC32C mismatch")
    (count,) = _COUNT.unpack_from(body)
    if count < 0 or len(body) != _COUNT.size + count * _ENTRY.size:
        raise CorruptRecord(f"producer snapshot claims {count} entries in {len(body)} bytes")
    state = ProducerState(end_offset=end_offset)
    for producer_id, epoch, last_sequence, last_offset, delta, timestamp, coordinator_epoch, \
            txn_first in _ENTRY.iter_unpack(body[_COUNT.size:]):
        entry = ProducerStateEntry(producer_id, epoch, coordinator_epoch=coordinator_epoch,
                                   current_txn_first_offset=txn_first, last_timestamp=timestamp)
        if last_sequence != NO_SEQUENCE and last_offset >= 0:
            entry.batches.append(BatchMetadata(last_sequence, last_offset, delta, timestamp))
        state.producers[producer_id] = entry
    return state


def write_snapshot(directory: Path, state: ProducerState) -> Path:
    """Write (atomically, not fsynced) the snapshot of `state` at its end offset.

    Not fsynced because it is written on the produce path (a roll) and at shutdown for
    every partition in use: a snapshot torn by an OS crash fails its CRC and is deleted
    (the state is then rebuilt from an older one and the log), and one above the log end
    that survived while the log's tail did not is deleted when the log opens."""
    path = snapshot_path(directory, state.end_offset)
    write_atomically(path, encode_snapshot(state), sync=False)
    return path


def read_snapshot(directory: Path, offset: int) -> ProducerState:
    return decode_snapshot(snapshot_path(directory, offset).read_bytes(), offset)
