"""`pykraft configs`: describe and alter dynamic configs, like kafka-configs.sh (Kafka 4.0).

    pykraft configs --bootstrap-server H:P --describe --entity-type topics [--entity-name T] [--all]
    pykraft configs --bootstrap-server H:P --alter --entity-type brokers --entity-default \
        --add-config 'log.cleaner.threads=2,k=[a,b]' --delete-config k2

Topics, brokers, broker-loggers, groups and client-metrics are config resources
(DescribeConfigs / IncrementalAlterConfigs, as Kafka 4.0's tool sends for every resource
type); users, clients and ips are quota entities (DescribeClientQuotas / AlterClientQuotas).
A user also has SCRAM credentials (KIP-554): `--add-config
'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'` salts the password here, as Kafka's
tool does, and sends only the salt and the salted password (AlterUserScramCredentials);
`--delete-config SCRAM-SHA-512` removes one; a describe of users lists each user's mechanisms
and iterations (DescribeUserScramCredentials), never a secret.
A broker's own configs are asked of that broker, at the address the cluster advertises for
it, because only a broker knows its static configs. The checks, messages and output lines
are Kafka's ConfigCommand's; a refusal by the cluster ends as one `Error:` line with
Kafka's error name (a node that does not serve an API answers UNSUPPORTED_VERSION).
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
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
from pykraft.cli.client_config import timeout_seconds
from pykraft.cli.cluster_nodes import describe_cluster, error_text
from pykraft.cli.protocol_client import ProtocolClient, error_name
from pykraft.net.scram import ITERATIONS_MIN, MECHANISMS, SALT_BYTES

__all__ = ["add_parser", "parse_add_config"]

DESCRIBE_CONFIGS: Final = 32
INCREMENTAL_ALTER_CONFIGS: Final = 44
LIST_GROUPS: Final = 16
DESCRIBE_CLIENT_QUOTAS: Final = 48
ALTER_CLIENT_QUOTAS: Final = 49
DESCRIBE_USER_SCRAM_CREDENTIALS: Final = 50
ALTER_USER_SCRAM_CREDENTIALS: Final = 51

TOPICS, BROKERS, BROKER_LOGGERS = "topics", "brokers", "broker-loggers"
USERS, CLIENTS, IPS, CLIENT_METRICS, GROUPS = "users", "clients", "ips", "client-metrics", "groups"
ENTITY_TYPES: Final = (TOPICS, CLIENTS, USERS, BROKERS, BROKER_LOGGERS, IPS, CLIENT_METRICS,
                       GROUPS)

# ConfigResource.Type ids, and the source a describe without --all keeps (Kafka's filter)
_RESOURCE_TYPES: Final = {TOPICS: 2, BROKERS: 4, BROKER_LOGGERS: 8, CLIENT_METRICS: 16,
                          GROUPS: 32}
_DYNAMIC_SOURCE: Final = {TOPICS: 1, CLIENT_METRICS: 7, GROUPS: 8}
_BROKER_SOURCE, _BROKER_DEFAULT_SOURCE = 2, 3
# DescribeConfigs config_source values by the names Kafka's ConfigEntry.ConfigSource prints
_SOURCE_NAMES: Final = ("UNKNOWN", "DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG",
                        "DYNAMIC_DEFAULT_BROKER_CONFIG", "STATIC_BROKER_CONFIG",
                        "DEFAULT_CONFIG", "DYNAMIC_BROKER_LOGGER_CONFIG",
                        "DYNAMIC_CLIENT_METRICS_CONFIG", "DYNAMIC_GROUP_CONFIG")
_SET, _DELETE = 0, 1  # IncrementalAlterConfigs config_operation

# ClientQuotaEntity types, and the quota configs each entity type takes (Kafka's QuotaConfig)
_QUOTA_ENTITY: Final = {USERS: "user", CLIENTS: "client-id", IPS: "ip"}
_QUOTA_LABEL: Final = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
_CLIENT_QUOTAS: Final = frozenset({"producer_byte_rate", "consumer_byte_rate",
                                   "request_percentage", "controller_mutation_rate"})
_IP_QUOTAS: Final = frozenset({"connection_creation_rate"})
_SCRAM: Final = frozenset({"SCRAM-SHA-256", "SCRAM-SHA-512"})
# a SCRAM credential config's value, as Kafka's ConfigCommand parses it
_SCRAM_VALUE: Final = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)
_EXACT, _DEFAULT, _ANY = 0, 1, 2  # DescribeClientQuotas match_type

_CONFIG_KEY: Final = re.compile(r"[a-zA-Z0-9._-]*")
# a comma or an equals sign outside square brackets (Kafka's split pattern)
_OUTSIDE_BRACKETS: Final = r"(?=[^\]]*(?:\[|$))"


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "configs", help="describe and alter dynamic configs (kafka-configs.sh)",
        description="Add/Remove entity config for a topic, client, user, broker, "
                    "broker logger, ip, client metrics or group.")
    add_bootstrap_options(parser)
    parser.add_argument("--command-config", metavar="FILE",
                        help="admin client properties: security settings (security.protocol, "
                             "sasl.*, ssl.*) for every connection, default.api.timeout.ms")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--describe", action="store_true",
                        help="List configs for the given entity.")
    action.add_argument("--alter", action="store_true",
                        help="Alter the configuration for the entity.")
    parser.add_argument("--all", action="store_true",
                        help="List all configs for the given entity, including static configs "
                             "and defaults.")
    parser.add_argument("--entity-type", action="append", default=[], metavar="TYPE",
                        help="Type of entity: " + "/".join(ENTITY_TYPES))
    parser.add_argument("--entity-name", action=_EntityName, metavar="NAME",
                        help="Name of entity (topic name/client id/user principal name/broker "
                             "id/ip/client metrics/group id)")
    parser.add_argument("--entity-default", action=_EntityDefault, nargs=0,
                        help="Default entity name for clients/users/brokers/ips (applies to "
                             "the corresponding entity type)")
    parser.add_argument("--add-config", metavar="K=V,...",
                        help="Key=value pairs of configs to add; square brackets group values "
                             "that contain commas: 'k1=v1,k2=[v1,v2,v2],k3=v3'. For a user "
                             "(--entity-type users --entity-name NAME), a SCRAM credential: "
                             "'SCRAM-SHA-256=[iterations=8192,password=alice-secret]' or "
                             "SCRAM-SHA-512 (iterations 4096 to 16384, default 4096; the "
                             "password is salted here and never sent)")
    parser.add_argument("--add-config-file", metavar="FILE",
                        help="Path to a properties file with configs to add.")
    parser.add_argument("--delete-config", action="append", default=[], metavar="K1,K2",
                        help="config keys to remove 'k1,k2'; for a user, SCRAM-SHA-256 or "
                             "SCRAM-SHA-512 removes that SCRAM credential")
    parser.add_argument("--force", action="store_true", help="Suppress console prompts (no-op)")
    for flag, help_text in (("--topic", "The topic's name."), ("--client", "The client's ID."),
                            ("--user", "The user's principal name."),
                            ("--broker", "The broker's ID."),
                            ("--broker-logger", "The broker's ID for its logger config."),
                            ("--ip", "The IP address."), ("--group", "The group's ID."),
                            ("--client-metrics", "The client metrics config resource name.")):
        parser.add_argument(flag, metavar="NAME", help=help_text)
    for flag, what in (("--client-defaults", "clients"), ("--user-defaults", "users"),
                       ("--broker-defaults", "brokers"), ("--ip-defaults", "IPs")):
        parser.add_argument(flag, action="store_true", help=f"The config defaults for all {what}.")
    parser.set_defaults(handler=_run_args, entity_names=None)


class _EntityName(argparse.Action):
    """--entity-name and --entity-default fill one list in command-line order: with
    `--entity-type users --entity-type clients`, the names pair with the types by position."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        names = list(getattr(namespace, "entity_names", None) or [])
        names.append(str(values))
        namespace.entity_names = names


class _EntityDefault(_EntityName):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        super().__call__(parser, namespace, "", option_string)


_FLAG_TYPES: Final = (("topic", TOPICS), ("client", CLIENTS), ("user", USERS),
                      ("broker", BROKERS), ("broker_logger", BROKER_LOGGERS), ("ip", IPS),
                      ("client_metrics", CLIENT_METRICS), ("group", GROUPS))
_DEFAULT_FLAG_TYPES: Final = (("client_defaults", CLIENTS), ("user_defaults", USERS),
                              ("broker_defaults", BROKERS), ("ip_defaults", IPS))


@dataclass(frozen=True, slots=True)
class _Command:
    types: list[str]
    names: list[str]  # "" is the default entity
    describe_all: bool
    to_add: dict[str, str]
    to_delete: list[str]


def _parse(args: argparse.Namespace) -> _Command:
    """Kafka's ConfigCommandOptions.checkArgs, in its order and with its messages."""
    if args.describe == args.alter:
        raise UsageError("Command must include exactly one action: --describe, --alter")
    if args.describe and (args.add_config is not None or args.delete_config):
        option = "--add-config" if args.add_config is not None else "--delete-config"
        raise UsageError(f"Option \"[describe]\" can't be used with option \"[{option[2:]}]\"")
    flags = [(getattr(args, attr), kind) for attr, kind in _FLAG_TYPES
             if getattr(args, attr) is not None]
    default_flags = [kind for attr, kind in _DEFAULT_FLAG_TYPES if getattr(args, attr)]
    types = list(args.entity_type) + [kind for _, kind in flags] + default_flags
    names = list(args.entity_names or []) + [name for name, _ in flags] + ["" for _ in
                                                                            default_flags]
    duplicates = sorted({kind for kind in types if types.count(kind) > 1})
    if duplicates:
        raise UsageError(f"Duplicate entity type(s) specified: {','.join(duplicates)}")
    for kind in types:
        if kind not in ENTITY_TYPES:
            raise UsageError(f"Invalid entity type {kind}, the entity type must be one of "
                             f"{', '.join(ENTITY_TYPES)} with a --bootstrap-server or "
                             "--bootstrap-controller argument")
    if not types:
        raise UsageError("At least one entity type must be specified")
    if len(types) > 1 and set(types) != {USERS, CLIENTS}:
        raise UsageError(f"Only '{USERS}' and '{CLIENTS}' entity types may be specified together")
    if (args.entity_type or args.entity_names) and (flags or default_flags):
        raise UsageError("--entity-{type,name,default} should not be used in conjunction with "
                         "specific entity flags")
    bootstrap_of(args)  # one of the two must be there
    has_name, has_default = any(names), "" in names
    if has_name and types[0] in (BROKERS, BROKER_LOGGERS):
        for name in names:
            if not re.fullmatch(r"[+-]?[0-9]+", name):
                raise UsageError(f"The entity name for {types[0]} must be a valid integer "
                                 f"broker id, but it is: {name}")
    if args.describe:
        if not set(types) & {USERS, CLIENTS, BROKERS, IPS} and has_default:
            raise UsageError("--entity-default must not be specified with --describe of "
                             + ",".join(types))
        if BROKER_LOGGERS in types and not has_name:
            raise UsageError("An entity name must be specified with --describe of "
                             + ",".join(types))
        if len(names) > len(types):
            raise UsageError("More entity names specified than entity types")
        return _Command(types, names, args.all, {}, [])
    if set(types) & {USERS, CLIENTS, BROKERS, IPS}:
        if not has_name and not has_default:
            raise UsageError("An entity-name or default entity must be specified with --alter "
                             "of users, clients, brokers or ips")
    elif not has_name:
        raise UsageError("An entity name must be specified with --alter of " + ",".join(types))
    if args.add_config is not None and args.add_config_file is not None:
        raise UsageError("Only one of --add-config or --add-config-file must be specified")
    if args.add_config is None and args.add_config_file is None and not args.delete_config:
        raise UsageError("At least one of --add-config, --add-config-file, or --delete-config "
                         "must be specified with --alter")
    if len(names) != len(types):
        raise UsageError("An entity name must be specified for every entity type")
    to_add = load_properties(args.add_config_file) if args.add_config_file else {}
    to_add.update(parse_add_config(args.add_config) if args.add_config is not None else {})
    for key in to_add:
        if not _CONFIG_KEY.fullmatch(key):
            raise UsageError(f"Invalid character found for config key: {key}")
    to_delete = [key.strip() for option in args.delete_config for key in option.split(",")
                 if key.strip()]
    return _Command(types, names, False, to_add, to_delete)


def parse_add_config(text: str) -> dict[str, str]:
    """Kafka's --add-config syntax: `k1=v1,k2=[a,b],k3=` (brackets group a list, and are
    dropped from the value; an empty value is allowed)."""
    pairs = re.split("," + _OUTSIDE_BRACKETS, text)
    while len(pairs) > 1 and pairs[-1] == "":  # Java's split drops trailing empty strings
        pairs.pop()
    result: dict[str, str] = {}
    for pair in pairs:
        parts = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, pair)
        if len(parts) != 2:
            raise UsageError("Invalid entity config: all configs to be added must be in the "
                             "format \"key=val\".")
        result[parts[0].strip()] = re.sub(r"[\[\]]", "", parts[1]).strip()
    return result


def _run_args(args: argparse.Namespace) -> int:
    command = _parse(args)
    properties = load_properties(args.command_config) if args.command_config else {}
    timeout_s = timeout_seconds(properties)
    tool = _Tool(bootstrap_of(args), bool(args.bootstrap_controller), timeout_s, properties)
    try:
        if args.describe:
            tool.describe(command)
        else:
            tool.alter(command)
    finally:
        tool.close()
    return 0


class _Tool:
    def __init__(self, bootstrap: str, to_controllers: bool, timeout_s: float,
                 properties: Mapping[str, str]) -> None:
        self.to_controllers = to_controllers
        self.timeout_s = timeout_s
        self.client = ProtocolClient(bootstrap, timeout_s=timeout_s, client_id="pykraft-configs",
                                     properties=properties)
        self._broker_clients: dict[int, ProtocolClient] = {}

    def close(self) -> None:
        self.client.close()
        for client in self._broker_clients.values():
            client.close()

    # -- describe -----------------------------------------------------------------------

    def describe(self, command: _Command) -> None:
        kind = command.types[0]
        if kind in (USERS, CLIENTS, IPS):
            for line in self._quota_lines(command.types, command.names):
                print(line)
            # as Kafka: SCRAM credentials only of users alone, and not of the default user
            if kind == USERS and CLIENTS not in command.types and "" not in command.names:
                for line in self._scram_lines(command.names):
                    print(line)
            return
        name = command.names[0] if command.names else None
        for entity in self._entities(kind) if name is None else [name]:
            if entity == "":
                print(f"Default configs for {kind} in the cluster are:")
            else:
                source = "All" if command.describe_all else "Dynamic"
                print(f"{source} configs for {kind[:-1]} {entity} are:")
            for entry in self._resource_config(kind, entity, True, command.describe_all):
                synonyms = ", ".join(f"{_source_name(s.source)}:{s.name}={_text(s.value)}"
                                     for s in entry.synonyms)
                print(f"  {entry.name}={_text(entry.value)} "
                      f"sensitive={str(bool(entry.is_sensitive)).lower()} synonyms={{{synonyms}}}")

    def _entities(self, kind: str) -> list[str]:
        """Every entity of a type, for a describe without --entity-name (as Kafka lists)."""
        if kind == TOPICS:
            return [name for name, _, _ in describe_cluster(self.client, with_topics=True).topics]
        if kind in (BROKERS, BROKER_LOGGERS):
            brokers = describe_cluster(self.client, with_topics=False).brokers
            return [str(broker.node_id) for broker in brokers] + [""]
        if kind == GROUPS:
            return self._group_ids()
        raise CommandError(f"an entity name must be given to describe {kind}")

    def _group_ids(self) -> list[str]:
        def build(module: ModuleType, version: int) -> Any:
            return module.ListGroupsRequest(states_filter=(), types_filter=()) \
                if version >= 5 else module.ListGroupsRequest(states_filter=())

        _, response = self.client.request(LIST_GROUPS, "ListGroups", (4, 5), build)
        if response.error_code != ErrorCode.none:
            raise CommandError(error_text(response.error_code, None))
        return sorted(str(group.group_id) for group in response.groups)

    def _resource_config(self, kind: str, name: str, synonyms: bool,
                         describe_all: bool) -> list[Any]:
        source = _DYNAMIC_SOURCE.get(kind)
        if kind == BROKERS:
            source = _BROKER_DEFAULT_SOURCE if name == "" else _BROKER_SOURCE
        resource_type = _RESOURCE_TYPES[kind]

        def build(module: ModuleType, version: int) -> Any:
            resource = module.DescribeConfigsResource(
                resource_type=resource_type, resource_name=name, configuration_keys=None)
            return module.DescribeConfigsRequest(
                resources=(resource,), include_synonyms=synonyms, include_documentation=False)

        client = self._client_for(kind, name)
        _, response = _call(client, DESCRIBE_CONFIGS, "DescribeConfigs", (1, 4), build)
        result = response.results[0] if response.results else None
        if result is None:
            raise CommandError(f"{client.address} answered DescribeConfigs without a result")
        if result.error_code != ErrorCode.none:
            raise CommandError(error_text(result.error_code, result.error_message))
        entries = [entry for entry in result.configs
                   if describe_all or source is None or entry.config_source == source]
        return sorted(entries, key=lambda entry: str(entry.name))

    def _client_for(self, kind: str, name: str) -> ProtocolClient:
        """A broker's own configs live on that broker: ask it, at its advertised address."""
        if kind not in (BROKERS, BROKER_LOGGERS) or name == "" or self.to_controllers:
            return self.client
        node_id = int(name)
        if node_id not in self._broker_clients:
            broker = describe_cluster(self.client, with_topics=False).broker(node_id)
            self._broker_clients[node_id] = ProtocolClient(
                broker.address, timeout_s=self.timeout_s, client_id="pykraft-configs",
                properties=self.client.properties)
        return self._broker_clients[node_id]

    # -- alter --------------------------------------------------------------------------

    def alter(self, command: _Command) -> None:
        kind, name = command.types[0], command.names[0]
        if kind in (USERS, CLIENTS, IPS):
            self._alter_quotas(command)
        else:
            self._alter_resource(kind, name, command.to_add, command.to_delete)
        if name:
            print(f"Completed updating config for {kind[:-1]} {name}.")
        else:
            print(f"Completed updating default config for {kind} in the cluster.")

    def _alter_resource(self, kind: str, name: str, to_add: dict[str, str],
                        to_delete: list[str]) -> None:
        if kind == BROKER_LOGGERS:
            loggers = {entry.name for entry in self._resource_config(kind, name, True, False)}
            invalid = [key for key in [*to_delete, *to_add] if key not in loggers]
            if invalid:
                raise CommandError(f"Invalid broker logger(s): {','.join(invalid)}")
        else:
            current = {entry.name for entry in self._resource_config(kind, name, False, False)}
            invalid = [key for key in to_delete if key not in current]
            if invalid:
                raise CommandError(f"Invalid config(s): {','.join(invalid)}")
        resource_type = _RESOURCE_TYPES[kind]

        def build(module: ModuleType, version: int) -> Any:
            configs = tuple(
                [module.AlterableConfig(name=key, config_operation=_SET, value=value)
                 for key, value in to_add.items()]
                + [module.AlterableConfig(name=key, config_operation=_DELETE, value="")
                   for key in to_delete])
            resource = module.AlterConfigsResource(resource_type=resource_type,
                                                   resource_name=name, configs=configs)
            return module.IncrementalAlterConfigsRequest(resources=(resource,),
                                                         validate_only=False)

        client = self._client_for(kind, name)
        _, response = _call(client, INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs",
                            (0, 1), build)
        for result in response.responses:
            if result.error_code != ErrorCode.none:
                raise CommandError(error_text(result.error_code, result.error_message))

    # -- quotas -------------------------------------------------------------------------

    def _quota_entries(self, types: Sequence[str], names: Sequence[str]) -> list[Any]:
        components = []
        for index, kind in enumerate(types):
            name = names[index] if index < len(names) else None
            match_type = _ANY if name is None else _DEFAULT if name == "" else _EXACT
            components.append((_QUOTA_ENTITY[kind], match_type, name or None))

        def build(module: ModuleType, version: int) -> Any:
            return module.DescribeClientQuotasRequest(
                components=tuple(module.ComponentData(entity_type=entity, match_type=match,
                                                      match=value)
                                 for entity, match, value in components),
                strict=True)

        _, response = _call(self.client, DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas", (0, 1),
                            build)
        if response.error_code != ErrorCode.none:
            raise CommandError(error_text(response.error_code, response.error_message))
        return list(response.entries or ())

    def _quota_lines(self, types: Sequence[str], names: Sequence[str]) -> list[str]:
        lines = []
        for entry in self._quota_entries(types, names):
            by_type = {str(e.entity_type): e.entity_name for e in entry.entity}
            parts = []
            for entity in ("user", "client-id", "ip"):
                if entity in by_type:
                    label, value = _QUOTA_LABEL[entity], by_type[entity]
                    parts.append(f"the default {label}" if value is None else f"{label} '{value}'")
            values = ", ".join(f"{v.key}={_java_double(float(v.value))}" for v in entry.values)
            lines.append(f"Quota configs for {', '.join(parts)} are {values}")
        return lines

    def _alter_quotas(self, command: _Command) -> None:
        allowed = _IP_QUOTAS if command.types[0] == IPS else _CLIENT_QUOTAS
        keys = [*command.to_add, *command.to_delete]
        # Kafka names 'clients' for a user and client pair too
        kind = CLIENTS if command.types == [USERS, CLIENTS] else command.types[0]
        what = ("connection quota" if kind == IPS
                else "quota and SCRAM credential" if command.types == [USERS] else "quota")
        # Kafka's wording; for ips its message says "added" for deletions too
        deleted = "added" if kind == IPS else "deleted"
        for verb, asked in (("added", list(command.to_add)), (deleted, command.to_delete)):
            unknown = [key for key in asked
                       if key not in allowed and not (what.endswith("credential")
                                                      and key in _SCRAM)]
            if unknown:
                raise CommandError(f"Only {what} configs can be {verb} for '{kind}' using "
                                   f"--bootstrap-server. Unexpected config names: "
                                   f"{','.join(unknown)}")
        if any(key in _SCRAM for key in keys) and command.types == [USERS]:
            if "" in command.names:
                raise CommandError("The use of --entity-default or --user-defaults is not "
                                   "allowed with User SCRAM Credentials using "
                                   "--bootstrap-server.")
            if any(key not in _SCRAM for key in keys):
                raise CommandError("Cannot alter both quota and SCRAM credential configs "
                                   f"simultaneously for '{USERS}' using --bootstrap-server.")
            self._alter_scram(command.names[0], command.to_add, command.to_delete)
            return
        entries = self._quota_entries(command.types, command.names)
        current = {str(v.key) for entry in entries[:1] for v in entry.values}
        invalid = [key for key in command.to_delete if key not in current]
        if invalid:
            raise CommandError(f"Invalid config(s): {','.join(invalid)}")
        values: dict[str, float] = {}
        for key, text in command.to_add.items():
            try:
                values[key] = float(text)
            except ValueError:
                raise CommandError(
                    f"Cannot parse quota configuration value for {key}: {text}") from None

        def build(module: ModuleType, version: int) -> Any:
            entity = tuple(module.EntityData(entity_type=_QUOTA_ENTITY[kind],
                                              entity_name=name or None)
                           for kind, name in zip(command.types, command.names, strict=True))
            ops = tuple([module.OpData(key=key, value=value, remove=False)
                         for key, value in values.items()]
                        + [module.OpData(key=key, value=0.0, remove=True)
                           for key in command.to_delete])
            return module.AlterClientQuotasRequest(
                entries=(module.EntryData(entity=entity, ops=ops),), validate_only=False)

        _, response = _call(self.client, ALTER_CLIENT_QUOTAS, "AlterClientQuotas", (0, 1), build)
        for entry in response.entries:
            if entry.error_code != ErrorCode.none:
                raise CommandError(error_text(entry.error_code, entry.error_message))


    # -- SCRAM credentials (KIP-554) -----------------------------------------------------

    def _scram_lines(self, names: Sequence[str]) -> list[str]:
        """Kafka's lines for each user's credentials. A user named but without any is left
        out, as Kafka's DescribeUserScramCredentialsResult.users() leaves it out."""
        def build(module: ModuleType, version: int) -> Any:
            return module.DescribeUserScramCredentialsRequest(
                users=tuple(module.UserName(name=name) for name in names) if names else None)

        _, response = _call(self.client, DESCRIBE_USER_SCRAM_CREDENTIALS,
                            "DescribeUserScramCredentials", (0, 0), build)
        if response.error_code != ErrorCode.none:
            raise CommandError(error_text(response.error_code, response.error_message))
        names_by_code = {m.code: m.name for m in MECHANISMS.values()}
        lines = []
        for result in response.results:
            user = str(result.user)
            if result.error_code == ErrorCode.resource_not_found:
                continue
            if result.error_code != ErrorCode.none:
                lines.append(f"Error retrieving SCRAM credential configs for user-principal "
                             f"'{user}': {error_text(result.error_code, result.error_message)}")
                continue
            text = ", ".join(
                f"{names_by_code.get(int(info.mechanism), 'UNKNOWN')}=iterations="
                f"{info.iterations}" for info in result.credential_infos)
            lines.append(f"SCRAM credential configs for user-principal '{user}' are {text}")
        return lines

    def _alter_scram(self, user: str, to_add: dict[str, str], to_delete: list[str]) -> None:
        """Kafka's alterUserScramCredentialConfigs: salted here, deletions first."""
        upsertions = []
        for name, value in to_add.items():
            iterations, password = _scram_value(name, value)
            mechanism = MECHANISMS[name]
            salt = os.urandom(SALT_BYTES)
            upsertions.append((mechanism.code, iterations, salt,
                               mechanism.salted_password(password, salt, iterations)))

        def build(module: ModuleType, version: int) -> Any:
            return module.AlterUserScramCredentialsRequest(
                deletions=tuple(module.ScramCredentialDeletion(
                    name=user, mechanism=MECHANISMS[name].code) for name in to_delete),
                upsertions=tuple(module.ScramCredentialUpsertion(
                    name=user, mechanism=code, iterations=iterations, salt=salt,
                    salted_password=salted) for code, iterations, salt, salted in upsertions))

        _, response = _call(self.client, ALTER_USER_SCRAM_CREDENTIALS,
                            "AlterUserScramCredentials", (0, 0), build)
        for result in response.results:
            if result.error_code != ErrorCode.none:
                raise CommandError(error_text(result.error_code, result.error_message))


def _scram_value(mechanism: str, value: str) -> tuple[int, bytes]:
    """`[iterations=N,]password=P` -> (iterations, password bytes); iterations -1 or none
    is Kafka's default 4096. Unlike Kafka, a refusal never echoes the value: it holds a
    password."""
    match = _SCRAM_VALUE.fullmatch(value)
    iterations_text = None if match is None else match.group(1)
    iterations = ITERATIONS_MIN
    if iterations_text is not None and iterations_text != "-1":
        iterations = int(iterations_text) if re.fullmatch(r"-?[0-9]{1,10}",
                                                          iterations_text) else -2**31 - 1
    if match is None or not -2**31 <= iterations < 2**31:
        raise CommandError(f"Invalid credential property {mechanism.replace('-', '_')} "
                           "(expected [iterations=<n>,]password=<password>)")
    if iterations < ITERATIONS_MIN:
        raise CommandError(f"Iterations {iterations} is less than the minimum "
                           f"{ITERATIONS_MIN} required for {mechanism}")
    return iterations, match.group(2).encode()


# Kafka's ApiKeys names, as its UnsupportedVersionException prints them
_API_CONSTANTS: Final = {DESCRIBE_CONFIGS: "DESCRIBE_CONFIGS",
                         INCREMENTAL_ALTER_CONFIGS: "INCREMENTAL_ALTER_CONFIGS",
                         LIST_GROUPS: "LIST_GROUPS",
                         DESCRIBE_CLIENT_QUOTAS: "DESCRIBE_CLIENT_QUOTAS",
                         ALTER_CLIENT_QUOTAS: "ALTER_CLIENT_QUOTAS",
                         DESCRIBE_USER_SCRAM_CREDENTIALS: "DESCRIBE_USER_SCRAM_CREDENTIALS",
                         ALTER_USER_SCRAM_CREDENTIALS: "ALTER_USER_SCRAM_CREDENTIALS"}


def _call(client: ProtocolClient, api_key: int, name: str, ours: tuple[int, int],
          build: Callable[[ModuleType, int], Any]) -> tuple[int, Any]:
    """client.request, but an API the node does not serve is Kafka's UNSUPPORTED_VERSION."""
    _require(client, api_key, name, ours)
    return client.request(api_key, name, ours, build)


def _require(client: ProtocolClient, api_key: int, name: str, ours: tuple[int, int]) -> None:
    try:
        client.version_for(api_key, name, ours)
    except CommandError as error:
        raise CommandError(f"{error_name(ErrorCode.unsupported_version)}: The node does not "
                           f"support {_API_CONSTANTS[api_key]} ({error})") from None


def _source_name(source: int) -> str:
    return _SOURCE_NAMES[source] if 0 <= source < len(_SOURCE_NAMES) else "UNKNOWN"


def _text(value: str | None) -> str:
    return "null" if value is None else value


def _java_double(value: float) -> str:
    """A double as Java's Double.toString prints it (1024.0, 1.0E7, 1.5E-5), as Kafka's tool
    shows quota values: the shortest digits that round-trip, scientific outside [1e-3, 1e7)."""
    if math.isnan(value) or math.isinf(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return f"{value:.1f}" if value == int(value) else repr(value)
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    mantissa = f"{text[0]}.{text[1:] or '0'}"
    return f"{'-' if sign else ''}{mantissa}E{len(text) - 1 + exponent}"
