"""Folds committed batches of the metadata log into images, and publishes them.

Theory of operation. Raft hands the loader each committed batch in log order
(`handle_commit`). The loader replays the batch's records into one `MetadataDelta`, applies
it once, and calls every publisher with `(delta, image)`: one image per batch, not per
record, so a batch that creates a 10,000-partition topic is one apply and one publication.

Metadata transactions (KIP-866). Records between a BeginTransactionRecord and its
EndTransactionRecord may span batches and must appear atomically: while a transaction is
open nothing is published. Records that precede the BeginTransactionRecord in its batch are
published first, as their own image ending just before it. An AbortTransactionRecord
discards everything since the BeginTransactionRecord; the batch still ends in a publication
(of whatever followed the abort, possibly nothing) so the image's offset keeps up with the
log.

Invariants: batches arrive with strictly increasing offsets; a batch's records fit between
its base and last offsets; transaction markers nest properly. A broken one is a bug
upstream, and the loader stops on it rather than publish a wrong image.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from pykraft.errors import invariant
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    MetadataRecord,
)
from pykraft.metadata.snapshot import change_records

__all__ = ["MetadataLoader", "Publisher"]

Publisher = Callable[[MetadataDelta, MetadataImage], None]
_TRANSACTION_MARKERS = (BeginTransactionRecord, EndTransactionRecord, AbortTransactionRecord)


class MetadataLoader:
    """Synchronous: call `handle_commit` from the one thread (or task) that owns it."""

    def __init__(
        self,
        image: MetadataImage = MetadataImage.EMPTY,
        publishers: Sequence[Publisher] = (),
    ) -> None:
        self.publishers: list[Publisher] = list(publishers)
        self._image = image
        self._delta = MetadataDelta(image)
        self._last_offset = image.offset  # the last offset handled, published or not
        self._in_transaction = False

    @property
    def image(self) -> MetadataImage:
        """The last published image."""
        return self._image

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    @property
    def last_offset(self) -> int:
        """The last log offset handled (ahead of `image.offset` inside a transaction)."""
        return self._last_offset

    def handle_commit(
        self,
        base_offset: int,
        epoch: int,
        records: Sequence[MetadataRecord],
        last_offset: int,
    ) -> None:
        """Fold one committed batch (offsets `base_offset`..`last_offset`, record i at
        `base_offset + i`) into the image, and publish unless a transaction stays open."""
        invariant(base_offset > self._last_offset, "batch at %d does not follow offset %d",
                  base_offset, self._last_offset)
        invariant(
            last_offset >= base_offset + len(records) - 1 and last_offset >= base_offset,
            "%d records do not fit offsets %d..%d", len(records), base_offset, last_offset,
        )
        for index, record in enumerate(records):
            self._replay(record, base_offset + index, epoch)
        self._last_offset = last_offset
        if not self._in_transaction:
            self._publish(last_offset, epoch)

    def can_adopt(self, records: Sequence[MetadataRecord]) -> bool:
        """Whether the batch of `records` may be `adopt`ed rather than folded: it is no
        part of a metadata transaction."""
        return not self._in_transaction and not any(
            isinstance(record, _TRANSACTION_MARKERS) for record in records)

    def adopt(self, image: MetadataImage) -> None:
        """Take `image` as the fold of the next committed batch, made from the same records
        by another folder (a controller's core), instead of folding them a second time.

        It is published with an empty delta: only for nodes whose publishers read the image
        alone (a controller-only node's metadata cache). Never inside a metadata
        transaction, whose records are published together."""
        invariant(not self._in_transaction, "an image adopted inside a metadata transaction")
        invariant(image.offset > self._last_offset,
                  f"adopted image at {image.offset} does not follow offset {self._last_offset}")
        self._image = image
        self._delta = MetadataDelta(image)
        self._last_offset = image.offset
        for publish in self.publishers:
            publish(MetadataDelta(image), image)

    def load_snapshot(
        self, records: Iterable[MetadataRecord], *, offset: int, epoch: int
    ) -> None:
        """Replace the image by the one `records` (a snapshot's content) build, as of
        `offset` (the snapshot's end offset - 1) in `epoch`, and publish it as one delta
        from the current image: what the snapshot lacks is removed, what differs changed,
        so publishers need nothing special. An open transaction is dropped (the snapshot
        holds whatever of it committed)."""
        for _ in self.load_snapshot_steps(records, offset=offset, epoch=epoch):
            pass

    def load_snapshot_steps(
        self, records: Iterable[MetadataRecord], *, offset: int, epoch: int,
        per_step: int = 0,
    ) -> Iterator[None]:
        """`load_snapshot` in steps: it pauses (yields) after each `per_step` records
        replayed (0: never), so that a caller on an event loop can let other work run; the
        image is replaced and published in the last step only. Over an image of 300,000
        partitions, building the snapshot's image took 0.94 s and replaying the change to
        it 1.26 s, in one turn of a broker's loop."""
        invariant(
            offset > self._last_offset,
            f"snapshot at {offset} does not follow offset {self._last_offset}",
        )

        def replayed(delta: MetadataDelta, replaying: Iterable[MetadataRecord]
                     ) -> Iterator[None]:
            for count, record in enumerate(replaying, 1):
                delta.replay(record)
                if per_step and count % per_step == 0:
                    yield

        building = MetadataDelta(MetadataImage.EMPTY)
        yield from replayed(building, records)
        target = building.apply(offset, epoch)
        if self._image is MetadataImage.EMPTY:  # start-up, or a wiped node: one replay
            delta, image = building, target
        else:
            delta = MetadataDelta(self._image)
            yield from replayed(delta, change_records(self._image, target))
            image = delta.apply(offset, epoch)
            invariant(image == target, f"the change to snapshot {offset} does not rebuild it")
        invariant(offset > self._last_offset,
                  f"the log moved past snapshot {offset} while it was being loaded")
        self._image = image
        self._delta = MetadataDelta(image)
        self._last_offset = offset
        self._in_transaction = False
        for publish in self.publishers:
            publish(delta, image)

    def _replay(self, record: MetadataRecord, offset: int, epoch: int) -> None:
        match record:
            case BeginTransactionRecord():
                invariant(not self._in_transaction, f"nested transaction begins at {offset}")
                if offset - 1 > self._image.offset:  # records before it: their own image
                    self._publish(offset - 1, epoch)
                self._in_transaction = True
            case EndTransactionRecord():
                invariant(self._in_transaction, f"transaction end without begin at {offset}")
                self._in_transaction = False
            case AbortTransactionRecord():
                invariant(self._in_transaction, f"transaction abort without begin at {offset}")
                self._in_transaction = False
                self._delta = MetadataDelta(self._image)
            case _:
                self._delta.replay(record)

    def _publish(self, offset: int, epoch: int) -> None:
        delta = self._delta
        self._image = delta.apply(offset, epoch)
        self._delta = MetadataDelta(self._image)
        for publish in self.publishers:
            publish(delta, self._image)
