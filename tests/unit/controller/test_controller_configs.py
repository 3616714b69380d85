"""IncrementalAlterConfigs and legacy AlterConfigs for topics and brokers."""

from __future__ import annotations

import pytest

from pykraft.controller.requests import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    LegacyAlterConfigsResource,
)
from pykraft.errors import ErrorCode
from pykraft.metadata.records import ConfigRecord
from tests.unit.controller.controller_harness import Harness

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = (
    AlterConfigOp.SET,
    AlterConfigOp.DELETE,
    AlterConfigOp.APPEND,
    AlterConfigOp.SUBTRACT,
)


@pytest.fixture
def harness() -> Harness:
    h = Harness()
    h.start_brokers(2)
    h.create("t", 1, 1, configs={"retention.ms": "100", "cleanup.policy": "delete"})
    return h


def alter(
    rtype: int, name: str, *ops: tuple[str, AlterConfigOp, str | None]
) -> AlterConfigsResource:
    return AlterConfigsResource(rtype, name, tuple(AlterableConfig(*op) for op in ops))


def topic_configs(harness: Harness) -> dict[str, str]:
    return dict(harness.controller.image.configs.get(TOPIC, "t"))


def test_incremental_set_delete_append_subtract_on_a_topic(harness: Harness) -> None:
    """Each operation changes the overrides as Kafka does; replay shows the result."""
    op = harness.controller.incremental_alter_configs(
        [
            alter(
                TOPIC,
                "t",
                ("segment.ms", SET, "60000"),
                ("retention.ms", DELETE, None),
                ("cleanup.policy", APPEND, "compact"),
            )
        ],
        validate_only=False,
    )
    assert [(r.resource_name, r.error_code) for r in op.response] == [("t", ErrorCode.none)]
    harness.run(op)
    assert topic_configs(harness) == {"segment.ms": "60000", "cleanup.policy": "delete,compact"}
    harness.run(
        harness.controller.incremental_alter_configs(
            [alter(TOPIC, "t", ("cleanup.policy", SUBTRACT, "delete"))], validate_only=False
        )
    )
    assert topic_configs(harness) == {"segment.ms": "60000", "cleanup.policy": "compact"}
    assert harness.replayed_image().configs == harness.controller.image.configs


def test_append_to_an_unset_list_starts_from_its_default(harness: Harness) -> None:
    harness.create("u", 1, 1)
    op = harness.controller.incremental_alter_configs(
        [alter(TOPIC, "u", ("cleanup.policy", APPEND, "compact"))], validate_only=False
    )
    assert op.records == (
        ConfigRecord(
            resource_type=TOPIC, resource_name="u", name="cleanup.policy", value="delete,compact"
        ),
    )


def test_unchanged_topic_values_write_nothing_but_broker_values_always_do(
    harness: Harness,
) -> None:
    """Kafka skips a TOPIC record that changes nothing, but always writes BROKER records."""
    op = harness.controller.incremental_alter_configs(
        [alter(TOPIC, "t", ("retention.ms", SET, "100"))], validate_only=False
    )
    assert op.records == () and op.response[0].error_code == ErrorCode.none
    harness.run(
        harness.controller.incremental_alter_configs(
            [alter(BROKER, "", ("log.retention.ms", SET, "5000"))], validate_only=False
        )
    )
    op = harness.controller.incremental_alter_configs(
        [alter(BROKER, "", ("log.retention.ms", SET, "5000"))], validate_only=False
    )
    assert len(op.records) == 1


def test_broker_configs_per_broker_and_cluster_default(harness: Harness) -> None:
    """BROKER resources: "" is the cluster default, "<id>" one registered broker."""
    op = harness.controller.incremental_alter_configs(
        [
            alter(BROKER, "", ("num.io.threads", SET, "16")),
            alter(BROKER, "1", ("log.retention.ms", SET, "1000")),
            alter(BROKER, "1", ("listeners", SET, "PLAINTEXT://:9093")),
        ],
        validate_only=False,
    )
    # A resource named twice gets one INVALID_REQUEST result, as Kafka gives.
    assert [r.error_code for r in op.response] == [ErrorCode.none, ErrorCode.invalid_request]
    assert op.response[1].error_message == "Duplicate resource."
    harness.run(op)
    assert dict(harness.controller.image.configs.get(BROKER, "")) == {"num.io.threads": "16"}
    op = harness.controller.incremental_alter_configs(
        [
            alter(BROKER, "1", ("log.retention.ms", SET, "1000"), ("custom.plugin.key", SET, "x")),
            alter(BROKER, "3000", ("num.io.threads", SET, "4")),  # the controller itself
        ],
        validate_only=False,
    )
    assert [r.error_code for r in op.response] == [ErrorCode.none, ErrorCode.none]


@pytest.mark.parametrize(
    ("resource", "code", "message"),
    [
        (
            alter(TOPIC, "missing", ("retention.ms", SET, "1")),
            ErrorCode.unknown_topic_or_partition,
            "The topic 'missing' does not exist.",
        ),
        (
            alter(TOPIC, "", ("retention.ms", SET, "1")),
            ErrorCode.invalid_request,
            "Default topic resources are not allowed.",
        ),
        (alter(TOPIC, "a b", ("retention.ms", SET, "1")), ErrorCode.invalid_topic_exception, ""),
        (alter(TOPIC, "t", ("retention.ms", SET, "x")), ErrorCode.invalid_config, "retention.ms"),
        (alter(TOPIC, "t", ("no.such", SET, "1")), ErrorCode.invalid_config, "no.such"),
        (
            alter(TOPIC, "t", ("retention.ms", APPEND, "1")),
            ErrorCode.invalid_config,
            "Can't APPEND to key retention.ms because its type is not LIST.",
        ),
        (
            alter(TOPIC, "t", ("retention.ms", SET, "1"), ("retention.ms", DELETE, None)),
            ErrorCode.invalid_request,
            "duplicate config keys",
        ),
        (
            alter(
                TOPIC,
                "t",
                ("min.compaction.lag.ms", SET, "10"),
                ("max.compaction.lag.ms", SET, "5"),
            ),
            ErrorCode.invalid_config,
            "min.compaction.lag.ms",
        ),
        (
            alter(BROKER, "7", ("num.io.threads", SET, "2")),
            ErrorCode.broker_id_not_registered,
            "No node with id 7 found.",
        ),
        (
            alter(BROKER, "x", ("num.io.threads", SET, "2")),
            ErrorCode.invalid_request,
            "Unable to parse broker name as a base 10 number.",
        ),
        (
            alter(BROKER, "-1", ("num.io.threads", SET, "2")),
            ErrorCode.invalid_request,
            "Invalid negative broker ID.",
        ),
        (
            alter(BROKER, "", ("num.io.threads", SET, "0")),
            ErrorCode.invalid_config,
            "num.io.threads",
        ),
        (
            alter(BROKER, "", ("log.retention.ms", SET, "soon")),
            ErrorCode.invalid_config,
            "log.retention.ms",
        ),
        (
            alter(BROKER, "", ("log.dirs", SET, "/tmp/x")),
            ErrorCode.invalid_request,
            "Cannot update these configs dynamically: Set(log.dirs)",
        ),
        (
            alter(BROKER, "", ("listeners", SET, "PLAINTEXT://:1")),
            ErrorCode.invalid_request,
            "broker id must be specified",
        ),
        (alter(8, "x", ("k", SET, "v")), ErrorCode.invalid_request, "Unknown resource type 8"),
    ],
)
def test_incremental_alter_errors(
    harness: Harness, resource: AlterConfigsResource, code: ErrorCode, message: str
) -> None:
    """A failing resource changes nothing and reports Kafka's error."""
    op = harness.controller.incremental_alter_configs([resource], validate_only=False)
    assert op.records == ()
    (result,) = op.response
    assert result.error_code == code
    assert message in (result.error_message or "")


def test_one_failing_resource_does_not_block_another(harness: Harness) -> None:
    op = harness.controller.incremental_alter_configs(
        [
            alter(TOPIC, "missing", ("retention.ms", SET, "1")),
            alter(TOPIC, "t", ("retention.ms", SET, "7")),
        ],
        validate_only=False,
    )
    assert [r.error_code for r in op.response] == [
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.none,
    ]
    assert [r.resource_name for r in op.records] == ["t"]  # type: ignore[union-attr]


def test_validate_only_writes_nothing(harness: Harness) -> None:
    op = harness.controller.incremental_alter_configs(
        [alter(TOPIC, "t", ("retention.ms", SET, "7"))], validate_only=True
    )
    assert op.records == () and op.response[0].error_code == ErrorCode.none
    op = harness.controller.alter_configs(
        [LegacyAlterConfigsResource(TOPIC, "t", {})], validate_only=True
    )
    assert op.records == () and op.response[0].error_code == ErrorCode.none


def test_legacy_alter_configs_replaces_every_override(harness: Harness) -> None:
    """Keys not given are deleted; given keys are set; nulls are refused."""
    op = harness.controller.alter_configs(
        [LegacyAlterConfigsResource(TOPIC, "t", {"segment.ms": "1000", "retention.ms": "100"})],
        validate_only=False,
    )
    assert set(op.records) == {
        ConfigRecord(resource_type=TOPIC, resource_name="t", name="segment.ms", value="1000"),
        ConfigRecord(resource_type=TOPIC, resource_name="t", name="cleanup.policy", value=None),
    }
    harness.run(op)
    assert topic_configs(harness) == {"segment.ms": "1000", "retention.ms": "100"}
    op = harness.controller.alter_configs(
        [LegacyAlterConfigsResource(TOPIC, "t", {"segment.ms": None})], validate_only=False
    )
    assert op.records == ()
    assert op.response[0].error_code == ErrorCode.invalid_config
    assert op.response[0].error_message == "Null value not supported for topic configs: segment.ms"


def test_dynamic_broker_default_shows_in_new_topics(harness: Harness) -> None:
    """A cluster-wide `log.retention.ms` becomes the effective retention.ms of new topics."""
    harness.run(
        harness.controller.incremental_alter_configs(
            [alter(BROKER, "", ("log.retention.ms", SET, "4242"))], validate_only=False
        )
    )
    result = harness.create("fresh", 1, 1)
    (retention,) = [c for c in result.configs if c.name == "retention.ms"]
    assert retention.value == "4242"
