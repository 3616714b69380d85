"""`pykraft storage format` / `random-uuid`, and the start-up check of formatted dirs.

Kafka's rule: every log dir (and the metadata log dir) holds a `meta.properties` naming the
cluster id and this node's id; a node refuses to start on an unformatted dir (unless it was
asked to format it) or on one formatted for another cluster or node.
"""

from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from pykraft.errors import InconsistentClusterId
from pykraft.server.config import ServerConfig
from pykraft.storage.meta_properties import (
    META_PROPERTIES_FILE,
    MetaProperties,
    MetaPropertiesError,
    read_meta_properties,
    verify_ensemble,
    write_meta_properties,
)

_CLUSTER_ID: Final = re.compile(r"[A-Za-z0-9_-]{22}(==)?")


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
    """A Kafka Uuid string: 22 URL-safe base64 characters (16 bytes), maybe padded. The
    alphabet is checked here because Python's decoder skips characters outside it."""
    return _CLUSTER_ID.fullmatch(cluster_id) is not None


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
    if cluster_id is not None and not _valid_cluster_id(cluster_id):
        raise StorageToolError(f"Cluster ID string {cluster_id} does not appear to be a valid "
                               "UUID: use `pykraft storage random-uuid` to make one")
    if formatted and not ignore_formatted:
        names = ", ".join(str(d) for d in formatted)
        raise StorageToolError(f"Log directory {names} is already formatted. "
                               "Use --ignore-formatted to ignore this directory and format "
                               "the others.")
    _verify(formatted, cluster_id, config.node_id)
    if cluster_id is None:
        ids = [p.cluster_id for p in formatted.values() if p.cluster_id is not None]
        cluster_id = ids[0] if ids else random_uuid()
    unformatted = [d for d, p in existing.items() if p is None]
    for directory in unformatted:
        try:
            write_meta_properties(directory, MetaProperties(
                version=1, cluster_id=cluster_id, node_id=config.node_id,
                directory_id=uuid.uuid4()))
        except OSError as error:
            raise StorageToolError(f"cannot format {directory}: {error.strerror}") from error
        if not quiet:
            print(f"Formatting {directory} for cluster {cluster_id} (node {config.node_id})")
    if not unformatted and not quiet:
        print("All of the log directories are already formatted.")
    return cluster_id


@dataclass(frozen=True, slots=True)
class StorageInfo:
    cluster_id: str
    directory_ids: tuple[uuid.UUID, ...]  # of the data log dirs, in log.dirs order


def check_storage(config: ServerConfig) -> StorageInfo:
    """Refuse to start on unformatted or foreign dirs; return the cluster and dir ids.

    A dir formatted before directory ids existed gets one now, as Kafka's start-up does.
    """
    metas: dict[Path, MetaProperties] = {}
    for directory in all_dirs(config):
        properties = _read(directory)
        if properties is None:
            raise StorageToolError(
                f"No meta.properties found in {directory} (have you run `pykraft storage "
                "format --config <file> --cluster-id <id>`?)")
        metas[directory] = properties
    _verify(metas, None, config.node_id)
    for directory, properties in metas.items():
        if properties.directory_id is None:
            properties = replace(properties, directory_id=uuid.uuid4())
            try:
                write_meta_properties(directory, properties)
            except OSError as error:
                raise StorageToolError(f"cannot add a directory.id to {directory}/"
                                       f"{META_PROPERTIES_FILE}: {error.strerror}") from error
            metas[directory] = properties
    cluster_id = next(iter(metas.values())).cluster_id
    assert cluster_id is not None  # version 1 files always have one (checked on reading)
    directory_ids = {d: p.directory_id for d, p in metas.items() if p.directory_id is not None}
    return StorageInfo(cluster_id, tuple(directory_ids[d] for d in config.log_dirs))


def _read(directory: Path) -> MetaProperties | None:
    try:
        return read_meta_properties(directory)
    except MetaPropertiesError as error:  # its message names the file
        raise StorageToolError(str(error)) from error
    except OSError as error:
        raise StorageToolError(f"cannot use {directory}/{META_PROPERTIES_FILE}: "
                               f"{error.strerror or error}") from error


def _verify(metas: dict[Path, MetaProperties], cluster_id: str | None, node_id: int) -> None:
    """Every dir: version 1, one cluster id (the requested one if given), this node's id."""
    try:
        verify_ensemble(metas, expected_cluster_id=cluster_id, expected_node_id=node_id)
    except (MetaPropertiesError, InconsistentClusterId) as error:
        raise StorageToolError(str(error)) from error
