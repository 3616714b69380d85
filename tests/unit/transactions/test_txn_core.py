"""The transaction coordinator core, driven without I/O: every transition of Kafka's
TransactionCoordinator (transaction version 0), its errors, markers, timers and replay."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from pykraft.broker.group_coordinator.core import partition_for
from pykraft.broker.transaction_coordinator.core import (
    MAX_EPOCH,
    Append,
    InitResult,
    MarkerRequest,
    TransactionCoordinator,
    TxnConfig,
    TxnDescription,
)
from pykraft.broker.transaction_coordinator.records import (
    TransactionLogKey,
    TransactionLogValue,
    TransactionRecord,
    TxnStatus,
    decode_record,
    encode_record,
    group_partitions,
)

TXN = "txn-a"
TIMEOUT = 60_000
NONE = ErrorCode.none


class Harness:
    """A coordinator leading the single `__transaction_state` partition (leader epoch 3), a
    virtual clock, a log of what it wrote (appends commit at once unless `hold_appends`),
    and the marker requests it made (answered by the test)."""

    def __init__(self, *, load: bool = True, **config: Any) -> None:
        self.config = TxnConfig(partition_count=1, **config)
        self.next_pid = 1000
        self.ids_available = True
        self.core = TransactionCoordinator(self.config, self._producer_id)
        self.now_ms = 1_000_000
        self.tokens = 0
        self.results: dict[int, Any] = {}
        self.log: list[TransactionRecord] = []
        self.markers: list[MarkerRequest] = []
        self.held: list[Append] = []
        self.hold_appends = False
        if load:
            self.core.begin_load(0, 3)
            self.core.complete_load(0, self.now_ms)

    def _producer_id(self) -> int | None:
        if not self.ids_available:
            return None
        self.next_pid += 1
        return self.next_pid - 1

    def token(self) -> int:
        self.tokens += 1
        return self.tokens

    def pump(self) -> None:
        while True:
            ready = self.core.ready()
            for reply in ready.replies:
                self.results[reply.token] = reply.result
            self.markers.extend(ready.markers)
            if not ready.appends:
                return
            for append in ready.appends:
                # what the shell stores is bytes: go through the codec
                stored = decode_record(*encode_record(append.record))
                assert stored == append.record
                if self.hold_appends:
                    self.held.append(append)
                else:
                    self.log.append(append.record)
                    self.core.append_done(append.append_id, NONE, self.now_ms)

    def release(self, error: ErrorCode = NONE) -> None:
        held, self.held = self.held, []
        for append in held:
            if error is NONE:
                self.log.append(append.record)
            self.core.append_done(append.append_id, error, self.now_ms)
        self.pump()

    def call(self, method: str, *args: Any) -> Any:
        token = self.token()
        getattr(self.core, method)(token, *args, self.now_ms)
        self.pump()
        return self.results.pop(token, None)

    def init(self, txn: str = TXN, timeout: int = TIMEOUT,
             expected: tuple[int, int] | None = None) -> Any:
        return self.call("init_producer_id", txn, timeout, expected)

    def add(self, pid: int, epoch: int, *partitions: tuple[str, int], txn: str = TXN) -> Any:
        return self.call("add_partitions", txn, pid, epoch, list(partitions))

    def end(self, pid: int, epoch: int, commit: bool, txn: str = TXN) -> Any:
        return self.call("end_txn", txn, pid, epoch, commit)

    def answer_markers(self, error: ErrorCode = NONE) -> None:
        markers, self.markers = self.markers, []
        for request in markers:
            self.core.markers_done(request.transactional_id, request.coordinator_epoch,
                                   dict.fromkeys(request.partitions, error), self.now_ms)
        self.pump()

    def advance(self, ms: int) -> None:
        self.now_ms += ms
        self.core.tick(self.now_ms)
        self.pump()

    def state(self, txn: str = TXN) -> TxnStatus:
        metadata = self.core.metadata(txn)
        assert metadata is not None
        return metadata.state

    def last_value(self) -> TransactionLogValue:
        value = self.log[-1].value
        assert value is not None
        return value


def ongoing(h: Harness, *partitions: tuple[str, int]) -> InitResult:
    result: InitResult = h.init()
    assert result.error is NONE
    assert h.add(result.producer_id, result.epoch, *(partitions or (("t", 0),))) is NONE
    return result


# -- InitProducerId -----------------------------------------------------------------------


def test_init_new_id_gets_a_producer_id_at_epoch_zero_written_empty() -> None:
    h = Harness()
    assert h.init() == InitResult(NONE, 1000, 0)
    assert h.log[-1].key == TransactionLogKey(transactional_id=TXN)
    assert h.last_value() == TransactionLogValue(
        producer_id=1000, producer_epoch=0, transaction_timeout_ms=TIMEOUT,
        transaction_status=TxnStatus.EMPTY, transaction_partitions=None,
        transaction_last_update_timestamp_ms=h.now_ms, transaction_start_timestamp_ms=-1)


def test_init_again_bumps_the_epoch_and_keeps_the_producer_id() -> None:
    h = Harness()
    h.init()
    assert h.init(timeout=5000) == InitResult(NONE, 1000, 1)
    assert h.last_value().transaction_timeout_ms == 5000
    assert h.init() == InitResult(NONE, 1000, 2)


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_init_refuses_a_timeout_outside_the_maximum(timeout: int) -> None:
    h = Harness()
    assert h.init(timeout=timeout) == InitResult(ErrorCode.invalid_transaction_timeout)
    assert h.init(timeout=900_000).error is NONE
    assert Harness(max_timeout_ms=1000).init(timeout=1001) == InitResult(
        ErrorCode.invalid_transaction_timeout)


def test_init_empty_id_is_an_invalid_request() -> None:
    assert Harness().init(txn="") == InitResult(ErrorCode.invalid_request)


def test_not_coordinator_and_loading() -> None:
    h = Harness(load=False)
    assert h.init() == InitResult(ErrorCode.not_coordinator)
    assert h.end(1, 0, True) is ErrorCode.not_coordinator
    h.core.begin_load(0, 1)
    assert h.init() == InitResult(ErrorCode.coordinator_load_in_progress)
    assert h.add(1, 0, ("t", 0)) is ErrorCode.coordinator_load_in_progress
    assert h.core.describe(TXN) is ErrorCode.coordinator_load_in_progress
    h.core.complete_load(0, h.now_ms)
    assert h.init().error is NONE


def test_init_without_producer_ids_is_load_in_progress() -> None:
    h = Harness()
    h.ids_available = False
    assert h.init() == InitResult(ErrorCode.coordinator_load_in_progress)
    assert h.core.metadata(TXN) is None
    assert h.log == []


def test_init_while_a_commit_completes_is_concurrent() -> None:
    h = Harness()
    first = ongoing(h)
    assert h.end(first.producer_id, first.epoch, True) is NONE
    assert h.state() is TxnStatus.PREPARE_COMMIT
    assert h.init() == InitResult(ErrorCode.concurrent_transactions)
    h.answer_markers()
    assert h.state() is TxnStatus.COMPLETE_COMMIT
    assert h.init() == InitResult(NONE, 1000, 1)


def test_init_fences_an_ongoing_transaction_by_aborting_it_under_a_bumped_epoch() -> None:
    h = Harness()
    zombie = ongoing(h, ("t", 0), ("u", 2))
    assert h.init() == InitResult(ErrorCode.concurrent_transactions)
    value = h.last_value()
    assert value.status is TxnStatus.PREPARE_ABORT and value.producer_epoch == 1
    assert value.partitions() == {("t", 0), ("u", 2)}
    assert h.markers == [MarkerRequest(TXN, 1000, 1, False, 3,
                                       frozenset({("t", 0), ("u", 2)}))]
    assert h.init() == InitResult(ErrorCode.concurrent_transactions)  # markers pending
    h.answer_markers()
    assert h.last_value().status is TxnStatus.COMPLETE_ABORT
    assert h.last_value().transaction_partitions == ()
    assert h.init() == InitResult(NONE, 1000, 2)
    # the zombie is fenced everywhere
    assert h.add(zombie.producer_id, zombie.epoch, ("t", 1)) is ErrorCode.producer_fenced
    assert h.end(zombie.producer_id, zombie.epoch, True) is ErrorCode.producer_fenced


def test_an_exhausted_epoch_rotates_to_a_new_producer_id() -> None:
    h = Harness()
    h.core.begin_load(0, 4)
    h.core.load(0, TransactionRecord(TransactionLogKey(transactional_id=TXN), TransactionLogValue(
        producer_id=7, producer_epoch=MAX_EPOCH - 1, transaction_timeout_ms=TIMEOUT,
        transaction_status=TxnStatus.COMPLETE_COMMIT, transaction_partitions=())))
    h.core.complete_load(0, h.now_ms)
    assert h.init() == InitResult(NONE, 1000, 0)
    metadata = h.core.metadata(TXN)
    assert metadata is not None and metadata.previous_producer_id == 7


def test_kip360_recovery_with_the_current_producer_id_and_epoch_bumps() -> None:
    h = Harness()
    h.init()
    assert h.init(expected=(1000, 0)) == InitResult(NONE, 1000, 1)
    # a retry whose answer was lost names the epoch before: it gets the current one back
    assert h.init(expected=(1000, 0)) == InitResult(NONE, 1000, 1)
    assert h.init(expected=(1000, 5)) == InitResult(ErrorCode.producer_fenced)
    assert h.init(expected=(999, 1)) == InitResult(ErrorCode.producer_fenced)


def test_kip360_expected_epoch_exhausted_rotates_and_a_retry_is_recognised() -> None:
    h = Harness()
    h.core.begin_load(0, 4)
    h.core.load(0, TransactionRecord(TransactionLogKey(transactional_id=TXN), TransactionLogValue(
        producer_id=7, producer_epoch=MAX_EPOCH - 1, transaction_timeout_ms=TIMEOUT,
        transaction_status=TxnStatus.EMPTY)))
    h.core.complete_load(0, h.now_ms)
    assert h.init(expected=(7, MAX_EPOCH - 1)) == InitResult(NONE, 1000, 0)
    # the same request again (its answer lost): the previous id with an exhausted epoch
    assert h.init(expected=(7, MAX_EPOCH - 1)) == InitResult(NONE, 1000, 0)


# -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------


def test_add_partitions_starts_a_transaction_and_adds_only_what_is_new() -> None:
    h = Harness()
    producer = h.init()
    start = h.now_ms
    assert h.add(1000, 0, ("t", 1), ("t", 0)) is NONE
    value = h.last_value()
    assert value.status is TxnStatus.ONGOING and value.transaction_start_timestamp_ms == start
    assert value.transaction_partitions == group_partitions([("t", 0), ("t", 1)])
    writes = len(h.log)
    h.now_ms += 10
    assert h.add(producer.producer_id, 0, ("t", 0)) is NONE
    assert len(h.log) == writes  # nothing new: nothing written
    assert h.add(producer.producer_id, 0, ("u", 0)) is NONE
    assert h.last_value().partitions() == {("t", 0), ("t", 1), ("u", 0)}
    assert h.last_value().transaction_start_timestamp_ms == start
    assert h.last_value().transaction_last_update_timestamp_ms == start + 10


@pytest.mark.parametrize("method", ["add", "end"])
def test_producer_checks(method: str) -> None:
    h = Harness()

    def call(pid: int, epoch: int, txn: str = TXN) -> Any:
        if method == "add":
            return h.add(pid, epoch, ("t", 0), txn=txn)
        return h.end(pid, epoch, True, txn=txn)

    assert call(1000, 0) is ErrorCode.invalid_producer_id_mapping  # unknown id
    h.init()
    h.init()
    assert call(999, 1) is ErrorCode.invalid_producer_id_mapping
    assert call(1000, 0) is ErrorCode.producer_fenced
    assert call(1000, 2) is ErrorCode.producer_fenced
    assert call(1000, 1, txn="") is ErrorCode.invalid_request


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    h = Harness()
    producer = h.init()
    assert h.call("add_offsets", TXN, producer.producer_id, 0, "my-group") is NONE
    assert h.last_value().partitions() == {("__consumer_offsets",
                                            partition_for("my-group", 50))}


def test_a_pending_write_makes_other_requests_concurrent() -> None:
    h = Harness()
    h.init()
    h.hold_appends = True
    token = h.token()
    h.core.add_partitions(token, TXN, 1000, 0, [("t", 0)], h.now_ms)
    h.pump()
    assert token not in h.results  # answered only once written
    assert h.state() is TxnStatus.EMPTY  # memory changes on commit
    assert h.add(1000, 0, ("t", 1)) is ErrorCode.concurrent_transactions
    assert h.end(1000, 0, True) is ErrorCode.concurrent_transactions
    assert h.init() == InitResult(ErrorCode.concurrent_transactions)
    h.release()
    assert h.results.pop(token) is NONE
    assert h.state() is TxnStatus.ONGOING


@pytest.mark.parametrize("error, expected", [
    (ErrorCode.not_enough_replicas, ErrorCode.coordinator_not_available),
    (ErrorCode.request_timed_out, ErrorCode.coordinator_not_available),
    (ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator),
    (ErrorCode.message_too_large, ErrorCode.unknown_server_error),
])
def test_a_failed_write_changes_nothing_and_maps_the_error(error: ErrorCode,
                                                         expected: ErrorCode) -> None:
    h = Harness()
    h.init()
    h.hold_appends = True
    token = h.token()
    h.core.add_partitions(token, TXN, 1000, 0, [("t", 0)], h.now_ms)
    h.pump()
    h.release(error)
    assert h.results.pop(token) is expected
    assert h.state() is TxnStatus.EMPTY
    h.hold_appends = False
    assert h.add(1000, 0, ("t", 0)) is NONE


def test_unload_during_a_write_answers_not_coordinator() -> None:
    h = Harness()
    h.hold_appends = True
    token = h.token()
    h.core.init_producer_id(token, TXN, TIMEOUT, None, h.now_ms)
    h.pump()
    h.core.unload(0)
    h.release()
    assert h.results.pop(token) == InitResult(ErrorCode.not_coordinator)


def test_verify_partitions() -> None:
    h = Harness()
    assert h.core.verify_partitions(TXN, 1000, 0, [("t", 0)]) == {
        ("t", 0): ErrorCode.invalid_producer_id_mapping}
    ongoing(h, ("t", 0))
    assert h.core.verify_partitions(TXN, 1000, 0, [("t", 0), ("t", 1)]) == {
        ("t", 0): NONE, ("t", 1): ErrorCode.invalid_txn_state}
    assert h.core.verify_partitions(TXN, 1000, 1, [("t", 0)]) == {
        ("t", 0): ErrorCode.producer_fenced}
    assert h.end(1000, 0, False) is NONE
    assert h.core.verify_partitions(TXN, 1000, 0, [("t", 0)]) == {
        ("t", 0): ErrorCode.concurrent_transactions}
    writes = len(h.log)
    h.core.verify_partitions(TXN, 1000, 0, [("v", 0)])
    h.pump()
    assert len(h.log) == writes


# -- EndTxn -------------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_end_writes_prepare_then_markers_then_complete(commit: bool) -> None:
    h = Harness()
    ongoing(h, ("t", 0), ("u", 1))
    assert h.end(1000, 0, commit) is NONE  # answered once PrepareX is written
    prepare = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
    assert h.last_value().status is prepare
    assert h.last_value().partitions() == {("t", 0), ("u", 1)}
    assert h.markers == [MarkerRequest(TXN, 1000, 0, commit, 3,
                                       frozenset({("t", 0), ("u", 1)}))]
    # while the markers are written, the client's retries are concurrent
    assert h.end(1000, 0, commit) is ErrorCode.concurrent_transactions
    assert h.end(1000, 0, not commit) is ErrorCode.concurrent_transactions
    assert h.add(1000, 0, ("t", 0)) is ErrorCode.concurrent_transactions
    h.answer_markers()
    complete = TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT
    assert h.last_value().status is complete
    assert h.last_value().transaction_partitions == ()
    assert h.state() is complete
    # a retry of the same EndTxn succeeds, the other result is an invalid state
    assert h.end(1000, 0, commit) is NONE
    assert h.end(1000, 0, not commit) is ErrorCode.invalid_txn_state
    # and the next transaction starts afresh
    h.now_ms += 5
    assert h.add(1000, 0, ("v", 0)) is NONE
    assert h.last_value().partitions() == {("v", 0)}
    assert h.last_value().transaction_start_timestamp_ms == h.now_ms


def test_end_in_empty_is_an_invalid_state() -> None:
    h = Harness()
    h.init()
    assert h.end(1000, 0, True) is ErrorCode.invalid_txn_state
    assert h.end(1000, 0, False) is ErrorCode.invalid_txn_state


def test_end_of_an_unknown_id_is_an_invalid_producer_id_mapping() -> None:
    assert Harness().end(1000, 0, True) is ErrorCode.invalid_producer_id_mapping


def test_prepare_without_pending_markers_answers_concurrent_or_invalid() -> None:
    h = Harness()
    ongoing(h)
    h.end(1000, 0, True)
    h.answer_markers(ErrorCode.transaction_coordinator_fenced)  # deposed: sending stops
    assert h.state() is TxnStatus.PREPARE_COMMIT
    assert h.end(1000, 0, True) is ErrorCode.concurrent_transactions
    assert h.end(1000, 0, False) is ErrorCode.invalid_txn_state


def test_markers_retry_the_failed_partitions_only() -> None:
    h = Harness()
    ongoing(h, ("t", 0), ("t", 1))
    h.end(1000, 0, True)
    (request,) = h.markers
    h.markers.clear()
    h.core.markers_done(TXN, 3, {("t", 0): NONE, ("t", 1): ErrorCode.not_leader_or_follower},
                        h.now_ms)
    h.pump()
    assert h.markers == [] and h.state() is TxnStatus.PREPARE_COMMIT
    assert h.core.wake_at_ms() == h.now_ms + 100
    h.advance(100)
    assert h.markers == [MarkerRequest(TXN, 1000, 0, True, 3, frozenset({("t", 1)}))]
    h.answer_markers()
    assert h.state() is TxnStatus.COMPLETE_COMMIT
    assert request.partitions == {("t", 0), ("t", 1)}


def test_markers_of_another_coordinator_epoch_are_ignored() -> None:
    h = Harness()
    ongoing(h)
    h.end(1000, 0, True)
    h.core.markers_done(TXN, 2, {("t", 0): NONE}, h.now_ms)
    h.pump()
    assert h.state() is TxnStatus.PREPARE_COMMIT


def test_a_failed_complete_write_is_written_again() -> None:
    h = Harness()
    ongoing(h)
    h.end(1000, 0, True)
    h.hold_appends = True
    h.answer_markers()
    h.release(ErrorCode.not_enough_replicas)
    assert h.state() is TxnStatus.PREPARE_COMMIT
    h.hold_appends = False
    h.advance(100)
    assert h.state() is TxnStatus.COMPLETE_COMMIT


# -- timers -------------------------------------------------------------------------------


def test_a_transaction_open_past_its_timeout_is_aborted_with_a_bumped_epoch() -> None:
    h = Harness(abort_interval_ms=1000)
    ongoing(h, ("t", 0))
    h.advance(1000)
    assert h.state() is TxnStatus.ONGOING
    h.advance(TIMEOUT - 1000)  # start + timeout is not yet past
    assert h.state() is TxnStatus.ONGOING
    h.advance(1000)
    assert h.state() is TxnStatus.PREPARE_ABORT
    assert h.last_value().producer_epoch == 1
    assert h.markers == [MarkerRequest(TXN, 1000, 1, False, 3, frozenset({("t", 0)}))]
    h.answer_markers()
    assert h.state() is TxnStatus.COMPLETE_ABORT
    assert h.end(1000, 0, True) is ErrorCode.producer_fenced
    assert h.init() == InitResult(NONE, 1000, 2)


def test_idle_ids_expire_with_a_tombstone() -> None:
    h = Harness(id_expiration_ms=10_000, remove_interval_ms=5_000)
    h.init()
    h.init(txn="other")
    h.add(1001, 0, ("t", 0), txn="other")  # Ongoing ids never expire
    h.advance(5_000)
    assert h.core.metadata(TXN) is not None
    h.advance(5_000)
    assert h.core.metadata(TXN) is None
    assert h.log[-1] == TransactionRecord(TransactionLogKey(transactional_id=TXN), None)
    assert h.core.describe(TXN) is ErrorCode.transactional_id_not_found
    assert h.core.metadata("other") is not None


# -- load ---------------------------------------------------------------------------------


def test_replay_rebuilds_every_id_and_completes_prepared_transactions() -> None:
    h = Harness()
    ongoing(h, ("t", 0))
    h.init(txn="gone")
    h.init(txn="committing")
    assert h.add(1002, 0, ("t", 1), ("u", 0), txn="committing") is NONE
    assert h.end(1002, 0, True, txn="committing") is NONE  # markers never answered: the broker dies
    h.log.append(TransactionRecord(TransactionLogKey(transactional_id="gone"), None))

    other = Harness(load=False)
    other.core.begin_load(0, 4)
    for record in h.log:
        other.core.load(0, decode_record(*encode_record(record)))  # type: ignore[arg-type]
    assert other.core.metadata("gone") is None
    assert other.state() is TxnStatus.ONGOING
    metadata = other.core.metadata(TXN)
    assert metadata is not None and metadata.partitions == {("t", 0)}
    assert other.markers == []
    other.core.complete_load(0, other.now_ms)
    other.pump()
    assert other.markers == [MarkerRequest("committing", 1002, 0, True, 4,
                                           frozenset({("t", 1), ("u", 0)}))]
    other.answer_markers()
    assert other.state("committing") is TxnStatus.COMPLETE_COMMIT
    assert other.end(1000, 0, False) is NONE  # the ongoing one goes on


def test_unload_stops_the_marker_work() -> None:
    h = Harness()
    ongoing(h)
    h.end(1000, 0, True)
    h.core.unload(0)
    h.answer_markers()
    assert h.log[-1].value is not None and h.last_value().status is TxnStatus.PREPARE_COMMIT
    assert h.init() == InitResult(ErrorCode.not_coordinator)


# -- describe and list ----------------------------------------------------------------------


def test_describe_and_list() -> None:
    h = Harness()
    start = h.now_ms
    ongoing(h, ("t", 0))
    h.now_ms += 1000
    h.init(txn="b")
    assert h.core.describe(TXN) == TxnDescription(TXN, TxnStatus.ONGOING, 1000, 0, TIMEOUT,
                                                  start, frozenset({("t", 0)}))
    assert h.core.describe("nope") is ErrorCode.transactional_id_not_found

    def listed(states: list[str] = [], pids: list[int] = [],  # noqa: B006
               duration: int = -1) -> tuple[ErrorCode, list[str], list[str]]:
        error, listings, unknown = h.core.list_transactions(states, pids, duration, h.now_ms)
        return error, [each.transactional_id for each in listings], unknown

    assert listed() == (NONE, ["b", TXN], [])
    assert listed(["Ongoing"]) == (NONE, [TXN], [])
    assert listed(["Empty", "Bogus"]) == (NONE, ["b"], ["Bogus"])
    assert listed(["Bogus"]) == (NONE, [], ["Bogus"])
    assert listed(pids=[1001]) == (NONE, ["b"], [])
    assert listed(states=["Ongoing"], duration=1000) == (NONE, [TXN], [])
    assert listed(states=["Ongoing"], duration=1001) == (NONE, [], [])
    h.core.begin_load(0, 9)
    assert listed()[0] is ErrorCode.coordinator_load_in_progress


def test_config_from_properties() -> None:
    config = TxnConfig.from_properties({"transaction.max.timeout.ms": "5000",
                                        "transaction.state.log.num.partitions": "3"})
    assert config.max_timeout_ms == 5000 and config.partition_count == 3
    assert config.id_expiration_ms == 604_800_000
