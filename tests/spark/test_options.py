"""Option parsing (pure): Spark's Kafka option names, precedence and error messages."""

from __future__ import annotations

import pytest

from pykraft.spark.options import (
    Assign,
    EarliestOffsets,
    GlobalTimestamp,
    InvalidOptionError,
    LatestOffsets,
    SpecificOffsets,
    SpecificTimestamps,
    Subscribe,
    SubscribePattern,
    parse_read_options,
    parse_write_options,
)

BASE = {"kafka.bootstrap.servers": "h:1"}


def _parse(streaming: bool, **options: str) -> object:
    return parse_read_options({**BASE, **options}, streaming=streaming)


def test_defaults_differ_for_batch_and_streaming() -> None:
    batch = parse_read_options({**BASE, "subscribe": "a, b,a"}, streaming=False)
    assert batch.strategy == Subscribe(("a", "b"))
    assert (batch.starting, batch.ending) == (EarliestOffsets(), LatestOffsets())
    stream = parse_read_options({**BASE, "subscribePattern": "ev.*"}, streaming=True)
    assert stream.strategy == SubscribePattern("ev.*")
    assert (stream.starting, stream.ending) == (LatestOffsets(), None)
    assert stream.fail_on_data_loss and not stream.include_headers


def test_keys_are_case_insensitive_and_kafka_params_pass_through() -> None:
    options = parse_read_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "kafka.client.id": "me",
                                  "Assign": '{"t":[1,0]}', "MaxOffsetsPerTrigger": "7",
                                  "minPartitions": "3", "failOnDataLoss": "FALSE"},
                                 streaming=True)
    assert options.strategy == Assign((("t", 0), ("t", 1)))
    assert options.kafka_params == {"bootstrap.servers": "h:1", "client.id": "me"}
    assert (options.max_offsets_per_trigger, options.min_partitions) == (7, 3)
    assert not options.fail_on_data_loss


def test_starting_precedence_timestamp_then_by_timestamp_then_offsets() -> None:
    both = {"subscribe": "t", "startingOffsets": "earliest", "startingTimestamp": "1000",
            "startingOffsetsByTimestamp": '{"t":{"0":5}}'}
    assert parse_read_options({**BASE, **both}, streaming=True).starting == GlobalTimestamp(1000)
    del both["startingTimestamp"]
    assert parse_read_options({**BASE, **both}, streaming=True).starting == \
        SpecificTimestamps({("t", 0): 5})
    del both["startingOffsetsByTimestamp"]
    assert parse_read_options({**BASE, **both}, streaming=True).starting == EarliestOffsets()
    offsets = parse_read_options({**BASE, "subscribe": "t",
                                  "startingOffsets": '{"t":{"0":-2,"1":-1,"2":9}}'},
                                 streaming=True).starting
    assert offsets == SpecificOffsets({("t", 0): -2, ("t", 1): -1, ("t", 2): 9})


@pytest.mark.parametrize(("streaming", "options", "message"), [
    (True, {"subscribe": "t", "endingOffsets": "latest"}, "not valid for streaming"),
    (False, {"subscribe": "t", "startingOffsets": '{"t":{"0":-1}}'}, "cannot use -1"),
    (False, {"subscribe": "t", "endingOffsets": "earliest"}, "cannot be 'earliest'"),
    (True, {"subscribe": "t", "startingOffsets": '{"t":{"0":-3}}'}, "is not an offset"),
    (True, {"subscribe": "t", "startingOffsets": "{}"}, "must be"),
    (True, {"subscribe": "t", "startingOffsets": '{"t":{"x":1}}'}, "must be"),
    (True, {"subscribe": "t", "maxOffsetsPerTrigger": "0"}, "positive integer"),
    (True, {"subscribe": "t", "minOffsetsPerTrigger": "-5"}, "positive integer"),
    (True, {"subscribe": "t", "minOffsetsPerTrigger": "20", "maxOffsetsPerTrigger": "10"},
     r"minOffsetPerTrigger\(20\) is higher than the maxOffsetsPerTrigger\(10\)"),
    (True, {"subscribe": "t", "maxTriggerDelay": "soon"}, "must be a duration"),
    (True, {"subscribe": "t", "maxTriggerDelay": "5 parsecs"}, "must be a duration"),
    (True, {"subscribe": " , "}, "No topics"),
    (True, {"subscribePattern": "("}, "not a valid regular expression"),
    (True, {"subscribe": "t", "subscribePattern": "x"}, "'subscribe', 'subscribePattern'"),
    (True, {"subscribe": "t", "kafka.bootstrap.servers": ""}, "kafka.bootstrap.servers"),
    (True, {"subscribe": "t", "kafka.enable.auto.commit": "true"}, "Spark's checkpoint"),
    (True, {"subscribe": "t", "startingTimestamp": "yesterday"}, "epoch milliseconds"),
])
def test_invalid_options(streaming: bool, options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        parse_read_options({**BASE, **options}, streaming=streaming)


def test_write_options() -> None:
    assert parse_write_options({**BASE, "topic": "out"}).topic == "out"
    assert parse_write_options(BASE).topic is None
    with pytest.raises(InvalidOptionError, match="value.serializer"):
        parse_write_options({**BASE, "kafka.value.serializer": "x"})


@pytest.mark.parametrize(("text", "millis"), [
    (None, 900_000), ("15m", 900_000), ("30s", 30_000), ("500ms", 500), ("250", 250),
    ("2h", 7_200_000), ("1 min", 60_000), ("1d", 86_400_000),
])
def test_max_trigger_delay_is_a_spark_duration(text: str | None, millis: int) -> None:
    options = {"subscribe": "t", "kafka.bootstrap.servers": "h:1", "minOffsetsPerTrigger": "5"}
    if text is not None:
        options["maxTriggerDelay"] = text
    parsed = parse_read_options(options, streaming=True)
    assert parsed.max_trigger_delay_ms == millis and parsed.min_offsets_per_trigger == 5
