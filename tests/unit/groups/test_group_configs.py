"""GROUP config resources (KIP-848, resource type 32): the controller stores
consumer.session.timeout.ms / consumer.heartbeat.interval.ms (and the share ones) as
ConfigRecords after Kafka's GroupConfig checks against the broker's group.consumer.min/max
settings, and the coordinator uses a group's values for that group only."""

from __future__ import annotations

import pytest

from pykraft.controller.configs import group_config_values, validate_group_configs
from pykraft.controller.requests import AlterableConfig, AlterConfigOp, AlterConfigsResource
from pykraft.errors import ErrorCode, InvalidConfig
from pykraft.metadata.records import ConfigRecord
from tests.unit.controller.controller_harness import Harness
from tests.unit.groups.test_consumer_group_core import Harness as ConsumerHarness

GROUP_TYPE = 32
SET, DELETE, APPEND = AlterConfigOp.SET, AlterConfigOp.DELETE, AlterConfigOp.APPEND


def alter(name: str, *ops: tuple[str, AlterConfigOp, str | None]) -> AlterConfigsResource:
    return AlterConfigsResource(GROUP_TYPE, name, tuple(AlterableConfig(*op) for op in ops))


def test_group_configs_are_stored_for_any_group_and_deleted() -> None:
    """SET writes one ConfigRecord per changed key (the group need not exist), a second SET
    of the same value writes nothing, DELETE removes the key."""
    h = Harness()
    h.start_brokers(1)
    op = h.controller.incremental_alter_configs([alter(
        "g", ("consumer.session.timeout.ms", SET, "50000"),
        ("consumer.heartbeat.interval.ms", SET, "6000"))], validate_only=False)
    assert [r.error_code for r in op.response] == [ErrorCode.none]
    assert set(op.records) == {
        ConfigRecord(resource_type=GROUP_TYPE, resource_name="g",
                     name="consumer.session.timeout.ms", value="50000"),
        ConfigRecord(resource_type=GROUP_TYPE, resource_name="g",
                     name="consumer.heartbeat.interval.ms", value="6000")}
    h.run(op)
    assert dict(h.controller.image.configs.get(GROUP_TYPE, "g")) == {
        "consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "6000"}
    again = h.controller.incremental_alter_configs([alter(
        "g", ("consumer.session.timeout.ms", SET, "50000"))], validate_only=False)
    assert again.records == ()
    h.run(h.controller.incremental_alter_configs([alter(
        "g", ("consumer.heartbeat.interval.ms", DELETE, None))], validate_only=False))
    assert dict(h.controller.image.configs.get(GROUP_TYPE, "g")) == {
        "consumer.session.timeout.ms": "50000"}


@pytest.mark.parametrize(("resource", "code", "message"), [
    (alter("", ("consumer.session.timeout.ms", SET, "50000")), ErrorCode.invalid_request,
     "Default group resources are not allowed."),
    (alter("g", ("session.timeout.ms", SET, "50000")), ErrorCode.invalid_config,
     "Unknown group config name: session.timeout.ms"),
    (alter("g", ("consumer.session.timeout.ms", SET, "soon")), ErrorCode.invalid_config,
     "Invalid value soon for configuration consumer.session.timeout.ms: Not a number of "
     "type INT"),
    (alter("g", ("consumer.session.timeout.ms", SET, "0")), ErrorCode.invalid_config,
     "Value must be at least 1"),
    (alter("g", ("consumer.session.timeout.ms", SET, "70000")), ErrorCode.invalid_config,
     "consumer.session.timeout.ms must be less than or equal to "
     "group.consumer.max.session.timeout.ms"),
    (alter("g", ("consumer.session.timeout.ms", SET, "1000")), ErrorCode.invalid_config,
     "consumer.session.timeout.ms must be greater than or equal to "
     "group.consumer.min.session.timeout.ms"),
    (alter("g", ("consumer.heartbeat.interval.ms", SET, "100")), ErrorCode.invalid_config,
     "consumer.heartbeat.interval.ms must be greater than or equal to "
     "group.consumer.min.heartbeat.interval.ms"),
    (alter("g", ("share.record.lock.duration.ms", SET, "999")), ErrorCode.invalid_config,
     "Value must be at least 1000"),
    (alter("g", ("consumer.session.timeout.ms", APPEND, "1")), ErrorCode.invalid_config,
     "because its type is not LIST"),
])
def test_group_config_errors_change_nothing(resource: AlterConfigsResource, code: ErrorCode,
                                            message: str) -> None:
    """Kafka's ControllerConfigurationValidator / GroupConfig messages and codes."""
    h = Harness()
    h.start_brokers(1)
    op = h.controller.incremental_alter_configs([resource], validate_only=False)
    assert op.records == ()
    [result] = op.response
    assert result.error_code == code
    assert message in (result.error_message or "")


def test_bounds_come_from_the_brokers_settings() -> None:
    """The broker's min/max widen or narrow what a group may set; a session timeout must stay
    above the heartbeat interval, counting the broker's values for unset keys."""
    wide = {"group.consumer.min.session.timeout.ms": "1000",
            "group.consumer.min.heartbeat.interval.ms": "100"}
    validate_group_configs({"consumer.session.timeout.ms": "1500",
                            "consumer.heartbeat.interval.ms": "200"}, wide)
    with pytest.raises(InvalidConfig, match="consumer.session.timeout.ms must be greater "
                       "than consumer.heartbeat.interval.ms"):
        validate_group_configs({"consumer.session.timeout.ms": "1500",
                                "consumer.heartbeat.interval.ms": "1500"}, wide)
    with pytest.raises(InvalidConfig, match="must be less than or equal to group.consumer."
                       "max.heartbeat.interval.ms"):
        validate_group_configs({"consumer.heartbeat.interval.ms": "16000"}, {})
    assert group_config_values({"group.consumer.session.timeout.ms": "48000"},
                               {"consumer.heartbeat.interval.ms": "7000"})[
        "consumer.session.timeout.ms"] == ("48000", False)


def test_the_coordinator_uses_a_groups_own_timeouts() -> None:
    """A group with consumer.heartbeat.interval.ms / consumer.session.timeout.ms set hands
    out its interval and fences on its session; another group keeps the broker's."""
    h = ConsumerHarness()
    h.core.update_group_configs({"cg": {"consumer.heartbeat.interval.ms": "700",
                                        "consumer.session.timeout.ms": "9000"},
                                 "other": {"consumer.heartbeat.interval.ms": "1"}})
    joined = h.beat("a", 0)
    assert joined.heartbeat_interval_ms == 700
    h.advance(5000)  # beyond the broker's 2000 ms session, within the group's 9000 ms
    assert h.beat("a", joined.member_epoch, owned={}).error == ErrorCode.none
    h.advance(9001)
    assert h.beat("a", joined.member_epoch, owned={}).error == ErrorCode.unknown_member_id
    h.core.update_group_configs({})
    assert h.beat("b", 0).heartbeat_interval_ms == 100  # the broker's again
