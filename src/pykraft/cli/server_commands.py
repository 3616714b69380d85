"""`pykraft server start` and `pykraft storage ...`: the node's own commands.

Errors are one readable line on stderr and exit code 1; a node that started and then stopped
on a signal exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from pykraft.server.config import ConfigError, ServerConfig
from pykraft.server.storage_tool import StorageToolError, format_storage, random_uuid


def _fail(message: str) -> int:
    print(f"pykraft: {message}", file=sys.stderr)
    return 1


def run_server(config_path: str | None, overrides: list[str]) -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)",
    )
    try:
        config = ServerConfig.load(config_path, overrides)
    except ConfigError as error:
        return _fail(str(error))
    for warning in config.warnings:
        logging.getLogger("pykraft.server").warning(warning)
    if config_path is None:
        try:
            format_storage(config, cluster_id=None, ignore_formatted=True, quiet=True)
        except StorageToolError as error:
            return _fail(str(error))
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        return asyncio.run(_serve(config))
    except StorageToolError as error:
        return _fail(str(error))
    except KeyboardInterrupt:
        return 0


async def _serve(config: ServerConfig) -> int:
    from pykraft.server.node import Node, NodeStartError

    node = Node(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(node.stop()))
    try:
        await node.start()
    except NodeStartError as error:
        await node.stop()
        return _fail(str(error))
    await node.wait_stopped()
    return node.exit_code


def storage_random_uuid() -> int:
    print(random_uuid())
    return 0


def storage_format(config_path: str, cluster_id: str, ignore_formatted: bool) -> int:
    try:
        config = ServerConfig.load(config_path)
        format_storage(config, cluster_id=cluster_id, ignore_formatted=ignore_formatted)
    except (ConfigError, StorageToolError) as error:
        return _fail(str(error))
    return 0
