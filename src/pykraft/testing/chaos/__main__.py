"""`./scripts/chaos` (python -m pykraft.testing.chaos): the fault campaign.

Needs root (network namespaces, nftables, tmpfs mounts) and `./scripts/setup --test` (the
nft and faketime commands). Exit status: 0 when every round's history checks clean, 1 when
a round found an anomaly or the cluster did not recover, 2 on a usage or set-up error.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from pykraft.testing.chaos.campaign import (
    ERROR_KINDS,
    WORKLOADS,
    CampaignOptions,
    RoundResult,
    run_campaign,
)
from pykraft.testing.chaos.faults import FAULT_KINDS

# Deliberate bugs (--inject) that the checker must catch: each is server configs.
INJECTIONS = {
    "unclean-election": {"unclean.leader.election.enable": "true"},
    "unsafe-high-watermark": {"pykraft.testing.unsafe.leader.high.watermark": "true"},
}


def _names(value: str, allowed: tuple[str, ...], what: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in allowed]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(allowed)}")
    return names


def _config(value: str) -> tuple[str, str]:
    key, sep, setting = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--config takes KEY=VALUE, got {value!r}")
    return key.strip(), setting.strip()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scripts/chaos",
        description="Run the Jepsen-style fault campaign: a cluster of pykraft nodes in "
                    "network namespaces, workloads of real clients, faults, and a check of "
                    "every operation's history. Needs root.",
        epilog="A failing round replays with the same --seed and --round R (same workload, "
               "fault and victims); `python -m pykraft.testing.chaos.checker "
               "OUT/round-R/history.jsonl` re-checks a history.")
    p.add_argument("--rounds", type=int, default=3, help="rounds to run (default 3)")
    p.add_argument("--seed", type=int, default=0, help="the schedule's seed (default 0)")
    p.add_argument("--round", type=int, dest="only_round", metavar="R",
                   help="run only round R of the seed's schedule (a replay)")
    p.add_argument("--out", type=Path, help="results directory (default chaos-results/"
                   "<UTC time>); each round writes round-NNN/history.jsonl, verdict.json "
                   "and librdkafka.log (the clients' log with its eos debug context)")
    p.add_argument("--workloads", type=lambda v: _names(v, WORKLOADS, "workload"),
                   default=list(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    p.add_argument("--faults", type=lambda v: _names(v, FAULT_KINDS, "fault kind"),
                   default=list(FAULT_KINDS),
                   help=f"comma-separated, of {', '.join(FAULT_KINDS)}")
    p.add_argument("--fault-seconds", type=float, default=12.0,
                   help="how long each fault lasts (default 12)")
    p.add_argument("--warmup-seconds", type=float, default=4.0,
                   help="healthy traffic before the fault (default 4)")
    p.add_argument("--cooldown-seconds", type=float, default=4.0,
                   help="traffic after recovery, before the drains (default 4)")
    p.add_argument("--config", type=_config, action="append", default=[], metavar="KEY=VALUE",
                   help="an extra server config for every node (repeatable)")
    p.add_argument("--inject", choices=sorted(INJECTIONS), action="append", default=[],
                   help="turn on a deliberate bug the checker must catch: unclean-election "
                        "(unclean.leader.election.enable=true) or unsafe-high-watermark "
                        "(the leader's HW ignores the ISR)")
    p.add_argument("--brokers", type=int, default=2,
                   help="broker-only nodes beside the 3 combined ones (default 2)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every step")
    return p


def summary_table(results: list[RoundResult]) -> str:
    """Markdown: one row per fault kind, over every workload it ran with."""
    rows = ["| fault | rounds | workloads | errors | reported (allowed) | longest gap in "
            "writes (s) | longest gap in one partition's writes (s) |",
            "|---|---|---|---|---|---|---|"]
    by_fault: dict[str, list[RoundResult]] = {}
    for result in results:
        by_fault.setdefault(result.fault, []).append(result)
    for fault, group in by_fault.items():
        errors = sum(r.anomalies.get(kind, 0) for r in group for kind in ERROR_KINDS)
        errors += sum(1 for r in group if r.error)
        reported: dict[str, int] = {}
        for r in group:
            for kind, count in r.anomalies.items():
                if kind not in ERROR_KINDS and count:
                    reported[kind] = reported.get(kind, 0) + count
        longest = max((_longest_gap(r, "longest_gap_s") for r in group), default=0.0)
        stalled = max((_longest_gap(r, "longest_partition_gap_s") for r in group), default=0.0)
        rows.append(f"| {fault} | {len(group)} | "
                    f"{', '.join(sorted({r.workload for r in group}))} | {errors} | "
                    f"{', '.join(f'{k} {v}' for k, v in sorted(reported.items())) or '-'} | "
                    f"{longest:.1f} | {stalled:.1f} |")
    return "\n".join(rows)


def _longest_gap(result: RoundResult, key: str) -> float:
    """The round's longest stretch without an ok write (`key`: in all writes, or in one
    partition's), over its fault's windows."""
    windows = result.unavailability.get("by_fault", {}).get(result.fault, [])
    return max((float(window.get(key, 0.0)) for window in windows), default=0.0)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.rounds < 1:
        parser().error("--rounds must be at least 1")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(message)s")
    configs = dict(args.config)
    for name in args.inject:
        configs.update(INJECTIONS[name])
    out = args.out or Path("chaos-results") / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    options = CampaignOptions(
        out=out, rounds=args.rounds, seed=args.seed, workloads=args.workloads,
        faults=args.faults, only_round=args.only_round, warmup_s=args.warmup_seconds,
        fault_s=args.fault_seconds, cooldown_s=args.cooldown_seconds, configs=configs,
        brokers=args.brokers)
    try:
        results = run_campaign(options)
    except KeyboardInterrupt:
        print("chaos: interrupted; the cluster was torn down", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - a set-up failure, said in one line
        print(f"chaos: {error}", file=sys.stderr)
        return 2
    for result in results:
        errors = {k: v for k, v in result.anomalies.items() if k in ERROR_KINDS and v}
        status = "ok" if result.valid else f"ANOMALIES {errors or result.error}"
        print(f"round {result.round:3d}  {result.workload:12s}  {result.fault:20s}  "
              f"{result.seconds:6.1f} s  {status}")
    print()
    print(summary_table(results))
    print(f"\nresults in {out}")
    return 0 if results and all(result.valid for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
