"""Option parsing: Kafka source names, lenient on case, strict on unknown names and values."""

from __future__ import annotations

import pytest

from jobs.datasource.options import (
    DataSourceOptionError,
    offsets_from_json,
    offsets_json,
    parse_read_options,
)


def parse(streaming: bool = False, **options: str):
    return parse_read_options({"path": "/x", **options}, streaming=streaming)


def test_names_are_matched_without_case() -> None:
    opts = parse(SUBSCRIBE="a,b", startingoffsets='{"a": {"0": 5}}', INCLUDEHEADERS="TRUE")
    assert opts.subscription.topics == ("a", "b")
    assert opts.starting.per_partition == {("a", 0): 5}
    assert opts.include_headers


def test_timestamp_takes_precedence_like_spark() -> None:
    opts = parse(
        subscribe="a", startingTimestamp="100", startingOffsetsByTimestamp='{"a": {"0": 5}}'
    )
    assert (opts.starting.kind, opts.starting.timestamp) == ("timestamp", 100)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"subscribe": "a", "startingOffset": "earliest"}, "startingOffset"),
        ({"subscribe": "a", "assign": '{"a": [0]}'}, "subscribe, assign"),
        ({"assign": '{"a": "0"}'}, "assign"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "startingOffsets"),
        ({"subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, "endingOffsets"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"subscribe": "a", "isolation.level": "serializable"}, "isolation.level"),
        ({"subscribe": "a", "startingTimestamp": "yesterday"}, "startingTimestamp"),
        ({"subscribePattern": "(", "minPartitions": "2"}, "subscribePattern"),
        ({"subscribe": "a", "startingOffsets": "{not json"}, "startingOffsets"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(DataSourceOptionError, match=named):
        parse(**options)


def test_streaming_rules() -> None:
    opts = parse(True, subscribe="a", maxOffsetsPerTrigger="7")
    assert opts.max_offsets_per_trigger == 7
    assert opts.starting.kind == "latest"  # Spark's streaming default
    with pytest.raises(DataSourceOptionError, match="endingOffsets"):
        parse(True, subscribe="a", endingOffsets="latest")


def test_offsets_json_round_trip() -> None:
    offsets = {("a", 0): 3, ("a", 10): 4, ("b", 1): 0}
    assert offsets_json(offsets) == {"a": {"0": 3, "10": 4}, "b": {"1": 0}}
    assert offsets_from_json(offsets_json(offsets)) == offsets
