"""The `pykraft` entry point: exit codes, one-line errors, and the server-command seam."""

from __future__ import annotations

import sys
import types

import pytest

import pykraft
from pykraft.cli.main import main


def test_version_prints_the_package_version_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    """--version is an ordinary exit, not an error."""
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"pykraft {pykraft.__version__}"


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["topics", "--help"], ["perf", "produce", "--help"], ["dump-log", "--help"]],
)
def test_help_exits_0(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Help goes to stdout with exit code 0 for the command and its subcommands."""
    assert main(argv) == 0
    assert "usage: pykraft" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["bogus"], "invalid choice: 'bogus'"),
        (["topics", "--list"], "--bootstrap-server must be specified"),
        (["perf", "produce", "--topic", "t"], "required: --num-records, --record-size"),
        (
            ["perf", "produce", "--topic", "t", "--num-records", "x", "--record-size", "1"],
            "invalid int value: 'x'",
        ),
        (["console-consumer", "--bootstrap-server", "h:1"], "required: --topic"),
        (
            ["console-producer", "--bootstrap-server", "nohost", "--topic", "t"],
            "invalid --bootstrap-server 'nohost'",
        ),
        (["storage", "format", "--config", "f"], "required: --cluster-id"),
        (["dump-log"], "required: --files"),
    ],
)
def test_bad_arguments_give_one_line_on_stderr_and_exit_1(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A usage mistake is one readable line on stderr and exit code 1 (not argparse's 2)."""
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("Error: ")
    assert expected in lines[0]
    assert "Traceback" not in captured.err


@pytest.fixture
def fake_server_commands(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    calls: list[tuple[object, ...]] = []
    module = types.ModuleType("pykraft.cli.server_commands")

    def run_server(config_path: str | None, overrides: list[str]) -> int:
        calls.append(("run_server", config_path, overrides))
        return 0

    module.run_server = run_server  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pykraft.cli.server_commands", module)
    import pykraft.cli

    monkeypatch.setattr(pykraft.cli, "server_commands", module, raising=False)
    return calls


def test_server_start_delegates_config_and_overrides(
    fake_server_commands: list[tuple[object, ...]],
) -> None:
    """`server start` passes the optional config path and every --override in order."""
    argv = ["server", "start", "s.properties", "--override", "a=1", "--override", "b=2"]
    assert main(argv) == 0
    assert main(["server", "start"]) == 0
    assert fake_server_commands == [
        ("run_server", "s.properties", ["a=1", "b=2"]),
        ("run_server", None, []),
    ]


def test_storage_format_takes_kafkas_short_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """`storage format` accepts kafka-storage.sh's short flags; the tool gets each one."""
    from pykraft.server import storage_cli, storage_tool

    calls: list[tuple[object, dict[str, object]]] = []
    class Loaded(str):
        roles = ("controller",)  # --add-scram is for controllers

    monkeypatch.setattr(storage_cli, "_load", Loaded)
    monkeypatch.setattr(storage_tool, "format_command",
                        lambda config, **options: calls.append((config, options)))
    assert main(["storage", "format", "-c", "f.properties", "-t", "abc", "-g", "-s",
                 "-r", "3.9", "-S", "SCRAM-SHA-256=[name=a,password=b]"]) == 0
    assert main(["storage", "format", "--config", "g", "--cluster-id", "x",
                 "-I", "1@h:9093:AAAAAAAAAAAAAAAAAAAAAA"]) == 0
    assert calls == [
        ("f.properties", {"cluster_id": "abc", "ignore_formatted": True, "release_version": "3.9",
                          "standalone": True, "initial_controllers": None,
                          "no_initial_controllers": False,
                          "add_scram": ["SCRAM-SHA-256=[name=a,password=b]"]}),
        ("g", {"cluster_id": "x", "ignore_formatted": False, "release_version": None,
               "standalone": False, "initial_controllers": "1@h:9093:AAAAAAAAAAAAAAAAAAAAAA",
               "no_initial_controllers": False, "add_scram": ()}),
    ]


def test_missing_command_config_file_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """An unreadable --command-config names the file, in one line."""
    argv = ["topics", "--bootstrap-server", "h:1", "--list", "--command-config", "/nonexistent"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cannot read properties file /nonexistent" in err
