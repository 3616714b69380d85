"""LocalCluster runs a real node in-process (a thread with its own event loop) as well as
as a subprocess; both serve real clients and stop cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykraft.testing import LocalCluster


def _round_trip(bootstrap: str) -> list[bytes]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("local", num_partitions=1,
                                  replication_factor=1)])["local"].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce("local", b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "local",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("local", 0, 0)])
    values: list[bytes] = []
    for _ in range(20):
        values += [m.value() for m in consumer.consume(100, timeout=0.5) if not m.error()]
        if len(values) >= 10:
            break
    consumer.close()
    return values


def test_in_process_node_serves_and_stops_cleanly() -> None:
    with LocalCluster(in_process=True) as cluster:
        assert cluster.process is None
        assert _round_trip(cluster.bootstrap_servers) == [b"%d" % i for i in range(10)]
        log_dir = cluster.log_dir
        cluster.stop()
        assert (log_dir / ".kafka_cleanshutdown").exists()


def test_a_node_that_ignores_sigterm_is_killed_and_the_others_still_stopped() -> None:
    """stop() kills a node still running stop_timeout_s after its SIGTERM, stops the rest
    (the controllers after the brokers), and then says which it killed."""
    cluster = LocalCluster(controllers=1, brokers=1, stop_timeout_s=0.5)
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
               "print('up', flush=True); time.sleep(60)"
    obedient = "import time; print('up', flush=True); time.sleep(60)"
    processes = {}
    try:
        for node_id, code in zip(sorted(cluster.nodes), (obedient, stubborn), strict=True):
            process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
            assert process.stdout is not None and process.stdout.readline() == b"up\n"
            cluster.node(node_id).process = process
            processes[node_id] = process
        with pytest.raises(TimeoutError, match=r"node\(s\) \[2\] did not stop"):
            cluster.stop()
        assert processes[1].poll() == -signal.SIGTERM
        assert processes[2].poll() == -signal.SIGKILL
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
        cluster.close()
