"""A tiny stand-in for the controller's shell: propose, commit, and a ready-made cluster."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from typing import Any, TypeVar

from pykraft.controller.config import ControllerConfig
from pykraft.controller.quorum_controller import QuorumController
from pykraft.controller.requests import BrokerFeatureRange, CreatableTopic, Listener, OpResult
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.records import MetadataRecord

T = TypeVar("T")
LEADER_EPOCH = 1


def incarnation(broker_id: int, generation: int = 0) -> uuid.UUID:
    return uuid.UUID(int=(generation << 32) + 1000 + broker_id)


def log_dir(broker_id: int) -> uuid.UUID:
    return uuid.UUID(int=(7 << 96) + broker_id)


class Harness:
    """One active controller plus the committed log it wrote."""

    def __init__(
        self,
        *,
        seed: int = 1,
        metadata_version: int = 21,
        **config: Any,
    ) -> None:
        self.config = ControllerConfig(node_id=3000, **config)
        self.controller = QuorumController(self.config, random.Random(seed))
        self.controller.activate(leader_epoch=LEADER_EPOCH, next_write_offset=0, now_ms=0)
        self.log: list[MetadataRecord] = []
        self.epochs: dict[int, int] = {}
        self.records: tuple[MetadataRecord, ...] = ()  # of the last heartbeat
        self.run(self.controller.bootstrap(metadata_version))

    def run(self, result: OpResult[T]) -> T:
        """Append and commit the operation's records, as the shell would."""
        if result.records:
            last = self.controller.propose(result.records)
            base = last - len(result.records) + 1
            self.controller.handle_commit(result.records, base_offset=base, epoch=LEADER_EPOCH)
            self.log.extend(result.records)
        return result.response

    def register(
        self, broker_id: int, *, rack: str | None = None, generation: int = 0, now_ms: int = 0
    ) -> int:
        result = self.controller.register_broker(
            broker_id,
            incarnation(broker_id, generation),
            [Listener("PLAINTEXT", "localhost", 9092 + broker_id, 0)],
            [BrokerFeatureRange("metadata.version", 1, 22)],
            rack,
            now_ms,
            log_dirs=[log_dir(broker_id)],
        )
        self.epochs[broker_id] = self.run(result).broker_epoch
        return self.epochs[broker_id]

    def heartbeat(
        self,
        broker_id: int,
        now_ms: int,
        *,
        want_fence: bool = False,
        want_shutdown: bool = False,
        offset: int | None = None,
    ) -> Any:
        result = self.controller.broker_heartbeat(
            broker_id,
            self.epochs[broker_id],
            self.controller.image.offset if offset is None else offset,
            want_fence,
            want_shutdown,
            now_ms,
        )
        self.records = result.records
        return self.run(result)

    def start_brokers(self, count: int, *, racks: Sequence[str | None] | None = None) -> None:
        for broker_id in range(count):
            self.register(broker_id, rack=None if racks is None else racks[broker_id])
        for broker_id in range(count):
            assert not self.heartbeat(broker_id, 0).is_fenced

    def create(self, name: str, partitions: int = 3, replication_factor: int = 2, **kw: Any) -> Any:
        result = self.controller.create_topics(
            [CreatableTopic(name, partitions, replication_factor, **kw)],
            validate_only=False,
            now_ms=0,
        )
        (response,) = self.run(result)
        return response

    def replayed_image(self) -> MetadataImage:
        """The image a broker gets by folding the committed log from scratch."""
        delta = MetadataDelta(MetadataImage.EMPTY)
        for record in self.log:
            delta.replay(record)
        return delta.apply(len(self.log) - 1, LEADER_EPOCH)
