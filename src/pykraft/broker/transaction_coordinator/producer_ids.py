"""Producer ids in blocks from the active controller (KIP-730), as Kafka's RPCProducerIdManager.

Theory of operation. A broker hands out producer ids (InitProducerId, for idempotent and
transactional producers alike) from a block of ids the active controller allocated to it
(AllocateProducerIds, recorded in the metadata log as ProducerIdsRecord, so no two brokers
and no two incarnations of a broker ever get the same block). `ProducerIdManager` is the
sans-I/O part: the transaction coordinator core calls it for an id; it answers one, or None
while it has none (the request gets the retriable COORDINATOR_LOAD_IN_PROGRESS, as Kafka
answers "Producer ID block is full. Waiting for next block"). It never does I/O: when it
wants a block it says so (`block_wanted`, and the `on_want` callback), and the shell
(`shell.ProducerIdBlocks`) asks the controller and hands the block in (`block_received`).

- The next block is asked for ahead of need: when the id at 90% of the current block is
  handed out (Kafka's PID_PREFETCH_THRESHOLD), or as soon as the current block runs out
  without a next one. At most one request is wanted or in flight at a time.
- A block that does not lie wholly after the ids already handed out is refused (Kafka:
  "not monotonic"); so is an empty one. The shell then asks again after a backoff.
- The ids of a block are never handed out twice: a block is used from its first id on, and
  a restarted broker gets a fresh block (the unused rest of the old one is lost, as in
  Kafka).

The shell also asks for the first block when the broker starts (Kafka asks at the first
InitProducerId), so that the first producer does not have to retry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from pykraft.controller.producer_ids import ProducerIdsBlock

__all__ = ["PREFETCH_THRESHOLD", "ProducerIdManager"]

log = logging.getLogger(__name__)

PREFETCH_THRESHOLD: Final = 0.90


@dataclass(slots=True)
class _Block:
    next_id: int
    last_id: int
    prefetch_at: int  # handing out this id asks for the next block


class ProducerIdManager:
    """Hands out producer ids from blocks it is given; see the module docstring."""

    def __init__(self, on_want: Callable[[], None] = lambda: None) -> None:
        self.on_want = on_want
        self._current: _Block | None = None
        self._next: ProducerIdsBlock | None = None
        self._wanted = False  # a block is wanted, or asked for and not yet answered
        self._last_handed_out = -1

    @property
    def block_wanted(self) -> bool:
        return self._wanted

    def want_block(self) -> None:
        """Ask for a block unless one is already coming (or waiting to be used)."""
        if self._wanted or self._next is not None:
            return
        self._wanted = True
        self.on_want()

    def __call__(self) -> int | None:
        """The next producer id, or None while no block holds one."""
        current = self._current
        if current is None or current.next_id > current.last_id:
            if self._next is None:
                self.want_block()
                return None
            block, self._next = self._next, None
            current = self._current = _Block(
                block.first_producer_id, block.last_producer_id,
                block.first_producer_id + int(block.size * PREFETCH_THRESHOLD))
        producer_id = current.next_id
        current.next_id += 1
        self._last_handed_out = producer_id
        if producer_id == current.prefetch_at:
            self.want_block()
        return producer_id

    def block_received(self, block: ProducerIdsBlock) -> bool:
        """The controller's answer to the wanted request; False (the block is ignored and
        still wanted) when it is empty or not after every id this broker has seen."""
        self._wanted = False
        newest = self._last_handed_out
        if self._current is not None:
            newest = max(newest, self._current.last_id)
        if block.size <= 0 or block.first_producer_id < 0 or block.first_producer_id <= newest:
            log.error("ignoring producer id block %s: not after the ids of the last block "
                      "(%d)", block, newest)
            self.want_block()
            return False
        self._next = block
        return True

