"""What a node is doing, over HTTP in Prometheus' text format, for scrapers and tools.

Kafka publishes its metrics through JMX; pykraft serves them at `/metrics` on the address of
`pykraft.metrics.listener` (host:port; unset, the default, serves nothing). The HTTP server
runs in a thread of its own (prometheus_client's), but the node's state belongs to the event
loop: each scrape asks the loop for a `NodeMetrics` value and turns only that into metric
families, so a scrape never reads a log or the cleaner while the loop changes it.

Families (labels `topic`, `partition` where per partition):
    pykraft_log_start_offset, pykraft_log_end_offset, pykraft_log_high_watermark,
    pykraft_log_size_bytes, pykraft_log_segments
    pykraft_log_cleaner_dirty_ratio, pykraft_log_cleaner_first_dirty_offset,
    pykraft_log_cleaner_cleanable_bytes, pykraft_log_cleaner_last_clean_timestamp_seconds
    (-1 before the first cleaning since start), pykraft_log_cleaner_uncleanable (1 when
    cleaning failed and the partition is skipped until restart)
    pykraft_metadata_high_watermark, pykraft_metadata_leader_id, pykraft_metadata_leader_epoch
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

__all__ = [
    "CleanerMetrics",
    "LogMetrics",
    "MetricsServer",
    "NodeMetrics",
]

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class LogMetrics:
    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    segments: int


@dataclass(frozen=True, slots=True)
class CleanerMetrics:
    topic: str
    partition: int
    dirty_ratio: float
    first_dirty_offset: int
    cleanable_bytes: int
    last_clean_ms: int  # -1: not cleaned since the node started
    uncleanable: bool


@dataclass(frozen=True, slots=True)
class NodeMetrics:
    logs: tuple[LogMetrics, ...] = ()
    cleaner: tuple[CleanerMetrics, ...] = ()
    metadata_high_watermark: int = -1
    metadata_leader_id: int = -1
    metadata_leader_epoch: int = -1
    metadata_image_offset: int = -1  # the last metadata log offset the node's image holds
    # server.image_digest of that image: called where the scrape runs (a metrics server
    # thread), not on the event loop that gathered the rest; "" when unknown
    metadata_image_digest: Callable[[], str] = str


class _NodeCollector(Collector):
    def __init__(self, gather: Callable[[], NodeMetrics]) -> None:
        self._gather = gather

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            snapshot = self._gather()
        except Exception as error:  # a stopping node: serve nothing rather than fail
            log.debug("metrics scrape failed: %s", error)
            return
        yield from _families(snapshot)


def _families(snapshot: NodeMetrics) -> Iterator[GaugeMetricFamily]:
    labels = ["topic", "partition"]

    def per_partition(name: str, doc: str,
                      rows: list[tuple[str, int, float]]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=labels)
        for topic, partition, value in rows:
            family.add_metric([topic, str(partition)], value)
        return family

    logs = snapshot.logs
    yield per_partition("pykraft_log_start_offset", "First offset of the partition's log.",
                        [(x.topic, x.partition, x.log_start_offset) for x in logs])
    yield per_partition("pykraft_log_end_offset", "Offset the next record will get.",
                        [(x.topic, x.partition, x.log_end_offset) for x in logs])
    yield per_partition("pykraft_log_high_watermark", "Offset up to which records are committed.",
                        [(x.topic, x.partition, x.high_watermark) for x in logs])
    yield per_partition("pykraft_log_size_bytes", "Bytes of the partition's segments.",
                        [(x.topic, x.partition, x.size_bytes) for x in logs])
    yield per_partition("pykraft_log_segments", "Segments of the partition's log.",
                        [(x.topic, x.partition, x.segments) for x in logs])
    cleaner = snapshot.cleaner
    yield per_partition("pykraft_log_cleaner_dirty_ratio",
                        "Cleanable bytes over clean plus cleanable bytes (compacted logs).",
                        [(x.topic, x.partition, x.dirty_ratio) for x in cleaner])
    yield per_partition("pykraft_log_cleaner_first_dirty_offset",
                        "Where the next cleaning starts.",
                        [(x.topic, x.partition, x.first_dirty_offset) for x in cleaner])
    yield per_partition("pykraft_log_cleaner_cleanable_bytes",
                        "Bytes of the dirty section the cleaner may rewrite now.",
                        [(x.topic, x.partition, x.cleanable_bytes) for x in cleaner])
    yield per_partition("pykraft_log_cleaner_last_clean_timestamp_seconds",
                        "Wall-clock time of the last cleaning since start; -1 for none.",
                        [(x.topic, x.partition,
                          x.last_clean_ms / 1000 if x.last_clean_ms >= 0 else -1)
                         for x in cleaner])
    yield per_partition("pykraft_log_cleaner_uncleanable",
                        "1 when cleaning failed and the partition is skipped until restart.",
                        [(x.topic, x.partition, int(x.uncleanable)) for x in cleaner])
    for name, doc, value in (
        ("pykraft_metadata_high_watermark", "Committed end of the metadata log.",
         snapshot.metadata_high_watermark),
        ("pykraft_metadata_leader_id", "Node id of the metadata quorum leader; -1 for none.",
         snapshot.metadata_leader_id),
        ("pykraft_metadata_leader_epoch", "Epoch of the metadata quorum leader.",
         snapshot.metadata_leader_epoch),
    ):
        family = GaugeMetricFamily(name, doc)
        family.add_metric([], value)
        yield family
    info = GaugeMetricFamily(
        "pykraft_metadata_image_info",
        "The node's metadata image: the log offset it holds and its digest (1 when known); "
        "nodes at the same offset must show the same digest.", labels=["offset", "digest"])
    digest = snapshot.metadata_image_digest()
    if digest:
        info.add_metric([str(snapshot.metadata_image_offset), digest], 1)
    yield info


class MetricsServer:
    """Serves `/metrics` from a thread; `gather` runs on `loop`, one call per scrape."""

    def __init__(self, host: str, port: int, loop: asyncio.AbstractEventLoop,
                 gather: Callable[[], NodeMetrics]) -> None:
        self.host = host
        self.requested_port = port
        self._loop = loop
        self._gather = gather
        self._server: WSGIServer | None = None
        self.port = -1

    def _gather_on_loop(self) -> NodeMetrics:
        async def gather() -> NodeMetrics:
            return self._gather()

        return asyncio.run_coroutine_threadsafe(gather(), self._loop).result(SCRAPE_TIMEOUT_S)

    def start(self) -> None:
        from prometheus_client import start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_NodeCollector(self._gather_on_loop))
        server, _thread = start_http_server(self.requested_port, self.host, registry)
        self._server = server
        self.port = server.server_address[1]
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
