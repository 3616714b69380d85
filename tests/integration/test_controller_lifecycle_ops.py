"""AllocateProducerIds, UnregisterBroker and UpdateFeatures on real multi-node clusters
(every node its own process, real sockets).

- Producer ids: two brokers hand out producer ids from disjoint controller blocks to
  confluent-kafka idempotent and transactional producers and to raw InitProducerId
  requests; after a SIGKILL of the active controller, the brokers get further blocks from
  the new one and no id is ever handed out twice.
- Features: ApiVersions shows the finalized metadata.version and its epoch; `pykraft
  features` upgrades (dry run first) and downgrades it through a forwarding broker, and
  every broker's ApiVersions follows; refused levels get INVALID_UPDATE_VERSION.
- Unregistration: an unknown id is BROKER_ID_NOT_REGISTERED; `pykraft cluster unregister`
  removes a dead broker (a second time it is unknown), which can come back by starting.
"""

from __future__ import annotations

import collections
import datetime
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.unregister_broker.v0.request import UnregisterBrokerRequest
from kio.schema.update_features.v1.request import FeatureUpdateKey, UpdateFeaturesRequest
from kio.static.primitive import i8, i16, i64

from pykraft.cli.main import main as pykraft_main
from pykraft.records.batch import iter_headers
from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient
from tests.integration import waits

T = TypeVar("T")
WAIT_S = 30.0
INIT_PRODUCER_ID, API_VERSIONS, METADATA = 22, 18, 3
UPDATE_FEATURES, UNREGISTER_BROKER = 57, 64


def wait_for(predicate: Callable[[], T | None], what: str, timeout_s: float = WAIT_S) -> T:
    return waits.wait_for(predicate, what, timeout_s, retry_on=(OSError,))


def live_brokers(bootstrap: str) -> list[int]:
    request = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
    with WireClient(bootstrap, timeout_s=5) as client:
        return sorted(b.node_id for b in client.request(METADATA, 12, request).brokers)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = pykraft_main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- producer ids ------------------------------------------------------------------------


def init_producer_ids(bootstrap: str, count: int) -> list[int]:
    """`count` producer ids from one broker (InitProducerId without a transactional id),
    retrying COORDINATOR_LOAD_IN_PROGRESS while the broker waits for a block."""
    request = InitProducerIdRequest(transactional_id=None,
                                    transaction_timeout=datetime.timedelta(seconds=60),
                                    producer_id=i64(-1), producer_epoch=i16(-1))
    ids: list[int] = []
    deadline = time.monotonic() + WAIT_S
    with WireClient(bootstrap, timeout_s=10) as client:
        while len(ids) < count:
            response = client.request(INIT_PRODUCER_ID, 4, request)
            if response.error_code == ErrorCode.coordinator_load_in_progress:
                assert time.monotonic() < deadline, "no producer id block came"
                time.sleep(0.02)
                continue
            assert response.error_code == ErrorCode.none, response
            assert response.producer_epoch == 0
            ids.append(int(response.producer_id))
    return ids


def logged_producer_ids(cluster: LocalCluster, topic: str) -> set[int]:
    """The producer ids in the batch headers of every replica of `topic` on disk."""
    found = set()
    for node_id in cluster.broker_ids:
        for path in Path(cluster.node(node_id).log_dir).glob(f"{topic}-*/*.log"):
            for _, header in iter_headers(path.read_bytes()):
                if header.producer_id >= 0:
                    found.add(header.producer_id)
    return found


def produce_with_clients(cluster: LocalCluster, node_id: int, topic: str, tag: str) -> None:
    """An idempotent producer and a transactional one (commit), on one broker each. On a
    failure the clients' debug log and the brokers' logs are attached: a flush once timed
    out in a full CI run with one partition's five records unacknowledged."""
    bootstrap = cluster.node(node_id).bootstrap_servers
    client_log = ClientLog()
    traced = {"bootstrap.servers": bootstrap, "logger": client_log.logger,
              "debug": "msg,eos,topic,broker"}
    try:
        idempotent = Producer({**traced, "enable.idempotence": True})
        for index in range(10):
            idempotent.produce(topic, f"{tag}-idempotent-{index}".encode(),
                               partition=index % 2)
        assert idempotent.flush(30) == 0
        transactional = Producer({**traced, "transactional.id": f"{tag}-{uuid.uuid4().hex[:6]}"})
        transactional.init_transactions(30)
        transactional.begin_transaction()
        for index in range(10):
            transactional.produce(topic, f"{tag}-txn-{index}".encode(), partition=index % 2)
        transactional.commit_transaction(30)
    except (AssertionError, KafkaException) as failure:
        failure.add_note("-- the clients:\n" + client_log.tail(300))
        for broker in cluster.broker_ids:
            failure.add_note(f"-- broker {broker}:\n{cluster.node(broker).tail_log(80)}")
        raise


class ClientLog(logging.Handler):
    """The last lines a client logged (librdkafka's debug contexts through `logger`)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: collections.deque[str] = collections.deque(maxlen=2000)
        self.logger = logging.getLogger(f"client-log-{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.created:.3f} {record.getMessage()}")

    def tail(self, count: int) -> str:
        return "\n".join(list(self.lines)[-count:])


@pytest.fixture
def dedicated() -> Iterator[LocalCluster]:
    with LocalCluster(controllers=3, brokers=2, startup_timeout_s=60) as cluster:
        yield cluster


def test_brokers_hand_out_disjoint_producer_ids_across_a_controller_failover(
    dedicated: LocalCluster,
) -> None:
    cluster = dedicated
    four, five = (cluster.node(i).bootstrap_servers for i in (4, 5))
    admin = AdminClient({"bootstrap.servers": four})
    admin.create_topics([NewTopic("pids", 2, 2)])["pids"].result(30)
    wait_for(lambda: live_brokers(five) == [4, 5], "both brokers")
    by_broker = {4: init_producer_ids(four, 20), 5: init_producer_ids(five, 20)}
    produce_with_clients(cluster, 4, "pids", "before-4")
    produce_with_clients(cluster, 5, "pids", "before-5")
    clients_before = wait_for(lambda: (ids := logged_producer_ids(cluster, "pids"))
                              and len(ids) >= 4 and ids, "the clients' batches on disk")

    old = cluster.active_controller()
    cluster.kill_node(old)
    try:
        wait_for(lambda: cluster.active_controller() not in (-1, old),
                 "a new active controller", timeout_s=60)
    except AssertionError as failure:  # once seen in a full run, not reproduced: keep clues
        for node in cluster.controller_ids:
            failure.add_note(f"-- controller {node}:\n{cluster.node(node).tail_log(60)}")
        raise
    # enough ids that each broker uses up the blocks it held and asks the new controller
    by_broker[4] += init_producer_ids(four, 2100)
    by_broker[5] += init_producer_ids(five, 2100)
    produce_with_clients(cluster, 4, "pids", "after-4")
    produce_with_clients(cluster, 5, "pids", "after-5")
    clients_after = wait_for(lambda: (ids := logged_producer_ids(cluster, "pids"))
                             and len(ids) >= len(clients_before) + 4 and ids,
                             "the later clients' batches on disk")

    handed = by_broker[4] + by_broker[5]
    assert len(set(handed)) == len(handed), "an id was handed out twice"
    blocks = {broker: {pid // 1000 for pid in ids} for broker, ids in by_broker.items()}
    assert not blocks[4] & blocks[5], "two brokers used the same block"
    assert len(blocks[4]) >= 3 and len(blocks[5]) >= 3  # blocks from the new controller too
    # four producers before the failover and four after, each with an id of its own
    assert len(clients_before) == 4 and len(clients_after) == 8
    assert not set(handed) & clients_after


# -- features and unregistration -----------------------------------------------------------


@pytest.fixture(scope="module")
def small() -> Iterator[LocalCluster]:
    """One controller (node 1) and two brokers (2, 3); shared, features first."""
    with LocalCluster(controllers=1, brokers=2, startup_timeout_s=60) as cluster:
        yield cluster


def finalized(bootstrap: str) -> tuple[dict[str, int], dict[str, tuple[int, int]], int]:
    with WireClient(bootstrap, timeout_s=5) as client:
        response = client.request(API_VERSIONS, 3, ApiVersionsRequest(
            client_software_name="test", client_software_version="1"))
    return ({f.name: int(f.max_version_level) for f in response.finalized_features},
            {f.name: (int(f.min_version), int(f.max_version))
             for f in response.supported_features},
            int(response.finalized_features_epoch))


def test_metadata_version_upgrade_and_downgrade(small: LocalCluster,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    cluster = small
    two, three = (cluster.node(i).bootstrap_servers for i in (2, 3))
    wait_for(lambda: live_brokers(two) == [2, 3], "both brokers")
    levels, supported, epoch = finalized(two)
    assert levels == {"metadata.version": 21} and supported == {"metadata.version": (1, 22)}
    assert epoch >= 0
    code, out, _ = run_cli(capsys, "features", "--bootstrap-server", two, "describe")
    assert code == 0
    assert out.startswith("Feature: metadata.version\tSupportedMinVersion: 3.0-IV1\t"
                          "SupportedMaxVersion: 4.0-IV0\tFinalizedVersionLevel: 3.9-IV0\tEpoch: ")

    code, out, _ = run_cli(capsys, "features", "--bootstrap-server", three, "upgrade",
                           "--metadata", "4.0", "--dry-run")
    assert (code, out) == (0, "metadata.version can be upgraded to 22.\n")
    assert finalized(two)[0] == {"metadata.version": 21}
    code, out, _ = run_cli(capsys, "features", "--bootstrap-server", three, "upgrade",
                           "--metadata", "4.0")  # broker 3 forwards it to the controller
    assert (code, out) == (0, "metadata.version was upgraded to 22.\n")
    for bootstrap in (two, three):
        wait_for(lambda b=bootstrap: finalized(b)[0] == {"metadata.version": 22},  # type: ignore[misc]
                 "metadata.version 22 on every broker")
    assert finalized(two)[2] > epoch
    # the controller still decides at the new level
    admin = AdminClient({"bootstrap.servers": two})
    admin.create_topics([NewTopic("after-upgrade", 2, 2)])["after-upgrade"].result(30)

    code, out, err = run_cli(capsys, "features", "--bootstrap-server", two, "upgrade",
                             "--feature", "metadata.version=23")
    assert code == 1 and "Could not upgrade metadata.version to 23. INVALID_UPDATE_VERSION" in out
    assert "Local controller 1 only supports versions" in out and "1 out of 1" in err
    code, out, _ = run_cli(capsys, "features", "--bootstrap-server", two, "downgrade",
                           "--metadata", "3.6")
    assert code == 1 and "might delete metadata information" in out
    code, out, _ = run_cli(capsys, "features", "--bootstrap-server", two, "downgrade",
                           "--metadata", "3.9-IV0")
    assert (code, out) == (0, "metadata.version was downgraded to 21.\n")
    wait_for(lambda: finalized(three)[0] == {"metadata.version": 21}, "the downgrade")

    # UpdateFeatures v1 on the wire: per-feature results on success; a downgrade without
    # a downgrade type is refused as a whole
    request = UpdateFeaturesRequest(validate_only=True, feature_updates=(
        FeatureUpdateKey(feature="metadata.version", max_version_level=i16(22),
                         upgrade_type=i8(1)),))
    with WireClient(two, timeout_s=10) as client:
        response = client.request(UPDATE_FEATURES, 1, request)
        assert response.error_code == ErrorCode.none
        assert [(r.feature, r.error_code) for r in response.results] == [
            ("metadata.version", ErrorCode.none)]
        response = client.request(UPDATE_FEATURES, 1, UpdateFeaturesRequest(feature_updates=(
            FeatureUpdateKey(feature="metadata.version", max_version_level=i16(20),
                             upgrade_type=i8(1)),)))
        assert response.error_code == ErrorCode.invalid_update_version
        assert response.results == ()


def test_unregister_broker(small: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = small
    two = cluster.node(2).bootstrap_servers
    controller = f"127.0.0.1:{cluster.node(1).controller_port}"
    with WireClient(two, timeout_s=10) as client:  # forwarded to the controller
        response = client.request(UNREGISTER_BROKER, 0, UnregisterBrokerRequest(broker_id=99))
    assert response.error_code == ErrorCode.broker_id_not_registered
    assert response.error_message == "Broker ID 99 is not currently registered"

    cluster.kill_node(3)
    wait_for(lambda: live_brokers(two) == [2], "broker 3 fenced")
    code, out, _ = run_cli(capsys, "cluster", "unregister", "--bootstrap-server", two,
                           "--id", "3")
    assert (code, out) == (0, "Broker 3 is no longer registered.\n")
    code, _, err = run_cli(capsys, "cluster", "unregister", "--bootstrap-controller",
                           controller, "--id", "3")
    assert code == 1 and "BROKER_ID_NOT_REGISTERED" in err
    code, out, _ = run_cli(capsys, "cluster", "cluster-id", "--bootstrap-server", two)
    assert (code, out) == (0, f"Cluster ID: {cluster.cluster_id}\n")

    cluster.restart_node(3)  # a new incarnation registers as usual
    wait_for(lambda: live_brokers(two) == [2, 3], "broker 3 back")
    # a live broker is unregistered too, as in Kafka; it registers again at once
    code, out, _ = run_cli(capsys, "cluster", "unregister", "--bootstrap-server", two,
                           "--id", "3")
    assert code == 0
    wait_for(lambda: live_brokers(two) == [2, 3], "broker 3 registered again")
    assert finalized(two)[0] == {"metadata.version": 21}  # unaffected
