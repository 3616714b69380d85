"""`pykraft metadata-quorum`: option checks and Kafka's output formats, from quorum values."""

from __future__ import annotations

import datetime
import socket
import struct
import sys
import threading
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from pykraft.cli.args import CommandError
from pykraft.cli.main import main
from pykraft.cli.metadata_quorum import (
    QuorumInfo,
    ReplicaInfo,
    replication_lines,
    status_lines,
)
from pykraft.cli.protocol_client import ProtocolClient
from pykraft.protocol.framing import encode_response, response_type
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


def test_status_lag_time_is_zero_when_the_leader_is_the_slowest_and_unknown_without_times() -> None:
    alone = quorum(voters=(ReplicaInfo(2, ZERO, 5, NOW, NOW),), observers=())
    assert status_lines("c", alone)[4:6] == [
        "MaxFollowerLag:         0",
        "MaxFollowerLagTimeMs:   0",
    ]
    unknown = quorum(voters=(ReplicaInfo(2, ZERO, 5, NOW, NOW), ReplicaInfo(1, ZERO, 3, -1, -1)))
    assert status_lines("c", unknown)[5] == "MaxFollowerLagTimeMs:   -1"


def test_replication_table_lists_leader_followers_observers() -> None:
    lines = replication_lines(quorum(), human_readable=False, now_ms=NOW)
    rows = [line.split("\t") for line in lines]
    assert all(row[-1] == "" for row in rows)  # every cell is followed by a tab, as in Kafka
    cells = [[cell.rstrip() for cell in row[:-1]] for row in rows]
    assert cells[0] == [
        "NodeId",
        "DirectoryId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    ]
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
        (
            ["--bootstrap-server", "h:1", "--bootstrap-controller", "h:2", "describe", "--status"],
            "not allowed with argument",
        ),
        (["--bootstrap-server", "h:1", "describe"], "One of --status or --replication"),
        (
            ["--bootstrap-server", "h:1", "describe", "--status", "--replication"],
            "Only one of --status or --replication",
        ),
        (
            ["--bootstrap-server", "h:1", "describe", "--status", "--human-readable"],
            "only supported along with --replication",
        ),
        (
            ["--bootstrap-controller", "nohost", "describe", "--status"],
            "invalid --bootstrap-controller 'nohost'",
        ),
        (["--bootstrap-server", "h:1"], "needs a command: describe"),
    ],
)
def test_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["metadata-quorum", *argv]) == 1
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.err.startswith("Error: ") and captured.err.count("\n") == 1


def test_an_unreachable_server_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        code = main(
            [
                "metadata-quorum",
                "--bootstrap-controller",
                f"127.0.0.1:{port}",
                "describe",
                "--status",
            ]
        )
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


class FakeServer:
    """Answers each request frame with the next canned response (one layer: the client)."""

    def __init__(self, responses: list[object]) -> None:
        self.responses = responses
        self.requests: list[tuple[int, int]] = []  # (api key, version)
        self.client_ids: list[str] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        connection, _ = self.sock.accept()
        with connection:
            for response in self.responses:
                size = struct.unpack(">i", self._read(connection, 4))[0]
                frame = self._read(connection, size)
                api_key, version, correlation_id, length = struct.unpack_from(">hhih", frame)
                self.requests.append((api_key, version))
                self.client_ids.append(frame[10 : 10 + length].decode())
                connection.sendall(encode_response(correlation_id, response))

    @staticmethod
    def _read(connection: socket.socket, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = connection.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()
        self.thread.join(timeout=5)


def api_versions_v0(error: ErrorCode, ranges: dict[int, tuple[int, int]]) -> object:
    module = sys.modules[response_type(18, 0).__module__]
    return module.ApiVersionsResponse(
        error_code=error,
        api_keys=tuple(
            module.ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in ranges.items()
        ),
    )


def api_versions_v3(ranges: dict[int, tuple[int, int]]) -> object:
    module = sys.modules[response_type(18, 3).__module__]
    return module.ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=tuple(
            module.ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in ranges.items()
        ),
        throttle_time=datetime.timedelta(0),
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )


def describe_quorum_v1(error: ErrorCode) -> object:
    module = sys.modules[response_type(55, 1).__module__]
    partition = module.PartitionData(
        partition_index=0,
        error_code=error,
        leader_id=-1,
        leader_epoch=-1,
        high_watermark=-1,
        current_voters=(),
        observers=(),
    )
    return module.DescribeQuorumResponse(
        error_code=ErrorCode.none,
        topics=(module.TopicData(topic_name="__cluster_metadata", partitions=(partition,)),),
    )


def test_an_old_server_is_asked_in_its_versions_and_its_error_is_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """ApiVersions v3 answered in v0 with UNSUPPORTED_VERSION still gives the ranges;
    DescribeQuorum goes at the server's highest version; a partition error is one line."""
    server = FakeServer(
        [
            api_versions_v0(ErrorCode.unsupported_version, {18: (0, 2), 55: (0, 1), 60: (0, 0)}),
            describe_quorum_v1(ErrorCode.not_leader_or_follower),
        ]
    )
    try:
        code = main(
            [
                "metadata-quorum",
                "--bootstrap-controller",
                server.address,
                "describe",
                "--replication",
            ]
        )
    finally:
        server.close()
    assert code == 1
    assert server.requests == [(18, 3), (55, 1)]
    assert capsys.readouterr().err == (
        f"Error: {server.address} answered DescribeQuorum with NOT_LEADER_OR_FOLLOWER\n"
    )


def test_a_server_without_describe_quorum_is_reported() -> None:
    server = FakeServer([api_versions_v3({18: (0, 3), 55: (3, 4)})])
    try:
        with ProtocolClient(server.address, timeout_s=5) as client:
            with pytest.raises(CommandError, match="does not serve DescribeCluster"):
                client.version_for(60, "DescribeCluster", (0, 1))
            with pytest.raises(
                CommandError, match="serves DescribeQuorum versions 3-4; this tool speaks 0-2"
            ):
                client.version_for(55, "DescribeQuorum", (0, 2))
    finally:
        server.close()


def test_command_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """client.id and the timeout are read; other properties are ignored with a warning;
    security settings that cannot work are refused before any connection."""
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_SSL\n")
    argv = [
        "metadata-quorum",
        "--bootstrap-server",
        "127.0.0.1:1",
        "--command-config",
        str(config),
        "describe",
        "--status",
    ]
    assert main(argv) == 1
    assert "SASL mechanism GSSAPI is not supported by pykraft's tools" in capsys.readouterr().err

    config.write_text("client.id=ops-tool\nacks=all\ndefault.api.timeout.ms=5000\n")
    server = FakeServer(
        [
            api_versions_v0(ErrorCode.unsupported_version, {18: (0, 2), 55: (0, 1), 60: (0, 0)}),
            describe_quorum_v1(ErrorCode.not_leader_or_follower),
        ]
    )
    argv[2] = server.address
    try:
        assert main(argv) == 1
    finally:
        server.close()
    err = capsys.readouterr().err
    assert "WARN: ignoring property acks (not used by metadata-quorum)" in err
    assert server.client_ids == ["ops-tool", "ops-tool"]
