"""`pykraft storage format` / `random-uuid`, and the start-up check of formatted dirs.

Kafka's rule: every log dir (and the metadata log dir) holds a `meta.properties` naming the
cluster id and this node's id; a node refuses to start on an unformatted dir (unless it was
asked to format it) or on one formatted for another cluster or node.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path

from pykraft.server.config import ServerConfig
from pykraft.storage.meta_properties import (
    MetaProperties,
    read_meta_properties,
    write_meta_properties,
)


class StorageToolError(Exception):
    """Formatting or checking storage failed; the message says which dir and why."""


def random_uuid() -> str:
    """A cluster id as Kafka makes them: a random UUID in URL-safe base64, unpadded."""
    while True:
        value = uuid.uuid4()
        text = base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
        if not text.startswith("-"):  # Kafka avoids ids that look like command-line flags
            return text


def _valid_cluster_id(cluster_id: str) -> bool:
    try:
        return len(base64.urlsafe_b64decode(cluster_id + "==")) == 16
    except ValueError:
        return False


def all_dirs(config: ServerConfig) -> list[Path]:
    dirs = list(config.log_dirs)
    if config.metadata_log_dir not in dirs:
        dirs.append(config.metadata_log_dir)
    return dirs


def format_storage(
    config: ServerConfig, *, cluster_id: str | None, ignore_formatted: bool,
    quiet: bool = False,
) -> str:
    """Write meta.properties into every unformatted dir; return the cluster id used.

    With `cluster_id=None` (auto-format of the quick start) an already formatted dir's id is
    reused, so restarting `pykraft server start` keeps its data.
    """
    existing = {d: _read(d) for d in all_dirs(config)}
    formatted = {d: p for d, p in existing.items() if p is not None}
    if cluster_id is None:
        ids = {p.cluster_id for p in formatted.values() if p.cluster_id is not None}
        cluster_id = ids.pop() if len(ids) == 1 else random_uuid()
    if not _valid_cluster_id(cluster_id):
        raise StorageToolError(f"Cluster ID string {cluster_id} does not appear to be a valid "
                               "UUID: use `pykraft storage random-uuid` to make one")
    if formatted and not ignore_formatted:
        names = ", ".join(str(d) for d in formatted)
        raise StorageToolError(f"Log directory {names} is already formatted. "
                               "Use --ignore-formatted to ignore this directory and format "
                               "the others.")
    for directory, properties in existing.items():
        if properties is not None:
            _check(directory, properties, cluster_id, config.node_id)
            continue
        try:
            directory.mkdir(parents=True, exist_ok=True)
            write_meta_properties(directory, MetaProperties(
                version=1, cluster_id=cluster_id, node_id=config.node_id,
                directory_id=uuid.uuid4()))
        except OSError as error:
            raise StorageToolError(f"cannot format {directory}: {error.strerror}") from error
        if not quiet:
            print(f"Formatting {directory} with metadata.version for cluster {cluster_id}")
    return cluster_id


@dataclass(frozen=True, slots=True)
class StorageInfo:
    cluster_id: str
    directory_ids: tuple[uuid.UUID, ...]  # of the data log dirs, in log.dirs order


def check_storage(config: ServerConfig) -> StorageInfo:
    """Refuse to start on unformatted or foreign dirs; return the cluster and dir ids."""
    cluster_id: str | None = None
    directory_ids: dict[Path, uuid.UUID] = {}
    for directory in all_dirs(config):
        properties = _read(directory)
        if properties is None:
            raise StorageToolError(
                f"No meta.properties found in {directory} (have you run `pykraft storage "
                "format --config <file> --cluster-id <id>`?)")
        _check(directory, properties, cluster_id or properties.cluster_id, config.node_id)
        cluster_id = properties.cluster_id
        if cluster_id is None:
            raise StorageToolError(f"{directory}/meta.properties has no cluster.id")
        if properties.directory_id is None:
            raise StorageToolError(f"{directory}/meta.properties has no directory.id")
        directory_ids[directory] = properties.directory_id
    assert cluster_id is not None
    return StorageInfo(cluster_id, tuple(directory_ids[d] for d in config.log_dirs))


def _read(directory: Path) -> MetaProperties | None:
    try:
        return read_meta_properties(directory)
    except (OSError, ValueError) as error:
        raise StorageToolError(f"cannot use {directory}/meta.properties: {error}") from error


def _check(directory: Path, properties: MetaProperties, cluster_id: str | None,
           node_id: int) -> None:
    if properties.cluster_id != cluster_id:
        raise StorageToolError(
            f"Invalid cluster.id in {directory}/meta.properties: found {properties.cluster_id}, "
            f"but the other directories (or the requested id) say {cluster_id}")
    if properties.node_id != node_id:
        raise StorageToolError(
            f"Stored node id {properties.node_id} in {directory}/meta.properties doesn't match "
            f"the configured node.id {node_id}")
