"""The campaign: one cluster of real nodes in network namespaces, then rounds; each round
runs one workload under one fault and checks its history.

A round (`run_round`):
1. the workload creates its topics (names carry the round) and starts its clients;
2. `warmup_s` of healthy traffic, then the fault starts, lasts `fault_s`, and stops;
3. everything is repaired (`faults.repair_all`) and the cluster must become healthy again
   within `recovery_timeout_s` (if not, the round records a `no-recovery` anomaly);
4. `cooldown_s` more traffic, the clients stop, and the drains read every partition;
5. the checker reads the history: `round-NNN/history.jsonl` and `round-NNN/verdict.json`.

Round r of seed s always runs the same workload and fault (`schedule`) and draws its victims
from `random.Random(f"{s}/{r}")`, so `--seed s --round r` replays it.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pykraft.testing.chaos.checker import ERROR_KINDS, REPORTED_KINDS, check
from pykraft.testing.chaos.faults import FAULT_KINDS, FaultContext, make_fault, repair_all
from pykraft.testing.chaos.history import History
from pykraft.testing.chaos.workloads import make_workload

__all__ = ["ERROR_KINDS", "WORKLOADS", "CampaignOptions", "RoundResult", "cluster_configs",
           "run_campaign", "run_round", "schedule"]

log = logging.getLogger(__name__)

WORKLOADS: tuple[str, ...] = ("queue", "transactions", "metadata")
# Timings the campaign's nodes run with: short enough that a fault of fault_s seconds
# fences brokers, shrinks ISRs and moves leaders, as long faults do on Kafka's defaults.
SESSION_TIMEOUT_MS = 6_000
REPLICA_LAG_MS = 5_000


def cluster_configs(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Server configs of every campaign node: acks=all is durable while one ISR member
    lives (RF 3, min ISR 2) for data, offsets and transaction state alike."""
    configs = {
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "num.partitions": "4",
        "offsets.topic.replication.factor": "3",
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "transaction.state.log.num.partitions": "4",
        "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "broker.heartbeat.interval.ms": "1000",
        "replica.lag.time.max.ms": str(REPLICA_LAG_MS),
        "unclean.leader.election.enable": "false",
        "unclean.leader.election.interval.ms": "1000",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }
    configs.update(extra or {})
    return configs


@dataclass
class CampaignOptions:
    out: Path
    rounds: int = 3
    seed: int = 0
    workloads: Sequence[str] = WORKLOADS
    faults: Sequence[str] = FAULT_KINDS
    only_round: int | None = None  # replay one round of the schedule
    warmup_s: float = 4.0
    fault_s: float = 12.0
    cooldown_s: float = 4.0
    recovery_timeout_s: float = 90.0
    stop_timeout_s: float = 30.0
    drain_timeout_s: float = 90.0
    configs: dict[str, str] = field(default_factory=dict)  # extra server configs
    combined: int = 3
    brokers: int = 2


@dataclass
class RoundResult:
    round: int
    workload: str
    fault: str
    fault_detail: dict[str, Any]
    valid: bool
    counts: dict[str, int]
    anomalies: dict[str, int]  # kind -> how many
    unavailability: dict[str, Any]
    seconds: float
    error: str | None = None


def schedule(options: CampaignOptions, round_: int) -> tuple[str, str]:
    """The workload and fault of a round: workloads rotate every round, and each workload
    goes through the fault kinds in turn (the first rounds: a different fault each), so
    every (workload, fault) pair comes up within len(workloads) * len(faults) rounds."""
    workloads, faults = list(options.workloads), list(options.faults)
    turn, index = divmod(round_, len(workloads))
    return workloads[index], faults[(turn + index) % len(faults)]


class _ClientLog(logging.Handler):
    """During a round: every librdkafka line (its `eos` debug context included) to the
    round's librdkafka.log; only the critical ones on to the campaign's own log, as
    before."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.DEBUG)
        self.file = logging.FileHandler(path, encoding="utf-8")
        self.file.setFormatter(logging.Formatter("%(asctime)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.file.emit(record)
        if record.levelno >= logging.CRITICAL:
            logging.getLogger("pykraft.testing.chaos").handle(record)

    def close(self) -> None:
        self.file.close()
        super().close()


def _client_log(path: Path) -> tuple[logging.Logger, _ClientLog, int, bool]:
    from pykraft.testing.chaos.workloads.common import librdkafka_log
    handler = _ClientLog(path)
    saved = librdkafka_log.level, librdkafka_log.propagate
    librdkafka_log.addHandler(handler)
    librdkafka_log.setLevel(logging.DEBUG)
    librdkafka_log.propagate = False
    return librdkafka_log, handler, *saved


def run_round(cluster: Any, options: CampaignOptions, round_: int) -> RoundResult:
    directory = options.out / f"round-{round_:03d}"
    directory.mkdir(parents=True, exist_ok=True)
    client_log, handler, level, propagate = _client_log(directory / "librdkafka.log")
    try:
        return _run_round(cluster, options, round_)
    finally:
        client_log.removeHandler(handler)
        client_log.setLevel(level)
        client_log.propagate = propagate
        handler.close()


def _run_round(cluster: Any, options: CampaignOptions, round_: int) -> RoundResult:
    workload_name, fault_kind = schedule(options, round_)
    rng = random.Random(f"{options.seed}/{round_}")
    directory = options.out / f"round-{round_:03d}"
    directory.mkdir(parents=True, exist_ok=True)
    history = History(directory / "history.jsonl", round_=round_)
    started = time.monotonic()
    fault = make_fault(fault_kind)
    detail: dict[str, Any] = {}
    error: str | None = None
    log.info("round %d: workload %s, fault %s", round_, workload_name, fault_kind)
    workload = make_workload(workload_name, cluster.bootstrap_servers, history, rng, round_)
    try:
        workload.setup()
    except Exception as failure:  # noqa: BLE001 - a cluster that cannot take a new topic
        history.close()
        return _judge(directory, history, round_, workload_name, fault_kind, {},
                      time.monotonic() - started, f"setup failed: {failure}")
    try:
        workload.start()
        time.sleep(options.warmup_s)
        context = FaultContext(cluster, rng, list(workload.topics),
                               replica_lag_s=REPLICA_LAG_MS / 1000,
                               session_s=SESSION_TIMEOUT_MS / 1000)
        try:
            detail = fault.start(context)
            history.record_ok("nemesis", "fault",
                              {"kind": fault_kind, "phase": "start", "detail": detail})
            time.sleep(options.fault_s)
        finally:
            try:
                fault.stop()
            finally:
                repair_all(cluster)
                history.record_ok("nemesis", "fault",
                                  {"kind": fault_kind, "phase": "stop", "detail": detail})
        try:
            cluster.wait_healthy(options.recovery_timeout_s)
        except Exception as failure:  # noqa: BLE001 - recorded as the round's anomaly
            error = f"no-recovery: {failure}"
        time.sleep(options.cooldown_s)
    finally:
        workload.stop(options.stop_timeout_s)
    if error is None:
        workload.drain(options.drain_timeout_s)
    history.close()
    return _judge(directory, history, round_, workload_name, fault_kind, detail,
                  time.monotonic() - started, error)


def _judge(directory: Path, history: History, round_: int, workload: str, fault: str,
           detail: dict[str, Any], seconds: float, error: str | None) -> RoundResult:
    """Check the round's history; write and return its result (invalid with an error)."""
    verdict = check(history.events)
    result = RoundResult(
        round=round_, workload=workload, fault=fault, fault_detail=detail,
        valid=verdict.valid and error is None, counts=dict(verdict.counts),
        anomalies={kind: verdict.counts[kind] for kind in ERROR_KINDS + REPORTED_KINDS},
        unavailability=verdict.unavailability, seconds=round(seconds, 1), error=error)
    (directory / "verdict.json").write_text(json.dumps(
        {"result": asdict(result), "verdict": verdict.to_json()}, indent=1), encoding="utf-8")
    return result


def run_campaign(options: CampaignOptions) -> list[RoundResult]:
    from pykraft.testing.chaos.cluster import ChaosCluster

    options.out.mkdir(parents=True, exist_ok=True)
    rounds = ([options.only_round] if options.only_round is not None
              else list(range(options.rounds)))
    (options.out / "campaign.json").write_text(json.dumps({
        "seed": options.seed, "rounds": rounds, "workloads": list(options.workloads),
        "faults": list(options.faults), "configs": cluster_configs(options.configs),
        "schedule": {r: schedule(options, r) for r in rounds}}, indent=1), encoding="utf-8")
    results: list[RoundResult] = []
    cluster = ChaosCluster(options.out / "cluster", combined=options.combined,
                           brokers=options.brokers, configs=cluster_configs(options.configs))
    try:
        cluster.start()
        for round_ in rounds:
            result = run_round(cluster, options, round_)
            results.append(result)
            _write_summary(options.out, results)
            if result.error is not None:
                log.error("round %d: %s; the campaign stops", round_, result.error)
                break
    finally:
        cluster.close()
    return results


def _write_summary(out: Path, results: list[RoundResult]) -> None:
    (out / "summary.json").write_text(
        json.dumps([asdict(result) for result in results], indent=1), encoding="utf-8")
