"""Hostile command lines and files end in one readable `Error:` line and exit code 1, before
any connection is made: numbers wider than the protocol's fields (the client library raised
OverflowError, or wrapped a broker id 2^31 to -2^31), files that are not UTF-8, a record
size no producer would accept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pykraft.cli.args import INT16, INT32, INT64, CommandError, check_int, read_text_file
from pykraft.cli.main import main

NOWHERE = "127.0.0.1:1"  # never contacted: every case fails while reading its input


def test_int_types_accept_their_range_and_refuse_beyond() -> None:
    assert INT16("32767") == 32767 and INT32("-2147483648") == -(1 << 31)
    assert INT64(str((1 << 63) - 1)) == (1 << 63) - 1
    for parse, text in ((INT16, "32768"), (INT32, "2147483648"), (INT64, str(1 << 63)),
                        (INT32, "x")):
        with pytest.raises(Exception, match="out of range|invalid integer"):
            parse(text)
    with pytest.raises(CommandError, match="partition 2147483648 is out of range"):
        check_int(1 << 31, 32, "partition")


def test_read_text_file_names_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe{}")
    with pytest.raises(CommandError, match=f"cannot read {binary}: not UTF-8 text"):
        read_text_file(str(binary))


def _json(tmp_path: Path, document: object) -> str:
    path = tmp_path / "input.json"
    path.write_text(json.dumps(document))
    return str(path)


def _binary(tmp_path: Path) -> str:
    path = tmp_path / "binary.txt"
    path.write_bytes(b"\xff\xfe\x00not text")
    return str(path)


CASES = {
    "delete-records partition": (
        lambda tmp: ["delete-records", "--bootstrap-server", NOWHERE, "--offset-json-file",
                     _json(tmp, {"partitions": [{"topic": "t", "partition": 1 << 31,
                                                 "offset": 0}]})],
        "partition 2147483648 is out of range"),
    "delete-records offset": (
        lambda tmp: ["delete-records", "--bootstrap-server", NOWHERE, "--offset-json-file",
                     _json(tmp, {"partitions": [{"topic": "t", "partition": 0,
                                                 "offset": 1 << 70}]})],
        "offset 1180591620717411303424 is out of range"),
    "delete-records binary file": (
        lambda tmp: ["delete-records", "--bootstrap-server", NOWHERE, "--offset-json-file",
                     _binary(tmp)],
        "not UTF-8 text"),
    "leader-election json partition": (
        lambda tmp: ["leader-election", "--bootstrap-server", NOWHERE, "--election-type",
                     "preferred", "--path-to-json-file",
                     _json(tmp, {"partitions": [{"topic": "t", "partition": 1 << 31}]})],
        "partition 2147483648 is out of range"),
    "leader-election --partition": (
        lambda tmp: ["leader-election", "--bootstrap-server", NOWHERE, "--election-type",
                     "preferred", "--topic", "t", "--partition", str(1 << 31)],
        "argument --partition: 2147483648 is out of range"),
    "reassign-partitions broker id": (
        lambda tmp: ["reassign-partitions", "--bootstrap-server", NOWHERE, "--execute",
                     "--reassignment-json-file",
                     _json(tmp, {"version": 1, "partitions": [
                         {"topic": "t", "partition": 0, "replicas": [1 << 31]}]})],
        "broker id 2147483648 is out of range"),
    "reassign-partitions binary file": (
        lambda tmp: ["reassign-partitions", "--bootstrap-server", NOWHERE, "--execute",
                     "--reassignment-json-file", _binary(tmp)],
        "not UTF-8 text"),
    "properties file not UTF-8": (
        lambda tmp: ["consumer-groups", "--bootstrap-server", NOWHERE, "--list",
                     "--command-config", _binary(tmp)],
        "cannot read properties file"),
    "transactions producer epoch": (
        lambda tmp: ["transactions", "--bootstrap-server", NOWHERE, "abort", "--topic", "t",
                     "--partition", "0", "--producer-id", "1", "--producer-epoch", "70000",
                     "--coordinator-epoch", "0"],
        "argument --producer-epoch: 70000 is out of range [-32768, 32767]"),
    "transactions producer id": (
        lambda tmp: ["transactions", "--bootstrap-server", NOWHERE, "abort", "--topic", "t",
                     "--partition", "0", "--producer-id", str(1 << 64), "--producer-epoch",
                     "1", "--coordinator-epoch", "0"],
        "argument --producer-id: 18446744073709551616 is out of range"),
    "cluster unregister id": (
        lambda tmp: ["cluster", "unregister", "--bootstrap-server", NOWHERE, "--id",
                     str(1 << 31)],
        "argument --id/-i: 2147483648 is out of range"),
    "features level": (
        lambda tmp: ["features", "--bootstrap-server", NOWHERE, "upgrade", "--feature",
                     "x=99999"],
        "--feature x: level 99999 is out of range [-32768, 32767]"),
    "topics partitions": (
        lambda tmp: ["topics", "--bootstrap-server", NOWHERE, "--create", "--topic", "t",
                     "--partitions", str(1 << 31)],
        "argument --partitions: 2147483648 is out of range"),
    "topics replica assignment": (
        lambda tmp: ["topics", "--bootstrap-server", NOWHERE, "--create", "--topic", "t",
                     "--replica-assignment", str(1 << 31)],
        "broker id 2147483648 is out of range"),
    "console-consumer offset": (
        lambda tmp: ["console-consumer", "--bootstrap-server", NOWHERE, "--topic", "t",
                     "--partition", "0", "--offset", str(1 << 63)],
        "The provided offset value '9223372036854775808' is incorrect"),
    "consumer-groups to-offset": (
        lambda tmp: ["consumer-groups", "--bootstrap-server", NOWHERE, "--reset-offsets",
                     "--group", "g", "--all-topics", "--to-offset", str(1 << 63)],
        "argument --to-offset: 9223372036854775808 is out of range"),
    "perf record size": (
        lambda tmp: ["perf", "produce", "--bootstrap-server", NOWHERE, "--topic", "t",
                     "--num-records", "1", "--record-size", "99999999999", "--throughput",
                     "-1"],
        "--record-size 99999999999 is larger than message.max.bytes (1000000)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_input_is_one_error_line(case: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    argv, message = CASES[case]
    assert main(argv(tmp_path)) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    assert message in err
    assert "PYKRAFT_DEBUG" not in err  # not the catch-all for a bug
