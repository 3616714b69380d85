"""LocalCluster: a real pykraft node on free loopback ports in a temporary directory.

    with LocalCluster() as cluster:                 # a subprocess, like a user runs it
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})

    with LocalCluster(in_process=True) as cluster:  # a thread with its own event loop

The subprocess form is what fault tests use: `kill(signal.SIGKILL)` then `start()` again on
the same data directory. Readiness means the broker answers Metadata with itself unfenced.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from pykraft.server.storage_tool import random_uuid


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalCluster:
    def __init__(
        self,
        *,
        in_process: bool = False,
        data_dir: str | Path | None = None,
        configs: Mapping[str, str] | None = None,
        node_id: int = 1,
        startup_timeout_s: float = 30.0,
    ) -> None:
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
        self.cluster_id = random_uuid()
        self.process: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._node: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.log_path = self.data_dir / "server.log"
        self.config_path = self.data_dir / "server.properties"
        self._write_config()

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        values = {
            "node.id": str(self.node_id),
            "process.roles": "broker,controller",
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
                if _broker_ready(self.bootstrap_servers, self.node_id):
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


@contextmanager
def local_cluster(**kwargs: Any) -> Iterator[LocalCluster]:
    with LocalCluster(**kwargs) as cluster:
        yield cluster
