"""`storage format --add-scram` (KIP-900): Kafka's ScramParser forms and refusals, the
records it makes (salted keys, never the password), and bootstrap.checkpoint carrying them to
the controller that bootstraps the metadata log."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from pykraft.metadata.records import UserScramCredentialRecord
from pykraft.net.scram import SCRAM_SHA_256, SCRAM_SHA_512, credential
from pykraft.server.config import ServerConfig
from pykraft.server.storage_tool import (
    StorageToolError,
    format_command,
    parse_scram_arguments,
    read_bootstrap_metadata_version,
    read_bootstrap_scram_records,
)

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"


def _config(tmp_path: Path, roles: str = "broker,controller") -> ServerConfig:
    return ServerConfig({
        "node.id": "1", "process.roles": roles,
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": "1@127.0.0.1:9093",
        "log.dirs": str(tmp_path / "logs"),
    })


def test_a_password_becomes_the_salted_keys_at_the_default_iterations() -> None:
    [record] = parse_scram_arguments(["SCRAM-SHA-256=[name=alice,password=alice-secret]"])
    assert (record.name, record.mechanism, record.iterations) == ("alice", 1, 4096)
    assert len(record.salt) == 32
    expected = credential(SCRAM_SHA_256, "alice-secret", salt=record.salt)
    assert (record.stored_key, record.server_key) == (expected.stored_key, expected.server_key)
    assert b"alice-secret" not in b"".join((record.salt, record.stored_key, record.server_key))


def test_salt_and_salted_password_in_base64_with_quotes_and_iterations() -> None:
    salt = b"7q"
    salted = SCRAM_SHA_512.salted_password(b"pw", salt, 8192)
    salt_text, salted_text = (base64.b64encode(v).decode() for v in (salt, salted))
    argument = (f'  SCRAM-SHA-512=[name="bob",iterations=8192,salt="{salt_text}",'
                f'saltedpassword="{salted_text}"]  ')
    [record] = parse_scram_arguments([argument])
    expected = credential(SCRAM_SHA_512, "pw", iterations=8192, salt=salt)
    assert record == UserScramCredentialRecord(
        name="bob", mechanism=2, salt=salt, stored_key=expected.stored_key,
        server_key=expected.server_key, iterations=8192)


def test_unpadded_base64_is_accepted_as_javas_decoder_accepts_it() -> None:
    [record] = parse_scram_arguments(["SCRAM-SHA-256=[name=a,salt=N3E,password=x]"])
    assert record.salt == base64.b64decode("N3E=")


@pytest.mark.parametrize(("argument", "message"), [
    ("SCRAM-SHA-256", "Failed to find equals sign in SCRAM argument"),
    ("SCRAM-SHA-1=[name=a,password=b]", "The add-scram mechanism SCRAM-SHA-1 is not supported."),
    ("scram-sha-256=[name=a,password=b]",
     "The add-scram mechanism scram-sha-256 is not supported."),
    ("SCRAM-SHA-256=name=a,password=b]", "Expected configuration string to start with ["),
    ("SCRAM-SHA-256=[name=a,password=b", "Expected configuration string to end with ]"),
    ("SCRAM-SHA-256=[name=a,secret]", "No equals sign found in a SCRAM component"),
    ("SCRAM-SHA-256=[password=b]", "You must supply 'name' to add-scram"),
    ("SCRAM-SHA-256=[name=a,salt=!!,password=b]", "Failed to decode given salt: !!"),
    ("SCRAM-SHA-256=[name=a,iterations=many,password=b]",
     "Failed to parse iterations count: many"),
    ("SCRAM-SHA-256=[name=a,iterations=99999999999,password=b]",
     "Failed to parse iterations count: 99999999999"),
    ("SCRAM-SHA-256=[name=a]", "You must supply one of 'password' or 'saltedpassword' to "
                               "add-scram"),
    ("SCRAM-SHA-256=[name=a,saltedpassword=YCE=]",
     "You must supply 'salt' with 'saltedpassword' to add-scram"),
    ("SCRAM-SHA-256=[name=a,salt=N3E=,saltedpassword=%%]", "Failed to decode given "
                                                           "saltedPassword"),
    ("SCRAM-SHA-256=[name=a,password=b,colour=red,age=3]",
     "Unknown SCRAM configurations: age, colour"),
    ("SCRAM-SHA-256=[name=a,iterations=4095,password=b]",
     "The 'iterations' value must be >= 4096 for add-scram using SCRAM_SHA_256"),
    ("SCRAM-SHA-512=[name=a,iterations=16385,password=b]",
     "The 'iterations' value must be <= 16384 for add-scram using SCRAM_SHA_512"),
])
def test_kafkas_refusals(argument: str, message: str) -> None:
    with pytest.raises(StorageToolError) as refused:
        parse_scram_arguments([argument])
    assert str(refused.value) == message


def test_a_refusal_never_echoes_a_password_or_a_salted_password() -> None:
    for argument in ("SCRAM-SHA-256=[name=a,password=top,secret]",
                     "SCRAM-SHA-256=[name=a,salt=N3E=,saltedpassword=top-secret]",
                     "SCRAM-SHA-256 password top-secret"):
        with pytest.raises(StorageToolError) as refused:
            parse_scram_arguments([argument])
        assert "secret" not in str(refused.value)


def test_format_writes_the_credentials_after_the_level_into_bootstrap_checkpoint(
        tmp_path: Path) -> None:
    config = _config(tmp_path)
    format_command(config, cluster_id=CLUSTER, ignore_formatted=False,
                   add_scram=["SCRAM-SHA-256=[name=alice,password=a]",
                              "SCRAM-SHA-512=[name=admin,iterations=8192,password=b]"])
    records = read_bootstrap_scram_records(tmp_path / "logs")
    assert [(r.name, r.mechanism, r.iterations) for r in records] == [
        ("alice", 1, 4096), ("admin", 2, 8192)]
    assert read_bootstrap_metadata_version(tmp_path / "logs") is not None
    raw = (tmp_path / "logs" / "bootstrap.checkpoint").read_bytes()
    assert b"alice" in raw and b"admin" in raw


def test_format_without_add_scram_bootstraps_no_credential(tmp_path: Path) -> None:
    format_command(_config(tmp_path), cluster_id=CLUSTER, ignore_formatted=False)
    assert read_bootstrap_scram_records(tmp_path / "logs") == ()
    assert read_bootstrap_scram_records(tmp_path / "nowhere") == ()


def test_scram_needs_metadata_version_3_5_iv2(tmp_path: Path) -> None:
    with pytest.raises(StorageToolError) as refused:
        format_command(_config(tmp_path), cluster_id=CLUSTER, ignore_formatted=False,
                       release_version="3.4", add_scram=["SCRAM-SHA-256=[name=a,password=b]"])
    assert str(refused.value) == "SCRAM is only supported in metadata.version 3.5-IV2 or later."
    assert not (tmp_path / "logs").exists()
    format_command(_config(tmp_path), cluster_id=CLUSTER, ignore_formatted=False,
                   release_version="3.5-IV2", add_scram=["SCRAM-SHA-256=[name=a,password=b]"])
    assert len(read_bootstrap_scram_records(tmp_path / "logs")) == 1
