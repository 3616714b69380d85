"""LocalCluster: a real pykraft node on free loopback ports in a temporary directory.

    with LocalCluster() as cluster:                 # a subprocess, like a user runs it
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})

    with LocalCluster(in_process=True) as cluster:  # a thread with its own event loop

The subprocess form is what fault tests use: `kill(signal.SIGKILL)` then `start()` again on
the same data directory. Readiness means the broker answers Metadata with itself unfenced.

Several nodes, each its own subprocess on free loopback ports, formatted with one cluster id:

    with LocalCluster(combined=3) as cluster:                # nodes 1-3: broker,controller
    with LocalCluster(controllers=3, brokers=1) as cluster:  # 1-3 controllers, 4 a broker
        cluster.bootstrap_servers                            # the brokers' listeners
        cluster.kill_node(2); cluster.restart_node(2)        # SIGKILL, then start again

Readiness of the cluster: every controller answers ApiVersions and every broker lists every
broker (all registered and unfenced) in Metadata.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from pykraft.server.storage_tool import random_uuid
from pykraft.testing.ports import free_port

_IMAGE_INFO = re.compile(r"^pykraft_metadata_image_info\{(.*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')

# __consumer_offsets takes the broker default (3, capped by the live brokers when it is
# created); the transaction state log keeps one replica until transactions use replication.
MULTI_NODE_DEFAULTS = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}


class LocalCluster:
    def __init__(
        self,
        *,
        in_process: bool = False,
        data_dir: str | Path | None = None,
        configs: Mapping[str, str] | None = None,
        node_id: int = 1,
        startup_timeout_s: float = 30.0,
        stop_timeout_s: float = 60.0,
        combined: int = 0,
        controllers: int = 0,
        brokers: int = 0,
    ) -> None:
        """One combined node by default; `combined`, or `controllers` and `brokers`, make
        a cluster of that many node processes (node ids 1.., controllers first)."""
        self.nodes: dict[int, LocalCluster] = {}
        self.metrics_port = -1  # a node of a multi-node cluster serves /metrics here
        self.roles = "broker,controller"
        self.in_process = in_process
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is None:
            self._tempdir = tempfile.TemporaryDirectory(prefix="pykraft-")
            data_dir = self._tempdir.name
        self.data_dir = Path(data_dir)
        self.node_id = node_id
        self.broker_port = free_port()
        self.controller_port = free_port()
        self.extra_configs = dict(configs or {})
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.cluster_id = random_uuid()
        self.process: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._node: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.log_path = self.data_dir / "server.log"
        self.config_path = self.data_dir / "server.properties"
        if combined or controllers or brokers:
            self._make_nodes(combined, controllers, brokers)
        else:
            self._write_config()

    # -- several nodes ----------------------------------------------------------------

    @property
    def multi_node(self) -> bool:
        return bool(self.nodes)

    def _make_nodes(self, combined: int, controllers: int, brokers: int) -> None:
        if self.in_process:
            raise ValueError("a LocalCluster of several nodes runs them as subprocesses")
        if combined and (controllers or brokers):
            raise ValueError("give combined=, or controllers= and brokers=, not both")
        if not combined and (controllers < 1 or brokers < 1):
            raise ValueError("a cluster needs at least one controller and one broker")
        shapes = (["broker,controller"] * combined if combined
                  else ["controller"] * controllers + ["broker"] * brokers)
        for index, roles in enumerate(shapes, start=1):
            node = LocalCluster(data_dir=self.data_dir / f"node-{index}", node_id=index,
                                startup_timeout_s=self.startup_timeout_s)
            node.roles = roles
            node.cluster_id = self.cluster_id
            self.nodes[index] = node
        voters = ",".join(f"{i}@127.0.0.1:{n.controller_port}"
                          for i, n in self.nodes.items() if "controller" in n.roles)
        for node in self.nodes.values():
            node.metrics_port = free_port()
            node.extra_configs = {"controller.quorum.voters": voters,
                                  **_role_configs(node), **MULTI_NODE_DEFAULTS,
                                  "pykraft.metrics.listener": f"127.0.0.1:{node.metrics_port}",
                                  **self.extra_configs}
            node._write_config()

    def set_node_configs(self, node_id: int, configs: Mapping[str, str]) -> None:
        """Override keys of one node of a multi-node cluster (before it starts, or before a
        restart): e.g. its own listeners, or its own address for the controllers."""
        node = self.nodes[node_id]
        node.extra_configs.update(configs)
        node._write_config()

    @property
    def broker_ids(self) -> list[int]:
        return [i for i, n in self.nodes.items() if "broker" in n.roles]

    @property
    def controller_ids(self) -> list[int]:
        return [i for i, n in self.nodes.items() if "controller" in n.roles]

    def node(self, node_id: int) -> LocalCluster:
        """One node of a multi-node cluster (its ports, data dir, log, process)."""
        return self.nodes[node_id]

    def running(self, node_id: int) -> bool:
        process = self.nodes[node_id].process
        return process is not None and process.poll() is None

    def kill_node(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Signal one node's process (SIGKILL by default) and wait for it to exit."""
        self.nodes[node_id].kill(sig)

    def restart_node(self, node_id: int, *, wait: bool = True) -> None:
        """Start a stopped node again on its data directory (and wait until it is ready)."""
        node = self.nodes[node_id]
        if self.running(node_id):
            raise RuntimeError(f"node {node_id} is running")
        node._start_process()
        if wait:
            node.wait_ready()

    def metadata_image(self, node_id: int) -> tuple[int, str]:
        """(offset, digest) of one running node's metadata image, from its /metrics
        (`pykraft_metadata_image_info`); equal digests at equal offsets mean equal images."""
        url = f"http://127.0.0.1:{self.nodes[node_id].metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        found = _IMAGE_INFO.search(text)
        if found is None:
            raise RuntimeError(f"node {node_id} reports no metadata image")
        labels = dict(_LABEL.findall(found.group(1)))
        return int(labels["offset"]), labels["digest"]

    def active_controller(self) -> int:
        """The metadata quorum's leader as a running controller reports it (-1 if none)."""
        for node_id in self.controller_ids:
            if self.running(node_id):
                try:
                    return quorum_leader(f"127.0.0.1:{self.nodes[node_id].controller_port}")
                except OSError:
                    continue
        return -1

    def _wait_cluster_ready(self) -> None:
        for node in self.nodes.values():
            node.wait_ready()
        expected = set(self.broker_ids)
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            seen = [set(_live_brokers(self.nodes[i].bootstrap_servers)) for i in expected]
            if all(ids == expected for ids in seen):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"brokers see {seen}, expected {sorted(expected)}")
            time.sleep(0.1)

    @property
    def bootstrap_servers(self) -> str:
        if self.nodes:
            return ",".join(f"127.0.0.1:{self.nodes[i].broker_port}" for i in self.broker_ids)
        return f"127.0.0.1:{self.broker_port}"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        values = {
            "node.id": str(self.node_id),
            "process.roles": self.roles,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.broker_port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.broker_port}",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": f"{self.node_id}@127.0.0.1:{self.controller_port}",
            "log.dirs": str(self.log_dir),
        }
        values.update(self.extra_configs)
        text = "".join(f"{key}={value}\n" for key, value in values.items())
        self.config_path.write_text(text, encoding="utf-8")

    # -- lifecycle --------------------------------------------------------------------

    def format(self) -> None:
        if (self.log_dir / "meta.properties").exists():
            return
        result = subprocess.run(
            [sys.executable, "-m", "pykraft", "storage", "format", "--config",
             str(self.config_path), f"--cluster-id={self.cluster_id}"],
            capture_output=True, text=True, timeout=60,
        )
        if result.returncode != 0:
            raise RuntimeError(f"storage format failed: {result.stderr.strip()}")

    def start(self) -> LocalCluster:
        if self.nodes:
            for node in self.nodes.values():
                node.format()
            for node_id in self.nodes:
                if not self.running(node_id):
                    self.nodes[node_id]._start_process()
            self._wait_cluster_ready()
            return self
        self.format()
        if self.in_process:
            self._start_thread()
        else:
            self._start_process()
        self.wait_ready()
        return self

    def _start_process(self) -> None:
        log_file = self.log_path.open("ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pykraft", "server", "start", str(self.config_path)],
            stdout=log_file, stderr=subprocess.STDOUT, env=env,
        )
        log_file.close()

    def _start_thread(self) -> None:
        from pykraft.server.config import ServerConfig
        from pykraft.server.node import Node

        config = ServerConfig.load(self.config_path)
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._node = Node(config)
                loop.run_until_complete(self._node.start())
                started.set()
                loop.run_until_complete(self._node.wait_stopped())
            except BaseException as error:  # surfaced to the starting thread
                failure.append(error)
                started.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="pykraft-node", daemon=True)
        self._thread.start()
        started.wait(self.startup_timeout_s)
        if failure:
            raise failure[0]

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        last_error = "not started"
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"pykraft exited with {self.process.returncode}:\n{self.tail_log()}")
            try:
                if "broker" not in self.roles:
                    if _controller_ready(f"127.0.0.1:{self.controller_port}"):
                        return
                elif _broker_ready(self.bootstrap_servers, self.node_id):
                    return
            except Exception as error:  # noqa: BLE001 - retried until the deadline
                last_error = str(error)
            time.sleep(0.1)
        raise TimeoutError(f"pykraft not ready after {self.startup_timeout_s}s "
                           f"({last_error}):\n{self.tail_log()}")

    def tail_log(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send a signal to the node process (subprocess mode) and wait for it to exit."""
        if self.process is None:
            raise RuntimeError("kill() needs a subprocess LocalCluster")
        self.process.send_signal(sig)
        self.process.wait(timeout=60)
        self.process = None

    def stop(self) -> None:
        # broker-only nodes first, all at once, while the controllers still run: each
        # broker's controlled shutdown needs a quorum of them to commit it (signalled
        # together, the controllers were gone at once and every broker waited out its
        # controller channel, 15 s); then the controllers and combined nodes, all at once
        # A node that has not exited `stop_timeout_s` after its SIGTERM is killed, the
        # others are still stopped, and then the timeout is raised: a broker of 100,000
        # partitions outlasted the 60 s once, and the controllers after it were left
        # running (their data directory deleted) into the next benchmark run.
        running = [n for n in self.nodes.values() if n.process is not None]
        brokers = [n for n in running if "controller" not in n.roles]
        killed: list[int] = []
        for group in (brokers, [n for n in running if n not in brokers]):
            for node in group:
                assert node.process is not None
                node.process.send_signal(signal.SIGTERM)
            for node in group:
                assert node.process is not None
                try:
                    node.process.wait(timeout=self.stop_timeout_s)
                    node.process = None
                except subprocess.TimeoutExpired:
                    node.kill()
                    killed.append(node.node_id)
        if killed:
            tails = "".join(f"\n--- node {i}'s log ---\n{self.nodes[i].tail_log()}"
                            for i in killed)
            raise TimeoutError(f"node(s) {killed} did not stop within {self.stop_timeout_s} s "
                               f"of SIGTERM and were killed{tails}")
        if self.process is not None:
            self.kill(signal.SIGTERM)
        if self._thread is not None and self._loop is not None and self._node is not None:
            asyncio.run_coroutine_threadsafe(self._node.stop(), self._loop).result(60)
            self._thread.join(60)
            self._thread = None

    def close(self) -> None:
        try:
            self.stop()
        finally:
            if self._tempdir is not None:
                self._tempdir.cleanup()

    def __enter__(self) -> LocalCluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _broker_ready(bootstrap: str, node_id: int) -> bool:
    """Ask the broker for Metadata over a plain socket: ready once it lists itself."""
    from kio.schema.metadata.v12.request import MetadataRequest

    from pykraft.testing.wire import WireClient

    request = MetadataRequest(topics=(), allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
    with WireClient(bootstrap, timeout_s=2, client_id="local-cluster") as client:
        response = client.request(3, 12, request)
    return any(broker.node_id == node_id for broker in response.brokers)


def _role_configs(node: LocalCluster) -> dict[str, str]:
    """listeners for a node of a multi-node cluster, by its roles."""
    broker = f"PLAINTEXT://127.0.0.1:{node.broker_port}"
    controller = f"CONTROLLER://127.0.0.1:{node.controller_port}"
    if node.roles == "controller":
        return {"listeners": controller, "advertised.listeners": ""}
    if node.roles == "broker":
        return {"listeners": broker, "advertised.listeners": broker}
    return {"listeners": f"{broker},{controller}", "advertised.listeners": broker}


def _live_brokers(bootstrap: str) -> list[int]:
    from kio.schema.metadata.v12.request import MetadataRequest

    from pykraft.testing.wire import WireClient

    request = MetadataRequest(topics=(), allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
    with WireClient(bootstrap, timeout_s=2, client_id="local-cluster") as client:
        response = client.request(3, 12, request)
    return [broker.node_id for broker in response.brokers]


def _controller_ready(address: str) -> bool:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    from pykraft.testing.wire import WireClient

    request = ApiVersionsRequest(client_software_name="local-cluster",
                                 client_software_version="1")
    with WireClient(address, timeout_s=2, client_id="local-cluster") as client:
        response = client.request(18, 3, request)
    return bool(response.api_keys)


def quorum_leader(address: str, *, timeout_s: float = 2, client_id: str = "local-cluster") -> int:
    """The quorum leader's node id, as the controller at `address` knows it (DescribeQuorum;
    -1 when it knows none)."""
    from kio.schema.describe_quorum.v1.request import (
        DescribeQuorumRequest,
        PartitionData,
        TopicData,
    )
    from kio.schema.types import TopicName
    from kio.static.primitive import i32

    from pykraft.testing.wire import WireClient

    request = DescribeQuorumRequest(topics=(TopicData(
        topic_name=TopicName("__cluster_metadata"),
        partitions=(PartitionData(partition_index=i32(0)),)),))
    with WireClient(address, timeout_s=timeout_s, client_id=client_id) as client:
        response = client.request(55, 1, request)
    return int(response.topics[0].partitions[0].leader_id)


@contextmanager
def local_cluster(**kwargs: Any) -> Iterator[LocalCluster]:
    with LocalCluster(**kwargs) as cluster:
        yield cluster
