"""`pykraft transactions`: inspect and abort transactions, like kafka-transactions.sh.

    pykraft transactions --bootstrap-server H:P list
    pykraft transactions --bootstrap-server H:P describe --transactional-id ID
    pykraft transactions --bootstrap-server H:P abort --topic T --partition P
        (--start-offset OFFSET | --producer-id PID --producer-epoch E --coordinator-epoch C)
    pykraft transactions --bootstrap-server H:P describe-producers --topic T --partition P
        [--broker-id B]
    pykraft transactions --bootstrap-server H:P find-hanging (--topic T [--partition P] |
        --broker-id B) [--max-transaction-timeout MINUTES]

`list` asks every broker (ListTransactions) and prints Kafka's columns TransactionalId,
Coordinator, ProducerId, TransactionState. `describe` finds the id's coordinator
(FindCoordinator key type 1) and prints DescribeTransactions as Kafka's tool does
(CoordinatorId, TransactionalId, ProducerId, ProducerEpoch, TransactionState,
TransactionTimeoutMs, CurrentTransactionStartTimeMs, TransactionDurationMs,
TopicPartitions; "None" where no transaction is running). `abort` writes an ABORT marker for
the producer on the partition (WriteTxnMarkers to its leader), for a hanging transaction;
with `--start-offset` the producer, its epoch and coordinator epoch are those of the
partition's open transaction that starts there (DescribeProducers). `describe-producers`
prints a partition's active producers with Kafka's columns ProducerId, ProducerEpoch,
LatestCoordinatorEpoch, LastSequence, LastTimestamp, CurrentTransactionStartOffset.
`list --duration-filter MS` lists only transactions running longer (ListTransactions v1).
`find-hanging` looks, as Kafka's tool does, for open transactions (DescribeProducers) older
than the longest transaction timeout (15 minutes unless given) whose producer id no
coordinator lists (ListTransactions) or whose transaction no longer includes the partition
(DescribeTransactions): Kafka's columns Topic, Partition, ProducerId, ProducerEpoch,
CoordinatorEpoch, StartOffset, LastTimestamp, Duration(min); `abort --start-offset` ends one.
With nothing to show, each prints Kafka's header alone.
"""

from __future__ import annotations

import argparse
import struct
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import TransactionalId

from pykraft.cli.args import (
    INT16,
    INT32,
    INT64,
    ArgumentParser,
    CommandError,
    UsageError,
    load_properties,
)
from pykraft.cli.client_config import timeout_seconds
from pykraft.cli.consumer_groups import format_table
from pykraft.cli.protocol_client import ProtocolClient, error_message, error_name

__all__ = ["add_parser", "parse_describe_transactions"]

METADATA: Final = 3
FIND_COORDINATOR: Final = 10
WRITE_TXN_MARKERS: Final = 27
DESCRIBE_PRODUCERS: Final = 61
DESCRIBE_TRANSACTIONS: Final = 65
LIST_TRANSACTIONS: Final = 66
CLIENT_ID: Final = "pykraft-transactions"


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "transactions", help="list, describe and abort transactions (kafka-transactions.sh)",
        description="This tool is used to analyze the transactional state of producers in "
        "the cluster. It can be used to detect and recover from hanging transactions.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the server(s) to connect to")
    parser.add_argument("--command-config", metavar="FILE",
                        help="a properties file of admin client configs (security settings, "
                             "default.api.timeout.ms)")
    actions = parser.add_subparsers(
        dest="action", metavar="{list,describe,describe-producers,abort,find-hanging}")
    listing = actions.add_parser("list", help="list transactions")
    listing.add_argument("--duration-filter", type=INT64, metavar="MS",
                         help="only transactions running longer than MS milliseconds "
                         "(all when negative)")
    describe = actions.add_parser("describe", help="describe the state of an active "
                                  "transactional-id")
    describe.add_argument("--transactional-id", metavar="ID",
                          help="REQUIRED: the transactional id to describe")
    producers = actions.add_parser("describe-producers",
                                   help="describe the states of active producers for a topic "
                                   "partition")
    producers.add_argument("--broker-id", type=INT32, metavar="ID",
                           help="describe the producers on this replica (default: the leader)")
    producers.add_argument("--topic", metavar="TOPIC", help="REQUIRED: topic name")
    producers.add_argument("--partition", type=INT32, metavar="P",
                           help="REQUIRED: partition number")
    abort = actions.add_parser("abort", help="abort a hanging transaction (requires "
                               "administrative privileges)")
    abort.add_argument("--topic", metavar="TOPIC", help="REQUIRED: topic name")
    abort.add_argument("--partition", type=INT32, metavar="P", help="REQUIRED: partition number")
    abort.add_argument("--start-offset", type=INT64, metavar="OFFSET",
                       help="start offset of the transaction to abort")
    abort.add_argument("--producer-id", type=INT64, metavar="PID",
                       help="producer id of the transaction to abort (instead of "
                       "--start-offset)")
    abort.add_argument("--producer-epoch", type=INT16, metavar="E",
                       help="producer epoch of the transaction to abort (with --producer-id)")
    abort.add_argument("--coordinator-epoch", type=INT32, metavar="C",
                       help="coordinator epoch of the transaction to abort (with "
                       "--producer-id)")
    hanging = actions.add_parser("find-hanging", help="find hanging transactions")
    hanging.add_argument("--broker-id", type=INT32, metavar="ID",
                         help="broker id to search for hanging transactions")
    hanging.add_argument("--max-transaction-timeout", type=INT32, default=15, metavar="MIN",
                         help="maximum transaction timeout in minutes to limit the scope of "
                         "the search (default 15)")
    hanging.add_argument("--topic", metavar="TOPIC",
                         help="topic name to limit the search to (required with --partition)")
    hanging.add_argument("--partition", type=INT32, metavar="P", help="partition number")
    parser.set_defaults(handler=_run_args)


def _run_args(args: argparse.Namespace) -> int:
    if not args.bootstrap_server:
        raise UsageError("Missing required argument \"[bootstrap-server]\"")
    properties = load_properties(args.command_config) if args.command_config else {}
    timeout_s = timeout_seconds(properties)
    if args.action == "list":
        return run_list(args.bootstrap_server, timeout_s, properties, args.duration_filter)
    if args.action == "describe":
        if not args.transactional_id:
            raise UsageError("Missing required argument \"[transactional-id]\"")
        return run_describe(args.bootstrap_server, args.transactional_id, timeout_s, properties)
    if args.action == "abort":
        ids = ("producer_id", "producer_epoch", "coordinator_epoch")
        _require(args, ("topic", "partition") if args.start_offset is not None
                 else ("topic", "partition", *ids))
        if args.start_offset is not None:
            if any(getattr(args, name) is not None for name in ids):
                raise UsageError("give --start-offset or the producer's ids, not both")
            return run_abort_at(args.bootstrap_server, args.topic, args.partition,
                                args.start_offset, timeout_s, properties)
        return run_abort(args.bootstrap_server, args.topic, args.partition, args.producer_id,
                         args.producer_epoch, args.coordinator_epoch, timeout_s, properties)
    if args.action == "describe-producers":
        _require(args, ("topic", "partition"))
        return run_describe_producers(args.bootstrap_server, args.topic, args.partition,
                                      timeout_s, properties, broker_id=args.broker_id)
    if args.action == "find-hanging":
        if args.topic is None and args.broker_id is None:
            raise UsageError("The `find-hanging` command requires either --topic or "
                             "--broker-id to limit the scope of the search")
        if args.partition is not None and args.topic is None:
            raise UsageError("The --partition argument requires --topic to be provided")
        return run_find_hanging(args.bootstrap_server, timeout_s, properties,
                                broker_id=args.broker_id, topic=args.topic,
                                partition=args.partition,
                                max_timeout_ms=args.max_transaction_timeout * 60_000)
    raise UsageError("name an action: list, describe, describe-producers, abort or "
                     "find-hanging")


def _require(args: argparse.Namespace, names: Sequence[str]) -> None:
    missing = [name for name in names if getattr(args, name) is None]
    if missing:
        raise UsageError("Missing required argument(s) " + ", ".join(
            f"[{name.replace('_', '-')}]" for name in missing))


class _Client(ProtocolClient):
    def raw(self, api_key: int, version: int, request: Any) -> bytes:
        """The response frame, undecoded (kio refuses DescribeTransactions' start time -1)."""
        self.version_for(api_key, "DescribeTransactions", (version, version))
        return self._round_trip(api_key, version, request)


def _metadata(client: ProtocolClient, topics: Sequence[str] | None) -> Any:
    def build(module: Any, version: int) -> Any:
        return module.MetadataRequest(
            topics=None if topics is None else tuple(
                module.MetadataRequestTopic(topic_id=None, name=name) for name in topics),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)

    _, answer = client.request(METADATA, "Metadata", (12, 12), build)
    return answer


def _address(answer: Any, broker_id: int) -> str:
    for broker in answer.brokers:
        if broker.node_id == broker_id:
            return f"{broker.host}:{broker.port}"
    raise CommandError(f"broker {broker_id} is not in the cluster metadata")


# -- list ----------------------------------------------------------------------------------


def _list_transactions(bootstrap: str, timeout_s: float, properties: Mapping[str, str], *,
                       duration_ms: int | None = None,
                       producer_ids: Sequence[int] = ()) -> tuple[list[list[Any]], bool]:
    """ListTransactions on every broker: rows of (id, coordinator, producer id, state), and
    whether some broker failed (reported on stdout as it goes)."""
    with ProtocolClient(bootstrap, timeout_s=timeout_s, client_id=CLIENT_ID,
                        properties=properties) as client:
        brokers = sorted((int(b.node_id), f"{b.host}:{b.port}")
                         for b in _metadata(client, ()).brokers)
    rows: list[list[Any]] = []
    failed = False
    for broker_id, address in brokers:
        def build(module: Any, version: int) -> Any:
            if version >= 1:
                return module.ListTransactionsRequest(
                    state_filters=(), producer_id_filters=tuple(producer_ids),
                    duration_filter=-1 if duration_ms is None else duration_ms)
            if duration_ms is not None:
                raise CommandError("a broker does not support --duration-filter "
                                   "(ListTransactions v0)")
            return module.ListTransactionsRequest(state_filters=(),
                                                  producer_id_filters=tuple(producer_ids))

        with ProtocolClient(address, timeout_s=timeout_s, client_id=CLIENT_ID,
                            properties=properties) as broker:
            _, answer = broker.request(LIST_TRANSACTIONS, "ListTransactions", (0, 1), build)
        if answer.error_code != ErrorCode.none:
            failed = True
            print(f"Failed to list transactions of broker {broker_id}: "
                  f"{error_name(answer.error_code)}")
            continue
        rows += [[each.transactional_id, broker_id, each.producer_id, each.transaction_state]
                 for each in answer.transaction_states]
    return rows, failed


def run_list(bootstrap: str, timeout_s: float, properties: Mapping[str, str],
             duration_ms: int | None = None) -> int:
    rows, failed = _list_transactions(bootstrap, timeout_s, properties, duration_ms=duration_ms)
    for line in format_table(["TransactionalId", "Coordinator", "ProducerId",
                              "TransactionState"], sorted(rows, key=lambda r: str(r[0]))):
        print(line)
    return 1 if failed else 0


# -- describe ------------------------------------------------------------------------------


def _transaction_state(bootstrap: str, txn_id: str, timeout_s: float,
                       properties: Mapping[str, str], failure: str) -> tuple[int, dict[str, Any]]:
    """The coordinator's id and its DescribeTransactions answer for `txn_id` (its error
    code included); CommandError "`failure`: reason" when the coordinator is not found."""
    with ProtocolClient(bootstrap, timeout_s=timeout_s, client_id=CLIENT_ID,
                        properties=properties) as client:
        def find(module: Any, version: int) -> Any:
            return module.FindCoordinatorRequest(key_type=1, coordinator_keys=(txn_id,))

        _, found = client.request(FIND_COORDINATOR, "FindCoordinator", (4, 6), find)
    coordinator = found.coordinators[0]
    if coordinator.error_code != ErrorCode.none:
        raise CommandError(f"{failure}: {error_message(coordinator.error_code)}")
    address = f"{coordinator.host}:{coordinator.port}"
    broker = _Client(address, timeout_s=timeout_s, client_id=CLIENT_ID, properties=properties)
    try:
        frame = broker.raw(DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(
            transactional_ids=(TransactionalId(txn_id),)))
    finally:
        broker.close()
    states = parse_describe_transactions(frame)
    if len(states) != 1:
        raise CommandError(f"{failure}: {address} answered {len(states)} ids for one")
    return int(coordinator.node_id), states[0]


def run_describe(bootstrap: str, txn_id: str, timeout_s: float,
                 properties: Mapping[str, str]) -> int:
    failure = f"Failed to describe transaction state of transactional-id `{txn_id}`"
    coordinator_id, state = _transaction_state(bootstrap, txn_id, timeout_s, properties, failure)
    if state["error_code"] != ErrorCode.none:
        raise CommandError(f"{failure}: {error_message(state['error_code'])}")
    start = state["start_ms"]
    now_ms = int(time.time() * 1000)
    partitions = ",".join(f"{topic}-{index}" for topic, indexes in state["topics"]
                          for index in indexes)
    for line in format_table(
            ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
             "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
             "TransactionDurationMs", "TopicPartitions"],
            [[coordinator_id, txn_id, state["producer_id"], state["producer_epoch"],
              state["state"], state["timeout_ms"], "None" if start < 0 else start,
              "None" if start < 0 else max(0, now_ms - start), partitions]]):
        print(line)
    return 0


def parse_describe_transactions(frame: bytes) -> list[dict[str, Any]]:
    """A DescribeTransactions v0 response frame (correlation id first), read by hand."""
    position = 4

    def varint() -> int:
        nonlocal position
        value = shift = 0
        while True:
            if position >= len(frame):
                raise CommandError("a truncated DescribeTransactions response")
            byte = frame[position]
            position += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    def fixed(layout: str) -> int:
        nonlocal position
        try:
            (value,) = struct.unpack_from(layout, frame, position)
        except struct.error as error:
            raise CommandError("a truncated DescribeTransactions response") from error
        position += struct.calcsize(layout)
        return int(value)

    def string() -> str:
        nonlocal position
        length = varint() - 1
        position += length
        return frame[position - length:position].decode("utf-8")

    def skip_tags() -> None:
        nonlocal position
        for _ in range(varint()):
            varint()
            position += varint()

    skip_tags()  # response header
    fixed(">i")  # throttle time
    states = []
    for _ in range(varint() - 1):
        state: dict[str, Any] = {"error_code": ErrorCode(fixed(">h")),
                                 "transactional_id": string(), "state": string(),
                                 "timeout_ms": fixed(">i"), "start_ms": fixed(">q"),
                                 "producer_id": fixed(">q"), "producer_epoch": fixed(">h")}
        topics = []
        for _ in range(varint() - 1):
            name = string()
            topics.append((name, [fixed(">i") for _ in range(varint() - 1)]))
            skip_tags()
        state["topics"] = topics
        skip_tags()
        states.append(state)
    return states


# -- abort ---------------------------------------------------------------------------------


def _leader_address(bootstrap: str, topic: str, partition: int, timeout_s: float,
                    properties: Mapping[str, str], failure: str) -> str:
    """The partition leader's host:port; CommandError "`failure`: reason" if there is none."""
    with ProtocolClient(bootstrap, timeout_s=timeout_s, client_id=CLIENT_ID,
                        properties=properties) as client:
        answer = _metadata(client, [topic])
    found = next((t for t in answer.topics if t.name == topic), None)
    code = ErrorCode.unknown_topic_or_partition if found is None else found.error_code
    if code != ErrorCode.none:
        raise CommandError(f"{failure}: {error_message(code)}")
    assert found is not None
    leader = next((p.leader_id for p in found.partitions if p.partition_index == partition),
                  None)
    if leader is None:
        raise CommandError(f"{failure}: {error_message(ErrorCode.unknown_topic_or_partition)}")
    if leader < 0:
        raise CommandError(f"{failure}: {error_message(ErrorCode.leader_not_available)}")
    return _address(answer, leader)


def _producers(address: str, topic: str, partition: int, timeout_s: float,
               properties: Mapping[str, str], failure: str) -> list[Any]:
    def build(module: Any, version: int) -> Any:
        return module.DescribeProducersRequest(topics=(module.TopicRequest(
            name=topic, partition_indexes=(partition,)),))

    with ProtocolClient(address, timeout_s=timeout_s, client_id=CLIENT_ID,
                        properties=properties) as broker:
        _, answer = broker.request(DESCRIBE_PRODUCERS, "DescribeProducers", (0, 0), build)
    found = next((p for t in answer.topics if t.name == topic for p in t.partitions
                  if p.partition_index == partition), None)
    if found is None:
        raise CommandError(f"{failure}: {address} did not answer for the partition")
    if found.error_code != ErrorCode.none:
        raise CommandError(f"{failure}: {error_message(found.error_code)}")
    return list(found.active_producers)


def run_describe_producers(bootstrap: str, topic: str, partition: int, timeout_s: float,
                           properties: Mapping[str, str], *,
                           broker_id: int | None = None) -> int:
    replica = "leader" if broker_id is None else f"broker {broker_id}"
    failure = f"Failed to describe producers for partition {topic}-{partition} on {replica}"
    if broker_id is None:
        address = _leader_address(bootstrap, topic, partition, timeout_s, properties, failure)
    else:
        with ProtocolClient(bootstrap, timeout_s=timeout_s, client_id=CLIENT_ID,
                            properties=properties) as client:
            address = _address(_metadata(client, ()), broker_id)
    rows = [[p.producer_id, p.producer_epoch,
             "None" if p.coordinator_epoch < 0 else p.coordinator_epoch, p.last_sequence,
             p.last_timestamp,
             "None" if p.current_txn_start_offset < 0 else p.current_txn_start_offset]
            for p in _producers(address, topic, partition, timeout_s, properties, failure)]
    for line in format_table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch",
                              "LastSequence", "LastTimestamp",
                              "CurrentTransactionStartOffset"], sorted(rows)):
        print(line)
    return 0


def run_abort_at(bootstrap: str, topic: str, partition: int, start_offset: int,
                 timeout_s: float, properties: Mapping[str, str]) -> int:
    """Abort the open transaction of `topic`-`partition` that starts at `start_offset`."""
    failure = f"Failed to validate producer state for partition {topic}-{partition}"
    address = _leader_address(bootstrap, topic, partition, timeout_s, properties, failure)
    found = [p for p in _producers(address, topic, partition, timeout_s, properties, failure)
             if p.current_txn_start_offset == start_offset]
    if not found:
        raise CommandError(f"Could not find any open transactions starting at offset "
                           f"{start_offset} on partition {topic}-{partition}")
    producer = found[0]  # as Kafka's tool: one transaction starts at an offset
    return run_abort(bootstrap, topic, partition, producer.producer_id,
                     producer.producer_epoch, max(producer.coordinator_epoch, 0), timeout_s,
                     properties)


def run_abort(bootstrap: str, topic: str, partition: int, producer_id: int,
              producer_epoch: int, coordinator_epoch: int, timeout_s: float,
              properties: Mapping[str, str]) -> int:
    failure = (f"Failed to abort transaction of producer {producer_id} (epoch "
               f"{producer_epoch}) on partition {topic}-{partition}")
    address = _leader_address(bootstrap, topic, partition, timeout_s, properties, failure)

    def build(module: Any, version: int) -> Any:
        return module.WriteTxnMarkersRequest(markers=(module.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
            coordinator_epoch=coordinator_epoch, topics=(module.WritableTxnMarkerTopic(
                name=topic, partition_indexes=(partition,)),)),))

    with ProtocolClient(address, timeout_s=timeout_s, client_id=CLIENT_ID,
                        properties=properties) as broker:
        _, written = broker.request(WRITE_TXN_MARKERS, "WriteTxnMarkers", (1, 1), build)
    code = written.markers[0].topics[0].partitions[0].error_code
    if code != ErrorCode.none:
        raise CommandError(f"{failure}: {error_message(code)}")
    return 0


# -- find-hanging --------------------------------------------------------------------------

HANGING_HEADERS: Final = ("Topic", "Partition", "ProducerId", "ProducerEpoch",
                          "CoordinatorEpoch", "StartOffset", "LastTimestamp", "Duration(min)")
_BATCH: Final = 500  # partitions per DescribeProducers, as Kafka's tool batches them


def run_find_hanging(bootstrap: str, timeout_s: float, properties: Mapping[str, str], *,
                     broker_id: int | None, topic: str | None, partition: int | None,
                     max_timeout_ms: int) -> int:
    """Kafka's find-hanging: the open transactions (DescribeProducers) older than the
    longest transaction timeout whose producer the coordinators do not know, or whose
    transaction no longer includes the partition: no marker will ever close them."""
    with ProtocolClient(bootstrap, timeout_s=timeout_s, client_id=CLIENT_ID,
                        properties=properties) as client:
        answer = _metadata(client, None if topic is None else [topic])
    addresses = {int(b.node_id): f"{b.host}:{b.port}" for b in answer.brokers}
    if broker_id is not None and broker_id not in addresses:
        raise CommandError(f"broker {broker_id} is not in the cluster metadata")
    # each partition is asked of the broker given, or else of its leader
    by_broker: dict[int, list[tuple[str, int]]] = {}
    for found in answer.topics:
        if found.error_code != ErrorCode.none:
            raise CommandError(f"Failed to describe 1 topics: {error_message(found.error_code)}")
        for each in found.partitions:
            if partition is not None and each.partition_index != partition:
                continue
            if broker_id is not None and broker_id not in each.replica_nodes:
                continue
            target = broker_id if broker_id is not None else int(each.leader_id)
            by_broker.setdefault(target, []).append((str(found.name), int(each.partition_index)))
    now_ms = int(time.time() * 1000)
    candidates: list[tuple[str, int, Any]] = []
    for target, partitions in sorted(by_broker.items()):
        if target not in addresses:
            reason = error_message(ErrorCode.leader_not_available)
            raise CommandError(f"Failed to describe producers for {len(partitions)} "
                               f"partitions on broker {target}: {reason}")
        for start in range(0, len(partitions), _BATCH):
            for name, index, producer in _producers_of(addresses[target],
                                                       partitions[start:start + _BATCH],
                                                       timeout_s, properties):
                if (producer.current_txn_start_offset >= 0
                        and now_ms - producer.last_timestamp > max_timeout_ms):
                    candidates.append((name, index, producer))
    hanging = _hanging(bootstrap, timeout_s, properties, candidates)
    rows = [[name, index, p.producer_id, p.producer_epoch, p.coordinator_epoch,
             p.current_txn_start_offset, p.last_timestamp,
             max(0, now_ms - p.last_timestamp) // 60_000] for name, index, p in hanging]
    for line in format_table(HANGING_HEADERS, rows):
        print(line)
    return 0


def _producers_of(address: str, partitions: Sequence[tuple[str, int]],
                  timeout_s: float, properties: Mapping[str, str]) -> list[tuple[str, int, Any]]:
    by_topic: dict[str, list[int]] = {}
    for name, index in partitions:
        by_topic.setdefault(name, []).append(index)

    def build(module: Any, version: int) -> Any:
        return module.DescribeProducersRequest(topics=tuple(
            module.TopicRequest(name=name, partition_indexes=tuple(indexes))
            for name, indexes in by_topic.items()))

    with ProtocolClient(address, timeout_s=timeout_s, client_id=CLIENT_ID,
                        properties=properties) as broker:
        _, answer = broker.request(DESCRIBE_PRODUCERS, "DescribeProducers", (0, 0), build)
    found = []
    for topic in answer.topics:
        for each in topic.partitions:
            if each.error_code != ErrorCode.none:
                raise CommandError(f"Failed to describe producers for {len(partitions)} "
                                   f"partitions on broker {address}: "
                                   f"{error_message(each.error_code)}")
            found += [(str(topic.name), int(each.partition_index), producer)
                      for producer in each.active_producers]
    return found


def _hanging(bootstrap: str, timeout_s: float, properties: Mapping[str, str],
             candidates: list[tuple[str, int, Any]]) -> list[tuple[str, int, Any]]:
    if not candidates:
        return []
    producer_ids = sorted({producer.producer_id for _, _, producer in candidates})
    rows, failed = _list_transactions(bootstrap, timeout_s, properties, producer_ids=producer_ids)
    if failed:
        raise CommandError(f"Failed to list transactions for {len(producer_ids)} producers")
    ids = {int(row[2]): str(row[0]) for row in rows if int(row[2]) in producer_ids}
    included: dict[str, set[tuple[str, int]] | None] = {}
    for txn_id in sorted(set(ids.values())):
        failure = f"Failed to describe {len(ids)} transactions"
        _, state = _transaction_state(bootstrap, txn_id, timeout_s, properties, failure)
        if state["error_code"] == ErrorCode.transactional_id_not_found:
            included[txn_id] = None
        elif state["error_code"] != ErrorCode.none:
            raise CommandError(f"{failure}: {error_message(state['error_code'])}")
        else:
            included[txn_id] = {(name, index) for name, indexes in state["topics"]
                                for index in indexes}
    hanging = []
    for name, index, producer in candidates:
        known = ids.get(producer.producer_id)
        partitions = None if known is None else included.get(known)
        # a producer no coordinator knows, or a transaction that no longer has the
        # partition (its marker is not coming): hanging
        if partitions is None or (name, index) not in partitions:
            hanging.append((name, index, producer))
    return hanging
