"""What one partition change costs a node that applies it (issue 21's microbenchmark).

Every node of a cluster applies every partition change: it decodes the record, folds it into
its metadata image, and a broker then works out what the change means for its own replicas
(`local_changes`). This times those steps in one process, for the two changes that matter at
scale, on an image like benchmarks/metadata_scale.py's (100 partitions per topic, RF 3 over
brokers 4, 5 and 6, so each broker hosts every partition, leaders spread evenly):

- create: the PartitionRecords of every partition, folded into an empty image;
- fence: broker 4 fenced, as the controller writes it: a PartitionChangeRecord per
  partition, the broker out of the ISR and, where it led, the next replica leading.

For each: µs per record to decode, to replay into a delta, to apply the delta (the new
image), and for broker 5's `local_changes`; and the traced memory the image holds per
partition (tracemalloc, so Python objects only). Best of --rounds.

With --broker-partitions N (0 to skip), broker 5's reaction as well: a ReplicaManager over
real logs in a temporary directory (TMPDIR) is given the creation of N partitions (logs
made on its worker thread, as in a broker), then the fence, timed once in
`ReplicaManager.apply_delta`: it becomes leader of a third of them (each records its new
leader epoch) and sees an ISR change on the rest. No replica fetchers run, so following
costs nothing here.

With --replica-memory N (0 to skip), what an idle replica costs a broker in memory: the
growth of this process's RSS while a fresh ReplicaManager makes and installs the logs of N
new partitions (their metadata image built beforehand), per replica.

With --isr-rejoin N (0 to skip), the leader's side of a restarted broker rejoining the
ISRs: of N partitions, those led by broker OBSERVER that the fence took broker FENCED out
of, each fetched by FENCED at the log end (a proposal to add it back) and answered by a
stand-in controller; process CPU per partition. Each AlterPartition is encoded and its
answer decoded and read as the node's sender does (the stand-in's own encoding of the
answer is left out).

With --log-loading N (0 to skip), a restarted broker's loading of its logs: N idle
replicas' logs, made and closed cleanly as above, opened again by a new LogManager
(page cache warm) on --recovery-threads threads (num.recovery.threads.per.data.dir, by
default the node's default), opened once more as after a crash (the first manager's logs
left unclosed: each is recovered), then closed, µs per log each. With --cold (root only)
the kernel's caches are dropped before each load, as a broker with many logs finds them
when it restarts; --no-readahead loads without the helper processes that read the
directories ahead (storage/readahead.py).

Run: .venv/bin/python benchmarks/partition_changes.py [--partitions 100000] [--rounds 3]
     [--broker-partitions 10000] [--replica-memory 10000] [--log-loading 10000]
     [--recovery-threads N] [--cold] [--no-readahead] [--isr-rejoin 30000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gc
import os
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from kio.schema.alter_partition.v3 import response as alter_response

from pykraft.broker.replica_manager import (
    ALTER_PARTITION_VERSION,
    IsrUpdate,
    IsrUpdateResult,
    ReplicaManager,
    alter_partition_request,
    alter_partition_results,
)
from pykraft.metadata.codec import decode_metadata_record, encode_metadata_record
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.records import (
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from pykraft.protocol.entities import make
from pykraft.protocol.framing import decode_response, encode_request, encode_response
from pykraft.storage.log_manager import LogManager

PARTITIONS_PER_TOPIC = 100
BROKERS = (4, 5, 6)
FENCED = 4
OBSERVER = 5  # the broker whose local changes are worked out
RECORD_VERSION = 1  # PartitionRecord and PartitionChangeRecord at metadata.version 3.7+


def encode(record: MetadataRecord) -> bytes:
    """At the version a 3.7+ controller writes: 1 for partitions, the default otherwise."""
    partition = isinstance(record, PartitionRecord | PartitionChangeRecord)
    return encode_metadata_record(record, RECORD_VERSION if partition else None)


def creation_records(partitions: int) -> list[MetadataRecord]:
    records: list[MetadataRecord] = []
    directories = {broker: uuid.UUID(int=broker) for broker in BROKERS}
    for topic_index in range(-(-partitions // PARTITIONS_PER_TOPIC)):
        topic_id = uuid.UUID(int=(1 << 64) + topic_index)
        records.append(TopicRecord(name=f"t{topic_index}", topic_id=topic_id))
        count = min(PARTITIONS_PER_TOPIC, partitions - topic_index * PARTITIONS_PER_TOPIC)
        for index in range(count):
            first = (topic_index * PARTITIONS_PER_TOPIC + index) % len(BROKERS)
            replicas = tuple(BROKERS[(first + i) % len(BROKERS)] for i in range(3))
            records.append(PartitionRecord(
                partition_id=index, topic_id=topic_id, replicas=replicas, isr=replicas,
                leader=replicas[0], leader_recovery_state=0, leader_epoch=0,
                partition_epoch=0, directories=tuple(directories[r] for r in replicas)))
    return records


def fence_records(image: MetadataImage, broker: int) -> list[MetadataRecord]:
    records: list[MetadataRecord] = []
    for topic in image.topics.by_id.values():
        for index, partition in topic.partitions.items():
            if broker not in partition.isr:
                continue
            isr = tuple(r for r in partition.isr if r != broker)
            leader = isr[0] if partition.leader == broker else -2  # -2: no change
            records.append(PartitionChangeRecord(
                partition_id=index, topic_id=topic.topic_id, isr=isr, leader=leader))
    return records


def best(rounds: int, run: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest of `rounds` runs (seconds) and the last run's result; GC as in a node."""
    times, result = [], None
    for _ in range(rounds):
        gc.collect()
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return min(times), result


def measure(label: str, base: MetadataImage, records: Sequence[MetadataRecord],
            rounds: int) -> MetadataImage:
    encoded = [encode(record) for record in records]
    count = len(records)
    decode_s, decoded = best(rounds, lambda: [decode_metadata_record(b) for b in encoded])

    replay_s, delta = best(rounds, lambda: replayed(base, decoded))
    apply_s = float("inf")
    for _ in range(rounds):  # a delta keeps the topics it applied: a fresh one each time
        fresh = replayed(base, decoded)
        gc.collect()
        started = time.perf_counter()
        image = fresh.apply(1, 1)
        apply_s = min(apply_s, time.perf_counter() - started)
    local_s, changes = best(rounds, lambda: delta.local_changes(OBSERVER))
    total = decode_s + replay_s + apply_s + local_s
    print(f"{label}: {count:,} records; µs per record: decode {decode_s / count * 1e6:.2f}, "
          f"replay {replay_s / count * 1e6:.2f}, apply {apply_s / count * 1e6:.2f}, "
          f"local_changes({OBSERVER}) {local_s / count * 1e6:.2f}; "
          f"total {total / count * 1e6:.2f} (broker {OBSERVER}: "
          f"{len(changes.leaders):,} leaders, {len(changes.followers):,} followers)")
    return image


def image_bytes(records: Sequence[MetadataRecord]) -> int:
    """Python memory the image of `records` holds (tracemalloc), the records themselves
    freed."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in records:
        delta.replay(decode_metadata_record(encode(record)))
    image = delta.apply(1, 1)
    del delta
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del image
    return held


def replayed(base: MetadataImage, records: Sequence[MetadataRecord]) -> MetadataDelta:
    delta = MetadataDelta(base)
    for record in records:
        delta.replay(record)
    return delta


LOG_CONFIGS = {"log.segment.bytes": "1048576", "log.index.size.max.bytes": "4096"}


@contextlib.asynccontextmanager
async def observer_manager(directory: str | None = None) -> AsyncIterator[ReplicaManager]:
    """Broker OBSERVER's ReplicaManager over a LogManager in `directory` (by default a
    temporary one), closed cleanly at the end."""
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="partition-changes-"))
        log_manager = LogManager([directory], LOG_CONFIGS)
        log_manager.load(int(time.time() * 1000))
        manager = ReplicaManager(OBSERVER, log_manager, LOG_CONFIGS,
                                 lambda: int(time.time() * 1000))
        try:
            yield manager
        finally:
            await manager.close()
            log_manager.close()


async def broker_reaction(partitions: int) -> None:
    """Broker OBSERVER's ReplicaManager.apply_delta for the creation and for the fence."""
    async with observer_manager() as manager:
        created = replayed(MetadataImage.EMPTY, creation_records(partitions))
        image = created.apply(1, 1)
        started = time.perf_counter()
        manager.apply_delta(created, image)
        on_loop_s = time.perf_counter() - started
        while manager._creator is not None:  # the logs, made on the worker thread
            await asyncio.sleep(0.05)
        made_s = time.perf_counter() - started
        print(f"broker {OBSERVER} reaction to the creation: {partitions:,} replicas; "
              f"apply_delta {on_loop_s / partitions * 1e6:.2f} µs per partition on the "
              f"loop, {made_s / partitions * 1e6:.0f} µs per partition until every log "
              f"was made and installed")
        fence = replayed(image, fence_records(image, FENCED))
        fenced = fence.apply(2, 1)
        changes = fence.local_changes(OBSERVER)
        gc.collect()
        started = time.perf_counter()
        manager.apply_delta(fence, fenced)
        fence_s = time.perf_counter() - started
        count = len(changes.leaders) + len(changes.followers)
        print(f"broker {OBSERVER} reaction to the fence: {count:,} changed replicas "
              f"({len(changes.leaders):,} now led here); apply_delta "
              f"{fence_s / count * 1e6:.2f} µs per changed partition")


async def isr_rejoin(partitions: int) -> None:
    """Broker OBSERVER as the leader a restarted broker FENCED rejoins: for each partition
    led here whose ISR lost FENCED, FENCED's first fetch at the log end (which proposes
    adding it back), then until every proposal is answered by a stand-in controller that
    accepts them all; process CPU per rejoining partition."""
    async with observer_manager() as manager:
        brokers = [record for broker in BROKERS for record in (
            RegisterBrokerRecord(broker_id=broker, broker_epoch=broker, fenced=False),
            UnfenceBrokerRecord(id=broker, epoch=broker))]
        created = replayed(MetadataImage.EMPTY, brokers + creation_records(partitions))
        image = created.apply(1, 1)
        manager.apply_delta(created, image)
        while manager._creator is not None:  # the logs, made on the worker thread
            await asyncio.sleep(0.05)
        fence = replayed(image, fence_records(image, FENCED))
        manager.apply_delta(fence, fence.apply(2, 1))
        led = [partition for partition in (manager.get_partition(topic, index)
                                           for topic, index in manager.log_manager.log_keys())
               if partition is not None and partition.leader_id == OBSERVER
               and FENCED in partition.replicas and FENCED not in partition.isr]
        requests = 0
        standing_in_s = 0.0  # the stand-in controller's own CPU, left out

        async def controller(updates: list[IsrUpdate]) -> list[IsrUpdateResult]:
            """What the node's AlterPartition sender does (server.node): the request
            encoded, the answer decoded and read; the controller's side left out."""
            nonlocal requests, standing_in_s
            requests += 1
            encode_request(ALTER_PARTITION_KEY, ALTER_PARTITION_VERSION, requests,
                           "partition-changes", alter_partition_request(updates, OBSERVER, 1))
            started = time.process_time()
            answer = encode_response(requests, alter_answer(updates))
            standing_in_s += time.process_time() - started
            _, decoded = decode_response(ALTER_PARTITION_KEY, ALTER_PARTITION_VERSION,
                                         answer[4:])
            return alter_partition_results(updates, decoded)

        manager.alter_partition = controller
        gc.collect()
        started = time.process_time()
        for partition in led:
            manager.follower_fetch(partition, FENCED, partition.log.log_end_offset, -1)
        fetched = time.process_time()
        while any(partition.pending_isr is not None for partition in led):
            await asyncio.sleep(0.01)
        answered = time.process_time() - standing_in_s
        assert all(FENCED in partition.isr for partition in led)
        print(f"broker {OBSERVER} leading {len(led):,} partitions that broker {FENCED} "
              f"rejoins: its fetches {(fetched - started) / len(led) * 1e6:.1f} µs, the "
              f"proposals answered {(answered - fetched) / len(led) * 1e6:.1f} µs per "
              f"partition of CPU ({requests} AlterPartition requests)")


ALTER_PARTITION_KEY = 56


def alter_answer(updates: list[IsrUpdate]) -> Any:
    """A controller's AlterPartition v3 answer accepting every update."""
    m = alter_response
    by_topic: dict[uuid.UUID, list[IsrUpdate]] = {}
    for update in updates:
        by_topic.setdefault(update.topic_id, []).append(update)
    topics = tuple(
        make(m.TopicData, topic_id=topic_id, partitions=tuple(
            make(m.PartitionData, partition_index=u.partition, error_code=0,
                 leader_id=OBSERVER, leader_epoch=u.leader_epoch, isr=u.new_isr,
                 leader_recovery_state=0, partition_epoch=u.partition_epoch + 1)
            for u in items))
        for topic_id, items in by_topic.items())
    return make(m.AlterPartitionResponse, throttle_time=datetime.timedelta(0), error_code=0,
                topics=topics)


def rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def replica_memory(partitions: int) -> None:
    """RSS growth per replica while broker OBSERVER makes and installs `partitions` logs."""
    async with observer_manager() as manager:
        created = replayed(MetadataImage.EMPTY, creation_records(partitions))
        image = created.apply(1, 1)
        gc.collect()
        before = rss_bytes()
        manager.apply_delta(created, image)
        while manager._creator is not None:
            await asyncio.sleep(0.05)
        gc.collect()
        grown = rss_bytes() - before
        print(f"broker {OBSERVER} memory: {partitions:,} idle replicas made; RSS grew "
              f"{grown / 2**20:,.1f} MiB, {grown / partitions:,.0f} B per replica")


def drop_caches() -> None:
    """Write back and drop the kernel's page, dentry and inode caches (root only)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as control:
        control.write("3\n")


async def log_loading(partitions: int, threads: int | None, *, cold: bool = False,
                      readahead: bool = True) -> None:
    """A restarted broker's loading of its logs: those of `partitions` idle replicas, made
    by broker OBSERVER's ReplicaManager and closed cleanly, opened again by a new
    LogManager on `threads` recovery threads (None: the default), then again as after a
    crash, then closed. `cold`: the kernel's caches dropped before each load."""
    configs = dict(LOG_CONFIGS)
    if threads is not None:
        configs["num.recovery.threads.per.data.dir"] = str(threads)
    with tempfile.TemporaryDirectory(prefix="partition-changes-") as directory:
        async with observer_manager(directory) as manager:
            created = replayed(MetadataImage.EMPTY, creation_records(partitions))
            manager.apply_delta(created, created.apply(1, 1))
            while manager._creator is not None:
                await asyncio.sleep(0.05)
        took: dict[str, float] = {}
        for how in ("after a clean shutdown", "after a crash"):
            log_manager = LogManager([directory], configs)
            if not readahead:
                log_manager.readahead_from = partitions + 1
            gc.collect()
            if cold:
                drop_caches()
            started = time.perf_counter()
            log_manager.load(int(time.time() * 1000))
            took[how] = time.perf_counter() - started
            if how == "after a clean shutdown":
                log_manager.release_locks()  # not closed: the next load is a crash's
        loaded = len(log_manager.logs())
        started = time.perf_counter()
        log_manager.close()
        closed = time.perf_counter() - started
        loads = "; ".join(f"{how} in {s:.2f} s, {s / loaded * 1e6:,.0f} µs per log"
                          for how, s in took.items())
        on = "default" if threads is None else threads
        how = ("caches dropped" if cold else "caches warm") + (
            "" if readahead else ", no readahead")
        print(f"broker {OBSERVER} restart (num.recovery.threads.per.data.dir={on}, {how}): "
              f"{loaded:,} logs loaded {loads}; closed again (a clean shutdown) in "
              f"{closed:.2f} s, {closed / loaded * 1e6:,.0f} µs per log")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--broker-partitions", type=int, default=10_000)
    parser.add_argument("--replica-memory", type=int, default=10_000)
    parser.add_argument("--log-loading", type=int, default=10_000)
    parser.add_argument("--isr-rejoin", type=int, default=30_000)
    parser.add_argument("--recovery-threads", type=int, default=None,
                        help="num.recovery.threads.per.data.dir for --log-loading "
                             "(default: the node's default)")
    parser.add_argument("--cold", action="store_true",
                        help="drop the kernel's caches before each --log-loading load (root)")
    parser.add_argument("--no-readahead", action="store_true",
                        help="load without the helper processes reading ahead")
    args = parser.parse_args(argv)
    created = creation_records(args.partitions)
    image = measure("create", MetadataImage.EMPTY, created, args.rounds)
    measure(f"fence broker {FENCED}", image, fence_records(image, FENCED), args.rounds)
    held = image_bytes(created)
    print(f"image: {held / args.partitions:,.0f} B per partition "
          f"({held / 2**20:,.1f} MiB for {args.partitions:,})")
    if args.broker_partitions > 0:
        asyncio.run(broker_reaction(args.broker_partitions))
    if args.replica_memory > 0:
        asyncio.run(replica_memory(args.replica_memory))
    if args.isr_rejoin > 0:
        asyncio.run(isr_rejoin(args.isr_rejoin))
    if args.log_loading > 0:
        asyncio.run(log_loading(args.log_loading, args.recovery_threads, cold=args.cold,
                                readahead=not args.no_readahead))


if __name__ == "__main__":
    main()
