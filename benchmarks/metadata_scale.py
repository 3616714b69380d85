"""Metadata at scale: 3 controllers + 3 brokers (separate processes) on loopback.

For each target partition count (`--steps`, cumulative in one cluster): create topics of
`--partitions-per-topic` partitions with replication factor `--rf` through a broker
(CreateTopics forwarded to the active controller, `--topics-per-request` per request) until
the cluster holds that many partitions, then report:

- creation time for the step and partitions/s;
- RSS of the active controller and of each broker (from /proc);
- Metadata (v12) response time and size, for one topic and for all topics, from a broker;
- controller failover: `kill -9` of the active controller until a CreateTopics through a
  broker succeeds again (the new controller has the whole image in memory), then the killed
  controller is restarted and the cluster waits for it to rejoin before the next step.

    .venv/bin/python benchmarks/metadata_scale.py [--steps 10000,30000,100000]
        [--partitions-per-topic 100] [--rf 3]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pykraft.testing import LocalCluster  # noqa: E402
from pykraft.testing.wire import WireClient  # noqa: E402

METADATA = 3
CONFIGS = {
    # a broker hosts each replica's log: keep the files per partition small
    "log.segment.bytes": "1048576",
    "log.index.size.max.bytes": "4096",
}


def rss_mib(cluster: LocalCluster, node_id: int) -> float:
    process = cluster.node(node_id).process
    if process is None:
        return float("nan")
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def create(admin: AdminClient, names: list[str], partitions: int, rf: int,
           per_request: int) -> None:
    for start in range(0, len(names), per_request):
        chunk = names[start : start + per_request]
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=rf) for name in chunk],
            request_timeout=600, operation_timeout=600)
        for name, future in futures.items():
            try:
                future.result(600)
            except Exception as error:  # noqa: BLE001 - report and stop the benchmark
                raise SystemExit(f"creating {name} failed: {error}") from error


def metadata_timing(bootstrap: str, topic: str | None, rounds: int = 5) -> tuple[float, int]:
    """Median seconds and the size in bytes of a Metadata response (all topics: None)."""
    topics = None if topic is None else (
        MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=TopicName(topic)),)
    request = MetadataRequest(topics=topics, allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
    times, size = [], 0
    with WireClient(bootstrap, timeout_s=120) as client:
        for _ in range(rounds):
            started = time.monotonic()
            response = client.request(METADATA, 12, request)
            times.append(time.monotonic() - started)
            size = client.last_response_bytes
            assert topic is None or response.topics[0].error_code == 0, response.topics[0]
    times.sort()
    return times[len(times) // 2], size


def failover(cluster: LocalCluster, admin: AdminClient, rf: int) -> float:
    """Seconds from kill -9 of the active controller until a CreateTopics succeeds."""
    victim = cluster.active_controller()
    cluster.kill_node(victim)
    started = time.monotonic()
    name = f"failover-{uuid.uuid4().hex[:8]}"
    while True:
        future = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=rf)],
                                     request_timeout=5, operation_timeout=5)[name]
        try:
            future.result(10)
            break
        except Exception as error:  # noqa: BLE001 - retriable until the new leader answers
            if "TOPIC_ALREADY_EXISTS" in str(error):
                break
            if time.monotonic() - started > 120:
                raise SystemExit(f"no controller after 120 s: {error}") from error
            time.sleep(0.02)
    took = time.monotonic() - started
    cluster.restart_node(victim)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="10000,30000,100000")
    parser.add_argument("--partitions-per-topic", type=int, default=100)
    parser.add_argument("--rf", type=int, default=3)
    parser.add_argument("--topics-per-request", type=int, default=10)
    args = parser.parse_args()
    steps = [int(step) for step in args.steps.split(",")]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# {platform.node()} {platform.machine()}, {now}; 3 controllers + 3 brokers, "
          f"{args.partitions_per_topic} partitions per topic, RF={args.rf}")
    print("| partitions | create s (step) | partitions/s | controller RSS MiB | broker RSS MiB "
          "| Metadata 1 topic ms (size) | Metadata all ms (size) | failover s |")
    print("|---|---|---|---|---|---|---|---|")
    with LocalCluster(controllers=3, brokers=3, configs=CONFIGS,
                      startup_timeout_s=120) as cluster:
        bootstrap = cluster.bootstrap_servers
        first_broker = cluster.node(cluster.broker_ids[0]).bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            run_steps(cluster, admin, first_broker, steps, args)
        except BaseException:
            for node_id in cluster.nodes:  # what the nodes said, to see why
                print(f"--- node {node_id}\n{cluster.node(node_id).tail_log(15)}",
                      file=sys.stderr)
            raise


def run_steps(cluster: LocalCluster, admin: AdminClient, first_broker: str, steps: list[int],
              args: argparse.Namespace) -> None:
    made = 0
    topic_index = 0
    for target in steps:
        count = max(0, (target - made) // args.partitions_per_topic)
        names = [f"scale-{topic_index + i:06d}" for i in range(count)]
        topic_index += count
        started = time.monotonic()
        create(admin, names, args.partitions_per_topic, args.rf, args.topics_per_request)
        took = time.monotonic() - started
        made += count * args.partitions_per_topic
        controller_rss = rss_mib(cluster, cluster.active_controller())
        broker_rss = max(rss_mib(cluster, b) for b in cluster.broker_ids)
        one_s, one_bytes = metadata_timing(first_broker, names[-1] if names else None)
        all_s, all_bytes = metadata_timing(first_broker, None, rounds=3)
        fail_s = failover(cluster, admin, args.rf)
        print(f"| {made:,} | {took:.1f} | {count * args.partitions_per_topic / took:,.0f} "
              f"| {controller_rss:.0f} | {broker_rss:.0f} "
              f"| {one_s * 1000:.1f} ({one_bytes:,} B) "
              f"| {all_s * 1000:.0f} ({all_bytes / 1e6:.1f} MB) | {fail_s:.2f} |",
              flush=True)

if __name__ == "__main__":
    main()
