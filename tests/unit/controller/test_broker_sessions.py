"""Broker sessions on the active controller: heartbeats keep a session for
broker.session.timeout.ms; a closed heartbeat connection shortens it to the grace unless the
broker heartbeats again."""

from __future__ import annotations

from pykraft.controller.cluster import BrokerSessions
from tests.unit.controller.controller_harness import Harness


def test_a_session_lasts_the_timeout_after_the_last_heartbeat() -> None:
    sessions = BrokerSessions(9_000, connection_grace_ms=3_000)
    sessions.touch(1, 1_000, 5, fenced=False)
    assert sessions.has_valid_session(1, 10_000)
    assert not sessions.has_valid_session(1, 10_001)
    assert sessions.expiry_ms(1) == 10_001


def test_a_closed_connection_ends_the_session_after_the_grace() -> None:
    sessions = BrokerSessions(9_000, connection_grace_ms=3_000)
    sessions.touch(1, 1_000, 5, fenced=False)
    sessions.connection_lost(1, 2_000)
    assert sessions.expiry_ms(1) == 5_001
    assert sessions.has_valid_session(1, 5_000)
    assert not sessions.has_valid_session(1, 5_001)
    sessions.connection_lost(1, 4_000)  # the first loss counts
    assert sessions.expiry_ms(1) == 5_001


def test_a_heartbeat_after_the_loss_restores_the_full_session() -> None:
    sessions = BrokerSessions(9_000, connection_grace_ms=3_000)
    sessions.touch(1, 1_000, 5, fenced=False)
    sessions.connection_lost(1, 2_000)
    sessions.touch(1, 2_500, 6, fenced=False)  # reconnected and heartbeated
    assert sessions.expiry_ms(1) == 11_501
    assert sessions.has_valid_session(1, 11_000)


def test_the_grace_never_exceeds_the_session_timeout() -> None:
    sessions = BrokerSessions(2_000, connection_grace_ms=3_000)
    sessions.touch(1, 0, 5, fenced=False)
    sessions.connection_lost(1, 1_000)
    assert sessions.expiry_ms(1) == 2_001  # the session's own end comes first
    unknown = BrokerSessions(9_000)
    unknown.connection_lost(7, 0)  # no session: nothing to shorten
    assert unknown.expiry_ms(7) is None


def test_a_heartbeat_heard_of_before_its_turn_extends_the_session() -> None:
    """A heartbeat that arrived while the controller was busy counts from its arrival, and
    one on a new connection ends the grace; an unknown broker gets no session from it."""
    sessions = BrokerSessions(9_000, connection_grace_ms=3_000)
    sessions.touch(1, 1_000, 5, fenced=False)
    sessions.connection_lost(1, 2_000)
    sessions.heard_from(1, 1_500)  # on the old connection, before it closed
    assert sessions.expiry_ms(1) == 5_001
    sessions.heard_from(1, 4_000)
    assert sessions.expiry_ms(1) == 13_001
    sessions.heard_from(1, 3_000)  # an older one changes nothing
    assert sessions.expiry_ms(1) == 13_001
    sessions.heard_from(2, 4_000)
    assert sessions.expiry_ms(2) is None


def test_the_active_controller_knows_the_lowest_offset_its_live_brokers_applied() -> None:
    """What snapshot retention keeps the log for: the lowest metadata offset reported by
    an unfenced broker not shutting down, and nothing on a standby."""
    h = Harness()
    h.start_brokers(3)
    h.heartbeat(0, 100, offset=40)
    h.heartbeat(1, 100, offset=30)
    h.heartbeat(2, 100, offset=50)
    assert h.controller.lowest_broker_offset() == 30
    h.heartbeat(1, 200, want_shutdown=True, offset=60)  # leaving: no longer waited for
    assert h.controller.lowest_broker_offset() == 40
    h.controller.deactivate()
    assert h.controller.lowest_broker_offset() is None
