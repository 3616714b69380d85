"""Raft voters as separate processes on loopback, for kill -9 tests and the failover benchmark.

One voter process (`python -m pykraft.testing.raft_processes --node-id 1 --port 19093
--voters 1@127.0.0.1:19093,2@127.0.0.1:19094,3@127.0.0.1:19095 --log-dir /tmp/n1
--cluster-id C [--election-timeout-ms 150 --fetch-timeout-ms 400 ...]`) is a RaftNode on
disk behind a real controller listener that proposes a record every few milliseconds while
it leads. Its stdout, one JSON object a line, flushed at once:

    {"event": "applied", "offset": o, "epoch": e, "value": "..."}   every committed record
    {"event": "committed", "offset": o, "epoch": e, "value": v, "time": wall,
     "latency_ms": append to commit}                                  ours, committed
    {"event": "leader", "leader": id, "epoch": e, "time": wall}

SIGTERM stops it gracefully (a leader resigns first).

The driver side: `Voter` starts (and restarts) one voter and collects the events of each of
its incarnations; `kill_leader_trials` kills the committing leader with SIGKILL again and
again and returns the failover times (kill -9 to the first commit of the next leader);
`check_logs` then checks that no committed record was lost or changed and that every
incarnation applied the same log. tests/integration/test_raft_processes.py and
benchmarks/raft_quorum.py both use them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from pykraft.testing.ports import free_ports

__all__ = [
    "CLUSTER_ID",
    "Voter",
    "start_voters",
    "free_ports",
    "wait_for",
    "latest_leader",
    "kill_leader_trials",
    "check_logs",
]

CLUSTER_ID = "UHJvY2Vzc0tpbGxUZXN0MDA"
T = TypeVar("T")


# -- the driver side ------------------------------------------------------------------------


class Voter:
    """One voter process (and its successors after restarts); events of all of them."""

    def __init__(self, node_id: int, port: int, voters: str, log_dir: Path,
                 options: list[str], *, cwd: Path | None = None) -> None:
        self.node_id = node_id
        self.command = [
            sys.executable, "-m", "pykraft.testing.raft_processes", "--node-id", str(node_id),
            "--port", str(port), "--voters", voters, "--log-dir", str(log_dir),
            "--cluster-id", CLUSTER_ID, *options,
        ]
        self.log_dir = log_dir
        self.cwd = cwd
        self.events: list[list[dict[str, Any]]] = []  # per incarnation
        self.lock = threading.Lock()
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.log_dir.parent.mkdir(parents=True, exist_ok=True)
        stderr = open(self.log_dir.parent / f"node-{self.node_id}.stderr", "a")  # noqa: SIM115
        self.process = subprocess.Popen(self.command, cwd=self.cwd, stdout=subprocess.PIPE,
                                        stderr=stderr, text=True)
        stderr.close()
        incarnation: list[dict[str, Any]] = []
        with self.lock:
            self.events.append(incarnation)
        threading.Thread(target=self._read, args=(self.process, incarnation),
                         daemon=True).start()

    def _read(self, process: subprocess.Popen[str], into: list[dict[str, Any]]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            with self.lock:
                into.append(json.loads(line))

    def signal(self, number: int) -> None:
        assert self.process is not None
        self.process.send_signal(number)
        self.process.wait(15)

    def stop(self) -> None:
        """SIGTERM if it runs (it resigns and exits)."""
        if self.process is not None and self.process.poll() is None:
            self.signal(signal.SIGTERM)

    def committed_after(self, since: float) -> dict[str, Any] | None:
        """The first record this incarnation committed (as leader) after wall time `since`."""
        with self.lock:
            for event in self.events[-1]:
                if event["event"] == "committed" and event["time"] > since:
                    return event
        return None

    def all_events(self) -> list[list[dict[str, Any]]]:
        with self.lock:
            return [list(events) for events in self.events]


def start_voters(directory: Path, options: list[str], *, count: int = 3,
                 cwd: Path | None = None) -> list[Voter]:
    """`count` voters on free ports, data in directory/node-<id>/__cluster_metadata-0."""
    ports = free_ports(count)
    spec = ",".join(f"{i + 1}@127.0.0.1:{port}" for i, port in enumerate(ports))
    voters = [Voter(i + 1, port, spec, directory / f"node-{i + 1}" / "__cluster_metadata-0",
                    options, cwd=cwd) for i, port in enumerate(ports)]
    for voter in voters:
        voter.start()
    return voters


def wait_for(predicate: Callable[[], T | None], what: str, timeout_s: float) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def latest_leader(voters: list[Voter], since: float) -> tuple[Voter, dict[str, Any]] | None:
    """The voter that committed in the highest epoch after `since`, and that commit."""
    found = [
        (voter, event)
        for voter in voters
        if (event := voter.committed_after(since)) is not None
    ]
    if not found:
        return None
    return max(found, key=lambda pair: (pair[1]["epoch"], pair[1]["time"]))


def kill_leader_trials(
    voters: list[Voter],
    trials: int,
    *,
    settle: bool = False,
    on_trial: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Kill the committing leader with SIGKILL `trials` times; the seconds from each kill to
    the first commit of the next leader (of a newer epoch). The killed voter is restarted at
    once. With `settle`, the next kill waits until it follows the new leader, so that each
    trial starts from all voters running (not one still starting up)."""
    failovers: list[float] = []
    since = 0.0
    for _ in range(trials):
        leader, event = wait_for(partial(latest_leader, voters, since), "a committing leader", 30)
        wait_for(partial(_committing, leader), "the leader to go on committing", 10)
        killed_at = time.time()
        leader.signal(signal.SIGKILL)
        others = [voter for voter in voters if voter is not leader]
        successor, first = wait_for(partial(latest_leader, others, killed_at),
                                    "a new leader to commit", 30)
        if first["epoch"] <= event["epoch"]:
            raise AssertionError(f"the next commit is of epoch {first['epoch']}, not newer "
                                 f"than the killed leader's {event['epoch']}")
        failovers.append(first["time"] - killed_at)
        if on_trial is not None:
            on_trial(len(failovers), failovers[-1])
        leader.start()
        if settle:
            wait_for(partial(_follows, leader, successor.node_id, first["epoch"]),
                     "the restarted voter to follow the new leader", 60)
        since = first["time"]
    return failovers


def _committing(voter: Voter) -> dict[str, Any] | None:
    return voter.committed_after(time.time() - 0.01)


def _follows(voter: Voter, leader_id: int, epoch: int) -> bool:
    """The voter's current incarnation has heard of `leader_id` leading `epoch` or later."""
    return any(e["event"] == "leader" and e["leader"] == leader_id and e["epoch"] >= epoch
               for e in voter.all_events()[-1])


def check_logs(voters: list[Voter]) -> None:
    """Every incarnation applied the same value at every offset, every committed proposal
    is in the log, and the last incarnations end with the same log."""
    log: dict[int, str] = {}
    committed: dict[int, str] = {}
    finals = []
    for voter in voters:
        incarnations = voter.all_events()
        for events in incarnations:
            applied = [(e["offset"], e["value"]) for e in events if e["event"] == "applied"]
            offsets = [offset for offset, _ in applied]
            if offsets != sorted(offsets) or len(set(offsets)) != len(offsets):
                raise AssertionError(f"node {voter.node_id} applied offsets out of order")
            for offset, value in applied:
                if log.setdefault(offset, value) != value:
                    raise AssertionError(f"offset {offset} differs between nodes")
            for e in events:
                if e["event"] == "committed":
                    committed[e["offset"]] = e["value"]
        finals.append([e["offset"] for e in incarnations[-1] if e["event"] == "applied"])
    for offset, value in committed.items():
        if log.get(offset) != value:
            raise AssertionError(f"committed {value} at {offset} was lost")
    shortest = min(len(final) for final in finals)
    if len({tuple(final[:shortest]) for final in finals}) != 1:
        raise AssertionError("the nodes' last incarnations applied different logs")


# -- one voter process ----------------------------------------------------------------------


def _emit(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


class _Printer:
    def handle_commit(self, batch: Any) -> None:
        for index, value in enumerate(batch.records):
            _emit(event="applied", offset=batch.base_offset + index, epoch=batch.epoch,
                  value=value.decode())

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        _emit(event="leader", leader=leader_id, epoch=epoch, time=time.time())


async def _propose_while_leading(node: Any, name: str, interval_s: float,
                                 value_bytes: int) -> None:
    from pykraft.errors import KafkaError

    sequence = 0
    padding = "x" * max(0, value_bytes - len(name) - 12)
    while True:
        await asyncio.sleep(interval_s)
        if not node.is_leader:
            continue
        sequence += 1
        value = f"{name}:{sequence}:{padding}"
        started = time.monotonic()
        try:
            offset = node.append([value.encode()])
            await node.wait_committed(offset)
        except KafkaError:
            continue
        _emit(event="committed", offset=offset, epoch=node.leader_and_epoch.epoch, value=value,
              time=time.time(), latency_ms=(time.monotonic() - started) * 1000)


async def _voter_main(args: argparse.Namespace) -> None:
    if args.log_level:
        logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                            format="%(asctime)s %(name)s %(message)s")
    from pykraft.net.server import Listener
    from pykraft.raft.core import RaftConfig
    from pykraft.raft.driver import RaftNode
    from pykraft.raft.network import RaftApis, RaftChannels, RaftDispatcher
    from pykraft.server.config import parse_voters

    voters = parse_voters(args.voters)
    config = RaftConfig(
        append_linger_ms=args.linger_ms,
        election_timeout_ms=args.election_timeout_ms,
        election_backoff_max_ms=args.election_backoff_max_ms,
        fetch_timeout_ms=args.fetch_timeout_ms,
        request_timeout_ms=args.request_timeout_ms,
        fetch_max_wait_ms=min(500, args.request_timeout_ms // 2),
    )
    channels = RaftChannels.for_voters(args.node_id, args.cluster_id, voters, config)
    node = RaftNode.open(node_id=args.node_id, voters=frozenset(voters),
                         log_dir=Path(args.log_dir), listener=_Printer(), config=config,
                         rng=random.Random(), transport=channels)
    listener = Listener("CONTROLLER", "127.0.0.1", args.port,
                        RaftDispatcher(RaftApis(node, args.cluster_id)),
                        request_bytes_max=100 << 20, on_fatal=lambda error: None)
    await listener.start()
    await node.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    proposers = [
        asyncio.create_task(
            _propose_while_leading(node, f"{args.node_id}.{index}", args.interval_s,
                                   args.value_bytes)
        )
        for index in range(args.proposers)
    ]
    await stop.wait()
    for proposer in proposers:
        proposer.cancel()
    await node.stop()
    await listener.close()


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--voters", required=True)
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--cluster-id", required=True)
    parser.add_argument("--election-timeout-ms", type=int, default=1000)
    parser.add_argument("--election-backoff-max-ms", type=int, default=1000)
    parser.add_argument("--fetch-timeout-ms", type=int, default=2000)
    parser.add_argument("--request-timeout-ms", type=int, default=2000)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--interval-s", type=float, default=0.005,
                        help="pause of each proposer between proposals")
    parser.add_argument("--proposers", type=int, default=1,
                        help="concurrent proposers, each waiting for its commit")
    parser.add_argument("--value-bytes", type=int, default=0)
    parser.add_argument("--log-level", help="log to stderr at this level (e.g. debug)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(_voter_main(_parse()))
