"""PartitionEvents: the partitions named in one turn of the loop make one INFO line, with
the first few and their details; each is logged at DEBUG; outside a loop, at once."""

from __future__ import annotations

import asyncio
import logging

import pytest

from pykraft.broker.partition_events import PartitionEvents

LOGGER = "pykraft.test.partition_events"


async def test_one_line_per_turn_naming_the_first_few(caplog: pytest.LogCaptureFixture) -> None:
    events = PartitionEvents(logging.getLogger(LOGGER), "ISR now")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for index in range(5):
            events.add(f"t-{index}", f"[1, 2] (partition epoch {index})")
        assert caplog.messages == []  # told at the end of the turn
        await asyncio.sleep(0)
        events.add("u-0")
        await asyncio.sleep(0)
    assert caplog.messages == [
        "ISR now: 5 partition(s): t-0 [1, 2] (partition epoch 0), "
        "t-1 [1, 2] (partition epoch 1), t-2 [1, 2] (partition epoch 2), ...",
        "ISR now: 1 partition(s): u-0",
    ]


async def test_each_partition_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    events = PartitionEvents(logging.getLogger(LOGGER), "AlterPartition refused")
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        for index in range(4):
            events.add(f"t-{index}", "error 3")
        await asyncio.sleep(0)
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert debug == [f"AlterPartition refused: t-{index} error 3" for index in range(4)]


def test_outside_a_loop_it_is_told_at_once(caplog: pytest.LogCaptureFixture) -> None:
    events = PartitionEvents(logging.getLogger(LOGGER), "diverged")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        events.add("t-0", "from 5 to 3")
    assert caplog.messages == ["diverged: 1 partition(s): t-0 from 5 to 3"]
