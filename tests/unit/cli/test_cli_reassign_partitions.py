"""The file formats and the placement of `pykraft reassign-partitions` and
`pykraft leader-election` (the cluster side is in tests/integration)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pykraft.cli.args import CommandError
from pykraft.cli.leader_election import parse_partitions_json
from pykraft.cli.reassign_partitions import (
    parse_reassignment_json,
    parse_topics_json,
    propose,
)


def test_reassignment_json() -> None:
    parsed = parse_reassignment_json({"version": 1, "partitions": [
        {"topic": "a", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]},
        {"topic": "a", "partition": 1, "replicas": [2, 3]}]})
    assert parsed == {("a", 0): (1, 2), ("a", 1): (2, 3)}


@pytest.mark.parametrize(("document", "words"), [
    ({"partitions": []}, "cannot be empty"),
    ([], "'partitions' list"),
    ({"partitions": [{"topic": "a", "partition": "0", "replicas": [1]}]}, "needs 'topic'"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1, 1]}]}, "Duplicate replica"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1]},
                     {"topic": "a", "partition": 0, "replicas": [2]}]}, "Duplicate partition"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1],
                      "log_dirs": ["/data"]}]}, "log directories"),
])
def test_bad_reassignment_json(document: Any, words: str) -> None:
    with pytest.raises(CommandError, match=words):
        parse_reassignment_json(document)


def test_topics_json() -> None:
    assert parse_topics_json({"topics": [{"topic": "a"}, {"topic": "b"}], "version": 1}) == [
        "a", "b"]
    with pytest.raises(CommandError):
        parse_topics_json({"topics": [{"topic": "a"}, {"topic": "a"}]})
    with pytest.raises(CommandError):
        parse_topics_json({"topics": [{"name": "a"}]})


def test_proposal_spreads_replicas_over_the_brokers() -> None:
    current = {("t", p): (1, 2, 3) for p in range(8)}
    proposal = propose(current, [4, 5, 6, 7], random.Random(3))
    assert set(proposal) == set(current)
    leaders = [replicas[0] for _, replicas in sorted(proposal.items())]
    for replicas in proposal.values():
        assert len(replicas) == 3 and len(set(replicas)) == 3
        assert set(replicas) <= {4, 5, 6, 7}
    assert sorted(leaders.count(b) for b in (4, 5, 6, 7)) == [2, 2, 2, 2]
    with pytest.raises(CommandError, match="larger than available brokers"):
        propose(current, [4, 5], random.Random(3))


def test_election_json() -> None:
    parsed = parse_partitions_json('{"partitions": [{"topic": "a", "partition": 2}]}')
    assert [(tp.topic, tp.partition) for tp in parsed] == [("a", 2)]
    for text, words in [("{", "not valid JSON"), ('{"partitions": []}', "names no partition"),
                        ('{"partitions": [{"topic": "a", "partition": 1},'
                         ' {"topic": "a", "partition": 1}]}', "duplicate"),
                        ('{"partitions": [{"topic": "a"}]}', "integer 'partition'")]:
        with pytest.raises(CommandError, match=words):
            parse_partitions_json(text)
