"""`meta.properties`: which cluster and node a log directory belongs to.

Every log directory (and the metadata log directory) carries this Java-properties file,
written by `storage format`. A KRaft node writes version 1:

    version=1
    cluster.id=<cluster id>
    node.id=<node id>
    directory.id=<base64 Uuid, unique per directory>

Version 0 (ZooKeeper era: `broker.id` instead of `node.id`) is read so that the error for
it is clear, but a KRaft node requires version 1. At startup every directory's file must
agree on cluster.id and node.id with each other and with the configuration, and directory
ids must be distinct and not among Kafka's reserved ids; `verify_ensemble` checks that.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pykraft.errors import InconsistentClusterId
from pykraft.storage.checkpoint import kafka_uuid_string, parse_kafka_uuid, write_atomically

__all__ = [
    "META_PROPERTIES_FILE",
    "MetaProperties",
    "MetaPropertiesError",
    "format_java_properties",
    "generate_directory_id",
    "parse_java_properties",
    "read_meta_properties",
    "verify_ensemble",
    "write_meta_properties",
]

META_PROPERTIES_FILE: Final = "meta.properties"
_RESERVED_DIRECTORY_IDS: Final = 100  # Uuids (0, 0) .. (0, 99) mean unassigned, lost, ...


class MetaPropertiesError(ValueError):
    """meta.properties is missing a field, malformed, or contradicts the configuration."""


@dataclass(frozen=True, slots=True)
class MetaProperties:
    version: int
    cluster_id: str | None
    node_id: int | None
    directory_id: uuid.UUID | None = None
    other: Mapping[str, str] = field(default_factory=dict)  # unknown keys, kept on rewrite

    def to_properties(self) -> dict[str, str]:
        result = dict(self.other)
        result["version"] = str(self.version)
        if self.cluster_id is not None:
            result["cluster.id"] = self.cluster_id
        if self.node_id is not None:
            result["broker.id" if self.version == 0 else "node.id"] = str(self.node_id)
        if self.directory_id is not None:
            result["directory.id"] = kafka_uuid_string(self.directory_id)
        return result

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], source: str) -> MetaProperties:
        values = dict(properties)
        version = _integer(values.pop("version", None), "version", source)
        if version not in (0, 1):
            raise MetaPropertiesError(f"{source}: unknown meta.properties version {version}")
        cluster_id = values.pop("cluster.id", None)
        node_key = "broker.id" if version == 0 else "node.id"
        raw_node_id = values.pop(node_key, None)
        node_id = None if raw_node_id is None else _integer(raw_node_id, node_key, source)
        if version == 1 and (cluster_id is None or node_id is None):
            raise MetaPropertiesError(f"{source}: version 1 needs both cluster.id and node.id")
        raw_directory_id = values.pop("directory.id", None)
        directory_id = None
        if raw_directory_id is not None:
            try:
                directory_id = parse_kafka_uuid(raw_directory_id)
            except ValueError as error:
                raise MetaPropertiesError(f"{source}: directory.id: {error}") from None
        return cls(version, cluster_id, node_id, directory_id, values)

    def verify(
        self, source: str, *, expected_cluster_id: str | None = None,
        expected_node_id: int | None = None,
    ) -> None:
        """Check this file against the configured cluster and node; raise on a mismatch."""
        if self.version != 1:
            raise MetaPropertiesError(
                f"{source}: meta.properties version {self.version} is from a ZooKeeper-mode "
                "broker; a KRaft node needs version 1 (format the directory with "
                "'pykraft storage format')"
            )
        if expected_cluster_id is not None and self.cluster_id != expected_cluster_id:
            raise InconsistentClusterId(
                f"Invalid cluster.id in: {source}. Expected {expected_cluster_id}, "
                f"but read {self.cluster_id}"
            )
        if expected_node_id is not None and self.node_id != expected_node_id:
            raise MetaPropertiesError(
                f"Stored node id {self.node_id} doesn't match the configured node id "
                f"{expected_node_id} in {source}. If you moved your data, make sure the "
                "configured node.id matches; for a new node, empty the data directories."
            )
        if self.directory_id is not None and _is_reserved(self.directory_id):
            raise MetaPropertiesError(f"{source}: directory.id {self.directory_id} is reserved")


def _integer(raw: str | None, key: str, source: str) -> int:
    if raw is None:
        raise MetaPropertiesError(f"{source}: missing required property {key}")
    try:
        return int(raw.strip())
    except ValueError:
        raise MetaPropertiesError(f"{source}: {key}={raw!r} is not an integer") from None


def _is_reserved(directory_id: uuid.UUID) -> bool:
    return directory_id.int >> 64 == 0 and directory_id.int < _RESERVED_DIRECTORY_IDS


def generate_directory_id(rng: random.Random) -> uuid.UUID:
    """A random directory id that is not one of Kafka's reserved ids."""
    while True:
        candidate = uuid.UUID(int=rng.getrandbits(128))
        if not _is_reserved(candidate):
            return candidate


def read_meta_properties(log_dir: Path) -> MetaProperties | None:
    """The directory's meta.properties, or None when the directory has none."""
    path = log_dir / META_PROPERTIES_FILE
    try:
        text = path.read_text(encoding="latin-1")
    except FileNotFoundError:
        return None
    except OSError as error:
        raise MetaPropertiesError(f"cannot read {path}: {error.strerror}") from None
    return MetaProperties.from_properties(parse_java_properties(text), str(path))


def write_meta_properties(log_dir: Path, meta: MetaProperties) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(log_dir / META_PROPERTIES_FILE, format_java_properties(meta.to_properties()))


def verify_ensemble(
    metas: Mapping[Path, MetaProperties], *, expected_cluster_id: str | None = None,
    expected_node_id: int | None = None,
) -> None:
    """All directories agree on cluster and node, match the config, and ids are distinct."""
    cluster_id, node_id = expected_cluster_id, expected_node_id
    seen: dict[uuid.UUID, Path] = {}
    for log_dir, meta in sorted(metas.items()):
        source = str(log_dir / META_PROPERTIES_FILE)
        meta.verify(source, expected_cluster_id=cluster_id, expected_node_id=node_id)
        cluster_id, node_id = meta.cluster_id, meta.node_id
        if meta.directory_id is not None:
            other = seen.setdefault(meta.directory_id, log_dir)
            if other != log_dir:
                raise MetaPropertiesError(
                    f"duplicate directory.id {kafka_uuid_string(meta.directory_id)} in "
                    f"{other} and {log_dir}"
                )


# -- Java properties -------------------------------------------------------------------------

_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Sequence[str]:
    """Join continuation lines (an odd number of trailing backslashes continues a line)."""
    result: list[str] = []
    pending = ""
    for raw in re.split(r"\r\n|\r|\n", text):  # Java's line ends only
        line = raw.lstrip(" \t\f") if pending else raw
        if not pending and (not line.strip() or line.lstrip(" \t\f")[:1] in ("#", "!")):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        result.append(pending + line)
        pending = ""
    if pending:
        result.append(pending)
    return result


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 == len(text):
            out.append(char)
            index += 1
            continue
        following = text[index + 1]
        if following == "u" and len(text) >= index + 6:
            try:
                out.append(chr(int(text[index + 2 : index + 6], 16)))
                index += 6
                continue
            except ValueError:
                pass
        out.append(_ESCAPES.get(following, following))
        index += 2
    joined = "".join(out)
    try:  # \u escapes of a surrogate pair form one character
        return joined.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError:
        return joined


def _split_key(line: str) -> tuple[str, str]:
    line = line.lstrip(" \t\f")
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in "=: \t\f":
            break
        index += 1
    key, rest = line[:index], line[index:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def parse_java_properties(text: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_key(line)
        result[_unescape(key)] = _unescape(value)
    return result


def _escape(text: str, *, is_key: bool) -> str:
    out: list[str] = []
    for position, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[char])
        elif char in "=:#!" or (char == " " and (is_key or position == 0)):
            out.append("\\" + char)
        elif not 0x20 <= ord(char) <= 0x7E:
            units = char.encode("utf-16-be")  # Java escapes UTF-16 code units
            for start in range(0, len(units), 2):
                out.append(f"\\u{int.from_bytes(units[start : start + 2], 'big'):04x}")
        else:
            out.append(char)
    return "".join(out)


def format_java_properties(properties: Mapping[str, str]) -> str:
    lines = ["#"]
    for key in sorted(properties):
        lines.append(f"{_escape(key, is_key=True)}={_escape(properties[key], is_key=False)}")
    return "\n".join(lines) + "\n"
