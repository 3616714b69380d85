"""A synchronous shell for RaftCore over a MemoryLogStore: the driver's steps, no asyncio."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pykraft.raft.core import CommittedBatch, RaftConfig, RaftCore, Ready
from pykraft.raft.log_store import MemoryLogStore
from pykraft.raft.state import LeaderAndEpoch, QuorumStateData

NODE_ID = 1


@dataclass
class Shell:
    store: MemoryLogStore = field(default_factory=MemoryLogStore)
    persisted: QuorumStateData = field(default_factory=QuorumStateData)
    now_ms: int = 1_000
    config: RaftConfig = field(default_factory=lambda: RaftConfig(append_linger_ms=25))
    events: list[CommittedBatch | LeaderAndEpoch] = field(default_factory=list)
    persist_count: int = 0
    idle: bool = False

    def __post_init__(self) -> None:
        self.core = self.start()

    def start(self) -> RaftCore:
        """(Re)start the core over what is durable, as the driver does after a crash."""
        self.core = RaftCore(
            NODE_ID,
            frozenset({NODE_ID}),
            self.store,
            self.persisted,
            random.Random(7),
            self.now_ms,
            config=self.config,
        )
        return self.core

    def step(self, *, flush: bool = True) -> Ready:
        """One turn of the driver loop; with flush=False the appends stay unflushed."""
        self.core.tick(self.now_ms)
        ready = self.core.ready()
        if ready.quorum_state is not None:
            self.persisted = ready.quorum_state
            self.persist_count += 1
        for batch in ready.batches:
            self.store.append(batch)
        flushing = flush and self.store.flushed_offset < self.store.log_end_offset
        if flushing:
            self.store.flush()
        self.events.extend(ready.committed)
        if ready.leader_change is not None:
            self.events.append(ready.leader_change)
        self.core.advance(ready)
        self.core.flushed(self.store.flushed_offset)  # unmoved when flush=False
        self.idle = not ready.has_work and not flushing
        return ready

    def settle(self, steps_max: int = 100) -> None:
        """Step until the core has nothing to do right now."""
        for _ in range(steps_max):
            self.step()
            if self.idle:
                return
        raise AssertionError(f"still busy after {steps_max} steps")

    def advance_time(self, delta_ms: int) -> None:
        self.now_ms += delta_ms

    @property
    def delivered(self) -> list[CommittedBatch]:
        return [event for event in self.events if isinstance(event, CommittedBatch)]

    def data_records(self) -> list[tuple[int, bytes]]:
        """(offset, value) of every delivered data record, in delivery order."""
        return [
            (batch.base_offset + index, value)
            for batch in self.delivered
            for index, value in enumerate(batch.records)
        ]


@dataclass
class Recorder:
    events: list[CommittedBatch | LeaderAndEpoch] = field(default_factory=list)
    fail_on: bytes | None = None

    def handle_commit(self, batch: CommittedBatch) -> None:
        if self.fail_on is not None and self.fail_on in batch.records:
            raise RuntimeError("listener failure")
        self.events.append(batch)

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.events.append(LeaderAndEpoch(leader_id, epoch))

    @property
    def values(self) -> list[bytes]:
        return [v for e in self.events if isinstance(e, CommittedBatch) for v in e.records]

    @property
    def batches(self) -> list[CommittedBatch]:
        return [event for event in self.events if isinstance(event, CommittedBatch)]
