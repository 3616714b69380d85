"""Dependencies point downwards (DESIGN.md): the cores never import asyncio, sockets, the
network layer or anything above them. Checked on the source's import statements."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "pykraft"
IO_MODULES = {"asyncio", "socket", "selectors", "uvloop"}
UPPER_LAYERS = {"pykraft.net", "pykraft.broker", "pykraft.server", "pykraft.cli",
                "pykraft.testing", "pykraft.spark"}

# package -> what it must not import, beyond the I/O modules
RULES = {
    "records": UPPER_LAYERS | {"pykraft.storage", "pykraft.raft", "pykraft.metadata",
                               "pykraft.controller", "pykraft.protocol"},
    "storage": UPPER_LAYERS | {"pykraft.raft", "pykraft.metadata", "pykraft.controller",
                               "pykraft.protocol"},
    "metadata": UPPER_LAYERS | {"pykraft.raft", "pykraft.controller", "pykraft.protocol"},
    "controller": UPPER_LAYERS | {"pykraft.raft", "pykraft.protocol"},
    "raft": UPPER_LAYERS | {"pykraft.controller"},
}
# the asyncio shell of raft and its transport are the modules of a core package allowed to do
# I/O (the transport speaks through pykraft.protocol, never pykraft.net)
SHELLS = {"raft/driver.py", "raft/network.py"}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _violates(name: str, forbidden: set[str]) -> bool:
    return any(name == f or name.startswith(f + ".") for f in forbidden)


@pytest.mark.parametrize("package", sorted(RULES))
def test_core_packages_import_only_downwards(package: str) -> None:
    offenders = []
    for path in sorted((SRC / package).rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        forbidden = set(RULES[package])
        if relative not in SHELLS:
            forbidden |= IO_MODULES
        offenders += [f"{relative} imports {name}" for name in sorted(_imports(path))
                      if _violates(name, forbidden)]
    assert offenders == []


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("import asyncio\nfrom pykraft.net.server import Listener\n")
    names = _imports(module)
    assert _violates("asyncio", IO_MODULES) and _violates("pykraft.net.server", UPPER_LAYERS)
    assert names == {"asyncio", "pykraft.net.server"}
