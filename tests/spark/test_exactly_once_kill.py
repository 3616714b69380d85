"""Issue 8 done-when 4 (slow): a streaming query with the exactly-once sink, run as its own
process (driver, JVM and Python workers in one process group), is killed with SIGKILL at
random points five times and restarted from its checkpoint; the output topic read with
read_committed then holds each input record exactly once."""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from pykraft.spark.transactional import last_written_batch, sink_ids
from pykraft.testing import LocalCluster
from tests.spark.helpers import create_topic, produce
from tests.spark.test_exactly_once import read_values

TopicName = Callable[[str], str]
PARTITIONS = 4
RECORDS = 20_000

# The query: source topic -> deterministic transform -> exactly-once sink. "--until-done"
# runs with Trigger.AvailableNow and exits when everything is written; otherwise it runs
# micro-batches back to back and prints each finished batch id, until killed.
_QUERY = """
import sys
import time
from pyspark.sql import functions as F
from pykraft.spark import local_session
bootstrap, source, sink, checkpoint, mode = sys.argv[1:6]
spark = local_session("eos-kill")
df = (spark.readStream.format("pykraft").option("kafka.bootstrap.servers", bootstrap)
      .option("subscribe", source).option("startingOffsets", "earliest")
      .option("maxOffsetsPerTrigger", "800").load())
writer = (df.select("key", F.concat(F.lit(b"out-"), "value").alias("value"))
          .writeStream.format("pykraft").option("kafka.bootstrap.servers", bootstrap)
          .option("topic", sink).option("exactlyOnce", "true")
          .option("checkpointLocation", checkpoint))
if mode == "--until-done":
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    sys.exit(0 if query.exception() is None else 1)
query = writer.trigger(processingTime="0 seconds").start()
print("started", flush=True)
last = -1
while query.isActive:
    batch = (query.lastProgress or {}).get("batchId", -1)
    if batch != last:
        print("batch", batch, flush=True)
        last = batch
    time.sleep(0.05)
"""


def _start(args: list[str], repo: Path) -> subprocess.Popen[bytes]:
    watched = args[-1] == "--run"  # it reports its batches; the final run only finishes
    return subprocess.Popen([sys.executable, "-c", _QUERY, *args], cwd=repo,
                            stdout=subprocess.PIPE if watched else subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            start_new_session=True)  # its own group: the JVM dies with it


def _wait_for_batch(process: subprocess.Popen[bytes], deadline: float) -> int:
    """Block until the query reports a finished micro-batch (or fail at the deadline);
    return its id. Reads the pipe unbuffered, so select() sees every line."""
    assert process.stdout is not None
    descriptor, pending = process.stdout.fileno(), b""
    while (remaining := deadline - time.monotonic()) > 0:
        if not select.select([descriptor], [], [], remaining)[0]:
            break
        chunk = os.read(descriptor, 4096)
        if not chunk:
            raise AssertionError("the query process ended before finishing a micro-batch")
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            words = line.split()
            if len(words) == 2 and words[0] == b"batch" and int(words[1]) >= 0:
                return int(words[1])
    raise AssertionError("the query finished no micro-batch in time")


def _checkpoint_batches(checkpoint: Path, log: str) -> set[int]:
    folder = checkpoint / log
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() \
        else set()


def _recorded(bootstrap: str, query_id: str, batch_id: int) -> int:
    """How many sink groups (Spark partitions) record this batch or a later one."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    count = 0
    for partition in range(PARTITIONS):
        group = sink_ids("pykraft-sink", query_id, partition).group_id
        listed = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], require_stable=True)[group].result()
        offsets = [tp.offset for tp in listed.topic_partitions or []]
        count += last_written_batch(offsets) >= batch_id
    return count


@pytest.mark.slow
def test_killed_and_restarted_query_writes_each_record_exactly_once(
        pykraft_cluster: LocalCluster, topic_name: TopicName, tmp_path: Path) -> None:
    bootstrap = pykraft_cluster.bootstrap_servers
    source, sink = topic_name("eos-kill-in"), topic_name("eos-kill-out")
    create_topic(bootstrap, source, partitions=PARTITIONS)
    create_topic(bootstrap, sink, partitions=PARTITIONS)
    produce(bootstrap, source, ((i % PARTITIONS, b"k%d" % i, b"v%d" % i)
                                for i in range(RECORDS)))
    checkpoint = tmp_path / "checkpoint"
    args = [bootstrap, source, sink, str(checkpoint)]
    repo = Path(__file__).resolve().parents[2]
    rng = random.Random(int(os.environ.get("EOS_KILL_SEED", "4")))
    replays: list[tuple[int, int]] = []  # (batch to be re-run, its partitions already written)
    for _ in range(5):
        query = _start([*args, "--run"], repo)
        try:
            _wait_for_batch(query, time.monotonic() + 180)
            time.sleep(rng.uniform(0.0, 2.5))  # somewhere in a later batch, or between two
        finally:
            os.killpg(query.pid, signal.SIGKILL)
            query.wait()
        pending = _checkpoint_batches(checkpoint, "offsets") - \
            _checkpoint_batches(checkpoint, "commits")
        if pending:
            batch = max(pending)
            query_id = json.loads((checkpoint / "metadata").read_text())["id"]
            replays.append((batch, _recorded(bootstrap, query_id, batch)))
    done = _checkpoint_batches(checkpoint, "commits")
    assert done and max(done) < RECORDS // 800 - 1, "the kills landed before the end"
    assert replays, "no kill left a micro-batch to replay: the test proved nothing"

    final = _start([*args, "--until-done"], repo)
    try:
        assert final.wait(timeout=300) == 0
    finally:
        if final.poll() is None:
            os.killpg(final.pid, signal.SIGKILL)
            final.wait()

    print(f"replayed batches (batch, its partitions already written): {replays}")
    values = read_values(bootstrap, sink, PARTITIONS, timeout_s=60)
    assert len(values) == RECORDS, f"replays (batch, partitions already written): {replays}"
    assert sorted(values) == sorted(b"out-v%d" % i for i in range(RECORDS))
    raw = read_values(bootstrap, sink, PARTITIONS, committed=False, timeout_s=60)
    assert len(raw) >= RECORDS  # aborted copies may be in the log, never read_committed
