"""Command-line plumbing shared by the tools: the parser, the two error kinds, k=v options.

Every tool reports bad input as one readable line on stderr and exits with code 1, never a
traceback and never argparse's default exit code 2. `UsageError` is the user's mistake on
the command line; `CommandError` is a failure while running (a broker refusal, a missing
file) that the user can act on. `main` turns both into that one line.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import NoReturn

__all__ = [
    "INT16",
    "INT32",
    "INT64",
    "ArgumentParser",
    "CommandError",
    "UsageError",
    "check_int",
    "load_properties",
    "merge_properties",
    "parse_bool",
    "parse_bootstrap_servers",
    "parse_key_values",
    "read_text_file",
]


class UsageError(Exception):
    """The command line is wrong; the message says how, in one line."""


class CommandError(Exception):
    """The command ran and failed; the message says why, in one line."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a parse error raises UsageError instead of printing usage and exiting 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")


def _int_of_bits(bits: int) -> Callable[[str], int]:
    """An argparse `type` for a signed integer of the protocol's width: a partition (32
    bits), an offset (64), an epoch (16). A larger value would be refused by the client
    library with an OverflowError, or silently wrapped (a broker id 2^31 became -2^31)."""
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid integer '{text}'") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range [{low}, {high}]")
        return value

    parse.__name__ = f"int{bits}"
    return parse


INT16 = _int_of_bits(16)
INT32 = _int_of_bits(32)
INT64 = _int_of_bits(64)


def check_int(value: int, bits: int, what: str) -> int:
    """`value` if it fits a signed integer of `bits` bits; else CommandError naming `what`."""
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if not low <= value <= high:
        raise CommandError(f"{what} {value} is out of range [{low}, {high}]")
    return value


def read_text_file(path: str, what: str = "") -> str:
    """A UTF-8 file's text; CommandError "cannot read [what ]PATH: reason" otherwise."""
    label = f"{what} {path}" if what else path
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise CommandError(f"cannot read {label}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise CommandError(f"cannot read {label}: not UTF-8 text (byte {error.start})") from None


def parse_key_values(
    items: Iterable[str] | None, option: str, *, strip_values: bool = False
) -> dict[str, str]:
    """Turn repeated `key=value` option values into a dict; later keys win, as in Kafka.

    Values keep their whitespace unless asked: `--property key.separator=" "` is a space.
    """
    result: dict[str, str] = {}
    for item in items or ():
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise UsageError(f"{option} expects key=value, got '{item}'")
        result[key.strip()] = value.strip() if strip_values else value
    return result


def parse_bool(value: str, name: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise UsageError(f"{name} must be true or false, got '{value}'")


_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^\s:,\[\]]+):(\d{1,5})$")


def parse_bootstrap_servers(value: str) -> str:
    """Check a `host:port[,host:port...]` list and return it normalised (no spaces)."""
    servers = [server.strip() for server in value.split(",") if server.strip()]
    if not servers:
        raise UsageError("--bootstrap-server must name at least one host:port")
    for server in servers:
        match = _HOST_PORT.match(server)
        if match is None or not 0 < int(match.group(2)) < 65536:
            raise UsageError(f"invalid --bootstrap-server '{server}': expected host:port")
    return ",".join(servers)


def add_bootstrap_options(parser: argparse.ArgumentParser, *, short: bool = False) -> None:
    """--bootstrap-server or --bootstrap-controller (Kafka's KRaft tools); `short` adds
    kafka-cluster.sh's -b and -C."""
    connection = parser.add_mutually_exclusive_group()
    connection.add_argument("--bootstrap-server", *(["-b"] if short else []),
                            metavar="HOST:PORT[,...]", help="brokers to connect to")
    connection.add_argument("--bootstrap-controller", *(["-C"] if short else []),
                            metavar="HOST:PORT[,...]", help="controllers to connect to")


def bootstrap_of(args: argparse.Namespace) -> str:
    """The checked list add_bootstrap_options gave; errors name the option used."""
    bootstrap = args.bootstrap_server or args.bootstrap_controller
    if not bootstrap:
        raise UsageError("one of --bootstrap-server or --bootstrap-controller must be specified")
    option = "--bootstrap-server" if args.bootstrap_server else "--bootstrap-controller"
    try:
        return parse_bootstrap_servers(bootstrap)
    except UsageError as error:
        raise UsageError(str(error).replace("--bootstrap-server", option)) from None


def load_properties(path: str) -> dict[str, str]:
    """Read a Java-style .properties file: `key=value` or `key: value`, # and ! comments.

    Enough of the format for client configuration files: continuation lines ending in a
    backslash are joined; Unicode escapes are not interpreted.
    """
    return parse_properties(read_text_file(path, "properties file"))


def parse_properties(text: str) -> dict[str, str]:
    result: dict[str, str] = {}
    pending = ""
    for raw_line in text.splitlines():
        line = pending + raw_line.strip()
        pending = ""
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        if not line or line[0] in "#!":
            continue
        key, value = _split_property(line)
        result[key] = value
    if pending:
        key, value = _split_property(pending)
        result[key] = value
    return result


def _split_property(line: str) -> tuple[str, str]:
    cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
    if cut < 0:
        return line, ""
    return line[:cut].strip(), line[cut + 1 :].strip()


def merge_properties(*layers: Mapping[str, str]) -> dict[str, str]:
    """Later layers override earlier ones: file, then repeated --*-property options."""
    merged: dict[str, str] = {}
    for layer in layers:
        merged.update(layer)
    return merged
