"""Code copied from `format("kafka")` behaves the same on `format("kafkalog")`: each case is one
place where the data source differed from Spark's Kafka connector (issue 35, items 5-12)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from jobs.datasource.layout import partition_views
from jobs.datasource.options import DataSourceOptionError, parse_read_options
from jobs.datasource.plan import plan_partitions, resolve_offsets
from jobs.datasource.reader import KafkaLogReader
from jobs.datasource.stream import KafkaLogStreamReader
from jobs.datasource.writer import parse_write_options
from kafkalog_core.config import LogConfig
from kafkalog_core.log import PartitionLog
from kafkalog_core.partitioner import murmur2, to_positive
from tests.datasource.helpers import BASE_TS, oracle, read, records_table, write_topic


def parse(streaming: bool = False, **options: str):
    return parse_read_options({"path": "/x", **options}, streaming=streaming)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_topic(tmp_path / "logs", "s", 2, 40)
    return tmp_path / "logs"


# ---- 6: kafka.* options ------------------------------------------------------------------------
def test_connection_options_are_taken_with_one_warning_naming_them() -> None:
    with pytest.warns(UserWarning) as caught:
        opts = parse(
            subscribe="a",
            **{
                "kafka.bootstrap.servers": "broker:9092",
                "kafka.security.protocol": "SASL_SSL",
                "groupIdPrefix": "g",
                "kafka.isolation.level": "read_committed",
            },
        )
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "kafka.bootstrap.servers" in message and "kafka.security.protocol" in message
    assert "groupIdPrefix" in message and "isolation" not in message
    assert opts.read_committed  # kafka.isolation.level keeps its meaning


def test_misspelt_and_spark_refused_options_are_still_refused() -> None:
    with pytest.raises(DataSourceOptionError, match="startingOffset'"):
        parse(subscribe="a", startingOffset="earliest")
    with pytest.raises(DataSourceOptionError, match="auto.offset.reset.*startingOffsets"):
        parse(subscribe="a", **{"kafka.auto.offset.reset": "earliest"})
    with pytest.raises(DataSourceOptionError, match="key.serializer"):
        parse_write_options({"path": "/x", "topic": "t", "kafka.key.serializer": "x"})


def test_a_write_takes_producer_options_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="kafka.acks, kafka.bootstrap.servers"):
        options = parse_write_options(
            {"path": "/x", "topic": "t", "kafka.bootstrap.servers": "b:9092", "kafka.acks": "all"}
        )
    assert options.topic == "t"


# ---- 7: headers --------------------------------------------------------------------------------
def test_a_record_without_headers_has_null_headers(spark, tmp_path: Path) -> None:
    table = records_table(0, 0, 4)
    no_headers = pa.array([[], [{"key": "h", "value": b"1"}], [], []], table.schema.field(3).type)
    log = PartitionLog.create(tmp_path / "logs" / "s-0", LogConfig())
    log.append_records(table.set_column(3, "headers", no_headers))
    log.close()
    rows = read(spark, tmp_path / "logs", subscribe="s", includeHeaders="true").collect()
    assert [r.headers for r in sorted(rows, key=lambda r: r.offset)] == [
        None,
        [("h", b"1")],
        None,
        None,
    ]


# ---- 8: a null partition ------------------------------------------------------------------------
def test_a_null_partition_goes_to_the_default_partitioner(spark, tmp_path: Path) -> None:
    rows = [(b"k%d" % i, b"v%d" % i, None if i % 2 else 2) for i in range(20)]
    (
        spark.createDataFrame(rows, "key binary, value binary, partition int")
        .write.format("kafkalog")
        .mode("append")
        .option("topic", "t")
        .option("topics.t.partitions", "3")
        .save(str(tmp_path / "logs"))
    )
    got = {value: p for p in range(3) for _, _, _, value in oracle(tmp_path / "logs" / f"t-{p}")}
    assert got == {
        value: to_positive(murmur2(key)) % 3 if given is None else given
        for key, value, given in rows
    }


# ---- 9: startingOffsets after endingOffsets -----------------------------------------------------
def test_a_start_after_the_end_is_an_error(root: Path) -> None:
    options = parse_read_options(
        {
            "path": str(root),
            "subscribe": "s",
            "startingOffsets": '{"s": {"0": 30, "1": 0}}',
            "endingOffsets": '{"s": {"0": 20, "1": 40}}',
        }
    )
    with pytest.raises(
        DataSourceOptionError,
        match="start offset 30 is greater than the end offset 20 for topic s partition 0",
    ):
        KafkaLogReader(options).partitions()


# ---- 10: stream-only options on a batch read ----------------------------------------------------
def test_stream_options_on_a_batch_read_warn_and_are_ignored() -> None:
    with pytest.warns(UserWarning, match="maxOffsetsPerTrigger, minOffsetsPerTrigger"):
        opts = parse(subscribe="a", maxOffsetsPerTrigger="10", minOffsetsPerTrigger="5")
    assert opts.max_offsets_per_trigger is None and opts.min_offsets_per_trigger is None


# ---- 11: subscribePattern ----------------------------------------------------------------------
def test_subscribe_pattern_is_trimmed() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opts = parse(subscribePattern="  orders-.*\n")
    assert opts.subscription.matches("orders-eu", 0)


# ---- 12: the timestamp column on write ---------------------------------------------------------
def test_a_long_timestamp_is_epoch_milliseconds(spark, tmp_path: Path) -> None:
    rows = [(b"v%d" % i, BASE_TS + i) for i in range(5)]
    (
        spark.createDataFrame(rows, "value binary, timestamp long")
        .write.format("kafkalog")
        .mode("append")
        .option("topic", "t")
        .save(str(tmp_path / "logs"))
    )
    assert [(v, ts) for _, ts, _, v in oracle(tmp_path / "logs" / "t-0")] == rows


# ---- 5: minOffsetsPerTrigger, maxTriggerDelay, maxRecordsPerPartition -------------------------
def stream(root: Path, **options: str) -> KafkaLogStreamReader:
    given = {"path": str(root), "subscribe": "s", **options}
    return KafkaLogStreamReader(parse_read_options(given, streaming=True))


def test_min_offsets_per_trigger_waits_for_rows_up_to_the_delay(root: Path) -> None:
    reader = stream(root, minOffsetsPerTrigger="30", maxTriggerDelay="1h")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(30)
    start = {"s": {"0": 40, "1": 40}}
    assert reader.latestOffset(start, limit) == start  # the first trigger is let go (Spark)
    write_topic(root, "s", 2, 10, first=40)  # 20 new records: fewer than 30
    assert reader.latestOffset(start, limit) == start  # wait
    write_topic(root, "s", 2, 10, first=50)  # 40 new
    assert reader.latestOffset(start, limit) == {"s": {"0": 60, "1": 60}}
    write_topic(root, "s", 2, 1, first=60)
    at_once = stream(root, minOffsetsPerTrigger="30", maxTriggerDelay="0s")
    at_once.latestOffset(start, limit)
    end = {"s": {"0": 60, "1": 60}}
    assert at_once.latestOffset(end, limit) == {"s": {"0": 61, "1": 61}}  # the delay is over


def test_min_and_max_offsets_per_trigger_together(root: Path) -> None:
    reader = stream(root, minOffsetsPerTrigger="10", maxOffsetsPerTrigger="20")
    start = {"s": {"0": 0, "1": 0}}
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == {"s": {"0": 10, "1": 10}}
    assert stream(root, maxOffsetsPerTrigger="20").getDefaultReadLimit() == ReadMaxRows(20)
    assert stream(root).getDefaultReadLimit() == ReadAllAvailable()


def test_max_records_per_partition_splits_input_partitions(spark, root: Path) -> None:
    options = parse_read_options(
        {"path": str(root), "subscribe": "s", "maxRecordsPerPartition": "15"}
    )
    with partition_views(root, options.subscription) as views:
        starts = resolve_offsets(views, options.starting, options, starting=True)
        ends = resolve_offsets(views, options.ending, options, starting=False)
        packs = plan_partitions(views, starts, ends, options)
    pieces = sorted({(s.partition, s.start_offset, s.end_offset) for p in packs for s in p.slices})
    assert pieces == [(p, lo, min(40, lo + 15)) for p in range(2) for lo in (0, 15, 30)]
    assert all(len({(s.start_offset, s.end_offset) for s in p.slices}) == 1 for p in packs)
    rows = read(spark, root, subscribe="s", maxRecordsPerPartition="15").collect()
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in range(2) for o in range(40)
    ]
