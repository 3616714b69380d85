"""The quorum controller's decision core (sans-I/O).

Theory of operation. Every controller folds the metadata log into a `ControllerState`
(the `MetadataImage` plus indexes, see `state.py`). The *active* controller (the Raft
leader) also decides: each operation reads the current state and returns an
`OpResult(records, response)` without changing anything. The shell then appends the
records through Raft *and* hands them to `propose`, which replays them at once as
*pending* state, so that the next operation already sees them (Kafka does the same). The
client is answered once Raft commits them. Operations are serial: the shell must
`propose` the records of one operation before deciding the next.

Committed batches reach every controller through `handle_commit`. A standby replays them;
the active controller has already replayed its own and only notes that they are now
committed. Either way a record is replayed exactly once, by offset: `handle_commit` skips
records at or below the last offset already folded in.

If the active controller loses leadership (`deactivate`), its pending (uncommitted) state
is dropped: the state goes back to what was committed, and records the new leader commits
are replayed from there. For that the controller keeps, per proposed batch, the state after
it; committing a batch forgets the states before it.

The one mutator of replicated state is the fold in `_advance` (called by `replay`,
`replay_batch`, `propose`, `handle_commit`); `deactivate` only restores a state it kept.
The broker sessions (last heartbeat, reported metadata offset, controlled-shutdown offset)
are soft state of the active controller, as in Kafka: heartbeats update them when decided,
and a new active controller starts every registered broker with a fresh session.

Broker epochs. Kafka gives a newly registered broker incarnation the log offset of its
registration record as its epoch. Offsets are known only at append time, so the active
controller predicts them: it learns the next write offset when it becomes active (the
Raft log end offset after the leader's epoch-start record) and advances it with each
proposal. `propose` takes the offset Raft actually used; should Raft ever have appended
something else in between, the actual offset is larger than predicted, so epochs stay
unique and increasing, merely no longer equal to the record's offset. The registration
offset used to decide whether a broker has caught up is the actual offset.
"""

from __future__ import annotations

import random
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pykraft.controller import cluster, configs, features, reassignment, replication, topics
from pykraft.controller.cluster import BrokerControlState, BrokerSessions, Registration
from pykraft.controller.config import ControllerConfig
from pykraft.controller.features import (
    METADATA_VERSION_FEATURE,
    FeatureUpdate,
    UpdateFeaturesResult,
    bootstrap_records,
)
from pykraft.controller.placement import UsableBroker
from pykraft.controller.producer_ids import ProducerIdsBlock, allocate_producer_ids
from pykraft.controller.requests import (
    AlterConfigsResource,
    AlterConfigsResult,
    AlterPartitionTopic,
    AlterPartitionTopicResult,
    BrokerFeatureRange,
    BrokerHeartbeatResult,
    BrokerRegistrationResult,
    CreatableTopic,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    ElectionType,
    LegacyAlterConfigsResource,
    Listener,
    OngoingTopicReassignments,
    OpResult,
    ReassignableTopic,
    ReassignmentTopicResult,
    RebalancePass,
    TickResult,
    TopicElectionResult,
)
from pykraft.controller.state import ControllerState, StateBuilder, fold
from pykraft.errors import BrokerIdNotRegistered, NotController, invariant
from pykraft.metadata.image import MetadataImage
from pykraft.metadata.records import MetadataRecord

__all__ = ["Plan", "QuorumController", "bootstrap_records"]

# A broker whose heartbeat connection closed gets broker.heartbeat.interval.ms and this much
# more to heartbeat again before it is fenced (see BrokerSessions.connection_lost).
CONNECTION_GRACE_EXTRA_MS = 1000
# Leader rebalancing moves at most this many leaders a pass, the next pass this much later
# while partitions are left (Kafka's MAX_ELECTIONS_PER_IMBALANCE and its 10 ms reschedule).
MAX_ELECTIONS_PER_IMBALANCE = 1000
NEXT_BALANCE_PASS_MS = 10


@dataclass(frozen=True, slots=True)
class Plan:
    """`QuorumController.plan`'s answer: the states after each batch, folded from `start`."""

    start: ControllerState
    after: tuple[ControllerState, ...]

    def holds_for(self, controller: QuorumController) -> bool:
        """Whether the controller is still where the plan started from."""
        return controller.state is self.start


class QuorumController:
    def __init__(
        self,
        config: ControllerConfig,
        rng: random.Random,
        *,
        state: ControllerState | None = None,
    ) -> None:
        self.config = config
        self.rng = rng
        self._state = (
            state if state is not None else ControllerState.from_image(MetadataImage.EMPTY)
        )
        self._committed = self._state
        self._pending: deque[tuple[int, ControllerState]] = deque()  # (last offset, state)
        self._sessions = BrokerSessions(
            config.broker_session_timeout_ms,
            connection_grace_ms=config.broker_heartbeat_interval_ms + CONNECTION_GRACE_EXTRA_MS)
        self._active = False
        self._leader_epoch = -1
        self._next_write_offset = -1
        self._next_balance_ms = -1
        self._balance_queue: deque[tuple[uuid.UUID, int]] = deque()  # rebalancing's to-do
        self._balance_elected = 0  # preferred elections since the check that filled it
        self._next_unclean_ms = -1

    # -- reading ----------------------------------------------------------------------

    @property
    def state(self) -> ControllerState:
        """The latest state, pending (proposed, uncommitted) records included."""
        return self._state

    @property
    def image(self) -> MetadataImage:
        return self._state.image

    def lowest_broker_offset(self) -> int | None:
        """The lowest metadata offset the unfenced brokers not shutting down reported in
        their last heartbeats, while this controller is active; None otherwise."""
        return self._sessions.lowest_active_offset(self._state) if self._active else None

    @property
    def leader_epoch(self) -> int:
        """The epoch this controller is active in; -1 when standby."""
        return self._leader_epoch

    @property
    def committed_image(self) -> MetadataImage:
        return self._committed.image

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def next_write_offset(self) -> int:
        """Where the next proposed record will go (-1 unless active)."""
        return self._next_write_offset

    # -- leadership -------------------------------------------------------------------

    def activate(self, *, leader_epoch: int, next_write_offset: int, now_ms: int) -> None:
        """This node became the Raft leader and has replayed the log up to
        `next_write_offset` - 1; from now on it decides."""
        invariant(not self._active, "activate() on an active controller")
        invariant(not self._pending, "a standby never has pending records")
        invariant(
            next_write_offset > self._state.image.offset,
            f"next write offset {next_write_offset} is not past the replayed log "
            f"({self._state.image.offset})",
        )
        self._active = True
        self._leader_epoch = leader_epoch
        self._next_write_offset = next_write_offset
        self._next_balance_ms = now_ms + self.config.leader_imbalance_check_interval_ms
        self._next_unclean_ms = now_ms + self.config.unclean_leader_election_interval_ms
        # Every registered broker gets a fresh session - except one with this controller's
        # own node id: a combined node's broker cannot outlive the process that is becoming
        # active now, so its old incarnation is known to be gone and it may re-register at
        # once instead of waiting out broker.session.timeout.ms.
        brokers = self._state.image.cluster.brokers.keys()
        self._sessions.reset((b for b in brokers if b != self.config.node_id), now_ms)

    def deactivate(self) -> None:
        """Leadership lost: drop every uncommitted record and the soft state."""
        self._state = self._committed
        self._pending.clear()
        self._sessions.clear()
        self._active = False
        self._leader_epoch = -1
        self._next_write_offset = -1
        self._next_balance_ms = -1
        self._balance_queue.clear()
        self._next_unclean_ms = -1

    # -- the log ----------------------------------------------------------------------

    def _advance(
        self, records: Sequence[MetadataRecord], base_offset: int, epoch: int
    ) -> ControllerState:
        builder = StateBuilder(self._state)
        for position, record in enumerate(records):
            builder.replay(record, base_offset + position, epoch)
        self._state = builder.build()
        return self._state

    def replay(self, record: MetadataRecord, *, offset: int, epoch: int) -> None:
        """Fold one committed record (a standby, or loading the log before activation)."""
        self.replay_batch((record,), base_offset=offset, epoch=epoch)

    def replay_batch(
        self, records: Sequence[MetadataRecord], *, base_offset: int, epoch: int
    ) -> None:
        """Fold committed records at consecutive offsets from `base_offset`."""
        invariant(not self._active, "the active controller replays through propose()")
        self._advance(records, base_offset, epoch)
        self._committed = self._state

    def plan(self, batches: Sequence[Sequence[MetadataRecord]],
             base_offsets: Sequence[int]) -> Plan:
        """The states after each of `batches`, appended from `base_offsets`. Pure, so that
        the shell may fold a large change off its event loop; `propose` takes them."""
        start = state = self._state
        after = []
        for records, base_offset in zip(batches, base_offsets, strict=True):
            state = fold(state, records, base_offset, self._leader_epoch)
            after.append(state)
        return Plan(start, tuple(after))

    def propose(
        self,
        records: Sequence[MetadataRecord],
        *,
        base_offset: int | None = None,
        planned: ControllerState | None = None,
    ) -> int:
        """The shell appended `records` (one batch) from `base_offset` (default: as
        predicted); replay them as pending state, or take `planned`, `plan`'s state after
        them, which the caller folded from the current state. Returns the batch's last
        offset."""
        invariant(self._active, "propose() on a standby controller")
        if not records:
            return self._next_write_offset - 1
        if base_offset is None:
            base_offset = self._next_write_offset
        invariant(
            base_offset >= self._next_write_offset,
            f"records appended at {base_offset}, before the predicted {self._next_write_offset}",
        )
        if planned is not None:
            invariant(planned.image.offset == base_offset + len(records) - 1,
                      f"a state planned to {planned.image.offset} for records appended at "
                      f"{base_offset}")
            self._state = state = planned
        else:
            state = self._advance(records, base_offset, self._leader_epoch)
        last_offset = base_offset + len(records) - 1
        self._pending.append((last_offset, state))
        self._next_write_offset = last_offset + 1
        return last_offset

    def handle_commit(
        self, records: Sequence[MetadataRecord], *, base_offset: int, epoch: int
    ) -> None:
        """Raft committed a batch. A standby folds it; the active controller folded its own
        records when it proposed them and only moves its committed state forward."""
        if not records:
            return
        last_offset = base_offset + len(records) - 1
        folded = self._state.image.offset
        if last_offset > folded:
            invariant(
                not self._pending,
                f"committed records up to {last_offset} pass the proposed ones (to {folded})",
            )
            skip = max(0, folded + 1 - base_offset)
            self._advance(records[skip:], base_offset + skip, epoch)
            self._committed = self._state
            return
        if last_offset <= self._committed.image.offset:
            return  # known to be committed already
        while self._pending and self._pending[0][0] <= last_offset:
            _, self._committed = self._pending.popleft()
        invariant(
            self._committed.image.offset == last_offset,
            f"commit at {last_offset} does not end a proposed batch",
        )

    # -- helpers for decisions ----------------------------------------------------------

    def _require_active(self) -> None:
        if not self._active:
            raise NotController("This controller is not the active controller.")

    def _is_active_broker(self, broker_id: int) -> bool:
        registration = self._state.image.cluster.brokers.get(broker_id)
        return (
            registration is not None
            and not registration.fenced
            and not registration.in_controlled_shutdown
            and not self._sessions.shutting_down(broker_id)
        )

    def _topic_context(self) -> topics.TopicContext:
        brokers = self._state.image.cluster.brokers
        usable = [
            UsableBroker(id=broker.id, rack=broker.rack, fenced=broker.fenced)
            for _, broker in sorted(brokers.items())
            if not broker.in_controlled_shutdown and not self._sessions.shutting_down(broker.id)
        ]
        return topics.TopicContext(
            state=self._state,
            config=self.config,
            rng=self.rng,
            metadata_version=self._state.image.features.metadata_version,
            usable_brokers=usable,
            is_active=self._is_active_broker,
        )

    # -- operations -----------------------------------------------------------------------

    def bootstrap(self, metadata_version: int | None = None) -> OpResult[int]:
        """The bootstrap records when the log has none yet (metadata.version unset), else
        nothing: the level (the formatted one, `config.bootstrap_metadata_version`, unless
        given), then the rest of bootstrap.checkpoint (`config.bootstrap_records`). The
        response is the metadata.version in force after the records."""
        self._require_active()
        if metadata_version is None:
            metadata_version = self.config.bootstrap_metadata_version
        current = self._state.image.features.metadata_version
        if current != 0:
            return OpResult((), current)
        return OpResult((*bootstrap_records(metadata_version), *self.config.bootstrap_records),
                        metadata_version)

    def create_topics(
        self, topics_to_create: Sequence[CreatableTopic], *, validate_only: bool, now_ms: int
    ) -> OpResult[tuple[CreateTopicResult, ...]]:
        """CreateTopics; raises PolicyViolation when it would write over 10,000 records."""
        self._require_active()
        records, results = topics.create_topics(
            self._topic_context(), topics_to_create, validate_only=validate_only
        )
        return OpResult(tuple(records), results)

    def delete_topics(
        self, names_or_ids: Sequence[str | uuid.UUID]
    ) -> OpResult[tuple[DeleteTopicResult, ...]]:
        """DeleteTopics, each topic named by its name or by its id."""
        self._require_active()
        records, results = topics.delete_topics(self._topic_context(), names_or_ids)
        return OpResult(tuple(records), results)

    def create_partitions(
        self, topics_to_grow: Sequence[CreatePartitionsTopic], *, validate_only: bool
    ) -> OpResult[tuple[CreatePartitionsResult, ...]]:
        self._require_active()
        records, results = topics.create_partitions(
            self._topic_context(), topics_to_grow, validate_only=validate_only
        )
        return OpResult(tuple(records), results)

    def incremental_alter_configs(
        self, resources: Sequence[AlterConfigsResource], *, validate_only: bool
    ) -> OpResult[tuple[AlterConfigsResult, ...]]:
        self._require_active()
        records, results = configs.incremental_alter_configs(self._state, self.config, resources)
        return OpResult(() if validate_only else tuple(records), results)

    def alter_configs(
        self, resources: Sequence[LegacyAlterConfigsResource], *, validate_only: bool
    ) -> OpResult[tuple[AlterConfigsResult, ...]]:
        """Legacy AlterConfigs: each resource's overrides become exactly `configs`."""
        self._require_active()
        records, results = configs.legacy_alter_configs(self._state, self.config, resources)
        return OpResult(() if validate_only else tuple(records), results)

    def register_broker(
        self,
        broker_id: int,
        incarnation_id: uuid.UUID,
        listeners: Sequence[Listener],
        features: Sequence[BrokerFeatureRange],
        rack: str | None,
        now_ms: int,
        *,
        log_dirs: Sequence[uuid.UUID] = (),
        cluster_id: str | None = None,
    ) -> OpResult[BrokerRegistrationResult]:
        """BrokerRegistration; raises the KafkaError the response must carry."""
        self._require_active()
        request = Registration(
            broker_id, incarnation_id, listeners, features, rack, log_dirs, cluster_id
        )
        existing = self._state.image.cluster.brokers.get(broker_id)
        record = cluster.decide_registration(
            self._state,
            self.config,
            self._sessions,
            request,
            new_broker_epoch=self._next_write_offset,
            now_ms=now_ms,
        )
        if existing is None or existing.incarnation_id != incarnation_id:
            self._sessions.remove(broker_id)
        self._sessions.touch(broker_id, now_ms, -1, fenced=record.fenced)
        return OpResult((record,), BrokerRegistrationResult(broker_epoch=record.broker_epoch))

    def unregister_broker(self, broker_id: int) -> OpResult[None]:
        """UnregisterBroker (KIP-631); raises BrokerIdNotRegistered for an unknown id.

        As Kafka's ReplicationControlManager.unregisterBroker, a registered broker is
        unregistered whatever its state: it leaves every ISR (its leaderships move, as when
        it is fenced), then UnregisterBrokerRecord. A broker that is in fact still running
        gets STALE_BROKER_EPOCH at its next heartbeat (and a pykraft broker registers
        again, as a new incarnation)."""
        self._require_active()
        if broker_id not in self._state.image.cluster.brokers:
            raise BrokerIdNotRegistered(f"Broker ID {broker_id} is not currently registered")
        records = cluster.unregister_records(self._state, self.config, broker_id)
        self._sessions.remove(broker_id)
        return OpResult(tuple(records), None, atomic=False)

    def broker_connection_lost(self, broker_id: int, now_ms: int) -> None:
        """The connection broker `broker_id` heartbeats on closed: unless it heartbeats
        again within the grace, its session ends then (not replicated; nothing to write)."""
        if self.is_active:
            self._sessions.connection_lost(broker_id, now_ms)

    def broker_heartbeat(
        self,
        broker_id: int,
        broker_epoch: int,
        current_metadata_offset: int,
        want_fence: bool,
        want_shutdown: bool,
        now_ms: int,
    ) -> OpResult[BrokerHeartbeatResult]:
        """BrokerHeartbeat; raises StaleBrokerEpoch for an unknown broker or old epoch."""
        self._require_active()
        state, sessions = self._state, self._sessions
        cluster.check_broker_epoch(state, broker_id, broker_epoch)
        registration = state.image.cluster.brokers[broker_id]
        caught_up = current_metadata_offset >= state.registration_offsets[broker_id]
        current = cluster.current_broker_state(registration, sessions)

        def shutdown_complete() -> bool:
            lowest = sessions.lowest_active_offset(state)
            return lowest is None or sessions.controlled_shutdown_offset(broker_id) <= lowest

        following = cluster.next_broker_state(
            current,
            want_fence=want_fence,
            want_shut_down=want_shutdown,
            caught_up=caught_up,
            has_leaderships=lambda: state.has_leaderships(broker_id),
            shutdown_complete=shutdown_complete,
        )
        records = self._transition_records(registration.fenced, current, following, broker_id)
        sessions.touch(broker_id, now_ms, current_metadata_offset, fenced=following.fenced)
        if following is BrokerControlState.CONTROLLED_SHUTDOWN:
            sessions.begin_controlled_shutdown(
                broker_id, self._next_write_offset + len(records) - 1
            )
        return OpResult(
            tuple(records),
            BrokerHeartbeatResult(
                is_caught_up=caught_up,
                is_fenced=following.fenced,
                should_shut_down=following is BrokerControlState.SHUTDOWN_NOW,
            ),
            atomic=False,
        )

    def _transition_records(
        self,
        fenced: bool,
        current: BrokerControlState,
        following: BrokerControlState,
        broker_id: int,
    ) -> list[MetadataRecord]:
        if following is current:
            return []
        if following.fenced:
            return [] if fenced else cluster.fence_records(self._state, self.config, broker_id)
        if following is BrokerControlState.UNFENCED:
            return cluster.unfence_records(self._state, self.config, broker_id)
        return cluster.controlled_shutdown_records(self._state, self.config, broker_id)

    def tick(self, now_ms: int, heartbeats: Iterable[tuple[int, tuple[int, int]]] = ()
             ) -> OpResult[TickResult]:
        """Fence every broker whose session expired; say when to tick again. `heartbeats`:
        broker id -> (broker epoch, arrival ms) of the last heartbeat that arrived, which may
        still wait its turn behind a long operation: it counts as contact if its epoch is
        the broker's current one."""
        self._require_active()
        brokers = self._state.image.cluster.brokers
        self._sessions.ensure(brokers.keys(), now_ms)
        for broker_id, (broker_epoch, at_ms) in heartbeats:
            registration = brokers.get(broker_id)
            if registration is not None and registration.epoch == broker_epoch:
                self._sessions.heard_from(broker_id, at_ms)
        records, fenced = cluster.fence_stale_brokers(
            self._state, self.config, self._sessions, now_ms
        )
        for broker_id in fenced:
            self._sessions.touch(broker_id, now_ms, -1, fenced=True)
        expiries = [
            expiry
            for broker in brokers.values()
            if not broker.fenced and broker.id not in fenced
            for expiry in (self._sessions.expiry_ms(broker.id),)
            if expiry is not None
        ]
        wake_at_ms = min(expiries, default=now_ms + self.config.broker_session_timeout_ms)
        if now_ms >= self._next_unclean_ms:
            self._next_unclean_ms = now_ms + self.config.unclean_leader_election_interval_ms
            records.extend(self._unclean_records(records))
        wake_at_ms = min(wake_at_ms, self._next_unclean_ms)
        rebalance = None
        if self.config.auto_leader_rebalance_enable:
            if self._balance_queue or now_ms >= self._next_balance_ms:
                elections, rebalance = self._balance_records(records, now_ms)
                records.extend(elections)
            wake_at_ms = min(wake_at_ms, now_ms + NEXT_BALANCE_PASS_MS
                             if self._balance_queue else self._next_balance_ms)
        return OpResult(tuple(records), TickResult(tuple(fenced), max(wake_at_ms, now_ms + 1),
                                                   rebalance), atomic=False)

    def _after(self, earlier: Sequence[MetadataRecord]) -> ControllerState:
        state = self._state
        if earlier:
            state = fold(state, earlier, state.image.offset + 1, state.image.epoch)
        return state

    def _active_in(self, state: ControllerState) -> Callable[[int], bool]:
        def is_active(broker_id: int) -> bool:
            registration = state.image.cluster.brokers.get(broker_id)
            return (
                registration is not None
                and not registration.fenced
                and not registration.in_controlled_shutdown
                and not self._sessions.shutting_down(broker_id)
            )

        return is_active

    def _unclean_records(self, earlier: Sequence[MetadataRecord]) -> list[MetadataRecord]:
        """Unclean elections for leaderless partitions that allow them, after `earlier`."""
        state = self._after(earlier)
        if not state.leaderless:
            return []

        def unclean_allowed(topic: str) -> bool:
            value = configs.effective_topic_config(
                state, self.config, topic, "unclean.leader.election.enable"
            )
            return (value or "").strip().lower() == "true"

        return replication.elect_unclean_leaders(state, self._active_in(state), unclean_allowed)

    def _balance_records(
        self, earlier: Sequence[MetadataRecord], now_ms: int
    ) -> tuple[list[MetadataRecord], RebalancePass]:
        """One pass of the leader rebalancing, seeing `earlier` applied: the partitions found
        at the check, up to MAX_ELECTIONS_PER_IMBALANCE of them moved per pass (Kafka's
        bound); once none is left, the next check is an interval away."""
        state = self._after(earlier)
        is_active = self._active_in(state)
        found = 0
        if not self._balance_queue:
            self._balance_queue.extend(replication.imbalanced_partitions(
                state, is_active, self.config.leader_imbalance_per_broker_percentage))
            found = len(self._balance_queue)
            self._balance_elected = 0
        records = replication.preferred_elections(
            state, is_active, self._balance_queue, MAX_ELECTIONS_PER_IMBALANCE)
        self._balance_elected += len(records)
        if not self._balance_queue:
            self._next_balance_ms = now_ms + self.config.leader_imbalance_check_interval_ms
        return records, RebalancePass(found, len(records), self._balance_elected,
                                      len(self._balance_queue))

    # -- producer ids (KIP-730) and features (KIP-584, KIP-778) ----------------------------

    def allocate_producer_ids(
        self, broker_id: int, broker_epoch: int
    ) -> OpResult[ProducerIdsBlock]:
        """AllocateProducerIds: the next block of producer ids for a registered broker;
        raises StaleBrokerEpoch for an unknown broker or another epoch."""
        self._require_active()
        record, block = allocate_producer_ids(self._state, broker_id, broker_epoch)
        return OpResult((record,), block)

    def update_features(
        self, updates: Sequence[FeatureUpdate], *, validate_only: bool
    ) -> OpResult[UpdateFeaturesResult]:
        """UpdateFeatures: finalized feature levels, metadata.version included."""
        self._require_active()
        image = self._state.image
        finalized = dict(image.features.finalized.items())
        finalized[METADATA_VERSION_FEATURE] = image.features.metadata_version
        brokers = [
            (broker.id, {name: (supported.min_version, supported.max_version)
                         for name, supported in broker.supported_features.items()})
            for _, broker in sorted(image.cluster.brokers.items())
        ]
        records, result = features.update_features(
            finalized, brokers, updates, node_id=self.config.node_id,
            validate_only=validate_only)
        return OpResult(records, result)

    # -- replication ----------------------------------------------------------------------

    def alter_partition(
        self, broker_id: int, broker_epoch: int, topics_to_alter: Sequence[AlterPartitionTopic]
    ) -> OpResult[tuple[AlterPartitionTopicResult, ...]]:
        """AlterPartition (KIP-497); raises StaleBrokerEpoch for the whole request."""
        self._require_active()
        cluster.check_broker_epoch(self._state, broker_id, broker_epoch)
        records, results = replication.alter_partition(
            self._state, self._is_active_broker, broker_id, topics_to_alter
        )
        return OpResult(tuple(records), results, atomic=False)

    def elect_leaders(
        self, election_type: ElectionType, partitions: Mapping[str, Sequence[int]] | None
    ) -> OpResult[tuple[TopicElectionResult, ...]]:
        """ElectLeaders (KIP-460); `partitions` None means every partition."""
        self._require_active()
        records, results = replication.elect_leaders(
            self._state, self._is_active_broker, election_type, partitions
        )
        return OpResult(tuple(records), results, atomic=False)

    # -- reassignment (KIP-455) -----------------------------------------------------------

    def alter_partition_reassignments(
        self,
        topics_to_move: Sequence[ReassignableTopic],
        *,
        allow_replication_factor_change: bool = True,
    ) -> OpResult[tuple[ReassignmentTopicResult, ...]]:
        self._require_active()
        state = self._state

        def unclean_allowed(topic: str) -> bool:
            value = configs.effective_topic_config(
                state, self.config, topic, "unclean.leader.election.enable"
            )
            return (value or "").strip().lower() == "true"

        records, results = reassignment.alter_reassignments(
            state,
            self._is_active_broker,
            unclean_allowed,
            topics_to_move,
            allow_replication_factor_change=allow_replication_factor_change,
        )
        return OpResult(tuple(records), results)

    def list_partition_reassignments(
        self, partitions: Mapping[str, Sequence[int]] | None
    ) -> OpResult[tuple[OngoingTopicReassignments, ...]]:
        self._require_active()
        return OpResult((), reassignment.list_reassignments(self._state, partitions))
