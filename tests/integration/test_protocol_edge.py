"""The protocol edge over a raw socket: each kind of bad input gets its documented error code
(or a closed connection), nothing is half-applied, and the node keeps serving."""

from __future__ import annotations

import datetime
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_records.v2.request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ForgottenTopic,
)
from kio.schema.list_offsets.v9.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from pykraft.protocol.framing import encode_request
from pykraft.records.record import build_batch, iter_batch_records
from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient

TOPIC = "edge"
ONE_SECOND = datetime.timedelta(seconds=1)
MESSAGE_MAX_BYTES = 100_000
FETCH_MAX_BYTES = 300_000


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(configs={"message.max.bytes": str(MESSAGE_MAX_BYTES),
                               "fetch.max.bytes": str(FETCH_MAX_BYTES),
                               "auto.create.topics.enable": "false"}) as node:
        with WireClient(node.bootstrap_servers) as client:
            response = client.request(19, 7, _create_request([(TOPIC, 2)]))
            assert response.topics[0].error_code == ErrorCode.none
        yield node


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[WireClient]:
    with WireClient(cluster.bootstrap_servers) as wire:
        yield wire


def _create_request(topics: list[tuple[str, int]], validate_only: bool = False) -> Any:
    return CreateTopicsRequest(
        topics=tuple(CreatableTopic(name=name, num_partitions=count, replication_factor=1,
                                    assignments=(), configs=()) for name, count in topics),
        timeout=ONE_SECOND, validate_only=validate_only)


def _batch(count: int = 3, value_size: int = 20) -> bytes:
    return build_batch([(b"k%d" % i, b"v" * value_size, (("h", b"x"),), 1_700_000_000_000 + i)
                        for i in range(count)])


def _produce(client: WireClient, records: bytes, *, topic: str = TOPIC, partition: int = 0,
             acks: int = 1) -> Any:
    request = ProduceRequest(acks=acks, timeout=ONE_SECOND, topic_data=(TopicProduceData(
        name=topic, partition_data=(PartitionProduceData(index=partition, records=records),)),))
    if acks == 0:
        client.send(0, 9, request)
        return None
    return client.request(0, 9, request).responses[0].partition_responses[0]


def _latest(client: WireClient, partition: int = 0, timestamp: int = -1) -> Any:
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(
        name=TOPIC, partitions=(ListOffsetsPartition(partition_index=partition,
                                                     timestamp=timestamp),)),))
    return client.request(2, 9, request).topics[0].partitions[0]


def _fetch(client: WireClient, offset: int, *, partition: int = 0, max_wait_ms: int = 0,
           min_bytes: int = 1, partition_max_bytes: int = 1 << 20,
           max_bytes: int = 50 << 20) -> Any:
    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
        max_bytes=max_bytes, topics=(FetchTopic(topic=TOPIC, partitions=(FetchPartition(
            partition=partition, fetch_offset=offset,
            partition_max_bytes=partition_max_bytes),)),),
        forgotten_topics_data=())
    return client.request(1, 12, request).responses[0].partitions[0]


def test_produce_then_fetch_returns_the_same_records(client: WireClient) -> None:
    before = _latest(client).offset
    result = _produce(client, _batch(5))
    assert result.error_code == ErrorCode.none and result.base_offset == before
    fetched = _fetch(client, before)
    assert fetched.error_code == ErrorCode.none
    assert fetched.high_watermark == before + 5
    (header, records), *_ = list(iter_batch_records(fetched.records))
    assert header.base_offset == before
    assert [r.key for r in records] == [b"k%d" % i for i in range(5)]


def test_corrupt_batch_is_refused_and_nothing_appended(client: WireClient) -> None:
    before = _latest(client).offset
    corrupt = bytearray(_batch(3))
    corrupt[-1] ^= 0xFF  # under the CRC
    for records in (bytes(corrupt), _batch(2)[:-5]):
        assert _produce(client, records).error_code == ErrorCode.corrupt_message
    # a second batch, corrupt or not, breaks Produce v3+'s one batch per partition (as Kafka)
    for second in (bytes(corrupt), _batch(2)):
        assert _produce(client, _batch(2) + second).error_code == ErrorCode.invalid_record
    assert _latest(client).offset == before


def test_message_too_large(client: WireClient) -> None:
    before = _latest(client).offset
    result = _produce(client, _batch(1, value_size=MESSAGE_MAX_BYTES + 1))
    assert result.error_code == ErrorCode.message_too_large
    assert _latest(client).offset == before


def test_a_fetch_carries_at_most_fetch_max_bytes_whatever_it_asks(client: WireClient) -> None:
    """A consumer asking for 2 GiB gets at most the broker's fetch.max.bytes (Kafka's cap),
    so no request makes the node read a whole log into memory."""
    before = _latest(client, partition=1).offset
    for _ in range(8):
        assert _produce(client, _batch(4, value_size=20_000), partition=1).error_code == \
            ErrorCode.none
    fetched = _fetch(client, before, partition=1, partition_max_bytes=2**31 - 1,
                     max_bytes=2**31 - 1)
    assert fetched.error_code == ErrorCode.none
    assert 0 < len(fetched.records) <= FETCH_MAX_BYTES
    assert len(list(iter_batch_records(fetched.records))) >= 3  # as many whole batches as fit


def test_unknown_topic_and_partition(client: WireClient) -> None:
    assert _produce(client, _batch(), topic="no-such-topic").error_code == \
        ErrorCode.unknown_topic_or_partition
    assert _produce(client, _batch(), partition=7).error_code == \
        ErrorCode.unknown_topic_or_partition
    assert _fetch(client, 0, partition=9).error_code == ErrorCode.unknown_topic_or_partition


def test_fetch_out_of_range(client: WireClient) -> None:
    end = _latest(client).offset
    assert _fetch(client, end + 100).error_code == ErrorCode.offset_out_of_range


def _session_fetch(client: WireClient, session_id: int, epoch: int,
                   offsets: dict[int, int], forgotten: tuple[int, ...] = (), *,
                   topic: str = TOPIC) -> Any:
    """A Fetch v12 in a session (KIP-227) naming `offsets` (partition -> fetch offset)."""
    request = FetchRequest(
        max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=50 << 20,
        session_id=session_id, session_epoch=epoch,
        topics=(FetchTopic(topic=topic, partitions=tuple(
            FetchPartition(partition=index, fetch_offset=offset, partition_max_bytes=1 << 20)
            for index, offset in offsets.items())),) if offsets else (),
        forgotten_topics_data=(ForgottenTopic(topic=topic, partitions=forgotten),)
        if forgotten else ())
    return client.request(1, 12, request)


def _answered(response: Any) -> dict[int, Any]:
    return {p.partition_index: p for topic in response.responses for p in topic.partitions}


def test_an_incremental_fetch_session_answers_only_partitions_with_news(
        client: WireClient) -> None:
    """KIP-227: a full fetch at epoch 0 opens a session; later fetches name nothing and get
    only partitions with new records or a moved high watermark; a wrong epoch or an unknown
    session is refused with the session errors; epoch -1 closes it."""
    ends = {index: _latest(client, index).offset for index in (0, 1)}
    opened = _session_fetch(client, 0, 0, ends)
    session_id = opened.session_id
    assert opened.error_code == ErrorCode.none and session_id > 0
    assert set(_answered(opened)) == {0, 1}  # a full response

    quiet = _session_fetch(client, session_id, 1, {})
    assert quiet.error_code == ErrorCode.none and _answered(quiet) == {}

    _produce(client, _batch(2), partition=1)
    news = _answered(_session_fetch(client, session_id, 2, {}))
    assert set(news) == {1}
    assert news[1].high_watermark == ends[1] + 2
    assert len(list(iter_batch_records(news[1].records))) == 1

    # moved on past the records: named with its new offset, then nothing new again
    assert _answered(_session_fetch(client, session_id, 3, {1: ends[1] + 2})) == {}
    assert _session_fetch(client, session_id, 3, {}).error_code == \
        ErrorCode.invalid_fetch_session_epoch
    assert _session_fetch(client, session_id + 1, 1, {}).error_code == \
        ErrorCode.fetch_session_id_not_found

    # partition 0 forgotten: records there are no longer answered in this session
    assert _answered(_session_fetch(client, session_id, 4, {}, forgotten=(0,))) == {}
    _produce(client, _batch(1), partition=0)
    assert _answered(_session_fetch(client, session_id, 5, {})) == {}

    closed = _session_fetch(client, session_id, -1, {0: ends[0]})
    assert closed.session_id == 0 and set(_answered(closed)) == {0}
    assert _session_fetch(client, session_id, 6, {}).error_code == \
        ErrorCode.fetch_session_id_not_found


def test_a_quiet_partition_of_a_session_is_answered_once_its_log_start_moves_or_it_goes(
        client: WireClient) -> None:
    """A partition with nothing to read is passed by while its state stays the same; a
    DeleteRecords that moves its log start, or the deletion of its topic, is news."""
    topic = "edge-quiet"
    assert client.request(19, 7, _create_request([(topic, 1)])).topics[0].error_code == \
        ErrorCode.none
    _produce(client, _batch(3), topic=topic)
    opened = _session_fetch(client, 0, 0, {0: 3}, topic=topic)
    session_id = opened.session_id
    assert session_id > 0 and _answered(opened)[0].log_start_offset == 0
    for epoch in (1, 2):  # once read in full, then passed by
        assert _answered(_session_fetch(client, session_id, epoch, {}, topic=topic)) == {}

    deleted = client.request(21, 2, DeleteRecordsRequest(topics=(DeleteRecordsTopic(
        name=topic, partitions=(DeleteRecordsPartition(partition_index=0, offset=2),)),),
        timeout=ONE_SECOND))
    assert deleted.topics[0].partitions[0].error_code == ErrorCode.none
    news = _answered(_session_fetch(client, session_id, 3, {}, topic=topic))
    assert set(news) == {0} and news[0].log_start_offset == 2 and not news[0].records
    assert _answered(_session_fetch(client, session_id, 4, {}, topic=topic)) == {}

    gone = client.request(20, 6, DeleteTopicsRequest(
        topics=(DeleteTopicState(name=topic, topic_id=None),), timeout=ONE_SECOND))
    assert gone.responses[0].error_code == ErrorCode.none
    deadline, epoch = time.monotonic() + 10, 5
    while True:  # news once this broker has applied the deletion
        news = _answered(_session_fetch(client, session_id, epoch, {}, topic=topic))
        epoch += 1
        if news or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert news[0].error_code == ErrorCode.unknown_topic_or_partition


def test_acks_zero_appends_without_answering(client: WireClient) -> None:
    before = _latest(client).offset
    _produce(client, _batch(4), acks=0)
    deadline = time.monotonic() + 5
    while _latest(client).offset != before + 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _latest(client).offset == before + 4


def test_fetch_long_poll_waits_for_max_wait_then_wakes_on_data(
        client: WireClient, cluster: LocalCluster) -> None:
    end = _latest(client, partition=1).offset
    started = time.monotonic()
    empty = _fetch(client, end, partition=1, max_wait_ms=400)
    assert empty.records in (b"", None)
    assert time.monotonic() - started >= 0.35
    with WireClient(cluster.bootstrap_servers) as producer:
        correlation = client.send(1, 12, FetchRequest(
            max_wait=datetime.timedelta(seconds=20), min_bytes=1,
            topics=(FetchTopic(topic=TOPIC, partitions=(FetchPartition(
                partition=1, fetch_offset=end, partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=()))
        time.sleep(0.2)
        started = time.monotonic()
        assert _produce(producer, _batch(2), partition=1).error_code == ErrorCode.none
        answered, response = client.receive(1, 12)
    assert answered == correlation
    assert time.monotonic() - started < 5, "the parked fetch was not woken by the append"
    assert response.responses[0].partitions[0].high_watermark == end + 2


def test_fetch_always_returns_at_least_one_batch(client: WireClient) -> None:
    start = _latest(client).offset
    _produce(client, _batch(3, value_size=5000))
    fetched = _fetch(client, start, partition_max_bytes=100, max_bytes=100)
    assert fetched.error_code == ErrorCode.none
    assert len(list(iter_batch_records(fetched.records))) == 1


def test_list_offsets_earliest_latest_and_by_time(client: WireClient) -> None:
    assert _latest(client, timestamp=-2).offset == 0
    end = _latest(client).offset
    assert end > 0
    far_future = _latest(client, timestamp=4_000_000_000_000)
    assert (far_future.offset, far_future.timestamp) == (-1, -1)


def test_create_topic_errors(client: WireClient) -> None:
    response = client.request(19, 7, _create_request(
        [("bad/name", 1), (TOPIC, 1), ("zero-partitions", 0), ("ok-validated", 3)],
        validate_only=True))
    codes = {t.name: t.error_code for t in response.topics}
    assert codes == {
        "bad/name": ErrorCode.invalid_topic_exception,
        TOPIC: ErrorCode.topic_already_exists,
        "zero-partitions": ErrorCode.invalid_partitions,
        "ok-validated": ErrorCode.none,
    }
    metadata = client.request(3, 12, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="ok-validated"),
                MetadataRequestTopic(topic_id=None, name="bad/name")),
        allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    assert [t.error_code for t in metadata.topics] == [
        ErrorCode.unknown_topic_or_partition,  # validate_only created nothing
        ErrorCode.invalid_topic_exception,
    ]


def test_unsupported_api_versions_version_gets_v0_answer(cluster: LocalCluster) -> None:
    with WireClient(cluster.bootstrap_servers) as client:
        frame = bytearray(encode_request(18, 3, 42, "future-client", ApiVersionsRequest(
            client_software_name="x", client_software_version="1")))
        struct.pack_into(">h", frame, 6, 99)  # claim ApiVersions v99
        client.send_raw(bytes(frame))
        correlation_id, response = client.receive(18, 0)
    assert correlation_id == 42
    assert response.error_code == ErrorCode.unsupported_version
    assert any(k.api_key == 18 and k.max_version >= 3 for k in response.api_keys)


@pytest.mark.parametrize("frame", [
    struct.pack(">i", 2**31 - 1) + b"\x00\x03",              # oversized
    struct.pack(">i", -5),                                     # negative size
    struct.pack(">i", 5) + b"\x00\x03\x00\x0c\x00",            # header cut short
    struct.pack(">i", 8) + struct.pack(">hhi", 0, 2, 7),       # Produce v2: below our range
    struct.pack(">i", 8) + struct.pack(">hhi", 999, 0, 7),     # unknown API
])
def test_garbled_frames_close_only_their_connection(cluster: LocalCluster,
                                                    frame: bytes) -> None:
    with WireClient(cluster.bootstrap_servers) as other, \
            WireClient(cluster.bootstrap_servers) as bad:
        bad.send_raw(frame)
        assert bad.is_closed_by_peer()
        assert _latest(other).error_code == ErrorCode.none
