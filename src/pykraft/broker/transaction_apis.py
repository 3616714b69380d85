"""Handlers for the transaction APIs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, WriteTxnMarkers, DescribeTransactions, ListTransactions, and the transaction
coordinator lookup behind FindCoordinator key type 1.

Each handler turns a kio request (of whatever version) into a call on the coordinator core
through its shell and builds the response of the same version with `make`. PRODUCER_FENCED
is answered as INVALID_PRODUCER_EPOCH to the versions before KIP-588's (InitProducerId < 4,
AddPartitionsToTxn/AddOffsetsToTxn/EndTxn < 2), as Kafka does.

The coordinator of a transactional id is the leader of `__transaction_state` partition
hash(id) % transaction.state.log.num.partitions; the topic is created on the first lookup
through the controller channel (replication factor transaction.state.log.replication.factor
capped by the live brokers, min.insync.replicas transaction.state.log.min.isr, compacted).

InitProducerId without a transactional id (an idempotent producer) gets a fresh producer id
at epoch 0 from the same producer-id source the coordinator draws from: blocks of ids from
the active controller (transaction_coordinator.producer_ids); while the broker has no id,
COORDINATOR_LOAD_IN_PROGRESS, which clients retry.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.broker.admin_apis import ControllerChannel
from pykraft.broker.authorization import Authorized, allowed_names, allows, allows_cluster, refusal
from pykraft.broker.internal_topics import internal_topic
from pykraft.broker.metadata_cache import MetadataCache
from pykraft.broker.replica_fetcher import BrokerConnection
from pykraft.broker.replica_manager import ReplicaManager
from pykraft.broker.transaction_coordinator.core import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    InitResult,
    TransactionCoordinator,
    TxnConfig,
    TxnDescription,
)
from pykraft.broker.transaction_coordinator.producer_ids import ProducerIdManager
from pykraft.broker.transaction_coordinator.shell import (
    TRANSACTION_STATE_TOPIC,
    TransactionCoordinatorShell,
)
from pykraft.broker.txn_markers import Marker, MarkerSender, MarkerWriter
from pykraft.net.connect import ClientSecurity
from pykraft.net.server import RequestContext
from pykraft.protocol.acls import AclOperation, ResourceType
from pykraft.protocol.api import ApiKey
from pykraft.protocol.entities import NO_THROTTLE, field, make, millis, response_module

__all__ = ["TRANSACTION_APIS", "TransactionApis", "TransactionParts"]

log = logging.getLogger(__name__)

TRANSACTION_APIS: Final[dict[int, tuple[int, int]]] = {
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    # v5 may carry TRANSACTION_ABORTABLE (KIP-890), which this coordinator never answers
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    # v5 is KIP-890 part 2 (transaction.version 2, which is never finalized here, so no client
    # sends it): answered as v4, with the producer id and epoch unchanged (docs/deviations.md)
    ApiKey.END_TXN: (0, 5),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
}

# the first version of each API that knows PRODUCER_FENCED (KIP-588)
_FENCED_FROM: Final[dict[int, int]] = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2,
                       ApiKey.ADD_OFFSETS_TO_TXN: 2, ApiKey.END_TXN: 2}

Handler = Callable[[RequestContext, Any], Awaitable[Any]]
Coordinator = tuple[ErrorCode, str | None, int, str, int]  # code, message, node, host, port


def _for_version(error: ErrorCode, api_key: int, version: int) -> ErrorCode:
    if error is ErrorCode.producer_fenced and version < _FENCED_FROM.get(api_key, 0):
        return ErrorCode.invalid_producer_epoch
    return error


Op = AclOperation
TXN_ID = ResourceType.TRANSACTIONAL_ID


class TransactionApis(Authorized):
    """The transaction API group (see broker.apis.ApiGroup).

    Authorization, as Kafka's KafkaApis: a transactional producer needs WRITE on its
    transactional id for InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), WRITE on each topic it adds
    (TOPIC_AUTHORIZATION_FAILED, the rest OPERATION_NOT_ATTEMPTED) and READ on the group whose
    offsets it adds (GROUP_AUTHORIZATION_FAILED); an idempotent producer's InitProducerId needs
    IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679), else
    CLUSTER_AUTHORIZATION_FAILED. AddPartitionsToTxn v4+ and WriteTxnMarkers come from
    brokers: CLUSTER_ACTION. DescribeTransactions needs DESCRIBE on each transactional id and
    shows only the topics the principal may DESCRIBE; ListTransactions lists the ids it may
    DESCRIBE. A refused request reaches no coordinator.
    """

    def __init__(
        self,
        node_id: int,
        cache: MetadataCache,
        coordinator: TransactionCoordinatorShell,
        markers: MarkerWriter,
        controller: ControllerChannel,
        server_configs: Mapping[str, str],
        producer_ids: Callable[[], int | None],
    ) -> None:
        self.node_id = node_id
        self.cache = cache
        self.shell = coordinator
        self.core = coordinator.core
        self.markers = markers
        self.controller = controller
        self.server_configs = server_configs
        self.producer_ids = producer_ids
        self._creating = asyncio.Lock()

    @property
    def versions(self) -> Mapping[int, tuple[int, int]]:
        return TRANSACTION_APIS

    def handlers(self) -> dict[int, Handler]:
        return {
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
            ApiKey.END_TXN: self.end_txn,
            ApiKey.WRITE_TXN_MARKERS: self.write_txn_markers,
            ApiKey.DESCRIBE_TRANSACTIONS: self.describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.list_transactions,
        }

    # -- FindCoordinator (key type 1) ---------------------------------------------------

    async def find_coordinator(self, key: str, listener: str) -> Coordinator:
        if not key:
            return (ErrorCode.invalid_request, "an empty transactional id", -1, "", -1)
        if self.cache.image.topics.by_name.get(TRANSACTION_STATE_TOPIC) is None:
            await self.ensure_state_topic(listener)
        topic = self.cache.image.topics.by_name.get(TRANSACTION_STATE_TOPIC)
        registration = None if topic is None else topic.partitions.get(
            self.core.partition_for(key))
        leader = -1 if registration is None else registration.leader
        for broker_id, host, port, _ in self.cache.live_brokers(listener):
            if broker_id == leader:
                return ErrorCode.none, None, broker_id, host, port
        return (ErrorCode.coordinator_not_available,
                "the transaction coordinator is not available", -1, "", -1)

    async def ensure_state_topic(self, listener: str) -> None:
        async with self._creating:
            if self.cache.image.topics.by_name.get(TRANSACTION_STATE_TOPIC) is not None:
                return
            topic = internal_topic(TRANSACTION_STATE_TOPIC, self.server_configs,
                                   len(self.cache.live_brokers(listener)))
            results = await self.controller.create_topics([topic], validate_only=False)
            for result in results:
                if result.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                    log.warning("cannot create %s: %s", TRANSACTION_STATE_TOPIC,
                                result.error_message)

    # -- produce verification (KIP-890 part 1) -------------------------------------------

    async def verify_produce(self, txn_id: str, producer_id: int, epoch: int, topic: str,
                             partition: int) -> ErrorCode:
        """Whether a transactional batch belongs to its producer's ongoing transaction:
        INVALID_TXN_STATE when the partition was not added, INVALID_PRODUCER_EPOCH for a stale
        epoch (Produce knows no PRODUCER_FENCED). Checked when this broker coordinates the
        transactional id; otherwise let through (no verification RPC to a remote
        coordinator yet)."""
        state = self.core.partitions.get(self.core.partition_for(txn_id))
        if state is None or state.loading:
            return ErrorCode.none
        (code,) = self.core.verify_partitions(txn_id, producer_id, epoch,
                                              [(topic, partition)]).values()
        if code is ErrorCode.producer_fenced:
            return ErrorCode.invalid_producer_epoch
        if code is ErrorCode.concurrent_transactions:
            return ErrorCode.invalid_txn_state  # the transaction is ending
        return code

    # -- InitProducerId -------------------------------------------------------------------

    async def init_producer_id(self, context: RequestContext, request: Any) -> Any:
        version = context.header.api_version
        module = response_module(ApiKey.INIT_PRODUCER_ID, version)
        txn_id = request.transactional_id
        refused = self._init_refusal(context, txn_id)
        if refused is not None:
            return refusal(ApiKey.INIT_PRODUCER_ID, version, refused)
        if txn_id is None:
            producer_id = self.producer_ids()
            result = (InitResult(ErrorCode.coordinator_load_in_progress) if producer_id is None
                      else InitResult(ErrorCode.none, producer_id, 0))
        else:
            pid = field(request, "producer_id", NO_PRODUCER_ID)
            epoch = field(request, "producer_epoch", NO_PRODUCER_EPOCH)
            if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
                result = InitResult(ErrorCode.invalid_request)
            else:
                expected = None if pid == NO_PRODUCER_ID else (int(pid), int(epoch))
                timeout_ms = millis(request.transaction_timeout)
                result = await self.shell.call(
                    lambda token, now: self.core.init_producer_id(
                        token, txn_id, timeout_ms, expected, now))
        return make(module.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                    error_code=_for_version(result.error, ApiKey.INIT_PRODUCER_ID, version),
                    producer_id=result.producer_id, producer_epoch=result.epoch)

    def _init_refusal(self, context: RequestContext, txn_id: str | None) -> ErrorCode | None:
        if txn_id is not None:
            if allows(self.authorizer, context, Op.WRITE, TXN_ID, txn_id):
                return None
            return ErrorCode.transactional_id_authorization_failed
        if allows_cluster(self.authorizer, context, Op.IDEMPOTENT_WRITE) or (
                self.authorizer.authorize_by_resource_type(context, Op.WRITE,
                                                           ResourceType.TOPIC)):
            return None
        return ErrorCode.cluster_authorization_failed

    # -- AddPartitionsToTxn -------------------------------------------------------------

    async def add_partitions_to_txn(self, context: RequestContext, request: Any) -> Any:
        version = context.header.api_version
        module = response_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
        if version >= 4 and not allows_cluster(self.authorizer, context, Op.CLUSTER_ACTION):
            return refusal(ApiKey.ADD_PARTITIONS_TO_TXN, version,
                           ErrorCode.cluster_authorization_failed)
        if version < 4:
            topics = await self._add_partitions(
                context, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch, request.v3_and_below_topics, False,
                version)
            return make(module.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE,
                        results_by_topic_v3_and_below=self._topic_results(module, topics))
        results = []
        for txn in request.transactions:
            topics = await self._add_partitions(context, txn.transactional_id, txn.producer_id,
                                                txn.producer_epoch, txn.topics,
                                                txn.verify_only, version)
            results.append(make(module.AddPartitionsToTxnResult,
                                transactional_id=txn.transactional_id,
                                topic_results=self._topic_results(module, topics)))
        return make(module.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.none, results_by_transaction=tuple(results))

    async def _add_partitions(self, context: RequestContext, txn_id: str, producer_id: int,
                              epoch: int, topics: Any, verify_only: bool, version: int
                              ) -> dict[str, dict[int, ErrorCode]]:
        wanted = [(topic.name, int(index)) for topic in topics for index in topic.partitions]
        known = self.cache.image.topics.by_name
        unknown = {(topic, index) for topic, index in wanted
                   if known.get(topic) is None or index not in known[topic].partitions}
        allowed = allowed_names(self.authorizer, context, Op.WRITE, ResourceType.TOPIC,
                                (topic for topic, _ in wanted))
        outcome: dict[tuple[str, int], ErrorCode]
        if not allows(self.authorizer, context, Op.WRITE, TXN_ID, txn_id):
            outcome = dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
        elif any(topic not in allowed for topic, _ in wanted):  # nothing is added
            outcome = {each: (ErrorCode.topic_authorization_failed if each[0] not in allowed
                              else ErrorCode.unknown_topic_or_partition if each in unknown
                              else ErrorCode.operation_not_attempted) for each in wanted}
        elif unknown:  # Kafka: nothing is added; the others are not attempted
            outcome = {each: (ErrorCode.unknown_topic_or_partition if each in unknown
                              else ErrorCode.operation_not_attempted) for each in wanted}
        elif verify_only:
            outcome = self.core.verify_partitions(txn_id, producer_id, epoch, wanted)
        else:
            error = await self.shell.call(
                lambda token, now: self.core.add_partitions(token, txn_id, producer_id,
                                                            epoch, wanted, now))
            outcome = dict.fromkeys(wanted, error)
        grouped: dict[str, dict[int, ErrorCode]] = {}
        for (topic, index), error in outcome.items():
            grouped.setdefault(topic, {})[index] = _for_version(
                error, ApiKey.ADD_PARTITIONS_TO_TXN, version)
        return grouped

    @staticmethod
    def _topic_results(module: Any, topics: dict[str, dict[int, ErrorCode]]) -> tuple[Any, ...]:
        return tuple(
            make(module.AddPartitionsToTxnTopicResult, name=topic, results_by_partition=tuple(
                make(module.AddPartitionsToTxnPartitionResult, partition_index=index,
                     partition_error_code=error)
                for index, error in sorted(partitions.items())))
            for topic, partitions in topics.items())

    # -- AddOffsetsToTxn / EndTxn -------------------------------------------------------

    async def add_offsets_to_txn(self, context: RequestContext, request: Any) -> Any:
        version = context.header.api_version
        module = response_module(ApiKey.ADD_OFFSETS_TO_TXN, version)
        if not allows(self.authorizer, context, Op.WRITE, TXN_ID, request.transactional_id):
            return refusal(ApiKey.ADD_OFFSETS_TO_TXN, version,
                           ErrorCode.transactional_id_authorization_failed)
        if not allows(self.authorizer, context, Op.READ, ResourceType.GROUP, request.group_id):
            return refusal(ApiKey.ADD_OFFSETS_TO_TXN, version,
                           ErrorCode.group_authorization_failed)
        error = await self.shell.call(
            lambda token, now: self.core.add_offsets(
                token, request.transactional_id, request.producer_id, request.producer_epoch,
                request.group_id, now))
        return make(module.AddOffsetsToTxnResponse, throttle_time=NO_THROTTLE,
                    error_code=_for_version(error, ApiKey.ADD_OFFSETS_TO_TXN, version))

    async def end_txn(self, context: RequestContext, request: Any) -> Any:
        version = context.header.api_version
        module = response_module(ApiKey.END_TXN, version)
        if not allows(self.authorizer, context, Op.WRITE, TXN_ID, request.transactional_id):
            return refusal(ApiKey.END_TXN, version,
                           ErrorCode.transactional_id_authorization_failed)
        error = await self.shell.call(
            lambda token, now: self.core.end_txn(
                token, request.transactional_id, request.producer_id, request.producer_epoch,
                request.committed, now))
        # v5 tells the producer id and epoch to use next; without transaction.version 2 the
        # end of a transaction bumps neither, so they are the request's (-1 on an error, as
        # Kafka answers a failed EndTxn)
        ended = error == ErrorCode.none
        return make(module.EndTxnResponse, throttle_time=NO_THROTTLE,
                    error_code=_for_version(error, ApiKey.END_TXN, version),
                    producer_id=request.producer_id if ended else -1,
                    producer_epoch=request.producer_epoch if ended else -1)

    # -- WriteTxnMarkers (the partition leader's side) ----------------------------------

    async def write_txn_markers(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ApiKey.WRITE_TXN_MARKERS, context.header.api_version)
        markers = [Marker(each.producer_id, each.producer_epoch, each.transaction_result,
                          each.coordinator_epoch,
                          tuple((topic.name, int(index)) for topic in each.topics
                                for index in topic.partition_indexes))
                   for each in request.markers]
        if allows_cluster(self.authorizer, context, Op.CLUSTER_ACTION):
            outcomes = await self.markers.write(markers)
        else:  # only brokers write markers
            outcomes = [dict.fromkeys(marker.partitions, ErrorCode.cluster_authorization_failed)
                        for marker in markers]
        results = []
        for marker, outcome in zip(markers, outcomes, strict=True):
            by_topic: dict[str, list[Any]] = {}
            for (topic, index), error in outcome.items():
                by_topic.setdefault(topic, []).append(make(
                    module.WritableTxnMarkerPartitionResult, partition_index=index,
                    error_code=error))
            results.append(make(module.WritableTxnMarkerResult,
                                producer_id=marker.producer_id, topics=tuple(
                                    make(module.WritableTxnMarkerTopicResult, name=topic,
                                         partitions=tuple(partitions))
                                    for topic, partitions in by_topic.items())))
        return make(module.WriteTxnMarkersResponse, markers=tuple(results))

    # -- DescribeTransactions / ListTransactions ----------------------------------------

    async def describe_transactions(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ApiKey.DESCRIBE_TRANSACTIONS, context.header.api_version)
        states = []
        for txn_id in request.transactional_ids:
            found = (self.core.describe(txn_id)
                     if allows(self.authorizer, context, Op.DESCRIBE, TXN_ID, txn_id)
                     else ErrorCode.transactional_id_authorization_failed)
            if isinstance(found, TxnDescription):
                by_topic: dict[str, list[int]] = {}
                visible = allowed_names(self.authorizer, context, Op.DESCRIBE,
                                        ResourceType.TOPIC, (t for t, _ in found.partitions))
                for topic, index in sorted(found.partitions):
                    if topic in visible:  # Kafka leaves out the topics it may not describe
                        by_topic.setdefault(topic, []).append(index)
                states.append(make(
                    module.TransactionState, error_code=ErrorCode.none, transactional_id=txn_id,
                    transaction_state=found.state.kafka_name,
                    transaction_timeout=datetime.timedelta(milliseconds=found.timeout_ms),
                    transaction_start_time=_datetime(found.start_ms),
                    producer_id=found.producer_id, producer_epoch=found.epoch,
                    topics=tuple(make(module.TopicData, topic=topic, partitions=tuple(parts))
                                 for topic, parts in by_topic.items())))
            else:
                states.append(make(
                    module.TransactionState, error_code=found, transactional_id=txn_id,
                    transaction_state="", transaction_timeout=datetime.timedelta(0),
                    transaction_start_time=_datetime(-1), producer_id=NO_PRODUCER_ID,
                    producer_epoch=NO_PRODUCER_EPOCH, topics=()))
        return make(module.DescribeTransactionsResponse, throttle_time=NO_THROTTLE,
                    transaction_states=tuple(states))

    async def list_transactions(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ApiKey.LIST_TRANSACTIONS, context.header.api_version)
        error, listings, unknown = self.core.list_transactions(
            request.state_filters, request.producer_id_filters,
            int(field(request, "duration_filter", -1)), self.shell.now_ms())
        visible = allowed_names(self.authorizer, context, Op.DESCRIBE, TXN_ID,
                                (each.transactional_id for each in listings))
        listings = [each for each in listings if each.transactional_id in visible]
        return make(module.ListTransactionsResponse, throttle_time=NO_THROTTLE,
                    error_code=error, unknown_state_filters=tuple(unknown),
                    transaction_states=tuple(
                        make(module.TransactionState, transactional_id=each.transactional_id,
                             producer_id=each.producer_id,
                             transaction_state=each.state.kafka_name)
                        for each in listings))


def _datetime(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)



class TransactionParts:
    """The broker's transaction machinery, built in one place for the node: the coordinator
    (core and shell), the marker writer (WriteTxnMarkers' receiving side) and sender, and
    the producer-id manager (its blocks come from the controller: shell.ProducerIdBlocks)."""

    def __init__(self, node_id: int, replicas: ReplicaManager, cache: MetadataCache,
                 values: Mapping[str, str],
                 broker_address: Callable[[int], tuple[str, int] | None],
                 now_ms: Callable[[], int],
                 producer_ids: Callable[[], int | None] | None = None,
                 security: ClientSecurity | None = None) -> None:
        self.node_id = node_id
        self.cache = cache
        self.values = values
        self.producer_id_manager = ProducerIdManager()
        self.producer_ids = producer_ids or self.producer_id_manager
        self.writer = MarkerWriter(replicas, cache, now_ms)
        timeout_ms = int(values.get("request.timeout.ms", "30000"))
        connections: dict[int, BrokerConnection] = {}

        def connect(broker_id: int) -> BrokerConnection:
            connection = connections.get(broker_id)
            if connection is None:
                connection = connections[broker_id] = BrokerConnection(
                    lambda: broker_address(broker_id), f"broker-{node_id}-txn-markers",
                    timeout_ms, security)
            return connection
        self.connections = connections
        self.sender = MarkerSender(node_id, cache, self.writer, connect)
        self.shell = TransactionCoordinatorShell(
            TransactionCoordinator(TxnConfig.from_properties(values), self.producer_ids),
            node_id, replicas, cache, now_ms, self.sender.send)

    def apis(self, controller: ControllerChannel) -> TransactionApis:
        return TransactionApis(self.node_id, self.cache, self.shell, self.writer, controller,
                               self.values, self.producer_ids)

    def close(self) -> None:
        for connection in self.connections.values():
            connection.close()
