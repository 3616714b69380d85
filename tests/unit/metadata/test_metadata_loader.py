"""MetadataLoader: one published image per committed batch, offsets and epochs, and
metadata transactions (KIP-866) held back until they end or discarded when aborted."""

from __future__ import annotations

import uuid

import pytest

from pykraft.errors import InvariantViolation
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.loader import MetadataLoader
from pykraft.metadata.records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    ConfigRecord,
    EndTransactionRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionRecord,
    TopicRecord,
)
from tests.unit.metadata.metadata_workload import workload

FOO = uuid.UUID(int=1)
BAR = uuid.UUID(int=2)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[MetadataDelta, MetadataImage]] = []

    def __call__(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.calls.append((delta, image))

    @property
    def offsets(self) -> list[int]:
        return [image.offset for _, image in self.calls]


def loader_with_recorder() -> tuple[MetadataLoader, Recorder]:
    recorder = Recorder()
    return MetadataLoader(publishers=[recorder]), recorder


def config(name: str, value: str) -> ConfigRecord:
    return ConfigRecord(resource_type=4, resource_name="", name=name, value=value)


def test_one_publication_per_batch() -> None:
    """Each committed batch is one delta and one image, at its last offset and epoch."""
    loader, recorder = loader_with_recorder()
    first: list[MetadataRecord] = [TopicRecord(name="foo", topic_id=FOO)]
    first += [
        PartitionRecord(partition_id=index, topic_id=FOO, replicas=(1,), isr=(1,), leader=1)
        for index in range(3)
    ]
    loader.handle_commit(0, 1, first, 3)
    loader.handle_commit(4, 2, [config("a", "1")], 4)
    assert recorder.offsets == [3, 4]
    assert [image.epoch for _, image in recorder.calls] == [1, 2]
    delta, image = recorder.calls[0]
    assert delta.base is MetadataImage.EMPTY and set(delta.changed_topics) == {FOO}
    second_delta, second = recorder.calls[1]
    assert second_delta.base is image and second_delta.changed_topics == {}
    assert second.topics is image.topics
    assert loader.image is second and loader.last_offset == 4


def test_batches_without_records_still_advance_the_image() -> None:
    """A control batch (no metadata records) moves the image's offset forward."""
    loader, recorder = loader_with_recorder()
    loader.handle_commit(0, 1, [NoOpRecord()], 0)
    loader.handle_commit(1, 1, [], 1)
    assert recorder.offsets == [0, 1]


def test_offsets_must_increase() -> None:
    """A batch at or before the last handled offset, or too short for its records, is a bug."""
    loader, _ = loader_with_recorder()
    loader.handle_commit(0, 1, [NoOpRecord(), NoOpRecord()], 1)
    with pytest.raises(InvariantViolation):
        loader.handle_commit(1, 1, [NoOpRecord()], 1)
    with pytest.raises(InvariantViolation):
        loader.handle_commit(5, 1, [NoOpRecord(), NoOpRecord()], 5)


def test_transaction_spanning_batches_is_published_at_its_end() -> None:
    """Records before Begin are published first; the transaction appears only once, in
    the batch holding its EndTransactionRecord."""
    loader, recorder = loader_with_recorder()
    loader.handle_commit(
        0, 1, [config("before", "1"), BeginTransactionRecord(), config("a", "1")], 2
    )
    assert recorder.offsets == [0]  # "before" only, as of the record before Begin
    assert loader.in_transaction and loader.last_offset == 2
    loader.handle_commit(3, 1, [config("b", "2")], 3)
    assert recorder.offsets == [0]
    assert dict(loader.image.configs.get(4, "")) == {"before": "1"}
    loader.handle_commit(4, 1, [config("c", "3"), EndTransactionRecord(), config("after", "4")], 6)
    assert recorder.offsets == [0, 6]
    delta, image = recorder.calls[-1]
    assert dict(image.configs.get(4, "")) == {"before": "1", "a": "1", "b": "2", "c": "3",
                                              "after": "4"}  # fmt: skip
    assert delta.base is recorder.calls[0][1] and not loader.in_transaction


def test_aborted_transaction_is_discarded() -> None:
    """AbortTransactionRecord drops the transaction's records; what follows still counts."""
    loader, recorder = loader_with_recorder()
    loader.handle_commit(0, 1, [BeginTransactionRecord(), config("a", "1")], 1)
    loader.handle_commit(2, 1, [config("b", "2"), AbortTransactionRecord(), config("c", "3")], 4)
    assert recorder.offsets == [4]
    assert dict(loader.image.configs.get(4, "")) == {"c": "3"}
    loader.handle_commit(5, 1, [BeginTransactionRecord(), config("d", "4"),
                                AbortTransactionRecord()], 7)  # fmt: skip
    assert recorder.offsets == [4, 7]
    delta, image = recorder.calls[-1]
    assert delta.changed_configs == {} and image.configs is recorder.calls[0][1].configs


def test_transaction_markers_must_nest() -> None:
    """Begin inside a transaction, or End/Abort outside one, is a bug upstream."""
    loader, _ = loader_with_recorder()
    with pytest.raises(InvariantViolation):
        loader.handle_commit(0, 1, [EndTransactionRecord()], 0)
    loader, _ = loader_with_recorder()
    with pytest.raises(InvariantViolation):
        loader.handle_commit(0, 1, [AbortTransactionRecord()], 0)
    loader, _ = loader_with_recorder()
    with pytest.raises(InvariantViolation):
        loader.handle_commit(0, 1, [BeginTransactionRecord(), BeginTransactionRecord()], 1)


def test_loader_matches_a_single_fold() -> None:
    """Folding a workload batch by batch through the loader equals one big delta."""
    records = workload(7, steps=120)
    loader, recorder = loader_with_recorder()
    offset = 0
    for start in range(0, len(records), 9):
        batch = records[start : start + 9]
        loader.handle_commit(offset, 3, batch, offset + len(batch) - 1)
        offset += len(batch)
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in records:
        delta.replay(record)
    whole = delta.apply(offset - 1, 3)
    assert loader.image == whole
    assert len(recorder.calls) == (len(records) + 8) // 9


def test_an_image_folded_elsewhere_is_adopted_and_published_not_folded_again() -> None:
    """A controller-only node's loader takes the image its controller folded from the same
    batch; the next batch folds on top of it; inside a transaction, or for an image not
    past the last offset, adopting is a bug."""
    loader, recorder = loader_with_recorder()
    loader.handle_commit(0, 1, [config("a", "1")], 0)
    assert loader.can_adopt([config("b", "2")])
    assert not loader.can_adopt([config("b", "2"), BeginTransactionRecord()])
    elsewhere = MetadataDelta(loader.image)
    elsewhere.replay(config("b", "2"))
    adopted = elsewhere.apply(1, 1)
    loader.adopt(adopted)
    assert loader.image is adopted and loader.last_offset == 1
    assert recorder.calls[-1][1] is adopted
    loader.handle_commit(2, 1, [config("c", "3")], 2)
    assert dict(loader.image.configs.get(4, "")) == {"a": "1", "b": "2", "c": "3"}
    with pytest.raises(InvariantViolation):
        loader.adopt(adopted)  # not past offset 2
    loader.handle_commit(3, 1, [BeginTransactionRecord()], 3)
    assert not loader.can_adopt([config("d", "4")])  # inside the open transaction
    later = MetadataDelta(loader.image)
    later.replay(config("d", "4"))
    with pytest.raises(InvariantViolation):
        loader.adopt(later.apply(4, 1))
