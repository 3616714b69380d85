"""The chaos checker finds each of Jepsen's Kafka anomalies, and nothing in correct runs."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykraft.testing.chaos.checker import (
    ERROR_KINDS,
    REPORTED_KINDS,
    HistoryError,
    Verdict,
    check,
    main,
    strongly_connected_components,
)
from pykraft.testing.chaos.history import Event, History, read_history

RU = "read_uncommitted"
RC = "read_committed"
T0 = ("t", 0)
T1 = ("t", 1)


class Builder:
    """Handcrafted histories: events with chosen times and outcomes."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.time = 0.0

    def at(self, time: float) -> Builder:
        self.time = time
        return self

    def add(self, process: str, type_: Any, f: str, value: dict[str, Any],
            invoke: int | None = None) -> Event:
        event = Event(len(self.events), self.time, 0, process, type_, f, value, invoke)
        self.events.append(event)
        return event

    def invoke(self, process: str, f: str, value: dict[str, Any]) -> Event:
        return self.add(process, "invoke", f, value)

    def complete(self, invocation: Event, type_: str, **results: Any) -> Event:
        return self.add(invocation.process, type_, invocation.f,
                        {**invocation.value, **results}, invocation.index)

    def invoke_send(self, value: int, tp: tuple[str, int] = T0, *, producer: str = "p1",
                    idempotent: bool = True, process: str = "producer-1") -> Event:
        return self.invoke(process, "send", {"topic": tp[0], "partition": tp[1], "key": None,
                                             "value": value, "producer": producer,
                                             "idempotent": idempotent})

    def send(self, value: int, tp: tuple[str, int] = T0, *, outcome: str = "ok",
             offset: int | None = None, **kwargs: Any) -> Event:
        invocation = self.invoke_send(value, tp, **kwargs)
        results = {"offset": offset} if outcome == "ok" else {}
        return self.complete(invocation, outcome, **results)

    def txn(self, sends: list[tuple[tuple[str, int], int]], outcome: str, *,
            offsets: list[int | None] | None = None, reads: list[list[Any]] | None = None,
            process: str = "txn-1", producer: str = "tp1") -> Event:
        invocation = self.invoke(process, "txn", {
            "producer": producer, "transactional_id": process,
            "sends": [{"topic": tp[0], "partition": tp[1], "key": None, "value": value}
                      for tp, value in sends],
            "reads": reads or []})
        results = {"offsets": offsets or [None] * len(sends)} if outcome == "ok" else {}
        return self.complete(invocation, outcome, **results)

    def poll(self, records: list[list[Any]], *, consumer: str = "c1",
             isolation: str = RU, process: str = "consumer-1") -> Event:
        invocation = self.invoke(process, "poll", {"consumer": consumer, "group": "g",
                                                   "isolation": isolation})
        return self.complete(invocation, "ok", records=records)

    def assign(self, partitions: list[tuple[str, int]], *, consumer: str = "c1",
               process: str = "consumer-1") -> Event:
        return self.add(process, "ok", "assign", {
            "consumer": consumer, "mode": "subscribe",
            "partitions": [[topic, partition] for topic, partition in partitions]})

    def drain(self, tp: tuple[str, int], records: list[tuple[int, int | None]],
              isolation: str = RU) -> Event:
        end = max((offset for offset, _ in records), default=-1) + 1
        return self.add("drainer", "ok", "drain", {
            "topic": tp[0], "partition": tp[1], "isolation": isolation,
            "records": [[offset, value] for offset, value in records], "end_offset": end})

    def admin(self, action: str, outcome: str = "ok", **fields: Any) -> Event:
        invocation = self.invoke("admin-1", "admin", {"action": action, **fields})
        results = {"topics": fields.pop("topics")} if "topics" in fields else {}
        return self.complete(invocation, outcome, **results)

    def fault(self, kind: str, phase: str) -> Event:
        return self.add("nemesis", "ok", "fault", {"kind": kind, "phase": phase, "detail": {}})

    def check(self) -> Verdict:
        return check(self.events)


def found(verdict: Verdict) -> dict[str, int]:
    return {kind: count for kind, count in verdict.counts.items()
            if kind in ERROR_KINDS + REPORTED_KINDS and count}


def assert_exactly(verdict: Verdict, **expected: int) -> None:
    kinds = {kind.replace("_", "-"): count for kind, count in expected.items()}
    assert found(verdict) == kinds
    assert verdict.valid == (not any(kind in ERROR_KINDS for kind in kinds))
    json.dumps(verdict.to_json())  # JSON-able as it is


# --- one minimal history per kind -----------------------------------------------------------


def test_an_acknowledged_send_missing_from_the_drain_is_a_lost_write() -> None:
    history = Builder()
    history.send(1, offset=0)
    history.send(2, offset=1)
    history.drain(T0, [(1, 2)])
    verdict = history.check()
    assert_exactly(verdict, lost_write=1)
    assert verdict.anomalies["lost-write"][0]["value"] == 1


def test_another_value_at_an_acknowledged_offset_is_lost_and_inconsistent() -> None:
    history = Builder()
    history.send(1, offset=0)
    history.drain(T0, [(0, 7)])
    assert_exactly(history.check(), lost_write=1, inconsistent_offset=1)


def test_a_committed_txn_value_missing_from_the_read_committed_drain_is_lost() -> None:
    history = Builder()
    history.txn([(T0, 1)], "ok", offsets=[0])
    history.drain(T0, [(0, 1)], RU)
    history.drain(T0, [], RC)
    assert_exactly(history.check(), lost_write=1)


def test_a_value_a_consumer_read_that_the_drain_lacks_is_lost() -> None:
    history = Builder()
    history.send(1, outcome="info")  # never acknowledged, yet read: it was committed
    history.poll([["t", 0, 0, 1]])
    history.drain(T0, [])
    verdict = history.check()
    assert_exactly(verdict, lost_write=1)
    assert verdict.anomalies["lost-write"][0]["seen_by"] == "poll"


def test_aborted_data_read_uncommitted_may_be_absent_from_the_read_committed_drain() -> None:
    history = Builder()
    history.txn([(T0, 1)], "fail")
    history.txn([(T0, 2)], "info")
    history.poll([["t", 0, 0, 1], ["t", 0, 1, 2]], isolation=RU)
    history.drain(T0, [], RC)
    assert_exactly(history.check())


def test_an_acknowledged_value_in_a_partition_without_drain_is_unchecked() -> None:
    history = Builder()
    history.send(1, offset=0)
    verdict = history.check()
    assert_exactly(verdict)
    assert verdict.counts["values-unchecked"] == 1


def test_an_idempotent_value_at_two_offsets_is_a_duplicate() -> None:
    history = Builder()
    history.send(1, offset=0)
    history.drain(T0, [(0, 1), (1, 1)])
    verdict = history.check()
    assert_exactly(verdict, duplicate=1)
    assert verdict.anomalies["duplicate"][0]["positions"] == [["t", 0, 0], ["t", 0, 1]]


def test_a_duplicate_across_polls_counts_too() -> None:
    history = Builder()
    history.txn([(T0, 1)], "ok", offsets=[0])
    history.poll([["t", 0, 0, 1]], isolation=RC)
    history.assign([T0])
    history.poll([["t", 0, 3, 1]], isolation=RC)
    assert_exactly(history.check(), duplicate=1)


def test_a_non_idempotent_duplicate_is_allowed() -> None:
    history = Builder()
    history.send(1, offset=0, idempotent=False)
    history.drain(T0, [(0, 1), (1, 1)])
    assert_exactly(history.check(), duplicate_nonidempotent=1)


def test_an_idempotent_producers_values_out_of_invocation_order_are_reordered() -> None:
    history = Builder()
    first = history.invoke_send(1)
    second = history.invoke_send(2)
    history.complete(second, "ok", offset=0)
    history.complete(first, "ok", offset=1)
    history.drain(T0, [(0, 2), (1, 1)])
    verdict = history.check()
    assert_exactly(verdict, reorder=1)
    example = verdict.anomalies["reorder"][0]
    assert (example["earlier"]["value"], example["later"]["value"]) == (2, 1)


def test_reordering_without_idempotence_is_allowed() -> None:
    history = Builder()
    first = history.invoke_send(1, idempotent=False)
    second = history.invoke_send(2, idempotent=False)
    history.complete(second, "ok", offset=0)
    history.complete(first, "ok", offset=1)
    history.drain(T0, [(0, 2), (1, 1)])
    assert_exactly(history.check(), reorder_nonidempotent=1)


def test_two_producers_interleaving_is_no_reorder() -> None:
    history = Builder()
    first = history.invoke_send(1, producer="a", process="producer-1")
    second = history.invoke_send(2, producer="b", process="producer-2")
    history.complete(second, "ok", offset=0)
    history.complete(first, "ok", offset=1)
    history.drain(T0, [(0, 2), (1, 1)])
    assert_exactly(history.check())


def test_one_offset_with_two_values_is_inconsistent() -> None:
    history = Builder()
    history.send(1, offset=0)
    history.poll([["t", 0, 0, 2]], consumer="c2", process="consumer-2")
    verdict = history.check()  # no drain: which one is right is not judged
    assert_exactly(verdict, inconsistent_offset=1)
    example = verdict.anomalies["inconsistent-offset"][0]
    assert example["values"] == [1, 2]
    assert example["sources"] == [["send", 0], ["poll", 3]]  # invocation, completion


def test_a_polled_value_the_drain_replaced_is_inconsistent_and_lost() -> None:
    history = Builder()
    history.send(1, offset=0)
    history.poll([["t", 0, 0, 2]])
    history.drain(T0, [(0, 1)])
    assert_exactly(history.check(), inconsistent_offset=1, lost_write=1)


def test_an_aborted_value_read_committed_is_an_aborted_read() -> None:
    history = Builder()
    history.txn([(T0, 1)], "fail")
    history.poll([["t", 0, 0, 1]], isolation=RC)
    history.drain(T0, [(0, 1)], RU)  # read_uncommitted may see aborted data
    history.drain(T0, [], RC)
    assert_exactly(history.check(), aborted_read=1)


def test_an_aborted_value_in_the_read_committed_drain_is_an_aborted_read() -> None:
    history = Builder()
    history.txn([(T0, 1)], "fail")
    history.drain(T0, [(0, 1)], RC)
    assert_exactly(history.check(), aborted_read=1)


def test_a_definitely_failed_send_seen_anywhere_is_a_failed_write_visible() -> None:
    history = Builder()
    history.send(1, outcome="fail")
    history.drain(T0, [(0, 1)])
    assert_exactly(history.check(), failed_write_visible=1)


def test_an_unknown_send_seen_in_a_drain_is_only_counted() -> None:
    history = Builder()
    history.send(1, outcome="info")
    history.send(2, outcome="info")
    history.drain(T0, [(0, 1)])
    verdict = history.check()
    assert_exactly(verdict, unacknowledged_visible=1)
    assert "unacknowledged-visible" not in verdict.anomalies  # count only


def test_a_txn_partly_visible_is_non_atomic() -> None:
    history = Builder()
    history.txn([(T0, 1), (T1, 2)], "info")
    history.drain(T0, [(0, 1)], RC)
    history.drain(T1, [], RC)
    verdict = history.check()
    assert_exactly(verdict, non_atomic_txn=1)
    example = verdict.anomalies["non-atomic-txn"][0]
    assert (example["visible"], example["missing"]) == ([1], [2])


def test_an_unknown_txn_wholly_visible_or_wholly_absent_is_atomic() -> None:
    history = Builder()
    history.txn([(T0, 1), (T1, 2)], "info")
    history.txn([(T0, 3), (T1, 4)], "info")
    history.drain(T0, [(0, 1)], RC)
    history.drain(T1, [(0, 2)], RC)
    assert_exactly(history.check())


def test_two_committed_txns_reading_each_others_writes_are_g1c() -> None:
    history = Builder()
    a, b = ("a", 0), ("b", 0)
    history.txn([(a, 1)], "ok", offsets=[0], reads=[["b", 0, 0, 2]], process="txn-1")
    history.txn([(b, 2)], "ok", offsets=[0], reads=[["a", 0, 0, 1]], process="txn-2")
    history.drain(a, [(0, 1)], RC)
    history.drain(b, [(0, 2)], RC)
    verdict = history.check()
    assert_exactly(verdict, g1c=1)
    cycle = verdict.anomalies["g1c"][0]["cycle"]
    assert {step["edge"] for step in cycle} == {"wr"} and len(cycle) == 2


def test_a_wr_edge_closing_a_ww_chain_is_g1c() -> None:
    history = Builder()
    first = history.txn([(T0, 1)], "ok", offsets=[0], process="txn-1")
    history.txn([(T0, 2)], "ok", offsets=[1], process="txn-2", reads=[])
    # txn-3 wrote after both in the log, yet txn-1 is said to have read it
    history.txn([(T0, 3)], "ok", offsets=[2], process="txn-3")
    history.events[first.index] = Event(
        first.index, first.time, 0, first.process, "ok", "txn",
        {**first.value, "reads": [["t", 0, 2, 3]]}, first.invoke)
    history.drain(T0, [(0, 1), (1, 2), (2, 3)], RC)
    verdict = history.check()
    assert_exactly(verdict, g1c=1)
    assert {step["edge"] for step in verdict.anomalies["g1c"][0]["cycle"]} == {"wr", "ww"}


def test_interleaved_txns_form_a_write_cycle_that_kafka_allows() -> None:
    history = Builder()
    history.txn([(T0, 1), (T0, 3)], "ok", offsets=[0, 2], process="txn-1", producer="a")
    history.txn([(T0, 2)], "ok", offsets=[1], process="txn-2", producer="b")
    history.drain(T0, [(0, 1), (1, 2), (2, 3)], RC)
    assert_exactly(history.check(), g0=1)


def test_a_created_topic_missing_from_the_final_describe_is_lost_metadata() -> None:
    history = Builder()
    history.admin("create-topic", topic="x")
    history.admin("create-topic", topic="y")
    history.admin("delete-topic", topic="y")
    history.admin("describe-topics", topics={"z": 3})
    verdict = history.check()
    assert_exactly(verdict, lost_metadata=1)
    assert verdict.anomalies["lost-metadata"][0]["topic"] == "x"


def test_a_deleted_topic_still_listed_is_lost_metadata() -> None:
    history = Builder()
    history.admin("create-topic", topic="x")
    history.admin("delete-topic", topic="x")
    history.admin("create-topic", topic="y")
    history.admin("delete-topic", topic="y")
    history.admin("create-topic", topic="y")  # re-created: listed again rightly
    history.admin("describe-topics", topics=["x", "y"])
    verdict = history.check()
    assert_exactly(verdict, lost_metadata=1)
    assert verdict.anomalies["lost-metadata"][0]["reason"] == "deleted, still listed"


def test_a_failed_create_or_a_describe_before_it_settles_is_no_lost_metadata() -> None:
    history = Builder()
    history.admin("create-topic", outcome="fail", topic="x")
    history.admin("describe-topics", topics={})
    creating = history.invoke("admin-1", "admin", {"action": "create-topic", "topic": "y"})
    describing = history.invoke("admin-2", "admin", {"action": "describe-topics"})
    history.complete(creating, "ok")
    history.complete(describing, "ok", topics={})
    assert_exactly(history.check())


def test_a_consumer_jumping_over_a_drained_record_is_a_poll_skip() -> None:
    history = Builder()
    history.assign([T0])
    history.poll([["t", 0, 0, 1]])
    history.poll([["t", 0, 2, 3]])
    history.drain(T0, [(0, 1), (1, 2), (2, 3)])
    verdict = history.check()
    assert_exactly(verdict, poll_skip=1)
    assert verdict.anomalies["poll-skip"][0]["skipped_offset"] == 1


def test_a_gap_of_control_records_is_no_poll_skip() -> None:
    history = Builder()
    history.poll([["t", 0, 0, 1], ["t", 0, 2, 3]], isolation=RC)
    history.drain(T0, [(0, 1), (2, 3)], RC)  # offset 1 holds a commit marker
    history.drain(T0, [(0, 1), (2, 3)], RU)
    assert_exactly(history.check())


def test_a_consumer_going_back_without_reassignment_is_a_nonmonotonic_poll() -> None:
    history = Builder()
    history.poll([["t", 0, 0, 1], ["t", 0, 1, 2]])
    history.poll([["t", 0, 1, 2]])
    history.drain(T0, [(0, 1), (1, 2)])
    assert_exactly(history.check(), nonmonotonic_poll=1)


def test_an_assignment_in_between_allows_jumps_of_its_partitions_only() -> None:
    history = Builder()
    history.poll([["t", 0, 0, 1], ["t", 1, 0, 11]])
    history.assign([T0])
    history.poll([["t", 0, 0, 1], ["t", 1, 0, 11]])
    history.drain(T0, [(0, 1)])
    history.drain(T1, [(0, 11)])
    verdict = history.check()
    assert_exactly(verdict, nonmonotonic_poll=1)
    assert verdict.anomalies["nonmonotonic-poll"][0]["partition"] == 1


def test_examples_are_capped_but_every_occurrence_counted() -> None:
    history = Builder()
    for value in range(1, 101):
        history.send(value, offset=value)
    history.drain(T0, [])
    verdict = history.check()
    assert verdict.counts["lost-write"] == 100
    assert len(verdict.anomalies["lost-write"]) == 20


def test_an_invocation_that_never_completed_is_unknown() -> None:
    history = Builder()
    history.invoke_send(1)
    history.txn([(T0, 2)], "ok", offsets=[0])
    history.drain(T0, [(0, 2)], RU)
    verdict = history.check()
    assert_exactly(verdict)
    assert verdict.counts["sends-info"] == 1


def test_a_malformed_event_is_a_history_error_naming_it() -> None:
    history = Builder()
    history.send(1, offset=0)
    history.add("producer-1", "ok", "send", {"topic": "t", "partition": "zero", "value": 2})
    with pytest.raises(HistoryError, match="event 2"):
        history.check()
    history = Builder()
    history.poll([["t", 0, 0]])
    with pytest.raises(HistoryError, match="poll"):
        history.check()
    history = Builder()
    history.add("producer-1", "maybe", "send", {"topic": "t", "partition": 0, "value": 2})
    with pytest.raises(HistoryError, match="unknown event type"):
        history.check()


# --- unavailability -------------------------------------------------------------------------


def test_unavailability_per_fault_window_and_over_the_whole_history() -> None:
    history = Builder()
    history.at(0.5).send(1, offset=0)
    history.at(1.0).fault("partition", "start")
    history.at(1.2).send(2, offset=1)
    history.at(2.5).poll([["t", 0, 0, 1]])
    history.at(2.9).send(3, offset=2)
    history.at(3.0).fault("partition", "stop")
    history.at(3.5).send(4, offset=3)
    history.at(4.0).fault("pause", "start")
    history.at(4.5).fault("pause", "stop")
    history.at(6.0).txn([(T1, 5)], "ok", offsets=[0])
    history.at(7.0).fault("kill", "start")
    unavailability = history.check().unavailability
    assert unavailability["by_fault"] == {
        "partition": [{"start": 1.0, "stop": 3.0, "longest_gap_s": 1.7,
                       "longest_poll_gap_s": 1.5, "longest_partition_gap_s": 1.7,
                       "stalled_partition": ["t", 0], "recovery_s": 0.5}],
        "pause": [{"start": 4.0, "stop": 4.5, "longest_gap_s": 2.0,
                   "longest_poll_gap_s": 2.0, "longest_partition_gap_s": 2.0,
                   "stalled_partition": ["t", 0], "recovery_s": 1.5}],
        "kill": [{"start": 7.0, "stop": None, "longest_gap_s": 0.0,
                  "longest_poll_gap_s": 0.0, "longest_partition_gap_s": 0.0,
                  "stalled_partition": None, "recovery_s": None}],
    }
    assert unavailability["whole_history"] == {"longest_gap_s": 2.5, "from": 3.5,
                                               "longest_poll_gap_s": 4.5,
                                               "poll_gap_from": 2.5}


def test_one_stalled_partition_shows_while_others_keep_writing() -> None:
    history = Builder()
    history.at(0.1).send(1, offset=0)
    history.at(0.2).send(2, ("t", 1), offset=0)
    history.at(1.0).fault("pause", "start")
    for step in range(1, 10):  # partition 1 writes on; partition 0's leader is paused
        history.at(1.0 + step * 0.5).send(10 + step, ("t", 1), offset=step)
    history.at(5.0).fault("pause", "stop")
    history.at(5.5).send(3, offset=1)
    window = history.check().unavailability["by_fault"]["pause"][0]
    assert window["longest_gap_s"] == 0.5
    assert window["longest_partition_gap_s"] == 4.0  # to the first write after the stop, 5.0
    assert window["stalled_partition"] == ["t", 0]


# --- the graph ------------------------------------------------------------------------------


def test_strongly_connected_components_of_a_deep_graph_need_no_recursion() -> None:
    size = 100_000
    graph: dict[int, dict[int, str]] = {node: {node + 1: "ww"} for node in range(size)}
    graph[size] = {0: "wr"}
    graph[size + 1] = {0: "ww"}  # reaches the cycle, is not in it
    components = sorted(strongly_connected_components(graph), key=len)
    assert [len(component) for component in components] == [1, size + 1]


# --- generated correct executions, and one mutation each ------------------------------------


@dataclass
class Execution:
    """A correct run built step by step: each partition's log, and its history."""
    history: Builder = field(default_factory=Builder)
    logs: dict[tuple[str, int], list[tuple[int | None, str]]] = field(default_factory=dict)
    status: dict[int, str] = field(default_factory=dict)  # value -> plain|open|commit|abort
    acked: list[tuple[int, tuple[str, int]]] = field(default_factory=list)  # plain ok sends
    aborted: list[tuple[int, tuple[str, int], int]] = field(default_factory=list)
    idempotent_values: dict[tuple[str, tuple[str, int]], list[int]] = field(
        default_factory=dict)

    def drains(self, isolation: str) -> dict[tuple[str, int], list[tuple[int, int | None]]]:
        result = {}
        for tp, log in self.logs.items():
            result[tp] = [(offset, value) for offset, (value, kind) in enumerate(log)
                          if kind == "data" and value is not None
                          and (isolation == RU or self.status[value] != "abort")]
        return result


def correct_execution(seed: int, steps: int) -> Execution:
    """Producers (with and without idempotence) and transactions append to partition logs,
    commit markers take offsets, consumers read sequential ranges and get reassigned,
    faults come and go; the drains are the logs. Every anomaly check must come back 0."""
    rng = random.Random(seed)
    run = Execution()
    history = run.history
    partitions = [("t", partition) for partition in range(rng.randint(1, 3))]
    for tp in partitions:
        run.logs[tp] = []
    next_value = iter(range(1, 10**9))
    pending: list[tuple[Event, int | None, tuple[str, int], str]] = []
    open_txns: list[tuple[Event, list[tuple[tuple[str, int], int, int]], str]] = []
    positions: dict[str, dict[tuple[str, int], int]] = {}
    committed_reads: list[list[Any]] = []
    fault_open = False

    def append(tp: tuple[str, int], value: int | None, kind: str = "data") -> int:
        run.logs[tp].append((value, kind))
        return len(run.logs[tp]) - 1

    def send(producer: int, idempotent: bool, tp: tuple[str, int], ack: bool) -> None:
        value = next(next_value)
        invocation = history.invoke_send(value, tp, producer=f"p{producer}",
                                         idempotent=idempotent, process=f"producer-{producer}")
        written = ack or rng.random() < 0.5
        offset = append(tp, value) if written else None
        if written:
            run.status[value] = "plain"
        outcome = "ok" if ack else rng.choice(["info", "fail"] if not written else ["info"])
        pending.append((invocation, offset, tp, outcome))
        if idempotent and written:
            run.idempotent_values.setdefault((f"p{producer}", tp), []).append(value)
        if ack:
            run.acked.append((value, tp))

    def begin_txn(process: str, force: str | None = None) -> None:
        sends = [(rng.choice(partitions), next(next_value)) for _ in range(rng.randint(1, 3))]
        reads = [] if not committed_reads else rng.sample(
            committed_reads, min(len(committed_reads), rng.randint(0, 2)))
        invocation = history.invoke(process, "txn", {
            "producer": process, "transactional_id": process,
            "sends": [{"topic": tp[0], "partition": tp[1], "key": None, "value": value}
                      for tp, value in sends], "reads": reads})
        placed = []
        for tp, value in sends:
            run.status[value] = "open"
            placed.append((tp, value, append(tp, value)))
        decision = force or rng.choice(["commit", "commit", "abort"])
        open_txns.append((invocation, placed, decision))

    def end_txn(position: int) -> None:
        invocation, placed, decision = open_txns.pop(position)
        for _, value, _ in placed:
            run.status[value] = decision
        for tp in {tp for tp, _, _ in placed}:
            append(tp, None, "marker")
        if decision == "commit":
            committed_reads.extend([tp[0], tp[1], offset, value] for tp, value, offset in placed)
        outcome = {"commit": "ok", "abort": "fail"}[decision]
        if rng.random() < 0.2 and invocation.process != "txn-0":
            outcome = "info"  # the client lost track; the prelude's abort stays certain
        if outcome == "fail":
            run.aborted.extend((value, tp, offset) for tp, value, offset in placed)
        results = {"offsets": [offset for _, _, offset in placed]} if outcome == "ok" else {}
        history.complete(invocation, outcome, **results)

    def poll(consumer: str, isolation: str) -> None:
        assigned = positions.setdefault(consumer, {})
        if not assigned or rng.random() < 0.1:  # a rebalance: a new assignment and positions
            chosen = rng.sample(partitions, rng.randint(1, len(partitions)))
            assigned.clear()
            for tp in chosen:
                assigned[tp] = rng.randint(0, len(run.logs[tp]))
            history.assign(chosen, consumer=consumer, process=f"consumer-{consumer}")
            return
        tp = rng.choice(sorted(assigned))
        records: list[list[Any]] = []
        position = assigned[tp]
        log = run.logs[tp]
        while position < len(log) and len(records) < 5:
            value, kind = log[position]
            if kind == "data" and value is not None:
                status = run.status[value]
                if isolation == RC and status == "open":
                    break  # the last stable offset
                if isolation == RU or status != "abort":
                    records.append([tp[0], tp[1], position, value])
            position += 1
        assigned[tp] = position
        if records:
            history.poll(records, consumer=consumer, isolation=isolation,
                         process=f"consumer-{consumer}")

    # A prelude that guarantees what the mutations need.
    send(0, True, partitions[0], True)
    send(0, True, partitions[0], True)
    begin_txn("txn-0", force="abort")
    end_txn(0)
    for _ in range(steps):
        history.time += rng.uniform(0, 0.05)
        action = rng.random()
        if action < 0.35:
            producer = rng.randint(0, 3)
            send(producer, producer < 2, rng.choice(partitions), rng.random() < 0.8)
        elif action < 0.5 and pending:
            invocation, offset, _, outcome = pending.pop(rng.randrange(len(pending)))
            results = {"offset": offset} if outcome == "ok" else {}
            history.complete(invocation, outcome, **results)
        elif action < 0.6:
            process = f"txn-{rng.randint(1, 2)}"
            if not any(invocation.process == process for invocation, _, _ in open_txns):
                begin_txn(process)
        elif action < 0.7 and open_txns:
            end_txn(rng.randrange(len(open_txns)))
        elif action < 0.95:
            consumer = rng.choice(["a", "b", "c"])
            poll(consumer, RC if consumer == "c" else RU)
        else:
            history.fault("partition", "stop" if fault_open else "start")
            fault_open = not fault_open
    while open_txns:
        end_txn(0)
    for invocation, offset, _, outcome in pending:
        history.complete(invocation, outcome, **({"offset": offset} if outcome == "ok" else {}))
    for isolation in (RU, RC):
        for tp, records in run.drains(isolation).items():
            history.drain(tp, records, isolation)
    return run


def errors(verdict: Verdict) -> dict[str, int]:
    return {kind: count for kind, count in found(verdict).items() if kind in ERROR_KINDS}


SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)
STEPS = st.integers(min_value=0, max_value=300)


@SETTINGS
@given(SEEDS, STEPS)
def test_a_correct_execution_has_no_error_anomaly(seed: int, steps: int) -> None:
    run = correct_execution(seed, steps)
    verdict = check(run.history.events)
    assert verdict.valid, errors(verdict)
    assert set(found(verdict)) <= {"unacknowledged-visible"}  # info sends that were written


def drain_event(run: Execution, tp: tuple[str, int], isolation: str) -> int:
    return next(event.index for event in run.history.events
                if event.f == "drain" and event.value["isolation"] == isolation
                and (event.value["topic"], event.value["partition"]) == tp)


def replace_records(run: Execution, index: int, records: list[list[Any]]) -> None:
    event = run.history.events[index]
    run.history.events[index] = Event(event.index, event.time, event.round, event.process,
                                      event.type, event.f, {**event.value, "records": records},
                                      event.invoke)


@SETTINGS
@given(SEEDS, STEPS, st.randoms(use_true_random=False))
def test_dropping_an_acknowledged_value_from_a_drain_is_a_lost_write(
        seed: int, steps: int, rng: random.Random) -> None:
    run = correct_execution(seed, steps)
    value, tp = rng.choice(run.acked)
    index = drain_event(run, tp, RU)
    records = run.history.events[index].value["records"]
    replace_records(run, index, [record for record in records if record[1] != value])
    verdict = check(run.history.events)
    assert errors(verdict) == {"lost-write": 1}
    assert verdict.anomalies["lost-write"][0]["value"] == value


@SETTINGS
@given(SEEDS, STEPS, st.randoms(use_true_random=False))
def test_swapping_two_values_of_an_idempotent_producer_is_a_reorder(
        seed: int, steps: int, rng: random.Random) -> None:
    run = correct_execution(seed, steps)
    (_, tp), values = rng.choice([item for item in run.idempotent_values.items()
                                  if len(item[1]) >= 2])
    first, second = sorted(rng.sample(values, 2))
    index = drain_event(run, tp, RU)
    swap = {first: second, second: first}
    records = run.history.events[index].value["records"]
    replace_records(run, index, [[offset, swap.get(value, value)] for offset, value in records])
    verdict = check(run.history.events)
    assert verdict.counts["reorder"] >= 1
    assert not verdict.valid


@SETTINGS
@given(SEEDS, STEPS, st.randoms(use_true_random=False))
def test_a_second_value_at_an_offset_is_an_inconsistent_offset(
        seed: int, steps: int, rng: random.Random) -> None:
    run = correct_execution(seed, steps)
    value, tp = rng.choice(run.acked)
    offset = next(offset for offset, (logged, _) in enumerate(run.logs[tp]) if logged == value)
    run.history.poll([[tp[0], tp[1], offset, 10**9 + 1]], consumer="z", process="consumer-z")
    verdict = check(run.history.events)
    assert verdict.counts["inconsistent-offset"] == 1
    assert set(errors(verdict)) <= {"inconsistent-offset", "lost-write"}  # the new value
    example = verdict.anomalies["inconsistent-offset"][0]
    assert (example["partition"], example["offset"]) == (tp[1], offset)


@SETTINGS
@given(SEEDS, STEPS, st.randoms(use_true_random=False))
def test_showing_an_aborted_value_to_read_committed_is_an_aborted_read(
        seed: int, steps: int, rng: random.Random) -> None:
    run = correct_execution(seed, steps)
    value, tp, offset = rng.choice(run.aborted)
    index = drain_event(run, tp, RC)
    records = sorted([*run.history.events[index].value["records"], [offset, value]])
    replace_records(run, index, records)
    verdict = check(run.history.events)
    assert verdict.counts["aborted-read"] == 1
    assert set(errors(verdict)) <= {"aborted-read", "non-atomic-txn"}


def test_a_large_history_checks() -> None:
    """200k events finish (the time is the CI's to notice, not asserted)."""
    run = correct_execution(seed=7, steps=150_000)
    assert len(run.history.events) > 200_000
    assert check(run.history.events).valid


# --- the command line -----------------------------------------------------------------------


def write_history(path: Path, events: list[Event]) -> Path:
    path.write_text("".join(json.dumps(event.to_json()) + "\n" for event in events))
    return path


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pykraft.testing.chaos.checker", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_the_cli_exits_0_on_a_valid_history_1_on_anomalies_2_on_garbage(
        tmp_path: Path) -> None:
    clean = Builder()
    clean.send(1, offset=0)
    clean.drain(T0, [(0, 1)])
    result = run_cli(write_history(tmp_path / "clean.jsonl", clean.events))
    assert result.returncode == 0, result.stderr
    assert "verdict: VALID" in result.stdout
    lost = Builder()
    lost.send(1, offset=0)
    lost.drain(T0, [])
    result = run_cli(write_history(tmp_path / "lost.jsonl", lost.events), "--json")
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["counts"]["lost-write"] == 1
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("not json\n{}\n")
    result = run_cli(garbage)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr


def test_the_summary_names_the_anomalies(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    lost = Builder()
    lost.send(1, offset=0)
    lost.drain(T0, [])
    lost.fault("pause", "start")
    lost.fault("pause", "stop")
    assert main([str(write_history(tmp_path / "lost.jsonl", lost.events))]) == 1
    out = capsys.readouterr().out
    assert "verdict: INVALID" in out and "e.g. lost-write" in out and "fault pause" in out


def test_the_cli_reads_what_history_writes_and_forgives_a_torn_last_line(
        tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    history = History(path)
    invocation = history.invoke("producer-1", "send", {
        "topic": "t", "partition": 0, "key": None, "value": 1, "producer": "p1",
        "idempotent": True})
    history.complete(invocation, "ok", {"offset": 0})
    history.record_ok("drainer", "drain", {"topic": "t", "partition": 0,
                                           "isolation": RU, "records": [[0, 1]],
                                           "end_offset": 1})
    history.close()
    with path.open("a") as file:
        file.write('{"index": 3, "time": 0.1, "ro')
    assert check(read_history(path)).valid
    assert main([str(path)]) == 0


@pytest.mark.parametrize("content", [
    "not json\n{}\n",
    '{"index": 0, "time": 0, "round": 0, "process": "p", "type": "ok", "f": "send",'
    ' "value": {"topic": 5, "partition": 0, "value": 1}}\n',
    '{"index": 0, "time": 0, "round": 0, "process": "p", "type": "maybe", "f": "send",'
    ' "value": {}}\n',
    '{"index": 0, "time": 0, "round": 0, "process": "p", "type": "ok", "f": "drain",'
    ' "value": {"topic": "t", "partition": 0, "records": {"a": 1}}}\n',
    "[]\n",
    "[" * 100_000 + "\n",  # deeper than the JSON parser's recursion
    "",
    "\udcff",
    None,
])
def test_unreadable_input_exits_2_with_a_message(tmp_path: Path, content: str | None,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "history.jsonl"
    if content is not None:  # None: the file does not exist
        path.write_bytes(content.encode("utf-8", "surrogateescape"))
    assert main([str(path)]) == 2
    assert capsys.readouterr().err.startswith("error: ")
