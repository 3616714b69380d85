"""The fault kinds of the campaign (the nemesis): each picks its victims from the cluster's
state and the round's random generator, breaks something in `start` and repairs it in
`stop`. `stop` repairs only what its `start` broke; the campaign then heals everything
anyway (`repair_all`), so a fault that failed half-way leaves nothing behind.

Victims are chosen for damage, as Jepsen does: the leader of the workload's partitions, the
active controller, a minority that mixes controllers and brokers. Node ids follow
`ChaosCluster`: 1..3 are `broker,controller`, the rest brokers.

- partition-leader: the broker leading most of the workload's partitions is cut off from
  every other node (clients still reach it).
- partition-halves: a random minority of nodes is cut off from the majority, both ways.
- partition-controller: the active controller and one broker are cut off from the rest.
- bridge: two halves that only one node in the middle reaches both of (Jepsen's bridge).
- one-way: one node's packets to every other node are dropped; what it receives arrives.
- flaky: two nodes lose 20% of their packets both ways, on a 2 Mbit/s link.
- pause: SIGSTOP of the workload's busiest leader, longer than the broker session timeout.
- pause-controller: SIGSTOP of the active controller.
- kill: kill -9 of the busiest leader and one other node; restarted at stop.
- kill-all: kill -9 of every node at once; all restarted at stop.
- disk-full: the busiest leader's log dir fills up.
- disk-eio: the log dir of a broker-only node (the busiest leader among them) returns EIO
  to every operation, through the harness's FUSE layer; healed at stop.
- clock: two nodes' wall clocks jump by minutes, one forward, one back.
- crash-isr: a follower is cut off until it leaves the ISR, then every other replica of the
  partition is killed and the follower comes back. With clean elections the partition
  waits for its ISR; with unclean ones it loses acknowledged writes.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["FAULT_KINDS", "Fault", "FaultContext", "make_fault", "repair_all"]


class Cluster(Protocol):
    """What the faults use of `ChaosCluster` (cluster.py)."""

    nodes: dict[int, Any]

    def active_controller(self) -> int: ...
    def partition_leaders(self, topic: str) -> dict[int, int]: ...
    def partition_isr(self, topic: str) -> dict[int, list[int]]: ...
    def kill(self, node_id: int) -> None: ...
    def restart(self, node_id: int) -> None: ...
    def pause(self, node_id: int) -> None: ...
    def resume(self, node_id: int) -> None: ...
    def partition(self, groups: list[set[int]]) -> None: ...
    def drop(self, src: int, dst: int) -> None: ...
    def flaky(self, node_id: int, loss_percent: int, rate_kbit: int | None) -> None: ...
    def heal(self) -> None: ...
    def fill_disk(self, node_id: int) -> None: ...
    def free_disk(self, node_id: int) -> None: ...
    def fail_disk(self, node_id: int, mode: str = "all") -> None: ...
    def heal_disk(self, node_id: int) -> None: ...
    def clock_jump(self, node_id: int, seconds: float) -> None: ...


@dataclass
class FaultContext:
    cluster: Cluster
    rng: random.Random
    topics: list[str]  # the workload's topics: leaders are picked among their partitions
    replica_lag_s: float = 5.0  # the campaign's replica.lag.time.max.ms, in seconds
    session_s: float = 6.0  # the campaign's broker.session.timeout.ms, in seconds


@dataclass
class Fault:
    kind: str
    detail: dict[str, Any] = field(default_factory=dict)
    _undo: list[Callable[[], None]] = field(default_factory=list)

    def start(self, ctx: FaultContext) -> dict[str, Any]:
        _STARTS[self.kind](self, ctx)
        return self.detail

    def stop(self) -> None:
        """Undo in reverse order; every step runs even if an earlier one failed."""
        errors: list[BaseException] = []
        while self._undo:
            try:
                self._undo.pop()()
            except Exception as error:  # noqa: BLE001 - the rest still has to be undone
                errors.append(error)
        if errors:
            raise errors[0]


def make_fault(kind: str) -> Fault:
    if kind not in _STARTS:
        raise ValueError(f"unknown fault kind {kind!r}; the kinds: {', '.join(FAULT_KINDS)}")
    return Fault(kind)


def repair_all(cluster: Cluster) -> None:
    """Every fault gone: network healed, paused nodes resumed, disks freed, clocks reset,
    dead nodes restarted."""
    cluster.heal()
    for node_id, node in sorted(cluster.nodes.items()):
        if getattr(node, "paused", False):
            cluster.resume(node_id)
        if getattr(node, "disk_failing", False):
            cluster.heal_disk(node_id)  # before a restart: a node cannot start on EIO
        cluster.free_disk(node_id)
        if getattr(node, "clock_offset_s", 0):
            cluster.clock_jump(node_id, 0)
        if not node.running:
            cluster.restart(node_id)


# -- victims --------------------------------------------------------------------------------


def _busiest_leader(ctx: FaultContext) -> int:
    """The broker leading most of the workload's partitions (random among live brokers if
    none is known, e.g. when metadata is unreachable)."""
    counts: Counter[int] = Counter()
    for topic in ctx.topics:
        try:
            leaders = ctx.cluster.partition_leaders(topic)
        except Exception:  # noqa: BLE001 - a fault picks a victim even when metadata fails
            continue
        counts.update(leader for leader in leaders.values() if leader >= 0)
    if counts:
        top = max(counts.values())
        return ctx.rng.choice(sorted(node for node, count in counts.items() if count == top))
    return ctx.rng.choice(_brokers(ctx))


def _brokers(ctx: FaultContext) -> list[int]:
    return sorted(i for i, node in ctx.cluster.nodes.items() if "broker" in node.roles)


def _all(ctx: FaultContext) -> list[int]:
    return sorted(ctx.cluster.nodes)


def _controller(ctx: FaultContext) -> int:
    try:
        return ctx.cluster.active_controller()
    except Exception:  # noqa: BLE001 - no quorum answer: any controller
        return ctx.rng.choice(sorted(i for i, node in ctx.cluster.nodes.items()
                                     if "controller" in node.roles))


# -- the kinds ------------------------------------------------------------------------------


def _split(fault: Fault, ctx: FaultContext, minority: set[int]) -> None:
    majority = set(_all(ctx)) - minority
    ctx.cluster.partition([minority, majority])
    fault.detail.update(minority=sorted(minority), majority=sorted(majority))
    fault._undo.append(ctx.cluster.heal)


def _partition_leader(fault: Fault, ctx: FaultContext) -> None:
    _split(fault, ctx, {_busiest_leader(ctx)})


def _partition_halves(fault: Fault, ctx: FaultContext) -> None:
    nodes = _all(ctx)
    size = ctx.rng.randint(1, (len(nodes) - 1) // 2)
    _split(fault, ctx, set(ctx.rng.sample(nodes, size)))


def _partition_controller(fault: Fault, ctx: FaultContext) -> None:
    controller = _controller(ctx)
    others = [b for b in _brokers(ctx) if b != controller]
    _split(fault, ctx, {controller, ctx.rng.choice(others)})


def _bridge(fault: Fault, ctx: FaultContext) -> None:
    """Two halves, and one node in the middle that both reach: every link between the
    halves is cut, the bridge's links are not."""
    nodes = _all(ctx)
    ctx.rng.shuffle(nodes)
    middle = nodes[0]
    left, right = nodes[1:1 + (len(nodes) - 1) // 2], nodes[1 + (len(nodes) - 1) // 2:]
    for a in left:
        for b in right:
            ctx.cluster.drop(a, b)
            ctx.cluster.drop(b, a)
    fault.detail.update(bridge=middle, left=sorted(left), right=sorted(right))
    fault._undo.append(ctx.cluster.heal)


def _one_way(fault: Fault, ctx: FaultContext) -> None:
    victim = _busiest_leader(ctx) if ctx.rng.random() < 0.5 else _controller(ctx)
    for other in _all(ctx):
        if other != victim:
            ctx.cluster.drop(victim, other)
    fault.detail.update(mute=victim)
    fault._undo.append(ctx.cluster.heal)


def _flaky(fault: Fault, ctx: FaultContext) -> None:
    victims = sorted(ctx.rng.sample(_all(ctx), 2))
    for victim in victims:
        ctx.cluster.flaky(victim, 20, 2_000)
    fault.detail.update(nodes=victims, loss_percent=20, rate_kbit=2_000)
    fault._undo.append(ctx.cluster.heal)


def _pause_node(fault: Fault, ctx: FaultContext, victim: int) -> None:
    ctx.cluster.pause(victim)
    fault.detail.update(paused=victim)
    fault._undo.append(lambda: ctx.cluster.resume(victim))


def _pause(fault: Fault, ctx: FaultContext) -> None:
    _pause_node(fault, ctx, _busiest_leader(ctx))


def _pause_controller(fault: Fault, ctx: FaultContext) -> None:
    _pause_node(fault, ctx, _controller(ctx))


def _kill_nodes(fault: Fault, ctx: FaultContext, victims: list[int]) -> None:
    for victim in victims:
        ctx.cluster.kill(victim)
        fault._undo.append(lambda victim=victim: ctx.cluster.restart(victim))  # type: ignore[misc]
    fault.detail.update(killed=sorted(victims))


def _kill(fault: Fault, ctx: FaultContext) -> None:
    leader = _busiest_leader(ctx)
    other = ctx.rng.choice([node for node in _all(ctx) if node != leader])
    _kill_nodes(fault, ctx, [leader, other])


def _kill_all(fault: Fault, ctx: FaultContext) -> None:
    _kill_nodes(fault, ctx, _all(ctx))


def _disk_full(fault: Fault, ctx: FaultContext) -> None:
    victim = _busiest_leader(ctx)
    ctx.cluster.fill_disk(victim)
    fault.detail.update(full=victim)
    fault._undo.append(lambda: ctx.cluster.free_disk(victim))


def _disk_eio(fault: Fault, ctx: FaultContext) -> None:
    capable = sorted(getattr(ctx.cluster, "eio_nodes", ()))
    if not capable:
        raise ValueError("disk-eio needs nodes on the harness's EIO filesystem (eio_nodes)")
    counts: Counter[int] = Counter()
    for topic in ctx.topics:
        try:
            counts.update(ctx.cluster.partition_leaders(topic).values())
        except Exception:  # noqa: BLE001 - a victim is picked even when metadata fails
            continue
    victim = max(capable, key=lambda node: (counts[node], ctx.rng.random()))
    ctx.cluster.fail_disk(victim)
    fault.detail.update(eio=victim)
    fault._undo.append(lambda: ctx.cluster.heal_disk(victim))


def _clock(fault: Fault, ctx: FaultContext) -> None:
    victims = sorted(ctx.rng.sample(_all(ctx), 2))
    jumps = {victims[0]: ctx.rng.uniform(60, 600), victims[1]: -ctx.rng.uniform(60, 600)}
    for victim, seconds in jumps.items():
        ctx.cluster.clock_jump(victim, seconds)
        fault._undo.append(lambda victim=victim: ctx.cluster.clock_jump(victim, 0))  # type: ignore[misc]
    fault.detail.update(jumps={str(k): round(v, 1) for k, v in jumps.items()})


def _crash_isr(fault: Fault, ctx: FaultContext) -> None:
    """Make a replica fall out of the ISR, then take away every replica still in it: only an
    unclean election can give the partition a leader before they return."""
    topic = ctx.topics[0]
    isr = ctx.cluster.partition_isr(topic)
    leaders = ctx.cluster.partition_leaders(topic)
    controllers = {i for i, node in ctx.cluster.nodes.items() if "controller" in node.roles}
    # (partition, follower) pairs whose other replicas hold at most one controller, so the
    # kill leaves the controllers a quorum that can elect (or not) a new leader
    choices = [(p, m) for p, members in sorted(isr.items()) if len(members) > 1
               for m in members if m != leaders.get(p)
               if len(controllers & (set(members) - {m})) <= 1]
    if not choices:
        choices = [(p, m) for p, members in sorted(isr.items()) if len(members) > 1
                   for m in members if m != leaders.get(p)]
    partition, follower = ctx.rng.choice(choices)
    members = isr[partition]
    ctx.cluster.partition([{follower}, set(_all(ctx)) - {follower}])
    fault._undo.append(ctx.cluster.heal)
    deadline = time.monotonic() + ctx.replica_lag_s * 3 + 10
    while time.monotonic() < deadline:  # bounded: until the leader shrinks the ISR
        time.sleep(0.5)
        try:
            if follower not in ctx.cluster.partition_isr(topic).get(partition, [follower]):
                break
        except Exception:  # noqa: BLE001 - metadata may be briefly unreachable; keep waiting
            continue
    others = [m for m in members if m != follower]
    _kill_nodes(fault, ctx, others)
    ctx.cluster.heal()
    fault.detail.update(topic=topic, partition=partition, out_of_sync=follower)


_STARTS: dict[str, Callable[[Fault, FaultContext], None]] = {
    "partition-leader": _partition_leader,
    "partition-halves": _partition_halves,
    "partition-controller": _partition_controller,
    "bridge": _bridge,
    "one-way": _one_way,
    "flaky": _flaky,
    "pause": _pause,
    "pause-controller": _pause_controller,
    "kill": _kill,
    "kill-all": _kill_all,
    "disk-full": _disk_full,
    "disk-eio": _disk_eio,
    "clock": _clock,
    "crash-isr": _crash_isr,
}
FAULT_KINDS: tuple[str, ...] = tuple(_STARTS)
