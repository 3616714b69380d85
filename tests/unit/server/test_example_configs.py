"""The cluster examples (examples/cluster) are valid configurations of the shapes they say."""

from __future__ import annotations

from pathlib import Path

import pytest

from pykraft.server.config import ServerConfig

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "cluster"
VOTERS = {1: ("127.0.0.1", 19093), 2: ("127.0.0.1", 19094), 3: ("127.0.0.1", 19095)}


@pytest.mark.parametrize(("shape", "roles"), [
    ("combined", {1: {"broker", "controller"}, 2: {"broker", "controller"},
                  3: {"broker", "controller"}}),
    ("dedicated", {1: {"controller"}, 2: {"controller"}, 3: {"controller"}, 4: {"broker"}}),
])
def test_example_cluster_configs(shape: str, roles: dict[int, set[str]]) -> None:
    configs = [ServerConfig.load(path) for path in sorted((EXAMPLES / shape).glob("*.properties"))]
    assert {c.node_id: set(c.roles) for c in configs} == roles
    for config in configs:
        assert config.voters == VOTERS and not config.warnings
    ports = [(e.host, e.port) for c in configs for e in c.listeners]
    assert len(ports) == len(set(ports))  # every listener its own port
    log_dirs = [c.log_dirs[0] for c in configs]
    assert len(set(log_dirs)) == len(log_dirs)
    for config in configs:  # each voter listens where the others dial it
        if "controller" in config.roles:
            controller = [e for e in config.listeners if e.listener_name == "CONTROLLER"]
            assert [(e.host, e.port) for e in controller] == [VOTERS[config.node_id]]
