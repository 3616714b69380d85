"""Checkpoint files and the leader epoch cache: formats, round trips, Kafka's epoch rules."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.errors import KafkaStorageError
from pykraft.storage.checkpoint import (
    kafka_uuid_string,
    parse_kafka_uuid,
    read_offsets_checkpoint,
    read_partition_metadata,
    write_offsets_checkpoint,
    write_partition_metadata,
)
from pykraft.storage.leader_epoch import LeaderEpochCache

_topics = st.text(alphabet="abcxyz._-0123456789", min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.tuples(_topics, st.integers(0, 1000)), st.integers(0, 2**62)))
def test_offsets_checkpoint_round_trip(offsets: dict[tuple[str, int], int]) -> None:
    """Whatever we write, we read back; no temporary file is left behind."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "recovery-point-offset-checkpoint"
        write_offsets_checkpoint(path, offsets)
        assert read_offsets_checkpoint(path) == offsets
        assert [p.name for p in Path(directory).iterdir()] == [path.name]


@pytest.mark.parametrize(
    "text",
    ["1\n0\n", "0\n2\nt 0 1\n", "0\nx\n", "0\n1\nt 0\n", "0\n1\nt zero 1\n", ""],
)
def test_malformed_checkpoint_is_a_storage_error(tmp_path: Path, text: str) -> None:
    """Wrong version, count, field count or number: KafkaStorageError naming the file."""
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(KafkaStorageError, match="cp"):
        read_offsets_checkpoint(path)


def test_kafka_uuid_text_and_partition_metadata(tmp_path: Path) -> None:
    """Kafka prints Uuids as unpadded URL-safe base64 of the 16 bytes."""
    value = uuid.UUID(bytes=bytes(range(16)))
    assert kafka_uuid_string(value) == "AAECAwQFBgcICQoLDA0ODw"
    assert parse_kafka_uuid("AAECAwQFBgcICQoLDA0ODw") == value
    write_partition_metadata(tmp_path, value)
    assert read_partition_metadata(tmp_path) == value
    (tmp_path / "partition.metadata").write_text("version: 1\ntopic_id: x\n")
    with pytest.raises(KafkaStorageError):
        read_partition_metadata(tmp_path)


def test_epoch_cache_follows_kafkas_rules(tmp_path: Path) -> None:
    """assign keeps epochs and offsets increasing; end offsets answer OffsetsForLeaderEpoch."""
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    assert cache.assign(1, 0) and cache.assign(3, 10) and cache.assign(5, 20)
    assert not cache.assign(5, 25)  # same epoch continuing
    # a new epoch is written by the log's next flush (or its close), not at once
    assert not (tmp_path / "leader-epoch-checkpoint").exists()
    cache.sync()
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 10\n5 20\n"
    assert cache.end_offset_for_epoch(5, 30) == (5, 30)
    assert cache.end_offset_for_epoch(3, 30) == (3, 20)
    assert cache.end_offset_for_epoch(4, 30) == (3, 20)  # unknown epoch: the one before it
    assert cache.end_offset_for_epoch(0, 30) == (0, 0)  # older than all known
    assert cache.end_offset_for_epoch(9, 30) == (-1, -1)
    assert cache.end_offset_for_epoch(-1, 30) == (-1, -1)
    assert cache.epoch_for_offset(15) == 3 and cache.epoch_for_offset(-1) is None
    cache.assign(4, 15)  # a new leader rewrote history from 15: epoch 5 is gone
    assert [tuple(entry) for entry in cache.entries] == [(1, 0), (3, 10), (4, 15)]
    cache.truncate_from_end(12)
    assert [tuple(entry) for entry in cache.entries] == [(1, 0), (3, 10)]
    cache.truncate_from_start(5)
    assert [tuple(entry) for entry in cache.entries] == [(1, 5), (3, 10)]
    reloaded = LeaderEpochCache.load(tmp_path / "leader-epoch-checkpoint")
    assert reloaded.entries == cache.entries and reloaded.latest_epoch == 3
    cache.clear()
    assert LeaderEpochCache.load(tmp_path / "leader-epoch-checkpoint").entries == ()
