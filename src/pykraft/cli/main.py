"""The `pykraft` command: the node's own commands and Kafka's client tools, as subcommands.

    pykraft server start [CONFIG] [--override key=value ...]
    pykraft storage info -c FILE | format -c FILE -t ID [...] | version-mapping | random-uuid
    pykraft topics | console-producer | console-consumer | dump-log | perf produce|consume
    pykraft consumer-groups --bootstrap-server H:P --list | --describe | --reset-offsets | --delete
    pykraft delete-records --bootstrap-server H:P --offset-json-file FILE
    pykraft leader-election --bootstrap-server H:P --election-type preferred|unclean ...
    pykraft reassign-partitions --bootstrap-server H:P --generate|--execute|--verify|...
    pykraft metadata-quorum --bootstrap-controller H:P describe --status | --replication
    pykraft log-cleaner --describe --metrics-url URL [--topic T]
    pykraft cluster cluster-id | unregister --bootstrap-server H:P --id N
    pykraft features --bootstrap-server H:P describe | upgrade | downgrade | disable ...
    pykraft configs --bootstrap-server H:P --describe | --alter --entity-type T ...
    pykraft get-offsets --bootstrap-server H:P [--topic T] [--time latest|earliest|MS]
    pykraft broker-api-versions --bootstrap-server H:P
    pykraft log-dirs --describe --bootstrap-server H:P [--broker-list 1] [--topic-list T]
    pykraft verifiable-producer | verifiable-consumer --bootstrap-server H:P --topic T ...
    pykraft acls --bootstrap-server H:P --add | --remove | --list [--topic T ...]

Every failure the user can act on ends as one line on stderr and exit code 1 (a usage
mistake, a broker's refusal, an unreadable file); `--help` and `--version` exit 0. Server
commands live in `pykraft.cli.server_commands`, imported only when used, so the client tools
start without loading the broker.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException

import pykraft
from pykraft.cli import (
    acls,
    broker_api_versions,
    cluster,
    configs,
    console_consumer,
    console_producer,
    consumer_groups,
    delete_records,
    dump_log,
    features,
    get_offsets,
    leader_election,
    log_cleaner,
    log_dirs,
    metadata_quorum,
    perf,
    reassign_partitions,
    topics,
    transactions,
    verifiable,
)
from pykraft.cli.args import ArgumentParser, CommandError, UsageError
from pykraft.cli.client_config import kafka_error_message
from pykraft.server import storage_cli

__all__ = ["build_parser", "main"]


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="pykraft",
        description="Apache Kafka in KRaft mode, in Python: the node and its tools.",
    )
    parser.add_argument("--version", action="version", version=f"pykraft {pykraft.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_server_parsers(commands)
    topics.add_parser(commands)
    console_producer.add_parser(commands)
    console_consumer.add_parser(commands)
    consumer_groups.add_parser(commands)
    dump_log.add_parser(commands)
    delete_records.add_parser(commands)
    leader_election.add_parser(commands)
    reassign_partitions.add_parser(commands)
    metadata_quorum.add_parser(commands)
    log_cleaner.add_parser(commands)
    perf.add_parser(commands)
    transactions.add_parser(commands)
    cluster.add_parser(commands)
    features.add_parser(commands)
    configs.add_parser(commands)
    get_offsets.add_parser(commands)
    broker_api_versions.add_parser(commands)
    log_dirs.add_parser(commands)
    verifiable.add_parsers(commands)
    acls.add_parser(commands)
    return parser


def _add_server_parsers(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    server = commands.add_parser("server", help="run a node")
    server_commands = server.add_subparsers(dest="server_command", required=True, metavar="start")
    start = server_commands.add_parser("start", help="start a node (kafka-server-start.sh)")
    start.add_argument("config", nargs="?", metavar="CONFIG", help="server.properties file")
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    start.set_defaults(handler=_server_start)
    storage_cli.add_parser(commands)  # kafka-storage.sh: info, format, version-mapping, ...


def _server_start(args: argparse.Namespace) -> int:
    from pykraft.cli import server_commands

    return server_commands.run_server(args.config, list(args.override))


def main(argv: list[str] | None = None) -> int:
    """Run one command; return its exit code (the console script passes it to sys.exit)."""
    try:
        args = build_parser().parse_args(argv)
        handler: Callable[[argparse.Namespace], Any] = args.handler
        return int(handler(args))
    except SystemExit as exit_:  # --help and --version
        return exit_.code if isinstance(exit_.code, int) else 0
    except (UsageError, CommandError) as error:
        return _fail(str(error))
    except KafkaException as exception:
        return _fail(kafka_error_message(exception))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _silence_stdout()  # the reader (say `head`) has gone: not an error
        return 0
    except TimeoutError:  # a client future's wait ran out (an OSError, but no strerror)
        return _fail("timed out waiting for an answer from the cluster")
    except OSError as error:
        where = f": {error.filename}" if error.filename else ""
        return _fail(f"{error.strerror or error}{where}")
    except Exception as error:  # a bug: still one line, unless PYKRAFT_DEBUG asks for more
        if os.environ.get("PYKRAFT_DEBUG"):
            raise
        return _fail(f"unexpected {type(error).__name__}: {error} (PYKRAFT_DEBUG=1 shows more)")


def _fail(message: str) -> int:
    print(f"Error: {message}", file=sys.stderr, flush=True)
    return 1


def _silence_stdout() -> None:
    # Python flushes stdout at exit and would report the broken pipe again; point the
    # descriptor at /dev/null so that last flush goes nowhere.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
