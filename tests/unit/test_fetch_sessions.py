"""The fetch session cache (KIP-227): opening, incremental updates and forgetting, the
epoch checks, what an incremental response must carry, and eviction when the cache is
full."""

from __future__ import annotations

import datetime
import random
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v15 import request as fetch_request

from pykraft.broker.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    NO_SESSION,
    FetchSessionCache,
    topic_key,
)
from pykraft.protocol.entities import make

TOPIC = uuid.UUID(int=1)
OTHER = uuid.UUID(int=2)
NAMES = {TOPIC: ("t", TOPIC), OTHER: ("u", OTHER)}


def request(session_id: int, epoch: int, wanted: dict[uuid.UUID, dict[int, int]],
            forgotten: dict[uuid.UUID, list[int]] | None = None) -> Any:
    """A Fetch v15 for `wanted` (topic id -> partition -> fetch offset)."""
    return make(
        fetch_request.FetchRequest,
        replica_state=make(fetch_request.ReplicaState, replica_id=1, replica_epoch=5),
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=session_id,
        session_epoch=epoch,
        topics=tuple(
            make(fetch_request.FetchTopic, topic_id=topic_id, partitions=tuple(
                make(fetch_request.FetchPartition, partition=index, current_leader_epoch=0,
                     fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=0,
                     partition_max_bytes=1 << 20)
                for index, offset in partitions.items()))
            for topic_id, partitions in wanted.items()),
        forgotten_topics_data=tuple(
            make(fetch_request.ForgottenTopic, topic_id=topic_id, partitions=tuple(indexes))
            for topic_id, indexes in (forgotten or {}).items()),
        rack_id="")


def offsets(context: Any) -> dict[tuple[str, int], int]:
    return {(p.topic, p.partition): p.fetch_offset for p in context.partitions}


def test_a_full_fetch_without_a_session_leaves_the_cache_alone() -> None:
    cache = FetchSessionCache()
    context = cache.context(request(NO_SESSION, FINAL_EPOCH, {TOPIC: {0: 5}}), NAMES, 0, True)
    assert (context.session, context.incremental, context.response_session_id) == (
        None, False, NO_SESSION)
    assert offsets(context) == {("t", 0): 5}
    assert len(cache) == 0


def test_a_session_keeps_partitions_and_takes_updates_and_forgotten_ones() -> None:
    cache = FetchSessionCache(rng=random.Random(3))
    opened = cache.context(request(NO_SESSION, INITIAL_EPOCH, {TOPIC: {0: 5, 1: 7}}),
                           NAMES, 0, True)
    session_id = opened.response_session_id
    assert session_id != NO_SESSION and not opened.incremental
    assert offsets(opened) == {("t", 0): 5, ("t", 1): 7}

    # epoch 1: partition 0 moved on, a partition of another topic joins; 1 is as it was
    next_ = cache.context(request(session_id, 1, {TOPIC: {0: 9}, OTHER: {0: 0}}), NAMES, 10,
                          True)
    assert next_.incremental and next_.response_session_id == session_id
    assert offsets(next_) == {("t", 0): 9, ("t", 1): 7, ("u", 0): 0}

    # epoch 2: nothing changed but partition 1 is forgotten
    last = cache.context(request(session_id, 2, {}, forgotten={TOPIC: [1]}), NAMES, 20, True)
    assert offsets(last) == {("t", 0): 9, ("u", 0): 0}


def test_an_unknown_session_or_a_wrong_epoch_is_refused() -> None:
    cache = FetchSessionCache()
    unknown = cache.context(request(12345, 1, {}), NAMES, 0, True)
    assert unknown.error == ErrorCode.fetch_session_id_not_found
    session_id = cache.context(request(NO_SESSION, INITIAL_EPOCH, {TOPIC: {0: 0}}), NAMES, 0,
                               True).response_session_id
    replayed = cache.context(request(session_id, 2, {}), NAMES, 0, True)  # expected 1
    assert replayed.error == ErrorCode.invalid_fetch_session_epoch
    assert cache.context(request(session_id, 1, {}), NAMES, 0, True).error == ErrorCode.none
    assert cache.context(request(session_id, 1, {}), NAMES, 0, True).error == \
        ErrorCode.invalid_fetch_session_epoch  # epoch 1 was used


def test_closing_a_session_gives_a_full_fetch_and_forgets_it() -> None:
    cache = FetchSessionCache()
    session_id = cache.context(request(NO_SESSION, INITIAL_EPOCH, {TOPIC: {0: 0}}), NAMES, 0,
                               True).response_session_id
    closed = cache.context(request(session_id, FINAL_EPOCH, {TOPIC: {3: 1}}), NAMES, 0, True)
    assert closed.response_session_id == NO_SESSION and offsets(closed) == {("t", 3): 1}
    assert cache.context(request(session_id, 1, {}), NAMES, 0, True).error == \
        ErrorCode.fetch_session_id_not_found


def test_an_incremental_response_carries_only_partitions_with_news() -> None:
    cache = FetchSessionCache()
    session_id = cache.context(request(NO_SESSION, INITIAL_EPOCH, {TOPIC: {0: 0, 1: 0}}),
                               NAMES, 0, True).response_session_id
    context = cache.context(request(session_id, 1, {}), NAMES, 0, True)
    first, second = context.partitions
    assert first.must_answer(False, False, 10, 10, 0)  # never told: answered
    assert not first.must_answer(False, False, 10, 10, 0)  # nothing new
    assert first.must_answer(True, False, 10, 10, 0)  # records
    assert first.must_answer(False, False, 11, 11, 0)  # the high watermark moved
    assert first.must_answer(False, False, 11, 11, 4)  # the log start moved
    assert first.must_answer(False, True, 11, 11, 4)  # an error
    assert second.must_answer(False, False, 0, 0, 0)


def test_partitions_that_returned_records_go_to_the_end_of_the_order() -> None:
    cache = FetchSessionCache()
    opened = cache.context(request(NO_SESSION, INITIAL_EPOCH, {TOPIC: {0: 0, 1: 0, 2: 0}}),
                           NAMES, 0, True)
    assert opened.session is not None
    cache.returned_records(opened.session, [opened.partitions[0]])
    context = cache.context(request(opened.response_session_id, 1, {}), NAMES, 0, True)
    assert [p.partition for p in context.partitions] == [1, 2, 0]


def test_a_full_cache_makes_room_only_for_an_idle_session_or_for_a_follower() -> None:
    cache = FetchSessionCache(slots=1, eviction_ms=1000)
    consumer = cache.context(request(NO_SESSION, INITIAL_EPOCH, {TOPIC: {0: 0}}), NAMES, 0,
                             False).response_session_id
    assert consumer != NO_SESSION
    refused = cache.context(request(NO_SESSION, INITIAL_EPOCH, {TOPIC: {0: 0}}), NAMES, 500,
                            False)
    assert refused.response_session_id == NO_SESSION and offsets(refused) == {("t", 0): 0}
    follower = cache.context(request(NO_SESSION, INITIAL_EPOCH, {TOPIC: {0: 0}}), NAMES, 500,
                             True).response_session_id
    assert follower != NO_SESSION  # a follower's session takes a consumer's place
    assert cache.context(request(consumer, 1, {}), NAMES, 500, False).error == \
        ErrorCode.fetch_session_id_not_found
    another = cache.context(request(NO_SESSION, INITIAL_EPOCH, {TOPIC: {0: 0}}), NAMES, 600,
                            True).response_session_id
    assert another == NO_SESSION  # the follower's session is neither idle nor evictable
    late = cache.context(request(NO_SESSION, INITIAL_EPOCH, {TOPIC: {0: 0}}), NAMES, 1600,
                         False).response_session_id
    assert late != NO_SESSION  # idle for eviction_ms: its place is taken


def test_a_topic_id_unknown_when_named_is_looked_up_again_at_each_request() -> None:
    """A follower's fetch can come before the leader has applied the topic: the partition
    is kept with no name (the fetch answers UNKNOWN_TOPIC_ID) and is named as soon as the
    id is known, whether the request names it again or not."""
    cache = FetchSessionCache()
    unknown = {TOPIC: ("", TOPIC), OTHER: ("", OTHER)}
    known: dict[uuid.UUID, str] = {}

    def name_of(topic_id: uuid.UUID) -> str:
        return known.get(topic_id, "")

    opened = cache.context(request(NO_SESSION, INITIAL_EPOCH, {TOPIC: {0: 0}}), unknown, 0,
                           True, name_of=name_of)
    session_id = opened.response_session_id
    assert offsets(opened) == {("", 0): 0}
    later = cache.context(request(session_id, 1, {OTHER: {0: 0}}), unknown, 0, True,
                          name_of=name_of)
    assert offsets(later) == {("", 0): 0}
    known.update({TOPIC: "t", OTHER: "u"})  # the leader applied both topics
    resolved = cache.context(request(session_id, 2, {}), NAMES, 0, True,
                             name_of=name_of)
    assert offsets(resolved) == {("t", 0): 0, ("u", 0): 0}


def test_topics_are_keyed_by_id_from_fetch_v13() -> None:
    topic = make(fetch_request.FetchTopic, topic_id=TOPIC, partitions=())
    assert topic_key(topic) == TOPIC
