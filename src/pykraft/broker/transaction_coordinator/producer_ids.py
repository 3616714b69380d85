"""A broker-local source of producer ids, until ids come in blocks from the controller.

Kafka's brokers get producer ids in blocks from the active controller (AllocateProducerIds,
recorded as ProducerIdsRecord); that belongs with the idempotent-producer work. Until it is
wired in, this source hands out ids that are unique without the controller: the id space is
split by node id (`node_id << 40`, 2^40 ids per broker) and the end of the block in use is
written (atomically, fsynced) to a file in the broker's first log directory *before* any id
of the block is handed out, so an id is never handed out twice, even across a crash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from pykraft.errors import invariant
from pykraft.storage.checkpoint import write_atomically

__all__ = ["BLOCK_SIZE", "LocalProducerIdSource"]

BLOCK_SIZE: Final = 1000
NODE_BITS: Final = 40
FILE_NAME: Final = "pykraft-producer-id-block"


class LocalProducerIdSource:
    def __init__(self, node_id: int, directory: Path) -> None:
        invariant(0 <= node_id < 1 << 22, f"node id {node_id} out of the producer id space")
        self.path = directory / FILE_NAME
        self.base = node_id << NODE_BITS
        reserved = self.base
        if self.path.exists():
            reserved = max(reserved, int(self.path.read_text().strip() or 0))
        self._next = reserved  # everything below was (possibly) handed out before
        self._reserved = reserved

    def __call__(self) -> int:
        if self._next >= self._reserved:
            self._reserved = self._next + BLOCK_SIZE
            invariant(self._reserved < self.base + (1 << NODE_BITS),
                      "this broker's producer ids are exhausted")
            write_atomically(self.path, f"{self._reserved}\n")
        self._next += 1
        return self._next - 1
