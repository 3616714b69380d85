"""Console producer line parsing and console consumer formatting and options."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
)

from pykraft.cli.args import CommandError, UsageError
from pykraft.cli.console_consumer import (
    MessageFormatter,
    consumer_options,
    message_formatter,
    parse_offset,
)
from pykraft.cli.console_producer import LineReader, ProducerRecord, line_reader
from pykraft.cli.main import build_parser

# -- producer: LineReader ------------------------------------------------------------------


def test_plain_lines_are_values_with_no_key() -> None:
    """Without parse.key the whole line, tabs included, is the value."""
    assert LineReader().read(b"a\tb", 1) == ProducerRecord(None, b"a\tb", ())


def test_parse_key_splits_at_the_first_separator() -> None:
    reader = line_reader({"parse.key": "true", "key.separator": "::"})
    assert reader.read(b"k::v::w", 1) == ProducerRecord(b"k", b"v::w", ())
    assert reader.read(b"::v", 2) == ProducerRecord(b"", b"v", ())


def test_default_key_separator_is_a_tab() -> None:
    assert line_reader({"parse.key": "true"}).read(b"k\tv", 1).key == b"k"


def test_a_line_without_key_separator_is_an_error_naming_the_line() -> None:
    reader = line_reader({"parse.key": "true", "key.separator": ","})
    with pytest.raises(CommandError, match="No key separator found on line number 7: 'abc'"):
        reader.read(b"abc", 7)


def test_ignore_error_sends_the_whole_line_as_the_value() -> None:
    reader = line_reader({"parse.key": "true", "key.separator": ",", "ignore.error": "true"})
    assert reader.read(b"abc", 1) == ProducerRecord(None, b"abc", ())


def test_headers_key_and_value_parse_together() -> None:
    """parse.headers takes `h1:v1,h2:v2` before headers.delimiter; a header without ':' is
    null-valued."""
    reader = line_reader({"parse.headers": "true", "parse.key": "true"})
    record = reader.read(b"h1:v1,h2:v:2,h3\tkey\tvalue", 1)
    assert record == ProducerRecord(b"key", b"value", (("h1", b"v1"), ("h2", b"v:2"), ("h3", None)))


def test_empty_headers_part_gives_no_headers() -> None:
    reader = line_reader({"parse.headers": "true"})
    assert reader.read(b"\tvalue", 1) == ProducerRecord(None, b"value", ())


def test_missing_headers_delimiter_is_an_error() -> None:
    with pytest.raises(CommandError, match="No headers delimiter found on line number 3"):
        line_reader({"parse.headers": "true"}).read(b"novalue", 3)


def test_null_marker_makes_keys_values_and_header_values_null() -> None:
    reader = line_reader({"parse.key": "true", "parse.headers": "true", "null.marker": "<null>"})
    record = reader.read(b"h:<null>\t<null>\t<null>", 1)
    assert record == ProducerRecord(None, None, (("h", None),))
    with pytest.raises(CommandError, match="Header keys should not be equal to the null marker"):
        reader.read(b"<null>:x\tk\tv", 2)


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"parse.kee": "true"}, "unknown --property parse.kee"),
        ({"parse.key": "yes"}, "parse.key must be true or false"),
        ({"key.separator": ""}, "key.separator must not be empty"),
        ({"null.marker": ""}, "null.marker must not be empty"),
    ],
)
def test_bad_reader_properties_are_usage_errors(properties: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        line_reader(properties)


def test_console_producer_rejects_a_bad_line_with_exit_1() -> None:
    """End to end through the real command: the bad line is reported in one line, exit 1.

    No broker is needed: the line is refused before anything is sent.
    """
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pykraft.cli",
            "console-producer",
            "--bootstrap-server",
            "127.0.0.1:1",
            "--topic",
            "t",
            "--property",
            "parse.key=true",
        ],
        input=b"no separator here\n",
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 1
    error_lines = [
        line for line in result.stderr.decode().splitlines() if not line.startswith("WARN")
    ]
    assert error_lines == ["Error: No key separator found on line number 1: 'no separator here'"]


# -- consumer: formatter -------------------------------------------------------------------

CREATE = (TIMESTAMP_CREATE_TIME, 1700000000123)


def formatted(formatter: MessageFormatter, **overrides: object) -> bytes:
    fields: dict[str, object] = dict(
        timestamp=CREATE,
        partition=2,
        offset=42,
        headers=[("h1", b"v1"), ("h2", None)],
        key=b"k",
        value=b"v",
    )
    fields.update(overrides)
    return formatter.format(**fields)  # type: ignore[arg-type]


def test_default_format_is_the_value_and_a_newline() -> None:
    assert formatted(message_formatter({})) == b"v\n"


def test_all_columns_in_kafkas_order() -> None:
    """timestamp, partition, offset, headers, key, value: Kafka's DefaultMessageFormatter."""
    formatter = message_formatter(
        {
            name: "true"
            for name in (
                "print.timestamp",
                "print.partition",
                "print.offset",
                "print.headers",
                "print.key",
            )
        }
    )
    assert formatted(formatter) == (
        b"CreateTime:1700000000123\tPartition:2\tOffset:42\th1:v1,h2:null\tk\tv\n"
    )


def test_separators_null_literal_and_timestamp_types() -> None:
    formatter = message_formatter(
        {
            "print.key": "true",
            "print.timestamp": "true",
            "print.headers": "true",
            "key.separator": " | ",
            "null.literal": "NULL",
            "headers.separator": ";",
            "headers.key.separator": "=",
            "line.separator": "\\n--\\n",
        }
    )
    assert formatted(formatter, key=None, timestamp=(TIMESTAMP_LOG_APPEND_TIME, 5)) == (
        b"LogAppendTime:5 | h1=v1;h2=NULL | NULL | v\n--\n"
    )
    assert formatted(formatter, timestamp=(TIMESTAMP_NOT_AVAILABLE, -1), headers=None) == (
        b"NO_TIMESTAMP | NO_HEADERS | k | v\n--\n"
    )


def test_print_value_false_still_ends_each_record_with_a_newline() -> None:
    formatter = message_formatter({"print.key": "true", "print.value": "false"})
    assert formatted(formatter) == b"k\n"


def test_unknown_formatter_property_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown --property print.keys"):
        message_formatter({"print.keys": "true"})


# -- consumer: options ---------------------------------------------------------------------


def consumer_args(*argv: str) -> list[str]:
    return ["console-consumer", "--bootstrap-server", "h:1", "--topic", "t", *argv]


def test_consumer_start_offsets() -> None:
    """Latest by default; --from-beginning is earliest; --offset with --partition."""
    parse = build_parser().parse_args
    assert consumer_options(parse(consumer_args())).offset == OFFSET_END
    assert consumer_options(parse(consumer_args("--from-beginning"))).offset == OFFSET_BEGINNING
    options = consumer_options(parse(consumer_args("--partition", "1", "--offset", "17")))
    assert (options.partition, options.offset) == (1, 17)
    options = consumer_options(parse(consumer_args("--partition", "0", "--offset", "earliest")))
    assert options.offset == OFFSET_BEGINNING


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--offset", "3"), "The partition is required when offset is specified."),
        (("--partition", "0", "--offset", "3", "--from-beginning"), "cannot be specified together"),
        (("--partition", "0", "--group", "g"), "--group and --partition"),
        (("--partition", "0", "--offset", "-2"), "The provided offset value '-2' is incorrect."),
        (("--max-messages", "0"), "--max-messages must be positive"),
        (("--consumer-property", "nokeyvalue"), "--consumer-property expects key=value"),
        (("--property", "print.key=maybe"), "print.key must be true or false"),
    ],
)
def test_bad_consumer_options(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError) as raised:
        consumer_options(build_parser().parse_args(consumer_args(*argv)))
    assert message in str(raised.value)


def test_parse_offset_words_and_numbers() -> None:
    assert parse_offset("LATEST") == OFFSET_END
    assert parse_offset("0") == 0
    with pytest.raises(UsageError):
        parse_offset("soon")


def test_console_consumer_without_a_broker_fails_in_one_line_after_the_summary() -> None:
    """An unreachable cluster: warnings, the summary line, then one error line; exit 1."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pykraft.cli",
            "console-consumer",
            "--bootstrap-server",
            "127.0.0.1:1",
            "--topic",
            "t",
            "--consumer-property",
            "default.api.timeout.ms=300",
        ],
        capture_output=True,
        timeout=60,
        text=True,
    )
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if not line.startswith("WARN")]
    assert lines[0] == "Processed a total of 0 messages"
    assert lines[1].startswith("Error: ")
    assert len(lines) == 2
    assert "Traceback" not in result.stderr
