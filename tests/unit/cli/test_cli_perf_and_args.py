"""Perf tool options, statistics and report lines; shared argument helpers."""

from __future__ import annotations

import io
import random
import re
import subprocess
import sys
from datetime import datetime

import pytest

from pykraft.cli.args import (
    CommandError,
    UsageError,
    load_properties,
    parse_bootstrap_servers,
    parse_key_values,
    parse_properties,
)
from pykraft.cli.client_config import client_config, timeout_seconds
from pykraft.cli.main import build_parser
from pykraft.cli.perf import (
    CHUNK_RECORDS_MAX,
    LatencyStats,
    chunk_size,
    consume_options,
    consume_report,
    make_payload,
    percentile,
    produce_options,
)

# -- perf produce --------------------------------------------------------------------------


def produce_argv(*extra: str) -> list[str]:
    return [
        "perf",
        "produce",
        "--bootstrap-server",
        "h:1",
        "--topic",
        "t",
        "--num-records",
        "10",
        "--record-size",
        "100",
        *extra,
    ]


def test_producer_defaults_are_large_batches_and_5ms_linger() -> None:
    options = produce_options(build_parser().parse_args(produce_argv()))
    assert dict(options.properties) == {"batch.size": "1048576", "linger.ms": "5"}
    assert options.throughput == -1


def test_producer_props_override_defaults_and_take_several_values() -> None:
    """--producer-props takes many k=v after one flag, as Kafka's tool does."""
    argv = produce_argv("--producer-props", "linger.ms=0", "acks=1", "--throughput", "500")
    options = produce_options(build_parser().parse_args(argv))
    assert dict(options.properties) == {"batch.size": "1048576", "linger.ms": "0", "acks": "1"}
    assert options.throughput == 500


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--num-records", "0"), "--num-records must be positive"),
        (("--record-size", "-1"), "--record-size must not be negative"),
        (("--throughput", "0"), "--throughput must be positive, or -1"),
        (("--producer-props", "acks"), "--producer-props expects key=value"),
    ],
)
def test_bad_produce_options(extra: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        produce_options(build_parser().parse_args(produce_argv(*extra)))


def test_chunks_shrink_under_a_low_throughput() -> None:
    """Unthrottled: the largest chunk; throttled: about 100 chunks a second, at least 1."""
    assert chunk_size(-1) == CHUNK_RECORDS_MAX
    assert chunk_size(1_000_000) == CHUNK_RECORDS_MAX
    assert chunk_size(1000) == 10
    assert chunk_size(5) == 1


def test_payload_is_random_capital_letters_of_the_record_size() -> None:
    payload = make_payload(1000, random.Random(7))
    assert len(payload) == 1000
    assert set(payload) <= set(range(65, 91))
    assert len(set(payload)) > 20
    assert make_payload(0, random.Random(7)) == b""


def test_percentile_picks_the_sample_at_fraction_times_count() -> None:
    samples = [float(value) for value in range(1, 101)]
    assert percentile(samples, 0.5) == 51
    assert percentile(samples, 0.99) == 100
    assert percentile(samples, 0.999) == 100
    assert percentile([], 0.5) == 0


def stats(out: io.StringIO | None = None, keep_every: int = 1) -> LatencyStats:
    return LatencyStats(
        record_size=1024 * 1024,
        keep_every=keep_every,
        started_at=0.0,
        window_started_at=0.0,
        out=out or io.StringIO(),
    )


def test_sampled_callbacks_feed_totals_and_the_final_line() -> None:
    """Each sample stands for its chunk; the final line has Kafka's shape and numbers."""
    latency = stats()
    for index, latency_ms in enumerate((10.0, 20.0, 30.0, 40.0)):
        latency.window.add(64, latency_ms)
        latency.total.add(64, latency_ms)
        latency.kept.append(latency_ms)
        assert latency.total.samples == index + 1
    line = latency.final_line(records=256, elapsed_s=2.0)
    assert line == (
        "256 records sent, 128.000000 records/sec (128.00 MB/sec), 25.00 ms avg latency, "
        "40.00 ms max latency, 30 ms 50th, 40 ms 95th, 40 ms 99th, 40 ms 99.9th."
    )


def test_delivery_callback_counts_failures_apart_from_latencies() -> None:
    class FakeError:
        def str(self) -> str:
            return "Local: Message timed out"

    latency = stats()
    callback = latency.callback(64, produced_at=0.0)
    callback(FakeError(), None)  # type: ignore[arg-type]
    latency.callback(64, produced_at=1e12)(None, None)  # type: ignore[arg-type]
    assert (latency.failed_samples, latency.failed_records) == (1, 64)
    assert latency.first_failure == "Local: Message timed out"
    assert latency.total.samples == 1 and latency.total.records == 64


def test_only_every_nth_latency_is_kept_for_percentiles() -> None:
    latency = stats(keep_every=3)
    for _ in range(9):
        latency.callback(1, produced_at=0.0)(None, None)  # type: ignore[arg-type]
    assert latency.total.samples == 9
    assert len(latency.kept) == 3


def test_progress_line_every_five_seconds_over_the_window() -> None:
    out = io.StringIO()
    latency = stats(out)
    latency.window.add(500, 2.0)
    latency.window.add(500, 4.0)
    latency.maybe_report(4.0)
    assert out.getvalue() == ""
    latency.maybe_report(5.0)
    assert out.getvalue() == (
        "1000 records sent, 200.0 records/sec (200.00 MB/sec), 3.0 ms avg latency, "
        "4.0 ms max latency.\n"
    )
    assert latency.window.records == 0 and latency.window_started_at == 5.0


def test_perf_produce_against_no_broker_reports_failures_and_exits_1() -> None:
    """All records time out: none counts as sent, the failure is named, exit code 1."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pykraft.cli",
            "perf",
            "produce",
            "--bootstrap-server",
            "127.0.0.1:1",
            "--topic",
            "t",
            "--num-records",
            "300",
            "--record-size",
            "10",
            "--producer-props",
            "message.timeout.ms=200",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout.startswith("0 records sent, ")
    assert "ERROR: about 300 records failed" in result.stderr
    assert "Message timed out" in result.stderr


# -- perf consume --------------------------------------------------------------------------


def test_consume_options_defaults_and_checks() -> None:
    parse = build_parser().parse_args
    base = ["perf", "consume", "--bootstrap-server", "h:1", "--topic", "t", "--messages", "5"]
    options = consume_options(parse(base))
    assert (options.messages, options.timeout_ms, options.group) == (5, 10_000, None)
    assert consume_options(parse([*base, "--timeout", "50"])).timeout_ms == 50
    with pytest.raises(UsageError, match="--timeout-ms must be positive"):
        consume_options(parse([*base, "--timeout-ms", "0"]))
    with pytest.raises(UsageError, match="--messages must be positive"):
        consume_options(parse([*base[:-1], "0"]))


def test_consume_report_columns() -> None:
    """Kafka's CSV: times to the millisecond, MB and records consumed and their rates."""
    start = datetime(2024, 5, 6, 7, 8, 9, 123000).timestamp()
    line = consume_report(
        start, start + 2.0, records=1000, size_bytes=2 * 1024 * 1024, rebalance_s=0.5
    )
    assert line == (
        "2024-05-06 07:08:09:123, 2024-05-06 07:08:11:123, 2.0000, 1.0000, 1000, 500.0000, "
        "500, 1500, 1.3333, 666.6667"
    )


# -- shared helpers ------------------------------------------------------------------------


def test_properties_files_follow_the_java_format(tmp_path: object) -> None:
    text = (
        "# comment\n! also a comment\n\nbootstrap.servers = a:1,b:2\n"
        "sasl.mechanism: PLAIN\nlong.value=one \\\n  two\nempty=\n"
    )
    assert parse_properties(text) == {
        "bootstrap.servers": "a:1,b:2",
        "sasl.mechanism": "PLAIN",
        "long.value": "one two",
        "empty": "",
    }


def test_missing_properties_file_is_a_command_error() -> None:
    with pytest.raises(CommandError, match="cannot read properties file /nope"):
        load_properties("/nope")


def test_key_values_keep_value_whitespace_unless_asked() -> None:
    assert parse_key_values(["key.separator= ", "a=b=c"], "--property") == {
        "key.separator": " ",
        "a": "b=c",
    }
    assert parse_key_values([" a = b "], "--config", strip_values=True) == {"a": "b"}
    with pytest.raises(UsageError, match="--property expects key=value, got '=x'"):
        parse_key_values(["=x"], "--property")


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("localhost:9092", True),
        ("a:1, b:2", True),
        ("[::1]:9092", True),
        ("host", False),
        ("host:0", False),
        ("host:99999", False),
        (":9092", False),
        ("", False),
    ],
)
def test_bootstrap_server_lists(value: str, ok: bool) -> None:
    if ok:
        assert re.fullmatch(r"[^ ]+", parse_bootstrap_servers(value))
    else:
        with pytest.raises(UsageError):
            parse_bootstrap_servers(value)


def test_client_config_translates_java_properties() -> None:
    """Serializers are dropped with a warning, buffer.memory becomes librdkafka's kbytes,
    --bootstrap-server wins over the file's bootstrap.servers."""
    warnings: list[str] = []
    config = client_config(
        "h:1",
        {
            "bootstrap.servers": "other:2",
            "key.serializer": "x",
            "buffer.memory": "33554432",
            "acks": "all",
            "default.api.timeout.ms": "500",
        },
        warn=warnings.append,
    )
    assert config == {
        "bootstrap.servers": "h:1",
        "queue.buffering.max.kbytes": "32768",
        "acks": "all",
    }
    assert warnings == [
        "WARN: ignoring Java client property key.serializer (no librdkafka equivalent)"
    ]
    assert timeout_seconds({"default.api.timeout.ms": "500"}) == 0.5
    with pytest.raises(UsageError, match="--bootstrap-server must be specified"):
        client_config(None, {})
