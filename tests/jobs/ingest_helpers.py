"""Shared builders for the ingest job tests: sources, configs, an independent reader, snapshots.

The reader is kafka-python's `MemoryRecords` over each `.log` file (not our decoder), and the
partition oracle is kafka-python's murmur2, so a bug shared by our encoder and decoder, or by
our partitioner and its tests, cannot hide.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from kafka.partitioner.default import murmur2 as kp_murmur2
from kafka.record.memory_records import MemoryRecords

from kafkalog_core.root.meta_area import meta_root

BASE_TS = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
BASE_MS = int(BASE_TS.timestamp() * 1000)

RECORD_SCHEMA = (
    "topic string, partition int, offset long, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>, timestamp long"
)

SOURCE_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("topic", pa.string()),
        ("user", pa.string()),
        ("payload", pa.binary()),
        ("event_time", pa.timestamp("us", tz="UTC")),
        ("attrs", pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))),
        ("part", pa.int32()),
    ]
)

# §11 vectors (KAFKA_LOG_FACTS.md): key -> partition of 10.
VECTOR_KEYS = {"foobar": 6, "abc": 7, "21": 0, "a-little-bit-longer-string": 9}


def kp_partition(key: bytes, partitions: int) -> int:
    """kafka-python's DefaultPartitioner arithmetic: toPositive(murmur2(key)) % n."""
    return (kp_murmur2(key) & 0x7FFFFFFF) % partitions


def source_rows(
    n: int,
    *,
    start_id: int = 0,
    topic: str | None = "events",
    users: int = 40,
    hot_user: str | None = None,
    seed: int = 7,
    start_ms: int = BASE_MS,
) -> list[dict[str, Any]]:
    """Deterministic rows: keys with repeats, tombstones, headers (some null values), ties in time.

    event_time advances by 0..3 s per row with some equal neighbours, so `ordering: [event_time,
    id]` has ties that only the second expression breaks. Payload sizes vary 0..300 bytes.
    """
    rng = random.Random(seed + start_id)
    rows = []
    ms = start_ms
    for i in range(start_id, start_id + n):
        ms += rng.choice((0, 0, 1000, 2000, 3000))
        if hot_user is not None and rng.random() < 0.9:
            user = hot_user
        else:
            user = f"user-{rng.randrange(users)}"
        payload = (
            None if i % 97 == 5 else bytes(rng.randrange(256) for _ in range(rng.randrange(300)))
        )
        attrs = [{"key": "seq", "value": str(i)}]
        if i % 5 == 0:
            attrs.append({"key": "maybe", "value": None})
        rows.append(
            {
                "id": i,
                "topic": topic,
                "user": user,
                "payload": payload,
                "event_time": dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc),
                "attrs": attrs,
                "part": i % 3,
            }
        )
    return rows


def write_parquet(path: Path, rows: list[dict[str, Any]], *, files: int = 1) -> Path:
    """Rows as `files` Parquet files in directory `path` (row order kept across file names)."""
    path.mkdir(parents=True, exist_ok=True)
    per = -(-len(rows) // files)
    for f in range(files):
        chunk = rows[f * per : (f + 1) * per]
        if chunk:
            pq.write_table(
                pa.Table.from_pylist(chunk, schema=SOURCE_SCHEMA), path / f"part-{f:03d}.parquet"
            )
    return path


def two_sources(base: Path, n_a: int, n_b: int, *, files: int) -> dict:
    """Sources A and B for incremental runs: B's ids and times follow A's (an hour later)."""
    rows_a = source_rows(n_a)
    rows_b = source_rows(n_b, start_id=n_a, start_ms=BASE_MS + 3_600_000)
    return {
        "a": rows_a,
        "b": rows_b,
        "path_a": write_parquet(base / "a", rows_a, files=files),
        "path_b": write_parquet(base / "b", rows_b, files=files),
    }


def config_doc(
    source: str | dict,
    root: Path,
    *,
    topics: dict | None = None,
    mapping: dict | None = None,
    ordering: Any = ("event_time", "id"),
    reject_path: str | None = None,
) -> dict:
    """An ingest config document (what a YAML file holds)."""
    src = {"format": "parquet", "path": str(source)} if isinstance(source, (str, Path)) else source
    return {
        "source": src,
        "output": {"root": str(root), "reject_path": reject_path},
        "topics": topics
        or {
            "events": {
                "partitions": 5,
                "config": {"segment.bytes": 16384, "index.interval.bytes": 1024},
            }
        },
        "mapping": {
            "topic": "events",
            "key": {"column": "user", "format": "string"},
            "value": {"column": "payload"},
            "headers": {"column": "attrs", "values": {"src": "'web'"}},
            "timestamp": {"column": "event_time"},
            **(mapping or {}),
        },
        "ordering": list(ordering) if isinstance(ordering, (list, tuple)) else ordering,
    }


# one topic of 3 partitions, 1 MiB segments: the topic of the source-order tests
SOURCE_ORDER_PARTITIONS = {"events": 3}
SOURCE_ORDER_TOPICS = {"events": {"partitions": 3, "config": {"segment.bytes": 1 << 20}}}


def source_order_doc(
    source: str | dict | Path,
    root: Path,
    task_reader: str = "auto",
    *,
    headers: bool = True,
    **kw: Any,
) -> dict:
    """A config document whose records keep their source order (`ordering: source`), read by
    `task_reader`; `headers=False` drops the header column the arrow reader cannot take."""
    kw.setdefault("topics", SOURCE_ORDER_TOPICS)
    doc = config_doc(source, root, ordering="source", **kw)
    if not headers:
        del doc["mapping"]["headers"]
    doc["source"]["task_reader"] = task_reader
    return doc


def expected_records(
    rows: list[dict[str, Any]], partitions: dict[str, int], leo=None, *, in_order: bool = False
) -> list[tuple]:
    """What the log must hold for `rows`: murmur2 (kafka-python) partition, offsets by
    (event_time, id) per partition (or in the order given, `in_order`) continuing from `leo`
    ({(topic, p): offset})."""
    out = []
    placed: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        key = r["user"].encode()
        tp = (r["topic"], kp_partition(key, partitions[r["topic"]]))
        placed.setdefault(tp, []).append(r)
    for tp, group in sorted(placed.items()):
        if not in_order:
            group.sort(key=lambda r: (r["event_time"], r["id"]))
        first = (leo or {}).get(tp, 0)
        for offset, r in enumerate(group, start=first):
            headers = [
                (h["key"], None if h["value"] is None else h["value"].encode()) for h in r["attrs"]
            ]
            headers.append(("src", b"web"))
            out.append(
                (
                    tp[0],
                    tp[1],
                    offset,
                    r["user"].encode(),
                    r["payload"],
                    [{"key": k, "value": v} for k, v in headers],
                    int(r["event_time"].timestamp() * 1000),
                )
            )
    return out


def segment_files(pdir: Path, ext: str = "log") -> list[Path]:
    return sorted(pdir.glob(f"*.{ext}"))


def read_partition(pdir: Path) -> tuple[list[tuple], list[Any]]:
    """(records, batches) of a partition dir through kafka-python, segments in offset order.

    records: (offset, key, value, headers, timestamp); every batch's CRC is validated and every
    segment's name must be its first batch's base offset.
    """
    records, batches = [], []
    for log in segment_files(pdir):
        data = log.read_bytes()
        mr = MemoryRecords(data)
        first = True
        while mr.has_next():
            batch = mr.next_batch()
            assert batch.validate_crc(), f"{log}: bad CRC at offset {batch.base_offset}"
            if first:
                assert int(log.name[:20]) == batch.base_offset, f"{log}: name vs base offset"
                first = False
            batches.append(batch)
            for rec in batch:
                records.append(
                    (
                        rec.offset,
                        rec.key,
                        rec.value,
                        [(k, v) for k, v in rec.headers],
                        rec.timestamp,
                    )
                )
    return records, batches


def read_root(root: Path) -> list[tuple]:
    """Every record under a log dir as rows of RECORD_SCHEMA, sorted by (topic, partition, offset)."""
    out = []
    for pdir in sorted(p for p in root.iterdir() if p.is_dir()):
        topic, _, part = pdir.name.rpartition("-")
        records, _ = read_partition(pdir)
        for offset, key, value, headers, ts in records:
            out.append(
                (
                    topic,
                    int(part),
                    offset,
                    None if key is None else bytes(key),
                    None if value is None else bytes(value),
                    [{"key": k, "value": None if v is None else bytes(v)} for k, v in headers],
                    ts,
                )
            )
    return sorted(out, key=lambda r: (r[0], r[1], r[2]))


def spark_read_order(
    spark, path: Path, rows: list[dict[str, Any]], partitions: int = 3
) -> tuple[list[dict[str, Any]], dict[str, set[int]]]:
    """The rows in Spark's read order (the source order of the Spark reader: splits in Spark's
    order, which is not file-name order), and per `events-<p>` dir the offsets where a later
    split's rows begin (key `user`, `partitions` partitions)."""
    from pyspark.sql import functions as F

    by_id = {r["id"]: r for r in rows}
    read = spark.read.parquet(str(path)).select(F.spark_partition_id().alias("split"), "id")
    ordered: list[dict[str, Any]] = []
    starts: dict[str, set[int]] = {}
    seen: dict[str, int] = {}
    last_split: dict[str, int] = {}
    for split, row_id in read.collect():
        r = by_id[row_id]
        ordered.append(r)
        name = f"events-{kp_partition(r['user'].encode(), partitions)}"
        if last_split.get(name, split) != split:
            starts.setdefault(name, set()).add(seen[name])
        last_split[name] = split
        seen[name] = seen.get(name, 0) + 1
    return ordered, starts


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under `root` (directories included as markers)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def staging_leftovers(root: Path) -> list[str]:
    base = meta_root(root) / "staging"
    return sorted(str(p.relative_to(base)) for p in base.rglob("*")) if base.exists() else []


# What `ingest_serially` imports: a kill test's forkserver preloads it once for every child.
SERIAL_PRELOAD = ("jobs.ingest", "pyspark", "pyarrow.dataset")
HISTORY_FILES = r"/ingest-history/"  # the Delta history, compared by rows, not by bytes


def kill_case_doc(
    source: Path,
    logs: Path,
    write_mode: str,
    reader: str,
    segment_bytes: int,
    direct_tasks: str = "auto",
) -> dict:
    """The ingest config of a kill case's run (`source`: its Parquet dir): 3 partitions of
    small segments, in `write_mode` (range: ordering [event_time, id]; direct: the source's)
    with the task `reader` and the arrow reader's `direct_tasks`, plain columns only (the arrow
    reader's)."""
    ordering = ("event_time", "id") if write_mode == "range" else "source"
    topics = {"events": {"partitions": 3, "config": {"segment.bytes": segment_bytes}}}
    doc = config_doc(source, logs, topics=topics, ordering=ordering)
    del doc["mapping"]["headers"]  # the arrow reader takes plain columns only
    doc["source"]["task_reader"] = reader
    doc["output"]["write_mode"] = write_mode
    if direct_tasks != "auto":
        doc["output"]["direct_tasks"] = direct_tasks
    return doc


# spark.sql.files.maxPartitionBytes of the `small_splits` fixture and the kill cases' runs: a
# split per (few KB) test file, so a run has several tasks and the direct mode's layouts differ
# (on one task slot Spark packs two such files into one split by default)
SMALL_SPLIT_BYTES = 2000


def ingest_serially(config_file: str, run_id: str, tasks: int | None, now: str) -> None:
    """The ingest job's run of a YAML config without a JVM (`tests.serial_spark.SerialSpark`,
    with `SMALL_SPLIT_BYTES`, as the kill cases' references): the arrow task reader of a
    Parquet source only. For kill tests' forked runs."""
    import yaml

    from jobs.ingest import run
    from jobs.ingestion.config.ingest_config import IngestConfig
    from jobs.maintenance.common import parse_now
    from tests.serial_spark import SerialSpark

    doc = yaml.safe_load(Path(config_file).read_text())
    spark = SerialSpark({"spark.sql.files.maxPartitionBytes": str(SMALL_SPLIT_BYTES)})
    run(
        spark,  # type: ignore[arg-type]
        IngestConfig.from_dict(doc),
        run_id=run_id,
        tasks=tasks,
        now_ms=parse_now(now),
        out=lambda *_: None,
    )
