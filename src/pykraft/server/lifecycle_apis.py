"""BrokerRegistration (62), BrokerHeartbeat (63) (KIP-631), AlterPartition (56, KIP-497)
and AllocateProducerIds (67, KIP-730) on the controller listener.

Brokers that do not run the active controller in their own process register and heartbeat
here over the network. A controller that is not the active one answers NOT_CONTROLLER and
the broker asks again, at whichever node leads the quorum by then; the controller's other
refusals (STALE_BROKER_EPOCH, DUPLICATE_BROKER_REGISTRATION, INCONSISTENT_CLUSTER_ID, ...)
are answered with their codes.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.controller.requests import (
    AlterPartitionItem,
    AlterPartitionTopic,
    BrokerFeatureRange,
    IsrMember,
    Listener,
)
from pykraft.net.server import RequestContext
from pykraft.protocol.entities import NO_THROTTLE, field, make, response_module
from pykraft.server.controller_channel import (
    ALLOCATE_PRODUCER_IDS,
    ALTER_PARTITION,
    BROKER_HEARTBEAT,
    BROKER_REGISTRATION,
    ControllerRefused,
    QuorumControllerChannel,
)
from pykraft.server.controller_server import ControllerServer

LIFECYCLE_APIS: Final[dict[int, tuple[int, int]]] = {
    BROKER_REGISTRATION: (0, 4),
    BROKER_HEARTBEAT: (0, 1),
    ALTER_PARTITION: (2, 3),  # v0-v1 (topic names) are below Kafka 4.0's baseline
    ALLOCATE_PRODUCER_IDS: (0, 0),
}


class LifecycleApis:
    """The handler group (broker.apis.ApiGroup) for a controller listener."""

    def __init__(self, server: ControllerServer) -> None:
        self.server = server
        self.channel = QuorumControllerChannel(server, None, timeout_ms=0)
        # the connection each broker last heartbeated on
        self._heartbeat_peer: dict[int, tuple[str, int]] = {}

    def connection_closed(self, client_host: str, client_port: int) -> None:
        """A broker's heartbeat connection ended: its process may be gone. The controller
        fences it unless it heartbeats again soon (BrokerSessions.connection_lost). A
        connection a broker no longer heartbeats on (it moved to another) is ignored."""
        peer = (client_host, client_port)
        broker_id = next((b for b, p in self._heartbeat_peer.items() if p == peer), None)
        if broker_id is None:
            return
        del self._heartbeat_peer[broker_id]
        self.server.broker_connection_lost(broker_id)

    @property
    def versions(self) -> Mapping[int, tuple[int, int]]:
        return LIFECYCLE_APIS

    def handlers(self) -> dict[int, Callable[[RequestContext, Any], Awaitable[Any]]]:
        return {
            BROKER_REGISTRATION: self.broker_registration,
            BROKER_HEARTBEAT: self.broker_heartbeat,
            ALTER_PARTITION: self.alter_partition,
            ALLOCATE_PRODUCER_IDS: self.allocate_producer_ids,
        }

    async def broker_registration(self, context: RequestContext, request: Any) -> Any:
        module = response_module(BROKER_REGISTRATION, context.header.api_version)
        incarnation = request.incarnation_id or uuid.UUID(int=0)
        try:
            result = await self.channel.register_broker(
                request.broker_id, incarnation,
                [Listener(x.name, x.host, x.port, x.security_protocol)
                 for x in request.listeners],
                [BrokerFeatureRange(f.name, f.min_supported_version, f.max_supported_version)
                 for f in request.features],
                request.rack,
                log_dirs=[d for d in field(request, "log_dirs", ()) if d is not None],
                cluster_id=request.cluster_id,
            )
        except ControllerRefused as refused:
            return make(module.BrokerRegistrationResponse, throttle_time=NO_THROTTLE,
                        error_code=refused.code, broker_epoch=-1)
        return make(module.BrokerRegistrationResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.none, broker_epoch=result.broker_epoch)

    async def broker_heartbeat(self, context: RequestContext, request: Any) -> Any:
        module = response_module(BROKER_HEARTBEAT, context.header.api_version)
        try:
            result = await self.channel.broker_heartbeat(
                request.broker_id, request.broker_epoch, request.current_metadata_offset,
                want_fence=request.want_fence, want_shutdown=request.want_shut_down,
            )
        except ControllerRefused as refused:
            return make(module.BrokerHeartbeatResponse, throttle_time=NO_THROTTLE,
                        error_code=refused.code, is_caught_up=False, is_fenced=True,
                        should_shut_down=False)
        self._heartbeat_peer[request.broker_id] = (context.client_host,
                                                   context.client_port)
        return make(module.BrokerHeartbeatResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.none, is_caught_up=result.is_caught_up,
                    is_fenced=result.is_fenced, should_shut_down=result.should_shut_down)

    async def alter_partition(self, context: RequestContext, request: Any) -> Any:
        version = context.header.api_version
        module = response_module(ALTER_PARTITION, version)
        topics = [
            AlterPartitionTopic(topic.topic_id or uuid.UUID(int=0), tuple(
                AlterPartitionItem(
                    partition_index=p.partition_index,
                    leader_epoch=p.leader_epoch,
                    new_isr=tuple(IsrMember(m.broker_id, m.broker_epoch)
                                  for m in p.new_isr_with_epochs) if version >= 3
                    else tuple(IsrMember(b) for b in p.new_isr),
                    partition_epoch=p.partition_epoch,
                    leader_recovery_state=p.leader_recovery_state,
                )
                for p in topic.partitions))
            for topic in request.topics
        ]
        try:
            results = await self.channel.alter_partition(
                request.broker_id, request.broker_epoch, topics)
        except ControllerRefused as refused:
            return make(module.AlterPartitionResponse, throttle_time=NO_THROTTLE,
                        error_code=refused.code, topics=())
        return make(
            module.AlterPartitionResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
            topics=tuple(
                make(module.TopicData, topic_id=t.topic_id, partitions=tuple(
                    make(module.PartitionData, partition_index=p.partition_index,
                         error_code=p.error_code, leader_id=p.leader_id,
                         leader_epoch=p.leader_epoch, isr=p.isr,
                         leader_recovery_state=p.leader_recovery_state,
                         partition_epoch=p.partition_epoch)
                    for p in t.partitions))
                for t in results))

    async def allocate_producer_ids(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ALLOCATE_PRODUCER_IDS, context.header.api_version)
        try:
            block = await self.channel.allocate_producer_ids(request.broker_id,
                                                             request.broker_epoch)
        except ControllerRefused as refused:
            return make(module.AllocateProducerIdsResponse, throttle_time=NO_THROTTLE,
                        error_code=refused.code, producer_id_start=0, producer_id_len=0)
        return make(module.AllocateProducerIdsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.none, producer_id_start=block.first_producer_id,
                    producer_id_len=block.size)
