"""Every option of the Kafka-shaped tools says what it does in --help."""

from __future__ import annotations

import argparse

import pytest

from pykraft.cli.main import build_parser

TOOLS = ("metadata-quorum", "consumer-groups", "transactions", "dump-log", "features")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _undescribed(parser: argparse.ArgumentParser, path: str) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if not (action.help or "").strip() or action.help == argparse.SUPPRESS:
            missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    for name, sub in _subparsers(parser).items():
        missing += _undescribed(sub, f"{path} {name}")
    return missing


@pytest.mark.parametrize("tool", TOOLS)
def test_every_option_has_a_description(tool: str) -> None:
    parser = _subparsers(build_parser())[tool]
    assert _undescribed(parser, tool) == []
    assert parser.description, f"{tool} has no description"
