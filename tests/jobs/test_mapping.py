"""map_records: fields, formats, headers, timestamps, partitioning (murmur2 = Java), row checks."""

from __future__ import annotations

import datetime as dt
import json
import re
import struct

import pytest
from chispa import assert_df_equality

from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.mapping.rules import ORDER_COLUMN, RECORD_COLUMNS
from jobs.ingestion.mapping.spark_mapping import (
    invalid_record_error,
    map_records,
    map_records_with_rejects,
)
from kafkalog_core.errors import ConfigError
from kafkalog_core.partitioner import murmur2, to_positive

pytestmark = pytest.mark.spark


def _config(mapping: dict, topics: dict | None = None, **extra) -> IngestConfig:
    doc = {
        "source": {"format": "parquet", "path": "/unused"},
        "output": {"root": "/unused"},
        "topics": topics or {"t": {"partitions": 10}},
        "mapping": {"topic": "t", **mapping},
        **extra,
    }
    return IngestConfig.from_dict(doc)


def _rows(df):
    return [r.asDict(recursive=True) for r in df.collect()]


def test_output_schema(spark):
    df = spark.createDataFrame([("k", "v", 5)], "k string, v string, ts long")
    out = map_records(df, _config({"key": "k", "value": "v", "timestamp": "ts"}))
    assert out.columns == [*RECORD_COLUMNS, ORDER_COLUMN]
    assert out.schema.simpleString() == (
        "struct<topic:string,partition:int,key:binary,value:binary,"
        "headers:array<struct<key:string,value:binary>>,timestamp:bigint,"
        "_kl_order:struct<pos:bigint>>"
    )


def test_murmur2_partitions_match_kafka_vectors(spark):
    # §11: foobar -> 6 of 10; abc -> 7 of 100; and every key agrees with the scalar murmur2.
    keys = [
        "foobar",
        "abc",
        "21",
        "a-little-bit-long-string",
        "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
        "é",
    ]
    df = spark.createDataFrame([(k, "v", 1) for k in keys], "k string, v string, ts long")
    for n in (10, 100):
        cfg = _config({"key": "k", "value": "v", "timestamp": "ts"}, {"t": {"partitions": n}})
        got = {r["key"].decode(): r["partition"] for r in _rows(map_records(df, cfg))}
        assert got == {k: to_positive(murmur2(k.encode())) % n for k in keys}
    assert got["abc"] == 7
    cfg = _config({"key": "k", "value": "v", "timestamp": "ts"})
    assert {r["key"]: r["partition"] for r in _rows(map_records(df, cfg))}[b"foobar"] == 6


def test_key_value_formats(spark):
    df = spark.createDataFrame(
        [(-2, "héllo", bytearray(b"\x00\xff"), "x")], "n long, s string, b binary, tag string"
    )
    cases = [
        ({"column": "s"}, "héllo".encode()),
        ({"column": "b"}, b"\x00\xff"),
        ({"column": "s", "format": "bytes"}, "héllo".encode()),
        ({"column": "n"}, b"-2"),
        ({"column": "n", "format": "long"}, struct.pack(">q", -2)),
        ({"column": "n", "format": "int"}, struct.pack(">i", -2)),
        ({"expr": "upper(tag) || '-' || n"}, b"X--2"),
        (
            {"columns": ["n", "s"]},
            json.dumps({"n": -2, "s": "héllo"}, separators=(",", ":"), ensure_ascii=False).encode(),
        ),
        ({"expr": "named_struct('a', n)", "format": "json"}, b'{"a":-2}'),
    ]
    for value, expected in cases:
        cfg = _config({"key": {"column": "tag"}, "value": value, "timestamp": {"expr": "0"}})
        row = _rows(map_records(df, cfg))[0]
        assert row["value"] == expected, value
        assert row["key"] == b"x"


def test_headers_from_map_array_and_values(spark):
    df = spark.createDataFrame(
        [({"a": "1"}, [{"key": "h", "value": bytearray(b"\x01")}], "id1")],
        "m map<string,string>, arr array<struct<key:string,value:binary>>, id string",
    )
    cfg = _config(
        {
            "value": "id",
            "timestamp": {"expr": "1"},
            "headers": {"column": "m", "values": {"src": "'web'", "id": "id"}},
        }
    )
    assert _rows(map_records(df, cfg))[0]["headers"] == [
        {"key": "a", "value": b"1"},
        {"key": "src", "value": b"web"},
        {"key": "id", "value": b"id1"},
    ]
    cfg = _config({"value": "id", "timestamp": {"expr": "1"}, "headers": "arr"})
    assert _rows(map_records(df, cfg))[0]["headers"] == [{"key": "h", "value": b"\x01"}]
    cfg = _config({"value": "id", "timestamp": {"expr": "1"}})
    assert _rows(map_records(df, cfg))[0]["headers"] == []


def test_timestamps(spark):
    df = spark.createDataFrame(
        [
            (
                dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
                1704067200123,
                dt.date(2024, 1, 1),
                1704067200,
            )
        ],
        "t timestamp, ms long, d date, s long",
    )
    expected = {"t": 1704067200000, "ms": 1704067200123, "d": 1704067200000}
    for column, want in expected.items():
        cfg = _config({"value": {"expr": "'v'"}, "timestamp": column})
        assert _rows(map_records(df, cfg))[0]["timestamp"] == want
    cfg = _config({"value": {"expr": "'v'"}, "timestamp": {"column": "s", "unit": "s"}})
    assert _rows(map_records(df, cfg))[0]["timestamp"] == 1704067200000
    ntz = spark.sql("SELECT TIMESTAMP_NTZ'1970-01-01 00:00:01.5' AS n")
    cfg = _config({"value": {"expr": "'v'"}, "timestamp": "n"})
    assert _rows(map_records(ntz, cfg))[0]["timestamp"] == 1500
    lat = _config(
        {"value": {"expr": "'v'"}},
        {"t": {"partitions": 1, "config": {"message.timestamp.type": "LogAppendTime"}}},
    )
    assert _rows(map_records(df, lat))[0]["timestamp"] == -1


def test_partition_from_column_and_null_key_rules(spark):
    df = spark.createDataFrame(
        [(i, None if i % 2 else f"k{i}", f"v{i % 3}") for i in range(12)],
        "p int, k string, v string",
    )
    cfg = _config(
        {"key": "k", "value": "v", "timestamp": {"expr": "1"}, "partition": "p"},
        {"t": {"partitions": 12}},
    )
    assert [r["partition"] for r in _rows(map_records(df, cfg))] == list(range(12))

    by_value = _config(
        {"key": "k", "value": "v", "timestamp": {"expr": "1"}}, {"t": {"partitions": 7}}
    )
    rows = _rows(map_records(df, by_value))
    for r in rows:
        hashed = r["key"] if r["key"] is not None else r["value"]
        assert r["partition"] == to_positive(murmur2(hashed)) % 7
    assert rows == _rows(map_records(df, by_value))  # deterministic

    rr = _config(
        {
            "key": "k",
            "value": "v",
            "timestamp": {"expr": "1"},
            "partition": {"null_keys": "round_robin"},
        },
        {"t": {"partitions": 3}},
    )
    rows = _rows(map_records(df.coalesce(1), rr))
    nulls = [r for r in rows if r["key"] is None]
    assert [r["partition"] for r in nulls] == [r[ORDER_COLUMN]["pos"] % 3 for r in nulls]
    assert sorted({r["partition"] for r in nulls}) == [0, 1, 2]


def test_ordering_struct(spark):
    df = spark.createDataFrame([(3, "b"), (1, "a")], "n int, s string")
    cfg = _config({"value": "s", "timestamp": {"expr": "1"}}, ordering=["n", "upper(s)"])
    out = map_records(df, cfg).select(f"{ORDER_COLUMN}.o0", f"{ORDER_COLUMN}.o1")
    assert_df_equality(
        out, spark.createDataFrame([(3, "B"), (1, "A")], "o0 int, o1 string"), ignore_nullable=True
    )


def test_column_topics_validated_per_row(spark):
    df = spark.createDataFrame(
        [("good", "k", 1), ("../etc", "k", 2), ("unlisted", "k", 3), (None, "k", 4)],
        "tp string, k string, ts long",
    )
    cfg = _config(
        {"topic": {"column": "tp"}, "key": "k", "value": "k", "timestamp": "ts"},
        {"good": {"partitions": 2}},
    )
    result = map_records_with_rejects(df, cfg)
    assert [r["topic"] for r in _rows(result.records)] == ["good"]
    errors = sorted(r["error"] for r in _rows(result.rejects))
    assert errors[0].startswith("topic 'unlisted' is not configured")
    assert errors[1].startswith("topic is null")
    assert errors[2].startswith("topic name '../etc' is illegal")


@pytest.mark.parametrize(
    ("rows", "schema", "mapping", "topics", "message"),
    [
        (
            [(None, "v", 1)],
            "k string, v string, ts long",
            {"key": "k"},
            {"t": {"partitions": 2, "config": {"cleanup.policy": "compact"}}},
            r"null key on compacted topic 't'.*key=null value='v'",
        ),
        (
            [("k", "v", -5)],
            "k string, v string, ts long",
            {"key": "k"},
            None,
            r"negative timestamp -5; record: topic='t'",
        ),
        (
            [("k",)],
            "k string",
            {"key": "k", "timestamp": {"expr": "CAST(NULL AS BIGINT)"}},
            None,
            r"timestamp is null",
        ),
        (
            [("k", "v", 1, 10)],
            "k string, v string, ts long, p int",
            {"key": "k", "partition": "p"},
            None,
            r"partition 10 is out of range for topic 't' with 10 partitions",
        ),
        (
            [("k", "x" * 200, 1)],
            "k string, v string, ts long",
            {"key": "k"},
            {"t": {"partitions": 1, "config": {"max.message.bytes": 200}}},
            r"record of 2\d\d bytes .* exceeds max.message.bytes=200",
        ),
    ],
)
def test_bad_rows_fail_with_the_record(spark, rows, schema, mapping, topics, message):
    df = spark.createDataFrame(rows, schema)
    full = {"value": "v" if "v " in schema else "k", "timestamp": "ts", **mapping}
    cfg = _config(full, topics)
    with pytest.raises(Exception) as e:
        map_records(df, cfg).collect()
    error = invalid_record_error(e.value)
    assert error is not None, str(e.value)[:500]
    assert __import__("re").search(message, str(error)), str(error)
    assert "\n" not in str(error)


def test_record_size_is_exact_at_the_limit(spark):
    # One record, key 1 byte, value 100 bytes, no headers: body = 3+2+102+1 = 108,
    # record = 1+108 = 109 (varint(108) is 2 bytes: 110), batch = 61+110 = 171... computed exactly.
    df = spark.createDataFrame([("k", "x" * 100, 1)], "k string, v string, ts long")
    size = 61 + 2 + (3 + 2 + 1 + 101 + 1)
    ok = _config(
        {"key": "k", "value": "v", "timestamp": "ts"},
        {"t": {"partitions": 1, "config": {"max.message.bytes": size}}},
    )
    assert len(_rows(map_records(df, ok))) == 1
    tight = _config(
        {"key": "k", "value": "v", "timestamp": "ts"},
        {"t": {"partitions": 1, "config": {"max.message.bytes": size - 1}}},
    )
    assert _rows(map_records_with_rejects(df, tight).rejects)[0]["error"].startswith(
        f"record of {size} bytes"
    )


def test_reject_path_filters_instead_of_failing(spark):
    df = spark.createDataFrame([("k", 1), ("k", -1)], "k string, ts long")
    cfg = _config(
        {"key": "k", "value": "k", "timestamp": "ts"}, output={"root": "/o", "reject_path": "/r"}
    )
    assert [r["timestamp"] for r in _rows(map_records(df, cfg))] == [1]


def test_mapping_errors_before_any_job(spark):
    df = spark.createDataFrame([("k", 1, {"a": 1})], "k string, ts long, m map<string,int>")
    cases = [
        (
            {"key": "nope", "value": "k", "timestamp": "ts"},
            r"mapping.key.column='nope': column not found.*available: k, ts, m",
        ),
        ({"key": {"expr": "k +* 1"}, "value": "k", "timestamp": "ts"}, r"mapping.key.expr: "),
        (
            {"value": {"column": "ts", "format": "json"}, "timestamp": "ts"},
            r"mapping.value.format=json needs a struct",
        ),
        (
            {"value": {"column": "k", "format": "long"}, "timestamp": "ts"},
            r"mapping.value.format=long needs an integer",
        ),
        (
            {"value": "k", "timestamp": "k"},
            r"mapping.timestamp.column: a string is not a timestamp",
        ),
        (
            {"value": "k", "timestamp": "ts", "headers": "k"},
            r"headers need map<string, string\|binary>",
        ),
        (
            {"value": "k", "timestamp": "ts", "partition": {"expr": "'x'"}},
            r"mapping.partition.expr: partition must be an integer",
        ),
    ]
    for mapping, message in cases:
        with pytest.raises(ConfigError, match=message):
            map_records(df, _config(mapping))
    with pytest.raises(ConfigError, match=r"ordering\[0\]='m': a map<string,int> cannot be sorted"):
        map_records(df, _config({"value": "k", "timestamp": "ts"}, ordering=["m"]))


# --- the Spark expressions agree with the Arrow reference (`map_batch`), row by row ----------


def _reference(df, cfg):
    """What the numpy/Arrow implementation of stage 2 says about the same prepared rows."""
    from jobs.ingestion.mapping.arrow_mapping import map_batch
    from jobs.ingestion.mapping.rules import mapping_rules
    from jobs.ingestion.mapping.spark_mapping import _prepare

    table = _prepare(df, cfg).toArrow()
    plan, cache = mapping_rules(cfg), {}
    out = []
    for batch in table.to_batches():
        out.extend(map_batch(batch, plan, cache).to_pylist())
    return {r[ORDER_COLUMN]["pos"]: r for r in out}


def _spark_side(df, cfg):
    from jobs.ingestion.mapping.spark_mapping import _map_all

    return {r[ORDER_COLUMN]["pos"]: r for r in _rows(_map_all(df, cfg))}


_MIXED_TOPICS = {
    "plain": {"partitions": 7},
    "compacted": {"partitions": 3, "config": {"cleanup.policy": "compact"}},
    "appendtime": {"partitions": 2, "config": {"message.timestamp.type": "LogAppendTime"}},
    "small": {"partitions": 5, "config": {"max.message.bytes": 150}},
    "zipped": {"partitions": 4, "config": {"compression.type": "gzip", "max.message.bytes": 80}},
}


def _mixed_rows():
    keys = [None, b"", b"k", b"foobar", "é'q\"\\".encode(), b"\x00\xff\n", b"x" * 63, b"y" * 64]
    values = [None, b"v", b"it's", b"tab\there", b"\x80" * 50, b"z" * 8191, b"z" * 8192, b"w" * 70]
    topics = [
        "plain",
        "compacted",
        "appendtime",
        "small",
        "zipped",
        "unknown",
        None,
        "",
        ".",
        "bad/name",
        "it's",
        "a" * 250,
        "t\n",
    ]
    stamps = [0, 5, -3, None]
    rows = []
    for i in range(160):
        rows.append(
            (
                topics[i % len(topics)],
                keys[(i // 3) % len(keys)],
                values[(i // 2) % len(values)],
                stamps[(i // 5) % len(stamps)],
                (i % 9) - 1 if i % 11 else None,
                {"h": "x" * (i % 3)} if i % 4 else None,
            )
        )
    return rows


_MIXED_SCHEMA = "tp string, k binary, v binary, ts long, p int, hm map<string,string>"


@pytest.mark.parametrize(
    "partition",
    [None, {"null_keys": "round_robin"}, "p"],
    ids=["value_hash", "round_robin", "column"],
)
@pytest.mark.parametrize("defaults", [False, True], ids=["listed", "defaults"])
def test_spark_checks_match_the_arrow_reference(spark, partition, defaults):
    df = spark.createDataFrame(_mixed_rows(), _MIXED_SCHEMA).repartition(3)
    mapping = {"topic": {"column": "tp"}, "key": "k", "value": "v", "timestamp": "ts"}
    mapping["headers"] = "hm"
    if partition is not None:
        mapping["partition"] = partition
    extra = {"topic_defaults": {"partitions": 6}} if defaults else {}
    cfg = _config(mapping, _MIXED_TOPICS, **extra)
    got, want = _spark_side(df, cfg), _reference(df, cfg)
    assert got.keys() == want.keys()
    assert sum(r["_kl_error"] is None for r in want.values()) > 10
    for pos in want:
        assert got[pos] == want[pos], pos


def test_constant_topics_and_record_sizes_match_the_reference(spark):
    # Sizes across varint thresholds (value 63/64/8191/8192 bytes; body 63/64 ...) and limits.
    rows = [(b"k" * (i % 3), b"v" * n, 1) for i, n in enumerate([0, 1, 50, 58, 59, 60, 63, 64])]
    rows += [(None, b"v" * n, 1) for n in (8100, 8191, 8192, 8300)]
    df = spark.createDataFrame(rows, "k binary, v binary, ts long")
    for limit in (120, 124, 125, 126, 127, 8300, 8320, 8400, 100_000):  # (the last two: no row
        # reaches the bound from the longest key and value, so no size is computed)
        topics = {"t": {"partitions": 3, "config": {"max.message.bytes": limit}}}
        cfg = _config({"key": "k", "value": "v", "timestamp": "ts"}, topics)
        assert _spark_side(df, cfg) == _reference(df, cfg), limit


def test_topic_messages_are_kafkas(spark):
    from kafkalog_core.errors import InvalidTopicError
    from kafkalog_core.log.names import validate_topic_name

    names = ["", ".", "..", "a b", "it's", 'say "hi"', "both'\"", "back\\slash", "x" * 250, "é"]
    df = spark.createDataFrame([(n,) for n in names], "tp string")
    cfg = _config(
        {"topic": {"column": "tp"}, "value": "tp", "timestamp": {"expr": "1"}},
        {"ok": {"partitions": 1}},
        topic_defaults={"partitions": 1},
    )
    errors = {r["topic"]: r["error"] for r in _rows(map_records_with_rejects(df, cfg).rejects)}
    for name in names:
        with pytest.raises(InvalidTopicError) as e:
            validate_topic_name(name)
        assert errors[name].startswith(f"{e.value}; record: topic={name!r} "), name


def test_only_the_hashed_column_goes_to_python(spark):
    df = spark.createDataFrame([("k", "v", 1, 0)], "k string, v string, ts long, p int")

    def python_inputs(mapping):
        plan = map_records(df, _config({"value": "v", "timestamp": "ts", **mapping}))
        text = plan._jdf.queryExecution().executedPlan().toString()
        return [line.strip() for line in text.splitlines() if "ArrowEvalPython" in line]

    # value_hash: the key, or the value where the key is null; round robin: the key alone.
    [line] = python_inputs({"key": "k"})
    assert "positive_murmur2(coalesce(coalesce(key#" in line and ", value#" in line, line
    assert "timestamp#" not in line and "_kl_order" not in line and "headers" not in line
    [line] = python_inputs({"key": "k", "partition": {"null_keys": "round_robin"}})
    assert re.search(r"positive_murmur2\(key#\d+\)#\d+\]", line), line
    assert python_inputs({"key": "k", "partition": "p"}) == []
    assert python_inputs({"partition": {"null_keys": "round_robin"}}) == []


def test_record_size_bound_is_never_below_a_record_size():
    """The shortcut that skips per-row sizes must be a true upper bound (no headers)."""
    import numpy as np
    import pyarrow as pa

    from jobs.ingestion.mapping.arrow_mapping import (
        _largest_record_bound,
        _single_record_batch_size,
    )

    entry = pa.struct([("key", pa.string()), ("value", pa.binary())])
    rng = np.random.default_rng(11)
    for _ in range(30):
        n = int(rng.integers(1, 40))
        lengths = rng.choice([0, 1, 63, 64, 8191, 8192, 70000], size=(2, n))
        keys = [None if rng.random() < 0.2 else b"k" * int(k) for k in lengths[0]]
        values = [None if rng.random() < 0.2 else b"v" * int(v) for v in lengths[1]]
        headers = pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], entry))
        batch = pa.RecordBatch.from_arrays(
            [pa.array(keys, pa.binary()), pa.array(values, pa.binary()), headers],
            names=["key", "value", "headers"],
        )
        assert _largest_record_bound(batch) >= int(_single_record_batch_size(batch).max())
