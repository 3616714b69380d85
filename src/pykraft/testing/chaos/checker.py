"""Jepsen's Kafka anomalies, computed from a chaos history (`history.py`) alone.

Theory of operation. A history is every operation a client invoked and how it completed
(`ok` happened, `fail` certainly did not, `info` unknown), plus the final `drain` reads of
every partition after the faults healed. The checker first normalises the events into
writes (one per value: who wrote it, in which partition, acknowledged at which offset),
transactions, polls, assignments, drains, admin operations and fault windows, rejecting a
malformed event with `HistoryError` (a readable message naming the event). Then each check
is one pass over those, keyed by (topic, partition), so a million events check in seconds:

- lost-write: an acknowledged value (an ok send, or a value of a committed txn) is absent
  from its partition's drain, or the drain holds another value at its acknowledged offset.
  Plain sends are judged against the read_uncommitted drain, txn values against the
  read_committed one (each falls back to the other if it is the only one); a partition
  without an ok drain is not judged (counted as `values-unchecked`). A value a consumer
  read (poll or txn read) and the drain of its isolation lacks is lost too, acknowledged
  or not: consumers read only committed data, which must never disappear.
- duplicate: a value observed at two or more offsets (drains, polls, txn reads) that an
  idempotent producer or a txn wrote; `duplicate-nonidempotent` when a producer without
  idempotence wrote it (its retries may duplicate: allowed).
- reorder: one idempotent producer instance's values in a partition's drain are not in the
  order it invoked their sends (event indexes; within a txn, its list order);
  `reorder-nonidempotent` for producers without idempotence (allowed).
- inconsistent-offset: one (topic, partition, offset) observed with two values anywhere.
- aborted-read: a read_committed poll, drain or txn read returns a value of an aborted txn.
  failed-write-visible: a value whose send failed definitely is seen anywhere.
- non-atomic-txn: some of a txn's values are in the read_committed drains, some are not.
- g1c: a cycle among committed txns over wr edges (T2 read a value T1 wrote) and ww edges
  (T1's value precedes T2's in a partition's drain) that holds at least one wr edge. A cycle
  of ww edges only is `g0`, reported but allowed: Kafka's transactions do not isolate
  writes, so two concurrent txns interleave their records in a partition (Jepsen's Redpanda
  analysis, "write cycles", and Kafka's answer to it).
- lost-metadata: a topic created (ok), never deleted since, missing from the final
  describe-topics; or a topic deleted (ok), never re-created since, still listed.
- poll-skip / nonmonotonic-poll (reported): one consumer instance's consecutive records of
  a partition (no assignment that includes it in between) jump over a record the drain
  holds, or go back (b <= a). Gaps that control records and aborted data leave are absent
  from drains, so they are not skips.
- unacknowledged-visible (reported, count only): values of `info` sends seen in drains.

Unavailability: for each fault window (its start to its stop, extended to the first ok
write after the stop) the longest interval without an ok send or txn completion, the longest
without a poll that returned records, the longest that any one partition written before the
fault went without an ok write (a stalled leader shows there while other partitions keep
writing), and the recovery time from the stop to that first ok write; plus the longest such
gaps in the whole history. A write is an ok `send` or a committed `txn`, so every workload
that writes has them. Seconds, rounded to 3 decimals:

    {"by_fault": {"partition": [{"start": 12.5, "stop": 27.5, "longest_gap_s": 9.1,
                                 "longest_poll_gap_s": 11.0, "longest_partition_gap_s": 9.8,
                                 "stalled_partition": ["t", 2], "recovery_s": 0.8}, ...], ...},
     "whole_history": {"longest_gap_s": 9.1, "from": 14.2, "longest_poll_gap_s": 11.0,
                       "poll_gap_from": 13.9}}

`python -m pykraft.testing.chaos.checker history.jsonl [--json]` prints the verdict and
exits 0 if valid, 1 if not, 2 if the history cannot be read.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import json
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykraft.testing.chaos.history import Event

__all__ = ["ERROR_KINDS", "REPORTED_KINDS", "HistoryError", "Verdict", "check", "main"]

ERROR_KINDS = ("lost-write", "duplicate", "reorder", "inconsistent-offset", "aborted-read",
               "failed-write-visible", "non-atomic-txn", "g1c", "lost-metadata")
REPORTED_KINDS = ("poll-skip", "nonmonotonic-poll", "duplicate-nonidempotent",
                  "reorder-nonidempotent", "unacknowledged-visible", "g0")
EXAMPLES_MAX = 20  # per kind; every occurrence is still counted
COUNT_ONLY_KINDS = frozenset({"unacknowledged-visible"})
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"

TopicPartition = tuple[str, int]


class HistoryError(ValueError):
    """The history cannot be checked: a malformed event or an unreadable file."""


@dataclass(slots=True)
class Verdict:
    valid: bool
    anomalies: dict[str, list[dict[str, Any]]]  # kind -> up to EXAMPLES_MAX examples
    counts: dict[str, int]  # every anomaly kind (0 included) and the operation counts
    unavailability: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "anomalies": self.anomalies, "counts": self.counts,
                "unavailability": self.unavailability}

    def summary(self) -> str:
        """A readable verdict: the headline, every anomaly count, examples, operations."""
        lines = [f"verdict: {'VALID' if self.valid else 'INVALID'}"]
        for title, kinds in (("errors", ERROR_KINDS), ("reported (allowed)", REPORTED_KINDS)):
            lines.append(f"{title}:")
            lines.extend(f"  {kind:<26}{self.counts[kind]}" for kind in kinds)
        for kind in ERROR_KINDS:
            for example in self.anomalies.get(kind, [])[:3]:
                lines.append(f"  e.g. {kind}: {json.dumps(example, sort_keys=True)}")
        ops = [key for key in self.counts if key not in ERROR_KINDS + REPORTED_KINDS]
        lines.append("operations: " + ", ".join(f"{key} {self.counts[key]}" for key in ops))
        whole = self.unavailability["whole_history"]
        lines.append(f"longest gap without an ok write: {whole['longest_gap_s']:.3f} s, "
                     f"without records polled: {whole['longest_poll_gap_s']:.3f} s")
        for kind, windows in sorted(self.unavailability["by_fault"].items()):
            worst = max(window["longest_gap_s"] for window in windows)
            stalled = max(window["longest_partition_gap_s"] for window in windows)
            recoveries = [w["recovery_s"] for w in windows if w["recovery_s"] is not None]
            recovery = f"{max(recoveries):.3f} s" if recoveries else "none"
            lines.append(f"  fault {kind}: {len(windows)} window(s), longest gap "
                         f"{worst:.3f} s (one partition: {stalled:.3f} s), slowest recovery "
                         f"{recovery}")
        return "\n".join(lines)


# --- the normalised history ---------------------------------------------------------------


@dataclass(slots=True)
class Write:
    """One value written by a send, or as one of a txn's sends."""
    value: int
    tp: TopicPartition
    transactional: bool
    outcome: str  # "ok" | "fail" | "info" (a txn's outcome for its values)
    order: tuple[int, int]  # (invocation index, position in the txn): invocation order
    producer: tuple[str, str]  # (process, producer instance id)
    idempotent: bool
    offset: int | None
    txn: int | None  # the txn's invocation index


@dataclass(slots=True)
class Txn:
    invoke: int
    process: str
    outcome: str
    values: list[int]
    reads: list[tuple[TopicPartition, int, int | None]]


@dataclass(slots=True)
class Drain:
    index: int
    tp: TopicPartition
    isolation: str
    records: list[tuple[int, int | None]]  # sorted by offset
    end_offset: int | None
    offsets: list[int] = field(default_factory=list)  # sorted, for bisect
    by_offset: dict[int, int | None] = field(default_factory=dict)
    first_offset_of: dict[int, int] = field(default_factory=dict)  # value -> first offset

    def __post_init__(self) -> None:
        self.records.sort(key=lambda record: record[0])
        self.offsets = [offset for offset, _ in self.records]
        for offset, value in self.records:
            self.by_offset.setdefault(offset, value)
            if value is not None:
                self.first_offset_of.setdefault(value, offset)

    def holds_between(self, low: int, high: int) -> int | None:
        """An offset strictly between low and high that holds a record, or None."""
        at = bisect.bisect_right(self.offsets, low)
        if at < len(self.offsets) and self.offsets[at] < high:
            return self.offsets[at]
        return None


@dataclass(slots=True)
class Poll:
    index: int
    consumer: tuple[str, str]
    isolation: str
    records: list[tuple[TopicPartition, int, int | None]]


@dataclass(slots=True)
class Admin:
    invoke: int
    completion: int | None  # None: never completed
    outcome: str
    action: str
    topic: str | None
    listed: set[str] | None  # describe-topics ok: the topics it listed


@dataclass(slots=True)
class Parsed:
    writes: dict[int, Write] = field(default_factory=dict)
    txns: list[Txn] = field(default_factory=list)
    polls: list[Poll] = field(default_factory=list)
    assigns: list[tuple[int, tuple[str, str], list[TopicPartition]]] = field(
        default_factory=list)
    drains: list[Drain] = field(default_factory=list)
    admins: list[Admin] = field(default_factory=list)
    faults: list[tuple[float, str, str]] = field(default_factory=list)  # time, kind, phase
    write_ok_times: list[float] = field(default_factory=list)
    # per partition, for the longest time one partition went without an ok write: a fault
    # that stalls one leader's partitions shows there while the others keep writing
    partition_ok_times: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    poll_ok_times: list[float] = field(default_factory=list)  # polls that returned records
    start_time: float = 0.0
    end_time: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, key: str, increment: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + increment


OP_COUNTS = ("sends-ok", "sends-fail", "sends-info", "polls", "assigns", "commits",
             "txns-committed", "txns-aborted", "txns-unknown", "drains", "drains-incomplete",
             "admin-ok", "admin-fail", "admin-info", "faults", "values-unchecked",
             "values-reused")


def _tp(topic: Any, partition: Any) -> TopicPartition:
    if not isinstance(topic, str):
        raise TypeError(f"topic {topic!r} is not a string")
    return topic, _int(partition)


def _int(value: Any) -> int:
    if type(value) is int:  # the common case first: a million events go through here
        return value
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"{value!r} is not an integer")
    return int(value)


def _opt_int(value: Any) -> int | None:
    if type(value) is int or value is None:
        return value
    return _int(value)


def _read_records(raw: Any) -> list[tuple[TopicPartition, int, int | None]]:
    if not isinstance(raw, list):
        raise TypeError("records is not a list")
    return [(_tp(topic, partition), _int(offset), _opt_int(value))
            for topic, partition, offset, value in raw]


def _parse(events: Sequence[Event]) -> Parsed:
    parsed = Parsed(counts=dict.fromkeys(OP_COUNTS, 0))
    if events:
        parsed.start_time = events[0].time
        parsed.end_time = max(event.time for event in events)
    invocations: dict[int, Event] = {}
    for event in events:
        try:
            _parse_event(parsed, event, invocations)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise HistoryError(f"event {event.index} ({event.f} {event.type}) is malformed: "
                               f"{type(error).__name__}: {error}") from None
    # An invocation that never completed is unknown: it may or may not have happened.
    for event in invocations.values():
        try:
            _parse_event(parsed, Event(event.index, event.time, event.round, event.process,
                                       "info", event.f, event.value, event.index), {},
                         completed=False)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise HistoryError(f"event {event.index} ({event.f} invoke) is malformed: "
                               f"{type(error).__name__}: {error}") from None
    parsed.write_ok_times.sort()
    for times in parsed.partition_ok_times.values():
        times.sort()
    parsed.poll_ok_times.sort()
    return parsed


def _parse_event(parsed: Parsed, event: Event, invocations: dict[int, Event], *,
                 completed: bool = True) -> None:
    if event.type not in ("invoke", "ok", "fail", "info"):
        raise ValueError(f"unknown event type {event.type!r}")
    if event.type == "invoke":
        if event.f in ("send", "txn", "admin"):  # the others are judged on completion only
            invocations[event.index] = event
        return
    invoke = event.invoke if event.invoke is not None else event.index
    invocations.pop(invoke, None)
    value = event.value
    if event.f == "send":
        _parse_send(parsed, event, invoke, value)
    elif event.f == "txn":
        _parse_txn(parsed, event, invoke, value)
    elif event.f == "poll" and event.type == "ok":
        parsed.count("polls")
        parsed.poll_ok_times.append(event.time)
        consumer = (event.process, str(value.get("consumer")))
        isolation = str(value.get("isolation", READ_UNCOMMITTED))
        parsed.polls.append(Poll(event.index, consumer, isolation,
                                 _read_records(value.get("records", []))))
    elif event.f == "assign" and event.type == "ok":
        parsed.count("assigns")
        partitions = [_tp(topic, partition) for topic, partition in value["partitions"]]
        parsed.assigns.append((event.index, (event.process, str(value.get("consumer"))),
                               partitions))
    elif event.f == "commit":
        parsed.count("commits")
    elif event.f == "drain":
        if event.type != "ok":
            parsed.count("drains-incomplete")  # it did not reach the end: not judged
            return
        parsed.count("drains")
        records = [(_int(offset), _opt_int(record_value))
                   for offset, record_value in value["records"]]
        parsed.drains.append(Drain(event.index, _tp(value["topic"], value["partition"]),
                                   str(value.get("isolation", READ_UNCOMMITTED)), records,
                                   _opt_int(value.get("end_offset"))))
    elif event.f == "admin":
        _parse_admin(parsed, event, invoke, value, event.index if completed else None)
    elif event.f == "fault" and event.type == "ok":
        parsed.count("faults")
        parsed.faults.append((event.time, str(value["kind"]), str(value["phase"])))


def _parse_send(parsed: Parsed, event: Event, invoke: int, value: dict[str, Any]) -> None:
    parsed.count(f"sends-{event.type}")
    offset = _opt_int(value.get("offset")) if event.type == "ok" else None
    write = Write(_int(value["value"]), _tp(value["topic"], value["partition"]),
                  False, event.type, (invoke, 0),
                  (event.process, str(value.get("producer"))),
                  bool(value.get("idempotent", False)), offset, None)
    _add_write(parsed, write)
    if event.type == "ok":
        parsed.write_ok_times.append(event.time)
        parsed.partition_ok_times.setdefault(write.tp, []).append(event.time)


def _parse_txn(parsed: Parsed, event: Event, invoke: int, value: dict[str, Any]) -> None:
    outcome = event.type
    parsed.count({"ok": "txns-committed", "fail": "txns-aborted"}.get(outcome, "txns-unknown"))
    sends = value.get("sends", [])
    offsets = value.get("offsets") if outcome == "ok" else None
    if not isinstance(sends, list) or (offsets is not None and not isinstance(offsets, list)):
        raise TypeError("sends and offsets must be lists")
    txn = Txn(invoke, event.process, outcome, [], _read_records(value.get("reads", [])))
    producer = (event.process, str(value.get("producer")))
    for position, send in enumerate(sends):
        offset = _opt_int(offsets[position]) if offsets and position < len(offsets) else None
        write = Write(_int(send["value"]), _tp(send["topic"], send["partition"]), True,
                      outcome, (invoke, position), producer, True, offset, invoke)
        txn.values.append(write.value)
        _add_write(parsed, write)
        if outcome == "ok":
            parsed.partition_ok_times.setdefault(write.tp, []).append(event.time)
    parsed.txns.append(txn)
    if outcome == "ok":
        parsed.write_ok_times.append(event.time)


def _add_write(parsed: Parsed, write: Write) -> None:
    if write.value in parsed.writes:
        parsed.count("values-reused")  # values are unique per run: the first writer stands
        return
    parsed.writes[write.value] = write


def _parse_admin(parsed: Parsed, event: Event, invoke: int, value: dict[str, Any],
                 completion: int | None) -> None:
    parsed.count(f"admin-{event.type}")
    topic = value.get("topic", value.get("name"))
    listed: set[str] | None = None
    action = str(value.get("action"))
    if action == "describe-topics" and event.type == "ok":
        topics = value["topics"]
        if not isinstance(topics, dict | list):
            raise TypeError("describe-topics' topics is neither a map nor a list")
        listed = {str(name) for name in topics}
    parsed.admins.append(Admin(invoke, completion, event.type, action,
                               None if topic is None else str(topic), listed))


# --- the anomalies --------------------------------------------------------------------------


class Anomalies:
    """Counts every occurrence of each kind, keeps the first EXAMPLES_MAX examples."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = dict.fromkeys(ERROR_KINDS + REPORTED_KINDS, 0)
        self.examples: dict[str, list[dict[str, Any]]] = {}

    def add(self, kind: str, example: dict[str, Any]) -> None:
        self.counts[kind] += 1
        if kind in COUNT_ONLY_KINDS:
            return
        examples = self.examples.setdefault(kind, [])
        if len(examples) < EXAMPLES_MAX:
            examples.append(example)


class Drains:
    """The drain each check judges a partition by: the last ok one per isolation."""

    def __init__(self, drains: Iterable[Drain]) -> None:
        self.by_isolation: dict[tuple[TopicPartition, str], Drain] = {}
        for drain in drains:  # in index order: a later drain of the same partition wins
            self.by_isolation[(drain.tp, drain.isolation)] = drain

    def get(self, tp: TopicPartition, isolation: str) -> Drain | None:
        return self.by_isolation.get((tp, isolation))

    def for_write(self, write: Write) -> Drain | None:
        first, second = ((READ_COMMITTED, READ_UNCOMMITTED) if write.transactional
                         else (READ_UNCOMMITTED, READ_COMMITTED))
        return self.get(write.tp, first) or self.get(write.tp, second)

    def matching(self, tp: TopicPartition, isolation: str) -> Drain | None:
        other = READ_UNCOMMITTED if isolation == READ_COMMITTED else READ_COMMITTED
        return self.get(tp, isolation) or self.get(tp, other)

    def partitions(self) -> set[TopicPartition]:
        return {tp for tp, _ in self.by_isolation}


def _observations(parsed: Parsed) -> Iterator[tuple[str, int, TopicPartition, int,
                                                     int | None, str]]:
    """Every record anyone read: (source, event index, tp, offset, value, isolation)."""
    for drain in parsed.drains:
        for offset, value in drain.records:
            yield "drain", drain.index, drain.tp, offset, value, drain.isolation
    for poll in parsed.polls:
        for tp, offset, value in poll.records:
            yield "poll", poll.index, tp, offset, value, poll.isolation
    for txn in parsed.txns:  # the read-process-write consumer reads read_committed
        for tp, offset, value in txn.reads:
            yield "txn-read", txn.invoke, tp, offset, value, READ_COMMITTED


def _acknowledged(parsed: Parsed) -> Iterator[tuple[TopicPartition, int, int, str, int]]:
    """Every acknowledged offset: (tp, offset, value, "send" | "txn", invocation index)."""
    for write in parsed.writes.values():
        if write.offset is not None and write.outcome == "ok":
            yield (write.tp, write.offset, write.value,
                   "txn" if write.transactional else "send", write.order[0])


def _check_offsets(parsed: Parsed, anomalies: Anomalies) -> None:
    """inconsistent-offset: one (topic, partition, offset) seen with two values."""
    seen: dict[TopicPartition, dict[int, int]] = {}  # tp -> offset -> first value seen
    first_seen: dict[tuple[TopicPartition, int], tuple[str, int]] = {}  # only if it conflicts
    conflicts: dict[tuple[TopicPartition, int], tuple[int, str, int]] = {}
    for tp, offset, value, _, _ in _acknowledged(parsed):
        seen.setdefault(tp, {}).setdefault(offset, value)
    for source, index, tp, offset, observed, _ in _observations(parsed):
        if observed is None:  # a tombstone or foreign bytes: no value to compare
            continue
        offsets = seen.get(tp)
        if offsets is None:
            offsets = seen[tp] = {}
        first = offsets.setdefault(offset, observed)
        if first != observed and (tp, offset) not in conflicts:
            conflicts[(tp, offset)] = (observed, source, index)
    if not conflicts:
        return
    # A second pass, only when something conflicts, finds who saw each first value.
    for tp, offset, _, source, index in _acknowledged(parsed):
        first_seen.setdefault((tp, offset), (source, index))
    for source, index, tp, offset, _, _ in _observations(parsed):
        if (tp, offset) in conflicts:
            first_seen.setdefault((tp, offset), (source, index))
    for (tp, offset), (value, source, index) in conflicts.items():
        anomalies.add("inconsistent-offset", {
            "topic": tp[0], "partition": tp[1], "offset": offset,
            "values": [seen[tp][offset], value],
            "sources": [list(first_seen[(tp, offset)]), [source, index]]})


def _check_lost(parsed: Parsed, drains: Drains, anomalies: Anomalies) -> None:
    """lost-write: an acknowledged or consumed value its partition's drain does not hold."""
    lost: set[int] = set()
    for write in parsed.writes.values():
        if write.outcome != "ok":
            continue
        drain = drains.for_write(write)
        if drain is None:
            parsed.count("values-unchecked")
            continue
        found = drain.first_offset_of.get(write.value)
        held = drain.by_offset.get(write.offset) if write.offset is not None else None
        if found is None:
            reason = "absent from the drain"
        elif held is not None and held != write.value:
            reason = f"the drain holds value {held} at its acknowledged offset"
        else:
            continue
        lost.add(write.value)
        anomalies.add("lost-write", {
            "topic": write.tp[0], "partition": write.tp[1], "value": write.value,
            "offset": write.offset, "process": write.producer[0], "invoke": write.order[0],
            "txn": write.txn, "drain": drain.index, "drain_end_offset": drain.end_offset,
            "reason": reason})
    # A consumer reads only below the high watermark (or the last stable offset), so what
    # it read was committed, acknowledged or not, and must stay (Kafka's promise).
    for source, index, tp, offset, value, isolation in _observations(parsed):
        if source == "drain" or value is None or value in lost:
            continue
        drain = drains.matching(tp, isolation)
        if drain is None or value in drain.first_offset_of:
            continue
        if drain.isolation == READ_COMMITTED and isolation != READ_COMMITTED:
            continue  # read_uncommitted saw aborted or undecided data: rightly not there
        writer = parsed.writes.get(value)
        if writer is not None and writer.outcome == "fail":
            continue  # an aborted read or a failed write seen: reported as such
        lost.add(value)
        anomalies.add("lost-write", {
            "topic": tp[0], "partition": tp[1], "value": value, "offset": offset,
            "seen_by": source, "event": index, "drain": drain.index,
            "drain_end_offset": drain.end_offset,
            "reason": "read by a consumer, absent from the drain"})


def _check_duplicates(parsed: Parsed, anomalies: Anomalies) -> None:
    """duplicate(-nonidempotent): one value at two or more offsets."""
    first: dict[int, tuple[TopicPartition, int]] = {}
    more: dict[int, set[tuple[TopicPartition, int]]] = {}
    for _, _, tp, offset, value, _ in _observations(parsed):
        if value is None:
            continue
        position = first.setdefault(value, (tp, offset))
        if position != (tp, offset):
            more.setdefault(value, set()).add((tp, offset))
    for value, others in more.items():
        write = parsed.writes.get(value)
        promised = write is None or write.transactional or write.idempotent
        positions = sorted({first[value], *others})
        anomalies.add("duplicate" if promised else "duplicate-nonidempotent", {
            "value": value, "positions": [[tp[0], tp[1], offset] for tp, offset in positions],
            "process": None if write is None else write.producer[0],
            "producer": None if write is None else write.producer[1],
            "invoke": None if write is None else write.order[0]})


def _check_reorder(parsed: Parsed, drains: Drains, anomalies: Anomalies) -> None:
    """reorder(-nonidempotent): a producer's values out of invocation order in a drain."""
    for tp in drains.partitions():
        plain = drains.matching(tp, READ_UNCOMMITTED)
        transactional = drains.matching(tp, READ_COMMITTED)
        if plain is transactional:
            _reorder_in(plain, {False, True}, parsed, anomalies)
        else:
            _reorder_in(plain, {False}, parsed, anomalies)
            _reorder_in(transactional, {True}, parsed, anomalies)


def _reorder_in(drain: Drain | None, transactional: set[bool], parsed: Parsed,
                anomalies: Anomalies) -> None:
    if drain is None:
        return
    last: dict[tuple[str, str], tuple[tuple[int, int], int, int]] = {}
    seen: set[int] = set()
    for offset, value in drain.records:
        if value is None or value in seen:
            continue  # a duplicate's later copy is the duplicate check's business
        seen.add(value)
        write = parsed.writes.get(value)
        if write is None or write.transactional not in transactional:
            continue
        previous = last.get(write.producer)
        if previous is not None and write.order < previous[0]:
            kind = "reorder" if write.idempotent else "reorder-nonidempotent"
            anomalies.add(kind, {
                "topic": drain.tp[0], "partition": drain.tp[1], "process": write.producer[0],
                "producer": write.producer[1], "drain": drain.index,
                "earlier": {"value": previous[1], "offset": previous[2],
                            "invoke": previous[0][0]},
                "later": {"value": value, "offset": offset, "invoke": write.order[0]}})
        last[write.producer] = (write.order, value, offset)


def _check_visibility(parsed: Parsed, anomalies: Anomalies) -> None:
    """aborted-read, failed-write-visible, unacknowledged-visible: once per value."""
    reported: set[tuple[str, int]] = set()
    for source, index, tp, offset, value, isolation in _observations(parsed):
        write = None if value is None else parsed.writes.get(value)
        if write is None or value is None:
            continue
        kind = None
        if write.transactional:
            if write.outcome == "fail" and isolation == READ_COMMITTED:
                kind = "aborted-read"
        elif write.outcome == "fail":
            kind = "failed-write-visible"
        elif write.outcome == "info" and source == "drain":
            kind = "unacknowledged-visible"
        if kind is None or (kind, value) in reported:
            continue
        reported.add((kind, value))
        anomalies.add(kind, {"topic": tp[0], "partition": tp[1], "offset": offset,
                             "value": value, "seen_by": source, "event": index,
                             "isolation": isolation, "writer": write.producer[0],
                             "invoke": write.order[0], "txn": write.txn})


def _check_atomicity(parsed: Parsed, drains: Drains, anomalies: Anomalies) -> None:
    """non-atomic-txn: a txn partly visible in the read_committed drains."""
    for txn in parsed.txns:
        visible: list[int] = []
        missing: list[int] = []
        for value in txn.values:
            write = parsed.writes[value]
            if write.txn != txn.invoke:
                continue  # a reused value: judged with its first writer
            drain = drains.get(write.tp, READ_COMMITTED)
            if drain is not None:
                (visible if value in drain.first_offset_of else missing).append(value)
        if visible and missing:
            anomalies.add("non-atomic-txn", {"txn": txn.invoke, "process": txn.process,
                                             "outcome": txn.outcome, "visible": visible,
                                             "missing": missing})


def _check_cycles(parsed: Parsed, drains: Drains, anomalies: Anomalies) -> None:
    """g1c (a cycle with a wr edge) and g0 (ww edges only) among committed txns."""
    graph: dict[int, dict[int, str]] = {}

    def edge(source: int, target: int, label: str) -> None:
        if source != target:
            targets = graph.setdefault(source, {})
            if targets.get(target) != "wr":
                targets[target] = label
            graph.setdefault(target, {})

    committed = {txn.invoke for txn in parsed.txns if txn.outcome == "ok"}
    for txn in parsed.txns:
        if txn.outcome != "ok":
            continue
        for _, _, value in txn.reads:
            write = None if value is None else parsed.writes.get(value)
            if write is not None and write.txn is not None and write.txn in committed:
                edge(write.txn, txn.invoke, "wr")
    for tp in drains.partitions():
        drain = drains.matching(tp, READ_COMMITTED)
        assert drain is not None
        previous: int | None = None
        for _, value in drain.records:
            write = None if value is None else parsed.writes.get(value)
            if write is None or write.txn is None or write.txn not in committed:
                continue
            if previous is not None:
                edge(previous, write.txn, "ww")
            previous = write.txn
    for component in strongly_connected_components(graph):
        if len(component) < 2:
            continue
        members = set(component)
        inside = [(source, target, graph[source][target]) for source in component
                  for target in graph[source] if target in members]
        with_wr = [e for e in inside if e[2] == "wr"]
        source, target, _ = (with_wr or inside)[0]
        cycle = [source, *_path(graph, members, target, source)]
        steps = [{"from": a, "to": b, "edge": graph[a][b]}
                 for a, b in zip(cycle, cycle[1:], strict=False)]
        anomalies.add("g1c" if with_wr else "g0",
                      {"txns": sorted(component)[:50], "size": len(component),
                       "cycle": steps})


def _path(graph: dict[int, dict[int, str]], members: set[int], start: int,
          goal: int) -> list[int]:
    """A shortest path start .. goal inside one strongly connected component (BFS)."""
    parent: dict[int, int] = {start: start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            break
        for target in graph[node]:
            if target in members and target not in parent:
                parent[target] = node
                queue.append(target)
    path = [goal]
    while path[-1] != start:
        path.append(parent[path[-1]])
    return path[::-1]


def strongly_connected_components(graph: dict[int, dict[int, str]]) -> list[list[int]]:
    """Tarjan's algorithm with an explicit stack: no recursion, so any depth works."""
    index_of: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    components: list[list[int]] = []
    for root in graph:
        if root in index_of:
            continue
        work: list[tuple[int, Iterator[int]]] = [(root, iter(graph[root]))]
        index_of[root] = low[root] = len(index_of)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            advanced = False
            for target in targets:
                if target not in index_of:
                    index_of[target] = low[target] = len(index_of)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index_of[target])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index_of[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


def _check_polls(parsed: Parsed, drains: Drains, anomalies: Anomalies) -> None:
    """poll-skip and nonmonotonic-poll, per consumer instance and partition."""
    last: dict[tuple[str, str], dict[TopicPartition, tuple[int, int]]] = {}
    steps: list[tuple[int, Poll | None, tuple[str, str], list[TopicPartition]]] = [
        (index, None, consumer, partitions) for index, consumer, partitions in parsed.assigns]
    steps += [(poll.index, poll, poll.consumer, []) for poll in parsed.polls]
    steps.sort(key=lambda step: step[0])
    for index, poll, consumer, partitions in steps:
        positions = last.setdefault(consumer, {})
        if poll is None:  # a new assignment: positions of its partitions may jump
            for tp in partitions:
                positions.pop(tp, None)
            continue
        for tp, offset, value in poll.records:
            previous = positions.get(tp)
            positions[tp] = (offset, index)
            if previous is None or offset == previous[0] + 1:
                continue
            before, before_index = previous
            example = {"topic": tp[0], "partition": tp[1], "process": consumer[0],
                       "consumer": consumer[1], "from_offset": before, "to_offset": offset,
                       "from_event": before_index, "to_event": index, "value": value}
            if offset <= before:
                anomalies.add("nonmonotonic-poll", example)
                continue
            drain = drains.matching(tp, poll.isolation)
            skipped = None if drain is None else drain.holds_between(before, offset)
            if drain is not None and skipped is not None:
                anomalies.add("poll-skip", {**example, "skipped_offset": skipped,
                                            "skipped_value": drain.by_offset[skipped]})


def _check_metadata(parsed: Parsed, anomalies: Anomalies) -> None:
    """lost-metadata: the final describe-topics contradicts a create or a delete."""
    describes = [admin for admin in parsed.admins
                 if admin.action == "describe-topics" and admin.listed is not None]
    if not describes:
        return
    final = max(describes, key=lambda admin: admin.completion or admin.invoke)
    assert final.listed is not None

    # (action, topic) -> the last event at which it may have taken effect: its completion,
    # or forever if it never completed (it may still be applied)
    last_effect: dict[tuple[str, str | None], float] = {}
    for admin in parsed.admins:
        key = (admin.action, admin.topic)
        effect = float("inf") if admin.completion is None else admin.completion
        last_effect[key] = max(last_effect.get(key, -1.0), effect)

    def after(action: str, topic: str, index: int) -> bool:
        """Whether an `action` on `topic` may have happened after event `index`."""
        return last_effect.get((action, topic), -1.0) > index

    for admin in parsed.admins:
        if admin.outcome != "ok" or admin.topic is None or admin.completion is None:
            continue
        if admin.completion > final.invoke:
            continue  # not settled before the final describe began
        if admin.action == "create-topic":
            if admin.topic not in final.listed and not after("delete-topic", admin.topic,
                                                              admin.invoke):
                anomalies.add("lost-metadata", {"topic": admin.topic, "created": admin.invoke,
                                                "describe": final.invoke,
                                                "reason": "created, missing from describe"})
        elif admin.action == "delete-topic":
            if admin.topic in final.listed and not after("create-topic", admin.topic,
                                                          admin.invoke):
                anomalies.add("lost-metadata", {"topic": admin.topic, "deleted": admin.invoke,
                                                "describe": final.invoke,
                                                "reason": "deleted, still listed"})


# --- unavailability -------------------------------------------------------------------------


def _longest_gap(times: list[float], start: float, stop: float) -> tuple[float, float]:
    """The longest interval within [start, stop] without a time of `times` (sorted)."""
    low = bisect.bisect_right(times, start)
    high = bisect.bisect_left(times, stop)
    points = [start, *times[low:high], stop]
    gap, at = 0.0, start
    for before, after in zip(points, points[1:], strict=False):
        if after - before > gap:
            gap, at = after - before, before
    return gap, at


def _unavailability(parsed: Parsed) -> dict[str, Any]:
    times = parsed.write_ok_times
    by_fault: dict[str, list[dict[str, Any]]] = {}
    open_windows: dict[str, deque[float]] = {}
    windows: list[tuple[str, float, float | None]] = []
    for time, kind, phase in sorted(parsed.faults):
        if phase == "start":
            open_windows.setdefault(kind, deque()).append(time)
        elif phase == "stop" and open_windows.get(kind):
            windows.append((kind, open_windows[kind].popleft(), time))
    windows += [(kind, start, None) for kind, starts in open_windows.items() for start in starts]
    for kind, start, stop in sorted(windows, key=lambda window: window[1]):
        recovery: float | None = None
        end = parsed.end_time
        if stop is not None:
            after = bisect.bisect_left(times, stop)
            if after < len(times):
                end, recovery = times[after], times[after] - stop
        gap, _ = _longest_gap(times, start, max(end, start))
        poll_gap, _ = _longest_gap(parsed.poll_ok_times, start, max(end, start))
        partition_gap, stalled = 0.0, None
        for tp, partition_times in sorted(parsed.partition_ok_times.items()):
            if partition_times[0] >= start:
                continue  # not written before the fault: nothing to be stalled
            one, _ = _longest_gap(partition_times, start, max(end, start))
            if one > partition_gap:
                partition_gap, stalled = one, tp
        by_fault.setdefault(kind, []).append({
            "start": round(start, 3), "stop": None if stop is None else round(stop, 3),
            "longest_gap_s": round(gap, 3), "longest_poll_gap_s": round(poll_gap, 3),
            "longest_partition_gap_s": round(partition_gap, 3),
            "stalled_partition": None if stalled is None else list(stalled),
            "recovery_s": None if recovery is None else round(recovery, 3)})
    gap, at = _longest_gap(times, parsed.start_time, parsed.end_time)
    poll_gap, poll_at = _longest_gap(parsed.poll_ok_times, parsed.start_time, parsed.end_time)
    return {"by_fault": by_fault,
            "whole_history": {"longest_gap_s": round(gap, 3), "from": round(at, 3),
                              "longest_poll_gap_s": round(poll_gap, 3),
                              "poll_gap_from": round(poll_at, 3)}}


# --- entry points ---------------------------------------------------------------------------


def check(events: Sequence[Event]) -> Verdict:
    """The verdict on one history; raises HistoryError if an event is malformed."""
    # The checker builds millions of small tuples and creates no reference cycles; with
    # the collector on, its passes over that growing heap took 3/4 of the time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _check(events)
    finally:
        if collecting:
            gc.enable()


def _check(events: Sequence[Event]) -> Verdict:
    parsed = _parse(events)
    drains = Drains(parsed.drains)
    anomalies = Anomalies()
    _check_offsets(parsed, anomalies)
    _check_lost(parsed, drains, anomalies)
    _check_duplicates(parsed, anomalies)
    _check_reorder(parsed, drains, anomalies)
    _check_visibility(parsed, anomalies)
    _check_atomicity(parsed, drains, anomalies)
    _check_cycles(parsed, drains, anomalies)
    _check_polls(parsed, drains, anomalies)
    _check_metadata(parsed, anomalies)
    valid = all(anomalies.counts[kind] == 0 for kind in ERROR_KINDS)
    return Verdict(valid, anomalies.examples, {**anomalies.counts, **parsed.counts},
                   _unavailability(parsed))


def load(path: Path) -> list[Event]:
    """A history file's events. Unlike read_history, only a torn *last* line is forgiven:
    a bad line in the middle means the file is not a history, and the verdict would lie."""
    try:
        with path.open(encoding="utf-8") as file:
            lines = file.readlines()
    except (OSError, UnicodeDecodeError) as error:
        raise HistoryError(f"cannot read {path}: {error}") from None
    events: list[Event] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if not isinstance(data, dict) or not isinstance(data.get("value"), dict):
                raise TypeError("not an event object")
            if data.get("type") not in ("invoke", "ok", "fail", "info"):
                raise ValueError(f"unknown event type {data.get('type')!r}")
            events.append(Event.from_json(data))
        except (ValueError, KeyError, TypeError, RecursionError) as error:
            if number == len(lines) and not line.endswith("\n"):
                break  # the run died while writing its last event
            raise HistoryError(f"{path}:{number}: not a history event ({error})") from None
    if not events:
        raise HistoryError(f"{path} holds no events")
    return events


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pykraft.testing.chaos.checker",
        description="Check a chaos history (history.jsonl) for Jepsen's Kafka anomalies. "
                    "Exit status: 0 valid, 1 anomalies found, 2 unreadable history.")
    parser.add_argument("history", type=Path, help="the history.jsonl of one run")
    parser.add_argument("--json", action="store_true",
                        help="print the verdict as one JSON object instead of a summary")
    args = parser.parse_args(argv)
    try:
        verdict = check(load(args.history))
    except HistoryError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(verdict.to_json(), indent=2, sort_keys=True))
    else:
        print(verdict.summary())
    return 0 if verdict.valid else 1


if __name__ == "__main__":
    sys.exit(main())
