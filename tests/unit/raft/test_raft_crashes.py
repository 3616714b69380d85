"""Seeded crash runs: whatever the crash points, committed entries are never lost or changed,
epochs only grow, and every run delivers one contiguous, identical prefix of the log."""

from __future__ import annotations

import random

import pytest

from pykraft.raft.core import CommittedBatch, RaftConfig
from pykraft.raft.log_store import MemoryLogStore
from pykraft.raft.state import Leader, QuorumStateData
from tests.unit.raft.raft_shell import Shell


def run_one_life(shell: Shell, rng: random.Random, steps: int) -> None:
    """Random proposals, time and (un)flushed steps, until the crash at the end."""
    for _ in range(steps):
        action = rng.random()
        if action < 0.4 and isinstance(shell.core.state, Leader):
            count = rng.randint(1, 4)
            shell.core.propose(
                [rng.randbytes(rng.randint(0, 40)) for _ in range(count)], shell.now_ms
            )
        elif action < 0.6:
            shell.advance_time(rng.randint(0, 40))
        else:
            shell.step(flush=rng.random() < 0.7)


@pytest.mark.parametrize("seed", range(60))
def test_committed_entries_survive_any_crash(seed: int) -> None:
    rng = random.Random(seed)
    store = MemoryLogStore()
    persisted = QuorumStateData()
    committed: dict[int, bytes] = {}  # offset -> value, everything any life delivered
    last_led_epoch = 0
    now_ms = 0
    for _life in range(rng.randint(2, 6)):
        shell = Shell(
            store=store,
            persisted=persisted,
            now_ms=now_ms,
            config=RaftConfig(append_linger_ms=rng.choice([0, 10, 30])),
        )
        assert shell.core.state.epoch == persisted.leader_epoch + 1  # never an epoch it used
        run_one_life(shell, rng, rng.randint(0, 80))
        if isinstance(shell.core.state, Leader):
            assert shell.core.state.epoch > last_led_epoch
            last_led_epoch = shell.core.state.epoch
        delivered = shell.delivered
        expected_offset = 0
        for batch in delivered:
            assert batch.base_offset == expected_offset
            expected_offset = batch.last_offset + 1
        for offset, value in shell.data_records():
            assert committed.setdefault(offset, value) == value, f"offset {offset} changed"
        hw = shell.core.high_watermark
        assert hw is None or hw <= store.flushed_offset
        store.crash()
        for offset in committed:
            assert offset < store.log_end_offset, f"committed offset {offset} lost"
        persisted, now_ms = shell.persisted, shell.now_ms + 1

    final = Shell(store=store, persisted=persisted, now_ms=now_ms)
    final.settle()
    replay = {offset: value for offset, value in final.data_records()}
    assert {offset: replay[offset] for offset in committed} == committed
    assert all(isinstance(batch, CommittedBatch) for batch in final.delivered)
