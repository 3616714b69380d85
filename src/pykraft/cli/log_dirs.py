"""`pykraft log-dirs`: the log directories of brokers and the partitions in them, like
kafka-log-dirs.sh (LogDirsCommand).

    pykraft log-dirs --describe --bootstrap-server H:P [--broker-list 1,2] [--topic-list a,b]

Each broker is sent DescribeLogDirs (api 35) for every partition, at its advertised address;
the output is Kafka's: two progress lines, then one JSON line,

    {"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"t-0","size":0,
      "offsetLag":0,"isFuture":false}],"error":null,"logDir":"/data"}]}],"version":1}

with the keys in the order Kafka's tool prints them (the iteration order of its Java hash
maps) and a directory's error as the name of Kafka's exception class.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.cli.args import (
    ArgumentParser,
    CommandError,
    UsageError,
    load_properties,
    parse_bootstrap_servers,
)
from pykraft.cli.client_config import timeout_seconds
from pykraft.cli.cluster_nodes import BrokerNode, describe_cluster, error_text
from pykraft.cli.protocol_client import ProtocolClient, error_name

__all__ = ["add_parser", "describe_log_dirs", "log_dirs_json"]

DESCRIBE_LOG_DIRS: Final = 35
_VERSIONS: Final = (1, 4)
_EXCEPTIONS: Final = {  # error codes whose Java exception is not the name camel-cased
    ErrorCode.kafka_storage_error: "KafkaStorageException",
    ErrorCode.unknown_server_error: "UnknownServerException",
    ErrorCode.cluster_authorization_failed: "ClusterAuthorizationException",
}


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "log-dirs", help="describe brokers' log directories (kafka-log-dirs.sh)",
        description="This tool helps to query log directory usage on the specified brokers.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                        help="REQUIRED: the server(s) to use for bootstrapping")
    parser.add_argument("--command-config", metavar="FILE",
                        help="Property file containing configs to be passed to Admin Client "
                             "(its security settings and default.api.timeout.ms are used for "
                             "every connection).")
    parser.add_argument("--describe", action="store_true",
                        help="REQUIRED: Describe the specified log directories on the specified "
                             "brokers.")
    parser.add_argument("--topic-list", default="", metavar="topic1,topic2",
                        help="The list of topics to be queried in the form \"topic1,topic2,"
                             "topic3\". All topics will be queried if no topic list is specified")
    parser.add_argument("--broker-list", default="", metavar="0,1,2",
                        help="The list of brokers to be queried in the form \"0,1,2\". All "
                             "brokers in the cluster will be queried if no broker list is "
                             "specified")
    parser.set_defaults(handler=_run_args)


def _run_args(args: argparse.Namespace) -> int:
    if not args.bootstrap_server:
        raise UsageError("Missing required argument \"[bootstrap-server]\"")
    if not args.describe:
        raise UsageError("Missing required argument \"[describe]\"")
    bootstrap = parse_bootstrap_servers(args.bootstrap_server)
    topics = {name.strip() for name in args.topic_list.split(",") if name.strip()}
    wanted = _broker_ids(args.broker_list)
    properties = load_properties(args.command_config) if args.command_config else {}
    timeout_s = timeout_seconds(properties)
    with ProtocolClient(bootstrap, timeout_s=timeout_s, client_id="log-dirs-tool",
                        properties=properties) as seed:
        cluster_brokers = describe_cluster(seed, with_topics=False).brokers
    known = {broker.node_id for broker in cluster_brokers}
    missing = sorted(wanted - known)
    if missing:
        raise CommandError(
            "The given brokers do not exist from --broker-list: "
            f"{','.join(map(str, missing))}. Current existent brokers: "
            f"{','.join(map(str, sorted(known)))}")
    brokers = [broker for broker in cluster_brokers if not wanted or broker.node_id in wanted]
    print("Querying brokers for log directories information", flush=True)
    described = {broker.node_id: describe_log_dirs(broker, timeout_s, properties)
                 for broker in brokers}
    print("Received log directory information from brokers "
          + ",".join(str(broker.node_id) for broker in brokers))
    print(log_dirs_json(described, topics))
    return 0


def _broker_ids(text: str) -> set[int]:
    ids = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if not re.fullmatch(r"-?[0-9]{1,10}", item) or not -(1 << 31) <= int(item) < (1 << 31):
            raise UsageError(f"--broker-list expects broker ids like 0,1,2, got '{item}'")
        ids.add(int(item))
    return ids


def describe_log_dirs(broker: BrokerNode, timeout_s: float,
                      properties: Mapping[str, str] | None = None) -> list[Any]:
    """One broker's DescribeLogDirs results, every partition included."""

    def build(module: ModuleType, version: int) -> Any:
        return module.DescribeLogDirsRequest(topics=None)

    with ProtocolClient(broker.address, timeout_s=timeout_s, client_id="log-dirs-tool",
                        properties=properties) as client:
        _, response = client.request(DESCRIBE_LOG_DIRS, "DescribeLogDirs", _VERSIONS, build)
    code = getattr(response, "error_code", ErrorCode.none)  # v3 added the top-level code
    if code != ErrorCode.none:
        raise CommandError(f"broker {broker.node_id}: {error_text(code, None)}")
    return list(response.results)


def log_dirs_json(described: dict[int, list[Any]], topics: set[str]) -> str:
    """Kafka's JSON line, keys in the order its tool's hash maps iterate them."""
    brokers = []
    for node_id, results in described.items():
        log_dirs = []
        for result in results:
            partitions = [
                {"partition": f"{topic.name}-{partition.partition_index}",
                 "size": int(partition.partition_size),
                 "offsetLag": int(partition.offset_lag),
                 "isFuture": bool(partition.is_future_key)}
                for topic in sorted(result.topics, key=lambda topic: str(topic.name))
                if not topics or str(topic.name) in topics
                for partition in sorted(topic.partitions, key=lambda p: int(p.partition_index))
            ]
            log_dirs.append({"partitions": partitions, "error": _exception(result.error_code),
                             "logDir": str(result.log_dir)})
        brokers.append({"broker": node_id, "logDirs": log_dirs})
    return json.dumps({"brokers": brokers, "version": 1}, separators=(",", ":"))


def _exception(code: int) -> str | None:
    """The Java exception class Kafka's admin client maps an error code to."""
    if code == ErrorCode.none:
        return None
    try:
        simple = _EXCEPTIONS.get(ErrorCode(code))
    except ValueError:
        simple = None
    if simple is None:
        words = error_name(code).split("_")
        simple = "".join(word.capitalize() for word in words) + "Exception"
    return f"org.apache.kafka.common.errors.{simple}"
