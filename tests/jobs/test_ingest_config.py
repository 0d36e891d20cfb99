"""Ingest config: the conf/ examples validate; every bad value names its setting."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from jobs.ingestion.config.ingest_config import (
    IngestConfig,
    build_arg_parser,
    config_from_args,
    load_ingest_config,
)
from kafkalog_core.errors import ConfigError

CONF = Path(__file__).resolve().parents[2] / "conf"

BASE = {
    "source": {"format": "parquet", "path": "/data/x"},
    "output": {"root": "/out"},
    "topics": {"orders": {"partitions": 3, "config": {"cleanup.policy": "compact"}}},
    "mapping": {
        "topic": "orders",
        "key": {"column": "id"},
        "value": {"column": "v"},
        "timestamp": "ts",
    },
}


def _with(path: str, value):
    doc = copy.deepcopy(BASE)
    node = doc
    keys = path.split("/")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    if value is KeyError:
        node.pop(keys[-1])
    else:
        node[keys[-1]] = value
    return doc


@pytest.mark.parametrize("name", sorted(p.name for p in CONF.glob("ingest-*.yaml")))
def test_examples_parse_and_validate(name):
    config = load_ingest_config(CONF / name)
    assert config.topics and config.output_root


def test_examples_exist():
    assert {"ingest-changelog.yaml", "ingest-events.yaml"} <= {p.name for p in CONF.glob("*.yaml")}


def test_base_parses():
    c = IngestConfig.from_dict(BASE)
    assert c.topics["orders"].log_config.compact and c.topic("orders").partitions == 3
    assert c.topic("other") is None and c.ordering == ()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("topics/orders/partitions", 0, r"topics.orders.partitions=0 is invalid"),
        ("topics/orders/partitions", KeyError, r"topics.orders.partitions is required"),
        ("topics/orders/config", {"segment.bytes": 3}, r"topics.orders.config: .*segment.bytes"),
        (
            "topics/orders/config",
            {"segmnt.bytes": 3},
            r"topics.orders.config: unknown topic config 'segmnt.bytes'",
        ),
        ("topics/bad topic", {"partitions": 1}, r"topics: topic name 'bad topic' is illegal"),
        ("mapping/topic", "../etc", r"mapping.topic: topic name '../etc' is illegal"),
        ("mapping/topic", "missing", r"mapping.topic='missing' is not listed under topics"),
        (
            "mapping/key",
            KeyError,
            r"mapping.key is required: topics.orders has cleanup.policy=compact",
        ),
        ("mapping/timestamp", KeyError, r"mapping.timestamp is required"),
        ("mapping/value", KeyError, r"mapping.value is required"),
        ("mapping/value", {"column": "a", "expr": "b"}, r"mapping.value: set exactly one of"),
        ("mapping/value", {"column": "a", "format": "xml"}, r"mapping.value.format='xml'"),
        (
            "mapping/value",
            {"columns": ["a"], "format": "string"},
            r"mapping.value: 'columns' builds one record of the columns; format must be json or avro",
        ),
        ("mapping/partition", {"null_keys": "random"}, r"mapping.partition.null_keys='random'"),
        ("mapping/timestamp", {"column": "t", "unit": "ns"}, r"mapping.timestamp.unit='ns'"),
        ("mapping/headers", {}, r"mapping.headers: set column and/or values"),
        ("mapping/colour", 1, r"mapping: unknown setting"),
        ("output/root", KeyError, r"output.root is required"),
        ("source/format", "avro", r"source.format='avro'"),
        ("ordering", [], r"ordering=\[\] is invalid"),
        ("run_id", "a/b", r"run_id='a/b' is invalid"),
        ("topics/orders/topic_id", "abc", r"topics.orders.topic_id='abc' is invalid: not a Kafka"),
        ("topics/orders/topic_id", 7, r"topics.orders.topic_id=7 is invalid"),
        ("topics/orders/topic_id", "A" * 21, r"topics.orders.topic_id=.* is invalid: not a Kafka"),
        (
            "topics/orders/topic_id",
            "AAAAAAAAAAAAAAAAAAAAAA",
            r"topics.orders.topic_id='AAAAAAAAAAAAAAAAAAAAAA' is invalid: is a reserved id",
        ),
        (
            "topics/orders/topic_id",
            "AAAAAAAAAAAAAAAAAAAAAQ",
            r"topics.orders.topic_id='AAAAAAAAAAAAAAAAAAAAAQ' is invalid: is a reserved id",
        ),
        ("topic_defaults", {"partitions": 1, "topic_id": "x"}, r"topic_defaults: unknown setting"),
    ],
)
def test_bad_values_name_the_setting(path, value, message):
    with pytest.raises(ConfigError, match=message) as e:
        IngestConfig.from_dict(_with(path, value))
    assert "\n" not in str(e.value)


def test_log_append_time_needs_no_timestamp_and_defaults_cover_column_topics():
    doc = _with("mapping/timestamp", KeyError)
    doc["topics"]["orders"]["config"]["message.timestamp.type"] = "LogAppendTime"
    assert IngestConfig.from_dict(doc).mapping.timestamp is None
    doc = _with("mapping/topic", {"column": "t"})
    doc["topic_defaults"] = {"partitions": 2}
    c = IngestConfig.from_dict(doc)
    assert c.topic("anything").partitions == 2 and c.topic("anything").name == "anything"


def test_cli_overrides(tmp_path):
    doc = _with("source", {"format": "delta", "path": "/t", "interval": {"column": "ts"}})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    args = build_arg_parser().parse_args(
        [
            "--config", str(path), "--run-id", "scheduled__2024-01-01T00:00:00+00:00",
            "--data-interval-start", "2024-01-01T00:00:00Z", "--data-interval-end", "2024-01-02T00:00:00Z",
            "--since-version", "4", "--output", "/elsewhere",
            "--set", "topics.orders.partitions=8", "--set", "topics.orders.config.segment.bytes=1048576",
        ]
    )  # fmt: skip
    c = config_from_args(args)
    assert c.run_id_slug == "scheduled__2024-01-01T00_00_00_00_00"
    assert c.source.interval.start == "2024-01-01T00:00:00Z" and c.source.since_version == 4
    assert c.output_root == "/elsewhere" and c.topics["orders"].partitions == 8
    assert c.topics["orders"].log_config.segment_bytes == 1048576
    assert IngestConfig.from_argv(["--config", str(path), "--version", "3"]).source.version == 3
    with pytest.raises(SystemExit):
        build_arg_parser().parse_args(["--config", str(path), "--version", "1", "--timestamp", "x"])
    with pytest.raises(ConfigError, match=r"--config .*cannot read"):
        load_ingest_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"source.timestamp='soon'"):
        IngestConfig.from_argv(["--config", str(path), "--timestamp", "soon"])
    plain = tmp_path / "p.yaml"
    plain.write_text(yaml.safe_dump(BASE))
    with pytest.raises(ConfigError, match="need source.interval.column"):
        IngestConfig.from_argv(["--config", str(plain), "--data-interval-start", "2024-01-01"])


def test_topic_id_is_kept_in_kafka_form():
    tid = "vQ9ME0i3R7yYJ2u0aW1IIg"
    doc = _with("topics/orders/topic_id", tid)
    assert IngestConfig.from_dict(doc).topics["orders"].topic_id == tid
    assert IngestConfig.from_dict(BASE).topics["orders"].topic_id is None


def test_timestamp_now_is_bound_at_run_start_and_named_by_the_error():
    doc = _with("mapping/timestamp", "now")
    config = IngestConfig.from_dict(doc)
    assert config.mapping.timestamp.now and config.mapping.timestamp.now_ms is None
    with pytest.raises(ConfigError, match="no run start time"):
        _ = config.mapping.timestamp.now_value
    bound = config.at_run_start(1_714_521_600_000)
    assert bound.mapping.timestamp.now_value == 1_714_521_600_000
    assert config.mapping.timestamp.now_ms is None  # frozen: the original is unchanged
    column = IngestConfig.from_dict(_with("mapping/timestamp", {"column": "now"}))
    assert column.mapping.timestamp.column == "now" and not column.mapping.timestamp.now
    with pytest.raises(ConfigError, match="`timestamp: now` for the run's start time"):
        IngestConfig.from_dict(_with("mapping/timestamp", KeyError))
