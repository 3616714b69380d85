"""The broker's producer-id manager: ids from controller blocks, prefetch at 90%, no id
(None) while no block is there, refusal of blocks that would reuse ids; and its shell."""

from __future__ import annotations

import asyncio

from pykraft.broker.transaction_coordinator.producer_ids import ProducerIdManager
from pykraft.broker.transaction_coordinator.shell import ProducerIdBlocks
from pykraft.controller.producer_ids import ProducerIdsBlock


def test_no_block_no_id_and_one_request() -> None:
    """Without a block there is no id; the block is wanted once, however often asked."""
    wants = []
    manager = ProducerIdManager(on_want=lambda: wants.append(1))
    assert manager() is None and manager() is None
    assert manager.block_wanted and wants == [1]
    assert manager.block_received(ProducerIdsBlock(1, 0, 1000))
    assert not manager.block_wanted
    assert [manager() for _ in range(3)] == [0, 1, 2]


def test_prefetch_at_ninety_percent_and_switch_without_gap() -> None:
    manager = ProducerIdManager()
    manager.want_block()
    manager.block_received(ProducerIdsBlock(1, 5000, 1000))
    ids = [manager() for _ in range(900)]
    assert ids == list(range(5000, 5900)) and not manager.block_wanted
    assert manager() == 5900  # the 90% mark asks for the next block
    assert manager.block_wanted
    manager.block_received(ProducerIdsBlock(1, 9000, 1000))
    rest = [manager() for _ in range(99)]
    assert rest == list(range(5901, 6000))
    assert manager() == 9000  # the next block takes over where the first ends
    assert not manager.block_wanted


def test_exhausted_block_without_next_answers_none_until_one_comes() -> None:
    manager = ProducerIdManager()
    manager.want_block()
    manager.block_received(ProducerIdsBlock(1, 0, 10))
    ids = [manager() for _ in range(10)]
    assert ids == list(range(10)) and manager.block_wanted
    assert manager() is None  # the prefetch has not been answered yet
    manager.block_received(ProducerIdsBlock(1, 30, 10))
    assert manager() == 30


def test_block_that_reuses_ids_is_refused() -> None:
    """A block not wholly after the ids already seen is ignored and asked for again."""
    manager = ProducerIdManager()
    manager.want_block()
    manager.block_received(ProducerIdsBlock(1, 1000, 1000))
    assert manager() == 1000
    manager.want_block()
    assert not manager.block_received(ProducerIdsBlock(1, 1500, 1000))
    assert not manager.block_received(ProducerIdsBlock(1, 3000, 0))
    assert manager.block_wanted
    assert manager.block_received(ProducerIdsBlock(1, 2000, 1000))


class _Controller:
    def __init__(self) -> None:
        self.next_first = 0
        self.calls: list[tuple[int, int]] = []
        self.fail_first = 1

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdsBlock:
        self.calls.append((broker_id, broker_epoch))
        if self.fail_first:
            self.fail_first -= 1
            raise ConnectionError("no controller yet")
        block = ProducerIdsBlock(broker_id, self.next_first, 1000)
        self.next_first += 1000
        return block


async def test_shell_fetches_first_block_at_start_and_retries_failures() -> None:
    manager = ProducerIdManager()
    controller = _Controller()
    blocks = ProducerIdBlocks(manager, controller, 4, lambda: 77)
    task = asyncio.create_task(blocks.run())
    try:
        for _ in range(200):
            if not manager.block_wanted and controller.calls:
                break
            await asyncio.sleep(0.01)
        assert controller.calls == [(4, 77), (4, 77)]  # one failure, then the block
        ids = [manager() for _ in range(901)]
        assert ids == list(range(901))
        for _ in range(200):
            if not manager.block_wanted:
                break
            await asyncio.sleep(0.01)
        assert len(controller.calls) == 3  # the prefetch
        assert [manager() for _ in range(100)][-1] == 1000  # 901..999, then the next block
    finally:
        task.cancel()
