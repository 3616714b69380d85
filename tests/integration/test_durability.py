"""Restarts: a clean restart keeps topics, configs and data; a kill -9 during a produce
stream loses no acknowledged record, serves nothing corrupt, and producing resumes at the
right offsets."""

from __future__ import annotations

import signal
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from pykraft.testing import LocalCluster


def _consume_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) per partition, from 0 to the current end, with CRC checks on."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "durability",
                         "enable.auto.commit": False, "check.crcs": True,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + 120
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=1):
                error = message.error()
                if error is not None:
                    assert error.code() == -191, error  # _PARTITION_EOF
                    at_end.add(message.partition())
                    continue
                found[message.partition()].append((message.offset(), message.value()))
    finally:
        consumer.close()
    assert len(at_end) == partitions, "did not reach the end of every partition"
    return found


def test_clean_restart_keeps_topics_configs_and_data() -> None:
    with LocalCluster() as cluster:
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("kept", num_partitions=2, replication_factor=1,
                                      config={"retention.ms": "7200000"})])["kept"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i in range(5000):
            producer.produce("kept", f"value-{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0

        cluster.stop()
        cluster.start()

        admin = AdminClient({"bootstrap.servers": bootstrap})
        metadata = admin.list_topics(timeout=10)
        assert len(metadata.topics["kept"].partitions) == 2
        resource = ConfigResource(ConfigResource.Type.TOPIC, "kept")
        configs = admin.describe_configs([resource])[resource].result(30)
        assert configs["retention.ms"].value == "7200000"
        found = _consume_all(bootstrap, "kept", 2)
        for partition in (0, 1):
            expected = [f"value-{i}".encode() for i in range(partition, 5000, 2)]
            assert [v for _, v in found[partition]] == expected
        producer = Producer({"bootstrap.servers": bootstrap})
        offsets: list[int] = []
        producer.produce("kept", b"after-restart", partition=0,
                         on_delivery=lambda err, msg: offsets.append(msg.offset()))
        assert producer.flush(30) == 0
        assert offsets == [2500]


def test_kill_9_during_produce_loses_no_acknowledged_record() -> None:
    with LocalCluster() as cluster:
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("crash", num_partitions=3,
                                      replication_factor=1)])["crash"].result(30)
        acknowledged: dict[int, dict[int, bytes]] = {0: {}, 1: {}, 2: {}}
        stop = threading.Event()

        def delivered(error: object, message: object) -> None:
            if error is None:
                acknowledged[message.partition()][message.offset()] = message.value()  # type: ignore[attr-defined]

        def produce() -> None:
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": "1",
                                 "message.timeout.ms": 5000, "retries": 0})
            i = 0
            while not stop.is_set():
                try:
                    producer.produce("crash", f"record-{i}".encode() * 4, partition=i % 3,
                                     on_delivery=delivered)
                    i += 1
                except BufferError:
                    pass
                producer.poll(0 if i % 100 else 0.001)
            producer.flush(10)

        thread = threading.Thread(target=produce)
        thread.start()
        time.sleep(3)
        cluster.kill(signal.SIGKILL)
        stop.set()
        thread.join(30)
        total = sum(len(v) for v in acknowledged.values())
        assert total > 1000, f"only {total} records were acknowledged before the kill"

        cluster.start()
        found = _consume_all(bootstrap, "crash", 3)
        for partition in range(3):
            offsets = [offset for offset, _ in found[partition]]
            assert offsets == list(range(len(offsets))), f"partition {partition}: offset gap"
            log = dict(found[partition])
            for offset, value in acknowledged[partition].items():
                assert log.get(offset) == value, f"acknowledged {partition}@{offset} lost"

        producer = Producer({"bootstrap.servers": bootstrap})
        new_offsets: dict[int, int] = {}
        for partition in range(3):
            producer.produce("crash", b"after-crash", partition=partition,
                             on_delivery=lambda e, m: new_offsets.__setitem__(m.partition(),
                                                                              m.offset()))
        assert producer.flush(30) == 0
        for partition in range(3):
            assert new_offsets[partition] == len(found[partition])


def test_restart_with_more_partitions_than_are_made_on_the_event_loop() -> None:
    """A restart replays every partition in one delta; more than NEW_LOGS_ON_LOOP (64) of
    them take the worker-thread path for new logs, which must adopt the logs already on
    disk (it stopped on an invariant: nothing was served after such a restart)."""
    partitions = 150
    with LocalCluster() as cluster:
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("many", num_partitions=partitions,
                                      replication_factor=1)])["many"].result(60)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for index in range(partitions):
            producer.produce("many", b"before-%d" % index, partition=index)
        assert producer.flush(60) == 0
        for stop in (cluster.stop, lambda: cluster.kill(signal.SIGKILL)):
            stop()
            cluster.start()
            found = _consume_all(bootstrap, "many", partitions)
            assert all(found[index][0] == (0, b"before-%d" % index)
                       for index in range(partitions))
        offsets: list[int] = []
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for index in range(partitions):
            producer.produce("many", b"after", partition=index,
                             on_delivery=lambda err, msg: offsets.append(msg.offset()))
        assert producer.flush(60) == 0
        assert offsets == [1] * partitions
