"""A broker's start-up steps towards the quorum, each bounded on its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pykraft.server.config import ServerConfig
from pykraft.server.node import Node, NodeStartError


def _broker(tmp_path: Path, timeout_ms: int) -> Node:
    path = tmp_path / "broker.properties"
    path.write_text("\n".join([
        "node.id=4", "process.roles=broker", "listeners=PLAINTEXT://127.0.0.1:19092",
        "controller.listener.names=CONTROLLER",
        "controller.quorum.voters=1@127.0.0.1:19093", f"log.dirs={tmp_path / 'logs'}",
        f"initial.broker.registration.timeout.ms={timeout_ms}", ""]), encoding="utf-8")
    node = Node(ServerConfig.load(path))
    node.is_broker = True  # as start() sets it from process.roles
    return node


async def test_each_step_gets_the_whole_registration_timeout_and_what_lies_between_none(
        tmp_path: Path) -> None:
    """Reaching the quorum and registering each have initial.broker.registration.timeout.ms;
    the catch-up between them does not eat into the registration's (at 1,000,000
    partitions it took longer than the whole timeout, and the broker exited); a step
    that overruns its own stops the node, naming the step."""
    node = _broker(tmp_path, 400)
    await node._joining(asyncio.sleep(0.3), "catch up with the metadata quorum")
    await asyncio.sleep(0.5)  # catching up, unbounded
    await node._joining(asyncio.sleep(0.3), "register with the active controller")
    with pytest.raises(NodeStartError, match=(
            "broker 4 could not register with the active controller within "
            "initial.broker.registration.timeout.ms=400: no answer from the controllers")):
        await node._joining(asyncio.sleep(5), "register with the active controller")
