"""storage_tool: cluster ids, formatting every log dir, and the start-up check that refuses
unformatted or foreign dirs with a message naming the dir."""

from __future__ import annotations

import base64
import re
import uuid
from pathlib import Path

import pytest

from pykraft.server.config import ServerConfig
from pykraft.server.storage_tool import (
    StorageToolError,
    all_dirs,
    check_storage,
    format_storage,
    random_uuid,
)
from pykraft.storage.meta_properties import read_meta_properties

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"  # the id Kafka's quick start docs use


def make_config(tmp_path: Path, *, node_id: int = 1, dirs: tuple[str, ...] = ("a", "b"),
                metadata_dir: str | None = None) -> ServerConfig:
    values = {
        "node.id": str(node_id),
        "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"{node_id}@127.0.0.1:9093",
        "log.dirs": ",".join(str(tmp_path / d) for d in dirs),
    }
    if metadata_dir is not None:
        values["metadata.log.dir"] = str(tmp_path / metadata_dir)
    return ServerConfig(values)


def test_random_uuid_is_a_22_char_url_safe_id_of_16_bytes() -> None:
    ids = {random_uuid() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        assert len(cluster_id) == 22
        assert not cluster_id.startswith("-")
        assert set(cluster_id) <= set(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_format_writes_meta_properties_in_every_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config(tmp_path, node_id=4, metadata_dir="meta")
    assert format_storage(config, cluster_id=CLUSTER, ignore_formatted=False) == CLUSTER
    assert all_dirs(config) == [tmp_path / "a", tmp_path / "b", tmp_path / "meta"]
    directory_ids = set()
    for directory in all_dirs(config):
        text = (directory / "meta.properties").read_text()
        assert "version=1" in text.splitlines()
        assert f"cluster.id={CLUSTER}" in text.splitlines()
        assert "node.id=4" in text.splitlines()
        meta = read_meta_properties(directory)
        assert meta is not None and meta.directory_id is not None
        directory_ids.add(meta.directory_id)
    assert len(directory_ids) == 3  # one id per directory
    output = capsys.readouterr().out
    assert output.count("Formatting") == 3 and str(tmp_path / "meta") in output


def test_formatting_a_formatted_dir_fails_unless_ignore_formatted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    format_storage(make_config(tmp_path, dirs=("a",)), cluster_id=CLUSTER,
                   ignore_formatted=False)
    before = (tmp_path / "a" / "meta.properties").read_text()
    config = make_config(tmp_path, dirs=("a", "b"))
    with pytest.raises(StorageToolError) as caught:
        format_storage(config, cluster_id=CLUSTER, ignore_formatted=False)
    assert str(tmp_path / "a") in str(caught.value)
    assert "already formatted" in str(caught.value)
    assert "--ignore-formatted" in str(caught.value)
    assert not (tmp_path / "b" / "meta.properties").exists()  # nothing written on failure
    capsys.readouterr()
    format_storage(config, cluster_id=CLUSTER, ignore_formatted=True)
    assert (tmp_path / "a" / "meta.properties").read_text() == before  # left as it was
    assert read_meta_properties(tmp_path / "b") is not None
    assert "Formatting" in capsys.readouterr().out
    format_storage(config, cluster_id=CLUSTER, ignore_formatted=True)
    assert "All of the log directories are already formatted" in capsys.readouterr().out


def test_ignore_formatted_still_refuses_a_dir_of_another_cluster(tmp_path: Path) -> None:
    format_storage(make_config(tmp_path, dirs=("a",)), cluster_id=CLUSTER,
                   ignore_formatted=False)
    with pytest.raises(StorageToolError, match="cluster.id.*a/meta.properties"):
        format_storage(make_config(tmp_path), cluster_id=random_uuid(), ignore_formatted=True)
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("cluster_id", ["not-a-uuid", "", "AAAAAAAAAAAAAAAAAAAAA",
                                        "AAAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAA+/A",
                                        # 22 good characters and a stray one
                                        "AAAAAAAAAAAAAAAAAAAAA!A", "AAAAAAAAAAAAAA AAAAAAAA"])
def test_an_invalid_cluster_id_fails_before_writing(tmp_path: Path, cluster_id: str) -> None:
    with pytest.raises(StorageToolError, match="does not appear to be a valid UUID"):
        format_storage(make_config(tmp_path), cluster_id=cluster_id, ignore_formatted=False)
    assert not (tmp_path / "a").exists()


def test_auto_format_reuses_the_existing_cluster_id(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    first = format_storage(config, cluster_id=None, ignore_formatted=True, quiet=True)
    assert len(first) == 22
    assert format_storage(config, cluster_id=None, ignore_formatted=True, quiet=True) == first
    # a dir added later joins the existing cluster
    grown = make_config(tmp_path, dirs=("a", "b", "c"))
    assert format_storage(grown, cluster_id=None, ignore_formatted=True, quiet=True) == first
    assert check_storage(grown).cluster_id == first


def test_check_storage_returns_the_cluster_and_data_dir_ids(tmp_path: Path) -> None:
    config = make_config(tmp_path, metadata_dir="meta")
    format_storage(config, cluster_id=CLUSTER, ignore_formatted=False, quiet=True)
    info = check_storage(config)
    assert info.cluster_id == CLUSTER
    expected = []
    for name in ("a", "b"):
        meta = read_meta_properties(tmp_path / name)
        assert meta is not None
        expected.append(meta.directory_id)
    assert list(info.directory_ids) == expected  # data dirs only, in log.dirs order


def test_check_storage_refuses_an_unformatted_dir(tmp_path: Path) -> None:
    format_storage(make_config(tmp_path, dirs=("a",)), cluster_id=CLUSTER,
                   ignore_formatted=False, quiet=True)
    with pytest.raises(StorageToolError) as caught:
        check_storage(make_config(tmp_path))
    message = str(caught.value)
    assert str(tmp_path / "b") in message and "storage format" in message


def test_check_storage_refuses_another_cluster_naming_the_dir(tmp_path: Path) -> None:
    format_storage(make_config(tmp_path, dirs=("a",)), cluster_id=CLUSTER,
                   ignore_formatted=False, quiet=True)
    format_storage(make_config(tmp_path, dirs=("b",)), cluster_id=random_uuid(),
                   ignore_formatted=False, quiet=True)
    with pytest.raises(StorageToolError) as caught:
        check_storage(make_config(tmp_path))
    assert "cluster.id" in str(caught.value)
    assert str(tmp_path / "b") in str(caught.value)


def test_check_storage_refuses_another_node_naming_the_dir(tmp_path: Path) -> None:
    format_storage(make_config(tmp_path, node_id=2), cluster_id=CLUSTER,
                   ignore_formatted=False, quiet=True)
    with pytest.raises(StorageToolError) as caught:
        check_storage(make_config(tmp_path, node_id=1))
    message = str(caught.value)
    assert "node id 2" in message and "node id 1" in message
    assert str(tmp_path / "a") in message


def test_check_storage_refuses_a_zookeeper_era_dir(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "meta.properties").write_text(
        f"version=0\nbroker.id=1\ncluster.id={CLUSTER}\n")
    with pytest.raises(StorageToolError, match="version 0"):
        check_storage(make_config(tmp_path, dirs=("a",)))


def test_check_storage_refuses_a_corrupt_meta_properties(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "meta.properties").write_text("version=1\nnode.id=one\n")
    with pytest.raises(StorageToolError, match=re.escape(str(tmp_path / "a"))):
        check_storage(make_config(tmp_path, dirs=("a",)))


def test_check_storage_refuses_copied_dirs_with_one_directory_id(tmp_path: Path) -> None:
    format_storage(make_config(tmp_path, dirs=("a",)), cluster_id=CLUSTER,
                   ignore_formatted=False, quiet=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "meta.properties").write_bytes(
        (tmp_path / "a" / "meta.properties").read_bytes())
    with pytest.raises(StorageToolError, match="duplicate directory.id"):
        check_storage(make_config(tmp_path))


def test_check_storage_gives_an_old_dir_a_directory_id(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "meta.properties").write_text(
        f"version=1\nnode.id=1\ncluster.id={CLUSTER}\n")
    info = check_storage(make_config(tmp_path, dirs=("a",)))
    meta = read_meta_properties(tmp_path / "a")
    assert meta is not None and meta.directory_id is not None
    assert info.directory_ids == (meta.directory_id,)
    assert isinstance(meta.directory_id, uuid.UUID)
    assert check_storage(make_config(tmp_path, dirs=("a",))).directory_ids == info.directory_ids
