"""SCRAM credentials as metadata (KIP-554, KIP-900) on one real node of this module's own:
`storage format --add-scram` bootstraps them, confluent-kafka's AdminClient and `pykraft
configs --entity-type users` (kafka-configs.sh) alter and describe them, and they survive a
metadata snapshot and a restart. Snapshots are made often here (a tiny
metadata.log.max.record.bytes.between.snapshots), so the restart loads one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0 import request as describe_v0
from kio.schema.errors import ErrorCode

from pykraft.cli.main import main
from pykraft.metadata.codec import decode_metadata_record
from pykraft.metadata.records import UserScramCredentialRecord
from pykraft.raft.snapshot import parse_snapshot_file_name, snapshot_values
from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient
from tests.integration.tool_helpers import eventually, pykraft

SNAPSHOT_CONFIGS = {
    "metadata.log.max.record.bytes.between.snapshots": "1000",
    "metadata.log.max.snapshot.interval.ms": "0",
}
SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


@pytest.fixture(scope="module")
def node() -> Iterator[LocalCluster]:
    cluster = LocalCluster(configs=SNAPSHOT_CONFIGS)
    try:  # formatted here with the bootstrap credentials; start() leaves it as it is
        result = subprocess.run(
            [sys.executable, "-m", "pykraft", "storage", "format", "--config",
             str(cluster.config_path), "--cluster-id", cluster.cluster_id,
             "--add-scram", "SCRAM-SHA-512=[name=admin,iterations=8192,password=admin-secret]",
             "--add-scram", "SCRAM-SHA-256=[name=admin2,password=admin2-secret]"],
            capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        cluster.start()
        yield cluster
    finally:
        cluster.close()


def admin(node: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": node.bootstrap_servers})


def described(node: LocalCluster, user: str) -> list[tuple[str, int]] | int:
    """(mechanism, iterations) of a user's credentials, or the error code describing it."""
    client = admin(node)  # alive until the answer comes: a destroyed client fails it
    future = client.describe_user_scram_credentials([user], request_timeout=15)[user]
    try:
        description = future.result(30)
    except KafkaException as error:
        return int(error.args[0].code())
    return sorted((info.mechanism.name, info.iterations)
                  for info in description.scram_credential_infos)


def alter(node: LocalCluster, *alterations: object) -> dict[str, int]:
    """Each user's error code (0 for success)."""
    client = admin(node)
    futures = client.alter_user_scram_credentials(list(alterations), request_timeout=15)
    codes = {}
    for user, future in futures.items():
        try:
            future.result(30)
            codes[user] = 0
        except KafkaException as error:
            codes[user] = int(error.args[0].code())
    return codes


_capsys: pytest.CaptureFixture[str] | None = None


@pytest.fixture(autouse=True)
def _capture(capsys: pytest.CaptureFixture[str]) -> Iterator[None]:
    global _capsys
    _capsys = capsys
    yield
    _capsys = None


def configs(node: LocalCluster, *argv: str) -> subprocess.CompletedProcess[str]:
    """`pykraft configs` through the command's own entry point in this process (a
    subprocess costs a second or more of start-up per call); the first test of the tool runs
    it as a real process."""
    assert _capsys is not None
    _capsys.readouterr()
    full = ["configs", "--bootstrap-server", node.bootstrap_servers, *argv]
    code = main(full)
    captured = _capsys.readouterr()
    return subprocess.CompletedProcess(full, code, captured.out, captured.err)


def test_the_formatted_credentials_are_in_the_image_at_first_start(node: LocalCluster) -> None:
    assert described(node, "admin") == [("SCRAM_SHA_512", 8192)]
    assert described(node, "admin2") == [("SCRAM_SHA_256", 4096)]


def test_admin_client_upserts_describes_and_deletes_with_kafkas_errors(
        node: LocalCluster) -> None:
    assert alter(node, UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(SHA256, 4096), b"alice-secret"),
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(SHA512, 10000),
                                     b"carol-secret")) == {"alice": 0, "carol": 0}
    eventually(lambda: _expect(described(node, "alice"), [("SCRAM_SHA_256", 4096)]))
    assert described(node, "carol") == [("SCRAM_SHA_512", 10000)]
    client = admin(node)
    everyone = client.describe_user_scram_credentials(request_timeout=15).result(30)
    assert {"admin", "admin2", "alice", "carol"} <= set(everyone)
    assert described(node, "nobody") == KafkaError.RESOURCE_NOT_FOUND

    assert alter(node, UserScramCredentialDeletion("nobody", SHA256)) \
        == {"nobody": KafkaError.RESOURCE_NOT_FOUND}
    assert alter(node, UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(SHA512, 20000), b"pw")) \
        == {"dave": KafkaError.UNACCEPTABLE_CREDENTIAL}
    assert described(node, "dave") == KafkaError.RESOURCE_NOT_FOUND

    assert alter(node, UserScramCredentialDeletion("alice", SHA256)) == {"alice": 0}
    eventually(lambda: _expect(described(node, "alice"), KafkaError.RESOURCE_NOT_FOUND))
    assert described(node, "carol") == [("SCRAM_SHA_512", 10000)]


def _expect(actual: object, expected: object) -> None:
    assert actual == expected


def test_configs_tool_alters_and_describes_users_as_kafka_configs_does(
        node: LocalCluster) -> None:
    user = ("--entity-type", "users", "--entity-name", "dora")
    done = pykraft("configs", "--bootstrap-server", node.bootstrap_servers, "--alter", *user,
                   "--add-config", "SCRAM-SHA-512=[iterations=8192,password=dora,secret]")
    assert (done.returncode, done.stdout, done.stderr) == (
        0, "Completed updating config for user dora.\n", "")
    assert configs(node, "--alter", "--user", "dora", "--add-config",
                   "SCRAM-SHA-256=[password=dora-secret]").returncode == 0

    def both() -> None:
        shown = configs(node, "--describe", *user)
        assert shown.returncode == 0, shown.stderr
        assert ("SCRAM credential configs for user-principal 'dora' are "
                "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=8192"
                in shown.stdout.splitlines())

    eventually(both)
    everyone = configs(node, "--describe", "--entity-type", "users")
    assert "SCRAM credential configs for user-principal 'admin' are " \
           "SCRAM-SHA-512=iterations=8192" in everyone.stdout.splitlines()
    assert "dora" in everyone.stdout
    assert "'nobody'" not in configs(node, "--describe", "--user", "nobody").stdout

    deleted = configs(node, "--alter", *user, "--delete-config", "SCRAM-SHA-512")
    assert deleted.returncode == 0, deleted.stderr

    def one() -> None:
        assert ("SCRAM credential configs for user-principal 'dora' are "
                "SCRAM-SHA-256=iterations=4096"
                in configs(node, "--describe", *user).stdout.splitlines())

    eventually(one)


@pytest.mark.parametrize(("argv", "message"), [
    (("--add-config", "SCRAM-SHA-512=[iterations=100,password=x]"),
     "Error: Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-512"),
    (("--add-config", "SCRAM-SHA-512=[iterations=20000,password=x]"),
     "Error: UNACCEPTABLE_CREDENTIAL: Too many iterations"),
    (("--add-config", "SCRAM-SHA-512=[pasword=very-secret]"),
     "Error: Invalid credential property SCRAM_SHA_512 (expected "
     "[iterations=<n>,]password=<password>)"),
    (("--add-config", "SCRAM-SHA-512=[password=x],consumer_byte_rate=10"),
     "Error: Cannot alter both quota and SCRAM credential configs simultaneously for 'users' "
     "using --bootstrap-server."),
    (("--delete-config", "SCRAM-SHA-256"),
     "Error: RESOURCE_NOT_FOUND: Attempt to delete a user credential that does not exist"),
    # Kafka's controller takes one alteration per user and request
    (("--add-config", "SCRAM-SHA-256=[password=x],SCRAM-SHA-512=[password=x]"),
     "Error: DUPLICATE_RESOURCE: A user credential cannot be altered twice in the same "
     "request"),
])
def test_configs_tool_refusals_in_one_line_without_the_password(
        node: LocalCluster, argv: tuple[str, ...], message: str) -> None:
    result = configs(node, "--alter", "--entity-type", "users", "--entity-name", "erik", *argv)
    assert result.returncode == 1, result.stdout
    assert result.stderr.splitlines() == [message]
    assert "secret" not in result.stderr


def test_configs_tool_refuses_scram_for_the_default_user_and_for_clients(
        node: LocalCluster) -> None:
    default = configs(node, "--alter", "--entity-type", "users", "--entity-default",
                      "--add-config", "SCRAM-SHA-256=[password=x]")
    assert default.stderr.splitlines() == [
        "Error: The use of --entity-default or --user-defaults is not allowed with User SCRAM "
        "Credentials using --bootstrap-server."]
    pair = configs(node, "--alter", "--entity-type", "users", "--entity-name", "u",
                   "--entity-type", "clients", "--entity-name", "c",
                   "--add-config", "SCRAM-SHA-256=[password=x]")
    assert pair.stderr.splitlines() == [
        "Error: Only quota configs can be added for 'clients' using --bootstrap-server. "
        "Unexpected config names: SCRAM-SHA-256"]


def _snapshot_users(node: LocalCluster) -> set[str]:
    """The users whose credentials the node's latest metadata snapshot holds."""
    directory = node.log_dir / "__cluster_metadata-0"
    snapshots = sorted((found.end_offset, path) for path in directory.glob("*.checkpoint")
                       if (found := parse_snapshot_file_name(path.name)) is not None)
    assert snapshots, "no snapshot yet"
    data = Path(snapshots[-1][1]).read_bytes()
    records = (decode_metadata_record(value) for value in snapshot_values([data]))
    return {r.name for r in records if isinstance(r, UserScramCredentialRecord)}


def test_credentials_survive_a_snapshot_and_a_restart(node: LocalCluster) -> None:
    assert alter(node, UserScramCredentialUpsertion(
        "erin", ScramCredentialInfo(SHA512, 4096), b"erin-secret"),
        UserScramCredentialDeletion("admin2", SHA256)) == {"erin": 0, "admin2": 0}
    for index in range(4):  # more metadata, so that a snapshot past these records is made
        name = f"filler-{index}"
        assert alter(node, UserScramCredentialUpsertion(
            name, ScramCredentialInfo(SHA256, 4096), b"x")) == {name: 0}

    def snapshotted() -> None:
        users = _snapshot_users(node)
        assert "erin" in users and "filler-0" in users and "admin2" not in users

    eventually(snapshotted, timeout_s=30)
    before = {user: described(node, user) for user in ("admin", "admin2", "erin", "carol")}
    assert before["erin"] == [("SCRAM_SHA_512", 4096)]
    assert before["admin2"] == KafkaError.RESOURCE_NOT_FOUND
    node.stop()
    node.start()
    # the bootstrap credentials are not written again: admin2 stays deleted
    assert {user: described(node, user) for user in before} == before


def test_a_broker_forwards_to_the_controller_and_a_controller_listener_serves_them() -> None:
    """With the controller in another process the broker forwards AlterUserScramCredentials
    over the network (its refusals come back as they are), and a controller listener takes
    the APIs itself (KIP-919 tools with --bootstrap-controller)."""
    with LocalCluster(controllers=1, brokers=1) as cluster:
        broker = cluster.node(cluster.broker_ids[0])
        controller = f"127.0.0.1:{cluster.node(cluster.controller_ids[0]).controller_port}"
        assert alter(broker, UserScramCredentialUpsertion(
            "frank", ScramCredentialInfo(SHA512, 4096), b"frank-secret")) == {"frank": 0}
        assert alter(broker, UserScramCredentialDeletion("nobody", SHA512)) \
            == {"nobody": KafkaError.RESOURCE_NOT_FOUND}
        eventually(lambda: _expect(described(broker, "frank"), [("SCRAM_SHA_512", 4096)]))
        done = pykraft("configs", "--bootstrap-controller", controller, "--alter",
                       "--user", "gina", "--add-config", "SCRAM-SHA-256=[password=gina-secret]")
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        eventually(lambda: _expect(described(broker, "gina"), [("SCRAM_SHA_256", 4096)]))

        def from_the_controller() -> None:  # its own image, on its controller listener
            with WireClient(controller) as wire:
                answer = wire.request(50, 0, describe_v0.DescribeUserScramCredentialsRequest(
                    users=None))
            assert [(r.user, r.error_code, [(i.mechanism, i.iterations)
                                            for i in r.credential_infos])
                    for r in answer.results] == [("frank", ErrorCode.none, [(2, 4096)]),
                                                 ("gina", ErrorCode.none, [(1, 4096)])]

        eventually(from_the_controller)
