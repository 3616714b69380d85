"""AllocateProducerIds (KIP-730), UnregisterBroker (KIP-631) and UpdateFeatures
(KIP-584/778) in the controller core."""

from __future__ import annotations

import pytest

from pykraft.controller.features import (
    FeatureUpdate,
    UpdateFeaturesResult,
    UpgradeType,
    api_versions_features,
    metadata_version_changed,
    metadata_version_level,
    metadata_version_name,
)
from pykraft.controller.producer_ids import PRODUCER_ID_BLOCK_SIZE, ProducerIdsBlock
from pykraft.controller.quorum_controller import QuorumController
from pykraft.controller.requests import BrokerFeatureRange, Listener
from pykraft.controller.state import ControllerState
from pykraft.errors import BrokerIdNotRegistered, ErrorCode, NotController, StaleBrokerEpoch
from pykraft.metadata.records import (
    FeatureLevelRecord,
    MetadataRecord,
    PartitionChangeRecord,
    ProducerIdsRecord,
    UnregisterBrokerRecord,
)
from tests.unit.controller.controller_harness import Harness, incarnation, log_dir

# -- AllocateProducerIds ---------------------------------------------------------------


def test_blocks_are_consecutive_and_disjoint_across_brokers() -> None:
    """Each allocation hands the next 1000 ids, recorded as ProducerIdsRecord."""
    h = Harness()
    h.start_brokers(2)
    blocks = []
    for broker_id in (0, 1, 0):
        op = h.controller.allocate_producer_ids(broker_id, h.epochs[broker_id])
        (record,) = op.records
        assert record == ProducerIdsRecord(broker_id=broker_id, broker_epoch=h.epochs[broker_id],
                                           next_producer_id=op.response.next_block_first_id)
        blocks.append(h.run(op))
    assert blocks == [ProducerIdsBlock(0, 0, PRODUCER_ID_BLOCK_SIZE),
                      ProducerIdsBlock(1, 1000, PRODUCER_ID_BLOCK_SIZE),
                      ProducerIdsBlock(0, 2000, PRODUCER_ID_BLOCK_SIZE)]
    assert h.controller.image.producer_ids.next_producer_id == 3000
    assert h.replayed_image().producer_ids.next_producer_id == 3000


def test_allocation_refuses_unknown_broker_and_stale_epoch() -> None:
    """STALE_BROKER_EPOCH for an unregistered broker and for another epoch, as Kafka's
    checkBrokerEpoch; nothing is written."""
    h = Harness()
    h.start_brokers(1)
    with pytest.raises(StaleBrokerEpoch):
        h.controller.allocate_producer_ids(7, 0)
    with pytest.raises(StaleBrokerEpoch):
        h.controller.allocate_producer_ids(0, h.epochs[0] + 1)
    assert h.controller.image.producer_ids.next_producer_id == -1


def test_allocation_survives_failover_without_reuse() -> None:
    """A new active controller built from the committed log continues after the last
    committed block; a proposed but uncommitted block is dropped and never answered."""
    h = Harness()
    h.start_brokers(1)
    h.run(h.controller.allocate_producer_ids(0, h.epochs[0]))
    pending = h.controller.allocate_producer_ids(0, h.epochs[0])
    h.controller.propose(pending.records)  # appended, never committed
    h.controller.deactivate()
    assert h.controller.image.producer_ids.next_producer_id == 1000
    standby = QuorumController(h.config, h.controller.rng,
                               state=ControllerState.from_image(h.replayed_image()))
    standby.activate(leader_epoch=2, next_write_offset=len(h.log), now_ms=0)
    op = standby.allocate_producer_ids(0, h.epochs[0])
    assert op.response.first_producer_id == 1000


def test_allocation_needs_an_active_controller() -> None:
    h = Harness()
    h.start_brokers(1)
    h.controller.deactivate()
    with pytest.raises(NotController):
        h.controller.allocate_producer_ids(0, h.epochs[0])


# -- UnregisterBroker ------------------------------------------------------------------


def test_unregister_unknown_broker_is_broker_id_not_registered() -> None:
    h = Harness()
    with pytest.raises(BrokerIdNotRegistered):
        h.controller.unregister_broker(4)


def test_unregister_moves_leaderships_then_removes_the_broker() -> None:
    """As Kafka: even a live broker is unregistered; it first leaves every ISR."""
    h = Harness()
    h.start_brokers(3)
    h.create("t", partitions=3, replication_factor=3)
    led = h.controller.state.partitions_led_by(1)
    assert led
    op = h.controller.unregister_broker(1)
    *changes, last = op.records
    assert last == UnregisterBrokerRecord(broker_id=1, broker_epoch=h.epochs[1])
    assert changes and all(isinstance(r, PartitionChangeRecord) for r in changes)
    h.run(op)
    image = h.controller.image
    assert 1 not in image.cluster.brokers
    for partition in image.topics.by_name["t"].partitions.values():
        assert 1 not in partition.isr and partition.leader != 1
    assert set(h.replayed_image().cluster.brokers.keys()) == set(image.cluster.brokers.keys())
    # the unregistered broker's heartbeat is now refused; it may register again
    with pytest.raises(StaleBrokerEpoch):
        h.heartbeat(1, 10)
    with pytest.raises(BrokerIdNotRegistered):
        h.controller.unregister_broker(1)
    h.register(1, generation=1, now_ms=20)
    assert h.controller.image.cluster.brokers[1].fenced


def test_unregister_fenced_broker_without_partitions() -> None:
    h = Harness()
    h.register(5)
    op = h.controller.unregister_broker(5)
    assert op.records == (UnregisterBrokerRecord(broker_id=5, broker_epoch=h.epochs[5]),)
    h.run(op)
    assert 5 not in h.controller.state.registration_offsets


# -- UpdateFeatures ----------------------------------------------------------------------


def _update(h: Harness, level: int, upgrade_type: UpgradeType = UpgradeType.UPGRADE, *,
            feature: str = "metadata.version", validate_only: bool = False
            ) -> tuple[UpdateFeaturesResult, tuple[MetadataRecord, ...]]:
    op = h.controller.update_features([FeatureUpdate(feature, level, upgrade_type)],
                                      validate_only=validate_only)
    return h.run(op), op.records


def test_metadata_version_upgrade_writes_feature_level_record() -> None:
    h = Harness(metadata_version=21)
    h.start_brokers(2)
    result, records = _update(h, 22)
    assert result.error_code == ErrorCode.none
    assert records == (FeatureLevelRecord(name="metadata.version", feature_level=22),)
    assert h.controller.image.features.metadata_version == 22


def test_validate_only_writes_nothing() -> None:
    h = Harness(metadata_version=21)
    result, records = _update(h, 22, validate_only=True)
    assert result.error_code == ErrorCode.none
    assert records == ()
    assert h.controller.image.features.metadata_version == 21


def test_upgrade_refused_when_a_registered_broker_does_not_support_it() -> None:
    """Every registered broker, fenced ones included, must support the new level."""
    h = Harness(metadata_version=21)
    h.run(h.controller.register_broker(
        9, incarnation(9), [Listener("PLAINTEXT", "h", 1, 0)],
        [BrokerFeatureRange("metadata.version", 1, 21)], None, 0, log_dirs=[log_dir(9)]))
    result, records = _update(h, 22)
    assert result.error_code == ErrorCode.invalid_update_version
    assert "Broker 9 only supports versions" in (result.error_message or "")
    assert records == ()
    # once it is unregistered, nothing stands in the way
    h.run(h.controller.unregister_broker(9))
    result, _ = _update(h, 22)
    assert result.error_code == ErrorCode.none


def test_downgrade_needs_a_downgrade_type_and_no_metadata_change() -> None:
    h = Harness(metadata_version=22)
    result, _ = _update(h, 21)
    assert result.error_code == ErrorCode.invalid_update_version
    assert "without setting the upgrade type" in (result.error_message or "")
    result, _ = _update(h, 21, UpgradeType.SAFE_DOWNGRADE)  # 4.0-IV0 changed no metadata
    assert result.error_code == ErrorCode.none
    assert h.controller.image.features.metadata_version == 21
    result, _ = _update(h, 16, UpgradeType.SAFE_DOWNGRADE)  # crosses 3.7-IV2 (JBOD)
    assert "might delete metadata" in (result.error_message or "")
    result, _ = _update(h, 16, UpgradeType.UNSAFE_DOWNGRADE)
    assert "Unsafe metadata downgrade is not supported" in (result.error_message or "")
    result, _ = _update(h, 23, UpgradeType.SAFE_DOWNGRADE)
    assert result.error_code == ErrorCode.invalid_update_version


def test_refusals_of_bad_levels_and_types() -> None:
    h = Harness(metadata_version=21)
    for level, upgrade_type, text in [
        (23, UpgradeType.UPGRADE, "Local controller 3000 only supports versions"),
        (3, UpgradeType.SAFE_DOWNGRADE, "less than 3.3-IV0"),
        (0, UpgradeType.SAFE_DOWNGRADE, "only supports versions"),
        (-1, UpgradeType.SAFE_DOWNGRADE, "cannot be less than 0"),
        (22, UpgradeType.UNKNOWN, "does not support the given upgrade type"),
    ]:
        result, records = _update(h, level, upgrade_type)
        assert result.error_code == ErrorCode.invalid_update_version, level
        assert text in (result.error_message or ""), (level, result)
        assert records == ()
    # a feature this cluster does not know may only be (re)set to 0
    result, _ = _update(h, 1, feature="transaction.version")
    assert "does not support this feature" in (result.error_message or "")
    result, records = _update(h, 0, feature="transaction.version")
    assert result.error_code == ErrorCode.none


def test_one_refused_update_refuses_the_request() -> None:
    h = Harness(metadata_version=21)
    op = h.controller.update_features(
        [FeatureUpdate("metadata.version", 22), FeatureUpdate("group.version", 1)],
        validate_only=False)
    assert op.records == ()
    assert op.response.error_code == ErrorCode.invalid_update_version


def test_metadata_changed_walks_kafkas_table() -> None:
    assert not metadata_version_changed(22, 21)
    assert not metadata_version_changed(21, 17)  # 18..21 changed nothing after 3.7-IV2
    assert metadata_version_changed(17, 16)
    assert metadata_version_changed(21, 16)
    assert not metadata_version_changed(21, 21)


def test_metadata_version_names() -> None:
    assert metadata_version_name(21) == "3.9-IV0" and metadata_version_name(99) == "99"
    assert metadata_version_level("3.9-IV0") == 21 and metadata_version_level("3.9-iv0") == 21
    assert metadata_version_level("3.7") == 19  # a release: its latest level
    assert metadata_version_level("4.1") is None and metadata_version_level("x") is None


def test_api_versions_features_follow_the_image() -> None:
    """Supported: what this node supports; finalized: every finalized level of the image,
    at its offset; nothing finalized before the bootstrap."""
    supported, levels, epoch = api_versions_features(0, {}, 5)
    assert supported == (("metadata.version", 1, 22),) and levels == () and epoch == -1
    _, levels, epoch = api_versions_features(21, {"group.version": 1}, 42)
    assert levels == (("metadata.version", 21), ("group.version", 1)) and epoch == 42
