"""No pykraft module imports another module's private (`_name`) attribute.

A private name is free to change with its module; a second module that imports it breaks
silently when it does. A name two modules share is public: rename it and list it in `__all__`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pykraft

SOURCE = Path(pykraft.__file__).parent


def _is_submodule(package: str, name: str) -> bool:
    """`from pykraft.records import _scan` names a (compiled) module, not a private attribute."""
    directory = SOURCE.parent.joinpath(*package.split("."))
    return directory.is_dir() and any(directory.glob(f"{name}.*"))


def private_imports(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level or node.module is None:
                continue
            if not node.module.startswith("pykraft"):
                continue
            for alias in node.names:
                name = alias.name
                if name.startswith("_") and not name.startswith("__") \
                        and not _is_submodule(node.module, name):
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}: "
                                 f"from {node.module} import {name}")
    return found


def test_no_module_imports_a_private_name_of_another() -> None:
    assert private_imports(SOURCE) == []


def test_the_scan_finds_a_private_import(tmp_path: Path) -> None:
    package = tmp_path / "pykraft"
    package.mkdir()
    (package / "a.py").write_text("from pykraft.cli.metadata_decoder import _hidden\n")
    assert private_imports(package) == ["pykraft/a.py:1: from pykraft.cli.metadata_decoder "
                                        "import _hidden"]
