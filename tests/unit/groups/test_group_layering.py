"""The group coordinator's core modules are sans-I/O: only the shell imports asyncio."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "src" / "pykraft" / "broker" / "group_coordinator"
FORBIDDEN = ("asyncio", "socket", "selectors", "time", "pykraft.net", "pykraft.server",
             "pykraft.broker.replica_manager", "pykraft.broker.group_coordinator.shell")


@pytest.mark.parametrize("module", ["core.py", "records.py", "state.py", "consumer.py",
                                    "consumer_records.py"])
def test_core_modules_do_no_io(module: str) -> None:
    tree = ast.parse((PACKAGE / module).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    assert not [name for name in imported
                if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)]
