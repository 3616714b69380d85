"""`pykraft storage format` / `info` / `random-uuid`, and the start-up check of formatted dirs.

Kafka's rule: every log dir (and the metadata log dir) holds a `meta.properties` naming the
cluster id and this node's id; a node refuses to start on an unformatted dir (unless it was
asked to format it) or on one formatted for another cluster or node.

Formatting also writes, as Kafka's Formatter does, `bootstrap.checkpoint` into every dir: a
snapshot-format file holding the FeatureLevelRecord of the metadata.version the cluster starts
at (`--release-version`, else the bootstrap level) and the UserScramCredentialRecords of
`--add-scram` (KIP-900: salted and hashed here, so no password is written); the first active
controller reads it from the metadata log dir and bootstraps the empty metadata log with
those records. A broker's bootstrap.checkpoint is never read, as in Kafka. KIP-853's dynamic
quorum bootstrap (`--standalone`, `--initial-controllers`) is mapped onto pykraft's static
quorum: the initial voter set is written to `bootstrap.voters` in the metadata log dir (Kafka
writes it as a VotersRecord in the 0-0 snapshot), and a node configured with
controller.quorum.bootstrap.servers only takes that set as its static voters at start-up.
Voters cannot be added or removed later (docs/deviations.md).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from pykraft.controller.features import (
    BOOTSTRAP_METADATA_VERSION,
    LATEST_METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    MV_3_3_IV3,
    bootstrap_records,
    metadata_version_level,
    metadata_version_name,
)
from pykraft.controller.scram import MV_3_5_IV2
from pykraft.errors import CorruptRecord, InconsistentClusterId
from pykraft.metadata.codec import decode_metadata_record, encode_metadata_record
from pykraft.metadata.records import (
    FeatureLevelRecord,
    MetadataRecord,
    UserScramCredentialRecord,
)
from pykraft.net.scram import ITERATIONS_MAX, ITERATIONS_MIN, MECHANISMS, SALT_BYTES
from pykraft.raft.messages import SnapshotId
from pykraft.raft.snapshot import build_snapshot, snapshot_values
from pykraft.server.config import ConfigError, ServerConfig, read_properties
from pykraft.storage.checkpoint import kafka_uuid_string, parse_kafka_uuid, write_atomically
from pykraft.storage.meta_properties import (
    META_PROPERTIES_FILE,
    MetaProperties,
    MetaPropertiesError,
    format_java_properties,
    read_meta_properties,
    verify_ensemble,
    write_meta_properties,
)

_CLUSTER_ID: Final = re.compile(r"[A-Za-z0-9_-]{22}(==)?")
BOOTSTRAP_CHECKPOINT_FILE: Final = "bootstrap.checkpoint"
BOOTSTRAP_VOTERS_FILE: Final = "bootstrap.voters"  # pykraft's: the KIP-853 initial voters
_BOOTSTRAP_SNAPSHOT: Final = SnapshotId(end_offset=0, epoch=0)  # Kafka's bootstrap id
_BOOTSTRAP_FILE_BYTES_MAX: Final = 1024 * 1024
# Kafka 4.0's MetadataVersion.MINIMUM_VERSION: the oldest level a cluster may be formatted at
MINIMUM_RELEASE_VERSION: Final = MV_3_3_IV3
_DISCOVERY_BACKOFF_S: Final = 0.5  # a handful of records; more is not ours
_VOTER: Final = re.compile(r"^(-?\d+)@(\[[0-9a-fA-F:]+\]|[^:@\[\]]+):(\d+):([A-Za-z0-9_-]+)$")


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


@dataclass(frozen=True, slots=True)
class InitialVoter:
    """One voter of KIP-853's initial quorum: `id@host:port:directory-id`."""

    node_id: int
    host: str
    port: int
    directory_id: uuid.UUID

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.node_id}@{host}:{self.port}:{kafka_uuid_string(self.directory_id)}"


def parse_initial_controllers(text: str) -> dict[int, InitialVoter]:
    """`--initial-controllers id@host:port:dirid,...` (Kafka's DynamicVoters.parse)."""
    voters: dict[int, InitialVoter] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        match = _VOTER.match(item)
        if match is None:
            raise StorageToolError(f"Invalid --initial-controllers entry '{item}': expected "
                                   "id@hostname:port:directory-id")
        node_id, port = int(match.group(1)), int(match.group(3))
        if node_id >= 2**31:
            raise StorageToolError(f"Failed to parse node id in dynamic voter string: {item}")
        if node_id < 0:
            raise StorageToolError(f"Invalid negative node id {node_id} in dynamic voter "
                                   "string.")
        if port > 65535:
            raise StorageToolError(f"Invalid port {port} in dynamic voter string.")
        try:
            directory_id = parse_kafka_uuid(match.group(4))
        except ValueError:
            raise StorageToolError("Failed to parse directory ID in dynamic voter string: "
                                   f"{match.group(4)}") from None
        if node_id in voters:
            raise StorageToolError(f"Node id {node_id} was specified more than once.")
        voters[node_id] = InitialVoter(node_id, match.group(2).strip("[]"), port, directory_id)
    if not voters:
        raise StorageToolError("No voters given.")
    return voters


def standalone_voter(config: ServerConfig) -> dict[int, InitialVoter]:
    """`--standalone`: this controller alone, at its first advertised controller listener."""
    if "controller" not in config.roles:
        raise StorageToolError("You can only use --standalone on a controller.")
    listeners = config.controller_endpoints()
    if not listeners:
        raise StorageToolError("No controller listeners found.")
    # as Kafka: a listener without a host is reached at localhost
    voter = InitialVoter(config.node_id, listeners[0].host or "localhost", listeners[0].port,
                         uuid.uuid4())
    return {voter.node_id: voter}


def release_version_level(text: str) -> int:
    """`--release-version 3.9` / `3.9-IV0` / `3.9.1` -> the metadata.version level, or the
    refusal in Kafka's words when pykraft cannot bootstrap at that level."""
    release = text.strip()
    numbers = release.split("-")[0].split(".")
    level = metadata_version_level(release)
    if level is None and len(numbers) == 3 and "-" not in release:  # 3.9.1: the 3.9 line
        level = metadata_version_level(".".join(numbers[:2]))
    if level is None or not MINIMUM_RELEASE_VERSION <= level <= LATEST_METADATA_VERSION:
        raise StorageToolError(
            f"Unknown release version '{text}'. Supported versions are: "
            f"{metadata_version_name(MINIMUM_RELEASE_VERSION)} to "
            f"{metadata_version_name(LATEST_METADATA_VERSION)}")
    return level


def all_dirs(config: ServerConfig) -> list[Path]:
    dirs = list(config.log_dirs)
    if config.metadata_log_dir not in dirs:
        dirs.append(config.metadata_log_dir)
    return dirs


def format_storage(
    config: ServerConfig, *, cluster_id: str | None, ignore_formatted: bool,
    quiet: bool = False, release_version: int | None = None,
    initial_voters: Mapping[int, InitialVoter] | None = None,
    scram_records: Sequence[UserScramCredentialRecord] = (),
) -> str:
    """Write meta.properties (and bootstrap.checkpoint) into every unformatted dir; return
    the cluster id used.

    With `cluster_id=None` (auto-format of the quick start) an already formatted dir's id is
    reused, so restarting `pykraft server start` keeps its data. `initial_voters` is the
    KIP-853 initial quorum (`--standalone`, `--initial-controllers`); `scram_records` the
    credentials of `--add-scram` (`parse_scram_arguments`).
    """
    level = BOOTSTRAP_METADATA_VERSION if release_version is None else release_version
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
        kind = _directory_kind(config, directory, initial_voters)
        voter = (initial_voters or {}).get(config.node_id)
        is_voter_dir = kind == "dynamic metadata voter directory" and voter is not None
        directory_id = voter.directory_id if is_voter_dir and voter else uuid.uuid4()
        if not quiet:
            print(f"Formatting {kind} {directory} with {METADATA_VERSION_FEATURE} "
                  f"{metadata_version_name(level)}.")
        try:
            directory.mkdir(parents=True, exist_ok=True)
            write_atomically(directory / BOOTSTRAP_CHECKPOINT_FILE,
                             _bootstrap_checkpoint(level, scram_records))
            if initial_voters is not None and directory == config.metadata_log_dir:
                write_atomically(directory / BOOTSTRAP_VOTERS_FILE,
                                 _voters_text(initial_voters))
            write_meta_properties(directory, MetaProperties(
                version=1, cluster_id=cluster_id, node_id=config.node_id,
                directory_id=directory_id))
        except OSError as error:
            raise StorageToolError(f"Error while writing meta.properties file {directory}: "
                                   f"{error.strerror or error}") from error
    if not unformatted and not quiet:
        print("All of the log directories are already formatted.")
    return cluster_id


def _directory_kind(config: ServerConfig, directory: Path,
                    initial_voters: Mapping[int, InitialVoter] | None) -> str:
    """Kafka's words for what a formatted dir is (Formatter.DirectoryType)."""
    if directory != config.metadata_log_dir:
        return "data directory"
    if initial_voters is None:
        return "metadata directory"
    if config.node_id in initial_voters:
        return "dynamic metadata voter directory"
    return "dynamic metadata directory"


def _bootstrap_checkpoint(level: int,
                          scram_records: Sequence[UserScramCredentialRecord] = ()) -> bytes:
    records: list[MetadataRecord] = [*bootstrap_records(level), *scram_records]
    values = [encode_metadata_record(record, 0) for record in records]
    return b"".join(build_snapshot(_BOOTSTRAP_SNAPSHOT, values, last_contained_log_timestamp=0,
                                   timestamp_ms=0))


def _bootstrap_file_records(directory: Path) -> list[MetadataRecord] | None:
    """The records of the bootstrap.checkpoint `storage format` wrote into `directory`."""
    path = directory / BOOTSTRAP_CHECKPOINT_FILE
    try:
        with open(path, "rb") as stream:
            data = stream.read(_BOOTSTRAP_FILE_BYTES_MAX + 1)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise StorageToolError(f"cannot read {path}: {error.strerror or error}") from error
    if len(data) > _BOOTSTRAP_FILE_BYTES_MAX:
        raise StorageToolError(f"{path} is larger than a bootstrap checkpoint can be")
    try:
        return [decode_metadata_record(value) for value in snapshot_values([data])]
    except (CorruptRecord, ValueError) as error:
        raise StorageToolError(f"{path} is not a bootstrap checkpoint: {error}") from error


def read_bootstrap_metadata_version(directory: Path) -> int | None:
    """The metadata.version `storage format` wrote into `directory`, if it wrote one."""
    records = _bootstrap_file_records(directory)
    if records is None:
        return None
    for record in records:
        if isinstance(record, FeatureLevelRecord) and record.name == METADATA_VERSION_FEATURE:
            return record.feature_level
    raise StorageToolError(f"{directory / BOOTSTRAP_CHECKPOINT_FILE} holds no "
                           f"{METADATA_VERSION_FEATURE}")


def read_bootstrap_scram_records(directory: Path) -> tuple[UserScramCredentialRecord, ...]:
    """The SCRAM credentials `storage format --add-scram` wrote into `directory`: the active
    controller writes them after the metadata.version when it bootstraps an empty log."""
    records = _bootstrap_file_records(directory) or []
    return tuple(r for r in records if isinstance(r, UserScramCredentialRecord))


# -- --add-scram (KIP-900): Kafka's ScramParser --------------------------------------------


def parse_scram_arguments(arguments: Sequence[str]) -> list[UserScramCredentialRecord]:
    """`--add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'` (or
    `[name=alice,iterations=8192,salt="N3E=",saltedpassword="YCE="]`, salt and salted
    password in base64), each argument one UserScramCredentialRecord; the refusals are
    Kafka's ScramParser's. A password is salted and hashed here and kept nowhere."""
    return [_scram_record(*_mechanism_and_config(argument)) for argument in arguments]


def _mechanism_and_config(argument: str) -> tuple[str, str]:
    text = argument.strip()
    mechanism, equals, config = text.partition("=")
    if not equals:
        # the argument may hold a password: Kafka echoes it, we do not
        raise StorageToolError("Failed to find equals sign in SCRAM argument")
    if mechanism not in MECHANISMS:
        raise StorageToolError(f"The add-scram mechanism {mechanism} is not supported.")
    if not config.startswith("["):
        raise StorageToolError("Expected configuration string to start with [")
    if not config.endswith("]"):
        raise StorageToolError("Expected configuration string to end with ]")
    return mechanism, config[1:-1]


def _scram_components(config: str) -> dict[str, str]:
    components: dict[str, str] = {}
    for component in config.split(","):
        key, equals, value = component.partition("=")
        if not equals:  # Kafka echoes the component: it may be the tail of a password
            raise StorageToolError("No equals sign found in a SCRAM component")
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        components[key] = value  # Kafka keeps the last of a key given twice
    return components


def _base64(text: str, what: str) -> bytes:
    padded = text if "=" in text else text + "=" * (-len(text) % 4)  # Java's needs none
    try:
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        # Kafka echoes the text; a salted password is as good as the password: not that
        shown = f": {text}" if what == "salt" else ""
        raise StorageToolError(f"Failed to decode given {what}{shown}") from None


def _java_int(text: str) -> int | None:
    """Integer.parseInt: an optional sign and decimal digits, within 32 bits."""
    if re.fullmatch(r"[+-]?[0-9]+", text) is None:
        return None
    value = int(text)
    return value if -(2**31) <= value < 2**31 else None


def _scram_record(mechanism_name: str, config: str) -> UserScramCredentialRecord:
    mechanism = MECHANISMS[mechanism_name]
    components = _scram_components(config)
    name = components.pop("name", None)
    if name is None:
        raise StorageToolError("You must supply 'name' to add-scram")
    salt_text = components.pop("salt", None)
    salt = None if salt_text is None else _base64(salt_text, "salt")
    iterations_text = components.pop("iterations", None)
    iterations = ITERATIONS_MIN
    if iterations_text is not None:
        parsed = _java_int(iterations_text)
        if parsed is None:
            raise StorageToolError(f"Failed to parse iterations count: {iterations_text}")
        iterations = parsed
    password = components.pop("password", None)
    salted_text = components.pop("saltedpassword", None)
    salted: bytes | None = None
    if password is None:
        if salted_text is None:
            raise StorageToolError("You must supply one of 'password' or 'saltedpassword' to "
                                   "add-scram")
        if salt is None:
            raise StorageToolError("You must supply 'salt' with 'saltedpassword' to add-scram")
        salted = _base64(salted_text, "saltedPassword")
    if components:
        raise StorageToolError("Unknown SCRAM configurations: " + ", ".join(sorted(components)))
    enum_name = mechanism_name.replace("-", "_")  # how Kafka prints its ScramMechanism
    if iterations < ITERATIONS_MIN:
        raise StorageToolError(f"The 'iterations' value must be >= {ITERATIONS_MIN} for "
                               f"add-scram using {enum_name}")
    if iterations > ITERATIONS_MAX:
        raise StorageToolError(f"The 'iterations' value must be <= {ITERATIONS_MAX} for "
                               f"add-scram using {enum_name}")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    if salted is None:
        assert password is not None
        salted = mechanism.salted_password(password.encode(), salt, iterations)
    return UserScramCredentialRecord(
        name=name, mechanism=mechanism.code, salt=salt,
        stored_key=mechanism.stored_key(mechanism.client_key(salted)),
        server_key=mechanism.server_key(salted), iterations=iterations)


def _voters_text(voters: Mapping[int, InitialVoter]) -> str:
    listed = ",".join(str(voters[node_id]) for node_id in sorted(voters))
    return format_java_properties({"version": "0", "initial.controllers": listed})


def read_bootstrap_voters(directory: Path) -> dict[int, InitialVoter] | None:
    """The initial voters `storage format --standalone/--initial-controllers` wrote."""
    path = directory / BOOTSTRAP_VOTERS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise StorageToolError(f"cannot read {path}: {error}") from error
    properties = read_properties(text)
    if properties.get("version") != "0" or "initial.controllers" not in properties:
        raise StorageToolError(f"{path} is not a voters file pykraft wrote")
    try:
        return parse_initial_controllers(properties["initial.controllers"])
    except StorageToolError as error:
        raise StorageToolError(f"{path}: {error}") from error


def _adopt_voters(config: ServerConfig) -> None:
    """A node configured with controller.quorum.bootstrap.servers only takes its static
    voter set from the dir `storage format --standalone/--initial-controllers` wrote; a
    broker formatted without one asks the bootstrap controllers (`discover_voters`)."""
    if config.voters:  # controller.quorum.voters, or adopted already (a second check)
        return
    voters = read_bootstrap_voters(config.metadata_log_dir)
    if voters is None and config.roles == {"broker"}:
        config.adopt_bootstrap_voters(discover_voters(config))
    elif voters is None:
        raise StorageToolError(
            f"{config.metadata_log_dir} holds no initial voter set: with "
            "controller.quorum.bootstrap.servers and no controller.quorum.voters, pykraft "
            "needs every node formatted with --standalone (one controller) or "
            "--initial-controllers (the same list on every node), because its quorum is "
            "static (KIP-853's dynamic quorum is not supported)")
    else:
        config.adopt_bootstrap_voters({v.node_id: (v.host, v.port) for v in voters.values()})
    try:
        config.validate_voters()
    except ConfigError as error:
        raise StorageToolError(str(error)) from error


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
    _adopt_voters(config)
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


def discover_voters(config: ServerConfig) -> dict[int, tuple[str, int]]:
    """The voters, as the controllers in controller.quorum.bootstrap.servers describe them
    (DescribeQuorum v2's nodes, at the first controller listener name). Controllers may
    start after the broker: asked again until initial.broker.registration.timeout.ms has
    passed. Blocking, and only at start-up, before the node's event loop runs."""
    from pykraft.cli.args import CommandError
    from pykraft.cli.metadata_quorum import describe_quorum

    servers = ",".join(f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                       for host, port in config.quorum_bootstrap_servers)
    name = (config.controller_listeners or ["CONTROLLER"])[0]
    timeout_ms = config.get_int("initial.broker.registration.timeout.ms")
    deadline = time.monotonic() + timeout_ms / 1000
    last = ""
    while True:
        remaining = deadline - time.monotonic()
        try:
            quorum, _ = describe_quorum(servers, timeout_s=max(0.5, min(5.0, remaining)),
                                        client_id=f"broker-{config.node_id}",
                                        with_cluster_id=False, controllers=True)
            voters = {voter.replica_id: _listener_address(quorum.endpoints.get(
                voter.replica_id, ()), name) for voter in quorum.voters}
            found = {node_id: address for node_id, address in voters.items() if address}
            if found and len(found) == len(voters):
                return found
            last = f"the controllers do not describe the {name} listener of every voter"
        except CommandError as error:
            last = str(error)
        if time.monotonic() + _DISCOVERY_BACKOFF_S >= deadline:
            raise StorageToolError(
                f"cannot learn the voters from controller.quorum.bootstrap.servers {servers} "
                f"within initial.broker.registration.timeout.ms={timeout_ms}: {last}")
        time.sleep(_DISCOVERY_BACKOFF_S)


def _listener_address(endpoints: tuple[str, ...], name: str) -> tuple[str, int] | None:
    """("CONTROLLER://h:9093", ...) -> ("h", 9093) for the listener called `name`."""
    for endpoint in endpoints:
        listener, _, address = endpoint.partition("://")
        host, _, port = address.rpartition(":")
        if listener.upper() == name and port.isdigit():
            return host.strip("[]"), int(port)
    return None


def format_command(
    config: ServerConfig, *, cluster_id: str, ignore_formatted: bool,
    release_version: str | None = None, standalone: bool = False,
    initial_controllers: str | None = None, no_initial_controllers: bool = False,
    add_scram: Sequence[str] = (),
) -> str:
    """`pykraft storage format`: Kafka's StorageTool.runFormatCommand checks, then format."""
    release = release_version or config.get("inter.broker.protocol.version")
    level = None if release is None else release_version_level(release)
    scram_records: list[UserScramCredentialRecord] = []
    if add_scram:
        effective = BOOTSTRAP_METADATA_VERSION if level is None else level
        if effective < MV_3_5_IV2:
            raise StorageToolError(f"SCRAM is only supported in {METADATA_VERSION_FEATURE} "
                                   f"{metadata_version_name(MV_3_5_IV2)} or later.")
        scram_records = parse_scram_arguments(add_scram)
    static = bool(config.get_list("controller.quorum.voters"))
    initial_voters = None
    if initial_controllers is not None:
        initial_voters = parse_initial_controllers(initial_controllers)
    elif standalone:
        initial_voters = standalone_voter(config)
    if initial_voters is not None and static:
        raise StorageToolError(
            "You cannot specify controller.quorum.voters and format the node with "
            "--initial-controllers or --standalone. If you want to use dynamic quorum, please "
            "remove controller.quorum.voters and specify controller.quorum.bootstrap.servers "
            "instead.")
    if "controller" in config.roles and not static and initial_voters is None:
        if no_initial_controllers:  # it would wait for AddRaftVoter, which pykraft lacks
            raise StorageToolError(
                "--no-initial-controllers is not supported on a controller: pykraft's quorum "
                "is static, so a controller cannot join one later (use --standalone or "
                "--initial-controllers, or controller.quorum.voters)")
        raise StorageToolError(
            "Because controller.quorum.voters is not set on this controller, you must specify "
            "one of the following: --standalone, --initial-controllers, or "
            "--no-initial-controllers.")
    if initial_voters is not None:
        config.adopt_bootstrap_voters({v.node_id: (v.host, v.port)
                                       for v in initial_voters.values()})
        try:
            config.validate_voters()
        except ConfigError as error:
            raise StorageToolError(str(error)) from error
    return format_storage(config, cluster_id=cluster_id, ignore_formatted=ignore_formatted,
                          release_version=level, initial_voters=initial_voters,
                          scram_records=scram_records)


def storage_info(config: ServerConfig) -> tuple[str, bool]:
    """`pykraft storage info`: Kafka's report of the node's dirs; (text, no problem found)."""
    problems: list[str] = []
    found: list[Path] = []
    first: MetaProperties | None = None
    for directory in sorted(all_dirs(config), key=str):
        if not directory.is_dir():
            what = "is not a directory" if directory.exists() else "does not exist"
            problems.append(f"{directory} {what}")
            continue
        found.append(directory)
        path = directory / META_PROPERTIES_FILE
        if not path.exists():
            problems.append(f"{directory} is not formatted.")
            continue
        try:
            properties = read_meta_properties(directory)
        except (MetaPropertiesError, OSError) as error:
            problems.append(f"Error loading {path}: {error}")
            continue
        if properties is None:
            problems.append(f"{directory} is not formatted.")
        elif first is None:
            first = properties
        elif first.cluster_id != properties.cluster_id:
            problems.append("Mismatched cluster IDs between storage directories.")
        elif first.node_id != properties.node_id:
            problems.append("Mismatched node IDs between storage directories.")
    if first is not None and first.version == 0:
        problems.append("The kafka configuration file appears to be for a cluster in KRaft "
                        "mode, but the directories are formatted for legacy mode.")
    lines = []
    if found:
        lines += ["Found log directory:" if len(found) == 1 else "Found log directories:",
                  *(f"  {d}" for d in found), ""]
    if first is not None:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(first.to_properties().items()))
        lines += [f"Found metadata: {{{shown}}}", ""]
        try:
            level = read_bootstrap_metadata_version(config.metadata_log_dir)
        except StorageToolError as error:
            problems.append(str(error))
        else:
            if level is not None:
                lines += [f"Found bootstrap metadata.version: {metadata_version_name(level)} "
                          f"(level {level})", ""]
    if problems:
        lines += ["Found problem:" if len(problems) == 1 else "Found problems:",
                  *(f"  {p}" for p in problems), ""]
    return "".join(line + "\n" for line in lines), not problems
