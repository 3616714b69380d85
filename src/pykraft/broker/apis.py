"""Broker request handlers: the protocol edge of the data path.

Each handler reads a kio request entity of whatever version the client speaks, does the work
through the replica manager (data) or the controller channel (metadata changes, "forwarded"
to the active controller), and builds the response of the same version with `make`. Errors
are turned into the per-partition / per-topic error codes the API defines; exceptions that
are not KafkaError become UNKNOWN_SERVER_ERROR for that partition and are logged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from pykraft.broker.authorization import (
    CLUSTER_SUPPORTED,
    TOPIC_SUPPORTED,
    allowed_names,
    allows,
    allows_cluster,
    authorized_operations,
    is_allow_all,
    operations_if,
)
from pykraft.broker.authorizer import ALLOW_ALL, Authorizer
from pykraft.broker.fetch_sessions import (
    NO_SESSION,
    ZERO_TOPIC_ID,
    FetchContext,
    FetchSession,
    FetchSessionCache,
    SessionPartition,
    topic_key,
)
from pykraft.broker.internal_topics import UNCREATABLE_TOPICS
from pykraft.broker.metadata_cache import MetadataCache
from pykraft.broker.replica_manager import Partition, ReplicaManager, unpark
from pykraft.controller.features import api_versions_features
from pykraft.errors import (
    InvalidRecord,
    InvalidTopic,
    InvariantViolation,
    KafkaError,
    UnknownTopicId,
    UnknownTopicOrPartition,
    invariant,
)
from pykraft.metadata.image import MetadataImage
from pykraft.net.server import RequestContext
from pykraft.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from pykraft.protocol.api import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER_OPERATIONS,
    DATA_APIS,
    TOPIC_OPERATIONS,
    ApiKey,
)
from pykraft.protocol.entities import NO_THROTTLE, field, make, millis, response_module
from pykraft.records.batch import HEADER_SIZE as BATCH_HEADER_SIZE
from pykraft.records.batch import LOG_OVERHEAD as BATCH_LOG_OVERHEAD
from pykraft.records.batch import read_header
from pykraft.records.validate import check_client_batch
from pykraft.topic_names import RESERVED_TOPICS

log = logging.getLogger(__name__)

FETCH_MAX_BYTES_DEFAULT = 57_671_680  # Kafka's fetch.max.bytes: 55 MiB


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """What a Fetch read of one partition, before it becomes a PartitionData (only the
    partitions a response carries are made into entities)."""

    partition_index: int
    error_code: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes = b""
    aborted: tuple[tuple[int, int], ...] | None = None  # (producer id, first offset)
    diverging: tuple[int, int] | None = None  # (epoch, end offset)
    idle: tuple[Any, ...] | None = None  # nothing to read, in this state (SessionPartition)
    preferred_read_replica: int = -1  # KIP-392: fetch from this replica instead (no records)

EARLIEST_TIMESTAMP = -2
FIRST_FETCH_WITH_RACK = 11  # KIP-392: rack_id in requests, preferred_read_replica in answers
# a Fetch's look at its partitions yields to the loop after this long, checked every
# FETCH_SLICE_CHECK partitions (each look takes some 10-30 us)
FETCH_SLICE_S = 0.02
FETCH_SLICE_CHECK = 64
# a fetch session's partitions are all looked at (not only those noted as changed) this
# often: for a change nothing noted (retention moving a log start). An idle follower needs
# no look to stay caught up (FetchSessionCache.idle_follower_ms).
FULL_LOOK_MS = 60_000
READ_COMMITTED = 1  # isolation_level of Fetch and ListOffsets
FIRST_NULLABLE_METADATA_NAME = 12  # Metadata v12+: a topic answered by id may have no name
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


Handler = Callable[[RequestContext, Any], Awaitable[Any]]


class ApiGroup(Protocol):
    """A set of APIs served together: their version ranges and their handlers."""

    @property
    def versions(self) -> Mapping[int, tuple[int, int]]: ...

    def handlers(self) -> dict[int, Handler]: ...


def error_of(error: BaseException) -> tuple[ErrorCode, str | None]:
    if isinstance(error, InvariantViolation):
        raise error
    if isinstance(error, KafkaError):
        return error.code, str(error) or None
    log.exception("unexpected error handling a request", exc_info=error)
    return ErrorCode.unknown_server_error, None


def _has_transactional_batches(request: Any) -> bool:
    """Whether a Produce request carries a transactional batch (Kafka's
    RequestUtils.hasTransactionalRecords: the first batch of each partition tells)."""
    for topic in request.topic_data:
        for data in topic.partition_data:
            records = data.records or b""
            if len(records) >= BATCH_HEADER_SIZE and read_header(records).is_transactional:
                return True
    return False


def _check_client_records(records: bytes, topic: str, index: int, version: int) -> None:
    """What Kafka refuses of a client's records before its log sees them: writes to a
    reserved topic (ReplicaManager: INVALID_TOPIC_EXCEPTION), anything but exactly one batch
    per partition (ProduceRequest.validateRecords, v3+), and batches only coordinators may
    write (LogValidator.validateBatch for AppendOrigin.CLIENT). The CRC and every record are
    checked by the log's append."""
    if topic in RESERVED_TOPICS:
        raise InvalidTopic(f"Cannot append to internal topic {topic}")
    if len(records) < BATCH_HEADER_SIZE:
        raise InvalidRecord(f"Produce requests with version {version} must have at least one "
                            "record batch per partition")
    header = read_header(records)
    if 0 <= header.batch_length < len(records) - BATCH_LOG_OVERHEAD:
        raise InvalidRecord(f"Produce requests with version {version} are only allowed to "
                            "contain exactly one record batch per partition")
    check_client_batch(header, f"{topic}-{index}")


Op = AclOperation
TOPIC = ResourceType.TOPIC


class BrokerApis:
    """The dispatcher for broker listeners (see net.server.Dispatcher).

    Authorization: each handler asks `authorizer` (set by the node; ALLOW_ALL until then, and
    passed on to every API group) with Kafka's resource and operation for its API, as Kafka's
    KafkaApis does. Here: Produce needs WRITE on each topic (TOPIC_AUTHORIZATION_FAILED on its
    partitions) and, with transactional batches, WRITE on the transactional id
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition); a consumer's Fetch READ on
    each topic, a follower's CLUSTER_ACTION on the cluster; ListOffsets DESCRIBE on each
    topic; Metadata DESCRIBE on each topic (all topics: only those; a topic named without
    it: TOPIC_AUTHORIZATION_FAILED, its existence not told) and, to create a topic it names,
    CREATE on the cluster or the topic. A refused partition is not touched.
    """

    def __init__(
        self,
        node_id: int,
        cache: MetadataCache,
        replicas: ReplicaManager,
        groups: Sequence[ApiGroup],
        *,
        auto_create_topics: Callable[[list[str], str], Awaitable[None]] | None,
        fetch_sessions: FetchSessionCache | None = None,
    ) -> None:
        self.node_id = node_id
        self.cache = cache
        self.replicas = replicas
        self.fetch_max_bytes = int(replicas.server_configs.get("fetch.max.bytes")
                                   or FETCH_MAX_BYTES_DEFAULT)
        self.auto_create_topics = auto_create_topics
        self.fetch_sessions = fetch_sessions or FetchSessionCache()
        replicas.idle_follower_ms = self.fetch_sessions.idle_follower_ms
        # (transactional id, producer id, epoch, topic, partition) -> error: set by the node
        # (broker.transaction_apis) to refuse transactional batches outside a transaction
        self.verify_transactional: Callable[
            [str, int, int, str, int], Awaitable[ErrorCode]] | None = None
        self._handlers: dict[int, Handler] = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.METADATA: self.metadata,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
        }
        self._apis = dict(DATA_APIS)
        self._groups = list(groups)
        self._authorizer: Authorizer = ALLOW_ALL
        for group in groups:
            handlers = group.handlers()
            invariant(set(handlers) == set(group.versions), "each API has one handler")
            invariant(not set(handlers) & set(self._handlers), "an API is served once")
            self._handlers.update(handlers)
            self._apis.update(group.versions)

    @property
    def apis(self) -> dict[int, tuple[int, int]]:
        return self._apis

    @property
    def authorizer(self) -> Authorizer:
        return self._authorizer

    @authorizer.setter
    def authorizer(self, authorizer: Authorizer) -> None:
        """What the node sets once its authorizer is built (`authorizer.class.name`): this
        listener's handlers and every API group's ask it from then on."""
        self._authorizer = authorizer
        for group in self._groups:
            if hasattr(group, "authorizer"):
                setattr(group, "authorizer", authorizer)  # noqa: B010 - not in ApiGroup

    async def handle(self, context: RequestContext, request: Any) -> Any | None:
        return await self._handlers[context.header.api_key](context, request)

    # -- ApiVersions ------------------------------------------------------------------

    def _api_versions_body(self, version: int, error: ErrorCode) -> Any:
        return api_versions_response(self.apis, self.cache.image, version, error)

    def unsupported_api_versions_response(self) -> Any:
        return self._api_versions_body(0, ErrorCode.unsupported_version)

    async def api_versions(self, context: RequestContext, request: Any) -> Any:
        return answer_api_versions(self.apis, self.cache.image, context, request)

    # -- Metadata ---------------------------------------------------------------------

    async def metadata(self, context: RequestContext, request: Any) -> Any:
        if not is_allow_all(self._authorizer):
            return await self._authorized_metadata(context, request)
        version = context.header.api_version
        requested = field(request, "topics")
        if requested is not None and self.auto_create_topics is not None:
            known = self.cache.image.topics.by_name
            missing = [topic.name for topic in requested  # internal ones with their settings
                       if topic.name is not None and known.get(topic.name) is None
                       and topic.name not in UNCREATABLE_TOPICS]
            if missing and field(request, "allow_auto_topic_creation", True):
                await self.auto_create_topics(missing, context.listener_name)
        # KIP-430: with no authorizer, each topic and the cluster allow every operation
        # their resource type supports, as Kafka answers; the sentinel when not asked
        topic_ops = (TOPIC_OPERATIONS if field(request, "include_topic_authorized_operations")
                     else AUTHORIZED_OPERATIONS_OMITTED)
        cluster_ops = (CLUSTER_OPERATIONS
                       if field(request, "include_cluster_authorized_operations")
                       else AUTHORIZED_OPERATIONS_OMITTED)
        if requested is None:  # all topics: spliced from each topic's cached encoding
            return await self.cache.all_topics_body(
                version, context.listener_name, topic_ops=topic_ops, cluster_ops=cluster_ops)
        return self.cache.metadata_response(version, context.listener_name, requested,
                                            topic_ops=topic_ops, cluster_ops=cluster_ops)

    async def _authorized_metadata(self, context: RequestContext, request: Any) -> Any:
        """Metadata with an authorizer (KafkaApis.handleTopicMetadataRequest): the topics
        the principal may DESCRIBE; a topic named (by name) without DESCRIBE, or missing and
        to be auto-created without CREATE on the cluster or on it, is answered
        TOPIC_AUTHORIZATION_FAILED without its partitions or id (by id: with the id, which
        is not secret, and no name); KIP-430 operations computed for the principal."""
        version = context.header.api_version
        module = response_module(ApiKey.METADATA, version)
        image = self.cache.image
        requested = field(request, "topics")
        refused: dict[int, Any] = {}  # position in the request -> its refusal
        wanted: list[Any] = []
        if requested is None:  # all topics: only those it may describe, nothing else told
            wanted = [_NamedTopic(name) for name in sorted(allowed_names(
                self._authorizer, context, Op.DESCRIBE, TOPIC, image.topics.by_name.keys()))]
        else:
            names = [_requested_name(image, topic) for topic in requested]
            describable = allowed_names(self._authorizer, context, Op.DESCRIBE, TOPIC, names)
            creatable = self._creatable(context, request, [
                name for name in names if name in describable
                and image.topics.by_name.get(name) is None])
            for position, (topic, name) in enumerate(zip(requested, names, strict=True)):
                if topic.name is None and version < FIRST_NULLABLE_METADATA_NAME:
                    wanted.append(topic)  # the cache refuses ids before v12: INVALID_REQUEST
                elif name is not None and (name not in describable or name in creatable[1]):
                    by_id = topic.name is None
                    refused[position] = make(
                        module.MetadataResponseTopic,
                        error_code=ErrorCode.topic_authorization_failed,
                        name=None if by_id else name,
                        topic_id=topic.topic_id if by_id else uuid.UUID(int=0),
                        is_internal=False, partitions=(),
                        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
                else:
                    wanted.append(topic)
            if creatable[0] and self.auto_create_topics is not None:
                await self.auto_create_topics(creatable[0], context.listener_name)
        cluster_ops = operations_if(
            bool(field(request, "include_cluster_authorized_operations")), self._authorizer,
            context, ResourceType.CLUSTER, CLUSTER_NAME, CLUSTER_SUPPORTED)
        answer = self.cache.metadata_response(version, context.listener_name, wanted,
                                              cluster_ops=cluster_ops)
        asked = bool(field(request, "include_topic_authorized_operations"))
        answered = iter(answer.topics)
        topics = []
        for position in range(len(wanted) + len(refused)):
            topic = refused.get(position)
            if topic is None:
                topic = next(answered)
                if asked:
                    topic = dataclasses.replace(
                        topic, topic_authorized_operations=authorized_operations(
                            self._authorizer, context, TOPIC, topic.name or "",
                            TOPIC_SUPPORTED))
            topics.append(topic)
        return dataclasses.replace(answer, topics=tuple(topics))

    def _creatable(self, context: RequestContext, request: Any,
                   missing: list[str | None]) -> tuple[list[str], set[str]]:
        """(the missing topics to auto-create, those refused for want of CREATE)."""
        if (self.auto_create_topics is None or not missing
                or not field(request, "allow_auto_topic_creation", True)):
            return [], set()
        candidates = [name for name in dict.fromkeys(missing)
                      if name is not None and name not in UNCREATABLE_TOPICS]
        if allows_cluster(self._authorizer, context, Op.CREATE):
            return candidates, set()
        allowed = allowed_names(self._authorizer, context, Op.CREATE, TOPIC, candidates)
        return ([name for name in candidates if name in allowed],
                {name for name in candidates if name not in allowed})

    # -- Produce ----------------------------------------------------------------------

    async def produce(self, context: RequestContext, request: Any) -> Any | None:
        version = context.header.api_version
        module = response_module(ApiKey.PRODUCE, version)
        acks = request.acks
        image = self.cache.image
        results: list[tuple[str, list[Any]]] = []
        pending: list[tuple[Partition, int]] = []
        refused = self._refused_produce(context, request)
        refused.update(await self._verify_transactional(request, refused))
        messages = {ErrorCode.topic_authorization_failed: None,
                    ErrorCode.transactional_id_authorization_failed: None}
        for topic in request.topic_data:
            partitions = []
            for data in topic.partition_data:
                code = refused.get((topic.name, data.index))
                partitions.append(
                    self._produce_partition(module, version, topic.name, data, acks, image,
                                            pending)
                    if code is None else
                    {"index": data.index, "error_code": code, "base_offset": -1,
                     "error_message": messages.get(
                         code, "the partition is not in the producer's transaction"),
                     "record_errors": ()})
            results.append((topic.name, partitions))
        if acks == 0:
            return None
        if acks == -1 and pending:
            await self.replicas.wait_for_high_watermark(pending, millis(request.timeout))
        return make(
            module.ProduceResponse,
            responses=tuple(
                make(module.TopicProduceResponse, name=name,
                     partition_responses=tuple(self._finish_produce(module, p) for p in parts))
                for name, parts in results
            ),
            throttle_time=NO_THROTTLE,
        )

    def _refused_produce(self, context: RequestContext,
                         request: Any) -> dict[tuple[str, int], ErrorCode]:
        """The partitions Produce may not write (KafkaApis.handleProduceRequest): all of them
        when the request carries transactional batches without WRITE on its transactional
        id, else those of each topic without WRITE on it."""
        if is_allow_all(self._authorizer):
            return {}
        txn_id = field(request, "transactional_id")
        everyone: ErrorCode | None = None
        if _has_transactional_batches(request) and (
                txn_id is None or not allows(self._authorizer, context, Op.WRITE,
                                             ResourceType.TRANSACTIONAL_ID, txn_id)):
            everyone = ErrorCode.transactional_id_authorization_failed
        allowed = set() if everyone is not None else allowed_names(
            self._authorizer, context, Op.WRITE, TOPIC, (t.name for t in request.topic_data))
        return {(topic.name, data.index): everyone or ErrorCode.topic_authorization_failed
                for topic in request.topic_data if everyone is not None
                or topic.name not in allowed for data in topic.partition_data}

    async def _verify_transactional(
        self, request: Any, unauthorized: Mapping[tuple[str, int], ErrorCode],
    ) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890 part 1: a transactional batch is appended only to a partition of its
        producer's ongoing transaction; the others get the verifier's error (those refused
        already by authorization are not asked about)."""
        verify = self.verify_transactional
        txn_id = field(request, "transactional_id")
        refused: dict[tuple[str, int], ErrorCode] = {}
        if verify is None or txn_id is None:
            return refused
        for topic in request.topic_data:
            for data in topic.partition_data:
                records = data.records or b""
                if len(records) < BATCH_HEADER_SIZE or (topic.name, data.index) in unauthorized:
                    continue
                header = read_header(records)
                if header.is_transactional and header.producer_id >= 0:
                    code = await verify(txn_id, header.producer_id, header.producer_epoch,
                                        topic.name, data.index)
                    if code != ErrorCode.none:
                        refused[(topic.name, data.index)] = code
        return refused

    def _produce_partition(
        self, module: Any, version: int, topic: str, data: Any, acks: int, image: Any,
        pending: list[tuple[Partition, int]],
    ) -> dict[str, Any]:
        try:
            records = data.records or b""
            _check_client_records(records, topic, data.index, version)
            partition = self.replicas.leader_partition(topic, data.index, image)
            info = self.replicas.append(partition, records, acks)
        except Exception as error:  # noqa: BLE001 - mapped to the partition's error code
            code, message = error_of(error)
            entity = getattr(module, "BatchIndexAndErrorMessage", None)  # v8+ (KIP-467)
            record_errors = tuple(
                make(entity, batch_index=index, batch_index_error_message=why)
                for index, why in (getattr(error, "record_errors", ())
                                   if entity is not None else ()))
            return {"index": data.index, "error_code": code, "base_offset": -1,
                    "error_message": message, "record_errors": record_errors}
        end = info.last_offset + 1
        if acks == -1:
            pending.append((partition, end))
        append_time = None
        if info.log_append_time_ms >= 0:
            append_time = datetime.datetime.fromtimestamp(
                info.log_append_time_ms / 1000, tz=datetime.UTC)
        return {"index": data.index, "error_code": ErrorCode.none,
                "base_offset": info.first_offset, "log_append_time": append_time,
                "log_start_offset": info.log_start_offset,
                "acks_all": (partition, partition.leader_epoch, end) if acks == -1 else None}

    def _finish_produce(self, module: Any, result: dict[str, Any]) -> Any:
        acks_all = result.pop("acks_all", None)
        if acks_all is not None:
            try:
                self.replicas.check_acks_all(*acks_all)
            except Exception as error:  # noqa: BLE001 - mapped to the partition's error code
                result["error_code"], result["error_message"] = error_of(error)
        result.setdefault("record_errors", ())
        return make(module.PartitionProduceResponse, **result)

    # -- Fetch ------------------------------------------------------------------------

    async def fetch(self, context: RequestContext, request: Any) -> Any:
        version = context.header.api_version
        module = response_module(ApiKey.FETCH, version)
        max_wait_ms = millis(request.max_wait)
        min_bytes = request.min_bytes
        # what one response may carry, whatever the client asks: Kafka's fetch.max.bytes
        max_bytes = min(field(request, "max_bytes", 0x7FFFFFFF), self.fetch_max_bytes)
        replica_id = field(request, "replica_id", None)
        if replica_id is None:  # v15+: KIP-903's ReplicaState
            replica_id = getattr(field(request, "replica_state"), "replica_id", -1)
        committed = field(request, "isolation_level", 0) == READ_COMMITTED
        # KIP-392: a consumer's Fetch v11+ carries its rack (client.rack), and may be served
        # by a follower; the leader may point it to an in-sync replica of that rack instead
        client_rack: str | None = None
        if replica_id < 0 and version >= FIRST_FETCH_WITH_RACK:
            client_rack = field(request, "rack_id", "") or ""
        image = self.cache.image
        refused = self._refused_fetch(context, replica_id)
        names = {key: self._fetch_topic_name(topic, image)
                 for topic in request.topics for key in (topic_key(topic),)}
        look_ms = self.replicas.now_ms()
        fetch = self.fetch_sessions.context(request, names, look_ms,
                                            follower=replica_id >= 0,
                                            name_of=lambda topic_id: _topic_name(image, topic_id),
                                            replica_id=replica_id)
        if fetch.error != ErrorCode.none:
            return make(module.FetchResponse, throttle_time=NO_THROTTLE,
                        error_code=fetch.error, session_id=NO_SESSION, responses=())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        session = fetch.session
        first_pass = True
        read_before: list[SessionPartition] = []
        while True:
            looked, reads, total, errors, parked, woken = await self._read_fetch(
                fetch, read_before, max_bytes, replica_id, first_pass, committed,
                client_rack, context.listener_name, refused)
            if first_pass and session is not None:
                session.looked_ms = look_ms  # its idle partitions were at our log end then
            first_pass = False
            remaining_ms = int((deadline - loop.time()) * 1000)
            if (total >= min_bytes or errors or remaining_ms <= 0
                    or not (parked or (session is not None and session.idle_of))):
                break
            if woken:  # a partition read early in the pass changed while the pass yielded
                continue
            if session is not None:
                # parked on the session's changes: the next pass looks again only at what
                # was read in this one and at what changed meanwhile
                read_before = [each for each, read in zip(looked, reads, strict=True)
                               if read is not None]
                if not await self.replicas.changes.wait_after(session.changes_seen,
                                                              remaining_ms / 1000):
                    break
            elif not await self.replicas.wait_for_data(parked, remaining_ms):
                # nothing woke it (appends, high watermark, ISR, leadership): what was read
                # stands, and a follower's fetch of 33,000 idle partitions reads them once
                break
        return make(
            module.FetchResponse,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            session_id=fetch.response_session_id,
            responses=self._fetch_responses(module, fetch, looked, reads),
        )

    def _refused_fetch(self, context: RequestContext,
                       replica_id: int) -> Callable[[str], bool] | None:
        """Whether a topic's partitions are refused to this Fetch (None: none is): a
        follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic
        (KafkaApis.handleFetchRequest); each topic is asked once per request."""
        if is_allow_all(self._authorizer):
            return None
        if replica_id >= 0:
            if allows_cluster(self._authorizer, context, Op.CLUSTER_ACTION):
                return None
            return lambda _topic: True
        answers: dict[str, bool] = {}

        def refused(topic: str) -> bool:
            answer = answers.get(topic)
            if answer is None:
                answer = answers[topic] = not self._authorizer.authorize(
                    context, Op.READ, TOPIC, topic)
            return answer
        return refused

    async def _read_fetch(
        self, fetch: FetchContext, read_before: list[SessionPartition], max_bytes: int,
        replica_id: int, first_pass: bool, committed: bool, client_rack: str | None = None,
        listener_name: str = "", refused: Callable[[str], bool] | None = None,
    ) -> tuple[list[SessionPartition], list[PartitionRead | None], int, bool,
               list[Partition], bool]:
        """One look at the fetch's partitions: (those looked at, what each read, the bytes
        read, `errors`, `parked`, `woken`). `errors` is true when one answered without
        waiting (an error or a diverging epoch), `parked` lists the partitions a wait is
        parked on. A session's partition that had nothing to read, in a state that has not
        changed since, is passed by (None): it has nothing to say.

        Without a session every partition of the request is looked at. A session's look
        is at all of its partitions only at its full look (`_changed_since_last_look`);
        otherwise it is at its busy ones (FetchSession.busy: not idle when last read), at
        the idle ones the replica manager noted as changed since the last look, and at
        those `read_before` (read in this request's previous pass), so that a follower's
        session of 100,000 idle partitions costs what changed, not what it holds.

        A look at thousands of partitions (a follower's first fetch of the 33,000 it
        follows) yields to the loop every FETCH_SLICE_S, so that the node's metadata fetch
        and heartbeats are not held behind it for a second. `woken` tells that a partition
        parked before such a yield changed during it: its change would otherwise be missed
        by the wait that follows (a session's wait hears of it through the change count)."""
        loop = asyncio.get_running_loop()
        image = self.cache.image
        total, errors = 0, False
        parked: list[Partition] = []
        reads: list[PartitionRead | None] = []
        partitions = self.replicas.get_partition
        now_ms = self.replicas.now_ms()
        session = fetch.session
        if session is None:
            wanted, changed = fetch.requested, None
        else:  # a session opening now is at its full look: what was asked, in order
            changed = self._changed_since_last_look(session, len(session.partitions),
                                                    first_pass, now_ms)
            if changed is None:
                wanted = list(session.partitions.values())
            else:
                wanted = session.incremental_look(changed)
                if read_before:
                    wanted = list({id(each): each for each in (*wanted, *read_before)}
                                  .values())
        watch: asyncio.Future[None] | None = None
        watched = 0  # parked[:watched] carry `watch` among their waiters
        slice_ends = loop.time() + FETCH_SLICE_S
        try:
            for count, each in enumerate(wanted, 1):
                if count % FETCH_SLICE_CHECK == 0 and loop.time() >= slice_ends:
                    if session is None:
                        watch = watch or loop.create_future()
                        for held in parked[watched:]:
                            held.park(watch)
                        watched = len(parked)
                    await asyncio.sleep(0)
                    image, now_ms = self.cache.image, self.replicas.now_ms()
                    slice_ends = loop.time() + FETCH_SLICE_S
                if refused is not None and each.topic and refused(each.topic):
                    # told at once, without data; the rest of the fetch waits as it would
                    reads.append(PartitionRead(each.partition,
                                               ErrorCode.topic_authorization_failed, -1, -1, -1))
                    continue
                if each.idle is not None:  # nothing to read when last read: still so?
                    partition = partitions(each.topic, each.partition)
                    if partition is None and each.idle == self._being_made(each):
                        reads.append(None)  # its log is still being made
                        continue
                    if (partition is not None and each.idle == _idle_state(partition)
                            and (replica_id < 0 or partition.in_maximal_isr(replica_id))):
                        if replica_id >= 0 and first_pass:  # a follower at our log end
                            self.replicas.follower_still_caught_up(partition, replica_id,
                                                                   now_ms)
                        parked.append(partition)
                        reads.append(None)
                        continue
                    if replica_id >= 0 and session is not None \
                            and partition is each.idle[0]:
                        # changed since the session's last look, at which the follower was
                        # at our log end: so it was caught up then (not looked at since)
                        self.replicas.follower_still_caught_up(partition, replica_id,
                                                               session.looked_ms)
                partition, read = self._fetch_partition(
                    each, image, max(0, max_bytes - total), total == 0, replica_id,
                    first_pass, committed=committed, client_rack=client_rack,
                    listener_name=listener_name)
                if (partition is None and session is not None and replica_id >= 0
                        and read.error_code == ErrorCode.not_leader_or_follower):
                    read = self._log_being_made(each) or read
                if partition is None and read.idle is not None:
                    pass  # waits in the session (its idle_of) until the log is made
                elif read.error_code != ErrorCode.none or partition is None:
                    errors = True
                else:
                    parked.append(partition)
                total += len(read.records)
                reads.append(read)
        finally:
            if watch is not None:
                unpark(parked[:watched], watch)
        return wanted, reads, total, errors, parked, watch is not None and watch.done()

    def _being_made(self, wanted: SessionPartition) -> tuple[Any, ...] | None:
        """The state of `wanted` if it is led here, its log still being made, and the
        follower fetches it from the start at the leader epoch we have; None otherwise."""
        pending = self.replicas.pending_leader(wanted.topic, wanted.partition)
        if (pending is None or wanted.fetch_offset != 0
                or wanted.current_leader_epoch not in (-1, pending.registration.leader_epoch)
                or wanted.topic_id not in (None, pending.topic_id)):
            return None
        return (pending, pending.registration.leader_epoch)

    def _log_being_made(self, wanted: SessionPartition) -> PartitionRead | None:
        """A follower's fetch, in its session, of a partition led here whose log is still
        being made (ReplicaManager.apply_delta makes 1,000,000 new logs a few thousand at a
        time): answered as Kafka's leader, which has made its logs by the time it knows it
        leads them, answers from the empty log -- nothing yet, no error -- and held idle in
        the session until the replica manager notes the log made. Refused
        (NOT_LEADER_OR_FOLLOWER), the follower asked again for each such partition every
        replica.fetch.backoff.ms: creating 1,000,000 partitions, each follower was refused
        some 23,000,000 times, and the leader that lagged most made its logs slower
        still."""
        state = self._being_made(wanted)
        if state is None:
            return None
        return PartitionRead(wanted.partition, ErrorCode.none, 0, 0, 0, idle=state)

    def _changed_since_last_look(self, session: FetchSession | None, size: int,
                                 first_pass: bool, now_ms: int) -> set[Any] | None:
        """The partitions changed since `session`'s last look, or None: look at each (no
        session, too many changes, or the session's full look is due: every
        FULL_LOOK_MS)."""
        if session is None:
            return None
        changes = self.replicas.changes
        changed = None
        if not first_pass or now_ms < session.full_look_ms:
            changed = changes.since(session.changes_seen, size)
        if changed is None and first_pass:
            session.full_look_ms = now_ms + FULL_LOOK_MS
        session.changes_seen = changes.count
        return changed

    def _fetch_responses(self, module: Any, fetch: FetchContext,
                         looked: list[SessionPartition],
                         reads: list[PartitionRead | None]) -> tuple[Any, ...]:
        """The response's topics: every partition read, or in an incremental fetch those
        with something to say (fetch_sessions); grouped by topic in the order read."""
        topics: list[tuple[SessionPartition, list[Any]]] = []
        returned = []
        for each, read in zip(looked, reads, strict=True):
            if read is None:  # passed by, unchanged since it had nothing to say
                continue
            if fetch.session is not None:
                fetch.session.mark(each, read.idle)
                answer = each.must_answer(
                    bool(read.records), read.error_code != ErrorCode.none
                    or read.diverging is not None or read.preferred_read_replica >= 0,
                    read.high_watermark,
                    read.last_stable_offset, read.log_start_offset)
                if read.records:
                    returned.append(each)
                if fetch.incremental and not answer:
                    continue
            if not topics or (topics[-1][0].topic, topics[-1][0].topic_id) != (
                    each.topic, each.topic_id):
                topics.append((each, []))
            topics[-1][1].append(self._partition_data(module, read))
        if fetch.session is not None and returned:
            self.fetch_sessions.returned_records(fetch.session, returned)
        return tuple(
            make(module.FetchableTopicResponse, topic=first.topic, topic_id=first.topic_id,
                 partitions=tuple(partitions))
            for first, partitions in topics)

    def _fetch_topic_name(self, topic: Any, image: Any) -> tuple[str, uuid.UUID | None]:
        if not hasattr(topic, "topic_id"):  # by name, before Fetch v13
            return topic.topic, None
        topic_id = topic.topic_id if topic.topic_id is not None else ZERO_TOPIC_ID
        return _topic_name(image, topic_id), topic_id

    def _fetch_partition(
        self, wanted: SessionPartition, image: Any, bytes_left: int, first: bool,
        replica_id: int, first_pass: bool, *, committed: bool = False,
        client_rack: str | None = None, listener_name: str = "",
    ) -> tuple[Partition | None, PartitionRead]:
        """(the partition to park on, or None when answered at once; what was read).
        A follower (replica_id >= 0) reads up to the log end; its first look records its
        position or finds that its log diverged (then no records, and no waiting). A
        consumer's Fetch v11+ (`client_rack` not None) may read a partition followed here,
        up to the high watermark this follower knows (KIP-392); on the leader it may be
        told a replica of its rack to fetch from instead, and is answered at once."""
        try:
            if not wanted.topic:
                raise UnknownTopicId("unknown topic id")
            if client_rack is None:
                partition = self.replicas.leader_partition(wanted.topic, wanted.partition,
                                                           image)
            else:
                partition = self.replicas.readable_partition(wanted.topic, wanted.partition,
                                                             image)
            partition.check_epoch(wanted.current_leader_epoch)
            if client_rack and partition.leader_id == self.node_id:
                preferred = self.replicas.preferred_read_replica(
                    partition, client_rack, wanted.fetch_offset, listener_name)
                if preferred >= 0:
                    log_ = partition.log
                    return None, PartitionRead(
                        wanted.partition, ErrorCode.none, log_.high_watermark,
                        log_.last_stable_offset if committed else log_.high_watermark,
                        log_.log_start_offset, preferred_read_replica=preferred)
            if replica_id >= 0 and first_pass:
                seen = self.replicas.follower_fetch(
                    partition, replica_id, wanted.fetch_offset, wanted.last_fetched_epoch,
                    wanted.log_start_offset)
                if seen.diverged:
                    log_ = partition.log
                    return None, PartitionRead(
                        wanted.partition, ErrorCode.none, log_.high_watermark,
                        log_.high_watermark, log_.log_start_offset,
                        diverging=(seen.diverging_epoch, seen.diverging_end_offset))
            limit = min(wanted.partition_max_bytes, bytes_left)
            committed = committed and replica_id < 0
            read = self.replicas.read(partition, wanted.fetch_offset, limit,
                                      min_one_message=first,
                                      up_to_high_watermark=replica_id < 0,
                                      up_to_last_stable_offset=committed)
        except Exception as error:  # noqa: BLE001 - mapped to the partition's error code
            code, _ = error_of(error)
            if code == ErrorCode.unknown_topic_or_partition and wanted.topic_id is not None:
                code = ErrorCode.unknown_topic_id
            return None, PartitionRead(wanted.partition, code, -1, -1, -1)
        log_ = partition.log
        aborted = None
        if committed:  # the aborted transactions with data in what is returned
            aborted = tuple(
                (each.producer_id, each.first_offset)
                for each in log_.txns.aborted_between(read.first_offset, read.next_offset)
            ) if read.records else ()
        if replica_id >= 0:
            readable_end = log_.log_end_offset
        else:
            readable_end = log_.last_stable_offset if committed else log_.high_watermark
        # idle: nothing readable (not merely no room left), and for a follower nothing
        # owed either -- one outside the ISR is looked at each time, to be added back,
        # unless its addition is proposed already: the answer or the metadata that ends
        # the proposal wakes the session (Partition.wake_waiters). Looked at each time
        # meanwhile, the 500,000 partitions a restarted broker rejoined at 1,000,000 were
        # read again by every fetch of it until their ISR change was committed (py-spy:
        # 25% of a leader's time in those reads, its loop never idle)
        idle = _idle_state(partition) if (
            wanted.fetch_offset >= readable_end
            and (replica_id < 0 or partition.in_maximal_isr(replica_id))) else None
        return partition, PartitionRead(
            wanted.partition, ErrorCode.none, log_.high_watermark,
            log_.last_stable_offset if committed else log_.high_watermark,
            log_.log_start_offset, read.records, aborted, idle=idle)

    @staticmethod
    def _partition_data(module: Any, read: PartitionRead) -> Any:
        extra = {}
        if read.diverging is not None:
            epoch, end_offset = read.diverging
            extra["diverging_epoch"] = make(module.EpochEndOffset, epoch=epoch,
                                            end_offset=end_offset)
        return make(
            module.PartitionData,
            partition_index=read.partition_index,
            error_code=read.error_code,
            high_watermark=read.high_watermark,
            last_stable_offset=read.last_stable_offset,
            log_start_offset=read.log_start_offset,
            preferred_read_replica=read.preferred_read_replica,  # v11+
            aborted_transactions=None if read.aborted is None else tuple(
                make(module.AbortedTransaction, producer_id=producer_id,
                     first_offset=first_offset)
                for producer_id, first_offset in read.aborted),
            records=read.records,
            **extra,
        )

    # -- ListOffsets ------------------------------------------------------------------

    async def list_offsets(self, context: RequestContext, request: Any) -> Any:
        version = context.header.api_version
        module = response_module(ApiKey.LIST_OFFSETS, version)
        image = self.cache.image
        topics = []
        allowed = allowed_names(self._authorizer, context, Op.DESCRIBE, TOPIC,
                                (topic.name for topic in request.topics))
        for topic in request.topics:
            committed = field(request, "isolation_level", 0) == READ_COMMITTED
            partitions = tuple(
                self._list_offset(module, topic.name, wanted, image, committed)
                if topic.name in allowed else make(
                    module.ListOffsetsPartitionResponse, partition_index=wanted.partition_index,
                    error_code=ErrorCode.topic_authorization_failed)
                for wanted in topic.partitions
            )
            topics.append(make(module.ListOffsetsTopicResponse, name=topic.name,
                               partitions=partitions))
        return make(module.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))

    def _list_offset(self, module: Any, topic: str, wanted: Any, image: Any,
                     committed: bool = False) -> Any:
        try:
            partition = self.replicas.leader_partition(topic, wanted.partition_index, image)
            partition.check_epoch(field(wanted, "current_leader_epoch", -1))
            offset, timestamp = self._offset_for(partition, wanted.timestamp, committed)
        except Exception as error:  # noqa: BLE001 - mapped to the partition's error code
            code, _ = error_of(error)
            return make(module.ListOffsetsPartitionResponse,
                        partition_index=wanted.partition_index, error_code=code)
        epoch = partition.leader_epoch if offset >= 0 else -1
        return make(module.ListOffsetsPartitionResponse, partition_index=wanted.partition_index,
                    error_code=ErrorCode.none, timestamp=timestamp, offset=offset,
                    leader_epoch=epoch)

    def _offset_for(self, partition: Partition, timestamp: int,
                    committed: bool = False) -> tuple[int, int]:
        log_ = partition.log
        fetchable = log_.last_stable_offset if committed else log_.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            return fetchable, -1
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return log_.log_start_offset, -1
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1  # no tiered storage: nothing has been tiered
        if timestamp < MAX_TIMESTAMP:
            raise UnknownTopicOrPartition(f"unsupported ListOffsets timestamp {timestamp}")
        found = log_.fetch_offset_by_timestamp(timestamp)
        if found is None or found[0] >= fetchable:
            return -1, -1
        return found


def api_versions_response(
    apis: dict[int, tuple[int, int]], image: MetadataImage, version: int, error: ErrorCode
) -> Any:
    module = response_module(ApiKey.API_VERSIONS, version)
    keys = tuple(
        make(module.ApiVersion, api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(apis.items())
    )
    features = image.features
    supported_levels, finalized_levels, epoch = api_versions_features(
        features.metadata_version, features.finalized, image.offset)
    finalized: tuple[Any, ...] = ()
    supported: tuple[Any, ...] = ()
    if hasattr(module, "FinalizedFeatureKey"):  # v3+
        finalized = tuple(make(module.FinalizedFeatureKey, name=name, max_version_level=level,
                               min_version_level=level) for name, level in finalized_levels)
        supported = tuple(make(module.SupportedFeatureKey, name=name, min_version=low,
                               max_version=high) for name, low, high in supported_levels)
    return make(
        module.ApiVersionsResponse,
        error_code=error,
        api_keys=keys,
        throttle_time=NO_THROTTLE,
        supported_features=supported,
        finalized_features_epoch=epoch,
        finalized_features=finalized,
    )


def answer_api_versions(
    apis: dict[int, tuple[int, int]], image: MetadataImage, context: RequestContext,
    request: Any,
) -> Any:
    """ApiVersions v3+ clients name their software; KIP-511 rejects malformed names."""
    version = context.header.api_version
    if version >= 3:
        name = field(request, "client_software_name", "")
        software_version = field(request, "client_software_version", "")
        if not _valid_software_field(name) or not _valid_software_field(software_version):
            return api_versions_response(apis, image, version, ErrorCode.invalid_request)
    return api_versions_response(apis, image, version, ErrorCode.none)


def _valid_software_field(value: str) -> bool:
    """KIP-511: letters, digits, '.', '-'; must start and end with a letter or digit."""
    if not value:
        return False
    return value[0].isalnum() and value[-1].isalnum() and all(
        c.isalnum() or c in ".-" for c in value)


@dataclass(frozen=True, slots=True)
class _NamedTopic:
    """A Metadata request's topic, by name (what the metadata cache reads of one)."""

    name: str
    topic_id: uuid.UUID | None = None


def _requested_name(image: Any, topic: Any) -> str | None:
    """The name a Metadata request's topic stands for: its name, or its id's (None: an
    unknown id or neither, which the metadata cache answers)."""
    if topic.name is not None:
        return str(topic.name)
    topic_id = getattr(topic, "topic_id", None)
    found = None if topic_id is None else image.topics.by_id.get(topic_id)
    return None if found is None else str(found.name)


def _topic_name(image: Any, topic_id: uuid.UUID) -> str:
    """The name of a topic id in `image`; "" when it is unknown there."""
    found = image.topics.by_id.get(topic_id)
    return found.name if found is not None else ""


def _idle_state(partition: Partition) -> tuple[Any, ...]:
    """What a fetch with nothing to read depends on: while it stays the same, so does the
    answer (no records, no error, the same offsets told). Not the ISR, which no answer
    tells: a follower's partition stays idle while the follower stays in it (the caller
    checks), so that an ISR change -- a controlled shutdown takes a broker out of every
    ISR -- is not read again by every follower's session (py-spy: reads of changed session
    partitions, these among them, took a quarter of a broker's time during one at 300,000
    partitions)."""
    log_ = partition.log
    return (partition, log_, partition.leader_id, partition.leader_epoch,
            log_.log_end_offset, log_.high_watermark, log_.last_stable_offset,
            log_.log_start_offset)
