"""The broker-local producer id source: unique per broker, never repeated across restarts."""

from __future__ import annotations

from pathlib import Path

from pykraft.broker.transaction_coordinator.producer_ids import (
    BLOCK_SIZE,
    FILE_NAME,
    LocalProducerIdSource,
)


def test_ids_are_consecutive_from_the_node_base(tmp_path: Path) -> None:
    source = LocalProducerIdSource(3, tmp_path)
    assert [source() for _ in range(3)] == [3 << 40, (3 << 40) + 1, (3 << 40) + 2]
    assert (tmp_path / FILE_NAME).read_text() == f"{(3 << 40) + BLOCK_SIZE}\n"


def test_a_restart_never_repeats_an_id(tmp_path: Path) -> None:
    first = LocalProducerIdSource(1, tmp_path)
    handed = {first() for _ in range(BLOCK_SIZE + 5)}  # into the second block
    again = LocalProducerIdSource(1, tmp_path)  # a crash: the rest of the block is lost
    later = {again() for _ in range(10)}
    assert not handed & later
    assert min(later) == (1 << 40) + 2 * BLOCK_SIZE


def test_brokers_never_share_ids(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one, two = LocalProducerIdSource(1, tmp_path / "a"), LocalProducerIdSource(2, tmp_path / "b")
    assert not {one() for _ in range(50)} & {two() for _ in range(50)}
    zero = LocalProducerIdSource(0, tmp_path)
    assert zero() == 0
