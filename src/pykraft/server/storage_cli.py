"""`pykraft storage`: Kafka's kafka-storage.sh (info, format, version-mapping, random-uuid).

    pykraft storage info -c CONFIG
    pykraft storage format -c CONFIG -t CLUSTER_ID [-g] [-r RELEASE] [-S CREDENTIAL ...]
                           [-s | -I ID@HOST:PORT:DIR,... | -N]
    pykraft storage version-mapping [-r RELEASE]
    pykraft storage random-uuid

Only the parser lives at import time; the handlers load the server's modules when run, so
`pykraft --help` and the client tools stay quick. A failure is one line on stderr and exit
code 1 (`main` prints CommandError); `info` exits 1 when it found a problem, as Kafka's does.
The warnings of the config (keys pykraft ignores, unknown keys) go to stderr first.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from pykraft.cli.args import ArgumentParser, CommandError

if TYPE_CHECKING:
    from pykraft.server.config import ServerConfig

__all__ = ["add_parser"]

_RELEASE_HELP = ("the Kafka release whose metadata.version the cluster starts at, 3.3-IV3 "
                 "to 4.0-IV0 (e.g. 3.7 or 3.7-IV4; default: inter.broker.protocol.version "
                 "when the config sets it, else 3.9-IV0)")


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    storage = commands.add_parser(
        "storage", help="format and inspect log directories (kafka-storage.sh)",
        description="The storage tool: format a node's log directories before its first start, "
                    "or show what they hold.")
    tools = storage.add_subparsers(dest="storage_command", required=True,
                                   metavar="{info,format,version-mapping,random-uuid}")
    info = tools.add_parser(
        "info", help="show the meta.properties of the node's log directories",
        description="Print the log directories the config names, the meta.properties found in "
                    "them, and any problem (unformatted, mismatched ids); exit 1 on a problem.")
    info.add_argument("--config", "-c", required=True, metavar="FILE",
                      help="the server.properties of the node")
    info.set_defaults(handler=_info)

    format_ = tools.add_parser(
        "format", help="format the node's log directories",
        description="Write meta.properties (cluster id, node id, a directory id) and "
                    "bootstrap.checkpoint (the starting metadata.version and any "
                    "--add-scram credentials) into every log directory and the metadata log "
                    "directory.")
    format_.add_argument("--config", "-c", required=True, metavar="FILE",
                         help="the server.properties of the node")
    format_.add_argument("--cluster-id", "-t", required=True, metavar="ID",
                         help="the cluster id (make one with `pykraft storage random-uuid`); "
                              "the same on every node of the cluster")
    format_.add_argument("--ignore-formatted", "-g", action="store_true",
                         help="skip directories already formatted (for this cluster and node) "
                              "instead of failing")
    format_.add_argument("--release-version", "-r", metavar="RELEASE", help=_RELEASE_HELP)
    format_.add_argument(
        "--add-scram", "-S", action="append", metavar="CREDENTIAL",
        help="a SCRAM credential for the cluster to start with (repeatable; read by the "
             "controller that bootstraps the metadata log), e.g. "
             "'SCRAM-SHA-256=[name=alice,password=alice-secret]' or "
             "'SCRAM-SHA-512=[name=alice,iterations=8192,salt=\"N3E=\",saltedpassword="
             "\"YCE=\"]' (salt and salted password in base64; iterations 4096 to 16384, "
             "default 4096); only the salted keys are written")
    quorum = format_.add_mutually_exclusive_group()
    quorum.add_argument("--standalone", "-s", action="store_true",
                        help="start the quorum with this controller as its only voter (for "
                             "controller.quorum.bootstrap.servers instead of "
                             "controller.quorum.voters)")
    quorum.add_argument("--initial-controllers", "-I", metavar="ID@HOST:PORT:DIR,...",
                        help="the initial voters, each with its metadata directory id; the "
                             "same list on every node (for controller.quorum.bootstrap.servers)")
    quorum.add_argument("--no-initial-controllers", "-N", action="store_true",
                        help="format without an initial voter set (a broker, or a node of a "
                             "quorum given by controller.quorum.voters)")
    format_.set_defaults(handler=_format)

    mapping = tools.add_parser(
        "version-mapping", help="print the metadata.version of a release",
        description="Print the metadata.version feature level a release bootstraps at.")
    mapping.add_argument("--release-version", "-r", metavar="RELEASE",
                         help="the release, e.g. 3.7 or 3.7-IV4 (default: the latest "
                              "metadata.version pykraft supports, 4.0-IV0)")
    mapping.set_defaults(handler=_version_mapping)

    uuid = tools.add_parser("random-uuid", help="print a new cluster id",
                            description="Print a random cluster id (a base64 Kafka Uuid).")
    uuid.set_defaults(handler=_random_uuid)


def _load(path: str) -> ServerConfig:
    from pykraft.server.config import ConfigError, ServerConfig

    try:
        config = ServerConfig.load(path)
    except ConfigError as error:
        raise CommandError(str(error)) from None
    for warning in config.warnings:
        print(f"WARN {warning}", file=sys.stderr)
    return config


def _info(args: argparse.Namespace) -> int:
    from pykraft.server.storage_tool import storage_info

    text, ok = storage_info(_load(args.config))
    print(text, end="")
    return 0 if ok else 1


def _format(args: argparse.Namespace) -> int:
    from pykraft.server.storage_tool import StorageToolError, format_command

    config = _load(args.config)
    if args.add_scram and "controller" not in config.roles:
        # Kafka formats it into a broker's dirs too, where nothing ever reads it
        print("WARN --add-scram has no effect on a node that is not a controller: the "
              "controller that bootstraps the metadata log writes the credentials",
              file=sys.stderr)
    try:
        format_command(config, cluster_id=args.cluster_id,
                       ignore_formatted=args.ignore_formatted,
                       release_version=args.release_version, standalone=args.standalone,
                       initial_controllers=args.initial_controllers,
                       no_initial_controllers=args.no_initial_controllers,
                       add_scram=args.add_scram or ())
    except StorageToolError as error:
        raise CommandError(str(error)) from None
    return 0


def _version_mapping(args: argparse.Namespace) -> int:
    from pykraft.controller.features import LATEST_METADATA_VERSION, metadata_version_name
    from pykraft.server.storage_tool import StorageToolError, release_version_level

    release = args.release_version or metadata_version_name(LATEST_METADATA_VERSION)
    try:
        level = release_version_level(release)
    except StorageToolError as error:
        raise CommandError(str(error)) from None
    print(f"metadata.version={level} ({release})")
    return 0


def _random_uuid(args: argparse.Namespace) -> int:
    from pykraft.server.storage_tool import random_uuid

    print(random_uuid())
    return 0
