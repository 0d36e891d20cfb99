"""spark.read.format("kafkalog"): rows, bounds, bytes read, transactions, fixtures, corruption."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, LessThan

from jobs.datasource import scan
from jobs.datasource.options import DataSourceOptionError, parse_read_options
from jobs.datasource.reader import KafkaLogFilteringReader, KafkaLogReader
from kafkalog_core.errors import CorruptRecordError, OffsetOutOfRangeError
from kafkalog_core.log.names import log_file_name
from kafkalog_core.record.batch import iter_batch_headers
from kafkalog_core.record.control import ControlRecordType, build_end_txn_marker_batch
from kafkalog_core.record.encoder import Record, build_batch
from tests.datasource.helpers import BASE_TS, oracle, read, records_table, write_topic

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("logdir")
    write_topic(root, "orders", 2, 300)
    write_topic(root, "other", 1, 40)
    return root


def test_read_after_write_equals_the_source_rows(spark, log_dir: Path) -> None:
    df = read(spark, log_dir, subscribe="orders", includeHeaders="true")
    assert [f.name for f in df.schema] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"
    ]  # fmt: skip
    assert len(list((log_dir / "orders-0").glob("*.log"))) > 3  # several segments
    got = df.select("key", "value", "headers", F.col("timestamp").cast("long").alias("ts"))
    source = [
        records_table(p, 0, 300).to_pylist() for p in range(2)
    ]  # the rows PartitionLog was given
    expected = spark.createDataFrame(
        [
            (r["key"], r["value"], r["headers"], r["timestamp"] // 1000)
            for rows in source
            for r in rows
        ],
        "key binary, value binary, headers array<struct<key: string, value: binary>>, ts long",
    )
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_offset_and_timestamp_bounds_match_kafka_python(spark, log_dir: Path) -> None:
    expected_all = oracle(log_dir / "orders-1")
    df = read(
        spark,
        log_dir,
        assign='{"orders": [1]}',
        startingOffsets='{"orders": {"1": 37}}',
        endingOffsets='{"orders": {"1": 211}}',
    )
    got = [(r.offset, r.key, r.value) for r in df.orderBy("offset").collect()]
    assert got == [(o, k, v) for o, _, k, v in expected_all if 37 <= o < 211]

    t0, t1 = BASE_TS + 100_500, BASE_TS + 250_000  # ListOffsets: first record with ts >= T
    start = next(o for o, ts, _, _ in expected_all if ts >= t0)
    end = next(o for o, ts, _, _ in expected_all if ts >= t1)
    df = read(
        spark, log_dir, assign='{"orders": [1]}', startingTimestamp=str(t0), endingTimestamp=str(t1)
    )
    offsets = [r.offset for r in df.orderBy("offset").collect()]
    assert offsets == [o for o, _, _, _ in expected_all if start <= o < end]


def test_narrow_read_touches_only_its_bytes(log_dir: Path) -> None:
    total = sum(f.stat().st_size for f in (log_dir / "orders-0").glob("*.log"))
    seen: list[int] = []
    scan.set_read_hook(lambda path, a, b: seen.append(b - a))
    try:
        options = parse_read_options(
            {
                "path": str(log_dir),
                "assign": '{"orders": [0]}',
                "startingOffsets": '{"orders": {"0": 150}}',
                "endingOffsets": '{"orders": {"0": 153}}',
            }
        )
        reader = KafkaLogReader(options)
        rows = [b for part in reader.partitions() for b in reader.read(part)]
        assert sum(b.num_rows for b in rows) == 3
        assert 0 < sum(seen) <= 0.1 * total, (sum(seen), total)

        # the same through pushed-down filters on a whole-topic read
        seen.clear()
        reader = KafkaLogFilteringReader(
            parse_read_options({"path": str(log_dir), "subscribePattern": "ord.*"})
        )
        filters = [
            EqualTo(("partition",), 0),
            GreaterThanOrEqual(("offset",), 150),
            LessThan(("offset",), 153),
        ]
        assert list(reader.pushFilters(filters)) == []
        rows = [b for part in reader.partitions() for b in reader.read(part)]
        assert [o for b in rows for o in b.column("offset").to_pylist()] == [150, 151, 152]
        assert 0 < sum(seen) <= 0.1 * total
    finally:
        scan.set_read_hook(None)


def test_pushed_filters_through_spark(spark, log_dir: Path) -> None:
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = read(spark, log_dir, subscribePattern=".*").where(
            "topic = 'orders' and partition = 1 and offset > 280 "
            f"and timestamp >= timestamp_millis({BASE_TS + 290_000})"
        )
        assert sorted(r.offset for r in df.collect()) == list(range(290, 300))
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    # without pushdown the same query still works (Spark filters)
    df = read(spark, log_dir, subscribe="orders").where("partition = 1 and offset > 297")
    assert sorted(r.offset for r in df.collect()) == [298, 299]


def _batch(base: int, n: int, **header: object) -> bytes:
    return build_batch(
        [Record(i, BASE_TS + base + i, b"k", b"v%d" % (base + i)) for i in range(n)],
        base_offset=base,
        **header,
    )


def _marker(base: int, producer_id: int, kind: ControlRecordType) -> bytes:
    return build_end_txn_marker_batch(
        base_offset=base,
        producer_id=producer_id,
        producer_epoch=0,
        coordinator_epoch=0,
        control_type=kind,
        timestamp=BASE_TS,
    )


def test_read_committed_hides_aborted_and_open_transactions(spark, tmp_path: Path) -> None:
    txn = {"producer_id": 7, "producer_epoch": 0, "is_transactional": True}
    other = {"producer_id": 8, "producer_epoch": 0, "is_transactional": True}
    d = tmp_path / "t-0"
    d.mkdir()
    (d / log_file_name(0)).write_bytes(
        _batch(0, 2)  # 0-1 plain
        + _batch(2, 2, **txn)  # 2-3 aborted
        + _batch(4, 1, **other)  # 4 committed
        + _marker(5, 7, ControlRecordType.ABORT)
        + _marker(6, 8, ControlRecordType.COMMIT)
    )
    (d / log_file_name(7)).write_bytes(
        _batch(7, 1) + _batch(8, 2, **txn) + _batch(10, 1)  # 8-9 still open at the end
    )
    uncommitted = sorted(r.offset for r in read(spark, tmp_path, subscribe="t").collect())
    assert uncommitted == [0, 1, 2, 3, 4, 7, 8, 9, 10]  # markers are never returned
    committed = read(spark, tmp_path, subscribe="t", **{"isolation.level": "read_committed"})
    assert sorted(r.offset for r in committed.collect()) == [0, 1, 4, 7]  # LSO = 8


def test_reads_real_broker_log_dirs(spark, fixtures_dir: Path) -> None:
    root = fixtures_dir / "logdirs/confluent-5.1.2"  # every topic, internal ones included
    df = read(spark, root, subscribePattern=".*")
    got: dict[tuple[str, int], list[int]] = {}
    for r in df.select("topic", "partition", "offset").collect():
        got.setdefault((r.topic, r.partition), []).append(r.offset)
    dirs = [d for d in sorted(root.iterdir()) if d.is_dir()]
    assert len(dirs) > 100
    for d in dirs:
        topic, partition = d.name.rsplit("-", 1)
        expected = [offset for offset, _, _, _ in oracle(d)]
        assert sorted(got.get((topic, int(partition)), [])) == expected, d.name

    segments = fixtures_dir / "segments/broker-2x-interval4096"
    got = read(spark, segments, subscribe="test_topic_a").orderBy("offset").collect()
    expected = oracle(segments / "test_topic_a-0")
    assert [(r.offset, r.key, r.value) for r in got] == [(o, k, v) for o, _, k, v in expected]


def test_corrupt_batch_fails_or_warns(spark, log_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "copy"
    shutil.copytree(log_dir / "other-0", root / "other-0")
    log = next((root / "other-0").glob("*.log"))
    log.chmod(log.stat().st_mode | stat.S_IWUSR)
    data = bytearray(log.read_bytes())
    last = list(iter_batch_headers(data))[-1]
    data[last.position + 70] ^= 0xFF  # inside the last batch's records: its CRC breaks
    log.write_bytes(bytes(data))
    with pytest.raises(Exception, match=r"other-0.*\.log.*position \d+"):
        read(spark, root, subscribe="other").collect()

    options = parse_read_options(
        {"path": str(root), "subscribe": "other", "failOnDataLoss": "false"}
    )
    reader = KafkaLogReader(options)
    with pytest.warns(UserWarning, match="position"):
        rows = [b for part in reader.partitions() for b in reader.read(part)]
    offsets = [o for b in rows for o in b.column("offset").to_pylist()]
    assert last.base_offset == len(offsets) and offsets == list(range(len(offsets)))
    with pytest.raises(CorruptRecordError, match="failOnDataLoss"):
        KafkaLogReader(parse_read_options({"path": str(root), "subscribe": "other"})).read(
            reader.partitions()[0]
        ).__next__()


def _read_in_process(options: dict[str, str], filters: list | None = None) -> tuple[list, list]:
    """(offsets read, byte ranges read) of a reader planned and run in this process."""
    seen: list[tuple[str, int, int]] = []
    scan.set_read_hook(lambda path, a, b: seen.append((path, a, b)))
    try:
        reader = KafkaLogFilteringReader(parse_read_options(options))
        if filters is not None:
            assert list(reader.pushFilters(filters)) == []
        packs = reader.partitions()
        offsets = [o for p in packs for b in reader.read(p) for o in b.column("offset").to_pylist()]
    finally:
        scan.set_read_hook(None)
    return offsets, seen


def test_min_partitions_splits_segments_at_index_entries(log_dir: Path) -> None:
    base = {"path": str(log_dir), "assign": '{"orders": [0]}'}
    whole, _ = _read_in_process(base)
    split, ranges = _read_in_process({**base, "minPartitions": "40"})
    assert sorted(split) == whole == list(range(300))  # nothing lost, nothing twice
    per_file: dict[str, int] = {}
    for path, _, _ in ranges:
        per_file[path] = per_file.get(path, 0) + 1
    assert max(per_file.values()) > 1  # a segment was cut into several byte ranges
    reader = KafkaLogReader(parse_read_options({**base, "minPartitions": "40"}))
    assert len(reader.partitions()) >= 20


def test_timestamp_filter_skips_older_bytes_through_the_time_index(log_dir: Path) -> None:
    import datetime as dt

    total = sum(f.stat().st_size for f in (log_dir / "orders-0").glob("*.log"))
    since = dt.datetime.fromtimestamp((BASE_TS + 280_000) / 1000)  # naive local, as Spark hands it
    offsets, ranges = _read_in_process(
        {"path": str(log_dir), "assign": '{"orders": [0]}'},
        [GreaterThanOrEqual(("timestamp",), since)],
    )
    assert offsets == list(range(280, 300))
    assert sum(b - a for _, a, b in ranges) <= 0.2 * total


def test_per_partition_timestamps_and_the_no_match_strategy(log_dir: Path) -> None:
    expected = {p: oracle(log_dir / f"orders-{p}") for p in range(2)}
    t_start = {0: BASE_TS + 10_000, 1: BASE_TS + 200_200}
    t_end = {0: BASE_TS + 20_000, 1: BASE_TS + 10**9}  # partition 1: no record -> latest
    offsets, _ = _read_in_process(
        {
            "path": str(log_dir),
            "subscribe": "orders",
            "startingOffsetsByTimestamp": f'{{"orders": {{"0": {t_start[0]}, "1": {t_start[1]}}}}}',
            "endingOffsetsByTimestamp": f'{{"orders": {{"0": {t_end[0]}, "1": {t_end[1]}}}}}',
        }
    )
    want = []
    for p in range(2):
        rows = expected[p]
        start = next(o for o, ts, _, _ in rows if ts >= t_start[p])
        end = next((o for o, ts, _, _ in rows if ts >= t_end[p]), rows[-1][0] + 1)
        want += [o for o, _, _, _ in rows if start <= o < end]
    assert sorted(offsets) == sorted(want)
    assert len(offsets) == 10 + 99  # 10..19 and 201..299

    late = {"path": str(log_dir), "subscribe": "other", "startingTimestamp": str(BASE_TS + 10**9)}
    with pytest.raises(DataSourceOptionError, match="startingTimestamp"):
        _read_in_process(late)
    offsets, _ = _read_in_process({**late, "startingOffsetsByTimestampStrategy": "latest"})
    assert offsets == []


def test_a_segment_removed_after_planning_is_data_loss(log_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(log_dir / "orders-1", tmp_path / "orders-1")
    options = {"path": str(tmp_path), "subscribe": "orders", "minPartitions": "50"}
    reader = KafkaLogReader(parse_read_options(options))
    packs = reader.partitions()
    first_log = Path(packs[0].slices[0].log_path)
    first_log.rename(first_log.with_suffix(".log.deleted"))  # what retention does
    with pytest.raises(OffsetOutOfRangeError, match="removed since the read was planned"):
        list(reader.read(packs[0]))
    lenient = KafkaLogReader(parse_read_options({**options, "failOnDataLoss": "false"}))
    with pytest.warns(UserWarning, match="removed"):
        assert list(lenient.read(packs[0])) == []
    # planned again, the listing no longer has that segment and the rest reads in full
    offsets = [
        o
        for p in lenient.partitions()
        for b in lenient.read(p)
        for o in b.column("offset").to_pylist()
    ]
    kept = sorted(f for f in (tmp_path / "orders-1").glob("*.log"))
    assert offsets and offsets[0] == int(kept[0].name.split(".")[0])
