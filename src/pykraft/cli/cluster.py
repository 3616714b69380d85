"""`pykraft cluster`: the cluster id and broker unregistration, like kafka-cluster.sh.

    pykraft cluster cluster-id (--bootstrap-server H:P | --bootstrap-controller H:P) [-c FILE]
    pykraft cluster unregister (--bootstrap-server H:P | --bootstrap-controller H:P) --id N

`--config`/`-c` is the admin client's properties file, as in kafka-cluster.sh: its security
settings secure every connection and default.api.timeout.ms bounds the calls.

`unregister` sends UnregisterBroker (api 64; no Python client library has it), which a
broker forwards to the active controller; given --bootstrap-controller, the tool finds the
active controller itself from any controller (KIP-919), as Kafka's admin client does. As in
Kafka, the controller unregisters any registered broker, even a running one (which then
registers again); it is meant for a broker that is gone for good, whose registration would
otherwise hold back metadata.version upgrades. An id that is not registered is refused with
BROKER_ID_NOT_REGISTERED.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.cli.args import (
    INT32,
    ArgumentParser,
    CommandError,
    add_bootstrap_options,
    bootstrap_of,
    load_properties,
)
from pykraft.cli.client_config import timeout_seconds
from pykraft.cli.protocol_client import ProtocolClient, active_controller, error_name

__all__ = ["add_parser", "unregister_broker", "cluster_id"]

UNREGISTER_BROKER: Final = 64
DESCRIBE_CLUSTER: Final = 60
_TIMEOUT_S: Final = 30.0


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "cluster", help="cluster id and broker unregistration (kafka-cluster.sh)",
        description="The Kafka cluster tool.")
    actions = parser.add_subparsers(dest="cluster_command", required=True,
                                    metavar="{cluster-id,unregister}")
    cluster_id_ = actions.add_parser("cluster-id", help="get information about the ID of a "
                                     "cluster")
    unregister = actions.add_parser("unregister", help="unregister a broker")
    for action in (cluster_id_, unregister):
        add_bootstrap_options(action, short=True)
        action.add_argument("--config", "-c", metavar="FILE",
                            help="a property file containing configs to pass to the admin "
                                 "client: security settings, default.api.timeout.ms")
    unregister.add_argument("--id", "-i", type=INT32, required=True, metavar="ID",
                            help="the ID of the broker to unregister")
    cluster_id_.set_defaults(handler=_cluster_id_args)
    unregister.set_defaults(handler=_unregister_args)


def _properties(args: argparse.Namespace) -> dict[str, str]:
    return load_properties(args.config) if args.config else {}


def _cluster_id_args(args: argparse.Namespace) -> int:
    properties = _properties(args)
    found = cluster_id(bootstrap_of(args), timeout_s=timeout_seconds(properties),
                       properties=properties)
    print(f"Cluster ID: {found}")
    return 0


def _unregister_args(args: argparse.Namespace) -> int:
    properties = _properties(args)
    unregister_broker(bootstrap_of(args), args.id, timeout_s=timeout_seconds(properties),
                      controllers=args.bootstrap_controller is not None,
                      properties=properties)
    print(f"Broker {args.id} is no longer registered.")
    return 0


def cluster_id(servers: str, *, timeout_s: float = _TIMEOUT_S,
               properties: Mapping[str, str] | None = None) -> str:
    def build(module: ModuleType, version: int) -> Any:
        return module.DescribeClusterRequest(include_cluster_authorized_operations=False)

    with ProtocolClient(servers, timeout_s=timeout_s, client_id="pykraft-cluster",
                        properties=properties) as client:
        _, response = client.request(DESCRIBE_CLUSTER, "DescribeCluster", (0, 1), build)
    if response.error_code != ErrorCode.none:
        raise CommandError(f"DescribeCluster failed: {error_name(response.error_code)}")
    return str(response.cluster_id)


def unregister_broker(servers: str, broker_id: int, *, timeout_s: float = _TIMEOUT_S,
                      controllers: bool = False,
                      properties: Mapping[str, str] | None = None) -> None:
    """UnregisterBroker; raises CommandError with the controller's refusal. Given
    `controllers`, it goes to the active one (another controller refuses it with
    NOT_CONTROLLER; a broker forwards it)."""
    def build(module: ModuleType, version: int) -> Any:
        return module.UnregisterBrokerRequest(broker_id=broker_id)

    client = (active_controller(servers, timeout_s=timeout_s, client_id="pykraft-cluster",
                                call="unregisterBroker", properties=properties) if controllers
              else ProtocolClient(servers, timeout_s=timeout_s, client_id="pykraft-cluster",
                                  properties=properties))
    with client:
        _, response = client.request(UNREGISTER_BROKER, "UnregisterBroker", (0, 0), build)
    if response.error_code != ErrorCode.none:
        message = f": {response.error_message}" if response.error_message else ""
        raise CommandError(f"{error_name(response.error_code)}{message}")
