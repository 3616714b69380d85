"""The fault campaign end to end: real nodes in network namespaces, real clients, faults,
and the checker's verdict on the history.

CI runs three rounds, one per workload, each under a different fault. The long suite
(`./scripts/test-long`, marked slow) turns on each deliberate bug and checks that the
campaign catches it with lost writes: unclean leader election under crash-isr, and a high
watermark that ignores the ISR under leader kills."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pykraft.testing.chaos.campaign import WORKLOADS, CampaignOptions, run_campaign
from pykraft.testing.chaos.history import read_history


def _options(out: Path, **overrides: object) -> CampaignOptions:
    settings: dict[str, object] = dict(out=out, rounds=3, seed=0, warmup_s=3.0, fault_s=8.0,
                                       cooldown_s=3.0)
    settings.update(overrides)
    return CampaignOptions(**settings)  # type: ignore[arg-type]


def test_three_rounds_one_per_workload_check_clean(tmp_path: Path) -> None:
    # 5 s of traffic after recovery: a transaction producer first waits out
    # CONCURRENT_TRANSACTIONS while its last transaction's markers reach a healed leader,
    # and 3 s once left room for only 3 commits (CI, 2026-11-27)
    options = _options(tmp_path, faults=["kill", "partition-leader", "pause-controller"],
                       cooldown_s=5.0)
    results = run_campaign(options)
    assert [(r.workload, r.fault) for r in results] == list(zip(
        WORKLOADS, ["kill", "partition-leader", "pause-controller"], strict=True))
    for result in results:
        assert result.error is None, result
        assert result.valid, (result.round, result.anomalies)
        assert result.fault_detail, "the fault picked its victims"
        history = read_history(tmp_path / f"round-{result.round:03d}" / "history.jsonl")
        faults = [e for e in history if e.f == "fault"]
        assert [e.value["phase"] for e in faults] == ["start", "stop"]
        writes = [e for e in history if e.type == "ok" and e.f in ("send", "txn")]
        assert sum(e.time < faults[0].time for e in writes) >= 5, "writes before the fault"
        assert sum(e.time > faults[1].time for e in writes) >= 5, "writes after recovery"
        assert any(e.f == "drain" and e.type == "ok" for e in history)
        verdict = json.loads((tmp_path / f"round-{result.round:03d}" / "verdict.json")
                             .read_text())
        assert verdict["result"]["valid"] is True


@pytest.mark.slow
def test_unclean_leader_election_is_caught_as_lost_writes(tmp_path: Path) -> None:
    options = _options(tmp_path, rounds=3, workloads=["queue"], faults=["crash-isr"],
                       fault_s=12.0, configs={"unclean.leader.election.enable": "true"})
    results = run_campaign(options)
    assert any(r.anomalies.get("lost-write", 0) > 0 for r in results), \
        [(r.round, r.fault_detail, r.anomalies) for r in results]


@pytest.mark.slow
def test_a_high_watermark_past_the_isr_is_caught_as_lost_writes(tmp_path: Path) -> None:
    # a kill catches the leader with unreplicated acknowledged writes in about 2 rounds of 3
    options = _options(tmp_path, rounds=5, workloads=["queue"], faults=["kill"],
                       configs={"pykraft.testing.unsafe.leader.high.watermark": "true"})
    results = run_campaign(options)
    assert any(r.anomalies.get("lost-write", 0) > 0 for r in results), \
        [(r.round, r.fault_detail, r.anomalies) for r in results]


@pytest.mark.slow
def test_with_clean_elections_crash_isr_loses_nothing(tmp_path: Path) -> None:
    """The control for the unclean test above: the same fault, Kafka's default config."""
    options = _options(tmp_path, rounds=2, workloads=["queue"], faults=["crash-isr"],
                       fault_s=12.0)
    for result in run_campaign(options):
        assert result.valid, (result.round, result.fault_detail, result.anomalies)
