"""`pykraft metadata-quorum`: the state of the KRaft metadata quorum, like
kafka-metadata-quorum.sh.

    pykraft metadata-quorum (--bootstrap-server H:P | --bootstrap-controller H:P)
        [--command-config FILE] describe (--status | --replication [--human-readable])

`--status` prints Kafka's summary (ClusterId, LeaderId, LeaderEpoch, HighWatermark,
MaxFollowerLag, MaxFollowerLagTimeMs, CurrentVoters, CurrentObservers); `--replication`
prints one row per replica, the leader first, then the other voters, then the observers,
in Kafka's tab-separated table. The quorum is asked with DescribeQuorum (api 55) and the
cluster id with DescribeCluster (api 60), sent through a small protocol client of our own,
since no Python client library sends DescribeQuorum. Either bootstrap option reaches the
same answer: a broker forwards DescribeQuorum to the active controller; with
--bootstrap-controller the tool finds the active controller itself from any controller, as
Kafka's admin client does (KIP-919: DescribeCluster on a controller names the controllers
and the active one), and waits through an election for at most default.api.timeout.ms
(30 s here; Kafka's is 60 s) before failing with Kafka's "Timed out waiting for a node assignment".
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.cli.args import (
    ArgumentParser,
    CommandError,
    UsageError,
    add_bootstrap_options,
    bootstrap_of,
    load_properties,
)
from pykraft.cli.client_config import (
    SECURITY_KEYS,
    TLS_TUNING_KEYS,
    security_settings,
    timeout_seconds,
    warn,
)
from pykraft.cli.protocol_client import (
    AuthenticationFailed,
    ProtocolClient,
    active_controller,
    error_name,
)
from pykraft.storage.checkpoint import kafka_uuid_string

__all__ = [
    "QuorumInfo",
    "ReplicaInfo",
    "add_parser",
    "describe_quorum",
    "replication_lines",
    "status_lines",
]

DESCRIBE_QUORUM: Final = 55
DESCRIBE_CLUSTER: Final = 60
_DESCRIBE_QUORUM_VERSIONS: Final = (0, 2)
_DESCRIBE_CLUSTER_VERSIONS: Final = (0, 1)
METADATA_TOPIC: Final = "__cluster_metadata"
_CALL: Final = "describeMetadataQuorum"  # the admin call's name in Kafka's timeout message
_RETRY_BACKOFF_S: Final = 0.2
ZERO_UUID: Final = uuid.UUID(int=0)
# properties of an admin client file that mean something to this tool; the rest are ignored
_USED_PROPERTIES: Final = frozenset(
    {"default.api.timeout.ms", "request.timeout.ms", "client.id"}
)


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    replica_id: int
    directory_id: uuid.UUID  # ZERO_UUID when the server does not say (versions below 2)
    log_end_offset: int
    last_fetch_timestamp: int  # -1: unknown
    last_caught_up_timestamp: int  # -1: unknown


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaInfo, ...]
    observers: tuple[ReplicaInfo, ...]
    endpoints: dict[int, tuple[str, ...]]  # node id -> "LISTENER://host:port", from v2


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "metadata-quorum",
        help="describe the KRaft metadata quorum (kafka-metadata-quorum.sh)",
        description="This tool describes kraft metadata quorum status.",
    )
    add_bootstrap_options(parser)
    parser.add_argument("--command-config", metavar="FILE",
                        help="Property file containing configs to be passed to Admin Client: "
                             "security settings (security.protocol, sasl.*, ssl.*), client.id, "
                             "default.api.timeout.ms")
    actions = parser.add_subparsers(dest="quorum_command", metavar="describe")
    describe = actions.add_parser("describe", help="describe the metadata quorum info")
    describe.add_argument(
        "--status", action="store_true", help="a short summary of the quorum status"
    )
    describe.add_argument(
        "--replication",
        action="store_true",
        help="detailed information about the status of replication",
    )
    describe.add_argument(
        "--human-readable",
        action="store_true",
        help="timestamps as 'N ms ago' (with --replication)",
    )
    parser.set_defaults(handler=_run_args)


def _run_args(args: argparse.Namespace) -> int:
    servers = bootstrap_of(args)
    if args.quorum_command != "describe":
        raise UsageError("metadata-quorum needs a command: describe")
    if args.status and args.replication:
        raise UsageError(
            "Only one of --status or --replication should be specified with describe sub-command"
        )
    if not (args.status or args.replication):
        raise UsageError(
            "One of --status or --replication must be specified with describe sub-command"
        )
    if args.human_readable and not args.replication:
        raise UsageError("The option --human-readable is only supported along with --replication")
    properties = load_properties(args.command_config) if args.command_config else {}
    timeout_s, client_id = _client_settings(properties)
    quorum, cluster_id = describe_quorum(
        servers,
        timeout_s=timeout_s,
        client_id=client_id,
        with_cluster_id=args.status,
        controllers=args.bootstrap_controller is not None,
        properties=properties,
    )
    if args.status:
        lines = status_lines(cluster_id, quorum)
    else:
        lines = replication_lines(
            quorum, human_readable=args.human_readable, now_ms=int(time.time() * 1000)
        )
    for line in lines:
        print(line)
    return 0


def _client_settings(properties: dict[str, str]) -> tuple[float, str]:
    security_settings(properties)  # refused before any connection, naming the key
    for key in sorted(set(properties) - _USED_PROPERTIES - SECURITY_KEYS - TLS_TUNING_KEYS):
        warn(f"WARN: ignoring property {key} (not used by metadata-quorum)")
    timeout_s = timeout_seconds(properties)
    if "request.timeout.ms" in properties and "default.api.timeout.ms" not in properties:
        timeout_s = timeout_seconds({"default.api.timeout.ms": properties["request.timeout.ms"]})
    return timeout_s, properties.get("client.id", "pykraft-metadata-quorum")


# -- asking the quorum ---------------------------------------------------------------------


def describe_quorum(
    servers: str,
    *,
    timeout_s: float,
    client_id: str,
    with_cluster_id: bool,
    controllers: bool = False,
    properties: Mapping[str, str] | None = None,
) -> tuple[QuorumInfo, str | None]:
    """The quorum, and the cluster id when asked. Brokers (`controllers` False) are asked in
    turn until one answers (one may be down; each forwards to the active controller).
    Controllers are asked as Kafka's admin client asks them (KIP-919): the active one, found
    from any of them, and again through an election until `timeout_s` has passed. A refused
    login ends the search at once: the next server would refuse it too."""
    if controllers:
        return _describe_from_controllers(servers, timeout_s, client_id, with_cluster_id,
                                          properties)
    failures = []
    for server in servers.split(","):
        try:
            with ProtocolClient(server, timeout_s=timeout_s, client_id=client_id,
                                properties=properties) as client:
                quorum = _describe_quorum(client)
                cluster_id = _cluster_id(client) if with_cluster_id else None
                return quorum, cluster_id
        except AuthenticationFailed:
            raise
        except CommandError as error:  # unreachable, or not the one to ask: try the next
            failures.append(str(error))
    raise CommandError("; ".join(failures))


def _describe_from_controllers(
    servers: str, timeout_s: float, client_id: str, with_cluster_id: bool,
    properties: Mapping[str, str] | None,
) -> tuple[QuorumInfo, str | None]:
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = max(0.1, deadline - time.monotonic())
        with active_controller(
            servers, timeout_s=remaining, client_id=client_id, call=_CALL,
            properties=properties,
        ) as client:
            try:
                quorum = _describe_quorum(client)
            except _NotLeader as error:  # leadership moved since: find the new leader
                if not client.found_active:  # an older server: it cannot say who leads
                    raise
                if time.monotonic() + _RETRY_BACKOFF_S >= deadline:
                    raise CommandError(
                        f"Timed out waiting for a node assignment. Call: {_CALL} "
                        f"(last: {error})"
                    ) from None
                time.sleep(_RETRY_BACKOFF_S)
                continue
            return quorum, _cluster_id(client) if with_cluster_id else None


def _describe_quorum(client: ProtocolClient) -> QuorumInfo:
    def build(module: ModuleType, version: int) -> Any:
        partition = module.PartitionData(partition_index=0)
        topic = module.TopicData(topic_name=METADATA_TOPIC, partitions=(partition,))
        return module.DescribeQuorumRequest(topics=(topic,))

    _, response = client.request(
        DESCRIBE_QUORUM, "DescribeQuorum", _DESCRIBE_QUORUM_VERSIONS, build
    )
    _check_error(client, response.error_code, getattr(response, "error_message", None))
    partitions = [
        partition
        for topic in response.topics
        if topic.topic_name == METADATA_TOPIC
        for partition in topic.partitions
        if partition.partition_index == 0
    ]
    if not partitions:
        raise CommandError(f"{client.address} did not describe {METADATA_TOPIC}-0")
    partition = partitions[0]
    _check_error(client, partition.error_code, getattr(partition, "error_message", None))
    endpoints = {
        int(node.node_id): tuple(_endpoint(listener) for listener in node.listeners)
        for node in getattr(response, "nodes", ())
    }
    return QuorumInfo(
        leader_id=int(partition.leader_id),
        leader_epoch=int(partition.leader_epoch),
        high_watermark=int(partition.high_watermark),
        voters=tuple(_replica(replica) for replica in partition.current_voters),
        observers=tuple(_replica(replica) for replica in partition.observers),
        endpoints=endpoints,
    )


class _NotLeader(CommandError):
    """A controller that does not lead the quorum (any more) answered DescribeQuorum."""


def _check_error(client: ProtocolClient, code: Any, message: str | None) -> None:
    if code == ErrorCode.none:
        return
    detail = f": {message}" if message else ""
    kind = _NotLeader if code == ErrorCode.not_leader_or_follower else CommandError
    raise kind(
        f"{client.address} answered DescribeQuorum with {error_name(int(code))}{detail}"
    )


def _endpoint(listener: Any) -> str:
    host = str(listener.host)
    shown = f"[{host}]" if ":" in host else host  # IPv6 in brackets, as Kafka prints it
    return f"{listener.name}://{shown}:{listener.port}"


def _replica(replica: Any) -> ReplicaInfo:
    directory_id = getattr(replica, "replica_directory_id", None)
    return ReplicaInfo(
        replica_id=int(replica.replica_id),
        directory_id=directory_id if isinstance(directory_id, uuid.UUID) else ZERO_UUID,
        log_end_offset=int(replica.log_end_offset),
        last_fetch_timestamp=int(getattr(replica, "last_fetch_timestamp", -1)),
        last_caught_up_timestamp=int(getattr(replica, "last_caught_up_timestamp", -1)),
    )


def _cluster_id(client: ProtocolClient) -> str:
    def build(module: ModuleType, version: int) -> Any:
        values: dict[str, Any] = {"include_cluster_authorized_operations": False}
        if version >= 1:  # a controller found as the active one describes controllers
            values["endpoint_type"] = 2 if client.found_active else 1
        return module.DescribeClusterRequest(**values)

    _, response = client.request(
        DESCRIBE_CLUSTER, "DescribeCluster", _DESCRIBE_CLUSTER_VERSIONS, build
    )
    if response.error_code != ErrorCode.none and not response.cluster_id:
        raise CommandError(
            f"{client.address} answered DescribeCluster with {error_name(response.error_code)}"
        )
    return str(response.cluster_id)


# -- output --------------------------------------------------------------------------------


def _leader(quorum: QuorumInfo) -> ReplicaInfo:
    for voter in quorum.voters:
        if voter.replica_id == quorum.leader_id:
            return voter
    raise CommandError(
        f"the metadata quorum has no leader at the moment (leader id {quorum.leader_id}, "
        f"epoch {quorum.leader_epoch}); try again shortly"
    )


def status_lines(cluster_id: str | None, quorum: QuorumInfo) -> list[str]:
    """kafka-metadata-quorum.sh describe --status, line by line."""
    leader = _leader(quorum)
    most_behind = min(quorum.voters, key=lambda voter: voter.log_end_offset)
    max_lag = leader.log_end_offset - most_behind.log_end_offset
    if most_behind is leader:
        max_lag_time_ms = 0
    elif leader.last_caught_up_timestamp >= 0 and most_behind.last_caught_up_timestamp >= 0:
        max_lag_time_ms = leader.last_caught_up_timestamp - most_behind.last_caught_up_timestamp
    else:
        max_lag_time_ms = -1
    rows = (
        ("ClusterId", cluster_id or ""),
        ("LeaderId", quorum.leader_id),
        ("LeaderEpoch", quorum.leader_epoch),
        ("HighWatermark", quorum.high_watermark),
        ("MaxFollowerLag", max_lag),
        ("MaxFollowerLagTimeMs", max_lag_time_ms),
        ("CurrentVoters", _replica_list(quorum, quorum.voters)),
        ("CurrentObservers", _replica_list(quorum, quorum.observers)),
    )
    return [f"{name + ':':<24}{value}" for name, value in rows]


def _replica_list(quorum: QuorumInfo, replicas: Sequence[ReplicaInfo]) -> str:
    """`[{"id": 1, "directoryId": "...", "endpoints": ["CONTROLLER://host:port"]}, ...]`:
    the directory id only when known, the endpoints only when the server named them."""
    shown = []
    for replica in replicas:
        text = f'{{"id": {replica.replica_id}'
        if replica.directory_id != ZERO_UUID:
            text += f', "directoryId": "{kafka_uuid_string(replica.directory_id)}"'
        endpoints = quorum.endpoints.get(replica.replica_id, ())
        if endpoints:
            text += f', "endpoints": [{", ".join(json.dumps(e) for e in endpoints)}]'
        shown.append(text + "}")
    return "[" + ", ".join(shown) + "]"


REPLICATION_HEADERS: Final = (
    "NodeId",
    "DirectoryId",
    "LogEndOffset",
    "Lag",
    "LastFetchTimestamp",
    "LastCaughtUpTimestamp",
    "Status",
)


def replication_lines(quorum: QuorumInfo, *, human_readable: bool, now_ms: int) -> list[str]:
    """kafka-metadata-quorum.sh describe --replication: the leader, the other voters, the
    observers; each cell padded to its column's width and followed by a tab."""
    leader = _leader(quorum)
    followers = [voter for voter in quorum.voters if voter.replica_id != quorum.leader_id]
    groups: tuple[tuple[str, Sequence[ReplicaInfo]], ...] = (
        ("Leader", (leader,)),
        ("Follower", followers),
        ("Observer", quorum.observers),
    )

    def timestamp(value: int, what: str) -> str:
        if value < 0:
            return "-1"
        if not human_readable:
            return str(value)
        if not 0 < value <= now_ms:
            raise CommandError(
                "Error while computing relative time, possible drift in system clock. "
                f"Current timestamp is {now_ms}, {what} timestamp is {value}"
            )
        return f"{now_ms - value} ms ago"

    rows = [
        [
            str(replica.replica_id),
            kafka_uuid_string(replica.directory_id),
            str(replica.log_end_offset),
            str(leader.log_end_offset - replica.log_end_offset),
            timestamp(replica.last_fetch_timestamp, "last fetch"),
            timestamp(replica.last_caught_up_timestamp, "last caught up"),
            status,
        ]
        for status, replicas in groups
        for replica in replicas
    ]
    return _table(REPLICATION_HEADERS, rows)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [len(header) for header in headers]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]

    def render(cells: Sequence[str]) -> str:
        return "".join(f"{cell:<{width}}\t" for cell, width in zip(cells, widths, strict=True))

    return [render(headers), *(render(row) for row in rows)]
