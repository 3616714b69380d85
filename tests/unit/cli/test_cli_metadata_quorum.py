"""`pykraft metadata-quorum`: option checks and Kafka's output formats, from quorum values."""

from __future__ import annotations

import socket
import uuid

import pytest

from pykraft.cli.args import CommandError
from pykraft.cli.main import main
from pykraft.cli.metadata_quorum import (
    QuorumInfo,
    ReplicaInfo,
    replication_lines,
    status_lines,
)
from pykraft.cli.protocol_client import ProtocolClient
from pykraft.storage.checkpoint import kafka_uuid_string

ZERO = uuid.UUID(int=0)
DIRECTORY = uuid.UUID("11111111-2222-3333-4444-555555555555")
NOW = 1_700_000_010_000


def quorum(**changes: object) -> QuorumInfo:
    values: dict[str, object] = {
        "leader_id": 2,
        "leader_epoch": 7,
        "high_watermark": 100,
        "voters": (
            ReplicaInfo(1, ZERO, 95, NOW - 300, NOW - 2000),
            ReplicaInfo(2, DIRECTORY, 105, NOW - 10, NOW - 10),
            ReplicaInfo(3, ZERO, 104, NOW - 20, NOW - 500),
        ),
        "observers": (ReplicaInfo(4, ZERO, 90, NOW - 50, -1),),
        "endpoints": {1: ("CONTROLLER://127.0.0.1:19093",), 2: ("CONTROLLER://::1:19094",)},
    }
    values.update(changes)
    return QuorumInfo(**values)  # type: ignore[arg-type]


def test_status_prints_kafkas_summary() -> None:
    lines = status_lines("cluster-A", quorum())
    assert lines[:6] == [
        "ClusterId:              cluster-A",
        "LeaderId:               2",
        "LeaderEpoch:            7",
        "HighWatermark:          100",
        "MaxFollowerLag:         10",  # leader 105 - slowest voter 95 (observers not counted)
        "MaxFollowerLagTimeMs:   1990",  # leader caught up at NOW-10, voter 1 at NOW-2000
    ]
    directory = kafka_uuid_string(DIRECTORY)
    assert lines[6] == (
        'CurrentVoters:          [{"id": 1, "endpoints": ["CONTROLLER://127.0.0.1:19093"]}, '
        f'{{"id": 2, "directoryId": "{directory}", "endpoints": ["CONTROLLER://::1:19094"]}}, '
        '{"id": 3}]'
    )
    assert lines[7] == 'CurrentObservers:       [{"id": 4}]'


def test_status_lag_time_is_zero_when_the_leader_is_the_slowest_and_unknown_without_times(
) -> None:
    alone = quorum(voters=(ReplicaInfo(2, ZERO, 5, NOW, NOW),), observers=())
    assert status_lines("c", alone)[4:6] == [
        "MaxFollowerLag:         0", "MaxFollowerLagTimeMs:   0"
    ]
    unknown = quorum(voters=(ReplicaInfo(2, ZERO, 5, NOW, NOW), ReplicaInfo(1, ZERO, 3, -1, -1)))
    assert status_lines("c", unknown)[5] == "MaxFollowerLagTimeMs:   -1"


def test_replication_table_lists_leader_followers_observers() -> None:
    lines = replication_lines(quorum(), human_readable=False, now_ms=NOW)
    rows = [line.split("\t") for line in lines]
    assert all(row[-1] == "" for row in rows)  # every cell is followed by a tab, as in Kafka
    cells = [[cell.rstrip() for cell in row[:-1]] for row in rows]
    assert cells[0] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                        "LastCaughtUpTimestamp", "Status"]
    assert [row[0] for row in cells[1:]] == ["2", "1", "3", "4"]
    assert [row[6] for row in cells[1:]] == ["Leader", "Follower", "Follower", "Observer"]
    assert cells[1][1] == kafka_uuid_string(DIRECTORY)
    assert cells[2][1] == "AAAAAAAAAAAAAAAAAAAAAA"
    assert [row[3] for row in cells[1:]] == ["0", "10", "1", "15"]
    assert cells[4][5] == "-1"
    assert len({len(row[0]) for row in rows}) == 1  # padded to one column width


def test_replication_human_readable_times() -> None:
    lines = replication_lines(quorum(), human_readable=True, now_ms=NOW)
    cells = [cell.rstrip() for cell in lines[2].split("\t")]
    assert cells[4:6] == ["300 ms ago", "2000 ms ago"]
    future = quorum(voters=(ReplicaInfo(2, ZERO, 5, NOW + 5000, NOW),))
    with pytest.raises(CommandError, match="possible drift in system clock"):
        replication_lines(future, human_readable=True, now_ms=NOW)


def test_no_leader_is_a_readable_error() -> None:
    with pytest.raises(CommandError, match="no leader"):
        status_lines("c", quorum(leader_id=-1))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["describe", "--status"], "one of --bootstrap-server or --bootstrap-controller"),
        (["--bootstrap-server", "h:1", "--bootstrap-controller", "h:2", "describe", "--status"],
         "not allowed with argument"),
        (["--bootstrap-server", "h:1", "describe"], "One of --status or --replication"),
        (["--bootstrap-server", "h:1", "describe", "--status", "--replication"],
         "Only one of --status or --replication"),
        (["--bootstrap-server", "h:1", "describe", "--status", "--human-readable"],
         "only supported along with --replication"),
        (["--bootstrap-controller", "nohost", "describe", "--status"],
         "invalid --bootstrap-controller 'nohost'"),
        (["--bootstrap-server", "h:1"], "needs a command: describe"),
    ],
)
def test_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["metadata-quorum", *argv]) == 1
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.err.startswith("Error: ") and captured.err.count("\n") == 1


def test_an_unreachable_server_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        code = main(["metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{port}",
                     "describe", "--status"])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.err == f"Error: cannot connect to 127.0.0.1:{port} (Connection refused)\n"
    assert captured.out == ""


def test_a_server_that_never_answers_times_out(tmp_path: object) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with pytest.raises(CommandError, match=r"no answer from 127\.0\.0\.1:\d+ within 0\.3 s"):
            ProtocolClient(f"127.0.0.1:{port}", timeout_s=0.3)
