"""How many fuzz cases to run, from which seed, and how to say how to replay one.

CI runs a few thousand cases per layer; `./scripts/test-long` runs the `slow` tests, whose
total comes from PYKRAFT_FUZZ_CASES (default 1,000,000), split across the layers by
`LONG_SHARES`. PYKRAFT_FUZZ_SEED picks the run (default 0); PYKRAFT_FUZZ_FROM skips to a case,
so `PYKRAFT_FUZZ_FROM=<index> PYKRAFT_FUZZ_CASES=1` replays one failure alone (for the live
node and the log, whose state earlier cases shape, the failure also prints the run up to it).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

# the long run's split of PYKRAFT_FUZZ_CASES: most cases in process, where they are cheap
LONG_SHARES: Final = {"decode": 0.60, "batches": 0.20, "live": 0.20}
LONG_TOTAL_DEFAULT: Final = 1_000_000


@dataclass(frozen=True)
class Run:
    layer: str
    seed: int
    first: int
    count: int
    test: str  # the pytest node id, for the replay command
    slow: bool

    @property
    def indexes(self) -> range:
        return range(self.first, self.first + self.count)

    def replay(self, index: int) -> str:
        marker = " -m slow" if self.slow else ""
        command = f".venv/bin/python -m pytest '{self.test}'{marker}"
        line = (f"replay: PYKRAFT_FUZZ_SEED={self.seed} PYKRAFT_FUZZ_FROM={index} "
                f"PYKRAFT_FUZZ_CASES=1 {command}")
        if self.layer in ("live", "batches"):  # the failure may need the state cases left
            line += (f"\nwith the cases before it: PYKRAFT_FUZZ_SEED={self.seed} "
                     f"PYKRAFT_FUZZ_FROM={self.first} "
                     f"PYKRAFT_FUZZ_CASES={index - self.first + 1} {command}")
        return line


def run_for(layer: str, test: str, *, ci_cases: int, slow: bool) -> Run:
    """The cases of this test: `ci_cases` in CI; in the long run the layer's share of
    PYKRAFT_FUZZ_CASES. With PYKRAFT_FUZZ_FROM set, PYKRAFT_FUZZ_CASES counts this test's
    cases from there (a replay), in either run."""
    seed = int(os.environ.get("PYKRAFT_FUZZ_SEED", "0"))
    first = os.environ.get("PYKRAFT_FUZZ_FROM")
    total = os.environ.get("PYKRAFT_FUZZ_CASES")
    if first is not None:
        return Run(layer, seed, int(first), int(total or 1), test, slow)
    if not slow:
        return Run(layer, seed, 0, ci_cases, test, slow)
    cases = int(total or LONG_TOTAL_DEFAULT)
    return Run(layer, seed, 0, max(1, int(cases * LONG_SHARES[layer])), test, slow)


def rss_kib(pid: int | str = "self") -> int:
    """Resident set size of a process, from /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


class Rate:
    """Counts cases and prints the rate at the end (the long run's figure for BENCHMARKS.md)."""

    def __init__(self, run: Run, capsys: pytest.CaptureFixture[str]) -> None:
        self.run = run
        self.capsys = capsys
        self.started = time.perf_counter()

    def report(self, done: int, extra: str = "", details: str = "") -> float:
        """Print the rate past pytest's capture: the long run shows it without -s."""
        elapsed = time.perf_counter() - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        with self.capsys.disabled():
            print(f"\nfuzz {self.run.layer}: {done} cases in {elapsed:.1f} s, {rate:.0f} "
                  f"cases/s (seed {self.run.seed}, cases {self.run.first}.."
                  f"{self.run.first + done - 1}){extra}")
            if details:
                print("  " + details)
        return rate
