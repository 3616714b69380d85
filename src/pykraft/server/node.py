"""A pykraft node: the composition of storage, Raft, controller and broker in one process
(process.roles: broker, controller, or both).

Start-up, in order:
1. check every log dir's meta.properties (same cluster id, this node id); a broker loads
   its data logs (recovering from each partition's recovery point after an unclean stop);
2. open the metadata log, as a voter (controller role) or an observer (broker-only); with
   several voters a controller opens its controller listener first, so the quorum can form;
3. replay the log: every committed record goes into the controller and, through the loader,
   into the MetadataImage and its publishers. A single voter waits to lead; any other node
   waits until it has applied up to a leader's high watermark;
4. the node whose Raft leads activates its controller (and deactivates when it stops
   leading); an empty log gets the bootstrap records (metadata.version);
5. a broker registers with the active controller (in-process or over the network) and
   heartbeats until it is unfenced (caught up); only then do the client listeners open, as
   Kafka's broker does.
Stop (SIGTERM / Ctrl-C): listeners close, in-flight requests end, logs are flushed and
checkpointed, and `.kafka_cleanshutdown` marks a clean stop so the next start skips recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import random
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from pykraft.broker.acl_apis import AclApis
from pykraft.broker.admin_apis import AdminApis, UnenforcedQuotaNotice
from pykraft.broker.apis import BrokerApis
from pykraft.broker.authorizer import ALLOW_ALL, Authorizer, StandardAuthorizer
from pykraft.broker.credential_apis import CredentialApis
from pykraft.broker.fetch_sessions import FetchSessionCache
from pykraft.broker.group_apis import GroupApis
from pykraft.broker.group_coordinator.core import GroupConfig, GroupCoordinator
from pykraft.broker.group_coordinator.shell import GroupCoordinatorShell
from pykraft.broker.metadata_cache import MetadataCache
from pykraft.broker.partition_apis import PartitionApis
from pykraft.broker.records_apis import RecordsApis
from pykraft.broker.replica_fetcher import FetcherConfig, ReplicaFetcherManager
from pykraft.broker.replica_manager import (
    ALTER_PARTITION_VERSION,
    IsrUpdate,
    IsrUpdateResult,
    ReplicaManager,
    alter_partition_request,
    alter_partition_results,
)
from pykraft.broker.transaction_apis import TransactionParts
from pykraft.broker.transaction_coordinator.shell import ProducerIdBlocks
from pykraft.controller.config import ControllerConfig
from pykraft.controller.features import (
    BOOTSTRAP_METADATA_VERSION,
    LATEST_METADATA_VERSION,
    SUPPORTED_FEATURES,
)
from pykraft.controller.quorum_controller import QuorumController
from pykraft.controller.requests import BrokerFeatureRange
from pykraft.controller.requests import Listener as ControllerListener
from pykraft.errors import InvariantViolation, NotController
from pykraft.metadata.codec import decode_metadata_record
from pykraft.metadata.image import MetadataImage
from pykraft.metadata.loader import MetadataLoader
from pykraft.metadata.records import MetadataRecord
from pykraft.metadata.registrations import ScramCredential, ScramKey
from pykraft.net.connect import ClientSecurity, ClientSecurityError, open_connection
from pykraft.net.sasl import ListenerSasl, fetch_jwks
from pykraft.net.server import Listener, NetworkLimits
from pykraft.net.tls import PrincipalMapper, SslConfigError, principal_mapper, server_context
from pykraft.raft.core import CommittedBatch, RaftConfig
from pykraft.raft.driver import RaftNode
from pykraft.raft.log_store import RaftLogView
from pykraft.raft.messages import SnapshotId
from pykraft.raft.network import RaftApis, RaftChannels
from pykraft.server.config import ServerConfig, authorizer_settings
from pykraft.server.controller_channel import ControllerRefused, QuorumControllerChannel
from pykraft.server.controller_client import ActiveControllerClient, Backoff, ControllerUnavailable
from pykraft.server.controller_server import (
    ControllerServer,
    OutcomeUnknown,
    wall_clock_ms,
)
from pykraft.server.image_digest import DigestCache
from pykraft.server.lifecycle_apis import LifecycleApis
from pykraft.server.metadata_snapshots import (
    MetadataSnapshots,
    SnapshotPolicy,
    controller_from_image,
)
from pykraft.server.metrics import CleanerMetrics, LogMetrics, MetricsServer, NodeMetrics
from pykraft.server.storage_tool import (
    MINIMUM_RELEASE_VERSION,
    StorageToolError,
    check_storage,
    read_bootstrap_metadata_version,
    read_bootstrap_scram_records,
)
from pykraft.storage.cleaner import CleanerConfig, LogCleaner, SwapFailed
from pykraft.storage.log_manager import LogManager
from pykraft.topic_names import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

log = logging.getLogger("pykraft.server")

METADATA_TOPIC = "__cluster_metadata"
SECURITY_PROTOCOL_PLAINTEXT = 0
# Kafka's SecurityProtocol ids, as BrokerRegistration records carry them
_SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
# one request to the active controller over the network; a forwarded change or a broker's
# registration retries across leader changes for up to the channel timeout
CONTROLLER_REQUEST_TIMEOUT_MS = 5_000
CONTROLLER_CHANNEL_TIMEOUT_MS = 15_000
# Kafka's broker waits as long for the controller's approval (not a config there either)
CONTROLLED_SHUTDOWN_TIMEOUT_MS = 300_000
LOGS_PER_TURN = 2_000  # logs that periodic log work visits in one turn of the event loop
ALTER_PARTITION_API_KEY = 56
# registration refusals a retry cannot cure: the broker stops starting
_REGISTRATION_FATAL = frozenset({ErrorCode.inconsistent_cluster_id,
                                 ErrorCode.unsupported_version, ErrorCode.invalid_registration})
# answers that make a broker register again (a new incarnation of its registration)
_REREGISTER = frozenset({ErrorCode.stale_broker_epoch, ErrorCode.broker_id_not_registered})


class NodeStartError(Exception):
    """The node cannot start; the message says why (shown to the user as is)."""


class Node:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.exit_code = 0
        self.incarnation_id = uuid.uuid4()
        self._stopped = asyncio.Event()
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self.listeners: list[Listener] = []
        self._network_limits: dict[bool, NetworkLimits] = {}  # by "is a controller listener"
        self.log_manager: LogManager | None = None
        self.raft: RaftNode | None = None
        self.controller: ControllerServer | None = None
        self.broker_epoch = -1
        self.cluster_id = ""
        self.cleaner: LogCleaner | None = None
        self.metrics: MetricsServer | None = None
        self.channel: QuorumControllerChannel | None = None
        self._controller_clients: list[ActiveControllerClient] = []
        self._alter_client: ActiveControllerClient | None = None  # AlterPartition's own
        self.fetchers: ReplicaFetcherManager | None = None
        self._digests = DigestCache()
        self._registration_error: str | None = None  # the last refusal, for start-up errors
        self.snapshots: MetadataSnapshots | None = None  # once the metadata log is open
        # TLS: each SSL/SASL_SSL listener's server side, and how this node reaches the other
        # nodes' inter-broker and controller listeners (None: plaintext); built as start()
        # begins, so a bad key store stops the node before it opens any log or socket
        self._ssl_contexts: dict[str, tuple[ssl.SSLContext, PrincipalMapper]] = {}
        self._inter_broker_security: ClientSecurity | None = None
        self._controller_security: ClientSecurity | None = None
        # what every request handler asks (authorizer.class.name; none: allow all)
        self.authorizer: Authorizer = ALLOW_ALL

    # -- start ------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            storage = check_storage(self.config)
        except StorageToolError as error:
            raise NodeStartError(str(error)) from error
        self._security_setup()  # (after check_storage: it may adopt the formatted voters)
        self.cluster_id = storage.cluster_id
        self.directory_ids = storage.directory_ids
        now = wall_clock_ms()
        values = self.config.values
        roles = self.config.roles
        self.is_broker, self.is_controller = "broker" in roles, "controller" in roles
        self.cache = MetadataCache(self.node_id, self.cluster_id)
        self.loader = MetadataLoader()
        self.loader.publishers.append(self.cache.publish)
        settings = authorizer_settings(values)
        if settings.class_name:  # follows the image's ACL bindings from the first one
            standard = StandardAuthorizer(settings)
            self.loader.publishers.append(standard.publish)
            self.authorizer = standard
        if self.is_broker:
            self._compose_broker(now)
        voters = self.config.voters
        single_voter = set(voters) == {self.node_id}
        raft_config = None if single_voter else self._raft_config()
        self.raft = RaftNode.open(  # a voter, or an observer (a broker-only node)
            node_id=self.node_id,
            voters=frozenset(voters),
            log_dir=self.config.metadata_log_dir / f"{METADATA_TOPIC}-0",
            listener=self,
            election_timeout_ms=self.config.get_int("controller.quorum.election.timeout.ms"),
            config=raft_config,
            server_configs=values,
            transport=None if raft_config is None else RaftChannels.for_voters(
                self.node_id, self.cluster_id, voters, raft_config,
                open_connection=functools.partial(open_connection,
                                                  security=self._controller_security)),
        )
        self.snapshots = MetadataSnapshots(  # writes and loads metadata snapshots
            self.raft, self.loader, SnapshotPolicy.from_configs(self.config.get_int),
            wall_clock_ms, broker_offset=self._lowest_broker_offset)
        if self.is_controller:
            try:  # the level `storage format` wrote; none in a dir an older pykraft formatted
                formatted = read_bootstrap_metadata_version(self.config.metadata_log_dir)
                scram = read_bootstrap_scram_records(self.config.metadata_log_dir)
            except StorageToolError as error:
                raise NodeStartError(str(error)) from error
            if formatted is not None and not (
                    MINIMUM_RELEASE_VERSION <= formatted <= LATEST_METADATA_VERSION):
                raise NodeStartError(  # a hand-edited file: refuse now, not at bootstrap
                    f"{self.config.metadata_log_dir / 'bootstrap.checkpoint'} holds "
                    f"metadata.version {formatted}, which this node cannot bootstrap at")
            controller_config = dataclasses.replace(ControllerConfig.from_properties(
                values, cluster_id=self.cluster_id, controller_ids=frozenset(voters),
                bootstrap_metadata_version=(BOOTSTRAP_METADATA_VERSION if formatted is None
                                            else formatted)),
                bootstrap_records=scram)
            self.controller = ControllerServer(
                QuorumController(controller_config, random.Random()), self.raft)
        self.channel = self._controller_channel()
        if self.is_controller and not single_voter:  # the other voters must reach this one
            await self._controller_listeners()
        await self.raft.start()
        if single_voter:
            assert self.controller is not None
            await self.raft.wait_leader()  # the whole committed log has been replayed by now
            await self.controller.wait_active()  # the bootstrap records, if the log was new
            await self._controller_listeners()
        else:  # the log replayed up to a leader's high watermark
            # initial.broker.registration.timeout.ms bounds reaching the quorum; once it
            # answers, catching up takes what it takes (Kafka: server.max.startup.time.ms,
            # unlimited by default): a broker restarted 2,000,000 records behind at
            # 1,000,000 partitions needs minutes
            await self._joining(self.raft.wait_answered(), "catch up with the metadata quorum")
            await self.raft.wait_caught_up()
        if self.is_broker:
            await self._joining(self._register_broker(), "register with the active controller")
            await self._until_unfenced()
            await self._broker_listeners()
            self._tasks += [
                asyncio.create_task(self._heartbeat_loop(), name="broker-heartbeat"),
                asyncio.create_task(self._housekeeping_loop(), name="log-housekeeping"),
                asyncio.create_task(self._cleaner_loop(), name="log-cleaner"),
                asyncio.create_task(self.groups.run(), name="group-coordinator"),
                asyncio.create_task(self.transactions.shell.run(),
                                    name="transaction-coordinator"),
                asyncio.create_task(self._producer_id_blocks().run(), name="producer-ids"),
                asyncio.create_task(self.replicas.run_isr_checks(), name="isr-checks"),
            ]
        if self.is_controller:
            self._tasks.append(
                asyncio.create_task(self._controller_tick_loop(), name="controller-tick"))
        self._tasks.append(asyncio.create_task(self.snapshots.run(), name="metadata-snapshots"))
        address = self.config.metrics_listener
        if address is not None:
            self.metrics = MetricsServer(*address, asyncio.get_running_loop(),
                                         self.metrics_snapshot)
            try:
                self.metrics.start()
            except OSError as error:
                raise NodeStartError(f"cannot serve metrics on {address[0]}:{address[1]} "
                                     f"(pykraft.metrics.listener): {error.strerror}") from None
        log.info("pykraft node %d started (cluster %s): %s", self.node_id, self.cluster_id,
                 ", ".join(f"{x.name}://{x.host}:{x.port}" for x in self.listeners))

    async def _joining(self, step: Coroutine[Any, Any, Any], what: str) -> None:
        """A broker's start-up step towards the quorum (reaching it, registering), each
        bounded by initial.broker.registration.timeout.ms of its own, as Kafka's broker
        gives up and exits; what lies between them (catching up with the metadata, then
        waiting to be unfenced) takes what it takes, as Kafka's does (bounded only by
        server.max.startup.time.ms, unlimited by default). One budget for all of it made a
        broker restarted after a kill -9 at 1,000,000 partitions exit: loading a snapshot
        and replaying 1,800,000 records after it left no time to register. A
        controller-only node waits for its quorum however long it takes."""
        if not self.is_broker:
            await step
            return
        timeout_ms = self.config.get_int("initial.broker.registration.timeout.ms")
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await step
        except TimeoutError:
            reason = self._registration_error or (
                "no answer from the controllers at controller.quorum.voters="
                f"{self.config.get('controller.quorum.voters')} -- are they running, and "
                f"formatted with this node's cluster id {self.cluster_id}?")
            raise NodeStartError(
                f"broker {self.node_id} could not {what} within "
                f"initial.broker.registration.timeout.ms={timeout_ms}: {reason}") from None

    def _compose_broker(self, now_ms: int) -> None:
        """The broker's parts: data logs, replicas, group coordinator, metadata publishers."""
        values = self.config.values
        self.log_manager = LogManager(self.config.log_dirs, values)
        started = time.monotonic()
        self.log_manager.load(now_ms)
        log.info("Loaded %d logs in %dms", self.log_manager.log_count,  # Kafka's words
                 (time.monotonic() - started) * 1000)
        self.replicas = ReplicaManager(self.node_id, self.log_manager, values, wall_clock_ms)
        self.fetchers = ReplicaFetcherManager(
            self.node_id, self._broker_address, FetcherConfig.from_configs(values),
            lambda: self.broker_epoch, wall_clock_ms, security=self._inter_broker_security)
        self.replicas.fetchers = self.fetchers
        self.replicas.alter_partition = self._send_alter_partition
        self.loader.publishers.append(self.replicas.apply_delta)
        self.groups = GroupCoordinatorShell(
            GroupCoordinator(GroupConfig.from_properties(values), random.Random()),
            self.node_id, self.replicas, self.cache, wall_clock_ms)
        self.loader.publishers.append(self.groups.on_metadata)
        self.transactions = TransactionParts(
            self.node_id, self.replicas, self.cache, values, self._broker_address,
            wall_clock_ms, security=self._inter_broker_security)
        self.loader.publishers.append(self.transactions.shell.on_metadata)
        self.loader.publishers.append(UnenforcedQuotaNotice(self.node_id).publish)
        self.transactions.writer.listeners.append(  # TxnOffsetCommit offsets at their marker
            lambda partition, marker, _: self.groups.on_marker(partition, marker.producer_id,
                                                                marker.commit))

    def _producer_id_blocks(self) -> ProducerIdBlocks:
        """The task that asks the active controller for blocks of producer ids (KIP-730)."""
        assert self.channel is not None
        return ProducerIdBlocks(self.transactions.producer_id_manager, self.channel,
                                self.node_id, lambda: self.broker_epoch)

    def _broker_address(self, broker_id: int) -> tuple[str, int] | None:
        """A broker's inter-broker listener, from the metadata image (replica fetchers)."""
        broker = self.cache.image.cluster.brokers.get(broker_id)
        endpoint = None if broker is None else broker.listeners.get(
            self.config.inter_broker_listener)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    async def _send_alter_partition(self, updates: list[IsrUpdate]) -> list[IsrUpdateResult]:
        """AlterPartition (KIP-497) to the active controller over its listener, on a
        connection of its own, for a batch of proposals (ReplicaManager._send_proposals); raises
        ControllerUnavailable when there is no answer."""
        assert self.raft is not None
        if self._alter_client is None:
            raft = self.raft
            self._alter_client = ActiveControllerClient(
                self.node_id, self.config.voters, lambda: raft.leader_and_epoch.leader_id,
                request_timeout_ms=CONTROLLER_REQUEST_TIMEOUT_MS,
                client_id=f"broker-{self.node_id}-alter-partition",
                security=self._controller_security)
            self._controller_clients.append(self._alter_client)
        _, answer = await self._alter_client.send(
            ALTER_PARTITION_API_KEY, ALTER_PARTITION_VERSION,
            alter_partition_request(updates, self.node_id, self.broker_epoch))
        if answer.error_code == ErrorCode.not_controller:
            raise ControllerUnavailable("the controller moved", sent=True)
        return alter_partition_results(updates, answer)

    # RaftListener
    def handle_commit(self, batch: CommittedBatch) -> None:
        records = [decode_metadata_record(value) for value in batch.records]
        if records and self.controller is not None:
            self.controller.handle_committed(batch.base_offset, batch.epoch, records)
        folded = self._folded_by_controller(batch, records)
        if folded is not None:
            self.loader.adopt(folded)
        else:
            self.loader.handle_commit(batch.base_offset, batch.epoch, records,
                                      batch.last_offset)
        if self.snapshots is not None:
            self.snapshots.note_commit(batch)

    def _folded_by_controller(self, batch: CommittedBatch,
                              records: list[MetadataRecord]) -> MetadataImage | None:
        """On a controller-only node, the image the controller's core has just folded from
        this batch, if it has (not while a decision holds commits back) and the batch is
        no part of a metadata transaction: the loader adopts it rather than fold every
        record a second time (half of a controller's work at 100,000 partitions)."""
        if self.is_broker or self.controller is None or not records:
            return None
        image = self.controller.core.committed_image
        if image.offset != batch.last_offset or not self.loader.can_adopt(records):
            return None
        return image

    # SnapshotLoader: the latest local snapshot at start-up, or one fetched from the leader
    async def handle_load_snapshot(self, snapshot_id: SnapshotId, snapshot: RaftLogView
                                   ) -> None:
        assert self.snapshots is not None  # created before the Raft node starts
        image = await self.snapshots.load(snapshot_id, snapshot)
        if self.controller is not None:
            self.controller.replace_core(lambda core: controller_from_image(core, image))

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        log.info("metadata quorum leader is now %d at epoch %d", leader_id, epoch)
        if self.controller is not None:
            self.controller.on_leader_change(leader_id, self.node_id)

    def _raft_config(self) -> RaftConfig:
        """The quorum's timers from the controller.quorum.* keys (several voters)."""
        get = self.config.get_int
        return RaftConfig(
            append_linger_ms=get("controller.quorum.append.linger.ms"),
            election_timeout_ms=get("controller.quorum.election.timeout.ms"),
            election_backoff_max_ms=get("controller.quorum.election.backoff.max.ms"),
            fetch_timeout_ms=get("controller.quorum.fetch.timeout.ms"),
            request_timeout_ms=get("controller.quorum.request.timeout.ms"),
            retry_backoff_ms=get("controller.quorum.retry.backoff.ms"))

    def _lowest_broker_offset(self) -> int | None:
        """What the live brokers have applied of the metadata log, as far as this node
        knows: the active controller only (snapshot retention keeps the rest)."""
        return None if self.controller is None else self.controller.core.lowest_broker_offset()

    def _controller_channel(self) -> QuorumControllerChannel:
        """The broker's way to the active controller: in-process while this node's
        controller is active, else over the network to the quorum's leader."""
        assert self.raft is not None
        raft = self.raft
        client, lifecycle = (ActiveControllerClient(
            self.node_id, self.config.voters, lambda: raft.leader_and_epoch.leader_id,
            request_timeout_ms=CONTROLLER_REQUEST_TIMEOUT_MS,
            client_id=f"broker-{self.node_id}-{purpose}", security=self._controller_security)
            for purpose in ("controller-channel", "lifecycle"))
        self._controller_clients = [client, lifecycle]
        return QuorumControllerChannel(
            self.controller, client, timeout_ms=CONTROLLER_CHANNEL_TIMEOUT_MS,
            lifecycle_client=lifecycle,
            leader_followed=lambda: raft.core.hears_leader)

    async def _controller_listeners(self) -> None:
        controller_names = set(self.config.controller_listeners)
        for endpoint in self.config.listeners:
            if endpoint.listener_name in controller_names:
                await self._listen(endpoint.listener_name, endpoint.host, endpoint.port,
                                   self._controller_apis())

    async def _broker_listeners(self) -> None:
        controller_names = set(self.config.controller_listeners)
        assert self.channel is not None
        transactions = self.transactions.apis(self.channel)
        group_apis = self._group_apis()
        group_apis.find_transaction_coordinator = transactions.find_coordinator
        apis = BrokerApis(
            self.node_id, self.cache, self.replicas,
            [self._admin_apis(), RecordsApis(self.cache, self.replicas, self._checkpoint_logs),
             PartitionApis(self.cache, self.replicas, self.config.values),
             group_apis, transactions, CredentialApis(self.cache, self.channel),
             AclApis(self.cache, self.channel)],
            auto_create_topics=functools.partial(self._auto_create_topics, {
                CONSUMER_OFFSETS_TOPIC: group_apis.ensure_offsets_topic,
                TRANSACTION_STATE_TOPIC: transactions.ensure_state_topic,
            }) if self.config.get_bool("auto.create.topics.enable") else None,
            fetch_sessions=FetchSessionCache(
                slots=self.config.get_int("max.incremental.fetch.session.cache.slots"),
                eviction_ms=self.config.get_int("min.incremental.fetch.session.eviction.ms")),
        )
        apis.verify_transactional = transactions.verify_produce
        apis.authorizer = self.authorizer  # and every API group's
        for endpoint in self.config.listeners:
            if endpoint.listener_name not in controller_names:
                await self._listen(endpoint.listener_name, endpoint.host, endpoint.port, apis)

    async def _checkpoint_logs(self) -> None:
        """Write every log dir's offset checkpoints: the offsets are taken a slice of logs
        per turn of the loop, and the files written in a worker thread."""
        manager = self.log_manager
        assert manager is not None
        taken = manager.take_checkpoints(())  # a new taking, filled slice by slice
        await self._each_log_slice(functools.partial(manager.take_checkpoints, into=taken))
        await asyncio.to_thread(manager.write_checkpoints, taken)

    def _group_apis(self) -> GroupApis:
        assert self.channel is not None
        return GroupApis(self.node_id, self.cache, self.groups, self.channel,
                         self.config.values)

    def _admin_apis(self) -> AdminApis:
        """The broker listener's: changes go to the active controller, wherever it is."""
        assert self.channel is not None
        return AdminApis(self.node_id, self.cache, self.channel, self.config.values, self,
                         self._forward_describe_quorum)

    async def _forward_describe_quorum(self, api_version: int, request: Any) -> Any | None:
        """DescribeQuorum on the broker listener of a node that does not lead: the active
        controller's answer (None when there is none to ask or it does not answer)."""
        from pykraft.protocol.api import ApiKey
        from pykraft.server.controller_client import ControllerUnavailable

        for client in self._controller_clients:
            try:
                _, answer = await client.send(ApiKey.DESCRIBE_QUORUM, api_version, request)
            except ControllerUnavailable:
                return None
            return answer
        return None

    def _controller_apis(self) -> Any:
        """The controller listener's: changes are decided here or answered NOT_CONTROLLER
        (a forwarded request is never forwarded again); plus the quorum's RPCs and the
        brokers' registrations and heartbeats."""
        from pykraft.server.controller_apis import ControllerApis

        assert self.controller is not None and self.raft is not None
        local = QuorumControllerChannel(self.controller, None, timeout_ms=0)
        admin = AdminApis(self.node_id, self.cache, local, self.config.values, self,
                          clients_listener=False)
        apis = ControllerApis(admin, [RaftApis(self.raft, self.cluster_id),
                                      LifecycleApis(self.controller),
                                      CredentialApis(self.cache, local),
                                      AclApis(self.cache, local)])
        apis.authorizer = self.authorizer  # and its self-authorizing groups', brokers trusted
        return apis

    async def _listen(self, name: str, host: str, port: int, dispatcher: Any) -> None:
        listener = Listener(
            name, host, port, dispatcher,
            request_bytes_max=self.config.get_int("socket.request.max.bytes"),
            on_fatal=self._fatal, limits=self._limits_of(name),
            security_protocol=self.config.security_protocols.get(name, "PLAINTEXT"),
            sasl=await self._listener_sasl(name),
            **self._listener_tls(name),
        )
        try:
            await listener.start()
        except OSError as error:
            raise NodeStartError(f"cannot listen on {name}://{host}:{port}: "
                                 f"{error.strerror}") from error
        self.listeners.append(listener)

    def _security_setup(self) -> None:
        """The TLS contexts of this node's SSL and SASL_SSL listeners and the security of its
        own connections to other nodes, from the ssl.* (and SASL) keys; a setting that cannot
        be used stops the node here, naming the key."""
        protocols = self.config.security_protocols
        try:
            for endpoint in self.config.listeners:
                name = endpoint.listener_name
                if protocols.get(name) in ("SSL", "SASL_SSL"):
                    context = server_context(self.config.get, name,
                                             sasl=protocols[name] == "SASL_SSL")
                    self._ssl_contexts[name] = (context,
                                                principal_mapper(self.config.get, name))
            roles = self.config.roles
            if "broker" in roles:
                self._inter_broker_security = ClientSecurity.for_listener(
                    self.config.get, protocols, self.config.inter_broker_listener,
                    "inter.broker")
            controllers = self.config.controller_listeners
            if controllers and (len(self.config.voters) > 1 or roles == {"broker"}):
                self._controller_security = ClientSecurity.for_listener(
                    self.config.get, protocols, controllers[0], "controller")
        except (SslConfigError, ClientSecurityError) as error:
            raise NodeStartError(str(error)) from None

    def _listener_tls(self, name: str) -> dict[str, Any]:
        """The TLS arguments of listener `name` (none for a plaintext one)."""
        if name not in self._ssl_contexts:
            return {}
        context, mapper = self._ssl_contexts[name]
        return {"ssl_context": context, "principal_mapper": mapper}

    async def _listener_sasl(self, name: str) -> ListenerSasl | None:
        """A SASL listener's mechanisms and users (checked when the config was loaded); its
        SCRAM credentials are read from the current metadata image at each authentication,
        so a credential added or removed counts from the next login on. With OAUTHBEARER's
        JWKS validator, the key set is loaded now (the node does not start without it) and
        refreshed every sasl.oauthbearer.jwks.endpoint.refresh.ms."""
        if self.config.security_protocols.get(name) not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return None
        try:
            sasl = ListenerSasl.from_config(self.config.get, name)
        except ValueError as error:
            raise NodeStartError(str(error)) from None
        sasl.scram_lookup = self._scram_credential
        if sasl.jwks is not None:
            try:
                sasl.jwks_keys = await asyncio.to_thread(fetch_jwks, sasl.jwks.url)
            except (OSError, ValueError) as error:
                raise NodeStartError(f"listener {name}: cannot load the JWKS at "
                                     f"{sasl.jwks.url}: {error}") from None
            self._tasks.append(asyncio.create_task(self._refresh_jwks(name, sasl),
                                                   name=f"jwks-{name}"))
        return sasl

    async def _refresh_jwks(self, name: str, sasl: ListenerSasl) -> None:
        """A key set that cannot be read keeps the last one (and says so), as Kafka does."""
        assert sasl.jwks is not None
        while True:
            await asyncio.sleep(max(1000, sasl.jwks.refresh_ms) / 1000)
            try:
                sasl.jwks_keys = await asyncio.to_thread(fetch_jwks, sasl.jwks.url)
            except (OSError, ValueError) as error:
                log.warning("listener %s: cannot refresh the JWKS at %s, keeping the last "
                            "one: %s", name, sasl.jwks.url, error)

    def _scram_credential(self, mechanism: int, user: str) -> ScramCredential | None:
        return self.cache.image.scram.credentials.get(ScramKey(mechanism, user))

    def _limits_of(self, name: str) -> NetworkLimits:
        """One request memory pool and one set of connection quotas for the controller
        listeners, another for the broker listeners, as Kafka's ControllerServer and
        BrokerServer each run a SocketServer: clients cannot starve the quorum."""
        controllers = set(self.config.controller_listeners)
        side = name in controllers
        if side not in self._network_limits:
            names = [e.listener_name for e in self.config.listeners
                     if (e.listener_name in controllers) == side]
            try:
                self._network_limits[side] = NetworkLimits.from_config(
                    self.config.get, names, None if side else self.config.inter_broker_listener)
            except ValueError as error:
                raise NodeStartError(str(error)) from None
        return self._network_limits[side]

    async def _auto_create_topics(
        self, internal: Mapping[str, Callable[[str], Awaitable[None]]], names: list[str],
        listener: str,
    ) -> None:
        """Metadata's auto-creation: an internal topic is made by its coordinator's own
        path, with its settings (Kafka's AutoTopicCreationManager), the rest with the
        cluster defaults."""
        assert self.channel is not None
        for name in names:
            if name in internal:
                await internal[name](listener)
        ordinary = [name for name in names if name not in internal]
        if ordinary:
            await self.channel.auto_create_topics(ordinary)

    # -- broker lifecycle (KIP-631), in-process for the combined node ----------------------

    def _advertised(self) -> list[ControllerListener]:
        protocols = self.config.security_protocols
        return [ControllerListener(e.listener_name, e.host, e.port,
                                   _SECURITY_PROTOCOL_IDS.get(protocols.get(e.listener_name, ""),
                                                              SECURITY_PROTOCOL_PLAINTEXT))
                for e in self.config.advertised_listeners]

    async def _register_broker(self) -> None:
        """Register with the active controller (in-process or over the network, retried
        until one answers)."""
        assert self.channel is not None
        features = [BrokerFeatureRange(name, low, high)
                    for name, (low, high) in SUPPORTED_FEATURES.items()]
        backoff = Backoff(initial_ms=50, max_ms=1000)
        while True:
            try:
                result = await self.channel.register_broker(
                    self.node_id, self.incarnation_id, self._advertised(), features,
                    self.config.get("broker.rack"), log_dirs=self.directory_ids,
                    cluster_id=self.cluster_id)
            except ControllerRefused as refused:
                if refused.code in _REGISTRATION_FATAL:
                    raise NodeStartError(f"the controller refused the registration of broker "
                                         f"{self.node_id}: {refused.code.name.upper()}: "
                                         f"{refused}") from None
                code = refused.code.name.upper()  # Kafka's spelling of error names
                self._registration_error = f"the controller answers {code}" + (
                    f" ({refused})" if str(refused).upper() != code else "")
                if refused.code == ErrorCode.duplicate_broker_registration:
                    self._registration_error += (f": another broker is registered with node.id "
                                                 f"{self.node_id}")
                log.warning("broker registration refused: %s (%s); retrying", refused,
                            refused.code.name)
                await backoff.wait()
                continue
            break
        self.broker_epoch = result.broker_epoch
        log.info("broker %d registered with epoch %d", self.node_id, self.broker_epoch)

    async def _until_unfenced(self) -> None:
        """Heartbeat until the controller unfences this broker (caught up with the
        metadata)."""
        while True:
            heartbeat = await self._heartbeat()
            if heartbeat is not None and not heartbeat.is_fenced:
                return
            await asyncio.sleep(0.01 if heartbeat is not None else 0.1)

    async def _heartbeat(self) -> Any:
        """One heartbeat; None when refused (then the broker registers again if its epoch
        is no longer known)."""
        assert self.channel is not None
        try:
            return await self.channel.broker_heartbeat(
                self.node_id, self.broker_epoch, self.loader.last_offset,
                want_fence=False, want_shutdown=False)
        except ControllerRefused as refused:
            log.warning("broker heartbeat refused: %s", refused.code.name)
            if refused.code in _REREGISTER:
                await self._register_broker()
            return None

    async def _heartbeat_loop(self) -> None:
        interval_s = self.config.get_int("broker.heartbeat.interval.ms") / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self._heartbeat()
            except InvariantViolation as error:
                self._fatal(error)
            except Exception:
                log.exception("broker heartbeat failed")

    async def _controlled_shutdown(self) -> None:
        """A registered broker of a cluster asks the active controller to move its
        leaderships away (heartbeats with want-shutdown) and stops once told to, or after
        CONTROLLED_SHUTDOWN_TIMEOUT_MS, or when no controller answers within the channel
        timeout while the quorum has no leader this node follows (a followed but busy one
        is asked again); clients meanwhile follow the moved leaders. The single node (its
        own only voter) skips it: there is nobody to move to; so does a broker with
        controlled.shutdown.enable=false."""
        if (not getattr(self, "is_broker", False) or self.broker_epoch < 0
                or self.channel is None or set(self.config.voters) == {self.node_id}):
            return
        if not self.config.get_bool("controlled.shutdown.enable"):
            log.info("broker %d: controlled.shutdown.enable=false, stopping without moving "
                     "its leaderships", self.node_id)
            return
        for task in self._tasks:
            if task.get_name() == "broker-heartbeat":
                task.cancel()  # from here on only want-shutdown heartbeats
        self.replicas.begin_controlled_shutdown()
        interval_s = min(0.5, self.config.get_int("broker.heartbeat.interval.ms") / 1000)
        try:
            async with asyncio.timeout(CONTROLLED_SHUTDOWN_TIMEOUT_MS / 1000):
                await self.channel.controlled_shutdown(
                    self.node_id, self.broker_epoch, lambda: self.loader.last_offset,
                    interval_s=interval_s)
            log.info("broker %d: controlled shutdown complete", self.node_id)
        except (TimeoutError, ControllerRefused) as error:
            log.warning("broker %d: controlled shutdown not completed (%s); stopping anyway",
                        self.node_id, error or "timed out")

    async def _controller_tick_loop(self) -> None:
        """Fence brokers whose heartbeats stopped (broker.session.timeout.ms), or whose
        heartbeat connection closed and who did not heartbeat again in time."""
        assert self.controller is not None
        while True:
            if not self.controller.core.is_active:
                await asyncio.sleep(0.1)
                continue
            try:
                wake_at_ms = await self.controller.tick()
            except InvariantViolation as error:
                self._fatal(error)
                return
            except (NotController, OutcomeUnknown):
                continue  # leadership lost; the next active controller ticks
            except Exception:
                log.exception("controller tick failed")
                wake_at_ms = wall_clock_ms() + 1000
            wake = self.controller.tick_wake  # a broker's heartbeat connection closed
            wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(
                        max(0.01, min(1.0, (wake_at_ms - wall_clock_ms()) / 1000))):
                    await wake.wait()

    # -- periodic log work ------------------------------------------------------------

    async def _cleaner_loop(self) -> None:
        """Compaction (storage.cleaner): choose and swap on the loop, which owns the logs;
        the rewrite runs in a worker thread, as it only reads and writes files of its own."""
        manager = self.log_manager
        assert manager is not None
        config = CleanerConfig.from_server_configs(self.config.values)
        if not config.active:
            return
        self.cleaner = cleaner = LogCleaner(config, lambda: [  # compacted ones only: the
            (lg, home) for lg in manager.compacted_logs()  # rest, of 300,000 maybe, are
            if (home := manager.log_dir_of(lg.topic, lg.partition)) is not None])  # skipped
        while True:
            job = None
            try:
                job = cleaner.next_job(wall_clock_ms())
                if job is not None:
                    work = asyncio.get_running_loop().run_in_executor(None, job.run)
                    try:
                        await asyncio.shield(work)
                    except asyncio.CancelledError:
                        job.abort()  # stop the thread before the logs close
                        await asyncio.gather(work, return_exceptions=True)
                        raise
                    cleaner.finish(job, wall_clock_ms())
            except SwapFailed as error:
                log.critical("%s", error)
                self._fatal(error)
                return
            except FileNotFoundError:
                log.info("log cleaning dropped: a segment went away meanwhile")
            except OSError as error:  # a full disk: the output is discarded; tried again later
                if job is not None:
                    manager.storage_errors.report(job.log.dir.parent,
                                                  f"cleaning {job.log.dir.name}", error)
            except InvariantViolation as error:
                self._fatal(error)
                return
            except Exception:
                log.exception("cleaning %s failed; it is skipped until restart",
                              job.log if job is not None else "a log")
                if job is not None:
                    cleaner.uncleanable.add((job.log.topic, job.log.partition))
            await asyncio.sleep(0 if job is not None else config.backoff_ms / 1000)

    async def _each_log_slice(self, work: Callable[[list[tuple[str, int]]], object]) -> None:
        """`work` over every log, LOGS_PER_TURN at a time, letting the loop run between
        slices (one pass over 300,000 logs would hold it for seconds)."""
        assert self.log_manager is not None
        keys = self.log_manager.log_keys()
        for start in range(0, len(keys), LOGS_PER_TURN):
            work(keys[start:start + LOGS_PER_TURN])
            await asyncio.sleep(0)

    async def _housekeeping_loop(self) -> None:
        retention_every_ms = self.config.get_int("log.retention.check.interval.ms")
        checkpoint_every_ms = self.config.get_int("log.flush.offset.checkpoint.interval.ms")
        expire_every_ms = self.config.get_int("producer.id.expiration.check.interval.ms")
        producer_expiration_ms = self.config.get_int("producer.id.expiration.ms")
        next_retention = next_checkpoint = next_expiry = wall_clock_ms()
        assert self.log_manager is not None
        while True:
            now = wall_clock_ms()
            try:
                if now >= next_retention:
                    await self._each_log_slice(
                        functools.partial(self.log_manager.run_retention, now))
                    next_retention = now + retention_every_ms
                self.log_manager.flush_due(now)
                if now >= next_expiry:
                    await self._each_log_slice(functools.partial(
                        self.log_manager.expire_producers, now, producer_expiration_ms))
                    next_expiry = now + expire_every_ms
                if now >= next_checkpoint:
                    await self._checkpoint_logs()
                    next_checkpoint = now + checkpoint_every_ms
            except InvariantViolation as error:
                self._fatal(error)
            except Exception:
                log.exception("log housekeeping failed")
            await asyncio.sleep(min(1.0, retention_every_ms / 1000, expire_every_ms / 1000))

    # -- metrics --------------------------------------------------------------------

    def metrics_snapshot(self) -> NodeMetrics:
        """What /metrics shows, read on the event loop (MetricsServer calls it there)."""
        logs = tuple(
            LogMetrics(lg.topic, lg.partition, lg.log_start_offset, lg.log_end_offset,
                       lg.high_watermark, lg.size_bytes, len(lg.segments))
            for lg in (self.log_manager.logs() if self.log_manager is not None else ()))
        cleaner: tuple[CleanerMetrics, ...] = ()
        if self.cleaner is not None:
            cleaner = tuple(
                CleanerMetrics(topic, partition, plan.dirty_ratio, plan.first_dirty_offset,
                               plan.cleanable_bytes, last_clean_ms,
                               (topic, partition) in self.cleaner.uncleanable)
                for (topic, partition), (plan, last_clean_ms)
                in sorted(self.cleaner.status(wall_clock_ms()).items()))
        if self.raft is None:
            return NodeMetrics(logs, cleaner)
        leader = self.raft.leader_and_epoch
        high_watermark = self.raft.high_watermark
        image = self.loader.image
        return NodeMetrics(logs, cleaner, -1 if high_watermark is None else high_watermark,
                           leader.leader_id, leader.epoch, image.offset,
                           functools.partial(self._digests.digest, image))

    # -- DescribeQuorum ---------------------------------------------------------------

    def describe_quorum(self) -> dict[str, Any]:
        """The quorum as the leader sees it: each replica's last fetch offset and times (its
        Raft state, monotonic times shown as wall-clock). A single voter is caught up with
        itself by definition. `nodes` are the voters' controller endpoints. A node that does
        not lead answers NOT_LEADER_OR_FOLLOWER with the leader it knows, as Kafka's
        KafkaRaftClient does (its broker listener forwards the request instead)."""
        assert self.raft is not None
        leader = self.raft.leader_and_epoch
        if leader.leader_id != self.node_id:
            return {"error_code": ErrorCode.not_leader_or_follower,
                    "leader_id": leader.leader_id, "leader_epoch": leader.epoch}
        high_watermark = self.raft.high_watermark
        end_offset = self.raft.store.log_end_offset
        now = wall_clock_ms()
        to_wall = now - time.monotonic_ns() // 1_000_000  # the Raft core's clock is monotonic
        states = self.raft.core.replica_states if leader.leader_id == self.node_id else {}

        def replica(replica_id: int) -> dict[str, int]:
            if replica_id == self.node_id:
                return {"replica_id": replica_id, "log_end_offset": end_offset,
                        "last_fetch_timestamp": now, "last_caught_up_timestamp": now}
            state = states.get(replica_id)
            if state is None:
                return {"replica_id": replica_id, "log_end_offset": -1,
                        "last_fetch_timestamp": -1, "last_caught_up_timestamp": -1}
            caught_up = state.last_caught_up_ms
            return {"replica_id": replica_id,
                    "log_end_offset": -1 if state.end_offset is None else state.end_offset,
                    "last_fetch_timestamp": state.last_fetch_ms + to_wall,
                    "last_caught_up_timestamp": -1 if caught_up is None else caught_up + to_wall}

        voters = sorted(self.config.voters)
        observers = sorted(set(states) - set(voters))
        controller_name = (self.config.controller_listeners or ["CONTROLLER"])[0]
        nodes = {voter: [(controller_name, host, port)]
                 for voter, (host, port) in sorted(self.config.voters.items())}
        return {"leader_id": leader.leader_id, "leader_epoch": leader.epoch,
                "high_watermark": -1 if high_watermark is None else high_watermark,
                "voters": [replica(v) for v in voters],
                "observers": [replica(o) for o in observers], "nodes": nodes}

    # -- stop -------------------------------------------------------------------------

    def _fatal(self, error: BaseException) -> None:
        log.critical("stopping: broken invariant: %s", error)
        self.exit_code = 70
        asyncio.ensure_future(self.stop())

    async def stop(self) -> None:
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        log.info("pykraft node %d stopping", self.node_id)
        await self._controlled_shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.metrics is not None:
            self.metrics.close()
        for listener in self.listeners:
            await listener.close()
        for client in self._controller_clients:
            await client.close()
        if self.snapshots is not None:
            await self.snapshots.close()  # a snapshot being written completes first
        if self.raft is not None:
            await self.raft.stop()
        if self.fetchers is not None:
            self.transactions.close()
            await self.fetchers.close()
            await self.replicas.close()
        if self.log_manager is not None:
            self.log_manager.close()
        log.info("pykraft node %d stopped", self.node_id)
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

