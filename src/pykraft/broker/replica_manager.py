"""The broker's partitions: which logs it hosts, which it leads or follows, and the ISR.

The replica manager follows the metadata image: a delta saying "partition P has replicas R,
leader L at epoch E" makes this broker create P's log if it is in R and become its leader or
a follower.

Leader. Produce appends through the leader's log. Followers fetch from it (Fetch with their
replica id): a follower's fetch offset is its log end offset, which the leader records with
the time it was last caught up (Kafka's rule: a fetch at or past the leader's log end makes
it caught up now; a fetch at or past the leader's log end of the previous fetch makes it
caught up as of that previous fetch). The high watermark is the smallest log end offset over
the ISR (the maximal ISR while an AlterPartition is in flight: the old members during a
shrink, the old ones and the new one during an expansion); it only moves forward. A fetch
whose last fetched epoch the leader's epoch cache does not continue gets DivergingEpoch
(KIP-320) and no records. A new leader records its epoch as starting at its log end before it
writes anything, so followers of the old epoch are told where that epoch ended here.

ISR (KIP-497). The leader asks the controller to add a follower that has reached the high
watermark and the start of the current epoch, and (every replica.lag.time.max.ms / 2) to
drop followers not caught up for replica.lag.time.max.ms. One AlterPartition per partition
is in flight at a time; its answer (or the metadata record the controller commits, whichever
comes first) becomes the partition's state.

Follower. A replica fetcher per leader broker (broker.replica_fetcher) fetches from its log
end and appends the leader's batches as they are, learning the high watermark and log start.

Purgatories. Each partition keeps the futures of requests parked on it: a fetch that found
less than it asked for, a produce with acks=all waiting for the high watermark. An append,
a high watermark move or a leadership change completes them all; each then looks again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import heapq
import itertools
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import immutables
from kio.schema.errors import ErrorCode

from pykraft.broker.partition_events import PartitionEvents
from pykraft.controller.configs import effective_server_configs
from pykraft.errors import (
    FencedLeaderEpoch,
    InvalidConfig,
    InvalidRequiredAcks,
    KafkaError,
    KafkaStorageError,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    OutOfOrderSequenceNumber,
    RequestTimedOut,
    UnknownLeaderEpoch,
    UnknownTopicOrPartition,
)
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.registrations import ConfigResourceType, PartitionRegistration
from pykraft.protocol.alter_partition import by_topic, encode_alter_partition_v3
from pykraft.protocol.framing import EncodedBody
from pykraft.records.batch import split_batches
from pykraft.records.validate import (
    DECOMPRESSED_BATCH_BYTES_MAX,
    DECOMPRESSED_BATCH_BYTES_MAX_KEY,
)
from pykraft.storage.log import AppendInfo, Log, ReadInfo
from pykraft.storage.log_config import LogConfig
from pykraft.storage.log_manager import LogManager
from pykraft.topic_names import METADATA_TOPIC

log = logging.getLogger(__name__)

NO_LEADER = -1
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000
MAX_ALTER_PARTITION_BACKOFF_MS = 5_000
NEW_LOGS_ON_LOOP = 64  # more new replicas than this in one delta: created on a thread
NEW_LOGS_PER_TURN = 200  # new replicas made on the thread, then installed on the loop, at a time
ISR_CHECKS_PER_TURN = 5_000  # partitions the periodic ISR check looks at per loop turn
LOG_CREATION_RETRY_MS = 5_000  # a log that could not be created (a full disk) is tried again
REFUSED_PROPOSAL_QUIET_MS = 500
# after a refusal for a stale state (INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH): no new
# proposal until the metadata brings the partition's newer state
UNTIL_THE_METADATA_MOVES = 1 << 62
_STALE_STATE_ERRORS = frozenset({int(ErrorCode.invalid_update_version),
                                 int(ErrorCode.fenced_leader_epoch)})
# KIP-392's replica.selector.class: unset, the leader serves every consumer fetch; the one
# selector Kafka ships sends a consumer to an in-sync replica in its rack (client.rack)
REPLICA_SELECTOR_KEY: Final = "replica.selector.class"
UNSAFE_LEADER_HIGH_WATERMARK_KEY: Final = "pykraft.testing.unsafe.leader.high.watermark"
RACK_AWARE_REPLICA_SELECTOR: Final = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def rack_aware_selector(value: str | None) -> bool:
    """Whether `replica.selector.class` names the rack-aware selector (False when unset);
    any other class is refused, as Kafka refuses a class it cannot load."""
    if value is None or not value.strip():
        return False
    if value.strip() == RACK_AWARE_REPLICA_SELECTOR:
        return True
    raise InvalidConfig(f"Invalid value {value} for configuration {REPLICA_SELECTOR_KEY}: "
                        f"the one replica selector supported is {RACK_AWARE_REPLICA_SELECTOR}")


@dataclass(slots=True, eq=False)
class PendingReplica:
    """A replica whose log is being created off the event loop. Noted in
    ReplicaManager.changes when its registration changes and when it stops being pending,
    for the fetch sessions that hold a follower's fetch of it parked (apis.BrokerApis)."""

    topic_id: uuid.UUID
    registration: PartitionRegistration


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower, from its fetches."""

    log_end_offset: int = -1  # its last fetch offset; -1 until it fetches this epoch
    log_start_offset: int = -1  # as its last fetch told (Fetch v5+)
    last_fetch_ms: int = -1
    last_fetch_leader_end: int = -1  # the leader's log end at that fetch
    last_caught_up_ms: int = 0


@dataclass(frozen=True, slots=True)
class IsrUpdate:
    """One AlterPartition item: the leader's proposal for a partition's ISR."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    broker_epochs: tuple[int, ...]  # of each new ISR member, -1 when unknown


@dataclass(frozen=True, slots=True)
class IsrUpdateResult:
    """The controller's answer for one partition (error_code 0: the committed state)."""

    error_code: int
    leader_id: int = NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1


# sends one AlterPartition for a batch of proposals: a result per update, in order, or raises
AlterPartitionSender = Callable[[list[IsrUpdate]], Awaitable[list[IsrUpdateResult]]]
ALTER_PARTITION_VERSION = 3  # topic ids, ISR members with their broker epochs (KIP-903)


def alter_partition_request(updates: Sequence[IsrUpdate], broker_id: int,
                            broker_epoch: int) -> EncodedBody:
    """The AlterPartition (API 56) v3 request a leader sends for its proposals (one item
    per partition, grouped by topic), encoded (protocol.alter_partition)."""
    return EncodedBody(encode_alter_partition_v3(broker_id, broker_epoch, by_topic(
        (update.topic_id, (update.partition, update.leader_epoch,
                           tuple(zip(update.new_isr, update.broker_epochs, strict=True)),
                           update.partition_epoch))
        for update in updates)), flexible_header=True)


def alter_partition_results(updates: Sequence[IsrUpdate],
                            response: Any) -> list[IsrUpdateResult]:
    """The answer for each update's partition, in order; a top-level error stands for
    every partition (NOT_CONTROLLER among them: the caller's retry finds the new
    controller)."""
    if response.error_code != 0:
        return [IsrUpdateResult(int(response.error_code))] * len(updates)
    answers = {(topic.topic_id, answer.partition_index): answer
               for topic in response.topics for answer in topic.partitions}
    results = []
    for update in updates:
        answer = answers.get((update.topic_id, update.partition))
        results.append(IsrUpdateResult(int(ErrorCode.unknown_topic_or_partition))
                       if answer is None else
                       IsrUpdateResult(int(answer.error_code), int(answer.leader_id),
                                       int(answer.leader_epoch),
                                       tuple(int(r) for r in answer.isr),
                                       int(answer.partition_epoch)))
    return results


# The most ISR proposals in one AlterPartition (ReplicaManager._send_proposals): Kafka sends
# every pending one, bounded here by Kafka's bound on the records of one controller
# operation. The controller decides it on a worker thread and appends the changes 1,000
# records a batch (server.controller_server), so no node applies more than that in one
# turn. (1,000 a request made 150 round trips per leader for a broker restarted among
# 300,000 partitions; 10,000 did not make its 5-minute rejoin shorter: the proposals come
# as fast as its fetches catch up, 40,000 a minute per leader at best.)
ALTER_PARTITION_ITEMS_MAX: Final = 10_000
# ISR results applied per turn of the event loop when an AlterPartition is answered
ISR_RESULTS_PER_TURN: Final = 1_000


class PartitionChanges:
    """The partitions whose state changed (each `wake_waiters`: an append, a high watermark
    or log start move, an ISR or leadership change, a removal), in order, the last `keep`
    of them. A fetch session asks for those since its last look (`since`), so that an
    incremental fetch of 33,000 idle partitions looks again only at the few that changed
    instead of at each of them (py-spy: 53% of a broker's time at 100,000 partitions)."""

    def __init__(self, keep: int = 65_536) -> None:
        self.count = 0  # of changes noted since the start
        self._recent: collections.deque[Partition | PendingReplica] = collections.deque(
            maxlen=keep)
        self._waiters: list[asyncio.Future[None]] = []  # woken by the next change

    def note(self, partition: Partition | PendingReplica) -> None:
        self.count += 1
        self._recent.append(partition)
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def wait_after(self, count: int, timeout_s: float) -> bool:
        """Wait until a change after the first `count` is noted (True, at once if one
        was) or `timeout_s` passed (False). A fetch session parks here rather than on
        each of its partitions: 100,000 of them, registered and removed on every request,
        cost more than the few looks again that a change elsewhere causes."""
        if self.count > count:
            return True
        future = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            return await _woken(future, timeout_s)
        finally:
            with contextlib.suppress(ValueError):  # woken: note swapped the list out
                self._waiters.remove(future)

    def since(self, count: int, limit: int) -> set[Partition | PendingReplica] | None:
        """The partitions changed after the first `count` changes; None when more than
        `limit` changes came since, or some are no longer kept (look at everything)."""
        new = self.count - count
        if count < 0 or new > limit or new > len(self._recent):
            return None
        return set(itertools.islice(reversed(self._recent), new))


class FetcherControl(Protocol):
    """The replica fetchers, as the replica manager drives them (broker.replica_fetcher)."""

    def follow(self, partition: Partition) -> None: ...

    def unfollow(self, partition: Partition) -> None: ...


@dataclass(slots=True, eq=False)
class Partition:
    topic: str
    topic_id: uuid.UUID
    index: int
    log: Log
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    partition_epoch: int = -1
    # parked fetches; the shared empty tuple until one parks (an idle replica holds no list)
    waiters: list[asyncio.Future[None]] | tuple[()] = ()
    followers: dict[int, FollowerState] = field(default_factory=dict)
    leader_epoch_start_offset: int = -1  # where this broker's leadership began
    pending_isr: tuple[int, ...] | None = None  # an AlterPartition in flight
    quiet_until_ms: int = 0  # no new proposal before this, after a refusal
    # the produce purgatory (acks=all): (end offset, tie-break, future) in a heap, so a high
    # watermark move releases exactly the requests it completes; all of them are released
    # when the leadership they were made under ends
    hw_waiters: list[tuple[int, int, asyncio.Future[None]]] | tuple[()] = ()
    hw_waiters_leadership: tuple[int, int] = (-1, -1)  # (leader id, leader epoch) of those
    changes: PartitionChanges | None = None  # its replica manager's, told of each change
    # idempotent producers whose last append here failed on storage (ReplicaManager.append)
    # (immutable, replaced on change: one shared empty value for the idle many)
    storage_failed_producers: frozenset[int] = frozenset()
    # the last read of this log (a fetch) failed on storage: its followers' lag is the
    # leader's own, so they are not dropped from the ISR for it (maybe_shrink_isr)
    read_failing: bool = False

    def wake_waiters(self) -> None:
        """Something changed (an append, the high watermark, the leadership): parked
        fetches read again, and produces the high watermark now covers complete."""
        if self.changes is not None:
            self.changes.note(self)
        waiters = self.waiters
        if waiters:
            self.waiters = ()
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        self._release_high_watermark_waiters()

    def park(self, future: asyncio.Future[None]) -> None:
        """`future` is woken at the next change (wake_waiters)."""
        if self.waiters:
            self.waiters.append(future)
        else:
            self.waiters = [future]

    def high_watermark_reached(self, end: int) -> asyncio.Future[None]:
        """A future done once the high watermark is at least `end`, or once the current
        leadership ends (the waiter then finds out which)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.log.high_watermark >= end:
            future.set_result(None)
            return future
        self._release_high_watermark_waiters()  # drops those of an earlier leadership
        if not self.hw_waiters:
            self.hw_waiters = []
        heapq.heappush(self.hw_waiters, (end, next(_WAITER_ORDER), future))
        return future

    def _release_high_watermark_waiters(self) -> None:
        waiters = self.hw_waiters
        leadership = (self.leader_id, self.leader_epoch)
        if leadership != self.hw_waiters_leadership:
            self.hw_waiters, self.hw_waiters_leadership = (), leadership
            for _, _, future in waiters:
                if not future.done():
                    future.set_result(None)
            return
        high_watermark = self.log.high_watermark
        while waiters and waiters[0][0] <= high_watermark:
            future = heapq.heappop(waiters)[2]
            if not future.done():
                future.set_result(None)

    def check_epoch(self, current_leader_epoch: int) -> None:
        """Reject a request whose idea of the leader epoch differs from ours (KIP-320)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpoch(
                f"epoch {current_leader_epoch} is older than the leader's {self.leader_epoch}"
            )
        raise UnknownLeaderEpoch(
            f"epoch {current_leader_epoch} is newer than the leader's {self.leader_epoch}"
        )

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR, widened by a pending expansion (a pending shrink keeps the old one)."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr if r not in self.isr)

    def in_maximal_isr(self, replica_id: int) -> bool:
        """Whether `replica_id` is in the ISR or proposed for it (`maximal_isr`)."""
        return replica_id in self.isr or (self.pending_isr is not None
                                          and replica_id in self.pending_isr)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"


@dataclass(frozen=True, slots=True)
class FollowerFetch:
    """The leader's view of one partition of a follower's fetch."""

    diverging_epoch: int = -1  # with diverging_end_offset: set when the logs diverge
    diverging_end_offset: int = -1

    @property
    def diverged(self) -> bool:
        return self.diverging_epoch != -1 or self.diverging_end_offset != -1


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        server_configs: Mapping[str, str],
        now_ms: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self.server_configs = server_configs
        self.now_ms = now_ms
        self.replica_lag_time_max_ms = int(
            server_configs.get("replica.lag.time.max.ms") or DEFAULT_REPLICA_LAG_TIME_MAX_MS)
        # the most memory one produced batch may decompress to while its records are checked
        self.decompressed_batch_bytes_max = int(
            server_configs.get(DECOMPRESSED_BATCH_BYTES_MAX_KEY)
            or DECOMPRESSED_BATCH_BYTES_MAX)
        self.rack_aware = rack_aware_selector(server_configs.get(REPLICA_SELECTOR_KEY))
        # the fault campaign's injected bug (server/config.py): HW = the leader's log end
        self.unsafe_leader_high_watermark = (
            (server_configs.get(UNSAFE_LEADER_HIGH_WATERMARK_KEY) or "").lower() == "true")
        self.fetchers: FetcherControl | None = None
        self.alter_partition: AlterPartitionSender | None = None
        # (partition, follower) -> when a fetch session of the follower last looked at its
        # partitions while it was at this leader's log end on `partition`, or -1: the
        # Fetch handler's (FetchSessionCache.idle_follower_ms), which does not look at
        # idle partitions to record each of them as caught up
        self.idle_follower_ms: Callable[[Partition, int], int] | None = None
        self.retry_backoff_ms = 100
        self._partitions: dict[tuple[str, int], Partition] = {}
        self.changes = PartitionChanges()
        self._image: MetadataImage | None = None
        self._shutting_down = False  # begin_controlled_shutdown was called
        # ISR proposals not yet sent, in the order made (a newer one for a partition takes
        # the older one's place), and the one task sending them (KIP-497)
        self._proposals: dict[tuple[str, int], tuple[Partition, IsrUpdate]] = {}
        self._proposer: asyncio.Task[None] | None = None
        self._pending: dict[tuple[str, int], PendingReplica] = {}  # logs being created
        # replicas whose log could not be created (a full disk): tried again by
        # retry_unplaced, so that space coming back is enough, not a restart
        self._unplaced: set[tuple[str, int]] = set()
        # told of each partition retry_unplaced made (the coordinators load theirs)
        self.on_created: list[Callable[[Partition], None]] = []
        self._to_create: list[tuple[str, int, uuid.UUID]] = []
        self._creator: asyncio.Task[None] | None = None
        # one log line per loop turn for each kind, however many partitions it names
        self._isr_adds = PartitionEvents(log, "adding a follower to the ISR")
        self._isr_removes = PartitionEvents(
            log, f"removing followers from the ISR (not caught up for "
                 f"{self.replica_lag_time_max_ms} ms)")
        self._isr_changes = PartitionEvents(log, "ISR now")
        self._alter_unanswered = PartitionEvents(log, "AlterPartition not answered; retrying")
        self._alter_refused = PartitionEvents(log, "AlterPartition refused")

    def begin_controlled_shutdown(self) -> None:
        """From here on, a follower replica whose ISR this broker left, or that has no
        leader, is no longer fetched (Kafka's ReplicaManager.beginControlledShutdown): the
        controller takes the broker out of every ISR, and the leaders that take over its
        leaderships need not be asked for each of them meanwhile."""
        self._shutting_down = True

    # -- following the metadata image --------------------------------------------------

    def apply_delta(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Publisher: act on what changed for this broker, never on a diff of whole images.

        A delta that gives this broker more than NEW_LOGS_ON_LOOP replicas without a log (a
        large CreateTopics; not a restart, whose logs were loaded from disk before the first
        delta) has their logs created on a worker thread: a few file operations each,
        milliseconds on a busy disk, would otherwise stall every connection of the broker for
        seconds. Until its log exists such a replica is pending: not served (clients are told
        NOT_LEADER_OR_FOLLOWER and retry), its newest registration kept for when it is made.
        A follower fetching one led here in a fetch session is answered as for the empty
        log it will be, and waits (apis.BrokerApis._log_being_made).
        """
        self._image = image
        changes = delta.local_changes(self.node_id)
        if changes.leaders or changes.followers:
            # as Kafka's applyDelta says it: when a large change reached each broker is
            # what the logs of a cluster are read for (a follower that applies its new
            # leader's change 30 s after that leader leaves its ISRs)
            log.info("metadata at offset %d: %d partition(s) to lead, %d to follow here",
                     image.offset, len(changes.leaders), len(changes.followers))
        for deleted in changes.deletes:
            self._end_pending((deleted.topic, deleted.partition))
            self._remove(deleted.topic, deleted.partition)
        placed = [item for group in (changes.leaders, changes.followers)
                  for item in group.items() if item[0].topic != METADATA_TOPIC]
        if len(placed) < len(changes.leaders) + len(changes.followers):
            # written before the controller refused the name: its partition 0's directory
            # would be the metadata log's, so the topic stays without replicas here
            log.error("ignoring the partitions of topic %s: the name is the metadata log's",
                      METADATA_TOPIC)
        new = {(key.topic, key.partition) for key, _ in placed
               if (key.topic, key.partition) not in self._partitions
               and self.log_manager.get_log(key.topic, key.partition) is None}
        off_loop = sum(1 for topic, _ in new if not topic.startswith("__")) > NEW_LOGS_ON_LOOP
        configs: dict[str, LogConfig] = {}  # once per topic, not per partition
        try:
            for key, registration in placed:
                name = (key.topic, key.partition)
                pending = self._pending.get(name)
                if pending is not None and pending.topic_id == key.topic_id:
                    pending.registration = registration  # applied once the log exists
                    self.changes.note(pending)
                elif name not in self._partitions and (
                        (off_loop and name in new) or name in self._pending
                        or self.log_manager.is_planned(key.topic, key.partition)):
                    self._pending[name] = PendingReplica(key.topic_id, registration)
                    self._to_create.append((key.topic, key.partition, key.topic_id))
                else:
                    config = configs.get(key.topic)
                    if config is None:
                        config = configs[key.topic] = self._log_config(image, key.topic)
                    self._apply_partition(key.topic, key.topic_id, key.partition,
                                          registration, config)
        finally:
            self.log_manager.sync_created_logs()  # one directory fsync for all new logs
        if self._to_create and self._creator is None:
            self._creator = asyncio.get_running_loop().create_task(self._create_pending())
        own = {"", str(self.node_id)}  # the dynamic broker configs this broker runs with
        if any(r.resource_type == ConfigResourceType.BROKER and r.resource_name in own
               for r in delta.changed_configs):
            for partition in self._partitions.values():  # a new topic default (log.*.ms)
                partition.log.update_config(self._log_config(image, partition.topic))
        for resource in delta.changed_configs:
            if resource.resource_type != ConfigResourceType.TOPIC:
                continue
            config = self._log_config(image, resource.resource_name)
            for partition in self._partitions.values():
                if partition.topic == resource.resource_name:
                    partition.log.update_config(config)

    async def _create_pending(self) -> None:
        """Create the logs of pending replicas on a worker thread, a batch at a time, and
        install each (with its newest registration) back on the event loop."""
        try:
            while self._to_create:
                # a slice at a time: installing a replica (become leader or follower) runs on
                # the event loop, and 10,000 in one go held it for seconds (heartbeats late)
                batch = self._to_create[:NEW_LOGS_PER_TURN]
                del self._to_create[:NEW_LOGS_PER_TURN]
                jobs = []
                for topic, index, topic_id in batch:
                    pending = self._pending.get((topic, index))
                    if pending is None or pending.topic_id != topic_id:
                        continue  # deleted (and maybe made again) before its turn
                    assert self._image is not None
                    jobs.append((topic, index, topic_id,
                                 self.log_manager.plan_new_log(topic, index),
                                 self._log_config(self._image, topic)))
                results = await asyncio.to_thread(self._open_logs, jobs)
                for (topic, index, topic_id, _, _), result in zip(jobs, results, strict=True):
                    self._install(topic, index, topic_id, result)
                self.log_manager.sync_created_logs()
        finally:
            self._creator = None

    def _open_logs(self, jobs: list[tuple[str, int, uuid.UUID, Path, LogConfig]]
                   ) -> list[Log | OSError | KafkaError]:
        """Worker thread: only file work, nothing the event loop also touches."""
        now = self.now_ms()
        results: list[Log | OSError | KafkaError] = []
        for _, _, topic_id, directory, config in jobs:
            try:
                results.append(LogManager.open_new_log(directory, config, topic_id, now))
            except (OSError, KafkaError) as error:
                results.append(error)
        return results

    def _install(self, topic: str, index: int, topic_id: uuid.UUID,
                 result: Log | OSError | KafkaError) -> None:
        if not isinstance(result, Log):
            self.log_manager.abandon_new_log(topic, index)
            self._end_pending((topic, index))
            self._not_created(topic, index, result)
            return
        self.log_manager.adopt_new_log(result)
        pending = self._pending.get((topic, index))
        if pending is None or pending.topic_id != topic_id:  # deleted while it was made
            self.log_manager.delete_log(topic, index)
            return
        self._end_pending((topic, index))
        assert self._image is not None
        self._apply_partition(topic, topic_id, index, pending.registration,
                              self._log_config(self._image, topic))

    def _end_pending(self, name: tuple[str, int]) -> None:
        """`name` is no longer pending (made, failed, or deleted): the fetch sessions
        holding a follower's fetch of it parked look at it again."""
        ended = self._pending.pop(name, None)
        if ended is not None:
            self.changes.note(ended)

    def _not_created(self, topic: str, index: int, error: OSError | KafkaError) -> None:
        """Not served until a retry creates it; said once, not at every retry."""
        if (topic, index) not in self._unplaced:
            log.error("broker %d cannot create the log of %s-%d, which it does not serve "
                      "until it can (retried every %d ms): %s", self.node_id, topic, index,
                      LOG_CREATION_RETRY_MS, error)
        self._unplaced.add((topic, index))

    def retry_unplaced(self) -> list[Partition]:
        """Create the logs that could not be created, of replicas the image still places
        here; return the partitions now served (their leaders, followers start fetching)."""
        image = self._image
        if not self._unplaced or image is None:
            return []
        created = []
        for topic, index in sorted(self._unplaced):
            topic_image = image.topics.by_name.get(topic)
            registration = None if topic_image is None else topic_image.partitions.get(index)
            if (topic_image is None or registration is None
                    or self.node_id not in registration.replicas
                    or (topic, index) in self._pending or (topic, index) in self._partitions):
                self._unplaced.discard((topic, index))
                continue
            self._apply_partition(topic, topic_image.topic_id, index, registration,
                                  self._log_config(image, topic))
            partition = self._partitions.get((topic, index))
            if partition is not None:
                log.info("broker %d created the log of %s-%d and serves it", self.node_id,
                         topic, index)
                created.append(partition)
        self.log_manager.sync_created_logs()
        return created

    def _log_config(self, image: MetadataImage, topic: str) -> LogConfig:
        configs = image.configs
        return self._resolve_log_config(
            configs.get(ConfigResourceType.TOPIC, topic),
            configs.get(ConfigResourceType.BROKER, ""),
            configs.get(ConfigResourceType.BROKER, str(self.node_id)))

    @functools.lru_cache(maxsize=1024)  # noqa: B019 - one manager per broker, kept for good
    def _resolve_log_config(self, overrides: immutables.Map[str, str],
                            cluster_default: immutables.Map[str, str],
                            per_broker: immutables.Map[str, str]) -> LogConfig:
        """One LogConfig per distinct set of overrides (most topics have none): resolving
        one for each of 100,000 partitions took a broker's loop 30% of its time. A topic
        key it does not override comes from the dynamic broker configs (this broker's, then
        the cluster default), then server.properties, as in Kafka's DynamicLogConfig."""
        return LogConfig.from_configs(overrides, effective_server_configs(
            self.server_configs, cluster_default, per_broker))

    def _apply_partition(
        self, topic: str, topic_id: uuid.UUID, index: int,
        registration: PartitionRegistration, config: LogConfig,
    ) -> None:
        key = (topic, index)
        partition = self._partitions.get(key)
        if partition is None:
            try:
                partition_log = self.log_manager.get_or_create_log(
                    topic, index, topic_id=topic_id, config=config, now_ms=self.now_ms(),
                    sync=False,
                )
            except (OSError, KafkaError) as error:  # e.g. out of descriptors: not served
                self._not_created(topic, index, error)
                return
            self._unplaced.discard(key)
            partition = Partition(topic, topic_id, index, partition_log, NO_LEADER, -1, (), (),
                                  changes=self.changes)
            self._partitions[key] = partition
        was_leader = partition.leader_id == self.node_id
        new_epoch = registration.leader_epoch != partition.leader_epoch
        partition.leader_id = registration.leader
        partition.leader_epoch = registration.leader_epoch
        partition.replicas = registration.replicas
        partition.isr = registration.isr
        partition.partition_epoch = registration.partition_epoch
        partition.pending_isr = None  # the committed state supersedes any proposal
        partition.quiet_until_ms = 0  # and a refusal of the state before it is over
        if partition.leader_id == self.node_id:
            if not was_leader or new_epoch:
                self._become_leader(partition)
            self._maybe_advance_high_watermark(partition)
        else:
            if was_leader or new_epoch:
                partition.followers.clear()
                partition.leader_epoch_start_offset = -1
            if self.fetchers is None:
                pass
            elif partition.leader_id < 0 or (self._shutting_down
                                             and self.node_id not in partition.isr):
                self.fetchers.unfollow(partition)  # Kafka's applyLocalFollowersDelta
            elif was_leader or new_epoch:
                self.fetchers.follow(partition)
            # else an ISR change seen by a follower: nothing to do
        partition.wake_waiters()

    def _become_leader(self, partition: Partition) -> None:
        """Kafka's makeLeader: the epoch starts at the log end; followers' positions are
        unknown until they fetch; ISR members count as caught up now."""
        if self.fetchers is not None:
            self.fetchers.unfollow(partition)
        now = self.now_ms()
        partition.log.assign_epoch_start(partition.leader_epoch)
        partition.leader_epoch_start_offset = partition.log.log_end_offset
        partition.followers = {
            replica: FollowerState(last_caught_up_ms=now if replica in partition.isr else 0)
            for replica in partition.replicas if replica != self.node_id
        }
        log.debug("broker %d leads %s at epoch %d from offset %d (ISR %s)", self.node_id,
                 partition.name, partition.leader_epoch, partition.leader_epoch_start_offset,
                 list(partition.isr))

    def _remove(self, topic: str, index: int) -> None:
        partition = self._partitions.pop((topic, index), None)
        if partition is not None:
            if self.fetchers is not None:
                self.fetchers.unfollow(partition)
            partition.leader_id = NO_LEADER
            partition.wake_waiters()
        self.log_manager.delete_log(topic, index)

    # -- lookups ----------------------------------------------------------------------

    def partitions(self) -> Iterable[Partition]:
        return self._partitions.values()

    def get_partition(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def pending_leader(self, topic: str, index: int) -> PendingReplica | None:
        """The replica of `topic`-`index` if this broker leads it and its log is still
        being made (apply_delta), else None."""
        pending = self._pending.get((topic, index))
        if pending is None or pending.registration.leader != self.node_id:
            return None
        return pending

    def leader_partition(self, topic: str, index: int, image: MetadataImage) -> Partition:
        partition = self._partitions.get((topic, index))
        if partition is None:
            topic_image = image.topics.by_name.get(topic)
            if topic_image is None or index not in topic_image.partitions:
                raise UnknownTopicOrPartition(f"{topic}-{index} does not exist")
            raise NotLeaderOrFollower(f"broker {self.node_id} is not a replica of {topic}-{index}")
        if partition.leader_id != self.node_id:
            raise NotLeaderOrFollower(
                f"broker {self.node_id} is not the leader of {topic}-{index} "
                f"(leader is {partition.leader_id})"
            )
        return partition

    def readable_partition(self, topic: str, index: int, image: MetadataImage) -> Partition:
        """A partition a consumer may fetch here: led here or followed here (KIP-392: a
        Fetch v11+ from a consumer may go to a follower)."""
        partition = self._partitions.get((topic, index))
        if partition is None or partition.leader_id == self.node_id:
            return self.leader_partition(topic, index, image)
        if partition.leader_id == NO_LEADER:
            raise NotLeaderOrFollower(f"{topic}-{index} has no leader")
        return partition

    def preferred_read_replica(self, partition: Partition, client_rack: str,
                               fetch_offset: int, listener_name: str) -> int:
        """The replica a consumer in `client_rack` should fetch `partition` (led here) from,
        or -1 for this leader (Kafka's findPreferredReadReplica with the
        RackAwareReplicaSelector): an in-sync follower of the client's rack that holds
        `fetch_offset`, the most caught up first, unless this leader is in that rack."""
        image = self._image
        if not self.rack_aware or not client_rack or image is None:
            return -1
        brokers = image.cluster.brokers
        me = brokers.get(self.node_id)
        if me is not None and me.rack == client_rack:
            return -1
        now = self.now_ms()
        best: tuple[int, int, int] | None = None  # (log end, -time since caught up, id)
        for replica_id in partition.isr:
            state = partition.followers.get(replica_id)
            broker = brokers.get(replica_id)
            if (replica_id == self.node_id or state is None or broker is None
                    or broker.fenced or broker.rack != client_rack
                    or listener_name not in broker.listeners
                    or state.log_end_offset < fetch_offset
                    or state.log_start_offset > fetch_offset):
                continue
            candidate = (state.log_end_offset, state.last_caught_up_ms - now, replica_id)
            if best is None or candidate[:2] > best[:2]:
                best = candidate
        return -1 if best is None else best[2]

    # -- produce ----------------------------------------------------------------------

    def append(self, partition: Partition, records: bytes, acks: int, *,
               from_coordinator: bool = False) -> AppendInfo:
        """A leader append; `from_coordinator` for a coordinator's own writes (group,
        transaction state, markers): producer epochs are checked, sequences are not."""
        if acks not in (-1, 0, 1):
            raise InvalidRequiredAcks(f"acks={acks}; use -1, 0 or 1")
        min_isr = partition.log.config.min_insync_replicas
        if acks == -1 and len(partition.isr) < min_isr:
            raise NotEnoughReplicas(
                f"the ISR of {partition.name} is {list(partition.isr)}, fewer than "
                f"min.insync.replicas={min_isr}")
        try:
            info = partition.log.append_as_leader(
                bytearray(records), leader_epoch=partition.leader_epoch, now_ms=self.now_ms(),
                from_coordinator=from_coordinator,
                decompressed_bytes_max=self.decompressed_batch_bytes_max,
            )
        except OSError as error:
            # the log undid the append (storage.segment): the request fails, the node goes
            # on serving reads, and the next append tries the disk again (docs/deviations.md)
            self._storage_failed(partition, "append", error)
            _note_storage_failure(partition, records)
            raise KafkaStorageError(f"cannot append to {partition.name}: {error}") from error
        except OutOfOrderSequenceNumber as error:
            # The batches a producer pipelined behind one that failed on storage arrive with
            # a sequence gap. Kafka never answers them OUT_OF_ORDER_SEQUENCE_NUMBER: its
            # failed log dir takes the partition offline, so they fail as the first did.
            # Answered so, a client retries them in order; answered out of order, librdkafka
            # bumps its producer epoch and re-sends every partition's in-flight batches under
            # the new one, where a batch already written can no longer be recognised: a
            # duplicate (found by the fault campaign, docs/reliability.md).
            if partition.storage_failed_producers & _producer_ids(records):
                raise KafkaStorageError(
                    f"an earlier append of this producer to {partition.name} failed on "
                    f"storage; retry from it ({error})") from error
            raise
        self._storage_ok(partition)
        if partition.storage_failed_producers:
            partition.storage_failed_producers -= _producer_ids(records)
        self._maybe_advance_high_watermark(partition)
        partition.wake_waiters()
        return info

    def _storage_failed(self, partition: Partition, what: str, error: OSError) -> None:
        """Logged at most once per interval per log dir (a full disk fails them all)."""
        self.log_manager.storage_errors.report(partition.log.dir.parent,
                                               f"{what} to {partition.name}", error)

    def _storage_ok(self, partition: Partition) -> None:
        self.log_manager.storage_errors.recovered(partition.log.dir.parent)

    def _maybe_advance_high_watermark(self, partition: Partition) -> bool:
        """HW = min log end offset over the (maximal) ISR; it never moves back."""
        if partition.leader_id != self.node_id:
            return False
        high_watermark = partition.log.log_end_offset
        if self.unsafe_leader_high_watermark:
            return partition.log.maybe_increment_high_watermark(high_watermark)
        for replica in partition.maximal_isr:
            if replica == self.node_id:
                continue
            state = partition.followers.get(replica)
            if state is None or state.log_end_offset < 0:
                return False  # a member whose position is not known yet holds it back
            high_watermark = min(high_watermark, state.log_end_offset)
        return partition.log.maybe_increment_high_watermark(high_watermark)

    async def wait_for_high_watermark(
        self, pending: list[tuple[Partition, int]], timeout_ms: int
    ) -> None:
        """Park an acks=all produce until each partition's HW passes its last offset (or
        the partition is no longer led here)."""
        waiting = [partition.high_watermark_reached(end) for partition, end in pending
                   if partition.log.high_watermark < end and partition.leader_id == self.node_id]
        if not waiting:
            return
        try:
            await asyncio.wait(waiting, timeout=timeout_ms / 1000)
        finally:
            for future in waiting:
                future.cancel()  # a timed-out waiter leaves the heap when passed over

    def check_acks_all(self, partition: Partition, leader_epoch: int, end: int) -> None:
        """After the wait: raise the error an acks=all produce ending at `end` gets, if any
        (Kafka's checkEnoughReplicasReachOffset)."""
        if partition.leader_id != self.node_id or partition.leader_epoch != leader_epoch:
            raise NotLeaderOrFollower(f"broker {self.node_id} no longer leads {partition.name}")
        if partition.log.high_watermark < end:
            raise RequestTimedOut(f"the ISR of {partition.name} did not reach offset {end} "
                                  f"in time")
        min_isr = partition.log.config.min_insync_replicas
        if len(partition.isr) < min_isr:
            raise NotEnoughReplicasAfterAppend(
                f"the ISR of {partition.name} shrank to {list(partition.isr)}, below "
                f"min.insync.replicas={min_isr}")

    # -- fetch ------------------------------------------------------------------------

    def read(
        self,
        partition: Partition,
        fetch_offset: int,
        max_bytes: int,
        *,
        min_one_message: bool,
        up_to_high_watermark: bool = True,
        up_to_last_stable_offset: bool = False,
    ) -> ReadInfo:
        """A consumer's read stops at the high watermark (read_committed: at the last stable
        offset), a follower's at the log end. A storage error is KAFKA_STORAGE_ERROR."""
        max_offset = partition.log.high_watermark if up_to_high_watermark else None
        if up_to_last_stable_offset:
            max_offset = partition.log.last_stable_offset
        try:
            info = partition.log.read(
                fetch_offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message
            )
        except OSError as error:  # EIO from a failing disk: Kafka's KAFKA_STORAGE_ERROR
            self.log_manager.storage_errors.report(partition.log.dir.parent,
                                                   f"read of {partition.name}", error)
            partition.read_failing = True
            raise KafkaStorageError(f"cannot read {partition.name}: {error}") from error
        partition.read_failing = False
        return info

    async def wait_for_data(self, partitions: Iterable[Partition], timeout_ms: int) -> bool:
        """The fetch purgatory: return when any partition changes (True) or the wait times
        out (False)."""
        if timeout_ms > 0:
            return await _park(list(partitions), timeout_ms / 1000)
        return False

    def follower_fetch(
        self, partition: Partition, replica_id: int, fetch_offset: int, last_fetched_epoch: int,
        log_start_offset: int = -1,
    ) -> FollowerFetch:
        """A follower's fetch of `partition` (led here), before its records are read: the
        diverging epoch if its log left ours, else its position is recorded (KIP-320;
        Kafka's Partition.fetchRecords for followers)."""
        if replica_id not in partition.replicas:
            raise NotLeaderOrFollower(
                f"broker {replica_id} is not a replica of {partition.name}")
        if last_fetched_epoch >= 0:
            epoch, end_offset = partition.log.end_offset_for_epoch(last_fetched_epoch)
            if epoch < last_fetched_epoch or end_offset < fetch_offset:
                return FollowerFetch(epoch, end_offset)
        if not (partition.log.log_start_offset <= fetch_offset
                <= partition.log.log_end_offset):
            self.read(partition, fetch_offset, 0, min_one_message=False,
                      up_to_high_watermark=False)  # raises OffsetOutOfRange
        self.update_follower(partition, replica_id, fetch_offset)
        partition.followers[replica_id].log_start_offset = log_start_offset
        return FollowerFetch()

    def update_follower(self, partition: Partition, replica_id: int, fetch_offset: int) -> None:
        now = self.now_ms()
        state = partition.followers.setdefault(replica_id, FollowerState())
        leader_end = partition.log.log_end_offset
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now)
        elif fetch_offset >= state.last_fetch_leader_end >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.last_fetch_ms = now
        state.last_fetch_leader_end = leader_end
        self._maybe_expand_isr(partition, replica_id, state)
        if self._maybe_advance_high_watermark(partition):
            partition.wake_waiters()

    def follower_still_caught_up(self, partition: Partition, replica_id: int,
                                 now_ms: int) -> None:
        """`replica_id` fetched `partition` at our log end at `now_ms`, and nothing changed
        since its last fetch was looked at in full: what update_follower would record, and
        the ISR expansion it would try. A follower caught up while it could not join
        (fenced, not yet unfenced after its restart) joins once it can, though the
        partition stays idle: 15 such partitions stayed out of their ISRs for good at
        300,000."""
        state = partition.followers.get(replica_id)
        if state is not None:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
            state.last_fetch_ms = max(state.last_fetch_ms, now_ms)
            if replica_id not in partition.isr:
                self._maybe_expand_isr(partition, replica_id, state)

    # -- ISR changes (KIP-497) ------------------------------------------------------------

    def _broker_eligible(self, broker_id: int) -> bool:
        """Registered, unfenced and not shutting down: the controller refuses others."""
        image = self._image
        if image is None:
            return True
        broker = image.cluster.brokers.get(broker_id)
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    def _broker_epoch(self, broker_id: int) -> int:
        image = self._image
        broker = image.cluster.brokers.get(broker_id) if image is not None else None
        return broker.epoch if broker is not None else -1

    def _maybe_expand_isr(self, partition: Partition, replica_id: int,
                          state: FollowerState) -> None:
        if (partition.pending_isr is not None or replica_id in partition.isr
                or partition.leader_id != self.node_id):
            return
        caught_up = (state.log_end_offset >= partition.log.high_watermark
                     and state.log_end_offset >= partition.leader_epoch_start_offset)
        if caught_up and self._broker_eligible(replica_id):
            new_isr = tuple(r for r in partition.replicas
                            if r in partition.isr or r == replica_id)
            self._isr_adds.add(partition.name, f"broker {replica_id} to {list(partition.isr)} "
                               f"(at offset {state.log_end_offset})")
            self._propose_isr(partition, new_isr)

    def out_of_sync_replicas(self, partition: Partition, now_ms: int) -> tuple[int, ...]:
        """ISR members (not the leader) not caught up for replica.lag.time.max.ms; one
        whose log end is the leader's counts as caught up (an idle partition keeps a
        silent follower, as Kafka's does), and so does one that a fetch session of it saw
        at our log end within that time (`idle_follower_ms`). A follower of a log that
        never held a record (log end 0) is not behind on anything and stays: the replicas
        of 1,000,000 new partitions are made over minutes, and a follower that made its
        log 30 s after its leader was dropped from the ISR and added back, two partition
        changes that every node applied, while it still had everything (docs/deviations.md).
        Once the leader appends, such a follower is judged from when this broker became
        leader, so a silent one leaves at the next check."""
        leader_end = partition.log.log_end_offset
        if leader_end == 0:
            return ()
        lag_max = self.replica_lag_time_max_ms
        lagging = []
        for replica in partition.isr:
            if replica == self.node_id:
                continue
            state = partition.followers.get(replica, FollowerState())
            if (state.log_end_offset != leader_end
                    and now_ms - state.last_caught_up_ms > lag_max
                    and (self.idle_follower_ms is None
                         or now_ms - self.idle_follower_ms(partition, replica) > lag_max)):
                lagging.append(replica)
        return tuple(lagging)

    def maybe_shrink_isr(self, partitions: Sequence[Partition] | None = None) -> int:
        """The periodic check, of every partition or of those of `partitions` still held:
        propose dropping lagging followers; return how many partitions got a proposal."""
        now = self.now_ms()
        proposed = 0
        held = self._partitions
        for partition in list(held.values()) if partitions is None else partitions:
            if (partition.leader_id != self.node_id or partition.pending_isr is not None
                    or partition.read_failing
                    or held.get((partition.topic, partition.index)) is not partition):
                continue  # (a leader that cannot read its log does not judge its followers)
            lagging = self.out_of_sync_replicas(partition, now)
            if not lagging:
                continue
            new_isr = tuple(r for r in partition.isr if r not in lagging)
            self._isr_removes.add(partition.name, f"{list(lagging)} from {list(partition.isr)}")
            self._propose_isr(partition, new_isr)
            proposed += 1
        return proposed

    async def run_isr_checks(self) -> None:
        """Every replica.lag.time.max.ms / 2, as Kafka's isr-expiration task; and while a
        log could not be created (a full disk), it is tried again every
        LOG_CREATION_RETRY_MS and `on_created` hears of each one made."""
        interval_ms = max(10, self.replica_lag_time_max_ms // 2)
        waited_ms = 0
        while True:
            # woken more often only while a log waits to be created again
            wait_ms = min(interval_ms - waited_ms, LOG_CREATION_RETRY_MS) if self._unplaced \
                else interval_ms - waited_ms
            await asyncio.sleep(wait_ms / 1000)
            waited_ms += wait_ms
            if waited_ms >= interval_ms:
                waited_ms = 0
                partitions = list(self._partitions.values())
                for start in range(0, len(partitions), ISR_CHECKS_PER_TURN):
                    try:  # a slice per turn of the loop: 300,000 at once held it for 2 s
                        self.maybe_shrink_isr(partitions[start:start + ISR_CHECKS_PER_TURN])
                    except Exception:
                        log.exception("ISR check failed")
                    await asyncio.sleep(0)
            try:
                for partition in self.retry_unplaced():
                    for listener in self.on_created:
                        listener(partition)
            except Exception:
                log.exception("creating a log again failed")

    def _propose_isr(self, partition: Partition, new_isr: tuple[int, ...]) -> None:
        if self.alter_partition is None or self.now_ms() < partition.quiet_until_ms:
            return
        partition.pending_isr = new_isr
        self._proposals[(partition.topic, partition.index)] = (partition, IsrUpdate(
            partition.topic, partition.topic_id, partition.index, partition.leader_epoch,
            partition.partition_epoch, new_isr, tuple(self._broker_epoch(r) for r in new_isr)))
        if self._proposer is None:
            self._proposer = asyncio.get_running_loop().create_task(
                self._send_proposals(), name="alter-partition")

    async def _send_proposals(self) -> None:
        """Kafka's AlterPartitionManager: one AlterPartition in flight at a time, holding
        the proposals made since the last one was sent (up to ALTER_PARTITION_ITEMS_MAX);
        each answer is applied while its proposal still stands. A request that fails is
        sent again after a backoff that doubles, with whatever still stands of it. One
        task for all proposals, not one each: a broker back from a restart rejoins
        hundreds of thousands of ISRs, and a task, a coroutine and a future per partition
        cost a leader 33-35 µs of CPU per rejoining partition, about half of it in
        garbage collections; 9-10 µs with one task (`benchmarks/partition_changes.py
        --isr-rejoin 30000`, 20,000 led partitions)."""
        sender = self.alter_partition
        assert sender is not None
        backoff_ms = self.retry_backoff_ms
        try:
            while self._proposals:
                keys = list(itertools.islice(self._proposals, ALTER_PARTITION_ITEMS_MAX))
                batch = [proposal for proposal in map(self._proposals.pop, keys)
                         if self._proposal_stands(*proposal)]
                if not batch:
                    continue
                try:
                    results = await sender([update for _, update in batch])
                except Exception as error:  # noqa: BLE001 - the controller is unreachable
                    for partition, update in batch:
                        if self._proposal_stands(partition, update):
                            self._alter_unanswered.add(partition.name,
                                                       f"({error}; {backoff_ms} ms)")
                            self._proposals.setdefault((partition.topic, partition.index),
                                                       (partition, update))
                    await asyncio.sleep(backoff_ms / 1000)
                    backoff_ms = min(MAX_ALTER_PARTITION_BACKOFF_MS, 2 * backoff_ms)
                    continue
                backoff_ms = self.retry_backoff_ms
                for count, ((partition, update), result) in enumerate(
                        zip(batch, results, strict=True), 1):
                    try:
                        if self._proposal_stands(partition, update):
                            self.handle_isr_result(partition, update, result)
                    except Exception:  # the others' answers are still applied
                        log.exception("applying the AlterPartition answer for %s failed",
                                      partition.name)
                        partition.pending_isr = None
                        partition.wake_waiters()
                    if count % ISR_RESULTS_PER_TURN == 0:
                        await asyncio.sleep(0)
        finally:
            self._proposer = None

    def _proposal_stands(self, partition: Partition, update: IsrUpdate) -> bool:
        return (self._partitions.get((partition.topic, partition.index)) is partition
                and partition.pending_isr == update.new_isr
                and partition.leader_epoch == update.leader_epoch
                and partition.partition_epoch == update.partition_epoch)

    def handle_isr_result(self, partition: Partition, update: IsrUpdate,
                          result: IsrUpdateResult) -> None:
        """The committed state on success; on a refusal the proposal is dropped and the
        partition waits for the metadata (Kafka retries only what a retry can cure)."""
        partition.pending_isr = None
        if result.error_code != 0:
            self._alter_refused.add(partition.name,
                                    f"{list(update.new_isr)} error {result.error_code}")
            partition.wake_waiters()  # the follower's session looks at it again
            # each fetch of a caught-up follower would propose again at once. Refused for
            # a stale partition or leader epoch, wait for the metadata to bring the newer
            # one (proposed again every 500 ms from the stale one, broker 4 logged 3.4
            # million ISR additions in 23 minutes at 1,000,000 partitions); else a little
            partition.quiet_until_ms = (
                UNTIL_THE_METADATA_MOVES if result.error_code in _STALE_STATE_ERRORS
                else self.now_ms() + REFUSED_PROPOSAL_QUIET_MS)
            return
        if (result.leader_epoch != partition.leader_epoch
                or result.partition_epoch <= partition.partition_epoch):
            return  # stale: the metadata already moved past it
        partition.isr = result.isr
        partition.partition_epoch = result.partition_epoch
        self._isr_changes.add(partition.name, f"{list(result.isr)} (partition epoch "
                              f"{result.partition_epoch})")
        self._maybe_advance_high_watermark(partition)
        partition.wake_waiters()

    async def close(self) -> None:
        if self._creator is not None:
            self._creator.cancel()
            await asyncio.gather(self._creator, return_exceptions=True)
        if self._proposer is not None:
            self._proposer.cancel()
            await asyncio.gather(self._proposer, return_exceptions=True)


_WAITER_ORDER = itertools.count()


async def _park(partitions: list[Partition], timeout_s: float) -> bool:
    """Wait until one of `partitions` wakes its waiters (True) or the time is up (False);
    always unregister afterwards."""
    future = asyncio.get_running_loop().create_future()
    for partition in partitions:
        partition.park(future)
    try:
        return await _woken(future, timeout_s)
    finally:
        unpark(partitions, future)


async def _woken(future: asyncio.Future[None], timeout_s: float) -> bool:
    """Whether `future` was done within `timeout_s`."""
    try:  # not wait_for: on 3.11 it can swallow a cancellation that races the wake-up
        async with asyncio.timeout(timeout_s):
            await future
        return True
    except TimeoutError:
        return future.done()


def unpark(partitions: Iterable[Partition], future: asyncio.Future[None]) -> None:
    """Take `future` out of the waiters of `partitions` that still hold it."""
    for partition in partitions:
        waiters = partition.waiters
        if waiters:
            try:
                waiters.remove(future)
            except ValueError:
                pass  # already woken: wake_waiters swapped the list out


STORAGE_FAILED_PRODUCERS_MAX = 10_000  # per partition; past it the memory starts over


def _producer_ids(records: bytes) -> set[int]:
    return {header.producer_id for _, header in split_batches(records)
            if header.producer_id >= 0}


def _note_storage_failure(partition: Partition, records: bytes) -> None:
    """Remember the idempotent producers whose append failed on storage, until one of
    their appends succeeds (bounded: a producer that never returns is forgotten when the
    set is full)."""
    failed = partition.storage_failed_producers
    if len(failed) >= STORAGE_FAILED_PRODUCERS_MAX:
        failed = frozenset()
    partition.storage_failed_producers = failed | _producer_ids(records)
