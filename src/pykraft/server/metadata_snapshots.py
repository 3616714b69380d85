"""Metadata snapshots of a node (KIP-630): when to write one, and how to load one.

Theory of operation. Every node (controller or broker) folds the metadata log into its
`MetadataLoader`'s image; `MetadataSnapshots` turns that image into a snapshot and back.

Writing, as Kafka's SnapshotGenerator decides it: each committed batch adds its size to the
bytes since the last snapshot; once they reach
`metadata.log.max.record.bytes.between.snapshots`, or once
`metadata.log.max.snapshot.interval.ms` (0: never) has passed since the append time of
the first batch committed after the last snapshot (KIP-876), the node writes the image as a
snapshot. Unlike Kafka, the bytes must also reach the size of the last snapshot written or
loaded (its records counted as the log's are): writing a snapshot costs in proportion to
the image, not to what changed, and at 1,000,000 partitions (a 1,010,007-record snapshot,
17-46 s of a worker thread's CPU, the GIL shared with the event loop) every node wrote two
during one controlled shutdown. Tied to the image's size, writing snapshots costs at most
about twice as much as appending the log (a snapshot holds at most the last one and the log
since), and a restart replays at most one snapshot's worth of log after its snapshot. The
snapshot
ends after the last batch the image folded (`image.offset + 1`, always a batch boundary)
and is taken only between metadata transactions. The records are produced and encoded in a
worker thread from the immutable image (at the versions its metadata.version asks for, as
the controller writes the log), then `RaftNode.write_snapshot` stores them. One
snapshot is written at a time; a failed write is logged and retried at the next trigger.

Retention, as Kafka's metadata log cleaning: the log and the snapshots are kept until
together they pass `metadata.max.retention.bytes`, or the first batch of the log is older
than `metadata.max.retention.ms` (either -1: no limit); then the log below the newest
snapshot goes, with the older snapshots (Kafka removes the oldest snapshot and the log below
the next one at a time, down to the limit). Until then a node that fell behind (a broker
applying a 300,000-partition fence) goes on from the log instead of loading a whole
snapshot; deleting the log at every snapshot had sent such brokers to load 300,000 records
at once. On the active controller the log a live broker has not applied yet (the lowest
offset the unfenced brokers report in their heartbeats) is kept past the limit: the log
goes only below the newest snapshot they have all passed, or below the newest once the
log and snapshots hold HOLD_RETENTION_TIMES the limit (or the newest snapshot's size, if
larger and the limit is not 0: a million partitions' image is past the default limit by
itself).

Loading (the Raft driver's `SnapshotLoader` hook, called at start-up for the latest local
snapshot and whenever a snapshot was fetched from the leader): the snapshot's records are
read and checked, the loader replaces its image (publishing the change from the old image
as one ordinary delta, so broker-side publishers see what appeared, changed or went away),
and the controller's state is rebuilt from the new image (`controller_from_image`). The
batches after the snapshot then arrive through `handle_commit` as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from pykraft.controller.features import record_version
from pykraft.controller.quorum_controller import QuorumController
from pykraft.controller.state import ControllerState
from pykraft.errors import invariant
from pykraft.metadata.codec import (
    MetadataEncodeError,
    decode_metadata_record,
    encode_metadata_record,
)
from pykraft.metadata.image import MetadataImage
from pykraft.metadata.loader import MetadataLoader
from pykraft.metadata.snapshot import image_records
from pykraft.raft.core import CommittedBatch
from pykraft.raft.driver import RaftNode
from pykraft.raft.log_store import RaftLogView
from pykraft.raft.messages import SnapshotId
from pykraft.raft.snapshot import snapshot_values
from pykraft.records.batch import iter_headers

__all__ = [
    "SnapshotPolicy",
    "MetadataSnapshots",
    "controller_from_image",
    "encoded_image",
    "read_snapshot_records",
]

log = logging.getLogger("pykraft.server")

READ_CHUNK_BYTES: Final = 1024 * 1024
DECODED_PER_TURN: Final = 10_000  # snapshot records decoded, or folded, per turn (load)
# a committed batch's size, estimated from its record values: Kafka counts batch bytes
BATCH_OVERHEAD_BYTES: Final = 61  # the RecordBatch v2 header
RECORD_OVERHEAD_BYTES: Final = 8  # a small record's length, attributes, deltas, key, headers
HOLD_RETENTION_TIMES: Final = 4  # the log a live broker still needs stays up to 4x the limit
# a due snapshot waits while the node applies a burst (>= 256 KiB committed in the last
# second), up to a minute: encoding 1,000,000 partitions on a worker thread took the GIL for
# 19 s of a controlled shutdown's 33 s on a follower, whose fetches then came late; the
# controlled shutdown of a broker of 1,000,000 partitions commits about 400 KB a second
BUSY_WINDOW_MS: Final = 1000
BUSY_BYTES: Final = 256 * 1024
DEFER_MAX_MS: Final = 60_000


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    max_bytes_between: int  # metadata.log.max.record.bytes.between.snapshots
    max_interval_ms: int  # metadata.log.max.snapshot.interval.ms; 0: no time trigger
    retention_bytes: int = -1  # metadata.max.retention.bytes; < 0: no limit
    retention_ms: int = -1  # metadata.max.retention.ms; < 0: no limit

    @classmethod
    def from_configs(cls, get_int: Callable[[str], int]) -> SnapshotPolicy:
        return cls(
            max_bytes_between=get_int("metadata.log.max.record.bytes.between.snapshots"),
            max_interval_ms=get_int("metadata.log.max.snapshot.interval.ms"),
            retention_bytes=get_int("metadata.max.retention.bytes"),
            retention_ms=get_int("metadata.max.retention.ms"),
        )


def records_bytes(values: Iterable[bytes]) -> int:
    """Record values' size as the log counts them (each with its record framing)."""
    return sum(len(value) + RECORD_OVERHEAD_BYTES for value in values)


def batch_bytes(batch: CommittedBatch) -> int:
    return BATCH_OVERHEAD_BYTES + records_bytes(batch.records)


def encoded_image(image: MetadataImage) -> list[bytes]:
    """The image's snapshot records, encoded at the versions its metadata.version uses. A
    record holding state its version cannot (below 3.7-IV2, the directory of a replica
    added by a reassignment; below 3.3-IV3, a broker in controlled shutdown) is written at
    its latest version instead, so that the snapshot rebuilds the image exactly (Kafka
    drops such state as a "loss")."""
    level = image.features.metadata_version
    encoded = []
    for record in image_records(image):
        try:
            encoded.append(encode_metadata_record(record, record_version(record, level)))
        except MetadataEncodeError:
            encoded.append(encode_metadata_record(record))
    return encoded


def _encoded_and_sized(image: MetadataImage) -> tuple[list[bytes], int]:
    """`encoded_image` and its `records_bytes`, both off the event loop (1,010,007 values
    at 1,000,000 partitions)."""
    values = encoded_image(image)
    return values, records_bytes(values)


def read_snapshot_records(
    snapshot_id: SnapshotId, view: RaftLogView
) -> Iterator[bytes]:
    """The record values of a stored snapshot, checked (framing, CRCs, header, footer)."""
    size = view.snapshot_size(snapshot_id)
    invariant(size is not None, f"no snapshot {snapshot_id} to load")
    assert size is not None

    def chunks() -> Iterator[bytes]:
        position = 0
        while position < size:
            chunk = view.read_snapshot(snapshot_id, position, READ_CHUNK_BYTES)
            invariant(bool(chunk), f"snapshot {snapshot_id} ends at {position} of {size}")
            position += len(chunk)
            yield chunk

    return snapshot_values(chunks())


def controller_from_image(core: QuorumController, image: MetadataImage) -> QuorumController:
    """A standby controller whose state is `image` (after a snapshot load), with the
    configuration and randomness of `core`, which must not be active: only a standby or a
    starting controller loads a snapshot."""
    invariant(not core.is_active, "the active controller cannot load a snapshot")
    return QuorumController(core.config, core.rng, state=ControllerState.from_image(image))


class MetadataSnapshots:
    """The node's snapshot writer and loader. Call `note_commit` after the loader took each
    committed batch, `load` from the SnapshotLoader hook, run `run()` as a task, and after
    cancelling it, await `close()` before stopping the Raft node."""

    def __init__(
        self,
        raft: RaftNode,
        loader: MetadataLoader,
        policy: SnapshotPolicy,
        now_ms: Callable[[], int],
        broker_offset: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.raft = raft
        self.loader = loader
        self.policy = policy
        self._now_ms = now_ms
        # the lowest metadata offset a live broker reported applying (the active controller
        # knows it from heartbeats; None elsewhere): the log it still needs is kept
        self._broker_offset = broker_offset
        self._bytes_since = 0  # committed since the last snapshot, written or loaded
        self._snapshot_bytes = 0  # the size of that snapshot, counted as the log's records
        self._oldest_since_ms: int | None = None  # append time of the first of those batches
        self._last_append_timestamp = -1  # of the last batch the image folded
        self._due = asyncio.Event()
        self.written = 0  # snapshots written by this process
        self.loaded = 0  # snapshots loaded by this process (local or fetched)
        self.last_written: SnapshotId | None = None
        self._writing: asyncio.Future[SnapshotId | None] | None = None
        self._first_timestamp_at: tuple[int, int | None] = (-1, None)  # (log start, time)
        self._recent: deque[tuple[int, int]] = deque()  # (ms, bytes) committed lately
        self._recent_bytes = 0

    # -- from the Raft listener ----------------------------------------------------------

    def note_commit(self, batch: CommittedBatch) -> None:
        size = batch_bytes(batch)
        self._bytes_since += size
        now_ms = self._now_ms()
        self._recent.append((now_ms, size))
        self._recent_bytes += size
        self.busy(now_ms)  # drops what left the window
        self._last_append_timestamp = batch.append_timestamp
        if self._oldest_since_ms is None:
            self._oldest_since_ms = batch.append_timestamp
            self._due.set()  # the run loop sets its timer by it
        if self._bytes_since >= self.bytes_between():
            self._due.set()

    async def load(self, snapshot_id: SnapshotId, view: RaftLogView) -> MetadataImage:
        """Replace the loader's image by snapshot `snapshot_id` (published as one delta),
        decoding and folding DECODED_PER_TURN records per turn of the event loop: a broker
        that fell behind the log start loaded 303,005 records (300,000 partitions) in one
        turn, held its loop 8.7 s, and its heartbeats went unanswered until it was fenced;
        with the decode alone sliced, another held its loop 5 s while folding them. The
        apply and the publication stay one step."""
        records = []
        size = 0
        for count, value in enumerate(read_snapshot_records(snapshot_id, view), 1):
            records.append(decode_metadata_record(value))
            size += len(value) + RECORD_OVERHEAD_BYTES  # records_bytes, as they stream
            if count % DECODED_PER_TURN == 0:
                await asyncio.sleep(0)
        base_offset = self.loader.image.offset
        for _ in self.loader.load_snapshot_steps(
                records, offset=snapshot_id.end_offset - 1, epoch=snapshot_id.epoch,
                per_step=DECODED_PER_TURN):
            await asyncio.sleep(0)
        self._bytes_since = 0
        self._snapshot_bytes = size
        self._oldest_since_ms = None
        self.loaded += 1
        image = self.loader.image
        log.info("loaded metadata snapshot %d-%d over the image at offset %d: %d records, "
                 "%d topics", snapshot_id.end_offset, snapshot_id.epoch, base_offset,
                 len(records), len(image.topics.by_id))
        return image

    # -- the policy ---------------------------------------------------------------------

    def bytes_between(self) -> int:
        """The bytes committed since the last snapshot that make the next one due:
        metadata.log.max.record.bytes.between.snapshots, or the last snapshot's size if
        larger."""
        return max(self.policy.max_bytes_between, self._snapshot_bytes)

    def due(self, now_ms: int) -> bool:
        """Whether a snapshot should be written now: enough bytes committed since the last
        one, or (KIP-876) a batch it lacks was appended at least the interval ago."""
        if self._bytes_since <= 0 or self._oldest_since_ms is None:
            return False
        if self._bytes_since >= self.bytes_between():
            return True
        interval = self.policy.max_interval_ms
        return interval > 0 and now_ms - self._oldest_since_ms >= interval

    def busy(self, now_ms: int) -> bool:
        """Whether at least BUSY_BYTES were committed in the last BUSY_WINDOW_MS."""
        recent = self._recent
        while recent and recent[0][0] <= now_ms - BUSY_WINDOW_MS:
            self._recent_bytes -= recent.popleft()[1]
        return self._recent_bytes >= BUSY_BYTES

    async def _wait_for_a_lull(self) -> None:
        """Until the node is not busy applying a burst of commits, at most DEFER_MAX_MS."""
        deadline = self._now_ms() + DEFER_MAX_MS
        while self.busy(now := self._now_ms()) and now < deadline:
            await asyncio.sleep(BUSY_WINDOW_MS / 4000)

    def retention_passed(self, now_ms: int) -> SnapshotId | None:
        """The snapshot to delete the log below, if the log and snapshots are past
        metadata.max.retention.bytes or the log's first batch past metadata.max.retention.ms."""
        store = self.raft.store
        latest = store.latest_snapshot_id
        start = store.log_start_offset
        if latest is None or (latest.end_offset <= start and len(store.snapshot_ids) <= 1):
            return None
        policy = self.policy
        stored = store.size_bytes + sum(store.snapshot_size(each) or 0
                                        for each in store.snapshot_ids)
        if 0 <= policy.retention_bytes < stored:
            return self._below_brokers(latest, stored)
        if policy.retention_ms >= 0:
            first = self._first_timestamp(start)
            if first is not None and now_ms - first > policy.retention_ms:
                return self._below_brokers(latest, stored)
        return None

    def _below_brokers(self, latest: SnapshotId, stored: int) -> SnapshotId | None:
        """The newest snapshot every live broker has applied past, to delete the log
        below; None to keep it all for now. A broker behind the newest snapshot would have
        to load a whole one instead of the log it lacks: at 1,000,000 partitions a broker
        applying a controlled shutdown fell 700,000 records behind, the log below the
        newest snapshot went, and loading it held the broker's loop 10.6 s, past its
        session timeout. Kept until the stored bytes reach HOLD_RETENTION_TIMES the limit,
        or the newest snapshot if it is larger: at 1,000,000 partitions one snapshot (119 MB)
        is past the default limit (100 MB) by itself, and two of them with the log between
        reached 4x the limit while a fence of every partition was applied, sending both
        brokers to load the snapshot (a loop held 6.8 s each; kill -9 until every partition
        was led 93.5 s, 48.0 in the run before)."""
        lowest = self._broker_offset()
        if lowest is None or lowest + 1 >= latest.end_offset:
            return latest
        store = self.raft.store
        passed = [each for each in store.snapshot_ids
                  if store.log_start_offset < each.end_offset <= lowest + 1]
        if passed:
            return max(passed, key=lambda each: each.end_offset)
        limit = self.policy.retention_bytes
        if limit > 0:  # (0 asks for no log kept below a snapshot: none is held)
            limit = max(limit, store.snapshot_size(latest) or 0)
        if 0 <= limit * HOLD_RETENTION_TIMES < stored:
            return latest
        return None

    def _first_timestamp(self, start: int) -> int | None:
        """The append time of the log's first batch (kept per log start)."""
        if self._first_timestamp_at[0] != start:
            data = self.raft.store.read(start, 1)
            first = next(iter_headers(data), None)
            self._first_timestamp_at = (start, None if first is None else first[1].max_timestamp)
        return self._first_timestamp_at[1]

    def apply_retention(self, now_ms: int) -> None:
        doomed = self.retention_passed(now_ms)
        if doomed is not None:
            self.raft.delete_before(doomed)
            log.info("metadata log and snapshots past retention: the log below %d-%d goes",
                     doomed.end_offset, doomed.epoch)

    def _next_check_s(self, now_ms: int) -> float:
        interval, oldest = self.policy.max_interval_ms, self._oldest_since_ms
        if interval <= 0 or oldest is None:
            return 60.0  # woken by `note_commit`
        return max(0.01, min(60.0, (oldest + interval - now_ms) / 1000))

    async def run(self) -> None:
        """Write snapshots as the policy asks, until cancelled."""
        while True:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation
            # that arrives as the event is set (a stop while batches commit)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._next_check_s(self._now_ms())):
                    await self._due.wait()
            self._due.clear()
            self.apply_retention(self._now_ms())
            if not self.due(self._now_ms()):
                continue
            await self._wait_for_a_lull()
            self._writing = asyncio.ensure_future(self.write_now())
            try:
                await asyncio.shield(self._writing)  # a stop lets it finish (`close`)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("writing a metadata snapshot failed; retried at the next trigger")
                await asyncio.sleep(1.0)

    async def close(self) -> None:
        """Wait for a snapshot being written (after `run` was cancelled), so that the Raft
        node is not stopped under it."""
        writing = self._writing
        if writing is not None and not writing.done():
            with contextlib.suppress(Exception):
                await writing

    async def write_now(self) -> SnapshotId | None:
        """Write the image as a snapshot now; None when there is nothing new to write or a
        metadata transaction is open (it is tried again at the next batch)."""
        loader = self.loader
        image = loader.image
        end_offset = image.offset + 1
        latest = self.raft.store.latest_snapshot_id
        if (
            loader.in_transaction
            or image.offset != loader.last_offset
            or end_offset <= 0
            or (latest is not None and end_offset <= latest.end_offset)
        ):
            return None
        bytes_covered, timestamp = self._bytes_since, self._last_append_timestamp
        started_ms = self._now_ms()
        values, size = await asyncio.to_thread(_encoded_and_sized, image)
        if end_offset < self.raft.core.log_start_offset:
            return None  # a snapshot fetched meanwhile is past this one
        snapshot_id = await self.raft.write_snapshot(
            end_offset, values, last_contained_log_timestamp=timestamp)
        self._bytes_since = max(0, self._bytes_since - bytes_covered)
        self._snapshot_bytes = size
        finished_ms = self._now_ms()
        # batches committed while it was written: their first append time is not kept, the
        # end of the write stands in for it
        self._oldest_since_ms = finished_ms if self._bytes_since > 0 else None
        self.written += 1
        self.last_written = snapshot_id
        self.apply_retention(finished_ms)
        log.info("wrote metadata snapshot %d-%d: %d records in %d ms; the log now starts at %d",
                 snapshot_id.end_offset, snapshot_id.epoch, len(values),
                 finished_ms - started_ms, self.raft.store.log_start_offset)
        return snapshot_id
