"""Every server key the code reads is declared as used in server/config.py.

A key read with `config.get*("...")` but not declared makes a node that sets it warn that the
key is ignored, while it is not (max.request.partition.size.limit did). The scan reads the
source (AST): the string literal, or module-level string constant, passed as the first
argument of a config getter.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pykraft
from pykraft.server.config import is_used_key
from pykraft.storage.log_config import TOPIC_CONFIGS

SOURCE = Path(pykraft.__file__).parent
GETTERS = frozenset({"get", "get_int", "get_bool", "get_list"})
# Client-side code: its `.get("bootstrap.servers")` reads a client's properties, not a node's.
CLIENT_PACKAGES = frozenset({"cli", "spark", "testing"})
# Keys read only to refuse them or by a tool rather than by the node, which ignores them
# (and says so when it starts).
READ_NOT_USED = frozenset({
    "control.plane.listener.name",  # read to refuse it: KRaft has no control plane listener
    "inter.broker.protocol.version",  # `storage format`'s fallback for --release-version
})


def _string_constants(tree: ast.Module) -> dict[str, str]:
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) \
                and isinstance(value.value, str):
            constants[target.id] = value.value
    return constants


def keys_read(path: Path) -> list[tuple[int, str]]:
    """(line, key) of every dotted key passed to a `.get*` call in the file."""
    tree = ast.parse(path.read_text(), str(path))
    constants = _string_constants(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in GETTERS and node.args):
            continue
        argument = node.args[0]
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            key = argument.value
        elif isinstance(argument, ast.Name) and argument.id in constants:
            key = constants[argument.id]
        else:
            continue
        if "." in key and " " not in key:
            found.append((node.lineno, key))
    return found


def undeclared_keys(root: Path) -> list[str]:
    undeclared = []
    for path in sorted(root.rglob("*.py")):
        if CLIENT_PACKAGES & set(path.relative_to(root).parts[:1]):
            continue
        for line, key in keys_read(path):
            if is_used_key(key) or key in TOPIC_CONFIGS or key in READ_NOT_USED:
                continue
            undeclared.append(f"{path.relative_to(root)}:{line}: {key}")
    return undeclared


def test_every_key_the_server_reads_is_declared_used() -> None:
    assert undeclared_keys(SOURCE) == []


def test_the_scan_finds_an_undeclared_key(tmp_path: Path) -> None:
    (tmp_path / "broker").mkdir()
    (tmp_path / "cli").mkdir()
    (tmp_path / "broker" / "a.py").write_text(
        'LIMIT: str = "num.io.threads"\n'
        "def f(config, values):\n"
        '    return config.get_int("no.such.key"), values.get(LIMIT), config.get("node.id")\n')
    (tmp_path / "cli" / "b.py").write_text('def f(p):\n    return p.get("bootstrap.servers")\n')
    assert undeclared_keys(tmp_path) == ["broker/a.py:3: no.such.key",
                                         "broker/a.py:3: num.io.threads"]


def test_max_request_partition_size_limit_is_kafkas() -> None:
    from pykraft.server.config import SERVER_KEYS, ConfigError, ServerConfig, key_warning

    key = SERVER_KEYS["max.request.partition.size.limit"]
    assert (key.type, key.default, key.minimum) == ("int", "2000", 1)
    assert key_warning("max.request.partition.size.limit") is None
    base = {"node.id": "1", "process.roles": "broker,controller",
            "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": "1@localhost:9093"}
    assert not ServerConfig({**base, "max.request.partition.size.limit": "5"}).warnings
    try:
        ServerConfig({**base, "max.request.partition.size.limit": "0"})
    except ConfigError as error:
        assert str(error) == ("Invalid value 0 for configuration max.request.partition.size.limit: "
                              "Value must be at least 1")
    else:
        raise AssertionError("max.request.partition.size.limit=0 was accepted")
