"""`pykraft storage` has kafka-storage.sh's shapes: info, format with --release-version,
--standalone, --initial-controllers, --no-initial-controllers and --ignore-formatted,
version-mapping, random-uuid, --add-scram (salted credentials). The main paths run as real
`pykraft` processes; the many refusals run through the same entry point (`main`) in this
process."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from pykraft.cli.main import build_parser, main
from pykraft.server.storage_tool import (
    BOOTSTRAP_CHECKPOINT_FILE,
    BOOTSTRAP_VOTERS_FILE,
    read_bootstrap_metadata_version,
    read_bootstrap_scram_records,
    read_bootstrap_voters,
)
from pykraft.storage.checkpoint import kafka_uuid_string
from pykraft.storage.meta_properties import read_meta_properties
from pykraft.testing import free_port
from tests.integration.tool_helpers import pykraft

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
DIRECTORY_IDS = ["JEXY6aqzQY-32P5TStzaFg", "MvDxzVmcRsaTz33bUuRU6A", "07R5amHmR32VDA6jHkGbTA"]


def dynamic_controller(path: Path, node_id: int = 1, *, roles: str = "controller") -> Path:
    """A Kafka 4 controller file: the quorum named by controller.quorum.bootstrap.servers."""
    port = free_port()
    listeners = f"CONTROLLER://127.0.0.1:{port}"
    if roles != "controller":
        listeners += f",PLAINTEXT://127.0.0.1:{free_port()}"
    path.write_text(
        f"process.roles={roles}\nnode.id={node_id}\n"
        f"controller.quorum.bootstrap.servers=127.0.0.1:{port}\n"
        f"listeners={listeners}\ncontroller.listener.names=CONTROLLER\n"
        f"log.dirs={path.parent / f'logs-{node_id}'}\n", encoding="utf-8")
    return path


def static_combined(path: Path) -> Path:
    broker, controller = free_port(), free_port()
    path.write_text(
        "process.roles=broker,controller\nnode.id=1\n"
        f"controller.quorum.voters=1@127.0.0.1:{controller}\n"
        f"listeners=PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}\n"
        "controller.listener.names=CONTROLLER\n"
        f"log.dirs={path.parent / 'a'},{path.parent / 'b'}\n"
        f"metadata.log.dir={path.parent / 'meta'}\n", encoding="utf-8")
    return path


def failure(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if not line.startswith("WARN ")]
    return line


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_info_then_format_then_info_as_kafka_prints_them(tmp_path: Path) -> None:
    config = static_combined(tmp_path / "server.properties")
    before = pykraft("storage", "info", "-c", str(config))
    assert before.returncode == 1
    assert before.stdout == (f"Found problems:\n  {tmp_path / 'a'} does not exist\n"
                             f"  {tmp_path / 'b'} does not exist\n"
                             f"  {tmp_path / 'meta'} does not exist\n\n")

    formatted = pykraft("storage", "format", "-c", str(config), "-t", CLUSTER, "-r", "3.9")
    assert formatted.returncode == 0, formatted.stderr
    assert formatted.stdout.splitlines() == [
        f"Formatting data directory {tmp_path / 'a'} with metadata.version 3.9-IV0.",
        f"Formatting data directory {tmp_path / 'b'} with metadata.version 3.9-IV0.",
        f"Formatting metadata directory {tmp_path / 'meta'} with metadata.version 3.9-IV0."]
    for name in ("a", "b", "meta"):  # Kafka writes the bootstrap file into every dir
        assert read_bootstrap_metadata_version(tmp_path / name) == 21

    after = pykraft("storage", "info", "-c", str(config))
    assert after.returncode == 0, after.stdout
    meta = read_meta_properties(tmp_path / "a")
    assert meta is not None and meta.directory_id is not None
    assert after.stdout == (
        f"Found log directories:\n  {tmp_path / 'a'}\n  {tmp_path / 'b'}\n  {tmp_path / 'meta'}\n"
        f"\nFound metadata: {{cluster.id={CLUSTER}, "
        f"directory.id={kafka_uuid_string(meta.directory_id)}, node.id=1, version=1}}\n\n"
        "Found bootstrap metadata.version: 3.9-IV0 (level 21)\n\n")


def test_info_reports_mismatched_dirs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = static_combined(tmp_path / "server.properties")
    assert main(["storage", "format", "-c", str(config), "-t", CLUSTER]) == 0
    text = (tmp_path / "b" / "meta.properties").read_text()
    (tmp_path / "b" / "meta.properties").write_text(text.replace(CLUSTER, "A" * 22))
    (tmp_path / "meta" / "meta.properties").unlink()
    code, out, _ = run(["storage", "info", "-c", str(config)], capsys)
    assert code == 1
    assert out.endswith("Found problems:\n  Mismatched cluster IDs between storage directories.\n"
                        f"  {tmp_path / 'meta'} is not formatted.\n\n")


def test_a_formatted_node_refuses_a_second_format_unless_told_to_skip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = static_combined(tmp_path / "server.properties")
    assert main(["storage", "format", "-c", str(config), "-t", CLUSTER]) == 0
    line = failure(pykraft("storage", "format", "-c", str(config), "-t", CLUSTER))
    assert line.startswith(f"Error: Log directory {tmp_path / 'a'}")
    assert "Use --ignore-formatted to ignore this directory and format the others." in line
    capsys.readouterr()
    code, out, _ = run(["storage", "format", "-c", str(config), "-t", CLUSTER,
                        "--ignore-formatted"], capsys)
    assert code == 0 and out == "All of the log directories are already formatted.\n"


def test_add_scram_formats_salted_credentials_and_refuses_bad_entries_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = static_combined(tmp_path / "server.properties")
    line = failure(pykraft("storage", "format", "-c", str(config), "-t", CLUSTER,
                           "--add-scram", "SCRAM-SHA-256=[name=alice,password=alice-secret]",
                           "--add-scram", "SCRAM-SHA-512=[password=admin-secret]"))
    assert line == "Error: You must supply 'name' to add-scram"
    assert not (tmp_path / "a").exists()
    code, out, err = run(["storage", "format", "-c", str(config), "-t", CLUSTER, "-S",
                          "SCRAM-SHA-256=[name=alice,password=alice-secret]", "--add-scram",
                          "SCRAM-SHA-512=[name=admin,iterations=8192,password=admin-secret]"],
                         capsys)
    assert (code, err) == (0, "")
    assert "Formatting metadata directory" in out
    records = read_bootstrap_scram_records(tmp_path / "meta")
    assert [(r.name, r.mechanism, r.iterations) for r in records] == [("alice", 1, 4096),
                                                                      ("admin", 2, 8192)]
    for directory in ("a", "b", "meta"):
        assert b"secret" not in (tmp_path / directory / BOOTSTRAP_CHECKPOINT_FILE).read_bytes()


def test_add_scram_on_a_broker_warns_that_only_a_controller_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "server.properties"
    config.write_text(
        "process.roles=broker\nnode.id=2\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
        f"listeners=PLAINTEXT://127.0.0.1:{free_port()}\ncontroller.listener.names=CONTROLLER\n"
        f"log.dirs={tmp_path / 'logs'}\n", encoding="utf-8")
    code, _, err = run(["storage", "format", "-c", str(config), "-t", CLUSTER,
                        "--add-scram", "SCRAM-SHA-256=[name=alice,password=alice-secret]"],
                       capsys)
    assert code == 0
    assert "WARN --add-scram has no effect on a node that is not a controller" in err


@pytest.mark.parametrize(("release", "message"), [
    ("2.8", "Unknown release version '2.8'. Supported versions are: 3.3-IV3 to 4.0-IV0"),
    ("3.3-IV2", "Unknown release version '3.3-IV2'. Supported versions are: 3.3-IV3 to 4.0-IV0"),
    ("3.9-IV7", "Unknown release version '3.9-IV7'. Supported versions are: 3.3-IV3 to 4.0-IV0"),
    ("banana", "Unknown release version 'banana'. Supported versions are: 3.3-IV3 to 4.0-IV0"),
    ("4.1", "Unknown release version '4.1'. Supported versions are: 3.3-IV3 to 4.0-IV0"),
])
def test_release_versions_pykraft_cannot_start_at_are_refused(
    release: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = static_combined(tmp_path / "server.properties")
    code, _, err = run(["storage", "format", "-c", str(config), "-t", CLUSTER,
                        "--release-version", release], capsys)
    assert code == 1 and err == f"Error: {message}\n"
    assert not (tmp_path / "a").exists()


def test_release_version_forms_kafka_accepts(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    for index, (release, level) in enumerate([("3.9", "3.9-IV0"), ("3.9-IV0", "3.9-IV0"),
                                              ("3.9.1", "3.9-IV0"), ("3.3-IV3", "3.3-IV3"),
                                              ("3.7", "3.7-IV4"), ("4.0", "4.0-IV0")]):
        directory = tmp_path / str(index)
        directory.mkdir()
        config = static_combined(directory / "server.properties")
        code, out, err = run(["storage", "format", "-c", str(config), "-t", CLUSTER,
                              "-r", release], capsys)
        assert code == 0, err
        assert f"with metadata.version {level}." in out
    # inter.broker.protocol.version stands in for --release-version, as in Kafka
    directory = tmp_path / "ibp"
    directory.mkdir()
    config = static_combined(directory / "server.properties")
    with config.open("a") as stream:
        stream.write("inter.broker.protocol.version=3.7\n")
    code, out, err = run(["storage", "format", "-c", str(config), "-t", CLUSTER], capsys)
    assert code == 0, err
    assert "with metadata.version 3.7-IV4." in out


def test_standalone_reaches_a_listener_without_a_host_at_localhost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "controller.properties"
    config.write_text("process.roles=controller\nnode.id=1\n"
                      "controller.quorum.bootstrap.servers=localhost:19093\n"
                      "listeners=CONTROLLER://:19093\ncontroller.listener.names=CONTROLLER\n"
                      f"log.dirs={tmp_path / 'logs'}\n")
    assert run(["storage", "format", "-c", str(config), "-t", CLUSTER, "-s"], capsys)[0] == 0
    voters = read_bootstrap_voters(tmp_path / "logs")
    assert voters is not None and (voters[1].host, voters[1].port) == ("localhost", 19093)


def test_standalone_writes_this_controller_as_the_one_voter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = dynamic_controller(tmp_path / "controller.properties", node_id=3)
    code, out, err = run(["storage", "format", "-c", str(config), "-t", CLUSTER, "-s"], capsys)
    assert code == 0, err
    logs = tmp_path / "logs-3"
    assert out == (f"Formatting dynamic metadata voter directory {logs} with metadata.version "
                   "3.9-IV0.\n")
    meta = read_meta_properties(logs)
    voters = read_bootstrap_voters(logs)
    assert meta is not None and voters is not None and list(voters) == [3]
    assert voters[3].directory_id == meta.directory_id  # the voter is this very directory
    assert (logs / BOOTSTRAP_CHECKPOINT_FILE).exists()


def test_initial_controllers_are_the_same_list_on_every_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ports = [free_port() for _ in DIRECTORY_IDS]
    listed = ",".join(f"{node}@127.0.0.1:{port}:{directory}" for node, (port, directory)
                      in enumerate(zip(ports, DIRECTORY_IDS, strict=True)))
    for node in range(3):
        config = tmp_path / f"c{node}.properties"
        config.write_text(
            f"process.roles=controller\nnode.id={node}\n"
            f"controller.quorum.bootstrap.servers=127.0.0.1:{ports[0]}\n"
            f"listeners=CONTROLLER://127.0.0.1:{ports[node]}\n"
            f"controller.listener.names=CONTROLLER\nlog.dirs={tmp_path / f'logs-{node}'}\n")
        code, _, err = run(["storage", "format", "-c", str(config), "-t", CLUSTER,
                            "--initial-controllers", listed], capsys)
        assert code == 0, err
        meta = read_meta_properties(tmp_path / f"logs-{node}")
        assert meta is not None and meta.directory_id is not None
        assert kafka_uuid_string(meta.directory_id) == DIRECTORY_IDS[node]
        voters = read_bootstrap_voters(tmp_path / f"logs-{node}")
        assert voters is not None
        assert {v: (voters[v].host, voters[v].port) for v in voters} == {
            node: ("127.0.0.1", port) for node, port in enumerate(ports)}
    assert (tmp_path / "logs-0" / BOOTSTRAP_VOTERS_FILE).read_text() == (
        tmp_path / "logs-2" / BOOTSTRAP_VOTERS_FILE).read_text()


@pytest.mark.parametrize(("options", "message"), [
    ([], "Because controller.quorum.voters is not set on this controller, you must specify one "
         "of the following: --standalone, --initial-controllers, or --no-initial-controllers."),
    (["--no-initial-controllers"], "--no-initial-controllers is not supported on a controller"),
    (["--initial-controllers", "1@127.0.0.1:9093"], "Invalid --initial-controllers entry "
                                                    "'1@127.0.0.1:9093'"),
    (["--initial-controllers", "2@h:1:JEXY6aqzQY-32P5TStzaFg"],
     "If process.roles contains the 'controller' role, the node id 1 must be included in the "
     "set of voters"),
    (["-I", "1@h:1:JEXY6aqzQY-32P5TStzaFg,1@g:2:MvDxzVmcRsaTz33bUuRU6A"],
     "Node id 1 was specified more than once."),
    (["-I", "1@h:70000:JEXY6aqzQY-32P5TStzaFg"], "Invalid port 70000 in dynamic voter string."),
    (["-I", "1@h:1:not-a-uuid"], "Failed to parse directory ID in dynamic voter string"),
    (["-I", "2147483648@h:1:JEXY6aqzQY-32P5TStzaFg"],
     "Failed to parse node id in dynamic voter string"),
    (["-s", "-N"], "not allowed with argument"),
])
def test_dynamic_quorum_options_refused_in_kafkas_words(
    options: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = dynamic_controller(tmp_path / "controller.properties")
    code, out, err = run(["storage", "format", "-c", str(config), "-t", CLUSTER, *options],
                         capsys)
    assert code == 1 and out == ""
    assert err.startswith("Error: ") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "logs-1").exists()


def test_standalone_needs_a_dynamic_quorum_and_a_controller(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    static = static_combined(tmp_path / "static.properties")
    code, _, err = run(["storage", "format", "-c", str(static), "-t", CLUSTER, "-s"], capsys)
    assert code == 1 and "You cannot specify controller.quorum.voters and format the node " \
                         "with --initial-controllers or --standalone." in err
    broker = tmp_path / "broker.properties"
    broker.write_text(
        "process.roles=broker\nnode.id=2\ncontroller.quorum.bootstrap.servers=127.0.0.1:1\n"
        f"listeners=PLAINTEXT://127.0.0.1:{free_port()}\ncontroller.listener.names=CONTROLLER\n"
        f"log.dirs={tmp_path / 'broker-logs'}\n")
    code, _, err = run(["storage", "format", "-c", str(broker), "-t", CLUSTER, "-s"], capsys)
    assert code == 1 and err == "Error: You can only use --standalone on a controller.\n"
    code, out, err = run(["storage", "format", "-c", str(broker), "-t", CLUSTER, "-N"], capsys)
    assert code == 0, err
    assert out == f"Formatting metadata directory {tmp_path / 'broker-logs'} with " \
                  "metadata.version 3.9-IV0.\n"


def test_version_mapping_and_random_uuid(capsys: pytest.CaptureFixture[str]) -> None:
    result = pykraft("storage", "version-mapping", "--release-version", "3.7")
    assert result.returncode == 0 and result.stdout == "metadata.version=19 (3.7)\n"
    assert run(["storage", "version-mapping"], capsys)[1] == "metadata.version=22 (4.0-IV0)\n"
    code, _, err = run(["storage", "version-mapping", "-r", "1.0"], capsys)
    assert code == 1 and "Unknown release version '1.0'" in err
    code, out, _ = run(["storage", "random-uuid"], capsys)
    assert code == 0 and re.fullmatch(r"[A-Za-z0-9_-]{22}\n", out)


def _storage_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    storage = commands.choices["storage"]
    tools = next(a for a in storage._actions if isinstance(a, argparse._SubParsersAction))
    return dict(tools.choices)


def test_every_storage_option_has_help_text(capsys: pytest.CaptureFixture[str]) -> None:
    parsers = _storage_parsers()
    assert set(parsers) == {"info", "format", "version-mapping", "random-uuid"}
    for name, parser in parsers.items():
        assert parser.description, name
        for action in parser._actions:
            assert action.help, (name, action.option_strings)
        code, out, _ = run(["storage", name, "--help"], capsys)
        assert code == 0 and out.startswith(f"usage: pykraft storage {name}")
