"""`pykraft server start`: the node's own command (`pykraft storage ...` is server/storage_cli).

Errors are one readable line on stderr and exit code 1; a node that started and then stopped
on a signal (SIGTERM or Ctrl-C, even one that arrives while it is still starting) exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
import sys
from types import FrameType

from pykraft.errors import KafkaError
from pykraft.server.config import ConfigError, ServerConfig
from pykraft.server.gc_pauses import GcPauses
from pykraft.server.loop_watch import LoopWatch
from pykraft.server.malloc_tuning import tune_malloc
from pykraft.server.storage_tool import (
    StorageToolError,
    check_storage,
    format_storage,
)

log = logging.getLogger("pykraft.server")


def _fail(message: str) -> int:
    print(f"pykraft: {message}", file=sys.stderr, flush=True)
    return 1


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_server(config_path: str | None, overrides: list[str]) -> int:
    # Until the event loop takes the signals over, SIGTERM stops start-up as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _run_server(config_path, overrides)
    except KeyboardInterrupt:
        return 0


def _run_server(config_path: str | None, overrides: list[str]) -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)",
    )
    try:
        config = ServerConfig.load(config_path, overrides)
    except ConfigError as error:
        return _fail(str(error))
    for warning in config.warnings:
        log.warning(warning)
    try:
        if config_path is None:  # the quick start formats its data dir on first start
            format_storage(config, cluster_id=None, ignore_formatted=True, quiet=True)
        check_storage(config)  # the node checks again; this fails before anything starts
    except StorageToolError as error:
        return _fail(str(error))
    _raise_open_files_limit()
    GcPauses().install()
    tune_malloc()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(_serve(config))


def _raise_open_files_limit() -> None:
    """Take the hard limit on open files as the soft one (the JVM does this for Kafka):
    a broker holds descriptors for its partitions' active segments and connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as error:
            log.warning("cannot raise the open files limit from %d: %s", soft, error)


async def _serve(config: ServerConfig) -> int:
    from pykraft.server.node import Node, NodeStartError

    node = Node(config)
    starting = asyncio.create_task(node.start(), name="node-start")

    def on_signal() -> None:
        starting.cancel()  # nothing once started; else start-up ends where it is
        asyncio.ensure_future(node.stop())

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    watch = LoopWatch(loop)
    watch.start()
    try:
        try:
            await starting
        except asyncio.CancelledError:
            if not starting.cancelled():
                raise
        except (NodeStartError, KafkaError, OSError) as error:
            await node.stop()
            return _fail(str(error))
        await node.wait_stopped()
        return node.exit_code
    finally:
        watch.stop()
