"""All partition logs of a node, spread over its `log.dirs`.

Each log directory holds, besides `<topic>-<partition>/` directories:

- `recovery-point-offset-checkpoint`: per partition, the offset below which data was
  fsynced; an unclean restart re-validates only what lies above it.
- `log-start-offset-checkpoint`: per partition, the log start offset where it is above the
  first segment's base offset (after DeleteRecords or retention inside a segment).
- `replication-offset-checkpoint`: per partition, the high watermark.
- `.kafka_cleanshutdown`: written last by a clean `close()`, deleted once loading is done; if
  present at load, no log is re-validated.
- `.lock`: held (flock) while this manager uses the directory, so two nodes cannot share it.

Deleting a partition renames its directory to `<topic>-<partition>.<uuid>-delete` first, so
an interrupted deletion is finished at the next load. The metadata log
(`__cluster_metadata-0`) may live in a log dir but belongs to raft; it is skipped.

Time enters as `now_ms`; scheduling retention, flushes and checkpoints is the caller's job.
The periodic work (`run_retention`, `flush_due`, `checkpoint`, `expire_producers`) goes on
past a log or log dir whose disk work fails (a full disk, an I/O error): the failure is
reported through `storage_errors` (at most one line per log dir per interval) and the work
is tried again at the next call.
"""

from __future__ import annotations

import collections
import concurrent.futures
import fcntl
import json
import logging
import os
import random
import shutil
import threading
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pykraft.errors import KafkaStorageError, invariant
from pykraft.storage.checkpoint import (
    fsync_directory,
    read_offsets_checkpoint,
    write_atomically,
    write_offsets_checkpoint,
)
from pykraft.storage.log import Log, LogWatch, parse_topic_partition
from pykraft.storage.log_config import LogConfig
from pykraft.storage.readahead import Readahead
from pykraft.storage.storage_errors import StorageErrorLog

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "LOG_START_OFFSET_CHECKPOINT",
    "LogManager",
    "READAHEAD_PROCESSES",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
]

RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT: Final = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
LOCK_FILE: Final = ".lock"
METADATA_TOPIC: Final = "__cluster_metadata"
DELETE_DIR_SUFFIX: Final = "-delete"
FUTURE_DIR_SUFFIX: Final = "-future"
STRAY_DIR_SUFFIX: Final = "-stray"
# num.recovery.threads.per.data.dir; Kafka 4.0's is 2 (KIP-1030), see _on_threads
RECOVERY_THREADS_DEFAULT: Final = 1
# A load of this many logs or more in a log dir is read ahead by helper processes (see
# storage/readahead.py): fewer are not worth starting them
READAHEAD_FROM_LOGS: Final = 4096
READAHEAD_PROCESSES: Final = 4

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetCheckpoints:
    """Per log dir: (recovery points, log start offsets past the first segment, high
    watermarks), as taken at one moment; a later taking has a higher generation."""

    generation: int
    by_dir: dict[Path, tuple[dict[TopicPartition, int], ...]]


@dataclass(frozen=True, slots=True)
class _OpenJob:
    """A log to open at start-up, with what the log dir's checkpoints say of it."""

    key: TopicPartition
    directory: Path
    config: LogConfig
    recovery_point: int
    log_start_offset: int | None
    now_ms: int
    had_clean_shutdown: bool

    def open(self) -> Log:
        return Log.open(self.directory, self.config, recovery_point=self.recovery_point,
                        log_start_offset=self.log_start_offset, now_ms=self.now_ms,
                        had_clean_shutdown=self.had_clean_shutdown, listed=True)


_Item = typing.TypeVar("_Item")
_Result = typing.TypeVar("_Result")


def _flush_and_close(item: tuple[TopicPartition, Log]) -> list[tuple[str, OSError]]:
    """A log's part of a clean shutdown (on a recovery thread): what failed, if anything."""
    log = item[1]
    failures = []
    try:
        log.flush()
    except OSError as error:
        failures.append((f"flush of {log.dir.name}", error))
    try:
        log.close()
    except OSError as error:
        failures.append((f"closing {log.dir.name}", error))
    return failures


class LogManager:
    readahead_from = READAHEAD_FROM_LOGS  # tests lower it on an instance

    def __init__(
        self, log_dirs: Sequence[Path], server_configs: Mapping[str, str],
        *, rng: random.Random | None = None,
    ) -> None:
        invariant(len(log_dirs) > 0, "a log manager needs at least one log dir")
        self.log_dirs = [Path(directory) for directory in log_dirs]
        self.server_configs = dict(server_configs)
        self._rng = rng if rng is not None else random.Random()
        self._logs: dict[TopicPartition, Log] = {}
        self._home: dict[TopicPartition, Path] = {}
        self._count: collections.Counter[Path] = collections.Counter()  # logs per dir
        self._locks: dict[Path, int] = {}
        self._unsynced_dirs: set[Path] = set()
        self._planned: dict[TopicPartition, Path] = {}  # new logs being created elsewhere
        self.had_clean_shutdown: dict[Path, bool] = {}
        self.warnings: list[str] = []
        self.storage_errors = StorageErrorLog()
        self._log_watch = LogWatch()  # the logs flush_due looks at
        self._checkpoint_lock = threading.Lock()  # one writer of the checkpoint files
        self._checkpoints_taken = 0  # generations of OffsetCheckpoints
        self._checkpoints_written = 0

    @property
    def default_config(self) -> LogConfig:
        return LogConfig.from_configs({}, self.server_configs)

    # -- loading -----------------------------------------------------------------------------

    def load(self, now_ms: int, topic_configs: Mapping[str, LogConfig] | None = None) -> None:
        """Lock every log dir and open every partition log in it."""
        configs = topic_configs or {}
        default = self.default_config
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._lock(log_dir)
            clean = (log_dir / CLEAN_SHUTDOWN_FILE).exists()
            self.had_clean_shutdown[log_dir] = clean
            recovery_points = read_offsets_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
            start_offsets = read_offsets_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
            high_watermarks = read_offsets_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT)
            with os.scandir(log_dir) as entries:  # the entry's type without a stat each
                subdirectories = sorted(entry.name for entry in entries if entry.is_dir())
            jobs: list[_OpenJob] = []
            for name in subdirectories:
                directory = log_dir / name
                key = self._partition_dir_key(directory)
                if key is None:
                    continue
                if key in self._logs:
                    raise KafkaStorageError(
                        f"duplicate log directories for {key[0]}-{key[1]}: "
                        f"{self._home[key]} and {log_dir}"
                    )
                jobs.append(_OpenJob(key, directory, configs.get(key[0], default),
                                     recovery_points.get(key, 0), start_offsets.get(key),
                                     now_ms, clean))
            for job, log in zip(jobs, self._open_all(jobs), strict=True):
                key = job.key
                if key in high_watermarks:
                    log.update_high_watermark(high_watermarks[key])
                self._logs[key], self._home[key] = log, log_dir
                self._watch(log)
                self._count[log_dir] += 1
        for log_dir in self.log_dirs:  # from here on, a crash is an unclean shutdown
            (log_dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)

    def _open_all(self, jobs: list[_OpenJob]) -> list[Log]:
        """The logs of `jobs`, in order; many are read ahead by helper processes."""
        if len(jobs) < self.readahead_from:
            return list(self._on_threads(_OpenJob.open, jobs))
        ahead = Readahead([job.directory for job in jobs], READAHEAD_PROCESSES)

        def open_one(job: _OpenJob) -> Log:
            log = job.open()
            ahead.opened()
            return log

        try:
            return list(self._on_threads(open_one, jobs))
        finally:
            ahead.close()

    def _on_threads(self, work: Callable[[_Item], _Result], items: list[_Item]
                    ) -> Iterable[_Result]:
        """`work` over `items`, in order, on num.recovery.threads.per.data.dir threads for
        each log dir (Kafka's pool for loading logs at start-up and flushing them at
        shutdown; a load goes a log dir at a time, on all of them). One by default, where
        Kafka has two: opening an idle log is Python work between a few system calls on
        files the page cache mostly holds, and a second thread spends its time waiting for
        the interpreter lock (20,000 idle logs: 72-74 µs per log on one thread, 169-193 on
        two; 370 and 320 after the caches were dropped). More threads overlap disk waits:
        many fsyncs at a close, a cold cache on a slow disk."""
        threads = len(self.log_dirs) * int(self.server_configs.get(
            "num.recovery.threads.per.data.dir", RECOVERY_THREADS_DEFAULT))
        if threads <= 1 or len(items) <= 1:
            return map(work, items)
        with concurrent.futures.ThreadPoolExecutor(threads, "log-recovery") as pool:
            return list(pool.map(work, items))

    def _partition_dir_key(self, directory: Path) -> TopicPartition | None:
        """The partition a subdirectory of a log dir holds, None for anything that is not
        a live log."""
        name = directory.name
        if name.endswith(DELETE_DIR_SUFFIX) and "." in name:
            shutil.rmtree(directory, ignore_errors=True)  # an interrupted deletion
            return None
        if name.endswith((FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
            self.warnings.append(f"skipping {directory}: future and stray logs are not handled")
            return None
        try:
            topic, partition = parse_topic_partition(name)
        except ValueError:
            self.warnings.append(f"skipping {directory}: not a <topic>-<partition> directory")
            return None
        return None if topic == METADATA_TOPIC else (topic, partition)

    def _lock(self, log_dir: Path) -> None:
        if log_dir in self._locks:
            return
        fd = os.open(log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise KafkaStorageError(
                f"Failed to acquire lock on file .lock in {log_dir}. A Kafka instance in "
                "another process or thread is using this directory."
            ) from None
        self._locks[log_dir] = fd

    # -- lookup, creation, deletion -------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def logs(self) -> list[Log]:
        return list(self._logs.values())

    def compacted_logs(self) -> list[Log]:
        """The logs whose cleanup.policy includes compact (kept by their LogWatch)."""
        return list(self._log_watch.compacted)

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._home.get((topic, partition))

    def get_or_create_log(
        self, topic: str, partition: int, *, topic_id: uuid.UUID, config: LogConfig, now_ms: int,
        sync: bool = True,
    ) -> Log:
        """The partition's log, created in the least loaded log dir if it does not exist.

        An existing log takes `config` (logs loaded at startup got the server defaults).
        With `sync=False` the new directory's entry is made durable by the next
        `sync_created_logs()`, one fsync per log dir for a whole batch of new logs.
        """
        key = (topic, partition)
        log = self._logs.get(key)
        if log is None:
            directory = self.plan_new_log(topic, partition)
            try:
                log = self.open_new_log(directory, config, topic_id, now_ms)
            except BaseException:
                self.abandon_new_log(topic, partition)
                raise
            self.adopt_new_log(log)
            if sync:
                self.sync_created_logs()
        elif log.config != config:
            log.update_config(config)
        log.assign_topic_id(topic_id)
        return log

    # A log can also be made in three steps, so that the file work (`open_new_log`) runs on
    # another thread while this manager's state changes only on the caller's: plan (pick the
    # log dir), open, then adopt (or abandon, if opening failed).

    def plan_new_log(self, topic: str, partition: int) -> Path:
        """Reserve a place for a new log: the directory it is to be created in."""
        key = (topic, partition)
        invariant(key not in self._logs and key not in self._planned,
                  f"log {topic}-{partition} exists or is being created")
        log_dir = min(self.log_dirs, key=lambda d: (self._count[d], self.log_dirs.index(d)))
        self._lock(log_dir)
        self._count[log_dir] += 1
        self._planned[key] = log_dir
        return log_dir / f"{topic}-{partition}"

    @staticmethod
    def open_new_log(directory: Path, config: LogConfig, topic_id: uuid.UUID,
                     now_ms: int) -> Log:
        """Create the log files of a planned log; touches nothing else (any thread)."""
        log = Log.open(directory, config, recovery_point=0, log_start_offset=None, now_ms=now_ms)
        log.assign_topic_id(topic_id)
        return log

    def is_planned(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._planned

    def adopt_new_log(self, log: Log) -> None:
        key = (log.topic, log.partition)
        log_dir = self._planned.pop(key)
        self._logs[key], self._home[key] = log, log_dir
        self._watch(log)
        self._unsynced_dirs.add(log_dir)

    def abandon_new_log(self, topic: str, partition: int) -> None:
        log_dir = self._planned.pop((topic, partition))
        self._count[log_dir] -= 1

    def rehome_log(self, log: Log, log_dir: Path) -> None:
        """`log`, opened from `log_dir`, is now its partition's log (AlterReplicaLogDirs moved
        the partition's directory there; broker.partition_apis). The old Log is closed by
        then: whoever reads a partition across an await looks its log up again after it
        (broker.partition_apis.ReplicaMover says who and how)."""
        key = (log.topic, log.partition)
        invariant(key in self._logs and log_dir in self.log_dirs,
                  f"log {log.topic}-{log.partition} rehomed to {log_dir}")
        self._count[self._home[key]] -= 1
        self._log_watch.forget(self._logs[key])
        self._logs[key], self._home[key] = log, log_dir
        self._watch(log)
        self._count[log_dir] += 1

    def _watch(self, log: Log) -> None:
        log.watch = self._log_watch
        self._log_watch.configured(log)
        if log.roll_flush_pending:
            self._log_watch.rolled[log] = None

    def sync_created_logs(self) -> None:
        """fsync each log dir that gained a log through `get_or_create_log(sync=False)`."""
        while self._unsynced_dirs:
            fsync_directory(self._unsynced_dirs.pop())

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close and remove the partition's log; False if there was none."""
        key = (topic, partition)
        log = self._logs.pop(key, None)
        if log is None:
            return False
        log_dir = self._home.pop(key)
        self._count[log_dir] -= 1
        self._log_watch.forget(log)
        log.close(snapshot=False)  # writes nothing: a full disk must not stop a deletion
        unique = uuid.UUID(int=self._rng.getrandbits(128), version=4).hex
        doomed = log_dir / f"{log.dir.name}.{unique}{DELETE_DIR_SUFFIX}"
        os.replace(log.dir, doomed)
        fsync_directory(log_dir)
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    # -- periodic work ---------------------------------------------------------------------------

    @property
    def log_count(self) -> int:
        return len(self._logs)

    def log_keys(self) -> list[TopicPartition]:
        """Every log's (topic, partition), for periodic work done a slice at a time."""
        return list(self._logs)

    def _chosen(self, keys: Iterable[TopicPartition] | None) -> list[tuple[TopicPartition, Log]]:
        if keys is None:
            return list(self._logs.items())
        logs = self._logs
        return [(key, log) for key in keys if (log := logs.get(key)) is not None]

    def run_retention(self, now_ms: int, keys: Iterable[TopicPartition] | None = None) -> int:
        """Apply retention to every log (or those of `keys` that still exist) and remove
        due `.deleted` files; return the segments deleted."""
        deleted = 0
        for key, log in self._chosen(keys):
            try:
                deleted += log.delete_retention_segments(now_ms)
                log.delete_pending(now_ms)
            except OSError as error:
                self._report(key, "retention", error)
        return deleted

    def expire_producers(self, now_ms: int, expiration_ms: int,
                         keys: Iterable[TopicPartition] | None = None) -> int:
        """producer.id.expiration.ms over every log (or those of `keys` that still exist);
        return how many producers went."""
        expired = 0
        for key, log in self._chosen(keys):
            try:
                expired += log.expire_producers(now_ms, expiration_ms)
            except OSError as error:
                self._report(key, "producer expiration", error)
        return expired

    def flush_due(self, now_ms: int) -> int:
        """Flush logs whose flush.ms passed or whose rolled segment awaits fsync; count them.
        Only those logs are looked at (LogWatch); a failed flush is tried again next time."""
        flushed = 0
        watch = self._log_watch
        for log in [*watch.rolled, *watch.timed]:
            try:
                flushed += log.flush_due(now_ms)
            except OSError as error:
                self._report((log.topic, log.partition), "flush", error)
            if not log.roll_flush_pending:
                watch.rolled.pop(log, None)
        return flushed

    def _report(self, key: TopicPartition, what: str, error: OSError) -> None:
        home = self._home.get(key)
        if home is not None:
            self.storage_errors.report(home, f"{what} of {key[0]}-{key[1]}", error)

    def checkpoint(self) -> None:
        """Write the three offset checkpoint files of every log dir. A log dir whose files
        cannot be written keeps its old ones (written atomically) until the next call."""
        self.write_checkpoints(self.take_checkpoints())

    def take_checkpoints(self, keys: Iterable[TopicPartition] | None = None, *,
                         into: OffsetCheckpoints | None = None) -> OffsetCheckpoints:
        """The offsets the checkpoint files would hold now (on the thread that owns the
        logs); `write_checkpoints` may then write them from any thread: formatting and
        writing 300,000 logs' lines held a broker's event loop for 2 s.

        With `keys`, only those logs (the ones still open) are taken, into `into` if given
        (a taking begun earlier, filled a slice at a time: reading 300,000 logs' offsets
        held the loop 2.8 s) or else into a new taking."""
        taken = into
        if taken is None:
            self._checkpoints_taken += 1
            taken = OffsetCheckpoints(self._checkpoints_taken, {
                log_dir: ({}, {}, {}) for log_dir in self.log_dirs})
        by_dir = taken.by_dir
        home, logs = self._home, self._logs
        for key in (logs if keys is None else keys):
            log = logs.get(key)
            if log is None:
                continue  # deleted since the keys were listed
            recovery_points, log_starts, high_watermarks = by_dir.setdefault(
                home[key], ({}, {}, {}))
            recovery_points[key] = log.recovery_point
            log_start_offset = log.log_start_offset
            if log_start_offset > log.first_segment_base_offset:
                log_starts[key] = log_start_offset
            high_watermarks[key] = log.high_watermark
        return taken

    def write_checkpoints(self, taken: OffsetCheckpoints) -> None:
        """Write `taken` unless offsets taken later were written already (by another
        thread): a file never goes back to older offsets."""
        for log_dir, error in self._write_checkpoints(taken, skip=frozenset()).items():
            self.storage_errors.report(log_dir, "writing the offset checkpoints", error)

    def _write_checkpoints(self, taken: OffsetCheckpoints,
                           skip: frozenset[Path]) -> dict[Path, OSError]:
        """Write `taken` but for the dirs in `skip`; the dirs that failed, with why."""
        failed: dict[Path, OSError] = {}
        with self._checkpoint_lock:
            if taken.generation <= self._checkpoints_written:
                return failed
            for log_dir, (recovery_points, log_starts, high_watermarks) in taken.by_dir.items():
                if log_dir in skip or not log_dir.is_dir():
                    continue
                try:
                    write_offsets_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT, recovery_points)
                    write_offsets_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT, log_starts)
                    write_offsets_checkpoint(
                        log_dir / REPLICATION_OFFSET_CHECKPOINT, high_watermarks)
                except OSError as error:
                    failed[log_dir] = error
            self._checkpoints_written = taken.generation
        return failed

    def close(self, *, broker_epoch: int = -1) -> None:
        """Clean shutdown: flush and close every log, checkpoint, mark, unlock.

        A log dir whose disk work fails on the way (a full disk) gets no clean-shutdown
        marker, so its logs are recovered at the next start; every file is still closed,
        every other dir shut down cleanly, and the failures are logged, not raised: the
        node stops either way.
        """
        unclean: set[Path] = set()
        logs = list(self._logs.items())
        for (key, _), failures in zip(logs, self._on_threads(_flush_and_close, logs),
                                      strict=True):
            for what, error in failures:
                self._close_failed(unclean, self._home[key], what, error)
        failed = self._write_checkpoints(self.take_checkpoints(), skip=frozenset(unclean))
        for log_dir, failure in failed.items():
            self._close_failed(unclean, log_dir, "writing the offset checkpoints", failure)
        marker = json.dumps({"version": 0, "brokerEpoch": broker_epoch})
        for log_dir in self._locks:
            if log_dir not in unclean:
                try:
                    write_atomically(log_dir / CLEAN_SHUTDOWN_FILE, marker)
                except OSError as error:
                    self._close_failed(unclean, log_dir, "the clean-shutdown marker", error)
        self._logs.clear()
        self._home.clear()
        self._count.clear()
        self._log_watch = LogWatch()
        self.release_locks()

    @staticmethod
    def _close_failed(unclean: set[Path], log_dir: Path, what: str, error: OSError) -> None:
        if log_dir not in unclean:
            unclean.add(log_dir)
            logging.getLogger(__name__).error(
                "shutting down log dir %s uncleanly (its logs are recovered at the next "
                "start): %s failed: %s", log_dir, what, error)

    def release_locks(self) -> None:
        """Unlock the log dirs without a clean shutdown (what a crash leaves)."""
        for fd in self._locks.values():
            os.close(fd)
        self._locks.clear()
