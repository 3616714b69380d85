"""Readahead: helper processes that read partition directories ahead of a start-up load."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from pykraft.storage import readahead
from pykraft.storage.readahead import Readahead


def _writer_when_opened(fifo: Path, limit_s: float = 20.0) -> int:
    """A descriptor writing to `fifo`, once some process has opened it for reading."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:  # ENXIO: no reader yet
            assert error.errno == errno.ENXIO, error
            assert time.monotonic() < deadline, f"nobody opened {fifo} to read it"
            time.sleep(0.01)


def test_a_helper_reads_the_small_files_of_each_directory_in_order_past_errors(
        tmp_path: Path) -> None:
    """A helper lists each directory it is given, reads partition.metadata and the leader
    epoch checkpoint whole (here FIFOs, so the test sees each open), and goes on past a
    directory that is missing or is a file."""
    first, second = tmp_path / "t-0", tmp_path / "t-1"
    first.mkdir()
    second.mkdir()
    (first / "00000000000000000000.log").write_bytes(b"")
    os.mkfifo(first / "partition.metadata")
    os.mkfifo(second / "leader-epoch-checkpoint")
    (tmp_path / "a-file").write_text("not a directory")
    order = [tmp_path / "missing", tmp_path / "a-file", first, second]
    ahead = Readahead([os.fspath(path) for path in order], processes=1)
    try:
        assert ahead.helpers == 1
        for fifo in (first / "partition.metadata", second / "leader-epoch-checkpoint"):
            descriptor = _writer_when_opened(fifo)
            os.write(descriptor, b"version: 0\n")
            os.close(descriptor)
    finally:
        ahead.close()
    assert ahead.running() == 0


def test_close_ends_helpers_stuck_or_waiting_and_the_feeder(tmp_path: Path) -> None:
    """close() before the load is done ends every helper, one blocked on a file that never
    answers included, and the thread feeding them: nothing of the readahead outlives it."""
    stuck = tmp_path / "t-0"
    stuck.mkdir()
    os.mkfifo(stuck / "partition.metadata")
    many = [os.fspath(stuck)] + [os.fspath(tmp_path / f"gone-{i}") for i in range(5000)]
    ahead = Readahead(many, processes=2)
    assert ahead.helpers == 2 and ahead.running() == 3
    _writer_when_opened(stuck / "partition.metadata")  # the helper now waits for data
    ahead.close()
    assert ahead.running() == 0


def test_the_feeder_stays_a_window_ahead_of_the_loader(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Directories are handed out at most WINDOW chunks ahead of what the loader reported
    opened: a directory further on is read only once the loader gets near it."""
    monkeypatch.setattr(readahead, "CHUNK", 2)
    monkeypatch.setattr(readahead, "WINDOW", 3)
    far = tmp_path / "t-far"
    far.mkdir()
    os.mkfifo(far / "partition.metadata")
    order = [os.fspath(tmp_path / f"gone-{i}") for i in range(10)] + [os.fspath(far)]
    ahead = Readahead(order, processes=1)
    try:
        time.sleep(0.5)  # chunks 0-2 (six directories) handed out; the far one is in chunk 5
        with pytest.raises(OSError) as nobody:
            os.open(far / "partition.metadata", os.O_WRONLY | os.O_NONBLOCK)
        assert nobody.value.errno == errno.ENXIO
        for _ in range(6):  # three chunks opened: chunks 3-5 go out
            ahead.opened()
        os.close(_writer_when_opened(far / "partition.metadata"))
    finally:
        ahead.close()


def test_without_helpers_the_readahead_does_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If no helper process can be started, the readahead is empty and harmless."""
    monkeypatch.setattr(readahead.sys, "executable", os.fspath(tmp_path / "no-python"))
    ahead = Readahead([os.fspath(tmp_path)], processes=2)
    assert ahead.helpers == 0
    ahead.opened()
    ahead.close()
    assert ahead.running() == 0
