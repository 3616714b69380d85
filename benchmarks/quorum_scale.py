"""The metadata quorum alone at scale: a controlled shutdown of N partitions' worth.

3 controllers and 1 broker (separate processes, on loopback; the broker only folds the
metadata: it hosts no partition) and 3 stand-in brokers that exist only as registrations
made over the active controller's listener (BrokerRegistration, then a BrokerHeartbeat
every 2 s from a thread, at Kafka's default session timeout). The stand-ins own every
partition: `--partitions` in topics of 100, RF 3, leaders spread evenly over them, created
through the controller listener 10 topics a request. Then the last stand-in asks for a
controlled shutdown (BrokerHeartbeat want_shut_down, again every 0.2 s until it is told to
shut down): the active controller moves its leaderships and takes it out of every ISR,
N partition changes.

This is metadata_scale.py's controlled shutdown without the brokers' share: how long the
controllers take to decide, append, replicate and commit the changes, and whether the quorum
keeps its leader meanwhile. Reported: creation time, the shutdown until the stand-in was
told to shut down (all its partition changes committed), the quorum's leader changes from
the shutdown to --settle-s after it and the live stand-ins the controller fenced (from the
controllers' logs), the stand-ins' heartbeats that failed (30 s without an answer) or were
answered fenced or timed out (REQUEST_TIMED_OUT: it waited half a heartbeat interval behind
the shutdown), and the controllers' RSS. A run that fails keeps the nodes' logs in
$TMPDIR/quorum_scale-logs-<time>/.

    .venv/bin/python benchmarks/quorum_scale.py [--partitions 1000000] [--settle-s 20]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import platform
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4 import request as reg
from kio.schema.create_topics.v7 import request as ct
from kio.schema.errors import ErrorCode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pykraft.protocol.api import ApiKey  # noqa: E402
from pykraft.testing import LocalCluster  # noqa: E402
from pykraft.testing.wire import WireClient  # noqa: E402

STAND_INS = (101, 102, 103)
LEAVING = STAND_INS[-1]
PER_TOPIC = 100
TOPICS_PER_REQUEST = 10
HEARTBEAT_S = 2.0
NEW_LEADER = "-> Leader("
GC_PAUSE = "garbage collection of generation 2 paused the node for"


class StandIns:
    """Brokers that are only registrations, heartbeating to the active controller."""

    def __init__(self, address: str, cluster_id: str) -> None:
        self.address = address
        self.cluster_id = cluster_id
        self.epochs: dict[int, int] = {}
        self.alive = set(STAND_INS)  # heartbeated by the thread (`keep_alive`)
        self.failed_heartbeats = 0
        self.fenced_answers = 0
        self.timed_out_answers = 0  # REQUEST_TIMED_OUT: it waited behind other operations
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register(self, wire: WireClient) -> None:
        versions = wire.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
            client_software_name="quorum-scale", client_software_version="1"))
        features = tuple(reg.Feature(name=f.name, min_supported_version=f.min_version_level,
                                     max_supported_version=f.max_version_level)
                         for f in versions.finalized_features)
        for broker_id in STAND_INS:
            answer = wire.request(ApiKey.BROKER_REGISTRATION, 4, reg.BrokerRegistrationRequest(
                broker_id=broker_id, cluster_id=self.cluster_id, incarnation_id=uuid.uuid4(),
                listeners=(reg.Listener(name="PLAINTEXT", host="127.0.0.1", port=1,
                                        security_protocol=0),),
                features=features, rack=None, is_migrating_zk_broker=False,
                log_dirs=(uuid.uuid4(),), previous_broker_epoch=-1))
            if answer.error_code != ErrorCode.none:
                raise RuntimeError(f"registering stand-in {broker_id}: {answer}")
            self.epochs[broker_id] = int(answer.broker_epoch)
        deadline = time.monotonic() + 30
        while any(self.heartbeat(wire, b).is_fenced for b in STAND_INS):
            if time.monotonic() > deadline:
                raise TimeoutError("the stand-ins were not unfenced within 30 s")
            time.sleep(0.2)

    def heartbeat(self, wire: WireClient, broker_id: int, *, shut_down: bool = False) -> Any:
        return wire.request(ApiKey.BROKER_HEARTBEAT, 1, BrokerHeartbeatRequest(
            broker_id=broker_id, broker_epoch=self.epochs[broker_id],
            current_metadata_offset=1 << 40, want_fence=False, want_shut_down=shut_down))

    def keep_alive(self) -> None:
        """Heartbeat the stand-ins in `alive` every HEARTBEAT_S from a thread until `stop`."""
        def run() -> None:
            wire = WireClient(self.address, timeout_s=30)
            while not self._stop.is_set():
                for broker_id in sorted(self.alive):
                    try:
                        answer = self.heartbeat(wire, broker_id)
                        if answer.error_code == ErrorCode.request_timed_out:
                            self.timed_out_answers += 1
                        elif answer.is_fenced:
                            self.fenced_answers += 1
                    except (OSError, ConnectionError):
                        self.failed_heartbeats += 1
                        wire.close()
                        wire = WireClient(self.address, timeout_s=30)
                self._stop.wait(HEARTBEAT_S)
            wire.close()

        self._thread = threading.Thread(target=run, name="stand-in heartbeats", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)


def create(wire: WireClient, partitions: int) -> None:
    """Topics of PER_TOPIC partitions on the stand-ins, leaders spread evenly."""
    names = [f"q-{index:06d}" for index in range(partitions // PER_TOPIC)]
    assignments = tuple(
        ct.CreatableReplicaAssignment(
            partition_index=index,
            broker_ids=tuple(STAND_INS[(index + k) % len(STAND_INS)] for k in range(3)))
        for index in range(PER_TOPIC))
    for start in range(0, len(names), TOPICS_PER_REQUEST):
        request = ct.CreateTopicsRequest(
            topics=tuple(ct.CreatableTopic(name=name, num_partitions=-1, replication_factor=-1,
                                           assignments=assignments, configs=())
                         for name in names[start:start + TOPICS_PER_REQUEST]),
            timeout=datetime.timedelta(seconds=60), validate_only=False)
        for topic in wire.request(ApiKey.CREATE_TOPICS, 7, request).topics:
            if topic.error_code != ErrorCode.none:
                raise RuntimeError(f"creating {topic.name}: {topic.error_message}")


def rss_mib(cluster: LocalCluster, node_id: int) -> float:
    process = cluster.node(node_id).process
    assert process is not None
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def controller_log(cluster: LocalCluster, *marks: str) -> list[str]:
    """The controllers' log lines that hold one of `marks`, node by node."""
    return [f"node {node_id}: {line}" for node_id in cluster.controller_ids
            for line in cluster.node(node_id).log_path.read_text(errors="replace").splitlines()
            if any(mark in line for mark in marks)]


def leader_changes(cluster: LocalCluster) -> list[str]:
    """The controllers' log lines of a node becoming the quorum's leader."""
    return controller_log(cluster, NEW_LEADER)


@contextlib.contextmanager
def logs_kept_on_failure(cluster: LocalCluster) -> Iterator[None]:
    """A run that fails keeps its nodes' logs (the cluster's directory is deleted) in
    $TMPDIR/quorum_scale-logs-<time>/."""
    try:
        yield
    except BaseException:
        kept = Path(tempfile.gettempdir()) / time.strftime("quorum_scale-logs-%Y%m%d-%H%M%S")
        kept.mkdir(parents=True, exist_ok=True)
        for node_id, node in cluster.nodes.items():
            for path in node.log_path.parent.glob(node.log_path.name + "*"):
                shutil.copy(path, kept / f"node-{node_id}-{path.name}")
        print(f"# the nodes' logs are kept in {kept}", file=sys.stderr, flush=True)
        raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1_000_000)
    parser.add_argument("--settle-s", type=float, default=20.0,
                        help="how long after the shutdown to watch for leader changes")
    args = parser.parse_args()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# {platform.node()} {platform.machine()}, {now}; 3 controllers + 1 broker, "
          f"3 stand-in brokers, {PER_TOPIC} partitions per topic, RF 3")
    with LocalCluster(controllers=3, brokers=1, startup_timeout_s=120,
                      stop_timeout_s=300) as cluster, logs_kept_on_failure(cluster):
        active = cluster.active_controller()
        address = f"127.0.0.1:{cluster.node(active).controller_port}"
        stand_ins = StandIns(address, cluster.cluster_id)
        with WireClient(address, timeout_s=120) as wire:
            stand_ins.register(wire)
            stand_ins.keep_alive()
            started = time.monotonic()
            create(wire, args.partitions)
            created_s = time.monotonic() - started
            print(f"# created {args.partitions:,} partitions in {created_s:.1f} s", flush=True)
            before = len(leader_changes(cluster))
            stand_ins.alive.discard(LEAVING)  # its heartbeats ask to shut down from now on
            started = time.monotonic()
            told = False
            while not told and time.monotonic() - started < 600:
                answer = stand_ins.heartbeat(wire, LEAVING, shut_down=True)
                if answer.error_code == ErrorCode.request_timed_out:  # waited: ask again
                    stand_ins.timed_out_answers += 1
                elif answer.error_code != ErrorCode.none:  # e.g. the quorum changed leader
                    for line in leader_changes(cluster)[before:]:
                        print(f"# {line}")
                    raise RuntimeError(f"the shutdown's heartbeat was answered {answer}")
                told = bool(answer.should_shut_down)
                time.sleep(0 if told else 0.2)
            shutdown_s = time.monotonic() - started
            if not told:
                raise TimeoutError("the stand-in was not told to shut down within 600 s")
            print(f"# controlled shutdown decided and committed in {shutdown_s:.1f} s",
                  flush=True)
        time.sleep(args.settle_s)
        stand_ins.stop()
        changes = leader_changes(cluster)[before:]
        live_fenced = controller_log(cluster, *(
            f"broker {broker_id} fenced" for broker_id in STAND_INS if broker_id != LEAVING))
        for line in controller_log(cluster, "WARNING", "in controlled shutdown", "fenced"):
            print(f"# {line}")  # what the controllers said: why it took as long as it did
        for node_id in cluster.controller_ids:
            pauses = [int(found.group(1)) for line in controller_log(cluster, GC_PAUSE)
                      if line.startswith(f"node {node_id}:")
                      and (found := re.search(GC_PAUSE + r" (\d+) ms", line))]
            print(f"# node {node_id}: {len(pauses)} full collections of 100 ms or more, "
                  f"{sum(pauses) / 1000:.1f} s in all, the longest {max(pauses, default=0)} ms")
        rss = max(rss_mib(cluster, node_id) for node_id in cluster.controller_ids)
        for line in changes:
            print(f"# {line}")
        print("| partitions | create s | partitions/s | controlled shutdown s "
              "| quorum leader changes | live stand-ins fenced | stand-in heartbeats "
              "failed / answered fenced / timed out | controller RSS MiB |")
        print("|---|---|---|---|---|---|---|---|")
        print(f"| {args.partitions:,} | {created_s:.1f} | {args.partitions / created_s:,.0f} "
              f"| {shutdown_s:.1f} | {len(changes)} | {len(live_fenced)} "
              f"| {stand_ins.failed_heartbeats} / {stand_ins.fenced_answers} "
              f"/ {stand_ins.timed_out_answers} | {rss:.0f} |")


if __name__ == "__main__":
    main()
