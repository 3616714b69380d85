"""`pykraft features`: describe and change finalized feature levels, like kafka-features.sh.

    pykraft features (--bootstrap-server H:P | --bootstrap-controller H:P) describe
    pykraft features ... upgrade (--metadata VERSION | --feature NAME=LEVEL ...) [--dry-run]
    pykraft features ... downgrade (--metadata VERSION | --feature NAME=LEVEL ...)
                                   [--unsafe] [--dry-run]
    pykraft features ... disable --feature NAME ... [--unsafe] [--dry-run]

`describe` reads the features of the ApiVersions answer (KIP-584): one line per supported
feature, in Kafka's format (metadata.version levels by their release names). The changes
send UpdateFeatures (api 57), which a broker forwards to the active controller; --dry-run
sets validate_only. VERSION is a release ("3.9", its latest level) or a level name
("3.9-IV0"). As Kafka 3.9+, a request succeeds or fails as a whole.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
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
from pykraft.cli.protocol_client import ProtocolClient, active_controller, error_name
from pykraft.controller.features import (
    METADATA_VERSION_FEATURE,
    UpgradeType,
    metadata_version_level,
    metadata_version_name,
)

__all__ = ["add_parser", "describe_lines", "update_features"]

UPDATE_FEATURES: Final = 57
_TIMEOUT_S: Final = 30.0


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "features", help="describe and change feature levels (kafka-features.sh)",
        description="This tool manages feature flags in Kafka.")
    add_bootstrap_options(parser)
    parser.add_argument("--command-config", metavar="FILE",
                        help="Property file containing configs to be passed to Admin Client "
                             "(security settings, default.api.timeout.ms).")
    actions = parser.add_subparsers(dest="features_command", required=True,
                                    metavar="{describe,upgrade,downgrade,disable}")
    actions.add_parser("describe", help="describes the current active feature flags")
    upgrade = actions.add_parser("upgrade", help="upgrade one or more feature flags")
    downgrade = actions.add_parser("downgrade", help="downgrade one or more feature flags")
    disable = actions.add_parser("disable", help="disable one or more feature flags "
                                 "(downgrade to level 0)")
    for action in (upgrade, downgrade):
        action.add_argument("--metadata", metavar="VERSION",
                            help="the metadata.version to set, e.g. 3.9 or 3.9-IV0")
        action.add_argument("--feature", action="append", default=[], metavar="NAME=LEVEL",
                            help="a feature and the level to set it to")
    disable.add_argument("--feature", action="append", default=[], metavar="NAME",
                         help="a feature to disable")
    for action in (downgrade, disable):
        action.add_argument("--unsafe", action="store_true",
                            help="perform an unsafe downgrade (may lose metadata)")
    for action in (upgrade, downgrade, disable):
        action.add_argument("--dry-run", action="store_true",
                            help="validate the change without performing it")
    parser.set_defaults(handler=_run_args)


def _run_args(args: argparse.Namespace) -> int:
    servers = bootstrap_of(args)
    properties = load_properties(args.command_config) if args.command_config else {}
    timeout_s = timeout_seconds(properties)
    command = args.features_command
    if command == "describe":
        for line in describe_lines(servers, timeout_s=timeout_s, properties=properties):
            print(line)
        return 0
    levels = _wanted_levels(args)
    upgrade_type = (UpgradeType.UPGRADE if command == "upgrade"
                    else UpgradeType.UNSAFE_DOWNGRADE if args.unsafe
                    else UpgradeType.SAFE_DOWNGRADE)
    error = update_features(servers, levels, upgrade_type, validate_only=args.dry_run,
                            timeout_s=timeout_s, controllers=args.bootstrap_controller is not None,
                            properties=properties)
    verb = {"upgrade": "upgraded", "downgrade": "downgraded", "disable": "disabled"}[command]
    for name, level in sorted(levels.items()):  # as Kafka: by feature name
        target = "" if command == "disable" else f" to {level}"
        if error is None:
            done = "can be" if args.dry_run else "was"
            print(f"{name} {done} {verb}{target}.")
        else:
            helper = "Can not" if args.dry_run else "Could not"
            print(f"{helper} {command} {name}{target}. {error}")
    if error is not None:
        raise CommandError(f"{len(levels)} out of {len(levels)} operation(s) failed.")
    return 0


def _wanted_levels(args: argparse.Namespace) -> dict[str, int]:
    levels: dict[str, int] = {}
    if args.features_command == "disable":
        if not args.feature:
            raise UsageError("disable needs at least one --feature")
        return dict.fromkeys(args.feature, 0)
    if args.metadata is not None:
        level = metadata_version_level(args.metadata)
        if level is None:
            raise UsageError(f"unknown metadata.version '{args.metadata}' "
                             "(a release such as 3.9, or a level name such as 3.9-IV0)")
        levels[METADATA_VERSION_FEATURE] = level
    for item in args.feature:
        name, separator, value = item.partition("=")
        if not separator or not name.strip() or not re.fullmatch(r"-?\d+", value.strip()):
            raise UsageError(f"--feature expects NAME=LEVEL, got '{item}'")
        if name.strip() in levels:
            raise UsageError(f"{name.strip()} is given more than once")
        levels[name.strip()] = int(value)
        if not -(1 << 15) <= levels[name.strip()] < 1 << 15:  # a level is an int16
            raise UsageError(f"--feature {name.strip()}: level {value.strip()} is out of "
                             "range [-32768, 32767]")
    if not levels:
        raise UsageError(f"{args.features_command} needs --metadata or at least one --feature")
    return levels


# -- asking the cluster -------------------------------------------------------------------


def _level_text(name: str, level: int) -> str:
    return metadata_version_name(level) if name == METADATA_VERSION_FEATURE else str(level)


def describe_lines(servers: str, *, timeout_s: float = _TIMEOUT_S,
                   properties: Mapping[str, str] | None = None) -> list[str]:
    with ProtocolClient(servers, timeout_s=timeout_s, client_id="pykraft-features",
                        properties=properties) as client:
        answer = client.api_versions
    supported = {f.name: (int(f.min_version), int(f.max_version))
                 for f in getattr(answer, "supported_features", ())}
    finalized = {f.name: int(f.max_version_level)
                 for f in getattr(answer, "finalized_features", ())}
    epoch = int(getattr(answer, "finalized_features_epoch", -1))
    lines = []
    for name in sorted(set(supported) | set(finalized)):
        low, high = supported.get(name, (0, 0))
        level = finalized.get(name)
        lines.append(
            f"Feature: {name}\tSupportedMinVersion: {_level_text(name, low)}\t"
            f"SupportedMaxVersion: {_level_text(name, high)}\t"
            f"FinalizedVersionLevel: {'-' if level is None else _level_text(name, level)}\t"
            f"Epoch: {epoch if epoch >= 0 else '-'}")
    return lines


def update_features(servers: str, levels: dict[str, int], upgrade_type: UpgradeType, *,
                    validate_only: bool, timeout_s: float = _TIMEOUT_S,
                    controllers: bool = False,
                    properties: Mapping[str, str] | None = None) -> str | None:
    """UpdateFeatures; None when accepted, else the refusal as one line. A broker forwards
    it to the active controller; given `controllers`, the tool finds that one itself (a
    controller that is not active would refuse it with NOT_CONTROLLER)."""
    def build(module: ModuleType, version: int) -> Any:
        if version == 0:
            updates = tuple(module.FeatureUpdateKey(
                feature=name, max_version_level=level,
                allow_downgrade=upgrade_type is not UpgradeType.UPGRADE)
                for name, level in levels.items())
        else:
            updates = tuple(module.FeatureUpdateKey(feature=name, max_version_level=level,
                                                    upgrade_type=int(upgrade_type))
                            for name, level in levels.items())
        fields: dict[str, Any] = {"feature_updates": updates}
        if version >= 1:
            fields["validate_only"] = validate_only
        elif validate_only:
            raise CommandError("the server does not support --dry-run (UpdateFeatures v0)")
        return module.UpdateFeaturesRequest(**fields)

    client = (active_controller(servers, timeout_s=timeout_s, client_id="pykraft-features",
                                call="updateFeatures", properties=properties) if controllers
              else ProtocolClient(servers, timeout_s=timeout_s, client_id="pykraft-features",
                                  properties=properties))
    with client:
        _, response = client.request(UPDATE_FEATURES, "UpdateFeatures", (0, 2), build)
    if response.error_code != ErrorCode.none:
        return f"{error_name(response.error_code)}: {response.error_message or ''}".rstrip(": ")
    for result in getattr(response, "results", ()):
        if result.error_code != ErrorCode.none:
            return f"{error_name(result.error_code)}: {result.error_message or ''}".rstrip(": ")
    return None
