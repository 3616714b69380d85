"""`pykraft log-cleaner --describe`: how dirty each compacted partition is, and when it was
last cleaned, read from a node's Prometheus endpoint (`pykraft.metrics.listener`).

Kafka shows the cleaner's state only as JMX metrics; pykraft's node serves the same facts per
partition at /metrics (server/metrics.py), and this command prints them as a table:

    TOPIC  PARTITION  DIRTY-RATIO  FIRST-DIRTY-OFFSET  CLEANABLE-BYTES  LAST-CLEAN  STATE
"""

from __future__ import annotations

import argparse
import datetime
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

from pykraft.cli.args import ArgumentParser, CommandError, UsageError

__all__ = ["CleanerRow", "add_parser", "cleaner_rows", "format_rows"]

_PREFIX = "pykraft_log_cleaner_"
_RESPONSE_BYTES_MAX = 64 * 1024 * 1024  # a node's /metrics is far smaller
CleanerRow = tuple[str, int, dict[str, float]]


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "log-cleaner", help="show compacted partitions' dirty ratio and last cleaning")
    parser.add_argument("--describe", action="store_true", help="REQUIRED: print the table")
    parser.add_argument("--metrics-url", metavar="URL",
                        help="REQUIRED: the node's metrics endpoint, e.g. "
                             "http://127.0.0.1:9404 (its pykraft.metrics.listener)")
    parser.add_argument("--topic", metavar="TOPIC", help="only this topic")
    parser.add_argument("--timeout-ms", type=int, default=10_000, metavar="MS",
                        help="how long to wait for the metrics endpoint (default 10000)")
    parser.set_defaults(handler=_run_args)


def _run_args(args: argparse.Namespace) -> int:
    if not args.describe:
        raise UsageError("Command must include exactly one action: --describe")
    if not args.metrics_url:
        raise UsageError("Missing required argument \"[metrics-url]\"")
    url = args.metrics_url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    if not url.endswith("/metrics"):
        url += "/metrics"
    try:
        with urllib.request.urlopen(url, timeout=args.timeout_ms / 1000) as response:
            body = response.read(_RESPONSE_BYTES_MAX + 1)  # a bound: any URL can be given
        if len(body) > _RESPONSE_BYTES_MAX:
            raise CommandError(f"{url} answered more than {_RESPONSE_BYTES_MAX} bytes")
        text = body.decode("utf-8")
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, OSError) and reason.strerror:
            reason = reason.strerror  # "Connection refused", not "[Errno 111] ..."
        raise CommandError(f"cannot read metrics from {url}: {reason}") from None
    rows = [row for row in cleaner_rows(text) if args.topic is None or row[0] == args.topic]
    if args.topic is not None and not rows:
        raise CommandError(f"no compacted partition of topic {args.topic!r} on this node")
    print("\n".join(format_rows(rows)))
    return 0


def cleaner_rows(text: str) -> list[CleanerRow]:
    """The cleaner's per-partition values in a /metrics text, sorted by topic, partition."""
    values: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    try:
        for family in text_string_to_metric_families(text):
            if not family.name.startswith(_PREFIX):
                continue
            column = family.name[len(_PREFIX):]
            for sample in family.samples:
                key = (sample.labels["topic"], int(sample.labels["partition"]))
                values[key][column] = sample.value
    except (ValueError, KeyError) as error:
        raise CommandError(f"the metrics endpoint answered something else: {error}") from None
    return [(topic, partition, columns)
            for (topic, partition), columns in sorted(values.items())]


def format_rows(rows: Iterable[CleanerRow]) -> list[str]:
    table = [("TOPIC", "PARTITION", "DIRTY-RATIO", "FIRST-DIRTY-OFFSET", "CLEANABLE-BYTES",
              "LAST-CLEAN", "STATE")]
    for topic, partition, columns in rows:
        last = columns.get("last_clean_timestamp_seconds", -1)
        when = "-" if last < 0 else datetime.datetime.fromtimestamp(
            last, datetime.UTC).isoformat(timespec="seconds")
        table.append((
            topic, str(partition), f"{columns.get('dirty_ratio', 0.0):.3f}",
            str(int(columns.get("first_dirty_offset", -1))),
            str(int(columns.get("cleanable_bytes", 0))), when,
            "uncleanable" if columns.get("uncleanable", 0) else "ok"))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in table]
