"""The final reads: after the faults healed and the clients stopped, every partition is read
from its log start to its end, one `drain` op per partition and isolation level.

The end is asked for first (ListOffsets through librdkafka's query_watermark_offsets, which
sends the consumer's isolation level: the high watermark for read_uncommitted, the last stable
offset for read_committed), then one consumer assigned to every partition reads until each
position reaches its end. A read_committed position can stop short of the end when the last
batches are control records (librdkafka moves the application's position only past records
it returns), so reaching the end is also recognised from the end-of-partition event, whose
offset is the fetch position. A drain that does not reach its end within the bound completes
as `info` with the reason: the checker ignores it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from pykraft.testing.chaos.history import Event, History
from pykraft.testing.chaos.workloads.common import (
    CONSUMER_CONFIG,
    client_config,
    decode_value,
    describe,
    log,
)

PROCESS = "drainer"
DRAIN_RECORDS_MAX = 1000


def drain_topics(bootstrap: str, history: History, topics: dict[str, int],
                 isolations: list[str], timeout_s: float) -> None:
    """Drain every partition of `topics` at each isolation level, within `timeout_s` in all."""
    deadline = time.monotonic() + timeout_s
    for i, isolation in enumerate(isolations):
        share = (deadline - time.monotonic()) / (len(isolations) - i)
        drain_partitions(bootstrap, history, topics, isolation, share)


def drain_partitions(bootstrap: str, history: History, topics: dict[str, int],
                     isolation: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    partitions = [(t, p) for t, count in sorted(topics.items()) for p in range(count)]
    invocations = {tp: history.invoke(PROCESS, "drain", {
        "topic": tp[0], "partition": tp[1], "isolation": isolation}) for tp in partitions}
    drain = _Drain(bootstrap, isolation, partitions)
    try:
        drain.run(deadline)
    except Exception as exception:  # noqa: BLE001 - every drain still completes, as info
        log.warning("drain (%s): %s", isolation, describe(exception))
        drain.failure = describe(exception)
    finally:
        drain.close()
    for tp, invocation in invocations.items():
        _complete(history, invocation, drain, tp)


def _complete(history: History, invocation: Event, drain: _Drain,
              tp: tuple[str, int]) -> None:
    end = drain.ends.get(tp)
    records = drain.records[tp]
    if end is not None and tp in drain.done:
        history.complete(invocation, "ok", {
            "records": [r for r in records if r[0] < end], "end_offset": end})
        return
    if end is None:
        why = f"end offset unknown ({drain.failure or 'ListOffsets did not answer'})"
    else:
        why = f"reached {drain.reached.get(tp, 0)} of end offset {end} in time"
    log.warning("drain of %s-%d (%s) incomplete: %s", tp[0], tp[1], drain.isolation, why)
    history.complete(invocation, "info", {"error": why, "end_offset": end,
                                          "records_read": len(records)})


class _Drain:
    def __init__(self, bootstrap: str, isolation: str,
                 partitions: list[tuple[str, int]]) -> None:
        self.isolation = isolation
        self.partitions = partitions
        self.consumer = Consumer(client_config(bootstrap, CONSUMER_CONFIG, {
            "group.id": f"chaos-drainer-{uuid.uuid4().hex[:8]}",  # never joined: assign()
            "isolation.level": isolation, "enable.partition.eof": True}))
        self.ends: dict[tuple[str, int], int] = {}
        self.records: dict[tuple[str, int], list[list[Any]]] = {tp: [] for tp in partitions}
        self.reached: dict[tuple[str, int], int] = {}
        self.done: set[tuple[str, int]] = set()
        self.failure = ""

    def run(self, deadline: float) -> None:
        self._query_ends(deadline)
        known = [tp for tp in self.partitions if tp in self.ends]
        for tp in known:
            if self.ends[tp] <= 0:
                self.done.add(tp)
        reading = [tp for tp in known if tp not in self.done]
        if not reading:
            return
        self.consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in reading])
        while len(self.done) < len(known) and time.monotonic() < deadline:
            timeout = max(0.0, min(1.0, deadline - time.monotonic()))
            for message in self.consumer.consume(num_messages=DRAIN_RECORDS_MAX,
                                                 timeout=timeout):
                topic, partition, offset = message.topic(), message.partition(), message.offset()
                if topic is None or partition is None or offset is None:
                    continue  # an error of the client, not of a partition
                tp = (topic, partition)
                if tp not in self.records:
                    continue
                error = message.error()
                if error is None:
                    self.records[tp].append([offset, decode_value(message.value())])
                    self._reached(tp, offset + 1)
                elif error.code() == KafkaError._PARTITION_EOF:
                    self._reached(tp, offset)
                else:
                    log.debug("drain (%s) %s-%d: %s", self.isolation, tp[0], tp[1], error)

    def _reached(self, tp: tuple[str, int], offset: int) -> None:
        self.reached[tp] = max(self.reached.get(tp, 0), offset)
        end = self.ends.get(tp)
        if end is not None and self.reached[tp] >= end:
            self.done.add(tp)

    def _query_ends(self, deadline: float) -> None:
        """Each partition's end, asked of its leader; retried until the deadline (a leader
        may still be moving just after the faults healed)."""
        while time.monotonic() < deadline:
            for topic, partition in self.partitions:
                if (topic, partition) in self.ends:
                    continue
                timeout = max(0.1, min(5.0, deadline - time.monotonic()))
                try:
                    _, high = self.consumer.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=timeout, cached=False)
                except KafkaException as exception:
                    self.failure = describe(exception)
                    continue
                if high >= 0:
                    self.ends[(topic, partition)] = high
            if len(self.ends) == len(self.partitions):
                return
            time.sleep(0.2)

    def close(self) -> None:
        try:
            self.consumer.close()
        except (KafkaException, RuntimeError) as exception:
            log.debug("drain: closing: %s", describe(exception))
