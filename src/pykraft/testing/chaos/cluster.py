"""ChaosCluster: real pykraft node processes, each in its own network namespace on a private
bridge, and the faults a campaign injects into them.

    cluster = ChaosCluster(root_dir, combined=3, brokers=2, configs={"min.insync.replicas": "2"})
    cluster.start()                       # root only; tears down on any failure, and at exit
    Producer({"bootstrap.servers": cluster.bootstrap_servers})   # from this (host) process
    cluster.partition([{1, 4}, {2, 3, 5}]); cluster.heal()
    cluster.pause(2); cluster.resume(2); cluster.kill(3); cluster.restart(3)
    cluster.fill_disk(4); cluster.free_disk(4); cluster.clock_jump(1, -30.0)  # 30 s behind
    cluster.fail_disk(4); cluster.heal_disk(4)   # node 4's log dir returns EIO, then works
    cluster.close()

Nodes 1..combined are `broker,controller` (the quorum's voters), the rest `broker`. Node i
listens on 10.x.y.(10+i):9092 (PLAINTEXT) and :9093 (CONTROLLER) in namespace
`<prefix>n<i>`; the clients run on the host, 10.x.y.1 on the bridge `<prefix>b`. The prefix
is `pk<pid>-<k>` (k counts clusters of this process, mod 10): every namespace, link and
tmpfs mount the harness makes carries it, and `start()` removes those of runs whose pid is
dead. Faults: network.py (nftables, tbf), disk.py (tmpfs; EIO through eiofs.py, a FUSE
passthrough, on the `eio_nodes`: the broker-only ones by default), clock.py (libfaketime);
processes are signalled here as whole process groups.

Each node's log dir is on its own tmpfs (`disk_bytes`, default 512 MiB); its metadata log is
kept off it (`metadata.log.dir` on the real disk), as an operator keeps it on its own disk,
so a full data disk does not stop the quorum.

Every subprocess call has a timeout, every wait a deadline, every loop a bound.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykraft.server.storage_tool import random_uuid
from pykraft.testing.chaos import disk, network
from pykraft.testing.chaos.clock import FakeClock
from pykraft.testing.chaos.network import ChaosError, NetworkFaults, NotSupported
from pykraft.testing.local_cluster import quorum_leader

__all__ = ["ChaosCluster", "ChaosError", "ChaosNode", "NotSupported"]

BROKER_PORT = 9092
CONTROLLER_PORT = 9093
DISK_BYTES_DEFAULT = 512 * 1024 * 1024
REQUEST_TIMEOUT_S = 2.0  # one Metadata / DescribeQuorum question to one node
STOP_TIMEOUT_S = 10.0
FORMAT_TIMEOUT_S = 120.0  # SIGTERM, then SIGKILL after this long
POLL_INTERVAL_S = 0.2
PREFIX = re.compile(r"^pk(\d+)-\d")
_cluster_numbers = itertools.count()


@dataclass
class ChaosNode:
    node_id: int
    roles: str
    address: str
    netns: str
    veth: str
    dir: Path  # config, metadata log, faketime files
    disk: Path  # the tmpfs mount point
    log_path: Path  # the node's stdout and stderr, appended across restarts
    configs: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False
    eio: bool = False  # its log dir is on eiofs (fail_disk works)
    eio_process: subprocess.Popen[bytes] | None = None
    disk_failing: bool = False  # fail_disk'ed and not healed
    clock_offset_s: float = 0.0  # its wall clock's offset from the real time (clock_jump)

    @property
    def eio_mount(self) -> Path:
        """Where eiofs serves `disk` (for an `eio` node)."""
        return self.dir / "eio"

    @property
    def log_dir(self) -> Path:
        return (self.eio_mount if self.eio else self.disk) / "logs"

    @property
    def config_path(self) -> Path:
        return self.dir / "server.properties"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    def tail_log(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class ChaosCluster:
    def __init__(self, root_dir: str | Path, *, combined: int = 3, brokers: int = 2,
                 configs: Mapping[str, str] | None = None,
                 disk_bytes: int = DISK_BYTES_DEFAULT,
                 startup_timeout_s: float = 90.0, fake_clock: bool = True,
                 eio_nodes: Collection[int] | None = None) -> None:
        """`fake_clock=False` starts the nodes without libfaketime (clock_jump then raises
        NotSupported): it costs each idle node about 1% of a core. `eio_nodes`: the nodes
        whose log dir is served through eiofs, so that fail_disk can make it return EIO;
        by default the broker-only nodes (a Python FUSE passthrough costs throughput, and
        the quorum's voters keep their plain tmpfs); () for none."""
        if combined < 1 or brokers < 0 or combined + brokers > 99:
            raise ChaosError("a chaos cluster has 1..99 nodes, at least one combined")
        self.root_dir = Path(root_dir).absolute()
        self.pid = os.getpid()
        self.prefix = f"pk{self.pid}-{next(_cluster_numbers) % 10}"
        self.bridge = f"{self.prefix}b"
        self.configs = dict(configs or {})
        self.disk_bytes = disk_bytes
        self.startup_timeout_s = startup_timeout_s
        self.cluster_id = random_uuid()
        self.nodes: dict[int, ChaosNode] = {}
        self.subnet: tuple[int, int] | None = None
        self.network: NetworkFaults | None = None
        self.clock = FakeClock(self.root_dir / "clock", enabled=fake_clock)
        self._combined = combined
        self._brokers = brokers
        self.eio_nodes = (frozenset(range(combined + 1, combined + brokers + 1))
                          if eio_nodes is None else frozenset(eio_nodes))
        if not self.eio_nodes <= set(range(1, combined + brokers + 1)):
            raise ChaosError(f"eio_nodes {sorted(self.eio_nodes)} are not all node ids")
        self._started = False
        self._closed = False

    # -- addresses ----------------------------------------------------------------------

    @property
    def host_address(self) -> str:
        if self.subnet is None:
            raise ChaosError("the cluster is not started")
        return f"10.{self.subnet[0]}.{self.subnet[1]}.1"

    @property
    def broker_ids(self) -> list[int]:
        return [i for i, node in self.nodes.items() if node.is_broker]

    @property
    def controller_ids(self) -> list[int]:
        return [i for i, node in self.nodes.items() if node.is_controller]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.nodes[i].address}:{BROKER_PORT}" for i in self.broker_ids)

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Check prerequisites, sweep a crashed run's leftovers, make the bridge, namespaces
        and mounts, format and start every node, and wait until the cluster is healthy.
        Anything made is torn down again when this fails or is interrupted."""
        if self._started:
            raise ChaosError("a ChaosCluster starts once")
        self._started = True
        check_prerequisites()
        if self.eio_nodes:
            disk.check_eio_prerequisites()
        atexit.register(self.close)
        try:
            sweep_leftovers()
            self._make_network()
            self._make_nodes()
            self._format_all()
            for node in self.nodes.values():
                self._start_process(node)
            self.wait_healthy(self.startup_timeout_s)
        except BaseException as failure:
            try:
                self.close()
            except ChaosError as teardown:  # the start's own failure is the one to raise
                failure.add_note(f"and the teardown after it: {teardown}")
            raise

    def _make_network(self) -> None:
        self.subnet = network.pick_subnet(self.pid)
        x, y = self.subnet
        self.network = NetworkFaults(host_address=self.host_address)
        network.create_bridge(self.bridge, f"{self.host_address}/24")
        shapes = ["broker,controller"] * self._combined + ["broker"] * self._brokers
        for node_id, roles in enumerate(shapes, start=1):
            node_dir = self.root_dir / f"node-{node_id}"
            node = ChaosNode(node_id=node_id, roles=roles, address=f"10.{x}.{y}.{10 + node_id}",
                             netns=f"{self.prefix}n{node_id}", veth=f"{self.prefix}v{node_id}",
                             dir=node_dir, disk=node_dir / "disk",
                             log_path=self.root_dir / f"node-{node_id}.log",
                             eio=node_id in self.eio_nodes)
            self.nodes[node_id] = node
            try:
                network.create_node_netns(node.netns, node.veth, self.bridge,
                                          f"{node.address}/24")
            except ChaosError as error:
                if node_id == 1:
                    raise ChaosError(f"cannot create a network namespace: {error}") from error
                raise
            self.network.add_node(node_id, node.netns, node.address, node.veth)
        self.network.apply()  # an empty `inet chaos` table in every namespace: nft works

    def _make_nodes(self) -> None:
        voters = ",".join(f"{i}@{self.nodes[i].address}:{CONTROLLER_PORT}"
                          for i in self.controller_ids)
        for node in self.nodes.values():
            node.dir.mkdir(parents=True, exist_ok=True)
            disk.mount_tmpfs(node.disk, self.prefix, self.disk_bytes)
            if node.eio:
                node.eio_process = disk.mount_eio(node.disk, node.eio_mount, self.prefix,
                                                  node.dir / "eiofs.log")
            broker = f"PLAINTEXT://{node.address}:{BROKER_PORT}"
            controller = f"CONTROLLER://{node.address}:{CONTROLLER_PORT}"
            node.configs = {
                "node.id": str(node.node_id),
                "process.roles": node.roles,
                "listeners": f"{broker},{controller}" if node.is_controller else broker,
                "advertised.listeners": broker,
                "controller.listener.names": "CONTROLLER",
                "controller.quorum.voters": voters,
                "log.dirs": str(node.log_dir),
                "metadata.log.dir": str(node.dir / "metadata"),
                **self.configs,
            }
            self._write_config(node)

    def _write_config(self, node: ChaosNode) -> None:
        text = "".join(f"{key}={value}\n" for key, value in node.configs.items())
        node.config_path.write_text(text, encoding="utf-8")

    def _format_all(self) -> None:
        """`pykraft storage format` every node, all at once (each is mostly Python's start)."""
        formats = {node.node_id: subprocess.Popen(
            [sys.executable, "-m", "pykraft", "storage", "format", "--config",
             str(node.config_path), f"--cluster-id={self.cluster_id}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for node in self.nodes.values()}
        failures = []
        deadline = time.monotonic() + FORMAT_TIMEOUT_S
        try:
            for node_id, process in formats.items():
                output, _ = process.communicate(timeout=max(0.0, deadline - time.monotonic()))
                if process.returncode != 0:
                    failures.append(f"node {node_id}: {output.strip()}")
        finally:
            for process in formats.values():
                if process.poll() is None:
                    process.kill()
                    process.wait(timeout=STOP_TIMEOUT_S)
        if failures:
            raise ChaosError("pykraft storage format failed: " + "; ".join(failures))

    def _start_process(self, node: ChaosNode) -> None:
        env = self.node_environment(node.node_id)
        with node.log_path.open("ab") as log_file:
            node.process = subprocess.Popen(
                network.in_netns(node.netns, [sys.executable, "-m", "pykraft", "server",
                                              "start", str(node.config_path)]),
                stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        node.paused = False

    def close(self) -> None:
        """Stop every node (SIGTERM, SIGKILL after STOP_TIMEOUT_S), unmount the tmpfs
        mounts, delete the namespaces and the bridge. Idempotent; safe after a partial
        start; also run at exit."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        problems: list[str] = []
        for node in self.nodes.values():
            if node.disk_failing:  # a healthy disk lets the node shut down quickly
                try:
                    self.heal_disk(node.node_id)
                except ChaosError:
                    pass  # eiofs is gone: the node is stopped anyway
        try:
            self._stop_all()
        finally:
            for node in self.nodes.values():
                steps: list[tuple[Callable[[Any], None], Any]] = [
                    (self._stop_eio, node), (disk.unmount, node.disk),
                    (network.delete_netns, node.netns), (network.delete_link, node.veth)]
                for step, argument in steps:
                    try:
                        step(argument)
                    except ChaosError as error:
                        problems.append(str(error))
            try:
                network.delete_link(self.bridge)
            except ChaosError as error:
                problems.append(str(error))
        if problems:
            raise ChaosError("teardown left something behind: " + "; ".join(problems))

    @staticmethod
    def _stop_eio(node: ChaosNode) -> None:
        if node.eio:
            disk.stop_eio(node.eio_process, node.eio_mount)
            node.eio_process = None

    def _stop_all(self) -> None:
        """Brokers first, while the controllers still run (their controlled shutdown needs
        the quorum), then the rest; faults are lifted first so shutdown can proceed."""
        if self.network is not None:
            try:
                self.network.heal()
            except ChaosError:
                pass  # a namespace may already be gone: the processes are killed anyway
        running = [node for node in self.nodes.values() if node.running]
        brokers_only = [node for node in running if not node.is_controller]
        for group in (brokers_only, [node for node in running if node.is_controller]):
            for node in group:
                self._signal(node, signal.SIGTERM)
                self._signal(node, signal.SIGCONT)  # a paused node must run to exit
            # the last controller standing waits for a quorum that is gone: it is killed
            deadline = time.monotonic() + (STOP_TIMEOUT_S / 2 if group and group[0].is_controller
                                           else STOP_TIMEOUT_S)
            for node in group:
                self._wait_exit(node, max(0.0, deadline - time.monotonic()))

    def _wait_exit(self, node: ChaosNode, timeout_s: float) -> None:
        if node.process is None:
            return
        try:
            node.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._signal(node, signal.SIGKILL)
            node.process.wait(timeout=STOP_TIMEOUT_S)
        node.process = None
        node.paused = False

    def _signal(self, node: ChaosNode, sig: signal.Signals) -> None:
        if node.process is None:
            return
        try:
            os.killpg(node.process.pid, sig)
        except ProcessLookupError:
            pass  # already gone

    def __enter__(self) -> ChaosCluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- state ----------------------------------------------------------------------------

    def node(self, node_id: int) -> ChaosNode:
        if node_id not in self.nodes:
            raise ChaosError(f"no node {node_id} (nodes are {sorted(self.nodes)})")
        return self.nodes[node_id]

    def wait_healthy(self, timeout_s: float) -> None:
        """Every node running, the quorum has a leader, every broker lists every broker
        (registered and unfenced) in Metadata; ChaosError with the logs' tails otherwise."""
        deadline = time.monotonic() + timeout_s
        last = "not checked yet"
        for _ in range(int(timeout_s / POLL_INTERVAL_S) + 2):
            dead = [node for node in self.nodes.values() if not node.running]
            if dead:
                raise ChaosError(f"node(s) {[n.node_id for n in dead]} not running:\n"
                                 + self._tails(dead))
            last = self._health_problem()
            if not last:
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL_INTERVAL_S)
        raise ChaosError(f"cluster not healthy after {timeout_s} s ({last}):\n"
                         + self._tails(list(self.nodes.values())))

    def _health_problem(self) -> str:
        """What is still unhealthy, or "" when nothing is."""
        if self.active_controller() < 0:
            return "the quorum has no leader"
        expected = set(self.broker_ids)
        for node_id in self.broker_ids:
            try:
                seen = {broker.node_id for broker in self._metadata(node_id, None).brokers}
            except (OSError, ConnectionError) as error:
                return f"broker {node_id} does not answer Metadata: {error}"
            if seen != expected:
                return f"broker {node_id} lists brokers {sorted(seen)}"
        return ""

    def _tails(self, nodes: list[ChaosNode]) -> str:
        return "\n".join(f"--- node {node.node_id} ({node.log_path}):\n{node.tail_log()}"
                         for node in nodes)

    def active_controller(self) -> int:
        """The quorum leader as the first answering controller reports it; -1 if none."""
        for node_id in self.controller_ids:
            node = self.nodes[node_id]
            if not node.running or node.paused:
                continue
            try:
                leader = quorum_leader(f"{node.address}:{CONTROLLER_PORT}",
                                       timeout_s=REQUEST_TIMEOUT_S, client_id="chaos")
            except (OSError, ConnectionError, IndexError):
                continue
            if leader >= 0:
                return leader
        return -1

    def partition_leaders(self, topic: str) -> dict[int, int]:
        """partition -> leader id (-1: none), from the first broker that answers."""
        return {p.partition_index: int(p.leader_id) for p in self._topic_partitions(topic)}

    def partition_isr(self, topic: str) -> dict[int, list[int]]:
        return {p.partition_index: [int(i) for i in p.isr_nodes]
                for p in self._topic_partitions(topic)}

    def _topic_partitions(self, topic: str) -> list[Any]:
        errors = []
        for node_id in self.broker_ids:
            node = self.nodes[node_id]
            if not node.running or node.paused:
                continue
            try:
                response = self._metadata(node_id, topic)
            except (OSError, ConnectionError) as error:
                errors.append(f"broker {node_id}: {error}")
                continue
            for answer in response.topics:
                if answer.name == topic and (answer.error_code == 0 or answer.partitions):
                    return sorted(answer.partitions, key=lambda p: p.partition_index)
                if answer.name == topic:
                    errors.append(f"broker {node_id}: error code {answer.error_code}")
        raise ChaosError(f"no broker describes topic {topic!r}: {'; '.join(errors)}")

    def _metadata(self, node_id: int, topic: str | None) -> Any:
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
        from kio.schema.types import TopicName

        from pykraft.testing.wire import WireClient

        topics = () if topic is None else (MetadataRequestTopic(topic_id=None,
                                                                name=TopicName(topic)),)
        request = MetadataRequest(topics=topics, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False)
        address = f"{self.nodes[node_id].address}:{BROKER_PORT}"
        with WireClient(address, timeout_s=REQUEST_TIMEOUT_S, client_id="chaos") as client:
            return client.request(3, 12, request)

    # -- process faults -------------------------------------------------------------------

    def kill(self, node_id: int) -> None:
        """SIGKILL the node's process group and wait for it (a dead node: nothing to do)."""
        node = self.node(node_id)
        if node.process is None:
            return
        self._signal(node, signal.SIGKILL)
        node.process.wait(timeout=STOP_TIMEOUT_S)
        node.process = None
        node.paused = False

    def restart(self, node_id: int) -> None:
        """Start a stopped node again on its data; does not wait for it (wait_healthy)."""
        node = self.node(node_id)
        if node.running:
            raise ChaosError(f"node {node_id} is running")
        self._start_process(node)

    def pause(self, node_id: int) -> None:
        node = self.node(node_id)
        if not node.running:
            raise ChaosError(f"node {node_id} is not running")
        self._signal(node, signal.SIGSTOP)
        node.paused = True

    def resume(self, node_id: int) -> None:
        node = self.node(node_id)
        self._signal(node, signal.SIGCONT)
        node.paused = False

    def set_node_configs(self, node_id: int, configs: Mapping[str, str]) -> None:
        """Override keys of one node's server.properties; effective at its next restart."""
        node = self.node(node_id)
        node.configs.update(configs)
        self._write_config(node)

    # -- network faults -------------------------------------------------------------------

    def _faults(self) -> NetworkFaults:
        if self.network is None or self._closed:
            raise ChaosError("the cluster is not running")
        return self.network

    def partition(self, groups: list[set[int]]) -> None:
        """Nodes in different groups cannot reach each other (both ways); nodes in no group
        keep their links. Adds to the faults already in place."""
        self._faults().partition(groups)

    def drop(self, src: int, dst: int) -> None:
        """One way: packets from src never reach dst (dst's packets still reach src)."""
        self._faults().drop(src, dst)

    def isolate_from_clients(self, node_id: int) -> None:
        """The clients on the host cannot reach the node, nor it them; nodes still can."""
        self._faults().isolate_from_clients(node_id)

    def flaky(self, node_id: int, loss_percent: int, rate_kbit: int | None = None) -> None:
        """Drop loss_percent of the node's packets both ways (nftables numgen), and cap its
        link at rate_kbit both ways with tbf when given. No added delay: this kernel has no
        netem qdisc, so slowness is a rate cap."""
        self._faults().flaky(node_id, loss_percent, rate_kbit)

    def heal(self) -> None:
        """Remove every network fault (not kills, pauses, full disks or clock offsets)."""
        self._faults().heal()

    # -- disk and clock faults ------------------------------------------------------------

    def fill_disk(self, node_id: int) -> None:
        """Fill the node's log dir filesystem (~0 bytes free) with a ballast file."""
        disk.fill(self.node(node_id).disk, self.disk_bytes)

    def free_disk(self, node_id: int) -> None:
        disk.free(self.node(node_id).disk)

    def fail_disk(self, node_id: int, mode: str = "all") -> None:
        """From the next operation on, the node's log dir fails with EIO: every operation
        (`all`, the default: a dead device) or only those that write (`writes`). Pages the
        kernel caches are still read from memory, as on a real failing disk. NotSupported
        for a node not in `eio_nodes`."""
        node = self._eio_node(node_id)
        if mode == "ok":
            raise ChaosError("fail_disk's modes are 'all' and 'writes' (heal_disk heals)")
        disk.set_eio_mode(node.eio_mount, mode)
        node.disk_failing = True

    def heal_disk(self, node_id: int) -> None:
        """The node's log dir works again (a healthy one: nothing to do). NotSupported for a
        node not in `eio_nodes`."""
        node = self._eio_node(node_id)
        if not node.disk_failing:
            return
        disk.set_eio_mode(node.eio_mount, "ok")
        node.disk_failing = False

    def _eio_node(self, node_id: int) -> ChaosNode:
        node = self.node(node_id)
        if not node.eio:
            raise NotSupported(f"node {node_id}'s log dir is not on eiofs (the cluster's "
                               f"eio_nodes are {sorted(self.eio_nodes)})")
        return node

    def clock_jump(self, node_id: int, seconds: float) -> None:
        """Set the node's wall clock `seconds` off the real time (not cumulative: 0 puts it
        back); its monotonic clock is unchanged. The node sees it within ~1 s and keeps it
        across restarts. NotSupported when libfaketime is absent."""
        node = self.node(node_id)
        self.clock.jump(node_id, seconds)
        node.clock_offset_s = seconds

    def clock_reset(self, node_id: int) -> None:
        """Put the node's wall clock back to the real time."""
        self.clock_jump(node_id, 0.0)

    def node_environment(self, node_id: int) -> dict[str, str]:
        """The environment a node's process starts with (its libfaketime settings)."""
        return dict(os.environ, PYTHONUNBUFFERED="1",
                    **self.clock.environment(self.node(node_id).node_id))

    def run_in_node(self, node_id: int, command: list[str],
                    timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a command as the node runs: in its namespace, with its environment (clock)."""
        node = self.node(node_id)
        return subprocess.run(network.in_netns(node.netns, command), capture_output=True,
                              text=True, timeout=timeout_s, env=self.node_environment(node_id))


def check_prerequisites() -> None:
    """One readable line for each thing missing."""
    problems = []
    if os.geteuid() != 0:
        problems.append("the chaos harness needs root (network namespaces, nftables, "
                        "tmpfs mounts); run it as root")
    for tool in ("ip", "nft", "tc", "mount"):
        if shutil.which(tool) is None:
            problems.append(f"'{tool}' is not installed: run ./scripts/setup --test")
    if problems:
        raise ChaosError("\n".join(problems))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _dead_owner(name: str) -> bool:
    match = PREFIX.match(name)
    return match is not None and int(match.group(1)) != os.getpid() and not _pid_alive(
        int(match.group(1)))


def sweep_leftovers() -> list[str]:
    """Remove the namespaces (and their processes), mounts and links of chaos runs whose
    owner pid is dead; what was removed."""
    removed = []
    for netns in network.list_netns():
        if _dead_owner(netns):
            network.delete_netns(netns)
            removed.append(netns)
    # eiofs mounts first: each is served from a tmpfs mount of the same run
    for source, point, _kind in sorted(disk.mount_table(), key=lambda m: m[2] != "fuse.eiofs"):
        if _dead_owner(source):
            disk.unmount(Path(point))
            removed.append(point)
    for link in network.list_links():
        if _dead_owner(link):
            network.delete_link(link)
            removed.append(link)
    return removed
