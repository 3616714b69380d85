"""The active controller bootstraps an empty metadata log at the level `storage format`
wrote (ControllerConfig.bootstrap_metadata_version), and at pykraft's default without one."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from pykraft.controller.config import ControllerConfig
from pykraft.controller.features import BOOTSTRAP_METADATA_VERSION, MV_3_7_IV2
from pykraft.controller.quorum_controller import QuorumController
from pykraft.metadata.records import FeatureLevelRecord
from pykraft.server.config import ServerConfig
from pykraft.server.storage_tool import (
    StorageToolError,
    format_command,
    read_bootstrap_metadata_version,
)


def active(config: ControllerConfig) -> QuorumController:
    controller = QuorumController(config, random.Random(1))
    controller.activate(leader_epoch=1, next_write_offset=0, now_ms=0)
    return controller


def test_bootstrap_writes_the_configured_level() -> None:
    config = ControllerConfig.from_properties({"node.id": "1"},
                                              bootstrap_metadata_version=MV_3_7_IV2)
    result = active(config).bootstrap()
    assert result.records == (FeatureLevelRecord(name="metadata.version",
                                                 feature_level=MV_3_7_IV2),)
    assert result.response == MV_3_7_IV2


def test_without_a_formatted_level_the_default_is_kept() -> None:
    result = active(ControllerConfig(node_id=1)).bootstrap()
    assert result.response == BOOTSTRAP_METADATA_VERSION == 21


def server_config(tmp_path: Path) -> ServerConfig:
    return ServerConfig({
        "node.id": "1", "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": "1@localhost:9093", "log.dirs": str(tmp_path / "logs"),
    })


@pytest.mark.parametrize(("release", "level"), [("3.3-IV3", 7), ("3.7", 19), ("4.0", 22)])
def test_format_writes_what_the_controller_reads(tmp_path: Path, release: str,
                                                 level: int) -> None:
    config = server_config(tmp_path)
    format_command(config, cluster_id="MkU3OEVBNTcwNTJENDM2Qg", ignore_formatted=False,
                   release_version=release)
    assert read_bootstrap_metadata_version(config.metadata_log_dir) == level


def test_a_dir_formatted_by_an_older_pykraft_has_no_level(tmp_path: Path) -> None:
    assert read_bootstrap_metadata_version(tmp_path) is None


def test_a_damaged_bootstrap_checkpoint_is_one_readable_error(tmp_path: Path) -> None:
    (tmp_path / "bootstrap.checkpoint").write_bytes(b"\x00" * 7)
    with pytest.raises(StorageToolError, match="bootstrap.checkpoint"):
        read_bootstrap_metadata_version(tmp_path)
