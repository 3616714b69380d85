"""The follower's decisions, one layer: real logs, leader answers built as kio entities."""

from __future__ import annotations

import asyncio
import contextlib
import math
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v15 import response as fetch_response

from pykraft.broker.replica_fetcher import (
    BrokerConnection,
    FetcherConfig,
    FetchRound,
    FetchState,
    ReplicaFetcher,
    append_from_leader,
    learn_from_leader,
    truncation_offset,
)
from pykraft.broker.replica_manager import Partition
from pykraft.protocol.entities import make
from pykraft.records.record import build_batch
from pykraft.storage.log import Log
from pykraft.storage.log_config import LogConfig

TOPIC_ID = uuid.UUID(int=9)


def batch(base_offset: int, epoch: int, count: int = 1) -> bytes:
    return build_batch([(b"k", b"v", [], 1_000) for _ in range(count)],
                       base_offset=base_offset, partition_leader_epoch=epoch)


def open_log(directory: Path) -> Log:
    return Log.open(directory / "t-0", LogConfig(), recovery_point=0, log_start_offset=None,
                    now_ms=0)


def follower_log(tmp_path: Path, epochs: list[tuple[int, int]]) -> Log:
    """A log with `count` one-record batches per (epoch, count)."""
    log = open_log(tmp_path)
    for epoch, count in epochs:
        for _ in range(count):
            log.append_as_follower(batch(log.log_end_offset, epoch))
    return log


def test_truncation_to_the_leaders_end_of_a_shared_epoch(tmp_path: Path) -> None:
    log = follower_log(tmp_path, [(1, 3), (2, 4)])  # epoch 1: 0-2, epoch 2: 3-6
    assert truncation_offset(log, 2, 5) == 5  # the leader's epoch 2 ended at 5
    assert truncation_offset(log, 2, 9) == 7  # never above our own end
    assert truncation_offset(log, 1, 3) == 3


def test_truncation_when_the_follower_lacks_the_leaders_epoch(tmp_path: Path) -> None:
    log = follower_log(tmp_path, [(1, 3), (3, 2)])  # epoch 1: 0-2, epoch 3: 3-4
    # the leader's epoch 2 ended at 10; our largest epoch <= 2 is 1, ending at 3: cut
    # there and ask again
    assert truncation_offset(log, 2, 10) == 3


def test_truncation_without_an_epoch_or_an_offset(tmp_path: Path) -> None:
    log = follower_log(tmp_path, [(1, 5)])
    log.update_high_watermark(2)
    assert truncation_offset(log, -1, 3) == 3
    assert truncation_offset(log, -1, -1) == 2  # nothing known: back to the HW
    empty = open_log(tmp_path / "empty")
    assert truncation_offset(empty, 4, 7) == 0


def test_append_from_leader_keeps_offsets_and_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    data = batch(0, 5, 3) + batch(3, 5, 2) + batch(5, 7, 1)
    assert append_from_leader(log, data, 0) == len(data)
    assert log.log_end_offset == 6
    assert log.leader_epoch_cache.entries == ((5, 0), (7, 5))
    # a repeat of what we have is skipped; the new part is appended
    assert append_from_leader(log, data + batch(6, 7, 1), 0) == len(batch(6, 7, 1))
    assert log.log_end_offset == 7
    log.check_invariants()


def test_append_from_leader_ignores_a_trailing_partial_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    whole = batch(0, 1, 2)
    assert append_from_leader(log, whole + batch(2, 1, 4)[:30], 0) == len(whole)
    assert log.log_end_offset == 2


def test_learn_from_leader_caps_the_hw_at_the_log_end(tmp_path: Path) -> None:
    log = follower_log(tmp_path, [(1, 5)])
    learn_from_leader(log, 9, 0)
    assert log.high_watermark == 5
    learn_from_leader(log, 3, 2)
    assert log.high_watermark == 3 and log.log_start_offset == 2


class NoConnection(BrokerConnection):
    def __init__(self) -> None:
        super().__init__(lambda: None, "test", 1000)


def fetcher_for(log: Log, epoch: int = 4) -> tuple[ReplicaFetcher, FetchState]:
    partition = Partition("t", TOPIC_ID, 0, log, leader_id=2, leader_epoch=epoch,
                          replicas=(1, 2), isr=(1, 2))
    fetcher = ReplicaFetcher(1, 2, NoConnection(), FetcherConfig(backoff_ms=50),
                             lambda: 7, lambda: 0)
    fetcher.add(partition)
    return fetcher, fetcher.states[("t", 0)]


def answer(records: bytes = b"", *, error: ErrorCode = ErrorCode.none, hw: int = -1,
           diverging: tuple[int, int] = (-1, -1)) -> Any:
    m = fetch_response
    return make(m.PartitionData, partition_index=0, error_code=error, high_watermark=hw,
                last_stable_offset=hw, log_start_offset=0, aborted_transactions=None,
                records=records, diverging_epoch=make(m.EpochEndOffset, epoch=diverging[0],
                                                      end_offset=diverging[1]))


def test_a_fetch_request_carries_the_follower_position(tmp_path: Path) -> None:
    log = follower_log(tmp_path, [(1, 2), (3, 1)])
    fetcher, state = fetcher_for(log)
    request, round_ = fetcher.build_request()
    wanted = request.topics[0].partitions[0]
    assert request.replica_state.replica_id == 1 and request.replica_state.replica_epoch == 7
    assert request.topics[0].topic_id == TOPIC_ID
    assert (wanted.fetch_offset, wanted.last_fetched_epoch, wanted.current_leader_epoch) == (
        3, 3, 4)
    assert round_.told == {(TOPIC_ID, 0): (3, 4, 3, 0)}


class ScriptedConnection(NoConnection):
    """Answers Fetch requests from a list, and keeps what was asked."""

    def __init__(self, answers: list[Any]) -> None:
        super().__init__()
        self.answers = answers
        self.requests: list[Any] = []

    async def request(self, api_key: int, version: int, request: Any,
                      extra_timeout_ms: int = 0) -> Any:
        self.requests.append(request)
        return self.answers.pop(0)


def fetch_answer(session_id: int, *partitions: Any,
                 error: ErrorCode = ErrorCode.none) -> Any:
    return make(fetch_response.FetchResponse, throttle_time=0, error_code=error,
                session_id=session_id, responses=(make(
                    fetch_response.FetchableTopicResponse, topic_id=TOPIC_ID,
                    partitions=partitions),) if partitions else ())


def scripted_fetcher(tmp_path: Path, count: int, config: FetcherConfig,
                     answers: list[Any] | None = None
                     ) -> tuple[ReplicaFetcher, ScriptedConnection, list[Log]]:
    """A fetcher from leader 2 of partitions 0..count-1 of "t" (each log at offset 1,
    epoch 2), over a ScriptedConnection with `answers`."""
    logs = [follower_log(tmp_path / str(i), [(1, 2)]) for i in range(count)]
    connection = ScriptedConnection(answers or [])
    fetcher = ReplicaFetcher(1, 2, connection, config, lambda: 7, lambda: 0)
    for index, log_ in enumerate(logs):
        fetcher.add(Partition("t", TOPIC_ID, index, log_, leader_id=2, leader_epoch=4,
                              replicas=(1, 2), isr=(1, 2)))
    return fetcher, connection, logs


async def test_a_fetch_session_names_only_what_changed(tmp_path: Path) -> None:
    """KIP-227 from the follower's side: a full fetch opens the session; then a request
    names only partitions whose position moved, and forgets those no longer fetched; a
    session error makes the next request a full one that opens a new session."""
    fetcher, connection, logs = scripted_fetcher(tmp_path, 3, FetcherConfig(backoff_ms=50))

    def asked(request: Any) -> set[int]:
        return {p.partition for topic in request.topics for p in topic.partitions}

    connection.answers = [fetch_answer(77, *(
        make(fetch_response.PartitionData, partition_index=i, error_code=ErrorCode.none,
             high_watermark=2, last_stable_offset=2, log_start_offset=0,
             aborted_transactions=None, records=b"") for i in range(3)))]
    await fetcher._fetch()
    first = connection.requests[-1]
    assert (first.session_id, first.session_epoch, asked(first)) == (0, 0, {0, 1, 2})
    assert (fetcher.session_id, fetcher.session_epoch) == (77, 1)

    # partition 1 gets records: only it is named next time, at its new position
    connection.answers = [fetch_answer(77, make(
        fetch_response.PartitionData, partition_index=1, error_code=ErrorCode.none,
        high_watermark=3, last_stable_offset=3, log_start_offset=0,
        aborted_transactions=None, records=batch(2, 4)))]
    await fetcher._fetch()
    assert asked(connection.requests[-1]) == set()
    assert logs[1].log_end_offset == 3
    connection.answers = [fetch_answer(77)]
    fetcher.remove(fetcher.states[("t", 2)].partition)  # partition 2 is not fetched any more
    await fetcher._fetch()
    second = connection.requests[-1]
    assert (second.session_id, second.session_epoch) == (77, 2)
    assert asked(second) == {1}
    assert second.topics[0].partitions[0].fetch_offset == 3
    assert [(t.topic_id, t.partitions) for t in second.forgotten_topics_data] == [
        (TOPIC_ID, (2,))]

    connection.answers = [fetch_answer(0, error=ErrorCode.invalid_fetch_session_epoch),
                          fetch_answer(78)]
    await fetcher._fetch()
    assert (fetcher.session_id, fetcher.session_epoch) == (0, 0)
    await fetcher._fetch()
    again = connection.requests[-1]
    assert (again.session_id, again.session_epoch, asked(again)) == (0, 0, {0, 1})
    assert (fetcher.session_id, fetcher.session_epoch) == (78, 1)


async def test_a_round_tells_a_bounded_number_and_the_rest_join_in_later_rounds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With more partitions than a round may tell, the first (full) fetch names as many
    as it may, asking the leader not to wait; the next rounds add the others to the
    session; once all were told the fetch waits for data again. Without a session each
    round is full and takes the next partitions, so that every one is fetched in turn."""
    monkeypatch.setattr(ReplicaFetcher, "TOLD_PER_ROUND_MAX", 2)
    fetcher, connection, _ = scripted_fetcher(
        tmp_path, 5, FetcherConfig(backoff_ms=50, wait_max_ms=500))

    def asked(request: Any) -> set[int]:
        return {p.partition for topic in request.topics for p in topic.partitions}

    rounds = []
    for _ in range(4):
        connection.answers = [fetch_answer(77)]
        await fetcher._fetch()
        request = connection.requests[-1]
        rounds.append((request.session_epoch, len(asked(request)),
                       request.max_wait.total_seconds()))
    assert rounds == [(0, 2, 0.0), (1, 2, 0.0), (2, 1, 0.5), (3, 0, 0.5)]
    told = [asked(request) for request in connection.requests[:3]]
    assert set().union(*told) == {0, 1, 2, 3, 4} and sum(map(len, told)) == 5

    fetcher.reset_session()
    connection.requests.clear()
    for _ in range(6):  # no room for a session at the leader: full fetches, in turn
        connection.answers = [fetch_answer(0)]
        await fetcher._fetch()
    told = [asked(request) for request in connection.requests]
    assert all(request.session_epoch == 0 for request in connection.requests)
    assert set().union(*told[:3]) == {0, 1, 2, 3, 4}
    assert set().union(*told[3:]) == {0, 1, 2, 3, 4}


async def test_a_round_looks_only_at_what_moved_and_all_of_it_now_and_then(
        tmp_path: Path) -> None:
    """A round builds its request from the partitions added, answered or delayed since
    the last one; a position that moved without the fetcher (retention moving a follower's
    log start) is told to the leader at the next look at all of them."""
    fetcher, connection, logs = scripted_fetcher(
        tmp_path, 3, FetcherConfig(backoff_ms=50), [fetch_answer(77)])
    now = asyncio.get_running_loop().time()
    fetcher._end_delays(now)  # the first look at all of them
    await fetcher._fetch()  # opens the session with the three
    assert not fetcher._dirty
    logs[2].update_high_watermark(2)
    logs[2].maybe_increment_log_start_offset(1)  # as retention would
    connection.answers = [fetch_answer(77)]
    await fetcher._fetch()
    assert connection.requests[-1].topics == ()  # not looked at: nothing told
    fetcher._end_delays(now + ReplicaFetcher.FULL_LOOK_S)
    connection.answers = [fetch_answer(77)]
    await fetcher._fetch()
    told = connection.requests[-1].topics[0].partitions
    assert [(p.partition, p.log_start_offset) for p in told] == [(2, 1)]


async def test_partitions_are_told_to_the_leader_oldest_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round tells the leader of at most TOLD_PER_ROUND_MAX partitions: the ones that
    waited longest, so that partitions added meanwhile (leaderships moving to this leader
    one batch after another) never keep an older one waiting."""
    monkeypatch.setattr(ReplicaFetcher, "TOLD_PER_ROUND_MAX", 2)
    fetcher, connection, logs = scripted_fetcher(tmp_path, 12, FetcherConfig(backoff_ms=50))
    while fetcher.session_epoch == 0 or fetcher._dirty:  # the session opens, all twelve
        connection.answers = [fetch_answer(77)]
        await fetcher._fetch()
    told = []
    for round_ in range(6):  # two positions move a round, in this order
        for index in (11 - 2 * round_, 2 * round_):
            logs[index].truncate_to(0)
            fetcher._dirty[(TOPIC_ID, index)] = None
        connection.answers = [fetch_answer(77)]
        await fetcher._fetch()
        told += [p.partition for t in connection.requests[-1].topics for p in t.partitions]
    assert told == [11, 0, 9, 2, 7, 4, 5, 6, 3, 8, 1, 10]


async def test_a_full_look_with_nothing_to_tell_sends_one_waiting_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At the look at all partitions, a round looks at a bounded slice of them; when the
    slices have nothing to tell the leader, the fetcher looks on instead of asking the
    leader for nothing without waiting: one request, which waits for data."""
    monkeypatch.setattr(ReplicaFetcher, "LOOKED_PER_ROUND_MAX", 2)
    fetcher, connection, _ = scripted_fetcher(
        tmp_path, 7, FetcherConfig(backoff_ms=50, wait_max_ms=500))
    while fetcher.session_epoch == 0 or fetcher._dirty:  # the session gets all seven
        connection.answers = [fetch_answer(77)]
        await fetcher._fetch()
    connection.requests.clear()
    fetcher._end_delays(asyncio.get_running_loop().time() + ReplicaFetcher.FULL_LOOK_S)
    assert not fetcher._dirty and sorted(fetcher._full_look) == sorted(fetcher._by_id)
    connection.answers = [fetch_answer(77)]
    await fetcher._fetch()
    assert [(r.topics, r.max_wait.total_seconds()) for r in connection.requests] == [
        ((), 0.5)]
    assert not fetcher._dirty and not fetcher._full_look


async def test_a_partition_back_from_a_delay_is_told_to_the_leader_again(
        tmp_path: Path) -> None:
    """The leader answered the session's only partition with an error (it had not applied
    the topic yet), so no request told it to forget the partition while it waited: when the
    wait is over, the partition is named again, for the leader to read it anew."""
    connection = ScriptedConnection([fetch_answer(77, answer(error=ErrorCode.unknown_topic_id))])
    fetcher = ReplicaFetcher(1, 2, connection, FetcherConfig(backoff_ms=50), lambda: 7,
                             lambda: 0)
    fetcher.add(Partition("t", TOPIC_ID, 0, follower_log(tmp_path, [(1, 2)]), leader_id=2,
                          leader_epoch=4, replicas=(1, 2), isr=(1, 2)))
    await fetcher._fetch()  # opens the session; the partition waits backoff_ms
    assert fetcher.session_id == 77 and len(fetcher._delayed) == 1
    fetcher._end_delays(asyncio.get_running_loop().time() + 1)
    request, _ = fetcher.build_request()
    assert (request.session_id, request.session_epoch) == (77, 1)
    assert [(t.topic_id, [p.partition for p in t.partitions]) for t in request.topics] == [
        (TOPIC_ID, [0])]


class RefusingConnection(ScriptedConnection):
    """Refused `refusals` times (a killed leader), then answers from the list; keeps when
    each request came (loop time)."""

    def __init__(self, refusals: int, answers: list[Any]) -> None:
        super().__init__(answers)
        self.refusals = refusals
        self.asked_at: list[float] = []

    async def request(self, api_key: int, version: int, request: Any,
                      extra_timeout_ms: int = 0) -> Any:
        self.asked_at.append(asyncio.get_running_loop().time())
        if self.refusals > 0:
            self.refusals -= 1
            self.requests.append(request)
            raise ConnectionRefusedError(111, "Connection refused")
        return await super().request(api_key, version, request, extra_timeout_ms)


async def test_a_refused_fetch_backs_off_the_fetcher_not_each_partition(
        tmp_path: Path) -> None:
    """A leader that cannot be reached: the fetcher asks again backoff_ms later, with a new
    session naming every partition, and no partition is delayed on its own (delaying each
    of 100,000 after every refusal held a broker's loop seconds at a time)."""
    fetcher, _, _ = scripted_fetcher(tmp_path, 3, FetcherConfig(backoff_ms=50))
    connection = RefusingConnection(3, [fetch_answer(77)])
    fetcher.connection = connection
    task = asyncio.create_task(fetcher.run())
    try:
        for _ in range(200):
            if len(connection.asked_at) >= 4:
                break
            assert not fetcher._delayed and not fetcher._delay_ends
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    asked = connection.asked_at[:4]
    assert len(asked) == 4
    assert all(later - earlier >= 0.045 for earlier, later in zip(asked, asked[1:], strict=False))
    final = connection.requests[3]
    assert (final.session_id, final.session_epoch) == (0, 0)  # a new session: full fetch
    assert sorted(p.partition for t in final.topics for p in t.partitions) == [0, 1, 2]


async def test_delays_end_in_their_order_and_a_later_delay_or_a_drop_wins(
        tmp_path: Path) -> None:
    """A delay ends when it is over and not before; a state delayed again keeps only its
    newest delay; one delayed until the metadata moves it, or dropped, never comes back."""
    fetcher, _, _ = scripted_fetcher(tmp_path, 4, FetcherConfig(backoff_ms=50))
    states = [fetcher.states[("t", i)] for i in range(4)]
    fetcher._full_look_at = math.inf  # no look at everything meanwhile
    fetcher._delay_until(states[0], 10.0)
    fetcher._delay_until(states[1], 20.0)
    fetcher._delay_until(states[2], 5.0)
    fetcher._delay_until(states[2], 30.0)  # delayed again: the 5.0 no longer counts
    fetcher._delay_until(states[3], 15.0)
    fetcher._delay_until(states[3], math.inf)  # until the metadata moves it
    fetcher._dirty.clear()
    assert fetcher._next_delay_end() == 10.0
    fetcher._end_delays(9.9)
    assert len(fetcher._delayed) == 4 and not fetcher._dirty
    fetcher._end_delays(15.0)
    assert set(fetcher._dirty) == {(TOPIC_ID, 0)}
    fetcher.remove(states[1].partition)  # dropped while delayed
    fetcher._dirty.clear()
    assert fetcher._next_delay_end() == 30.0
    fetcher._end_delays(1000.0)
    assert set(fetcher._dirty) == {(TOPIC_ID, 2)}
    assert list(fetcher._delayed) == [(TOPIC_ID, 3)] and fetcher._delay_ends == []
    assert fetcher._next_delay_end() == math.inf


async def test_the_fetcher_applies_records_divergence_and_errors(tmp_path: Path) -> None:
    log = follower_log(tmp_path, [(1, 2), (2, 3)])  # epoch 2 at 2-4, the leader's ended at 3
    fetcher, state = fetcher_for(log)
    fetcher.handle_partition(state, answer(diverging=(2, 3), hw=2))
    assert log.log_end_offset == 3 and log.leader_epoch_cache.entries == ((1, 0), (2, 2))
    fetcher.handle_partition(state, answer(batch(3, 4, 2), hw=4))
    assert log.log_end_offset == 5 and log.high_watermark == 4
    fetcher.handle_partition(state, answer(error=ErrorCode.offset_out_of_range))
    assert state.reset_needed
    state.reset_needed = False
    fetcher.handle_partition(state, answer(error=ErrorCode.fenced_leader_epoch))
    assert state.delayed_until == math.inf  # until the metadata moves the partition
    fetcher.add(state.partition)  # a new epoch from the metadata: fetching again
    assert fetcher.states[("t", 0)].delayed_until == 0
    fetcher.handle_partition(fetcher.states[("t", 0)],
                             answer(error=ErrorCode.not_leader_or_follower))
    assert 0 < fetcher.states[("t", 0)].delayed_until < math.inf


async def test_answers_for_an_old_epoch_or_a_moved_log_are_dropped(tmp_path: Path) -> None:
    log = follower_log(tmp_path, [(1, 2)])
    fetcher, state = fetcher_for(log)
    response = make(fetch_response.FetchResponse, throttle_time=0, error_code=ErrorCode.none,
                    session_id=0, responses=(make(
                        fetch_response.FetchableTopicResponse, topic_id=TOPIC_ID,
                        partitions=(answer(batch(2, 4), hw=3),)),))

    def told_at(offset: int) -> FetchRound:
        return FetchRound(False, {(TOPIC_ID, 0): (offset, 4, 1, 0)})

    state.partition.leader_epoch = 5  # the metadata moved on while the fetch was out
    fetcher.handle_response(told_at(2), response)
    assert log.log_end_offset == 2
    state.partition.leader_epoch = 4
    fetcher._dirty.clear()
    fetcher.handle_response(told_at(1), response)  # sent at 1: the log moved since
    assert log.log_end_offset == 2
    assert set(fetcher._dirty) == {(TOPIC_ID, 0)}  # its position is told again next round
    fetcher.handle_response(told_at(2), response)
    assert log.log_end_offset == 3


async def test_a_fenced_answer_to_an_older_epoch_does_not_park_the_new_one(
        tmp_path: Path) -> None:
    """The 100,000-partition restart after kill -9: fetches went out at the epochs of
    the loaded snapshot, the metadata then brought the new epochs (a new state each), and
    the leader's FENCED_LEADER_EPOCH for the old requests parked the new states until a
    metadata change that never came: 6,785 partitions stayed out of their ISRs."""
    log = follower_log(tmp_path, [(1, 2)])
    fetcher, _ = fetcher_for(log)
    _, round_ = fetcher.build_request()  # at epoch 4
    fenced = make(fetch_response.FetchResponse, throttle_time=0, error_code=ErrorCode.none,
                  session_id=0, responses=(make(
                      fetch_response.FetchableTopicResponse, topic_id=TOPIC_ID,
                      partitions=(answer(error=ErrorCode.fenced_leader_epoch),)),))
    partition = fetcher.states[("t", 0)].partition
    partition.leader_epoch = 5
    fetcher.add(partition)  # the metadata's new epoch, before the answer came
    fetcher.handle_response(round_, fenced)
    assert fetcher.states[("t", 0)].delayed_until == 0  # still fetched, at epoch 5
    request, round_ = fetcher.build_request()
    assert request.topics[0].partitions[0].current_leader_epoch == 5
    fetcher.handle_response(round_, fenced)  # fenced at the current epoch: it waits
    assert fetcher.states[("t", 0)].delayed_until == math.inf


@pytest.mark.parametrize("configs,expected", [
    ({}, FetcherConfig()),
    ({"replica.fetch.backoff.ms": "100", "replica.fetch.wait.max.ms": "200"},
     FetcherConfig(backoff_ms=100, wait_max_ms=200)),
])
def test_fetcher_config(configs: dict[str, str], expected: FetcherConfig) -> None:
    assert FetcherConfig.from_configs(configs) == expected


def test_an_empty_epoch_at_the_log_end_goes_with_the_truncation(tmp_path: Path) -> None:
    """A follower that led epoch 5 without writing: the leader (epoch 6) says its epoch 3
    ended at our log end; cutting there writes nothing but forgets epoch 5, so the next
    fetch carries epoch 3 and is accepted."""
    log = follower_log(tmp_path, [(3, 4)])
    log.assign_epoch_start(5)
    fetcher, state = fetcher_for(log, epoch=6)
    request, _ = fetcher.build_request()
    assert request.topics[0].partitions[0].last_fetched_epoch == 5
    fetcher.handle_partition(state, answer(diverging=(3, 4)))
    assert log.log_end_offset == 4 and log.latest_epoch == 3


async def test_the_manager_keeps_one_fetcher_per_leader(tmp_path: Path) -> None:
    from pykraft.broker.replica_fetcher import ReplicaFetcherManager

    manager = ReplicaFetcherManager(1, lambda broker: None, FetcherConfig(backoff_ms=10),
                                    lambda: 7, lambda: 0)
    logs = [open_log(tmp_path / str(i)) for i in range(3)]
    partitions = [Partition("t", TOPIC_ID, i, log, leader_id=2, leader_epoch=0,
                            replicas=(1, 2), isr=(1, 2)) for i, log in enumerate(logs)]
    for partition in partitions[:2]:
        manager.follow(partition)
    assert list(manager.fetchers) == [2]
    assert len(manager.fetchers[2].states) == 2  # both partitions in one fetch
    partitions[2].leader_id = 3
    manager.follow(partitions[2])
    assert sorted(manager.fetchers) == [2, 3]
    first = manager.fetchers[3].task
    partitions[2].leader_id = 2  # the leader moved back: fetcher 3 has nothing left
    manager.follow(partitions[2])
    assert list(manager.fetchers) == [2] and first is not None
    await asyncio.sleep(0.05)  # fetcher 2 fails to connect and backs off meanwhile
    assert first.cancelled() or first.done()
    partitions[2].leader_id = 1  # this broker leads it now
    manager.follow(partitions[2])
    assert sorted(manager.fetchers[2].states) == [("t", 0), ("t", 1)]
    manager.unfollow(partitions[0])
    manager.unfollow(partitions[0])  # again: nothing left to do
    assert sorted(manager.fetchers[2].states) == [("t", 1)]
    await manager.close()
    assert manager.fetchers == {}


async def test_partitions_no_longer_fetched_are_forgotten_at_once_past_the_round_bounds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Partitions dropped from the fetcher (their leadership moved) are forgotten by the
    leader's session in the next round, however many: each one it still holds would come
    back in every response with an error. Their number is bounded on its own; one fetched
    again before its turn is told, not forgotten; a delayed one is forgotten meanwhile."""
    monkeypatch.setattr(ReplicaFetcher, "TOLD_PER_ROUND_MAX", 2)
    monkeypatch.setattr(ReplicaFetcher, "LOOKED_PER_ROUND_MAX", 2)
    fetcher, connection, logs = scripted_fetcher(tmp_path, 12, FetcherConfig(backoff_ms=50))
    while fetcher.session_epoch == 0 or fetcher._dirty:  # the session gets all twelve
        connection.answers = [fetch_answer(77)]
        await fetcher._fetch()
    assert len(fetcher._in_session) == 12

    def forgotten(request: Any) -> list[int]:
        return [i for topic in request.forgotten_topics_data for i in topic.partitions]

    def asked(request: Any) -> list[int]:
        return [p.partition for topic in request.topics for p in topic.partitions]

    partitions = {i: fetcher.states[("t", i)].partition for i in range(12)}
    for index in range(9):
        fetcher.remove(partitions[index])
    # followed again (at a new leader epoch): its position told, not forgotten
    fetcher.add(Partition("t", TOPIC_ID, 4, logs[4], leader_id=2, leader_epoch=5,
                          replicas=(1, 2), isr=(1, 2)))
    connection.answers = [fetch_answer(77)]
    await fetcher._fetch()
    request = connection.requests[-1]
    assert forgotten(request) == [0, 1, 2, 3, 5, 6, 7, 8] and asked(request) == [4]
    assert not fetcher._forget and not fetcher._dirty

    monkeypatch.setattr(ReplicaFetcher, "FORGOTTEN_PER_ROUND_MAX", 2)
    for index in (9, 10, 11):
        fetcher.remove(partitions[index])
    fetcher._delay(fetcher.states[("t", 4)], 1_000)
    rounds = []
    while fetcher._forget or fetcher._dirty:
        connection.answers = [fetch_answer(77)]
        await fetcher._fetch()
        rounds.append((forgotten(connection.requests[-1]), asked(connection.requests[-1])))
    assert rounds == [([9, 10], []), ([4, 11], [])]
    assert fetcher._in_session == {}
