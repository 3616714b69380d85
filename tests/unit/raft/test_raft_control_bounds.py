"""A control record read from the metadata log or a peer cannot make kio reserve what its
counts claim: a LeaderChangeMessage of a few bytes claiming 2^32-2 voters is corruption, not
a 32 GiB allocation that aborts the process (the hole tests/fuzz found in requests)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pykraft.errors import CorruptRecord
from pykraft.raft.control import decode_leader_change, leader_change_record

# version 0 | leader id 1 | voters: a compact array claiming 2^32-2 entries | no tags
HOSTILE = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\xff\xff\xff\xff\x0f" + b"\x00"


def test_a_huge_voter_count_is_corruption_in_a_separate_process() -> None:
    # in a child: should the check go, kio's failed reservation aborts the process it is in
    code = ("from pykraft.raft.control import decode_leader_change\n"
            "from pykraft.errors import CorruptRecord\n"
            f"try:\n    decode_leader_change({HOSTILE!r})\n"
            "except CorruptRecord as error:\n    print('refused:', error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("refused:")


def test_the_hostile_record_is_refused_and_a_real_one_decodes() -> None:
    with pytest.raises(CorruptRecord):
        decode_leader_change(HOSTILE)
    _, value = leader_change_record(leader_id=2, voters=frozenset({1, 2, 3}),
                                    granting_voters=frozenset({2, 3}))
    assert decode_leader_change(value).leader_id == 2
