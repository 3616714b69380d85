"""In-process fuzz of the produce path's record check and the log behind it: valid batches
of every codec, the same mutated, and garbage records under a valid CRC, each appended with
Log.append_as_leader to a real log in a temporary directory.

Property: a batch is either refused with a Kafka error, the log unchanged, or appended, and
then every record of what was stored decodes (nothing a consumer cannot read is ever kept);
a valid batch on a delete-policy topic is never refused; and the log re-opens, recovery
scanning every batch, to the same end offset with every batch still readable.
"""

from __future__ import annotations

import collections
import dataclasses
import tempfile
import time
from pathlib import Path

import pytest

from pykraft.errors import KafkaError
from pykraft.records.record import iter_batch_records
from pykraft.storage.log import Log
from pykraft.storage.log_config import LogConfig
from pykraft.testing.fuzz import batch_case, case_rng
from tests.fuzz.runs import Rate, Run, rss_kib, run_for

NOW_MS = 1_700_000_000_000
CASE_SECONDS_MAX = 5.0  # a batch of a few hundred bytes appends in well under a millisecond
CASES_PER_LOG = 2_000  # then the log is checked whole, re-opened, and a new one begun
RSS_GROWTH_MAX_KIB = 64 << 10


def _config(compact: bool) -> LogConfig:
    return dataclasses.replace(LogConfig(), segment_bytes=256 * 1024, index_interval_bytes=512,
                               cleanup_policy=("compact",) if compact else ("delete",))


def _open(directory: Path, config: LogConfig) -> Log:
    # recovery from offset 0, as after a crash: every batch on disk is read and checked
    return Log.open(directory, config, recovery_point=0, log_start_offset=None, now_ms=NOW_MS)


def _check_stored(log: Log, first: int, last: int) -> int:
    """Every record from `first` to `last` decodes; returns how many records there are."""
    offset, count = first, 0
    while offset <= last:
        info = log.read(offset, 1 << 20)
        assert info.records, f"nothing to read at {offset} of {log.dir.name}"
        for header, records in iter_batch_records(info.records):
            assert len(records) == header.records_count
            count += len(records)
        offset = info.next_offset
    return count


def _check_whole(log: Log) -> list[tuple[int, int]]:
    batches = []
    for header, data in log.iter_batches():
        for decoded, records in iter_batch_records(data):
            assert len(records) == decoded.records_count
        batches.append((header.base_offset, header.last_offset))
    return batches


def _fuzz(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    rate = Rate(run, capsys)
    outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
    rss_half: int | None = None
    done = 0
    with tempfile.TemporaryDirectory(prefix="pykraft-fuzz-") as root:
        log: Log | None = None
        compact = False
        for index in run.indexes:
            if log is None or done % CASES_PER_LOG == 0:
                if log is not None:
                    _reopen_and_drop(log, compact)
                compact = (done // CASES_PER_LOG) % 2 == 1
                log = _open(Path(root) / f"fuzz-{done // CASES_PER_LOG}", _config(compact))
            rng = case_rng(run.seed, run.layer, index)
            kind, codec, batch = batch_case(rng, NOW_MS)
            end_before, size_before = log.log_end_offset, log.size_bytes
            began = time.perf_counter()
            try:
                try:
                    info = log.append_as_leader(bytearray(batch), leader_epoch=0,
                                                now_ms=NOW_MS)
                except KafkaError as refused:
                    assert not (kind == "valid" and not compact), f"valid batch refused: {refused}"
                    assert (log.log_end_offset, log.size_bytes) == (end_before, size_before)
                    outcomes[(kind, type(refused).__name__)] += 1
                else:
                    _check_stored(log, info.first_offset, info.last_offset)
                    outcomes[(kind, "appended")] += 1
                elapsed = time.perf_counter() - began
                assert elapsed < CASE_SECONDS_MAX, f"case took {elapsed:.1f} s"
            except BaseException as failure:
                failure.add_note(f"case {index}: {kind} batch, codec {codec}, "
                                 f"{'compact' if compact else 'delete'} policy: {batch.hex()}")
                failure.add_note(run.replay(index))
                raise
            done += 1
            if done == run.count // 2:
                rss_half = rss_kib()
        if log is not None:
            _reopen_and_drop(log, compact)
    rss_end = rss_kib()
    rate.report(done, f", RSS {rss_half} -> {rss_end} KiB",
                ", ".join(f"{kind} {outcome}: {n}" for (kind, outcome), n
                          in sorted(outcomes.items())))
    if run.count >= 1000:  # the generator still reaches both outcomes
        assert outcomes[("valid", "appended")] > 0
        assert sum(n for (_, outcome), n in outcomes.items() if outcome != "appended") > 0
    if rss_half is not None:
        assert rss_end - rss_half < RSS_GROWTH_MAX_KIB


def _reopen_and_drop(log: Log, compact: bool) -> None:
    """The log whole: every batch decodes, and it re-opens (recovery) the same."""
    batches = _check_whole(log)
    end = log.log_end_offset
    log.close()
    reopened = _open(log.dir, _config(compact))
    try:
        assert reopened.log_end_offset == end
        assert _check_whole(reopened) == batches
    finally:
        reopened.close()
    reopened.delete()


def test_batch_fuzz(capsys: pytest.CaptureFixture[str]) -> None:
    _fuzz(run_for("batches", "tests/fuzz/test_batches.py::test_batch_fuzz",
                  ci_cases=3_000, slow=False), capsys)


@pytest.mark.slow
@pytest.mark.timeout(3 * 3600)
def test_batch_fuzz_long(capsys: pytest.CaptureFixture[str]) -> None:
    _fuzz(run_for("batches", "tests/fuzz/test_batches.py::test_batch_fuzz_long",
                  ci_cases=0, slow=True), capsys)
