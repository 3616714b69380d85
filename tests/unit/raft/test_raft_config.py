"""The quorum's settings come from server.properties: RaftConfig.from_server_configs maps
the six controller.quorum.* timers, and RaftNode.open uses it when given no RaftConfig --
for a single voter too, whose append linger used to stay at the default."""

from __future__ import annotations

from pathlib import Path

import pytest

from pykraft.errors import InvalidConfig
from pykraft.raft.core import RaftConfig
from pykraft.raft.driver import RaftNode

KEYS = {
    "controller.quorum.append.linger.ms": "3",
    "controller.quorum.election.timeout.ms": "700",
    "controller.quorum.election.backoff.max.ms": "900",
    "controller.quorum.fetch.timeout.ms": "1500",
    "controller.quorum.request.timeout.ms": "1200",
    "controller.quorum.retry.backoff.ms": "30",
}


def test_every_controller_quorum_timer_is_mapped() -> None:
    config = RaftConfig.from_server_configs(KEYS)
    assert (
        config.append_linger_ms,
        config.election_timeout_ms,
        config.election_backoff_max_ms,
        config.fetch_timeout_ms,
        config.request_timeout_ms,
        config.retry_backoff_ms,
    ) == (3, 700, 900, 1500, 1200, 30)
    assert config.fetch_max_wait_ms == 500


def test_keys_not_set_take_kafkas_defaults() -> None:
    assert RaftConfig.from_server_configs({"log.dirs": "/tmp/x"}) == RaftConfig()


def test_a_short_request_timeout_shortens_the_parked_fetch() -> None:
    """The leader must answer a parked fetch before the follower's request times out."""
    config = RaftConfig.from_server_configs({"controller.quorum.request.timeout.ms": "300"})
    assert config.fetch_max_wait_ms == 150 < config.request_timeout_ms


def test_a_value_that_is_no_int_is_an_invalid_config() -> None:
    with pytest.raises(InvalidConfig, match="controller.quorum.fetch.timeout.ms"):
        RaftConfig.from_server_configs({"controller.quorum.fetch.timeout.ms": "soon"})


@pytest.mark.parametrize("voters", [frozenset({1}), frozenset({1, 2, 3})])
def test_raft_node_open_takes_the_timers_from_server_configs(
    tmp_path: Path, voters: frozenset[int]
) -> None:
    class NoTransport:
        def connect(self, deliver: object) -> None: ...

        def send(self, message: object) -> None: ...

        async def flush(self, timeout_ms: int) -> None: ...

        async def close(self) -> None: ...

    node = RaftNode.open(node_id=1, voters=voters, log_dir=tmp_path / "__cluster_metadata-0",
                         server_configs=KEYS, transport=NoTransport())
    try:
        assert node.core.config == RaftConfig.from_server_configs(KEYS)
    finally:
        node.store.close()


def test_an_explicit_election_timeout_overrides_the_key(tmp_path: Path) -> None:
    node = RaftNode.open(node_id=1, voters=frozenset({1}),
                         log_dir=tmp_path / "__cluster_metadata-0",
                         server_configs=KEYS, election_timeout_ms=250)
    try:
        assert node.core.config.election_timeout_ms == 250
        assert node.core.config.append_linger_ms == 3
    finally:
        node.store.close()
