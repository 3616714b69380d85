"""Handlers for the group APIs: coordinator lookup, the classic group protocol, offsets,
and group administration.

Each handler turns a kio request (of whatever version) into the core's neutral request,
runs it through the coordinator shell, and builds the response of the same version with
`make`. FindCoordinator creates `__consumer_offsets` on first use through the controller
channel, as Kafka's broker does, with offsets.topic.num.partitions partitions and a
replication factor capped by the live brokers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.broker.admin_apis import ControllerChannel
from pykraft.broker.authorization import (
    GROUP_SUPPORTED,
    Authorized,
    allowed_names,
    allows,
    allows_cluster,
    operations_if,
    refusal,
)
from pykraft.broker.group_coordinator.core import (
    CommitPartition,
    CommitRequest,
    ConsumerHeartbeat,
    ConsumerHeartbeatResult,
    HeartbeatRequest,
    JoinRequest,
    JoinResult,
    LeaveMember,
    SyncRequest,
    SyncResult,
)
from pykraft.broker.group_coordinator.shell import CONSUMER_OFFSETS_TOPIC, GroupCoordinatorShell
from pykraft.broker.internal_topics import internal_topic
from pykraft.broker.metadata_cache import MetadataCache
from pykraft.errors import KafkaError
from pykraft.net.server import RequestContext
from pykraft.protocol.acls import AclOperation, ResourceType
from pykraft.protocol.api import AUTHORIZED_OPERATIONS_OMITTED, ApiKey, operations_bit_field
from pykraft.protocol.entities import NO_THROTTLE, field, make, millis, response_module

log = logging.getLogger(__name__)

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42
OFFSET_DELETE = 47
TXN_OFFSET_COMMIT = ApiKey.TXN_OFFSET_COMMIT
CONSUMER_GROUP_HEARTBEAT = ApiKey.CONSUMER_GROUP_HEARTBEAT
CONSUMER_GROUP_DESCRIBE = ApiKey.CONSUMER_GROUP_DESCRIBE

GROUP_APIS: Final[dict[int, tuple[int, int]]] = {
    OFFSET_COMMIT: (2, 9),  # v10 names topics by id (Kafka 4.1): not yet
    OFFSET_FETCH: (1, 9),
    FIND_COORDINATOR: (0, 6),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 6),
    LIST_GROUPS: (0, 5),
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
    TXN_OFFSET_COMMIT: (0, 5),  # v5 (KIP-890 part 2) is answered as v4: docs/deviations.md
    CONSUMER_GROUP_HEARTBEAT: (0, 1),  # v1: the client makes its member id (KIP-1082)
    CONSUMER_GROUP_DESCRIBE: (0, 1),
}

MEMBER_TYPE_CONSUMER: Final = 1  # ConsumerGroupDescribe v1: a member of the new protocol
KEY_TYPE_GROUP: Final = 0
KEY_TYPE_TRANSACTION: Final = 1
# KIP-430: what a group allows with no authorizer (Kafka's AclEntry.supportedOperations for
# GROUP): READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS (AclOperation codes)
GROUP_OPERATIONS: Final = operations_bit_field(frozenset({3, 6, 8, 10, 11}))

Handler = Callable[[RequestContext, Any], Awaitable[Any]]


Op = AclOperation
GROUP = ResourceType.GROUP
TOPIC = ResourceType.TOPIC


class GroupApis(Authorized):
    """The group API group (see broker.apis.ApiGroup).

    Authorization, as Kafka's KafkaApis: joining, syncing, heartbeating, leaving and committing
    need READ on the group (GROUP_AUTHORIZATION_FAILED), committing also READ on each topic
    (TOPIC_AUTHORIZATION_FAILED for its partitions); fetching offsets and describing need
    DESCRIBE on the group, and fetching all offsets shows only the topics the principal may
    DESCRIBE; deleting a group or its offsets needs DELETE on the group; FindCoordinator
    needs DESCRIBE on the group or transactional id; ListGroups lists every group to a
    principal with DESCRIBE on the cluster and otherwise the groups it may DESCRIBE. A refused
    request changes nothing (nothing reaches the coordinator)."""

    def __init__(
        self,
        node_id: int,
        cache: MetadataCache,
        coordinator: GroupCoordinatorShell,
        controller: ControllerChannel,
        server_configs: Mapping[str, str],
    ) -> None:
        self.node_id = node_id
        self.cache = cache
        self.shell = coordinator
        self.core = coordinator.core
        self.controller = controller
        self.server_configs = server_configs
        self._creating: asyncio.Lock = asyncio.Lock()
        # FindCoordinator key type 1: set by the node (broker.transaction_apis)
        self.find_transaction_coordinator: Callable[
            [str, str], Awaitable[tuple[ErrorCode, str | None, int, str, int]]] | None = None

    @property
    def versions(self) -> Mapping[int, tuple[int, int]]:
        return GROUP_APIS

    def handlers(self) -> dict[int, Handler]:
        return {
            FIND_COORDINATOR: self.find_coordinator,
            JOIN_GROUP: self.join_group,
            SYNC_GROUP: self.sync_group,
            HEARTBEAT: self.heartbeat,
            LEAVE_GROUP: self.leave_group,
            OFFSET_COMMIT: self.offset_commit,
            OFFSET_FETCH: self.offset_fetch,
            LIST_GROUPS: self.list_groups,
            DESCRIBE_GROUPS: self.describe_groups,
            DELETE_GROUPS: self.delete_groups,
            OFFSET_DELETE: self.offset_delete,
            TXN_OFFSET_COMMIT: self.txn_offset_commit,
            CONSUMER_GROUP_HEARTBEAT: self.consumer_group_heartbeat,
            CONSUMER_GROUP_DESCRIBE: self.consumer_group_describe,
        }

    # -- FindCoordinator --------------------------------------------------------------

    async def find_coordinator(self, context: RequestContext, request: Any) -> Any:
        version = context.header.api_version
        module = response_module(FIND_COORDINATOR, version)
        key_type = field(request, "key_type", KEY_TYPE_GROUP)
        keys = list(request.coordinator_keys) if version >= 4 else [request.key]
        found = [self._refused_key(context, key, key_type)
                 or await self._coordinator(key, key_type, context.listener_name)
                 for key in keys]
        if version >= 4:
            return make(module.FindCoordinatorResponse, throttle_time=NO_THROTTLE,
                        coordinators=tuple(
                            make(module.Coordinator, key=key, node_id=node, host=host, port=port,
                                 error_code=code, error_message=message)
                            for key, (code, message, node, host, port) in zip(keys, found,
                                                                               strict=True)))
        code, message, node, host, port = found[0]
        return make(module.FindCoordinatorResponse, throttle_time=NO_THROTTLE, error_code=code,
                    error_message=message, node_id=node, host=host, port=port)

    def _refused_key(self, context: RequestContext, key: str,
                     key_type: int) -> tuple[ErrorCode, str | None, int, str, int] | None:
        """DESCRIBE on the group (key type 0) or transactional id (1), else the refusal."""
        if key_type == KEY_TYPE_GROUP and not allows(self.authorizer, context, Op.DESCRIBE,
                                                     GROUP, key):
            return ErrorCode.group_authorization_failed, None, -1, "", -1
        if key_type == KEY_TYPE_TRANSACTION and not allows(
                self.authorizer, context, Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return ErrorCode.transactional_id_authorization_failed, None, -1, "", -1
        return None

    async def _coordinator(
        self, key: str, key_type: int, listener: str
    ) -> tuple[ErrorCode, str | None, int, str, int]:
        if key_type == KEY_TYPE_TRANSACTION and self.find_transaction_coordinator is not None:
            return await self.find_transaction_coordinator(key, listener)
        if key_type != KEY_TYPE_GROUP:
            message = ("the transaction coordinator is not available"
                       if key_type == KEY_TYPE_TRANSACTION else f"unsupported key type {key_type}")
            code = (ErrorCode.coordinator_not_available if key_type == KEY_TYPE_TRANSACTION
                    else ErrorCode.invalid_request)
            return code, message, -1, "", -1
        if self.cache.image.topics.by_name.get(CONSUMER_OFFSETS_TOPIC) is None:
            await self.ensure_offsets_topic(listener)
        topic = self.cache.image.topics.by_name.get(CONSUMER_OFFSETS_TOPIC)
        registration = None if topic is None else topic.partitions.get(
            self.core.partition_for(key))
        leader = -1 if registration is None else registration.leader
        for broker_id, host, port, _ in self.cache.live_brokers(listener):
            if broker_id == leader:
                return ErrorCode.none, None, broker_id, host, port
        return (ErrorCode.coordinator_not_available, "the group coordinator is not available",
                -1, "", -1)

    async def ensure_offsets_topic(self, listener: str) -> None:
        async with self._creating:
            if self.cache.image.topics.by_name.get(CONSUMER_OFFSETS_TOPIC) is not None:
                return
            topic = internal_topic(CONSUMER_OFFSETS_TOPIC, self.server_configs,
                                   len(self.cache.live_brokers(listener)))
            results = await self.controller.create_topics([topic], validate_only=False)
            for result in results:
                if result.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                    log.warning("cannot create %s: %s", CONSUMER_OFFSETS_TOPIC,
                                result.error_message)

    # -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------------

    async def join_group(self, context: RequestContext, request: Any) -> Any:
        if not allows(self.authorizer, context, Op.READ, GROUP, request.group_id):
            return refusal(JOIN_GROUP, context.header.api_version,
                           ErrorCode.group_authorization_failed)
        version = context.header.api_version
        module = response_module(JOIN_GROUP, version)
        session_timeout_ms = millis(request.session_timeout)
        joining = JoinRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=field(request, "group_instance_id"),
            protocol_type=request.protocol_type,
            protocols=tuple((p.name, p.metadata) for p in request.protocols),
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=millis(field(request, "rebalance_timeout", session_timeout_ms)),
            client_id=context.header.client_id or "",
            client_host=f"/{context.client_host}",
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )
        try:
            result: JoinResult = await self.shell.call(
                lambda token, now: self.core.join_group(token, joining, now))
        except KafkaError as error:
            result = JoinResult(error.code, request.member_id)
        return make(
            module.JoinGroupResponse, throttle_time=NO_THROTTLE, error_code=result.error,
            generation_id=result.generation_id, protocol_type=result.protocol_type,
            protocol_name=result.protocol_name if version >= 7 else result.protocol_name or "",
            leader=result.leader, skip_assignment=result.skip_assignment,
            member_id=result.member_id,
            members=tuple(make(module.JoinGroupResponseMember, member_id=member_id,
                               group_instance_id=instance, metadata=metadata)
                          for member_id, instance, metadata in result.members),
        )

    async def sync_group(self, context: RequestContext, request: Any) -> Any:
        if not allows(self.authorizer, context, Op.READ, GROUP, request.group_id):
            return refusal(SYNC_GROUP, context.header.api_version,
                           ErrorCode.group_authorization_failed)
        module = response_module(SYNC_GROUP, context.header.api_version)
        syncing = SyncRequest(
            group_id=request.group_id, generation_id=request.generation_id,
            member_id=request.member_id, group_instance_id=field(request, "group_instance_id"),
            protocol_type=field(request, "protocol_type"),
            protocol_name=field(request, "protocol_name"),
            assignments=tuple((a.member_id, a.assignment) for a in request.assignments),
        )
        try:
            result: SyncResult = await self.shell.call(
                lambda token, now: self.core.sync_group(token, syncing, now))
        except KafkaError as error:
            result = SyncResult(error.code)
        return make(module.SyncGroupResponse, throttle_time=NO_THROTTLE, error_code=result.error,
                    protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                    assignment=result.assignment)

    async def heartbeat(self, context: RequestContext, request: Any) -> Any:
        if not allows(self.authorizer, context, Op.READ, GROUP, request.group_id):
            return refusal(HEARTBEAT, context.header.api_version,
                           ErrorCode.group_authorization_failed)
        module = response_module(HEARTBEAT, context.header.api_version)
        beat = HeartbeatRequest(request.group_id, request.generation_id, request.member_id,
                                field(request, "group_instance_id"))
        try:
            code: ErrorCode = await self.shell.call(
                lambda token, now: self.core.heartbeat(token, beat, now))
        except KafkaError as error:
            code = error.code
        return make(module.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=code)

    async def leave_group(self, context: RequestContext, request: Any) -> Any:
        if not allows(self.authorizer, context, Op.READ, GROUP, request.group_id):
            return refusal(LEAVE_GROUP, context.header.api_version,
                           ErrorCode.group_authorization_failed)
        version = context.header.api_version
        module = response_module(LEAVE_GROUP, version)
        if version >= 3:
            leaving = [LeaveMember(m.member_id, m.group_instance_id) for m in request.members]
        else:
            leaving = [LeaveMember(request.member_id, None)]
        try:
            code, results = await self.shell.call(
                lambda token, now: self.core.leave_group(token, request.group_id, leaving, now))
        except KafkaError as error:
            code, results = error.code, [error.code] * len(leaving)
        if version < 3 and code == ErrorCode.none:
            code = results[0]
        if version < 3:
            return make(module.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=code)
        return make(module.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=code,
                    members=tuple(make(module.MemberResponse, member_id=m.member_id,
                                       group_instance_id=m.group_instance_id, error_code=e)
                                  for m, e in zip(leaving, results, strict=True)))

    # -- ConsumerGroupHeartbeat / ConsumerGroupDescribe (KIP-848) -------------------------

    async def consumer_group_heartbeat(self, context: RequestContext, request: Any) -> Any:
        version = context.header.api_version
        module = response_module(CONSUMER_GROUP_HEARTBEAT, version)
        if not allows(self.authorizer, context, Op.READ, GROUP, request.group_id):
            return refusal(CONSUMER_GROUP_HEARTBEAT, version,
                           ErrorCode.group_authorization_failed)
        subscribed = set(request.subscribed_topic_names or ())
        if len(allowed_names(self.authorizer, context, Op.DESCRIBE, TOPIC,
                             subscribed)) < len(subscribed):
            # a subscription may not name a topic the member may not describe (KafkaApis)
            return refusal(CONSUMER_GROUP_HEARTBEAT, version,
                           ErrorCode.topic_authorization_failed)
        owned = None if request.topic_partitions is None else {
            t.topic_id: frozenset(t.partitions) for t in request.topic_partitions
            if t.topic_id is not None}
        beat = ConsumerHeartbeat(
            group_id=request.group_id, member_id=request.member_id,
            member_epoch=request.member_epoch, instance_id=request.instance_id,
            rack_id=request.rack_id, rebalance_timeout_ms=millis(request.rebalance_timeout),
            subscribed_topic_names=None if request.subscribed_topic_names is None
            else tuple(request.subscribed_topic_names),
            subscribed_topic_regex=field(request, "subscribed_topic_regex"),
            server_assignor=request.server_assignor, owned=owned,
            client_id=context.header.client_id or "", client_host=f"/{context.client_host}",
            client_generates_member_id=version >= 1)
        try:
            result: ConsumerHeartbeatResult = await self.shell.call(
                lambda token, now: self.core.consumer_group_heartbeat(token, beat, now))
        except KafkaError as error:
            result = ConsumerHeartbeatResult(error.code, str(error))
        assignment = None if result.assignment is None else make(
            module.Assignment, topic_partitions=tuple(
                make(module.TopicPartitions, topic_id=topic_id, partitions=tuple(sorted(p)))
                for topic_id, p in sorted(result.assignment.items(), key=lambda kv: str(kv[0]))))
        return make(module.ConsumerGroupHeartbeatResponse, throttle_time=NO_THROTTLE,
                    error_code=result.error, error_message=result.message,
                    member_id=result.member_id, member_epoch=result.member_epoch,
                    heartbeat_interval=timedelta(milliseconds=result.heartbeat_interval_ms),
                    assignment=assignment)

    async def consumer_group_describe(self, context: RequestContext, request: Any) -> Any:
        module = response_module(CONSUMER_GROUP_DESCRIBE, context.header.api_version)

        def assignment(parts: Sequence[tuple[Any, str, tuple[int, ...]]]) -> Any:
            return make(module.Assignment, topic_partitions=tuple(
                make(module.TopicPartitions, topic_id=topic_id, topic_name=name,
                     partitions=partitions) for topic_id, name, partitions in parts))

        groups = []
        for group_id in request.group_ids:
            if not allows(self.authorizer, context, Op.DESCRIBE, GROUP, group_id):
                groups.append(make(module.DescribedGroup,
                                   error_code=ErrorCode.group_authorization_failed,
                                   error_message=None, group_id=group_id, group_state="",
                                   group_epoch=0, assignment_epoch=0, assignor_name="",
                                   members=(),
                                   authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
                continue
            d = self.core.consumer_group_describe(group_id)
            groups.append(make(
                module.DescribedGroup, error_code=d.error, error_message=d.message,
                group_id=group_id, group_state=d.state, group_epoch=d.group_epoch,
                assignment_epoch=d.assignment_epoch, assignor_name=d.assignor_name,
                members=tuple(make(
                    module.Member, member_id=m.member_id, instance_id=m.instance_id,
                    rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
                    client_host=m.client_host, subscribed_topic_names=m.subscribed_topic_names,
                    subscribed_topic_regex=m.subscribed_topic_regex,
                    assignment=assignment(m.assignment),
                    target_assignment=assignment(m.target_assignment),
                    member_type=MEMBER_TYPE_CONSUMER) for m in d.members),
                authorized_operations=operations_if(
                    bool(request.include_authorized_operations) and d.error == ErrorCode.none,
                    self.authorizer, context, GROUP, group_id, GROUP_SUPPORTED)))
        return make(module.ConsumerGroupDescribeResponse, throttle_time=NO_THROTTLE,
                    groups=tuple(groups))

    # -- offsets ------------------------------------------------------------------------

    async def offset_commit(self, context: RequestContext, request: Any) -> Any:
        module = response_module(OFFSET_COMMIT, context.header.api_version)
        image = self.cache.image
        wanted: list[CommitPartition] = []
        unknown: set[tuple[str, int]] = set()
        refused = self._refused_commit(context, request, field(request, "transactional_id"))
        for topic in request.topics:
            known = image.topics.by_name.get(topic.name)
            for p in topic.partitions:
                if (topic.name, p.partition_index) in refused:
                    continue
                if known is None or p.partition_index not in known.partitions:
                    unknown.add((topic.name, p.partition_index))
                    continue
                wanted.append(CommitPartition(
                    topic.name, p.partition_index, p.committed_offset,
                    field(p, "committed_leader_epoch", -1), p.committed_metadata))
        retention = field(request, "retention_time")
        commit = CommitRequest(
            group_id=request.group_id,
            generation_id=request.generation_id_or_member_epoch,
            member_id=request.member_id,
            group_instance_id=field(request, "group_instance_id"),
            partitions=tuple(wanted),
            retention_ms=-1 if retention is None else millis(retention),
            api_version=context.header.api_version,
        )
        try:
            codes: list[ErrorCode] = [] if refused and not wanted else await self.shell.call(
                lambda token, now: self.core.commit_offsets(token, commit, now))
        except KafkaError as error:
            codes = [error.code] * len(wanted)
        by_partition = {(p.topic, p.partition): c for p, c in zip(wanted, codes, strict=True)}
        return make(module.OffsetCommitResponse, throttle_time=NO_THROTTLE, topics=tuple(
            make(module.OffsetCommitResponseTopic, name=topic.name, partitions=tuple(
                make(module.OffsetCommitResponsePartition, partition_index=p.partition_index,
                     error_code=refused.get((topic.name, p.partition_index))
                     or (ErrorCode.unknown_topic_or_partition
                         if (topic.name, p.partition_index) in unknown
                         else by_partition[(topic.name, p.partition_index)]))
                for p in topic.partitions))
            for topic in request.topics))

    def _refused_commit(self, context: RequestContext, request: Any,
                        transactional_id: str | None) -> dict[tuple[str, int], ErrorCode]:
        """The partitions of an (Txn)OffsetCommit refused, with Kafka's error for each: all
        of them without WRITE on the transactional id (TxnOffsetCommit) or READ on the group,
        else those of each topic without READ on it."""
        everyone: ErrorCode | None = None
        if transactional_id is not None and not allows(
                self.authorizer, context, Op.WRITE, ResourceType.TRANSACTIONAL_ID,
                transactional_id):
            everyone = ErrorCode.transactional_id_authorization_failed
        elif not allows(self.authorizer, context, Op.READ, GROUP, request.group_id):
            everyone = ErrorCode.group_authorization_failed
        allowed = set() if everyone is not None else allowed_names(
            self.authorizer, context, Op.READ, TOPIC, (t.name for t in request.topics))
        refused: dict[tuple[str, int], ErrorCode] = {}
        for topic in request.topics:
            if everyone is None and topic.name in allowed:
                continue
            for p in topic.partitions:
                refused[(topic.name, p.partition_index)] = (
                    everyone or ErrorCode.topic_authorization_failed)
        return refused

    async def txn_offset_commit(self, context: RequestContext, request: Any) -> Any:
        """TxnOffsetCommit: offsets pending until the transaction's COMMIT marker."""
        module = response_module(TXN_OFFSET_COMMIT, context.header.api_version)
        image = self.cache.image
        wanted: list[CommitPartition] = []
        unknown: set[tuple[str, int]] = set()
        refused = self._refused_commit(context, request, field(request, "transactional_id"))
        for topic in request.topics:
            known = image.topics.by_name.get(topic.name)
            for p in topic.partitions:
                if (topic.name, p.partition_index) in refused:
                    continue
                if known is None or p.partition_index not in known.partitions:
                    unknown.add((topic.name, p.partition_index))
                    continue
                wanted.append(CommitPartition(
                    topic.name, p.partition_index, p.committed_offset,
                    field(p, "committed_leader_epoch", -1), p.committed_metadata))
        commit = CommitRequest(
            group_id=request.group_id, generation_id=field(request, "generation_id", -1),
            member_id=field(request, "member_id", ""),
            group_instance_id=field(request, "group_instance_id"), partitions=tuple(wanted))
        try:
            codes: list[ErrorCode] = [] if refused and not wanted else await self.shell.call(
                lambda token, now: self.core.txn_commit_offsets(
                    token, commit, request.producer_id, request.producer_epoch, now))
        except KafkaError as error:
            codes = [error.code] * len(wanted)
        by_partition = {(p.topic, p.partition): c for p, c in zip(wanted, codes, strict=True)}
        return make(module.TxnOffsetCommitResponse, throttle_time=NO_THROTTLE, topics=tuple(
            make(module.TxnOffsetCommitResponseTopic, name=topic.name, partitions=tuple(
                make(module.TxnOffsetCommitResponsePartition, partition_index=p.partition_index,
                     error_code=refused.get((topic.name, p.partition_index))
                     or (ErrorCode.unknown_topic_or_partition
                         if (topic.name, p.partition_index) in unknown
                         else by_partition[(topic.name, p.partition_index)]))
                for p in topic.partitions))
            for topic in request.topics))

    async def offset_fetch(self, context: RequestContext, request: Any) -> Any:
        version = context.header.api_version
        module = response_module(OFFSET_FETCH, version)
        stable = bool(field(request, "require_stable", False))
        if version >= 8:
            groups = [self._fetch_group(context, module, g.group_id, g.topics, version, stable,
                                        field(g, "member_id"), field(g, "member_epoch", -1))
                      for g in request.groups]
            return make(module.OffsetFetchResponse, throttle_time=NO_THROTTLE,
                        groups=tuple(make(module.OffsetFetchResponseGroup, group_id=g,
                                          topics=topics, error_code=code)
                                     for g, topics, code in groups))
        _, topics, code = self._fetch_group(context, module, request.group_id, request.topics,
                                            version, stable)
        if version < 2 and code != ErrorCode.none:  # v0-1 carry errors per partition only
            topics = self._with_error(module, request.topics, code)
        return make(module.OffsetFetchResponse, throttle_time=NO_THROTTLE, topics=topics,
                    error_code=code)

    def _fetch_group(self, context: RequestContext, module: Any, group_id: str, requested: Any,
                     version: int, stable: bool = False, member_id: str | None = None,
                     member_epoch: int = -1) -> tuple[str, tuple[Any, ...], ErrorCode]:
        """One group's committed offsets: GROUP_AUTHORIZATION_FAILED without DESCRIBE on the
        group; a topic named without DESCRIBE on it has TOPIC_AUTHORIZATION_FAILED on its
        partitions, and when all are asked for, such a topic is left out."""
        if not allows(self.authorizer, context, Op.DESCRIBE, GROUP, group_id):
            return group_id, (), ErrorCode.group_authorization_failed
        names = ("OffsetFetchResponseTopics", "OffsetFetchResponsePartitions") if version >= 8 \
            else ("OffsetFetchResponseTopic", "OffsetFetchResponsePartition")
        topic_type, partition_type = getattr(module, names[0]), getattr(module, names[1])
        wanted = None if requested is None else [
            (t.name, index) for t in requested for index in t.partition_indexes]
        code, found = self.core.fetch_offsets(group_id, wanted, member_id, member_epoch)
        if code != ErrorCode.none:
            return group_id, (), code
        if wanted is None:
            wanted = sorted(found)
        allowed = allowed_names(self.authorizer, context, Op.DESCRIBE, TOPIC,
                                (topic for topic, _ in wanted))
        if requested is None:
            wanted = [(topic, index) for topic, index in wanted if topic in allowed]
        # require_stable (KIP-447): a partition with transactional offsets pending
        unstable = self.core.unstable_offsets(group_id) if stable else set()
        by_topic: dict[str, list[Any]] = {}
        for topic, index in wanted:
            denied = topic not in allowed
            offset = None if (topic, index) in unstable or denied else found.get((topic, index))
            by_topic.setdefault(topic, []).append(make(
                partition_type, partition_index=index,
                committed_offset=-1 if offset is None else offset.offset,
                committed_leader_epoch=-1 if offset is None else offset.leader_epoch,
                metadata="" if offset is None else offset.metadata,
                error_code=ErrorCode.topic_authorization_failed if denied
                else ErrorCode.unstable_offset_commit if (topic, index) in unstable
                else ErrorCode.none))
        return group_id, tuple(make(topic_type, name=name, partitions=tuple(partitions))
                               for name, partitions in by_topic.items()), ErrorCode.none

    @staticmethod
    def _with_error(module: Any, requested: Any, code: ErrorCode) -> tuple[Any, ...]:
        return tuple(make(module.OffsetFetchResponseTopic, name=t.name, partitions=tuple(
            make(module.OffsetFetchResponsePartition, partition_index=index,
                 committed_offset=-1, committed_leader_epoch=-1, metadata="", error_code=code)
            for index in t.partition_indexes)) for t in requested or ())

    # -- administration -------------------------------------------------------------------

    async def list_groups(self, context: RequestContext, request: Any) -> Any:
        module = response_module(LIST_GROUPS, context.header.api_version)
        listed = self.core.list_groups(field(request, "states_filter", ()) or (),
                                       field(request, "types_filter", ()) or ())
        if not allows_cluster(self.authorizer, context, Op.DESCRIBE):
            visible = allowed_names(self.authorizer, context, Op.DESCRIBE, GROUP,
                                    (g.group_id for g in listed))
            listed = [g for g in listed if g.group_id in visible]
        return make(module.ListGroupsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.none, groups=tuple(
                        make(module.ListedGroup, group_id=g.group_id,
                             protocol_type=g.protocol_type, group_state=g.state.value,
                             group_type=g.group_type)
                        for g in listed))

    async def describe_groups(self, context: RequestContext, request: Any) -> Any:
        version = context.header.api_version
        module = response_module(DESCRIBE_GROUPS, version)
        described = []
        asked = bool(field(request, "include_authorized_operations", False))
        for group_id in request.groups:
            if not allows(self.authorizer, context, Op.DESCRIBE, GROUP, group_id):
                described.append(make(
                    module.DescribedGroup, error_code=ErrorCode.group_authorization_failed,
                    error_message=None, group_id=group_id, group_state="", protocol_type="",
                    protocol_data="", members=(),
                    authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
                continue
            d = self.core.describe_group(group_id)
            code = d.error
            if code == ErrorCode.group_id_not_found and version < 6:
                code = ErrorCode.none  # before v6 an unknown group is described as Dead
            described.append(make(
                module.DescribedGroup, error_code=code,
                error_message=None if code == ErrorCode.none else d.message or (
                    f"group {group_id}: {code.name}"), group_id=group_id, group_state=d.state.value,
                protocol_type=d.protocol_type, protocol_data=d.protocol,
                members=tuple(make(module.DescribedGroupMember, member_id=m.member_id,
                                   group_instance_id=m.group_instance_id,
                                   client_id=m.client_id, client_host=m.client_host,
                                   member_metadata=m.metadata, member_assignment=m.assignment)
                              for m in d.members),
                authorized_operations=operations_if(
                    asked and d.error == ErrorCode.none, self.authorizer, context, GROUP,
                    group_id, GROUP_SUPPORTED)))
        return make(module.DescribeGroupsResponse, throttle_time=NO_THROTTLE,
                    groups=tuple(described))

    async def delete_groups(self, context: RequestContext, request: Any) -> Any:
        module = response_module(DELETE_GROUPS, context.header.api_version)
        results = []
        for group_id in request.groups_names:
            if not allows(self.authorizer, context, Op.DELETE, GROUP, group_id):
                results.append(make(module.DeletableGroupResult, group_id=group_id,
                                    error_code=ErrorCode.group_authorization_failed))
                continue

            def delete(token: int, now: int, group: str = group_id) -> None:
                self.core.delete_group(token, group, now)

            try:
                code: ErrorCode = await self.shell.call(delete)
            except KafkaError as error:
                code = error.code
            results.append(make(module.DeletableGroupResult, group_id=group_id, error_code=code))
        return make(module.DeleteGroupsResponse, throttle_time=NO_THROTTLE,
                    results=tuple(results))

    async def offset_delete(self, context: RequestContext, request: Any) -> Any:
        module = response_module(OFFSET_DELETE, context.header.api_version)
        if not allows(self.authorizer, context, Op.DELETE, GROUP, request.group_id):
            return refusal(OFFSET_DELETE, context.header.api_version,
                           ErrorCode.group_authorization_failed)
        allowed = allowed_names(self.authorizer, context, Op.READ, TOPIC,
                                (t.name for t in request.topics))
        wanted = [(t.name, p.partition_index) for t in request.topics if t.name in allowed
                  for p in t.partitions]
        refused_topics = [t for t in request.topics if t.name not in allowed]
        code, results = ErrorCode.none, []
        if wanted or not refused_topics:  # every topic refused: the group is not touched
            try:
                code, results = await self.shell.call(
                    lambda token, now: self.core.delete_offsets(token, request.group_id,
                                                                wanted, now))
            except KafkaError as error:
                code, results = error.code, []
        codes = dict(zip(wanted, results, strict=False))
        codes.update(((t.name, p.partition_index), ErrorCode.topic_authorization_failed)
                     for t in refused_topics for p in t.partitions)
        topics: Sequence[Any] = () if code != ErrorCode.none else request.topics
        return make(module.OffsetDeleteResponse, throttle_time=NO_THROTTLE, error_code=code,
                    topics=tuple(make(module.OffsetDeleteResponseTopic, name=t.name,
                                      partitions=tuple(make(
                                          module.OffsetDeleteResponsePartition,
                                          partition_index=p.partition_index,
                                          error_code=codes[(t.name, p.partition_index)])
                                          for p in t.partitions))
                                 for t in topics))
