"""The history of a chaos run: every operation a client invoked and how it completed.

Jepsen's model. An operation is invoked, then completes exactly once as `ok` (it happened),
`fail` (it certainly did not happen) or `info` (unknown: a timeout, a lost connection).
The checker (`checker.py`) reads nothing else, so a history file alone replays the verdict.

One event per line of `history.jsonl`:

    {"index": 17, "time": 3.214, "round": 0, "process": "producer-2", "type": "invoke",
     "f": "send", "value": {...}}

`index` counts from 0 in the order events were recorded; `time` is seconds since the history
began (monotonic clock); `process` names one client thread (or "nemesis" for faults,
"drainer" for the final reads). A completion repeats the invocation's `process` and `f` and
carries the invocation's `index` as `"invoke": i`; its `value` is the invocation's value
with the results added.

The operations (`f`) and their values; values written to topics are unique integers of the
whole run (`History.next_value()`), written as ASCII decimal in the record value:

- "send": {"topic", "partition", "key", "value": int, "producer": instance id (a new one
  after each re-creation), "idempotent": bool}; ok adds "offset".
- "poll": {"consumer": instance id, "group": str | None, "isolation": "read_committed" |
  "read_uncommitted"}; ok adds "records": [[topic, partition, offset, value], ...] in the
  order the client returned them (value None for a tombstone or a non-integer value).
- "assign": ok only, {"consumer", "mode": "subscribe" | "assign", "partitions": [[topic,
  partition], ...]}: the consumer's whole assignment from now on (after a rebalance, an
  assign() or a seek); positions of partitions in it may jump from here.
- "commit": {"consumer", "group", "offsets": [[topic, partition, next offset], ...]}.
- "txn": {"producer", "transactional_id", "sends": [{"topic", "partition", "key",
  "value"}, ...], "reads": [[topic, partition, offset, value], ...]}; ok (committed) adds
  "offsets": [offset of each send, None where unknown]; fail means aborted.
- "drain": the final read of one partition after the faults healed: {"topic", "partition",
  "isolation"}; ok adds "records": [[offset, value], ...], every record from the log start
  to the end offset the drain reached, and "end_offset".
- "admin": {"action": "create-topic" | "delete-topic" | "reassign" | "elect-leaders" |
  "describe-topics", ...action's fields}; ok adds the action's result.
  describe-topics: {"asked": [topic, ...]}; ok adds "topics": {name: partition count}.
- "fault": process "nemesis", ok only: {"kind", "phase": "start" | "stop", "detail"}.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

__all__ = ["Event", "History", "read_history"]

EventType = Literal["invoke", "ok", "fail", "info"]


@dataclass(frozen=True, slots=True)
class Event:
    index: int
    time: float
    round: int
    process: str
    type: EventType
    f: str
    value: dict[str, Any]
    invoke: int | None = None  # a completion's invocation

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"index": self.index, "time": round(self.time, 6),
                                "round": self.round, "process": self.process,
                                "type": self.type, "f": self.f, "value": self.value}
        if self.invoke is not None:
            data["invoke"] = self.invoke
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Event:
        return cls(index=int(data["index"]), time=float(data["time"]),
                   round=int(data["round"]), process=str(data["process"]),
                   type=data["type"], f=str(data["f"]), value=dict(data["value"]),
                   invoke=None if data.get("invoke") is None else int(data["invoke"]))


class History:
    """Thread-safe recorder: client threads invoke and complete operations concurrently.
    Events are kept in memory (the checker needs them all) and, given a path, appended to
    it as they happen, so a run that dies still leaves its history."""

    def __init__(self, path: Path | None = None, *, round_: int = 0) -> None:
        self.events: list[Event] = []
        self.round = round_
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._next_value = 0
        self._file: IO[str] | None = path.open("a", encoding="utf-8") if path else None

    def next_value(self) -> int:
        with self._lock:
            self._next_value += 1
            return self._next_value

    def invoke(self, process: str, f: str, value: dict[str, Any]) -> Event:
        return self._record(process, "invoke", f, value, None)

    def complete(self, invocation: Event, type_: EventType,
                 results: dict[str, Any] | None = None) -> Event:
        if type_ == "invoke":
            raise ValueError("a completion is ok, fail or info")
        value = {**invocation.value, **(results or {})}
        return self._record(invocation.process, type_, invocation.f, value, invocation.index)

    def record_ok(self, process: str, f: str, value: dict[str, Any]) -> Event:
        """An operation with no separate invocation (assign, fault, drain bookkeeping)."""
        return self._record(process, "ok", f, value, None)

    def _record(self, process: str, type_: EventType, f: str, value: dict[str, Any],
                invoke: int | None) -> Event:
        with self._lock:
            event = Event(len(self.events), time.monotonic() - self._start, self.round,
                          process, type_, f, value, invoke)
            self.events.append(event)
            if self._file is not None:
                self._file.write(json.dumps(event.to_json(), separators=(",", ":")) + "\n")
            return event

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def read_history(path: Path) -> list[Event]:
    """Events of a history file; a torn last line (the run died mid-write) is dropped."""
    events: list[Event] = []
    with path.open(encoding="utf-8") as file:
        for line in file:
            try:
                events.append(Event.from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError):
                break
    return events
