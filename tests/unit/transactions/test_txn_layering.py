"""The transaction coordinator's core modules and the read_committed bookkeeping are
sans-I/O: only the shell imports asyncio or the replica manager."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "src" / "pykraft"
FORBIDDEN = ("asyncio", "socket", "selectors", "time", "pykraft.net", "pykraft.server",
             "pykraft.broker.replica_manager", "pykraft.broker.transaction_coordinator.shell")


@pytest.mark.parametrize("module", ["broker/transaction_coordinator/core.py",
                                    "broker/transaction_coordinator/records.py",
                                    "storage/txn_index.py"])
def test_core_modules_do_no_io(module: str) -> None:
    imported = set()
    for node in ast.walk(ast.parse((SRC / module).read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    assert imported and not [name for name in imported
                             if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)]
