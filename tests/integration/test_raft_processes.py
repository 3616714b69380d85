"""Three Raft voters as separate processes on loopback, the leader killed with SIGKILL again
and again while it proposes: each time another voter leads and commits within a bounded
time, no committed record is lost or changed, and every node applies the same log.

Failover figures (kill -9 to the first commit of the next leader) are printed; run more
trials with RAFT_KILL_TRIALS=20 and the default timeouts with RAFT_KILL_DEFAULTS=1."""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = "UHJvY2Vzc0tpbGxUZXN0MDA"


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


class Voter:
    """One voter process (and its successors after restarts); events of all of them."""

    def __init__(self, node_id: int, port: int, voters: str, log_dir: Path,
                 timeouts: list[str]) -> None:
        self.node_id = node_id
        self.command = [
            sys.executable, "-m", "tests.integration.raft_process", "--node-id", str(node_id),
            "--port", str(port), "--voters", voters, "--log-dir", str(log_dir),
            "--cluster-id", CLUSTER, *timeouts,
        ]
        self.log_dir = log_dir
        self.events: list[list[dict[str, Any]]] = []  # per incarnation
        self.lock = threading.Lock()
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.log_dir.parent.mkdir(parents=True, exist_ok=True)
        stderr = open(self.log_dir.parent / f"node-{self.node_id}.stderr", "a")  # noqa: SIM115
        self.process = subprocess.Popen(self.command, cwd=ROOT, stdout=subprocess.PIPE,
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

    def committed_after(self, since: float) -> dict[str, Any] | None:
        with self.lock:
            for event in self.events[-1]:
                if event["event"] == "committed" and event["time"] > since:
                    return event
        return None

    def all_events(self) -> list[list[dict[str, Any]]]:
        with self.lock:
            return [list(events) for events in self.events]


def wait_for(predicate: Any, what: str, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def latest_leader(voters: list[Voter], since: float) -> tuple[Voter, dict[str, Any]] | None:
    found = [(voter, voter.committed_after(since)) for voter in voters]
    found = [(voter, event) for voter, event in found if event is not None]
    if not found:
        return None
    return max(found, key=lambda pair: (pair[1]["epoch"], pair[1]["time"]))


@pytest.mark.slow
def test_kill_9_the_leader_again_and_again(tmp_path: Path) -> None:
    trials = int(os.environ.get("RAFT_KILL_TRIALS", "5"))
    if os.environ.get("RAFT_KILL_DEFAULTS"):
        timeouts: list[str] = []
        election_ms, fetch_ms = 1000, 2000
    else:
        election_ms, fetch_ms = 150, 400
        timeouts = ["--election-timeout-ms", str(election_ms), "--fetch-timeout-ms",
                    str(fetch_ms), "--request-timeout-ms", "300"]
    ports = free_ports(3)
    spec = ",".join(f"{i + 1}@127.0.0.1:{port}" for i, port in enumerate(ports))
    voters = [Voter(i + 1, port, spec, tmp_path / f"node-{i + 1}" / "__cluster_metadata-0",
                    timeouts) for i, port in enumerate(ports)]
    for voter in voters:
        voter.start()
    failovers: list[float] = []
    try:
        since = 0.0
        for _ in range(trials):
            leader, event = wait_for(lambda since=since: latest_leader(voters, since),
                                     "a committing leader", 30)
            wait_for(lambda leader=leader: leader.committed_after(time.time() - 0.01) or
                     None, "the leader to go on committing", 10)
            killed_at = time.time()
            leader.signal(signal.SIGKILL)
            others = [voter for voter in voters if voter is not leader]
            successor, first = wait_for(
                lambda killed_at=killed_at, others=others: latest_leader(others, killed_at),
                "a new leader to commit", 30)
            assert first["epoch"] > event["epoch"]
            failovers.append(first["time"] - killed_at)
            leader.start()
            since = first["time"]
    finally:
        for voter in voters:
            if voter.process is not None and voter.process.poll() is None:
                voter.signal(signal.SIGTERM)
    check_logs(voters)
    print(f"\nfailover after kill -9 (election {election_ms} ms, fetch {fetch_ms} ms), "
          f"{len(failovers)} trials: median {statistics.median(failovers) * 1000:.0f} ms, "
          f"max {max(failovers) * 1000:.0f} ms")
    # detection (fetch timeout) plus a few election rounds (a split vote costs one), with
    # slack for a loaded machine
    assert max(failovers) < (fetch_ms + 4 * election_ms) / 1000 + 2.0


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
            assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
            for offset, value in applied:
                assert log.setdefault(offset, value) == value, f"offset {offset} differs"
            for e in events:
                if e["event"] == "committed":
                    committed[e["offset"]] = e["value"]
        finals.append([e["offset"] for e in incarnations[-1] if e["event"] == "applied"])
    for offset, value in committed.items():
        assert log.get(offset) == value, f"committed {value} at {offset} was lost"
    shortest = min(len(final) for final in finals)
    assert len({tuple(final[:shortest]) for final in finals}) == 1
