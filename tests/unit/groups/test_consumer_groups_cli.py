"""`pykraft consumer-groups`: option checks, reset arithmetic and table output."""

from __future__ import annotations

import pytest

from pykraft.cli.args import CommandError, UsageError
from pykraft.cli.consumer_groups import (
    ResetSpec,
    format_table,
    parse_datetime_ms,
    parse_duration_ms,
    parse_reset_plan,
    parse_topic_partitions,
    reset_target,
    run,
)


@pytest.mark.parametrize(("spec", "current", "expected"), [
    (ResetSpec("to-earliest"), 50, 10),
    (ResetSpec("to-latest"), 50, 100),
    (ResetSpec("to-offset", 42), None, 42),
    (ResetSpec("to-offset", 5), None, 10),  # clamped to the log start
    (ResetSpec("to-offset", 500), None, 100),  # and to the log end
    (ResetSpec("shift-by", -20), 50, 30),
    (ResetSpec("shift-by", 80), 50, 100),
    (ResetSpec("to-datetime", 0), None, 77),  # the offset the timestamp lookup found
])
def test_reset_targets_are_clamped_to_the_log(spec: ResetSpec, current: int | None,
                                              expected: int) -> None:
    assert reset_target(spec, current, 10, 100, 77) == expected


def test_a_datetime_after_the_last_record_resets_to_the_end() -> None:
    assert reset_target(ResetSpec("to-datetime", 1), None, 0, 9, -1) == 9


def test_shifting_needs_a_committed_offset() -> None:
    with pytest.raises(CommandError, match="Cannot shift offset for partition t-0 since "
                       "there is no current committed offset"):
        reset_target(ResetSpec("shift-by", 1), None, 0, 9, None, partition="t-0")


def test_topic_partitions_and_datetimes_parse() -> None:
    assert parse_topic_partitions(["a", "b:0,2"]) == {"a": None, "b": [0, 2]}
    with pytest.raises(UsageError):
        parse_topic_partitions(["b:x"])
    assert parse_datetime_ms("1970-01-01T00:00:01.500") == 1500
    assert parse_datetime_ms("1970-01-01T01:00:00+01:00") == 0
    with pytest.raises(UsageError, match="Error parsing timestamp"):
        parse_datetime_ms("yesterday")


@pytest.mark.parametrize(("text", "millis"), [
    ("PT1H", 3_600_000), ("P1DT2M", 86_520_000), ("pt1.5s", 1500), ("-PT10S", -10_000),
    ("PT-1.5S", -1500),
])
def test_durations_parse_as_java_reads_them(text: str, millis: int) -> None:
    assert parse_duration_ms(text) == millis


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "PT1X", "P1DT"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(UsageError, match="Text cannot be parsed to a Duration"):
        parse_duration_ms(text)


def test_reset_plans_read_with_or_without_the_group() -> None:
    assert parse_reset_plan("t,0,5\nt,1,7\n", ["g"]) == {"g": {("t", 0): 5, ("t", 1): 7}}
    assert parse_reset_plan("g,t,0,5\nh,t,0,1\n", ["g"]) == {
        "g": {("t", 0): 5}, "h": {("t", 0): 1}}
    with pytest.raises(CommandError, match="line 2 't,x,1'"):
        parse_reset_plan("t,0,5\nt,x,1\n", ["g"])


def test_tables_align_columns_and_show_missing_values_as_dashes() -> None:
    assert format_table(("GROUP", "LAG"), [("g", None), ("longer-group", 12)]) == [
        "GROUP        LAG", "g            -", "longer-group 12"]


@pytest.mark.parametrize(("argv", "message"), [
    ([], "exactly one action"),
    (["--list", "--delete"], "exactly one action"),
    (["--describe"], "all-groups"),
    (["--delete"], r"Option \[delete\] takes one of these options: \[all-groups\], \[group\]"),
    (["--reset-offsets", "--all-topics", "--to-latest"],
     r"Option \[reset-offsets\] takes one of these options: \[all-groups\], \[group\]"),
    (["--describe", "--group", "g", "--all-groups"],
     "Option \"\\[group\\]\" can't be used with option \"\\[all-groups\\]\""),
    (["--delete-offsets", "--all-groups", "--topic", "t"], "can't be used with option"),
    (["--list", "--group", "g"], "Option \"\\[group\\]\" can't be used with option \"\\[list\\]\""),
    (["--describe", "--group", "g", "--topic", "t"],
     "Option \"\\[topic\\]\" can't be used with option \"\\[describe\\]\""),
    (["--delete", "--group", "g", "--topic", "t"],
     "The consumer does not support topic-specific offset deletion from a consumer group."),
    (["--reset-offsets", "--group", "g", "--topic", "t"], "exactly one of"),
    (["--reset-offsets", "--group", "g", "--to-latest"], "--all-topics, --topic"),
    (["--delete-offsets", "--group", "g"], "delete-offsets"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--to-latest", "--by-duration",
      "PT1H"], "exactly one of"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--by-duration", "1h"],
     "Text cannot be parsed to a Duration"),
    (["--list", "--export"], "export"),
])
def test_bad_option_combinations_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        run(["--bootstrap-server", "127.0.0.1:1", *argv])
