"""Small log dirs for the data source tests, and kafka-python as the independent oracle."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
from kafka.record.memory_records import MemoryRecords

from kafkalog_core.config import LogConfig
from kafkalog_core.log import PartitionLog

BASE_TS = 1_700_000_000_000
SMALL_SEGMENTS = LogConfig.from_dict(
    {"segment.bytes": "2000", "index.interval.bytes": "300", "max.message.bytes": "200"}
)


def records_table(partition: int, first: int, n: int) -> pa.Table:
    """n records with keys, values, one header each, timestamps one second apart."""
    idx = range(first, first + n)
    return pa.table(
        {
            "key": pa.array([b"k%d" % i for i in idx]),
            "value": pa.array([b"value-%d-%d" % (partition, i) for i in idx]),
            "timestamp": pa.array([BASE_TS + i * 1000 for i in idx], pa.int64()),
            "headers": pa.array(
                [[{"key": "h", "value": b"%d" % i}] for i in idx],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )


def write_topic(root: Path, topic: str, partitions: int, n: int, first: int = 0) -> None:
    """Append n records to every partition of `topic` (created when missing)."""
    for p in range(partitions):
        d = root / f"{topic}-{p}"
        log = (
            PartitionLog.open(d, SMALL_SEGMENTS, had_clean_shutdown=True)
            if d.exists()
            else PartitionLog.create(d, SMALL_SEGMENTS)
        )
        log.append_records(records_table(p, first, n))
        log.close()


def read(spark, root: Path, **options: str):
    """spark.read.format("kafkalog") of `root` with these options."""
    reader = spark.read.format("kafkalog")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load(str(root))


def oracle(partition_dir: Path) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of every data record, decoded by kafka-python."""
    rows = []
    for f in sorted(partition_dir.glob("*.log")):
        records = MemoryRecords(f.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            if getattr(batch, "is_control_batch", False):
                continue
            rows.extend((r.offset, r.timestamp, r.key, r.value) for r in batch)
    return rows


def driver_command(module: str, *args: object) -> list[str]:
    """The command line of a test driver program (`python -m module args...`)."""
    return [sys.executable, "-m", module, *map(str, args)]
