"""Metadata at scale: 3 controllers + 3 brokers (separate processes) on loopback.

For each target partition count (`--steps`, cumulative in one cluster): create topics of
`--partitions-per-topic` partitions with replication factor `--rf` through a broker
(CreateTopics forwarded to the active controller, `--topics-per-request` per request) until
the cluster holds that many partitions, then report:

- creation time for the step (until the controller answered, and until every broker
  serves the last topic: it makes new logs in order, on a worker thread) and partitions/s;
- RSS of the active controller and of each broker (from /proc);
- Metadata (v12) response time and size, for one topic and for all topics, from a broker;
- controller failover: `kill -9` of the active controller until a CreateTopics through a
  broker succeeds again (the new controller has the whole image in memory), then the killed
  controller is restarted and the cluster waits until it has caught up; `--failovers` times
  per step (the table gives the median and the range);
- the last broker's lifecycle, watched through the first broker's Metadata (all topics,
  polled back to back, so the resolution is one such response; a wait ends when the
  response that showed the state was received, not once this process had decoded it,
  which takes seconds at 300,000 partitions on a machine whose cores the nodes keep
  busy): SIGTERM until no partition is led by it (controlled shutdown), restart until it
  is listed (unfenced), `kill -9` until every partition has a leader again, restart until
  unfenced again, and until it is back in the ISR of every partition it hosts (polled
  once a second).

RSS per partition (controller) and per replica (broker) is what the node's RSS grew since
the cluster started empty, divided by the partitions it knows (controller) or the replicas
it hosts (broker, the largest of the three).

    .venv/bin/python benchmarks/metadata_scale.py [--steps 100,10000,30000,100000]
        [--partitions-per-topic 100] [--rf 3] [--failovers 1] [--config KEY=VALUE ...]

Each figure is also printed as a `#` line as soon as it is measured, so a step that fails
later does not lose the ones before it.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import platform
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.list_offsets.v9.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pykraft.testing import LocalCluster  # noqa: E402
from pykraft.testing.wire import WireClient  # noqa: E402

METADATA = 3
LIST_OFFSETS = 2
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
    """Create `names`, `per_request` topics per CreateTopics. A retriable error (the
    controller lost its leadership meanwhile: REQUEST_TIMED_OUT, NOT_CONTROLLER) is retried
    as an application would; TOPIC_ALREADY_EXISTS on a retry means the first try made it."""
    for start in range(0, len(names), per_request):
        wanted = names[start : start + per_request]
        for attempt in range(10):
            futures = admin.create_topics(
                [NewTopic(name, num_partitions=partitions, replication_factor=rf)
                 for name in wanted], request_timeout=600, operation_timeout=600)
            failed = []
            for name, future in futures.items():
                try:
                    future.result(600)
                except KafkaException as error:
                    code = error.args[0].code()
                    if attempt > 0 and code == KafkaError.TOPIC_ALREADY_EXISTS:
                        continue
                    if code not in (KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_CONTROLLER):
                        raise SystemExit(f"creating {name} failed: {error}") from error
                    failed.append(name)
            if not failed:
                break
            print(f"# creating {len(failed)} topics: retriable error; the caller retries",
                  flush=True)
            wanted = failed
            time.sleep(1)
        else:
            raise SystemExit(f"creating {wanted} failed 10 times")


def metadata(bootstrap: str, topics: list[str] | None, timeout_s: float = 120) -> Any:
    """One Metadata v12 response (all topics: None) and its size in bytes."""
    request = MetadataRequest(
        topics=None if topics is None else tuple(
            MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=TopicName(name))
            for name in topics),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with WireClient(bootstrap, timeout_s=timeout_s) as client:
        response = client.request(METADATA, 12, request)
        ANSWERED_AT[0] = client.last_response_at
        return response, client.last_response_bytes


# when the last Metadata response was received (time.monotonic()), before it was decoded
ANSWERED_AT = [0.0]


def answered_after(started: float) -> float:
    """Seconds from `started` until the last Metadata response was received."""
    return ANSWERED_AT[0] - started


def metadata_timing(bootstrap: str, topic: str | None, rounds: int = 5) -> tuple[float, int]:
    """Median seconds and the size in bytes of a Metadata response (all topics: None)."""
    times, size = [], 0
    for _ in range(rounds):
        started = time.monotonic()
        response, size = metadata(bootstrap, None if topic is None else [topic])
        times.append(time.monotonic() - started)
        assert topic is None or response.topics[0].error_code == 0, response.topics[0]
    times.sort()
    return times[len(times) // 2], size


def wait_limit_s(partitions: int) -> float:
    """How long a step's waits may take before the run gives up: 600 s, or 2 ms per
    partition where that is longer (a broker making or loading 1,000,000 logs takes
    minutes)."""
    return max(600.0, partitions * 0.002)


def wait_until(what: str, check: Callable[[], bool], limit_s: float = 600,
               interval_s: float = 0.01) -> float:
    """Seconds until `check()` holds (polled back to back by default; each poll is a real
    request)."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > limit_s:
            raise SystemExit(f"{what}: not within {limit_s} s")
        time.sleep(interval_s)
    return time.monotonic() - started


def served_everywhere(cluster: LocalCluster, topic: str) -> bool:
    """Every broker knows `topic` and each leader of its partitions serves ListOffsets for
    them (a broker makes new logs in order, so the last topic's are its last)."""
    for broker in cluster.broker_ids:
        if not cluster.running(broker):
            continue
        response, _ = metadata(cluster.node(broker).bootstrap_servers, [topic])
        if response.topics[0].error_code != 0:
            return False
    led: dict[int, list[int]] = {}
    for partition in response.topics[0].partitions:
        led.setdefault(partition.leader_id, []).append(partition.partition_index)
    for leader, indexes in led.items():
        if leader not in cluster.nodes:
            return False  # no leader yet (-1)
        request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
            ListOffsetsTopic(name=TopicName(topic), partitions=tuple(
                ListOffsetsPartition(partition_index=index, timestamp=-1)
                for index in indexes)),))
        with WireClient(cluster.node(leader).bootstrap_servers, timeout_s=120) as client:
            answer = client.request(LIST_OFFSETS, 9, request)
        if any(p.error_code != 0 for p in answer.topics[0].partitions):
            return False
    return True


def elect_preferred(admin: AdminClient, topics: list[str], partitions: int) -> None:
    """Preferred leader election for every partition (after a broker came back)."""
    wanted = [TopicPartition(topic, index) for topic in topics for index in range(partitions)]
    for start in range(0, len(wanted), 5_000):
        future = admin.elect_leaders(ElectionType.PREFERRED, wanted[start : start + 5_000])
        try:
            future.result(600)  # partitions already led by their preferred replica are fine
        except KafkaException as error:  # librdkafka does not call NOT_CONTROLLER retriable
            if not error.args[0].retriable() and \
                    error.args[0].code() != KafkaError.NOT_CONTROLLER:
                raise
            print(f"# preferred leader election: {error.args[0]}; the caller retries",
                  flush=True)


def lead_preferred(admin: AdminClient, topics: list[str], partitions: int,
                   done: Callable[[], bool], limit_s: float = 600) -> None:
    """Preferred leader election until `done()`: a restarted broker is preferred again only
    once it is back in the ISRs, so an election right after its restart may move nothing."""
    deadline = time.monotonic() + limit_s
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"preferred leaders: not within {limit_s:.0f} s")
        elect_preferred(admin, topics, partitions)
        time.sleep(2)


def led_by(bootstrap: str, broker: int) -> int:
    """Partitions whose leader is `broker` or none (-1), as one broker's Metadata says."""
    response, _ = metadata(bootstrap, None)
    return sum(1 for topic in response.topics for partition in topic.partitions
               if partition.leader_id in (broker, -1))


def outside_isr(bootstrap: str, broker: int) -> int:
    """Partitions with a replica on `broker` whose ISR, as one broker's Metadata says, does
    not hold it."""
    response, _ = metadata(bootstrap, None)
    return sum(1 for topic in response.topics for partition in topic.partitions
               if broker in partition.replica_nodes and broker not in partition.isr_nodes)


def live_brokers(bootstrap: str) -> set[int]:
    response, _ = metadata(bootstrap, [])
    return {broker.node_id for broker in response.brokers}


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
    # the next failover needs all three voters up to date, as the first one had them
    target = -1

    def leader_offset_known() -> bool:
        nonlocal target
        target = image_offset(cluster, cluster.active_controller())
        return target >= 0

    # scraped every 0.2 s: this is not what is measured
    wait_until("the leader's metadata offset", leader_offset_known, interval_s=0.2)
    wait_until("the restarted controller caught up",
               lambda: image_offset(cluster, victim) >= target, interval_s=0.2)
    return took


def image_offset(cluster: LocalCluster, node_id: int) -> int:
    """The offset of a node's metadata image; -1 while it cannot tell (starting, no such
    node)."""
    try:
        return cluster.metadata_image(node_id)[0]
    except (OSError, RuntimeError, KeyError):
        return -1


def broker_lifecycle(cluster: LocalCluster, admin: AdminClient, topics: list[str],
                     partitions: int, limit_s: float) -> tuple[float, float, float, float, float]:
    """(controlled shutdown s, restart to unfenced s, kill -9 until all led s, restart to
    unfenced s, restart until back in every ISR s) for the last broker, watched through the
    first broker's Metadata. Before each stop the broker leads its preferred share again
    (preferred leader election)."""
    victim, watcher = cluster.broker_ids[-1], cluster.broker_ids[0]
    bootstrap = cluster.node(watcher).bootstrap_servers
    total = len(topics) * partitions
    lead_preferred(admin, topics, partitions, lambda: led_by(bootstrap, victim) * 4 > total,
                   limit_s)
    started = time.monotonic()
    cluster.node(victim).process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    wait_until("controlled shutdown", lambda: led_by(bootstrap, victim) == 0, limit_s=limit_s)
    shutdown_s = answered_after(started)
    print(f"# controlled shutdown {shutdown_s:.2f} s (decoded at "
          f"{time.monotonic() - started:.2f} s)", flush=True)
    cluster.node(victim).process.wait(limit_s)  # type: ignore[union-attr]
    # a broker that stopped stays listed until the controller fences it: restart only then,
    # or the restart would be "unfenced" at once
    wait_until("fenced after the stop", lambda: victim not in live_brokers(bootstrap),
               limit_s=limit_s)
    started = time.monotonic()
    cluster.restart_node(victim, wait=False)
    wait_until("unfenced after restart", lambda: victim in live_brokers(bootstrap),
               limit_s=limit_s)
    restart_s = answered_after(started)
    print(f"# restart to unfenced {restart_s:.2f} s", flush=True)
    lead_preferred(admin, topics, partitions, lambda: led_by(bootstrap, victim) * 4 > total,
                   limit_s)
    cluster.kill_node(victim)
    started = time.monotonic()
    wait_until("leaders after kill -9", lambda: led_by(bootstrap, victim) == 0, limit_s=limit_s)
    kill_s = answered_after(started)
    print(f"# kill -9 until all led {kill_s:.2f} s (decoded at "
          f"{time.monotonic() - started:.2f} s)", flush=True)
    wait_until("fenced after kill -9", lambda: victim not in live_brokers(bootstrap),
               limit_s=limit_s)
    started = time.monotonic()
    cluster.restart_node(victim, wait=False)
    wait_until("unfenced after kill -9", lambda: victim in live_brokers(bootstrap),
               limit_s=limit_s)
    unfenced_s = answered_after(started)
    print(f"# restart after kill -9 to unfenced {unfenced_s:.2f} s", flush=True)
    # polled once a second: an all-topics Metadata response every few ms would be a load
    # on the watcher that the real cluster does not carry
    wait_until("back in every ISR after kill -9", lambda: outside_isr(bootstrap, victim) == 0,
               limit_s=3600, interval_s=1)
    isr_s = answered_after(started)
    print(f"# restart after kill -9 until back in every ISR {isr_s:.2f} s", flush=True)
    return shutdown_s, restart_s, kill_s, unfenced_s, isr_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="100,10000,30000,100000")
    parser.add_argument("--partitions-per-topic", type=int, default=100)
    parser.add_argument("--rf", type=int, default=3)
    parser.add_argument("--topics-per-request", type=int, default=10)
    parser.add_argument("--failovers", type=int, default=1,
                        help="controller failovers per step (the table gives the median "
                             "and the range)")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a server config for every node (repeatable)")
    args = parser.parse_args()
    steps = [int(step) for step in args.steps.split(",")]
    configs = dict(CONFIGS)
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--config {item!r}: expected KEY=VALUE")
        configs[key] = value
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    extra = "".join(f", {item}" for item in args.config)
    print(f"# {platform.node()} {platform.machine()}, {now}; 3 controllers + 3 brokers, "
          f"{args.partitions_per_topic} partitions per topic, RF={args.rf}{extra}")
    print("| partitions | create s (step): committed / on all brokers | partitions/s "
          "| controller RSS MiB (per partition) | broker RSS MiB (per replica) "
          "| Metadata 1 topic ms (size) | Metadata all ms (size) | controller failover s "
          "| controlled shutdown s | restart to unfenced s | kill -9 until all led s "
          "| restart to unfenced s | restart to back in every ISR s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with LocalCluster(controllers=3, brokers=3, configs=configs,
                      startup_timeout_s=120, stop_timeout_s=300) as cluster:
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
    empty_rss = {node_id: rss_mib(cluster, node_id) for node_id in cluster.nodes}
    made = 0
    topic_index = 0
    every_topic: list[str] = []
    for target in steps:
        count = max(0, (target - made) // args.partitions_per_topic)
        names = [f"scale-{topic_index + i:06d}" for i in range(count)]
        topic_index += count
        started = time.monotonic()
        create(admin, names, args.partitions_per_topic, args.rf, args.topics_per_request)
        took = time.monotonic() - started
        seen = took + wait_until("topics served by every broker",
                                 functools.partial(served_everywhere, cluster, names[-1]),
                                 limit_s=wait_limit_s(made + count * args.partitions_per_topic))
        every_topic += names
        made += count * args.partitions_per_topic
        active = cluster.active_controller()
        controller_rss = rss_mib(cluster, active)
        broker_rss = max(rss_mib(cluster, b) for b in cluster.broker_ids)
        # what the partitions added to a node since it started empty: a broker hosts
        # rf / brokers of the replicas
        controller_each = (controller_rss - empty_rss[active]) * 1024**2 / made
        hosted = made * args.rf / len(cluster.broker_ids)
        broker_each = max(rss_mib(cluster, b) - empty_rss[b]
                          for b in cluster.broker_ids) * 1024**2 / hosted
        one_s, one_bytes = metadata_timing(first_broker, names[-1] if names else None)
        all_s, all_bytes = metadata_timing(first_broker, None, rounds=3)
        # each figure as soon as it is measured: a later step may fail
        print(f"# {made:,}: created in {took:.1f} s (on all brokers {seen:.1f} s); RSS "
              f"controller {controller_rss:.0f} MiB ({controller_each:,.0f} B per "
              f"partition), broker {broker_rss:.0f} MiB ({broker_each:,.0f} B per replica); "
              f"Metadata "
              f"1 topic {one_s * 1000:.1f} ms ({one_bytes:,} B), all {all_s * 1000:.0f} ms "
              f"({all_bytes / 1e6:.1f} MB)", flush=True)
        failovers = []
        for _ in range(args.failovers):
            failovers.append(failover(cluster, admin, args.rf))
            print(f"# {made:,}: controller failover {failovers[-1]:.2f} s", flush=True)
        fail_s = statistics.median(failovers)
        fail_text = f"{fail_s:.2f}" + (f" ({min(failovers):.2f}-{max(failovers):.2f})"
                                       if len(failovers) > 1 else "")
        shutdown_s, restart_s, kill_s, rejoin_s, isr_s = broker_lifecycle(
            cluster, admin, every_topic, args.partitions_per_topic, wait_limit_s(made))
        rate = count * args.partitions_per_topic / took
        print(f"| {made:,} | {took:.1f} / {seen:.1f} | {rate:,.0f} "
              f"| {controller_rss:.0f} ({controller_each:,.0f} B) "
              f"| {broker_rss:.0f} ({broker_each:,.0f} B) "
              f"| {one_s * 1000:.1f} ({one_bytes:,} B) "
              f"| {all_s * 1000:.0f} ({all_bytes / 1e6:.1f} MB) | {fail_text} "
              f"| {shutdown_s:.2f} | {restart_s:.2f} | {kill_s:.2f} | {rejoin_s:.2f} "
              f"| {isr_s:.2f} |", flush=True)


if __name__ == "__main__":
    main()
