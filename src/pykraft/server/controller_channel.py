"""The broker's `ControllerChannel` in a cluster: to the active controller wherever it runs.

`QuorumControllerChannel` serves each metadata change (CreateTopics, DeleteTopics,
CreatePartitions, AlterConfigs, IncrementalAlterConfigs, AlterClientQuotas,
AlterUserScramCredentials, ElectLeaders, AlterPartitionReassignments),
ListPartitionReassignments, and the broker's own
lifecycle and replication requests (BrokerRegistration, BrokerHeartbeat, AlterPartition):

- in-process when this node's controller is the active one (a combined node that leads the
  metadata quorum: no network hop, as the single node always did);
- otherwise over the network to the active controller's controller listener, in Kafka's
  wire protocol (the forwarding of KIP-590, without the Envelope: the broker re-encodes the
  request it decoded), with `ActiveControllerClient`.

A NOT_CONTROLLER answer (leadership moved meanwhile), an unknown leader or a connection
failure is retried with backoff, re-reading the quorum leader each time, until the
channel's timeout; then every item is answered NOT_CONTROLLER, which clients retry. With
no network client (the channel the controller listener itself uses, so that a forwarded
request is never forwarded again) one local attempt is made. A change whose leader was
lost after it was appended may still commit under the new leader, so a retried
CreateTopics can answer TOPIC_ALREADY_EXISTS for a topic this very request created, as
Kafka's forwarding can.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

from kio.schema.errors import ErrorCode

from pykraft.broker.credential_apis import derive_keys
from pykraft.controller import quotas, scram
from pykraft.controller.acls import (
    AclBindingFilter,
    AclCreationResult,
    AclDeletionResult,
)
from pykraft.controller.acls import create_acls as create_acl_bindings
from pykraft.controller.acls import delete_acls as delete_acl_bindings
from pykraft.controller.features import FeatureUpdate, UpdateFeaturesResult
from pykraft.controller.producer_ids import ProducerIdsBlock
from pykraft.controller.requests import (
    AlterConfigsResource,
    AlterConfigsResult,
    AlterPartitionPartitionResult,
    AlterPartitionTopic,
    AlterPartitionTopicResult,
    BrokerFeatureRange,
    BrokerHeartbeatResult,
    BrokerRegistrationResult,
    ConfigSource,
    CreatableTopic,
    CreatableTopicConfig,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    ElectionType,
    LegacyAlterConfigsResource,
    Listener,
    OngoingReassignment,
    OngoingTopicReassignments,
    OpResult,
    PartitionElectionResult,
    ReassignableTopic,
    ReassignmentPartitionResult,
    ReassignmentTopicResult,
    TopicElectionResult,
)
from pykraft.errors import KafkaError, NotController
from pykraft.metadata.registrations import StandardAcl
from pykraft.protocol.api import ApiKey
from pykraft.protocol.entities import make
from pykraft.protocol.framing import request_type
from pykraft.server.controller_client import (
    ActiveControllerClient,
    Backoff,
    ControllerUnavailable,
)
from pykraft.server.controller_server import ControllerServer, OutcomeUnknown

log = logging.getLogger(__name__)

T = TypeVar("T")

BROKER_REGISTRATION: Final = ApiKey.BROKER_REGISTRATION  # KIP-631
BROKER_HEARTBEAT: Final = ApiKey.BROKER_HEARTBEAT
ALTER_PARTITION: Final = ApiKey.ALTER_PARTITION  # KIP-497
ALLOCATE_PRODUCER_IDS: Final = ApiKey.ALLOCATE_PRODUCER_IDS  # KIP-730

# the versions this channel speaks (served by every pykraft controller listener)
CREATE_TOPICS_VERSION: Final = 7
DELETE_TOPICS_VERSION: Final = 6
CREATE_PARTITIONS_VERSION: Final = 3
INCREMENTAL_ALTER_CONFIGS_VERSION: Final = 1
ALTER_CONFIGS_VERSION: Final = 2
BROKER_REGISTRATION_VERSION: Final = 4
BROKER_HEARTBEAT_VERSION: Final = 1
ALTER_PARTITION_VERSION: Final = 3
ELECT_LEADERS_VERSION: Final = 2
ALTER_REASSIGNMENTS_VERSION: Final = 1
LIST_REASSIGNMENTS_VERSION: Final = 0
ALLOCATE_PRODUCER_IDS_VERSION: Final = 0
UNREGISTER_BROKER_VERSION: Final = 0
UPDATE_FEATURES_VERSION: Final = 2
CREATE_ACLS_VERSION: Final = 3
DELETE_ACLS_VERSION: Final = 3
ALTER_CLIENT_QUOTAS_VERSION: Final = 1
ALTER_USER_SCRAM_CREDENTIALS_VERSION: Final = 0
NOT_CONTROLLER_MESSAGE: Final = "no active controller answered in time"
# what the channel answers for a request no controller answered in time
_UNANSWERED: Final = frozenset({ErrorCode.not_controller, ErrorCode.request_timed_out})


class ControllerRefused(Exception):
    """The active controller answered a lifecycle request with an error."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code


def _module(api_key: int, version: int) -> Any:
    import sys

    return sys.modules[request_type(api_key, version).__module__]


def _retry_needed(codes: Sequence[ErrorCode]) -> bool:
    return ErrorCode.not_controller in codes


class QuorumControllerChannel:
    def __init__(
        self,
        local: ControllerServer | None,
        client: ActiveControllerClient | None,
        *,
        timeout_ms: int,
        now_ms: Callable[[], int] | None = None,
        lifecycle_client: ActiveControllerClient | None = None,
        leader_followed: Callable[[], bool] = lambda: True,
    ) -> None:
        self.local = local
        self.client = client
        # whether this node's quorum replica follows (or is) the leader now: a voter that
        # lost it keeps its id while it pre-votes (KIP-996), and that id is no leader to
        # wait for
        self.leader_followed = leader_followed
        # BrokerRegistration and BrokerHeartbeat go on a connection of their own, as
        # Kafka's broker lifecycle manager has its own channel: one request at a time per
        # connection, a heartbeat behind a forwarded ElectLeaders of 5,000 partitions
        # waited past the session timeout and its broker was fenced
        self.lifecycle_client = lifecycle_client or client
        self.timeout_ms = timeout_ms
        self._now_ms = now_ms or (lambda: time.monotonic_ns() // 1_000_000)

    # -- routing ------------------------------------------------------------------------

    async def _route(
        self,
        local: Callable[[ControllerServer], Awaitable[T]],
        remote: Callable[[ActiveControllerClient], Awaitable[T | None]],
        failed: Callable[[ErrorCode, str], T],
        *,
        idempotent: bool = False,
        client: ActiveControllerClient | None = None,
    ) -> T:
        """Run locally when this node's controller is active, else remotely; retry while
        nobody could decide (`remote` gives None for an answer saying NOT_CONTROLLER).

        A change whose fate is unknown -- the controller lost leadership after appending
        it, or the request was sent and no answer came -- is sent again only if
        `idempotent`; otherwise it is answered REQUEST_TIMED_OUT, never made twice."""
        deadline_ms = self._now_ms() + self.timeout_ms
        remote_client = client or self.client
        # at most 100 ms between tries: a try costs a look at who leads (or a refused
        # connect), and a longer wait would delay every request by up to the same again
        # once a new controller is elected
        backoff = Backoff(initial_ms=20, max_ms=100)
        while True:
            if self.local is not None and self.local.core.is_active:
                try:
                    return await local(self.local)
                except NotController:
                    pass
                except OutcomeUnknown as error:
                    if not idempotent:
                        return failed(ErrorCode.request_timed_out, str(error))
            elif remote_client is not None and self._leader_elsewhere():
                try:
                    answer = await remote(remote_client)
                except ControllerUnavailable as error:
                    log.debug("controller request failed: %s", error)
                    if error.sent and not idempotent:
                        return failed(ErrorCode.request_timed_out,
                                      f"no answer from the active controller: {error}")
                else:
                    if answer is not None:
                        return answer
            if self._now_ms() >= deadline_ms:
                return failed(ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
            await backoff.wait()

    def controller_known(self) -> bool:
        """Whether the metadata quorum has a leader this node knows of (here or elsewhere)
        and still follows: a request it did not answer in time met a busy controller, not
        a missing one."""
        if self.local is not None and self.local.core.is_active:
            return True
        return (self.client is not None and self.client.active_controller() is not None
                and self.leader_followed())

    def _leader_elsewhere(self) -> bool:
        assert self.client is not None
        active = self.client.active_controller()
        return active is not None and active != self.client.node_id

    # -- ControllerChannel --------------------------------------------------------------

    async def create_topics(
        self, topics: Sequence[CreatableTopic], *, validate_only: bool
    ) -> Sequence[CreateTopicResult]:
        async def remote(client: ActiveControllerClient) -> Sequence[CreateTopicResult] | None:
            module = _module(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION)
            request = make(
                module.CreateTopicsRequest, timeout=_timeout(self.timeout_ms),
                validate_only=validate_only,
                topics=tuple(
                    make(module.CreatableTopic, name=t.name, num_partitions=t.num_partitions,
                         replication_factor=t.replication_factor,
                         assignments=tuple(
                             make(module.CreatableReplicaAssignment, partition_index=p,
                                  broker_ids=tuple(ids))
                             for p, ids in sorted(t.assignments.items())),
                         configs=tuple(make(module.CreatableTopicConfig, name=k, value=v)
                                       for k, v in t.configs.items()))
                    for t in topics))
            _, answer = await client.send(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, request)
            results = tuple(
                CreateTopicResult(
                    name=r.name, topic_id=r.topic_id, error_code=r.error_code,
                    error_message=r.error_message, num_partitions=r.num_partitions,
                    replication_factor=r.replication_factor,
                    configs=tuple(
                        CreatableTopicConfig(c.name, c.value, c.read_only,
                                             ConfigSource(c.config_source), c.is_sensitive)
                        for c in r.configs or ()))
                for r in answer.topics)
            return None if _retry_needed([r.error_code for r in results]) else results

        return await self._route(
            lambda c: c.create_topics(topics, validate_only=validate_only), remote,
            lambda code, message: tuple(CreateTopicResult(t.name, error_code=code,
                                                          error_message=message)
                                        for t in topics))

    async def delete_topics(
        self, names: Sequence[str], topic_ids: Sequence[uuid.UUID]
    ) -> Sequence[DeleteTopicResult]:
        async def remote(client: ActiveControllerClient) -> Sequence[DeleteTopicResult] | None:
            module = _module(ApiKey.DELETE_TOPICS, DELETE_TOPICS_VERSION)
            request = make(
                module.DeleteTopicsRequest, timeout=_timeout(self.timeout_ms),
                topics=tuple([make(module.DeleteTopicState, name=n, topic_id=_NO_ID)
                              for n in names]
                             + [make(module.DeleteTopicState, name=None, topic_id=i)
                                for i in topic_ids]))
            _, answer = await client.send(ApiKey.DELETE_TOPICS, DELETE_TOPICS_VERSION, request)
            results = tuple(DeleteTopicResult(r.name, r.topic_id, r.error_code, r.error_message)
                            for r in answer.responses)
            return None if _retry_needed([r.error_code for r in results]) else results

        def failed(code: ErrorCode, message: str) -> Sequence[DeleteTopicResult]:
            return tuple([DeleteTopicResult(n, error_code=code, error_message=message)
                          for n in names]
                         + [DeleteTopicResult(None, i, code, message) for i in topic_ids])

        return await self._route(lambda c: c.delete_topics(names, topic_ids), remote, failed)

    async def create_partitions(
        self, topics: Sequence[CreatePartitionsTopic], *, validate_only: bool
    ) -> Sequence[CreatePartitionsResult]:
        async def remote(
            client: ActiveControllerClient,
        ) -> Sequence[CreatePartitionsResult] | None:
            module = _module(ApiKey.CREATE_PARTITIONS, CREATE_PARTITIONS_VERSION)
            request = make(
                module.CreatePartitionsRequest, timeout=_timeout(self.timeout_ms),
                validate_only=validate_only,
                topics=tuple(
                    make(module.CreatePartitionsTopic, name=t.name, count=t.count,
                         assignments=None if t.assignments is None else tuple(
                             make(module.CreatePartitionsAssignment, broker_ids=tuple(ids))
                             for ids in t.assignments))
                    for t in topics))
            _, answer = await client.send(ApiKey.CREATE_PARTITIONS, CREATE_PARTITIONS_VERSION,
                                          request)
            results = tuple(CreatePartitionsResult(r.name, r.error_code, r.error_message)
                            for r in answer.results)
            return None if _retry_needed([r.error_code for r in results]) else results

        return await self._route(
            lambda c: c.create_partitions(topics, validate_only=validate_only), remote,
            lambda code, message: tuple(CreatePartitionsResult(t.name, code, message)
                                        for t in topics))

    async def incremental_alter_configs(
        self, resources: Sequence[AlterConfigsResource], *, validate_only: bool
    ) -> Sequence[AlterConfigsResult]:
        async def remote(client: ActiveControllerClient) -> Sequence[AlterConfigsResult] | None:
            module = _module(ApiKey.INCREMENTAL_ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS_VERSION)
            request = make(
                module.IncrementalAlterConfigsRequest, validate_only=validate_only,
                resources=tuple(
                    make(module.AlterConfigsResource, resource_type=r.resource_type,
                         resource_name=r.resource_name,
                         configs=tuple(make(module.AlterableConfig, name=c.name,
                                            config_operation=int(c.op), value=c.value)
                                       for c in r.configs))
                    for r in resources))
            _, answer = await client.send(ApiKey.INCREMENTAL_ALTER_CONFIGS,
                                          INCREMENTAL_ALTER_CONFIGS_VERSION, request)
            return _alter_results(answer)

        return await self._route(
            lambda c: c.incremental_alter_configs(resources, validate_only=validate_only),
            remote, lambda code, message: _alter_failed(resources, code, message))

    async def alter_configs(
        self, resources: Sequence[LegacyAlterConfigsResource], *, validate_only: bool
    ) -> Sequence[AlterConfigsResult]:
        async def remote(client: ActiveControllerClient) -> Sequence[AlterConfigsResult] | None:
            module = _module(ApiKey.ALTER_CONFIGS, ALTER_CONFIGS_VERSION)
            request = make(
                module.AlterConfigsRequest, validate_only=validate_only,
                resources=tuple(
                    make(module.AlterConfigsResource, resource_type=r.resource_type,
                         resource_name=r.resource_name,
                         configs=tuple(make(module.AlterableConfig, name=k, value=v)
                                       for k, v in r.configs.items()))
                    for r in resources))
            _, answer = await client.send(ApiKey.ALTER_CONFIGS, ALTER_CONFIGS_VERSION, request)
            return _alter_results(answer)

        return await self._route(  # sets every override of a resource: safe to resend
            lambda c: c.alter_configs(resources, validate_only=validate_only),
            remote, lambda code, message: _alter_failed(resources, code, message),
            idempotent=True)

    async def alter_client_quotas(
        self, alterations: Sequence[quotas.ClientQuotaAlteration], *, validate_only: bool
    ) -> Sequence[quotas.ClientQuotaResult]:
        """AlterClientQuotas (KIP-546), decided by the active controller."""

        def decide(core: Any) -> OpResult[tuple[quotas.ClientQuotaResult, ...]]:
            if not core.is_active:
                raise NotController("This controller is not the active one.")
            records, results = quotas.alter_client_quotas(
                core.image.client_quotas.entities, alterations)
            return OpResult(() if validate_only else tuple(records), results)

        async def local(server: ControllerServer) -> Sequence[quotas.ClientQuotaResult]:
            return await server.run(decide)

        async def remote(
            client: ActiveControllerClient,
        ) -> Sequence[quotas.ClientQuotaResult] | None:
            module = _module(ApiKey.ALTER_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS_VERSION)
            request = make(
                module.AlterClientQuotasRequest, validate_only=validate_only,
                entries=tuple(
                    make(module.EntryData,
                         entity=tuple(module.EntityData(entity_type=kind, entity_name=name)
                                      for kind, name in a.entity),
                         ops=tuple(make(module.OpData, key=key, value=value or 0.0,
                                        remove=value is None) for key, value in a.ops))
                    for a in alterations))
            _, answer = await client.send(ApiKey.ALTER_CLIENT_QUOTAS,
                                          ALTER_CLIENT_QUOTAS_VERSION, request)
            results = tuple(
                quotas.ClientQuotaResult(
                    tuple((e.entity_type, e.entity_name) for e in entry.entity),
                    entry.error_code, entry.error_message)
                for entry in answer.entries)
            return None if _retry_needed([r.error_code for r in results]) else results

        def failed(code: ErrorCode, message: str) -> Sequence[quotas.ClientQuotaResult]:
            return tuple(quotas.ClientQuotaResult(a.entity, code, message)
                         for a in alterations)

        # setting a quota twice ends with the same quota: safe to resend
        return await self._route(local, remote, failed, idempotent=True)

    async def alter_user_scram_credentials(
        self, deletions: Sequence[scram.ScramDeletion],
        upsertions: Sequence[scram.ScramUpsertion],
    ) -> Sequence[scram.AlterScramResult]:
        """AlterUserScramCredentials (KIP-554), decided by the active controller."""

        def decide(core: Any) -> OpResult[tuple[scram.AlterScramResult, ...]]:
            if not core.is_active:
                raise NotController("This controller is not the active one.")
            image = core.image
            records, results = scram.alter_user_scram_credentials(
                image.scram.credentials, image.features.metadata_version, deletions,
                upsertions, derive_keys)
            return OpResult(tuple(records), results)

        async def local(server: ControllerServer) -> Sequence[scram.AlterScramResult]:
            return await server.run(decide)

        async def remote(
            client: ActiveControllerClient,
        ) -> Sequence[scram.AlterScramResult] | None:
            module = _module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                             ALTER_USER_SCRAM_CREDENTIALS_VERSION)
            request = make(
                module.AlterUserScramCredentialsRequest,
                deletions=tuple(make(module.ScramCredentialDeletion, name=d.name,
                                     mechanism=d.mechanism) for d in deletions),
                upsertions=tuple(make(module.ScramCredentialUpsertion, name=u.name,
                                      mechanism=u.mechanism, iterations=u.iterations,
                                      salt=u.salt, salted_password=u.salted_password)
                                 for u in upsertions))
            _, answer = await client.send(ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                                          ALTER_USER_SCRAM_CREDENTIALS_VERSION, request)
            results = tuple(scram.AlterScramResult(r.user, r.error_code, r.error_message)
                            for r in answer.results)
            return None if _retry_needed([r.error_code for r in results]) else results

        def failed(code: ErrorCode, message: str) -> Sequence[scram.AlterScramResult]:
            names = dict.fromkeys([d.name for d in deletions] + [u.name for u in upsertions])
            return tuple(scram.AlterScramResult(name, code, message) for name in names)

        # an upsertion sent twice stores the same keys: safe to resend; a deletion sent twice
        # would answer RESOURCE_NOT_FOUND for a credential this very request deleted
        return await self._route(local, remote, failed, idempotent=not deletions)

    async def create_acls(self, creations: Sequence[StandardAcl]) -> Sequence[AclCreationResult]:
        """CreateAcls, decided by the active controller (controller.acls); ids come from the
        controller's rng, the shell's randomness."""

        def decide(core: Any) -> OpResult[tuple[AclCreationResult, ...]]:
            if not core.is_active:
                raise NotController("This controller is not the active one.")
            records, results = create_acl_bindings(core.image.acls.by_id, creations, core.rng)
            return OpResult(tuple(records), tuple(results))

        async def local(server: ControllerServer) -> Sequence[AclCreationResult]:
            return await server.run(decide)

        async def remote(client: ActiveControllerClient) -> Sequence[AclCreationResult] | None:
            module = _module(ApiKey.CREATE_ACLS, CREATE_ACLS_VERSION)
            request = make(module.CreateAclsRequest, creations=tuple(
                make(module.AclCreation, resource_type=c.resource_type,
                     resource_name=c.resource_name, resource_pattern_type=c.pattern_type,
                     principal=c.principal, host=c.host, operation=c.operation,
                     permission_type=c.permission_type)
                for c in creations))
            _, answer = await client.send(ApiKey.CREATE_ACLS, CREATE_ACLS_VERSION, request)
            results = tuple(AclCreationResult(r.error_code, r.error_message)
                            for r in answer.results)
            return None if _retry_needed([r.error_code for r in results]) else results

        def failed(code: ErrorCode, message: str) -> Sequence[AclCreationResult]:
            return tuple(AclCreationResult(code, message) for _ in creations)

        # a binding created twice is created once (the second is a no-op): safe to resend
        return await self._route(local, remote, failed, idempotent=True)

    async def delete_acls(
        self, filters: Sequence[AclBindingFilter]
    ) -> Sequence[AclDeletionResult]:
        """DeleteAcls, decided by the active controller (controller.acls)."""

        def decide(core: Any) -> OpResult[tuple[AclDeletionResult, ...]]:
            if not core.is_active:
                raise NotController("This controller is not the active one.")
            records, results = delete_acl_bindings(core.image.acls.by_id, filters)
            return OpResult(tuple(records), tuple(results))

        async def local(server: ControllerServer) -> Sequence[AclDeletionResult]:
            return await server.run(decide)

        async def remote(client: ActiveControllerClient) -> Sequence[AclDeletionResult] | None:
            module = _module(ApiKey.DELETE_ACLS, DELETE_ACLS_VERSION)
            request = make(module.DeleteAclsRequest, filters=tuple(
                make(module.DeleteAclsFilter, resource_type_filter=f.resource_type,
                     resource_name_filter=f.resource_name, pattern_type_filter=f.pattern_type,
                     principal_filter=f.principal, host_filter=f.host, operation=f.operation,
                     permission_type=f.permission_type)
                for f in filters))
            _, answer = await client.send(ApiKey.DELETE_ACLS, DELETE_ACLS_VERSION, request)
            results = tuple(
                AclDeletionResult(r.error_code, r.error_message, tuple(
                    StandardAcl(m.resource_type, m.resource_name, m.pattern_type, m.principal,
                                m.host, m.operation, m.permission_type)
                    for m in r.matching_acls))
                for r in answer.filter_results)
            return None if _retry_needed([r.error_code for r in results]) else results

        def failed(code: ErrorCode, message: str) -> Sequence[AclDeletionResult]:
            return tuple(AclDeletionResult(code, message, ()) for _ in filters)

        # a deletion sent twice would list nothing the second time: never resent blindly
        return await self._route(local, remote, failed)

    async def auto_create_topics(self, names: list[str]) -> None:
        """Metadata-triggered topic creation with the cluster defaults (auto.create.topics)."""
        results = await self.create_topics([CreatableTopic(name=n) for n in names],
                                           validate_only=False)
        for result in results:
            if result.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                log.info("auto-creating topic %s failed: %s", result.name, result.error_message)

    # -- broker lifecycle (KIP-631) -------------------------------------------------------

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int,
                                  metadata_offset: Callable[[], int], *,
                                  interval_s: float) -> None:
        """Heartbeat with want-shutdown every `interval_s` until the controller says the
        broker may stop. A heartbeat unanswered within the channel's timeout is sent again
        while the quorum has a known leader -- one busy moving 100,000 leaderships answers
        late -- as Kafka's broker does; with none known it raises ControllerRefused, and so
        does any other refusal. The caller bounds the whole."""
        while True:
            try:
                result = await self.broker_heartbeat(
                    broker_id, broker_epoch, metadata_offset(), want_fence=False,
                    want_shutdown=True)
            except ControllerRefused as error:
                if error.code not in _UNANSWERED or not self.controller_known():
                    raise
                log.info("broker %d: controlled shutdown not answered yet (%s); asking again",
                         broker_id, error)
            else:
                if result.should_shut_down:
                    return
            await asyncio.sleep(interval_s)

    async def register_broker(
        self,
        broker_id: int,
        incarnation_id: uuid.UUID,
        listeners: Sequence[Listener],
        features: Sequence[BrokerFeatureRange],
        rack: str | None,
        *,
        log_dirs: Sequence[uuid.UUID],
        cluster_id: str,
    ) -> BrokerRegistrationResult:
        """BrokerRegistration; raises ControllerRefused with the controller's error, or
        with NOT_CONTROLLER when no active controller answered within the timeout."""
        async def local(server: ControllerServer) -> BrokerRegistrationResult:
            try:
                # the controller's own clock, not the caller's (ControllerServer.now_ms)
                return await server.run(lambda core: core.register_broker(
                    broker_id, incarnation_id, listeners, features, rack, server.now_ms(),
                    log_dirs=log_dirs, cluster_id=cluster_id))
            except (NotController, OutcomeUnknown):
                raise
            except KafkaError as error:
                raise ControllerRefused(error.code, str(error) or None) from error

        async def remote(client: ActiveControllerClient) -> BrokerRegistrationResult | None:
            module = _module(BROKER_REGISTRATION, BROKER_REGISTRATION_VERSION)
            request = make(
                module.BrokerRegistrationRequest, broker_id=broker_id, cluster_id=cluster_id,
                incarnation_id=incarnation_id, rack=rack, log_dirs=tuple(log_dirs),
                listeners=tuple(make(module.Listener, name=x.name, host=x.host, port=x.port,
                                     security_protocol=x.security_protocol)
                                for x in listeners),
                features=tuple(make(module.Feature, name=f.name,
                                    min_supported_version=f.min_supported_version,
                                    max_supported_version=f.max_supported_version)
                               for f in features))
            _, answer = await client.send(BROKER_REGISTRATION,
                                          BROKER_REGISTRATION_VERSION, request)
            if answer.error_code == ErrorCode.not_controller:
                return None
            if answer.error_code != ErrorCode.none:
                raise ControllerRefused(answer.error_code)
            return BrokerRegistrationResult(broker_epoch=answer.broker_epoch)

        return await self._route(local, remote, _refuse, idempotent=True,
                                 client=self.lifecycle_client)

    async def broker_heartbeat(
        self,
        broker_id: int,
        broker_epoch: int,
        current_metadata_offset: int,
        *,
        want_fence: bool,
        want_shutdown: bool,
    ) -> BrokerHeartbeatResult:
        """BrokerHeartbeat; raises ControllerRefused as `register_broker` does, and with
        REQUEST_TIMED_OUT when it waited half a heartbeat interval behind other operations
        (as Kafka's controller: the broker's session counts it, and it sends the next)."""
        async def local(server: ControllerServer) -> BrokerHeartbeatResult:
            server.heartbeat_arrived(broker_id, broker_epoch)
            try:
                return await server.run(lambda core: core.broker_heartbeat(
                    broker_id=broker_id, broker_epoch=broker_epoch,
                    current_metadata_offset=current_metadata_offset, want_fence=want_fence,
                    want_shutdown=want_shutdown, now_ms=server.now_ms()),
                    queue_timeout_s=server.core.config.broker_heartbeat_interval_ms / 2000)
            except (NotController, OutcomeUnknown):
                raise
            except KafkaError as error:
                raise ControllerRefused(error.code, str(error) or None) from error
            finally:
                server.heartbeat_answered(broker_id)

        async def remote(client: ActiveControllerClient) -> BrokerHeartbeatResult | None:
            module = _module(BROKER_HEARTBEAT, BROKER_HEARTBEAT_VERSION)
            request = make(module.BrokerHeartbeatRequest, broker_id=broker_id,
                           broker_epoch=broker_epoch,
                           current_metadata_offset=current_metadata_offset,
                           want_fence=want_fence, want_shut_down=want_shutdown)
            _, answer = await client.send(BROKER_HEARTBEAT, BROKER_HEARTBEAT_VERSION,
                                          request)
            if answer.error_code == ErrorCode.not_controller:
                return None
            if answer.error_code != ErrorCode.none:
                raise ControllerRefused(answer.error_code)
            return BrokerHeartbeatResult(is_caught_up=answer.is_caught_up,
                                         is_fenced=answer.is_fenced,
                                         should_shut_down=answer.should_shut_down)

        return await self._route(local, remote, _refuse, idempotent=True,
                                 client=self.lifecycle_client)

    # -- replication (KIP-497, KIP-460) ------------------------------------------------

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, topics: Sequence[AlterPartitionTopic]
    ) -> Sequence[AlterPartitionTopicResult]:
        """AlterPartition; raises ControllerRefused for a whole-request error
        (STALE_BROKER_EPOCH, or NOT_CONTROLLER when no active controller answered)."""
        async def local(server: ControllerServer) -> Sequence[AlterPartitionTopicResult]:
            try:
                return await server.run(
                    lambda core: core.alter_partition(broker_id, broker_epoch, topics))
            except (NotController, OutcomeUnknown):
                raise
            except KafkaError as error:
                raise ControllerRefused(error.code, str(error) or None) from error

        async def remote(
            client: ActiveControllerClient,
        ) -> Sequence[AlterPartitionTopicResult] | None:
            module = _module(ALTER_PARTITION, ALTER_PARTITION_VERSION)
            request = make(
                module.AlterPartitionRequest, broker_id=broker_id, broker_epoch=broker_epoch,
                topics=tuple(
                    make(module.TopicData, topic_id=t.topic_id, partitions=tuple(
                        make(module.PartitionData, partition_index=p.partition_index,
                             leader_epoch=p.leader_epoch,
                             new_isr_with_epochs=tuple(
                                 make(module.BrokerState, broker_id=m.broker_id,
                                      broker_epoch=m.broker_epoch) for m in p.new_isr),
                             leader_recovery_state=p.leader_recovery_state,
                             partition_epoch=p.partition_epoch)
                        for p in t.partitions))
                    for t in topics))
            _, answer = await client.send(ALTER_PARTITION, ALTER_PARTITION_VERSION, request)
            if answer.error_code == ErrorCode.not_controller:
                return None
            if answer.error_code != ErrorCode.none:
                raise ControllerRefused(answer.error_code)
            results = tuple(
                AlterPartitionTopicResult(t.topic_id, tuple(
                    AlterPartitionPartitionResult(
                        p.partition_index, p.error_code, p.leader_id, p.leader_epoch,
                        tuple(p.isr), p.leader_recovery_state, p.partition_epoch)
                    for p in t.partitions))
                for t in answer.topics)
            codes = [p.error_code for t in results for p in t.partitions]
            return None if _retry_needed(codes) else results

        # an ISR proposal carries the epochs it was made at: resending it is harmless
        return await self._route(local, remote, _refuse, idempotent=True)

    async def elect_leaders(
        self, election_type: ElectionType, partitions: Mapping[str, Sequence[int]] | None
    ) -> tuple[ErrorCode, Sequence[TopicElectionResult]]:
        """ElectLeaders: the top-level error and the results (`partitions` None: all)."""
        async def local(
            server: ControllerServer,
        ) -> tuple[ErrorCode, Sequence[TopicElectionResult]]:
            results = await server.run(lambda core: core.elect_leaders(election_type, partitions))
            return ErrorCode.none, results

        async def remote(
            client: ActiveControllerClient,
        ) -> tuple[ErrorCode, Sequence[TopicElectionResult]] | None:
            module = _module(ApiKey.ELECT_LEADERS, ELECT_LEADERS_VERSION)
            request = make(
                module.ElectLeadersRequest, election_type=int(election_type),
                timeout=_timeout(self.timeout_ms),
                topic_partitions=None if partitions is None else tuple(
                    make(module.TopicPartitions, topic=name, partitions=tuple(ids))
                    for name, ids in partitions.items()))
            _, answer = await client.send(ApiKey.ELECT_LEADERS, ELECT_LEADERS_VERSION, request)
            if answer.error_code == ErrorCode.not_controller:
                return None
            results = tuple(
                TopicElectionResult(r.topic, tuple(
                    PartitionElectionResult(p.partition_id, p.error_code, p.error_message)
                    for p in r.partition_result))
                for r in answer.replica_election_results)
            codes = [p.error_code for r in results for p in r.partitions]
            return None if _retry_needed(codes) else (answer.error_code, results)

        def failed(
            code: ErrorCode, message: str
        ) -> tuple[ErrorCode, Sequence[TopicElectionResult]]:
            if partitions is None:
                return code, ()
            return code, tuple(
                TopicElectionResult(name, tuple(PartitionElectionResult(i, code, message)
                                                for i in ids))
                for name, ids in partitions.items())

        # a second election of the same kind finds nothing to do: safe to resend
        return await self._route(local, remote, failed, idempotent=True)

    # -- producer ids (KIP-730), unregistration, features (KIP-584) ----------------------

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdsBlock:
        """AllocateProducerIds; raises ControllerRefused (STALE_BROKER_EPOCH, or
        NOT_CONTROLLER when no active controller answered within the timeout)."""
        async def local(server: ControllerServer) -> ProducerIdsBlock:
            try:
                return await server.run(
                    lambda core: core.allocate_producer_ids(broker_id, broker_epoch))
            except (NotController, OutcomeUnknown):
                raise
            except KafkaError as error:
                raise ControllerRefused(error.code, str(error) or None) from error

        async def remote(client: ActiveControllerClient) -> ProducerIdsBlock | None:
            module = _module(ALLOCATE_PRODUCER_IDS, ALLOCATE_PRODUCER_IDS_VERSION)
            request = make(module.AllocateProducerIdsRequest, broker_id=broker_id,
                           broker_epoch=broker_epoch)
            _, answer = await client.send(ALLOCATE_PRODUCER_IDS, ALLOCATE_PRODUCER_IDS_VERSION,
                                          request)
            if answer.error_code == ErrorCode.not_controller:
                return None
            if answer.error_code != ErrorCode.none:
                raise ControllerRefused(answer.error_code)
            return ProducerIdsBlock(broker_id, answer.producer_id_start, answer.producer_id_len)

        # a block allocated twice wastes ids but never hands one out twice: safe to resend
        return await self._route(local, remote, _refuse, idempotent=True)

    async def unregister_broker(self, broker_id: int) -> tuple[ErrorCode, str | None]:
        """UnregisterBroker: the error code and message (NONE, None when done)."""
        async def local(server: ControllerServer) -> tuple[ErrorCode, str | None]:
            try:
                await server.run(lambda core: core.unregister_broker(broker_id))
            except (NotController, OutcomeUnknown):
                raise
            except KafkaError as error:
                return error.code, str(error) or None
            return ErrorCode.none, None

        async def remote(client: ActiveControllerClient) -> tuple[ErrorCode, str | None] | None:
            module = _module(ApiKey.UNREGISTER_BROKER, UNREGISTER_BROKER_VERSION)
            request = make(module.UnregisterBrokerRequest, broker_id=broker_id)
            _, answer = await client.send(ApiKey.UNREGISTER_BROKER, UNREGISTER_BROKER_VERSION,
                                          request)
            if answer.error_code == ErrorCode.not_controller:
                return None
            return answer.error_code, answer.error_message

        return await self._route(local, remote, lambda code, message: (code, message))

    async def update_features(
        self, updates: Sequence[FeatureUpdate], *, validate_only: bool
    ) -> UpdateFeaturesResult:
        async def local(server: ControllerServer) -> UpdateFeaturesResult:
            return await server.run(
                lambda core: core.update_features(updates, validate_only=validate_only))

        async def remote(client: ActiveControllerClient) -> UpdateFeaturesResult | None:
            module = _module(ApiKey.UPDATE_FEATURES, UPDATE_FEATURES_VERSION)
            request = make(
                module.UpdateFeaturesRequest, timeout=_timeout(self.timeout_ms),
                validate_only=validate_only,
                feature_updates=tuple(
                    make(module.FeatureUpdateKey, feature=u.feature,
                         max_version_level=u.max_version_level,
                         upgrade_type=int(u.upgrade_type))
                    for u in updates))
            _, answer = await client.send(ApiKey.UPDATE_FEATURES, UPDATE_FEATURES_VERSION,
                                          request)
            if answer.error_code == ErrorCode.not_controller:
                return None
            return UpdateFeaturesResult(answer.error_code, answer.error_message)

        # setting a level twice ends in the same level: safe to resend
        return await self._route(local, remote,
                                 lambda code, message: UpdateFeaturesResult(code, message),
                                 idempotent=True)

    # -- reassignment (KIP-455) ---------------------------------------------------------

    async def alter_partition_reassignments(
        self, topics: Sequence[ReassignableTopic], *, allow_replication_factor_change: bool
    ) -> Sequence[ReassignmentTopicResult]:
        async def local(server: ControllerServer) -> Sequence[ReassignmentTopicResult]:
            return await server.run(lambda core: core.alter_partition_reassignments(
                topics, allow_replication_factor_change=allow_replication_factor_change))

        async def remote(
            client: ActiveControllerClient,
        ) -> Sequence[ReassignmentTopicResult] | None:
            module = _module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, ALTER_REASSIGNMENTS_VERSION)
            request = make(
                module.AlterPartitionReassignmentsRequest, timeout=_timeout(self.timeout_ms),
                allow_replication_factor_change=allow_replication_factor_change,
                topics=tuple(
                    make(module.ReassignableTopic, name=t.name, partitions=tuple(
                        make(module.ReassignablePartition, partition_index=p.partition_index,
                             replicas=p.replicas)
                        for p in t.partitions))
                    for t in topics))
            _, answer = await client.send(ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                                          ALTER_REASSIGNMENTS_VERSION, request)
            if answer.error_code == ErrorCode.not_controller:
                return None
            if answer.error_code != ErrorCode.none:
                return _reassign_failed(topics, answer.error_code, answer.error_message)
            results = tuple(
                ReassignmentTopicResult(r.name, tuple(
                    ReassignmentPartitionResult(p.partition_index, p.error_code,
                                                p.error_message)
                    for p in r.partitions))
                for r in answer.responses)
            codes = [p.error_code for r in results for p in r.partitions]
            return None if _retry_needed(codes) else results

        # the same target again changes nothing: safe to resend
        return await self._route(
            local, remote, lambda code, message: _reassign_failed(topics, code, message),
            idempotent=True)

    async def list_partition_reassignments(
        self, partitions: Mapping[str, Sequence[int]] | None
    ) -> tuple[ErrorCode, Sequence[OngoingTopicReassignments]]:
        async def local(
            server: ControllerServer,
        ) -> tuple[ErrorCode, Sequence[OngoingTopicReassignments]]:
            listed = await server.run(lambda core: core.list_partition_reassignments(partitions))
            return ErrorCode.none, listed

        async def remote(
            client: ActiveControllerClient,
        ) -> tuple[ErrorCode, Sequence[OngoingTopicReassignments]] | None:
            module = _module(ApiKey.LIST_PARTITION_REASSIGNMENTS, LIST_REASSIGNMENTS_VERSION)
            request = make(
                module.ListPartitionReassignmentsRequest, timeout=_timeout(self.timeout_ms),
                topics=None if partitions is None else tuple(
                    make(module.ListPartitionReassignmentsTopics, name=name,
                         partition_indexes=tuple(ids))
                    for name, ids in partitions.items()))
            _, answer = await client.send(ApiKey.LIST_PARTITION_REASSIGNMENTS,
                                          LIST_REASSIGNMENTS_VERSION, request)
            if answer.error_code == ErrorCode.not_controller:
                return None
            return answer.error_code, tuple(
                OngoingTopicReassignments(t.name, tuple(
                    OngoingReassignment(p.partition_index, tuple(p.replicas),
                                        tuple(p.adding_replicas), tuple(p.removing_replicas))
                    for p in t.partitions))
                for t in answer.topics)

        return await self._route(local, remote, lambda code, _: (code, ()), idempotent=True)


_NO_ID: Final = uuid.UUID(int=0)


def _timeout(timeout_ms: int) -> Any:
    import datetime

    return datetime.timedelta(milliseconds=timeout_ms)


def _refuse(code: ErrorCode, message: str) -> Any:
    raise ControllerRefused(code, message)


def _alter_results(answer: Any) -> Sequence[AlterConfigsResult] | None:
    results = tuple(AlterConfigsResult(r.resource_type, r.resource_name, r.error_code,
                                       r.error_message)
                    for r in answer.responses)
    return None if _retry_needed([r.error_code for r in results]) else results


def _alter_failed(resources: Sequence[AlterConfigsResource | LegacyAlterConfigsResource],
                  code: ErrorCode, message: str) -> Sequence[AlterConfigsResult]:
    return tuple(AlterConfigsResult(r.resource_type, r.resource_name, code, message)
                 for r in resources)


def _reassign_failed(topics: Sequence[ReassignableTopic], code: ErrorCode,
                     message: str | None) -> Sequence[ReassignmentTopicResult]:
    return tuple(ReassignmentTopicResult(t.name, tuple(
        ReassignmentPartitionResult(p.partition_index, code, message) for p in t.partitions))
        for t in topics)


__all__ = ["QuorumControllerChannel", "ControllerRefused"]
