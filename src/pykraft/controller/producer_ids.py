"""Producer-id blocks (KIP-730): AllocateProducerIds on the active controller.

Theory of operation. Producer ids are handed out by brokers (InitProducerId), but they are
allocated by the controller, in blocks of `PRODUCER_ID_BLOCK_SIZE`, so that no two brokers
ever hand out the same id. The metadata log holds one number: the first id of the next
block (`ProducerIdsRecord.next_producer_id`, folded into `ProducerIdsImage`). Allocating a
block for a broker writes a ProducerIdsRecord that moves it one block on; the broker gets
[first, first + size) once that record is committed. Since the number only grows and every
controller folds the same log, a block is never given twice, across failovers included: a
block whose record did not commit was never answered to anybody.

As Kafka's ProducerIdControlManager: the broker must be registered with the epoch it
sends (else STALE_BROKER_EPOCH); an empty log's first block starts at 0; the id space ends
at 2^63 - 1 (UNKNOWN_SERVER_ERROR once exhausted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pykraft.controller import cluster
from pykraft.controller.state import ControllerState
from pykraft.errors import KafkaError
from pykraft.metadata.records import ProducerIdsRecord

__all__ = ["PRODUCER_ID_BLOCK_SIZE", "ProducerIdsBlock", "ProducerIdsExhausted",
           "allocate_producer_ids"]

PRODUCER_ID_BLOCK_SIZE: Final = 1000
_LONG_MAX: Final = (1 << 63) - 1


class ProducerIdsExhausted(KafkaError):
    """Every producer id up to 2^63 - 1 has been allocated (UNKNOWN_SERVER_ERROR, as Kafka)."""


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    """The ids [first_producer_id, first_producer_id + size) belong to `assigned_broker_id`."""

    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


def allocate_producer_ids(
    state: ControllerState, broker_id: int, broker_epoch: int
) -> tuple[ProducerIdsRecord, ProducerIdsBlock]:
    """The record that allocates the next block to `broker_id`, and the block; raises
    StaleBrokerEpoch for an unregistered broker or another epoch than its registration's."""
    cluster.check_broker_epoch(state, broker_id, broker_epoch)
    first = max(0, state.image.producer_ids.next_producer_id)
    if first > _LONG_MAX - PRODUCER_ID_BLOCK_SIZE:
        raise ProducerIdsExhausted(
            "Exhausted all producerIds as the next block's end producerId has exceeded the "
            "int64 type limit")
    block = ProducerIdsBlock(broker_id, first, PRODUCER_ID_BLOCK_SIZE)
    record = ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                               next_producer_id=block.next_block_first_id)
    return record, block
