"""`option("view", "segments")`: a row per segment, every value checked against the files.

The expected values come from the files themselves: names and sizes from the file system,
records, offsets and timestamps from kafka-python's decoder, index entries from the raw bytes.
The log dir mixes our writer's segments (one with a preallocated, zero-padded offset index), a
2.x broker's partition with its indexes, a 5.1 broker's partition without any, and a magic 1
gzip message set.
"""

from __future__ import annotations

import shutil
import struct
from datetime import datetime
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from jobs.datasource.options import (
    DataSourceOptionError,
    parse_read_options,
    parse_segments_options,
)
from kafkalog_core.log.names import log_file_name
from tests.datasource.helpers import write_topic

PADDING_ENTRIES = 5  # zero entries a broker preallocates after the real ones


def _log_dir(tmp_path: Path, fixtures_dir: Path) -> tuple[Path, int]:
    """The mixed log dir, and the entry count of the offset index that gets zero padding."""
    root = tmp_path / "logs"
    write_topic(root, "ours", 2, 120)
    index = root / "ours-0" / "00000000000000000000.index"
    entries = len(index.read_bytes()) // 8
    with index.open("ab") as f:
        f.write(bytes(8 * PADDING_ENTRIES))
    shutil.copytree(
        fixtures_dir / "segments/broker-2x-interval4096/test_topic_a-0", root / "broker2x-0"
    )
    shutil.copytree(
        fixtures_dir / "logdirs/confluent-5.1.2/docker-connect-status-0", root / "status-3"
    )
    (root / "legacy-0").mkdir()
    blob = fixtures_dir / "batches/kafkago_v1c_v1c.records.bin"
    (root / "legacy-0" / log_file_name(0)).write_bytes(blob.read_bytes())
    return root, entries


def _index_entries(path: Path, entry_size: int, relative_at: int) -> int | None:
    """Entries before the first zero-padding entry (relative offset 0 after the first)."""
    if not path.exists():
        return None
    data = path.read_bytes()
    count = len(data) // entry_size
    for i in range(1, count):
        if struct.unpack_from(">i", data, i * entry_size + relative_at)[0] == 0:
            return i
    return count


def _time(ms: int | None) -> datetime | None:
    """As PySpark's collect() gives a timestamp: naive, in this process's local time."""
    return (
        None
        if ms is None
        else datetime.fromtimestamp(ms // 1000).replace(microsecond=ms % 1000 * 1000)
    )


def _expected(topic: str, partition: int, log: Path) -> dict:
    batches = []
    records = MemoryRecords(log.read_bytes())
    while records.has_next():
        batch = records.next_batch()
        rows = list(batch)
        if batch.magic >= 2:
            max_ts = batch.max_timestamp
        else:
            max_ts = max(r.timestamp if r.timestamp is not None else -1 for r in rows)
        count = len(rows) if batch.magic >= 2 or batch.compression_type == 0 else None
        batches.append((rows[-1].offset, max_ts, count))
    base = int(log.name[:20])
    stamps = [ts for _, ts, _ in batches if ts >= 0]
    counts = [n for _, _, n in batches]
    stat = log.stat()
    return {
        "topic": topic,
        "partition": partition,
        "baseOffset": base,
        "nextOffset": batches[-1][0] + 1 if batches else base,
        "size": stat.st_size,
        "batches": len(batches),
        "records": None if None in counts else sum(counts),
        "firstBatchTimestamp": _time(batches[0][1]) if stamps else None,
        "maxTimestamp": _time(max(stamps)) if stamps else None,
        "lastModified": _time(stat.st_mtime_ns // 10**6),
        "offsetIndexEntries": _index_entries(log.with_suffix(".index"), 8, 0),
        "timeIndexEntries": _index_entries(log.with_suffix(".timeindex"), 12, 8),
    }


@pytest.mark.spark
def test_a_row_per_segment_with_what_the_files_say(
    spark, tmp_path: Path, fixtures_dir: Path
) -> None:
    root, padded_entries = _log_dir(tmp_path, fixtures_dir)
    df = spark.read.format("kafkalog").option("view", "segments").load(str(root))
    assert df.columns == list(_expected("t", 0, next(root.glob("ours-0/*.log"))))
    got = sorted(
        (r.asDict() for r in df.collect()),
        key=lambda r: (r["topic"], r["partition"], r["baseOffset"]),
    )

    expected = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        topic, _, partition = d.name.rpartition("-")
        for log in sorted(d.glob("*.log")):
            expected.append(_expected(topic, int(partition), log))
    expected.sort(key=lambda r: (r["topic"], r["partition"], r["baseOffset"]))
    assert got == expected

    by_dir = {(r["topic"], r["partition"]): [] for r in got}
    for r in got:
        by_dir[(r["topic"], r["partition"])].append(r)
    ours = by_dir[("ours", 0)]
    assert len(ours) == 3 and ours[0]["offsetIndexEntries"] == padded_entries > 0
    assert sum(r["records"] for r in ours) == 120
    assert len(by_dir[("broker2x", 0)]) == 40
    assert all(r["offsetIndexEntries"] is None for r in by_dir[("status", 3)])  # never copied
    assert by_dir[("legacy", 0)][0]["records"] is None  # gzip wrappers hide their counts
    assert by_dir[("legacy", 0)][0]["nextOffset"] > 0


@pytest.mark.spark
def test_partitions_are_chosen_as_for_records(spark, tmp_path: Path, fixtures_dir: Path) -> None:
    root, _ = _log_dir(tmp_path, fixtures_dir)

    def chosen(**options: str) -> set[tuple[str, int]]:
        reader = spark.read.format("kafkalog").option("view", "segments")
        for name, value in options.items():
            reader = reader.option(name, value)
        return {(r.topic, r.partition) for r in reader.load(str(root)).collect()}

    assert chosen(subscribe="ours") == {("ours", 0), ("ours", 1)}
    assert chosen(subscribePattern="b.*|s.*") == {("broker2x", 0), ("status", 3)}
    assert chosen(assign='{"ours": [1], "legacy": [0]}') == {("ours", 1), ("legacy", 0)}


def test_options_that_do_not_apply_are_refused() -> None:
    everything = parse_segments_options({"path": "/x", "VIEW": "Segments"})
    assert everything.subscription.matches("any", 7)
    with pytest.raises(DataSourceOptionError, match="startingOffsets.*does not apply"):
        parse_segments_options({"path": "/x", "view": "segments", "startingOffsets": "earliest"})
    with pytest.raises(DataSourceOptionError, match="view='rows'.*records or segments"):
        parse_segments_options({"path": "/x", "view": "rows"})
    with pytest.raises(DataSourceOptionError, match="segments view with spark.read"):
        parse_read_options({"path": "/x", "subscribe": "t", "view": "segments"}, streaming=True)
    assert parse_read_options({"path": "/x", "subscribe": "t", "view": "records"})
