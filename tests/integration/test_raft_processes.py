"""Three Raft voters as separate processes on loopback, the leader killed with SIGKILL again
and again while it proposes: each time another voter leads and commits within a bounded
time, no committed record is lost or changed, and every node applies the same log.

Failover figures (kill -9 to the first commit of the next leader) are printed; run more
trials with RAFT_KILL_TRIALS=20 and the default timeouts with RAFT_KILL_DEFAULTS=1."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest

from pykraft.testing.raft_processes import check_logs, kill_leader_trials, start_voters

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_kill_9_the_leader_again_and_again(tmp_path: Path) -> None:
    trials = int(os.environ.get("RAFT_KILL_TRIALS", "5"))
    if os.environ.get("RAFT_KILL_DEFAULTS"):
        options: list[str] = []
        election_ms, fetch_ms = 1000, 2000
    else:
        election_ms, fetch_ms = 150, 400
        options = ["--election-timeout-ms", str(election_ms), "--election-backoff-max-ms",
                   str(election_ms), "--fetch-timeout-ms", str(fetch_ms),
                   "--request-timeout-ms", "300"]
    voters = start_voters(tmp_path, options, cwd=ROOT)
    try:
        failovers = kill_leader_trials(voters, trials, settle=True)
    finally:
        for voter in voters:
            voter.stop()
    check_logs(voters)
    median = statistics.median(failovers)
    print(f"\nfailover after kill -9 (election {election_ms} ms, fetch {fetch_ms} ms), "
          f"{len(failovers)} trials: median {median * 1000:.0f} ms, "
          f"max {max(failovers) * 1000:.0f} ms")
    # the followers learn of the dead leader from its refused connections, not by waiting out
    # fetch.timeout.ms: most failovers are well below it
    assert median < fetch_ms / 1000
    # a split vote costs a few election rounds, with slack for a loaded machine
    assert max(failovers) < (fetch_ms + 4 * election_ms) / 1000 + 2.0
