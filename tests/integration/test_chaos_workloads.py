"""The chaos workloads against three real nodes on loopback, without faults: each writes a
history in which every invocation completes exactly once, acknowledged writes sit in the
final drain at their offsets, consumers recorded what they read and how they were assigned,
aborted transactions are invisible to read_committed readers, and the metadata workload's
describe agrees with what it created and deleted. Also: a workload whose cluster cannot be
reached still stops within its bound with every invocation completed."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from pykraft.testing import LocalCluster
from pykraft.testing.chaos.history import Event, History
from pykraft.testing.chaos.workloads import Workload, make_workload
from pykraft.testing.ports import free_port

RUN_S = 3.0
RUN_S_MAX = 30.0
# controlled.shutdown.enable=false: the three nodes stop together at the end, and a node
# asking a vanishing quorum to move its leaderships would wait out its timeout.
CONFIGS = {"group.initial.rebalance.delay.ms": "0", "controlled.shutdown.enable": "false"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(combined=3, configs=CONFIGS, startup_timeout_s=60) as running:
        yield running


def run(workload: Workload, history: History,
        enough: Callable[[list[Event]], bool]) -> None:
    """Run the workload for RUN_S, longer (bounded) until its history shows `enough`: on a
    loaded machine a group's first join can take seconds."""
    workload.setup()
    workload.start()
    started = time.monotonic()
    while time.monotonic() - started < RUN_S or (
            not enough(list(history.events)) and time.monotonic() - started < RUN_S_MAX):
        time.sleep(0.2)
    workload.stop(15.0)
    workload.drain(30.0)


def check_completions(events: list[Event]) -> None:
    """Every invocation has exactly one completion, after it, of the same process and f."""
    invocations = {e.index: e for e in events if e.type == "invoke"}
    completed: Counter[int] = Counter()
    for event in events:
        if event.type == "invoke":
            continue
        if event.invoke is None:
            assert event.type == "ok", f"a completion without its invocation: {event}"
            continue
        invocation = invocations[event.invoke]
        assert (event.process, event.f) == (invocation.process, invocation.f), event
        assert event.index > invocation.index
        completed[event.invoke] += 1
    assert set(completed) == set(invocations), (
        f"never completed: {sorted(set(invocations) - set(completed))[:10]}")
    assert max(completed.values()) == 1, [i for i, n in completed.items() if n > 1][:10]


def completions(events: list[Event], f: str, type_: str | None = None) -> list[Event]:
    return [e for e in events if e.f == f and e.invoke is not None
            and (type_ is None or e.type == type_)]


def drains(events: list[Event], isolation: str) -> dict[tuple[str, int], dict[int, Any]]:
    """(topic, partition) -> {offset: value} of the ok drains at that isolation level."""
    found = {}
    for event in completions(events, "drain"):
        if event.value["isolation"] == isolation:
            assert event.type == "ok", f"drain incomplete without faults: {event.value}"
            records = event.value["records"]
            assert all(offset < event.value["end_offset"] for offset, _ in records)
            found[(event.value["topic"], event.value["partition"])] = dict(records)
    return found


def check_sends_in_drain(events: list[Event], drained: dict[tuple[str, int], dict[int, Any]],
                         ) -> list[Event]:
    sends = completions(events, "send", "ok")
    for send in sends:
        value = send.value
        log = drained[(value["topic"], value["partition"])]
        assert log.get(value["offset"]) == value["value"], (
            f"acknowledged {value} is not in the drain at its offset")
    return sends


@pytest.mark.parametrize(("round_", "group_type"), [(0, "CLASSIC"), (1, "CONSUMER")])
def test_queue_workload_records_sends_polls_commits_and_drains(
        cluster: LocalCluster, round_: int, group_type: str) -> None:
    """Producers (idempotent and not), group consumers with commits, an assign consumer;
    the group uses the classic protocol in even rounds and KIP-848's in odd ones."""
    history = History()
    workload = make_workload("queue", cluster.bootstrap_servers, history,
                             random.Random(7), round_, rate=20.0)
    topic = f"chaos-queue-r{round_}"
    assert workload.topics == [topic]

    def enough(events: list[Event]) -> bool:
        return bool({"consumer-1", "consumer-2"} & {e.process for e in events if e.f == "commit"})

    run(workload, history, enough)
    events = history.events
    check_completions(events)
    sends = check_sends_in_drain(events, drains(events, "read_uncommitted"))
    assert {s.value["idempotent"] for s in sends} == {True, False}
    assert {s.process for s in sends} == {f"producer-{i}" for i in range(1, 5)}
    assert not completions(events, "send", "info"), "a send unanswered without faults"
    polled = {e.process for e in completions(events, "poll", "ok") if e.value["records"]}
    assert "consumer-3" in polled and polled & {"consumer-1", "consumer-2"}
    assigns = [e for e in events if e.f == "assign"]
    assert {e.value["mode"] for e in assigns} == {"subscribe", "assign"}
    whole = [[topic, p] for p in range(4)]
    assert [e.value["partitions"] for e in assigns if e.value["mode"] == "assign"] == [whole]
    commits = completions(events, "commit", "ok")
    assert commits and all(c.value["group"] == topic for c in commits)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    described = admin.describe_consumer_groups([topic])[topic].result(timeout=30)
    assert described.type.name == group_type
    # every value polled by any consumer was acknowledged (or at least invoked) as a send
    sent = {e.value["value"] for e in events if e.f == "send"}
    for poll in completions(events, "poll", "ok"):
        assert {r[3] for r in poll.value["records"]} <= sent


def test_transactions_workload_hides_aborted_values_from_read_committed(
    cluster: LocalCluster,
) -> None:
    """Committed and aborted transactions, the read-process-write pipeline, both drains."""
    history = History()
    workload = make_workload("transactions", cluster.bootstrap_servers, history,
                             random.Random(11), 1, interval_s=0.1)
    assert workload.topics == ["chaos-txn-r1", "chaos-txn-out-r1"]

    def enough(events: list[Event]) -> bool:
        return ({"fail", "ok"} <= {e.type for e in events if e.f == "txn"}
                and any(e.process == "txn-pipeline" and e.type == "ok" for e in events))

    run(workload, history, enough)
    events = history.events
    check_completions(events)
    committed = drains(events, "read_committed")
    uncommitted = drains(events, "read_uncommitted")
    assert len(committed) == len(uncommitted) == 8
    ok = completions(events, "txn", "ok")
    aborted = completions(events, "txn", "fail")
    assert aborted and all(e.process.startswith("txn-producer") for e in aborted)
    for txn in ok:
        for send, offset in zip(txn.value["sends"], txn.value["offsets"], strict=True):
            assert offset is not None
            assert committed[(send["topic"], send["partition"])].get(offset) == send["value"]
    visible = {v for log in committed.values() for v in log.values()}
    written = {v for log in uncommitted.values() for v in log.values()}
    aborted_values = {s["value"] for txn in aborted for s in txn.value["sends"]}
    assert not aborted_values & visible, "an aborted value is visible to read_committed"
    assert aborted_values & written, "aborted transactions left no records to skip"
    pipeline = [e for e in ok if e.process == "txn-pipeline"]
    assert pipeline, "the read-process-write pipeline committed nothing"
    for txn in pipeline:
        reads = txn.value["reads"]
        assert reads and len(reads) == len(txn.value["sends"])
        assert [s["key"] for s in txn.value["sends"]] == [str(r[3]) for r in reads]
        assert all(r[0] == "chaos-txn-r1" for r in reads)
    polls = completions(events, "poll", "ok")
    assert polls and all(p.value["isolation"] == "read_committed" for p in polls)
    assert not {r[3] for p in polls for r in p.value["records"]} & aborted_values


def test_metadata_workload_describes_what_it_created_and_deleted(
    cluster: LocalCluster,
) -> None:
    """Topic creation and deletion, reassignment and elections beside a producer/consumer."""
    history = History()
    workload = make_workload("metadata", cluster.bootstrap_servers, history,
                             random.Random(5), 1, rate=20.0, interval_s=0.25)

    def enough(events: list[Event]) -> bool:
        return {e.value["action"] for e in events if e.f == "admin" and e.type == "ok"} == {
            "create-topic", "delete-topic", "reassign", "elect-leaders"}

    run(workload, history, enough)
    events = history.events
    check_completions(events)
    check_sends_in_drain(events, drains(events, "read_uncommitted"))
    admin = completions(events, "admin")
    by_action: dict[str, Counter[str]] = {}
    for event in admin:
        by_action.setdefault(event.value["action"], Counter())[event.type] += 1
    for action in ("create-topic", "delete-topic", "reassign", "elect-leaders"):
        assert by_action.get(action, Counter())["ok"] >= 1, (action, by_action)
    [describe] = [e for e in admin if e.value["action"] == "describe-topics"]
    assert describe.type == "ok"
    created = {e.value["topic"]: e.value["partitions"] for e in admin
               if e.value["action"] == "create-topic" and e.type == "ok"}
    deleted = {e.value["topic"] for e in admin
               if e.value["action"] == "delete-topic" and e.type == "ok"}
    expected = {"chaos-meta-r1": 3} | {t: n for t, n in created.items() if t not in deleted}
    assert describe.value["topics"] == expected
    assert set(describe.value["asked"]) >= set(created) | {"chaos-meta-r1"}


def test_workloads_without_a_cluster_stop_in_time_with_every_invocation_completed() -> None:
    """Nothing listens at the bootstrap address: stop() keeps its bound, all invokes end."""
    bootstrap = f"127.0.0.1:{free_port()}"
    history = History()
    rng = random.Random(3)
    workloads = [make_workload(name, bootstrap, history, rng, 1, rate=20.0)
                 for name in ("queue", "metadata")]
    workloads.append(make_workload("transactions", bootstrap, history, rng, 1))
    for workload in workloads:
        workload.start()
    time.sleep(1.0)  # let every thread invoke into the void
    started = time.monotonic()
    for workload in workloads:
        workload.stop(1.5)
    assert time.monotonic() - started < 3 * 1.5 + 1.0
    events = list(history.events)
    check_completions(events)
    sends = completions(events, "send")
    assert sends and all(e.type in ("info", "fail") for e in sends)
    assert not [e for e in events if e.type == "ok" and e.f not in ("assign",)]
    count = len(history.events)
    time.sleep(0.5)
    assert len(history.events) == count, "a workload recorded events after it stopped"
