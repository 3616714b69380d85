"""`pykraft broker-api-versions`: each broker's API version ranges, like
kafka-broker-api-versions.sh (BrokerApiVersionsCommand).

    pykraft broker-api-versions --bootstrap-server H:P

For each live broker, Kafka's NodeApiVersions lines:

    127.0.0.1:9092 (id: 1 rack: null isFenced: false) -> (
    <TAB>Produce(0): 3 to 12 [usable: 12],
    <TAB>...
    <TAB>DescribeUserScramCredentials(50): UNSUPPORTED,
    <TAB>...
    )

"usable" is the highest version both the broker and this tool's protocol library speak; a
client API the broker does not list is UNSUPPORTED. The brokers come from the cluster's
metadata and each is asked at its advertised address.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
from collections.abc import Mapping
from functools import cache
from typing import Any, Final

from kio.schema.index import api_key_map

from pykraft.cli.args import (
    ArgumentParser,
    CommandError,
    UsageError,
    load_properties,
    parse_bootstrap_servers,
)
from pykraft.cli.client_config import timeout_seconds
from pykraft.cli.cluster_nodes import BrokerNode, describe_cluster
from pykraft.cli.protocol_client import ProtocolClient

__all__ = ["API_NAMES", "add_parser", "api_versions_text"]

# Kafka's ApiKeys names (the message name without "Request"), by api key
API_NAMES: Final[dict[int, str]] = dict(enumerate((
    "Produce", "Fetch", "ListOffsets", "Metadata", "LeaderAndIsr", "StopReplica",
    "UpdateMetadata", "ControlledShutdown", "OffsetCommit", "OffsetFetch", "FindCoordinator",
    "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup", "DescribeGroups", "ListGroups",
    "SaslHandshake", "ApiVersions", "CreateTopics", "DeleteTopics", "DeleteRecords",
    "InitProducerId", "OffsetForLeaderEpoch", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn",
    "WriteTxnMarkers", "TxnOffsetCommit", "DescribeAcls", "CreateAcls", "DeleteAcls",
    "DescribeConfigs", "AlterConfigs", "AlterReplicaLogDirs", "DescribeLogDirs",
    "SaslAuthenticate", "CreatePartitions", "CreateDelegationToken", "RenewDelegationToken",
    "ExpireDelegationToken", "DescribeDelegationToken", "DeleteGroups", "ElectLeaders",
    "IncrementalAlterConfigs", "AlterPartitionReassignments", "ListPartitionReassignments",
    "OffsetDelete", "DescribeClientQuotas", "AlterClientQuotas", "DescribeUserScramCredentials",
    "AlterUserScramCredentials", "Vote", "BeginQuorumEpoch", "EndQuorumEpoch", "DescribeQuorum",
    "AlterPartition", "UpdateFeatures", "Envelope", "FetchSnapshot", "DescribeCluster",
    "DescribeProducers", "BrokerRegistration", "BrokerHeartbeat", "UnregisterBroker",
    "DescribeTransactions", "ListTransactions", "AllocateProducerIds",
    "ConsumerGroupHeartbeat", "ConsumerGroupDescribe", "ControllerRegistration",
    "GetTelemetrySubscriptions", "PushTelemetry", "AssignReplicasToDirs",
    "ListClientMetricsResources", "DescribeTopicPartitions", "ShareGroupHeartbeat",
    "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge", "AddRaftVoter", "RemoveRaftVoter",
    "UpdateRaftVoter", "InitializeShareGroupState", "ReadShareGroupState",
    "WriteShareGroupState", "DeleteShareGroupState", "ReadShareGroupStateSummary",
)))

# Kafka 4.0's ApiKeys.clientApis(): the APIs a broker listener may serve (the ZooKeeper-era
# inter-broker APIs 4-7 are gone from 4.0; the controller-only ones never were client APIs)
CLIENT_APIS: Final = frozenset(range(88)) - {4, 5, 6, 7, 52, 53, 54, 56, 58, 59, 62, 63, 67,
                                             70, 73, 82, 83, 84, 85, 86, 87}


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "broker-api-versions", help="print each broker's API versions "
                                    "(kafka-broker-api-versions.sh)",
        description="This tool helps to retrieve broker version information.")
    parser.add_argument("--bootstrap-server", metavar="server(s) to use for bootstrapping",
                        help="REQUIRED: The server to connect to.")
    parser.add_argument("--command-config", metavar="command config property file",
                        help="A property file containing configs to be passed to Admin Client "
                             "(its security settings and default.api.timeout.ms are used for "
                             "every connection).")
    parser.set_defaults(handler=_run_args)


def _run_args(args: argparse.Namespace) -> int:
    if not args.bootstrap_server:
        raise UsageError("Missing required argument \"[bootstrap-server]\"")
    bootstrap = parse_bootstrap_servers(args.bootstrap_server)
    properties = load_properties(args.command_config) if args.command_config else {}
    timeout_s = timeout_seconds(properties)
    with ProtocolClient(bootstrap, timeout_s=timeout_s, client_id="broker-api-versions",
                        properties=properties) as seed:
        brokers = describe_cluster(seed, with_topics=False).brokers
    for broker in brokers:
        print(f"{broker} -> {_broker_text(broker, timeout_s, properties)}", flush=True)
    return 0


def _broker_text(broker: BrokerNode, timeout_s: float, properties: Mapping[str, str]) -> str:
    try:
        with ProtocolClient(broker.address, timeout_s=timeout_s,
                            client_id="broker-api-versions", properties=properties) as client:
            return api_versions_text(client.api_versions.api_keys)
    except CommandError as error:
        return f"ERROR: {error}"


def api_versions_text(api_keys: Any) -> str:
    """Kafka's NodeApiVersions.toString(true) of an ApiVersions answer's api_keys."""
    lines: dict[int, str] = {}
    for api in api_keys:
        key, low, high = int(api.api_key), int(api.min_version), int(api.max_version)
        lines[key] = _line(key, low, high)
    for key in CLIENT_APIS - lines.keys():
        lines[key] = f"{API_NAMES[key]}({key}): UNSUPPORTED"
    return "(\n\t" + ",\n\t".join(lines[key] for key in sorted(lines)) + "\n)"


def _line(key: int, low: int, high: int) -> str:
    versions = str(low) if low == high else f"{low} to {high}"
    if key not in API_NAMES:
        return f"UNKNOWN({key}): {versions}"
    ours = _versions_of_ours(key)
    if ours is None or ours[1] < low:
        usable = "unusable: node too new"
    elif high < ours[0]:
        usable = "unusable: node too old"
    else:
        usable = f"usable: {min(ours[1], high)}"
    return f"{API_NAMES[key]}({key}): {versions} [{usable}]"


@cache
def _versions_of_ours(key: int) -> tuple[int, int] | None:
    """The versions of an API this tool's protocol library (kio) defines: its schema
    package holds one `vN` module per version."""
    name = api_key_map.get(key)
    if name is None:
        return None
    try:
        package = importlib.import_module(f"kio.schema.{name}")
    except ImportError:
        return None
    versions = [int(module.name[1:]) for module in pkgutil.iter_modules(package.__path__)
                if re.fullmatch(r"v[0-9]+", module.name)]
    return (min(versions), max(versions)) if versions else None
