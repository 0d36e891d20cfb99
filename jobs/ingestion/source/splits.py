"""Spark's file splits of a source, planned in Python: the arrow task reader's tasks.

Why: the direct mode writes each partition's records in source order, and the range mode breaks
ordering ties by `pos` (Spark's partition index and row index within it). With Spark's reader
the source order is the order of Spark's file splits, so the arrow reader's tasks are those
splits, planned here from the file listing (sizes through pyarrow's file systems) and the
session's settings (`spark.conf`): the same plan from a classic and a Spark Connect session,
with no JVM handle. It is Spark's own packing (`FilePartition`, `PartitionedFileUtil`, 3.5-4.x):

- maxSplitBytes = min(maxPartitionBytes, max(openCostInBytes, bytesPerCore)), bytesPerCore =
  the sum of (file size + openCostInBytes) over the files, divided by
  `spark.sql.files.minPartitionNum`, else `spark.sql.leafNodeDefaultParallelism`, else the
  default parallelism (`jobs.spark.tasks.default_parallelism`);
- every file (Parquet is splittable) is cut into ranges of maxSplitBytes from byte 0, the last
  the remainder; the ranges are sorted by length, longest first (a stable sort);
- next fit decreasing: a range that would take the open partition past maxSplitBytes closes it;
  each range adds its length + openCostInBytes;
- with `spark.sql.files.maxPartitionNum` set and exceeded, the packing is redone with
  maxSplitBytes = ceil(sum of (length + openCostInBytes) / maxPartitionNum).

Spark's stable sort keeps its listing order among ranges of equal length (every full range of
a source larger than maxSplitBytes ties): `plan_splits` takes the files in that order,
`listing_order` gives it for a directory's files (a local directory's own order, as Hadoop's
local file system lists it; an object store's and HDFS's path order) and a Delta snapshot's
files are listed as Spark is given them. Where it can differ: a partitioned table's
directories come in path order here, in Spark's discovery or catalog order there. A bucketed
table that Spark scans by its buckets (`autoBucketedScan` off) has one partition per bucket, its
files whole (`bucket_tasks`). A Parquet split
reads the row groups whose midpoint lies in its byte range (parquet-mr's filter for Spark).

`spark_splits` reads Spark's own plan of a DataFrame through py4j (its file scan's partitions):
not on any job's path (a Connect client cannot see the plan), it is what the tests hold the
Python plan to.

A py4j call costs ~0.1-0.2 ms, and asking each `PartitionedFile` for its path, range and
partition values took ~2.3 ms per file: 7 s of driver time for a table of 3,000 files. So each
partition's files come in one round trip, as Spark renders them (`PartitionedFile.toString`:
"path: <url-encoded path>, range: <start>-<end>, partition values: [<v1>,<v2>]", one per line);
a partition whose text does not parse into exactly its files is asked file by file, and a
rendering of partition values that could mean two rows (a value holding a comma, a string
"null") is read from that file's row.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow.parquet as pq

from jobs.ingestion.source.fs import io_map, open_file_system, split_uri
from jobs.ingestion.source.pieces import FilePiece, file_metadata

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "FileSplit",
    "SplitSettings",
    "bucket_tasks",
    "file_key",
    "joined_strings",
    "listing_order",
    "midpoint_row_groups",
    "plan_splits",
    "planned_tasks",
    "spark_splits",
    "split_settings",
    "split_tasks",
]

_SCAN_CLASS = "FileSourceScanExec"
# Plan nodes whose subtree is not among their children: adaptive execution's wrappers.
_INNER_PLANS = ("inputPlan", "executedPlan", "plan")


@dataclass(frozen=True)
class FileSplit:
    """One file's byte range in one of Spark's partitions (`PartitionedFile`)."""

    path: str  # decoded as `arrow_sources` decodes `inputFiles`
    start: int
    length: int
    file_size: int | None = None  # None: this Spark does not say


def _plan_nodes(plan: Any, name: str) -> list[Any]:
    """The nodes of class `name` (simple name) under a physical plan (py4j objects), in tree
    order; a found node's subtree is not searched."""
    found, stack = [], [plan]
    while stack:
        node = stack.pop()
        if node.getClass().getSimpleName() == name:
            found.append(node)
            continue
        children = [node.children().apply(i) for i in range(node.children().size())]
        if not children:
            for inner_name in _INNER_PLANS:
                inner = getattr(node, inner_name, None)
                try:
                    children = [inner()] if inner is not None else []
                except Exception:  # noqa: BLE001 - py4j: no such method on this node
                    children = []
                if children:
                    break
        stack.extend(reversed(children))
    return found


def _path(file: Any) -> str:
    """A `PartitionedFile`'s path, decoded: Spark 3.4+ names it `urlEncodedPath`, older Sparks
    give `filePath` as that string."""
    try:
        path = str(file.urlEncodedPath())
    except Exception:  # noqa: BLE001 - Spark before 3.4
        path = str(file.filePath())
    return unquote(path)


def _split(file: Any) -> FileSplit:
    """A `PartitionedFile` as a `FileSplit`."""
    try:
        size: int | None = int(file.fileSize())
    except Exception:  # noqa: BLE001 - Spark before 3.3
        size = None
    return FileSplit(_path(file), int(file.start()), int(file.length()), size)


# One `PartitionedFile` as Spark renders it (its toString, Spark 3.x-4.x).
_FILE_TEXT = re.compile(r"path: (.+), range: (\d+)-(\d+), partition values: (.*)")


@dataclass(frozen=True)
class _ScanFile:
    """One file of one of Spark's partitions: its split, Spark's rendering of its partition
    values (None: not rendered), and where to ask for its row (the partition's py4j array)."""

    split: FileSplit
    values_text: str | None
    files: Any
    index: int


def _partition_files(partition: Any, jvm: Any) -> list[_ScanFile]:
    """A partition's files in Spark's order: one py4j round trip for all of them when Spark's
    rendering parses into exactly its files, else one file at a time."""
    files = partition.files()
    count = len(files)
    if count == 0:
        return []
    matches = [_FILE_TEXT.fullmatch(line) for line in joined_strings(jvm, files).split("\n")]
    if len(matches) == count and all(matches):
        return [
            _ScanFile(FileSplit(unquote(m[1]), int(m[2]), int(m[3]) - int(m[2])), m[4], files, i)
            for i, m in enumerate(matches)  # type: ignore[index]
        ]
    return [_ScanFile(_split(files[i]), None, files, i) for i in range(count)]


def joined_strings(jvm: Any, array: Any) -> str:
    """A py4j array's elements as strings (their toString) joined by newlines, in one round
    trip instead of one per element; "" on a JVM without Scala 2.13's `ArraySeq`."""
    try:
        return str(jvm.scala.collection.immutable.ArraySeq.unsafeWrapArray(array).mkString("\n"))
    except Exception:  # noqa: BLE001 - py4j: another Scala
        return ""


def _jvm(df: DataFrame) -> Any:
    """The py4j view of the driver's JVM that `df` lives in."""
    return df.sparkSession.sparkContext._jvm


def _one_scan(df: DataFrame) -> tuple[Any, str]:
    """The one file scan of Spark's plan of `df` (a py4j object), or (None, why not)."""
    scans = _plan_nodes(df._jdf.queryExecution().executedPlan(), _SCAN_CLASS)
    if len(scans) != 1:
        return None, f"Spark's plan of the source has {len(scans)} file scans, not one"
    return scans[0], ""


def _scan_files(df: DataFrame) -> tuple[list[list[_ScanFile]] | None, str]:
    """The files of each of Spark's partitions of `df`'s one file scan, or (None, why not)."""
    scan, why = _one_scan(df)
    if scan is None:
        return None, why
    return _files_of(scan, _jvm(df)), ""


def _files_of(scan: Any, jvm: Any) -> list[list[_ScanFile]]:
    """The files of each of a file scan's partitions (py4j), in Spark's order."""
    return [_partition_files(p, jvm) for p in scan.inputRDD().partitions()]


def spark_splits(df: DataFrame) -> tuple[tuple[tuple[FileSplit, ...], ...] | None, str]:
    """Spark's partitions of this DataFrame's one file scan, each its file splits in Spark's
    order, or (None, why not)."""
    from jobs.spark.tasks import is_connect

    if is_connect(df.sparkSession):
        return None, "a Spark Connect client cannot see Spark's physical plan"
    try:
        partitions, why = _scan_files(df)
    except Exception as error:  # noqa: BLE001 - py4j: a Spark whose classes differ
        return None, f"Spark's file splits could not be read ({type(error).__name__}: {error})"
    if partitions is None:
        return None, why
    return tuple(tuple(f.split for f in files) for files in partitions), ""


def _start_offset(column: pq.ColumnChunkMetaData) -> int:
    """Where a column chunk starts: its dictionary page when that comes first (parquet-mr)."""
    offset = column.data_page_offset
    dictionary = column.dictionary_page_offset
    if dictionary is not None and offset > dictionary:
        return int(dictionary)
    return int(offset)


def midpoint_row_groups(meta: pq.FileMetaData, start: int, length: int) -> tuple[int, ...]:
    """The row groups a Parquet split of [start, start + length) reads: those whose midpoint
    (first column chunk's start + total compressed size // 2) lies in the range, as parquet-mr's
    midpoint filter picks them for Spark (so every row group is read by exactly one split)."""
    groups = []
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        if rg.num_columns == 0:
            continue
        size = sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
        midpoint = _start_offset(rg.column(0)) + size // 2
        if start <= midpoint < start + length:
            groups.append(g)
    return tuple(groups)


def split_tasks(
    splits: Sequence[Sequence[FileSplit]],
) -> tuple[tuple[FilePiece, ...], ...]:
    """The arrow reader's tasks for Spark's partitions: one per partition, in order; a file that
    Spark reads whole is one whole-file piece, a split of a larger one its midpoint row groups
    (a split holding none is left out, as Spark's reads no rows from it)."""
    pieces = Counter(s.path for task in splits for s in task)
    partial = sorted(
        {s.path for task in splits for s in task if not _whole_file(s, pieces[s.path])}
    )
    metas = dict(zip(partial, io_map(file_metadata, partial), strict=True))
    tasks = []
    for task in splits:
        pieces = []
        for s in task:
            meta = metas.get(s.path)
            if meta is None:
                pieces.append(FilePiece(s.path))
                continue
            groups = midpoint_row_groups(meta, s.start, s.length)
            if len(groups) == meta.num_row_groups:
                pieces.append(FilePiece(s.path))
            elif groups:
                pieces.append(FilePiece(s.path, groups))
        tasks.append(tuple(pieces))
    return tuple(tasks)


def _whole_file(split: FileSplit, pieces: int) -> bool:
    """Whether Spark reads `split`'s file whole. Without its size (Spark's rendering does not
    give it), a file in one piece from byte 0: Spark keeps every piece of a file it cuts."""
    if split.start != 0:
        return False
    return pieces == 1 if split.file_size is None else split.length >= split.file_size


def file_key(location: str) -> tuple[str, str, str]:
    """A location's (scheme, authority, path), a plain path and a file: URI alike."""
    parts = split_uri(location)
    if parts is None:
        return "file", "", location
    scheme, authority, path = parts
    return scheme, "" if scheme == "file" else authority, "/" + path.lstrip("/")


@dataclass(frozen=True)
class SplitSettings:
    """The session's settings that shape Spark's file splits (`split_settings`)."""

    max_partition_bytes: int = 128 << 20  # spark.sql.files.maxPartitionBytes
    open_cost_bytes: int = 4 << 20  # spark.sql.files.openCostInBytes
    min_partitions: int = 1  # minPartitionNum, else leafNodeDefaultParallelism / parallelism
    max_partitions: int | None = None  # spark.sql.files.maxPartitionNum


def split_settings(spark: Any) -> SplitSettings:
    """What the session's settings give Spark's file scan (read through `spark.conf`, so a
    classic and a Connect session alike)."""
    from jobs.spark.tasks import byte_setting, count_setting, default_parallelism

    minimum = count_setting(spark, "spark.sql.files.minPartitionNum") or count_setting(
        spark, "spark.sql.leafNodeDefaultParallelism"
    )
    return SplitSettings(
        max_partition_bytes=byte_setting(spark, "spark.sql.files.maxPartitionBytes", 128 << 20),
        open_cost_bytes=byte_setting(spark, "spark.sql.files.openCostInBytes", 4 << 20),
        min_partitions=minimum or default_parallelism(spark),
        max_partitions=count_setting(spark, "spark.sql.files.maxPartitionNum"),
    )


def _packed(
    ranges: Sequence[FileSplit], max_bytes: int, open_cost: int
) -> list[tuple[FileSplit, ...]]:
    """Next fit decreasing over ranges already sorted longest first, as Spark packs them."""
    partitions: list[tuple[FileSplit, ...]] = []
    current: list[FileSplit] = []
    size = 0
    for r in ranges:
        if current and size + r.length > max_bytes:
            partitions.append(tuple(current))
            current, size = [], 0
        current.append(r)
        size += r.length + open_cost
    if current:
        partitions.append(tuple(current))
    return partitions


def plan_splits(
    files: Sequence[str], sizes: Sequence[int], settings: SplitSettings
) -> tuple[tuple[FileSplit, ...], ...]:
    """Spark's partitions of these Parquet files (in listing order, with their sizes in bytes),
    each its file ranges in Spark's order (see the module docstring). Empty files are left out,
    as Spark's listing leaves them out."""
    listed = [(f, s) for f, s in zip(files, sizes, strict=True) if s > 0]
    open_cost = settings.open_cost_bytes
    total = sum(s + open_cost for _, s in listed)
    per_core = total // max(1, settings.min_partitions)
    max_bytes = max(
        1, min(settings.max_partition_bytes, max(open_cost, per_core))
    )  # 0: Spark fails
    ranges = [
        FileSplit(f, start, min(max_bytes, size - start), size)
        for f, size in listed
        for start in range(0, size, max_bytes)
    ]
    ranges.sort(key=lambda r: -r.length)  # stable: listing order among equal lengths
    partitions = _packed(ranges, max_bytes, open_cost)
    limit = settings.max_partitions
    if limit is not None and len(partitions) > limit:
        wanted = -(-sum(r.length + open_cost for r in ranges) // limit)
        partitions = _packed(ranges, wanted, open_cost)
    return tuple(partitions)


def _file_size(location: str) -> int:
    fs, path = open_file_system(location)
    return int(fs.get_file_info(path).size)


_BUCKET_ID = re.compile(r".*_(\d+)(?:\..*)?")  # Spark's `BucketingUtils.getBucketId`, on a name


def bucket_tasks(files: Sequence[str], buckets: int) -> tuple[tuple[FilePiece, ...], ...] | None:
    """The arrow reader's tasks as Spark's bucketed scan's partitions: one per bucket (some
    empty), each its files whole in listing order; None when a file's name has no bucket id
    (Spark refuses to read it)."""
    tasks: list[list[FilePiece]] = [[] for _ in range(buckets)]
    for f in files:
        found = _BUCKET_ID.fullmatch(f.rpartition("/")[2])
        if found is None or int(found[1]) >= buckets:
            return None
        tasks[int(found[1])].append(FilePiece(f))
    return tuple(tuple(t) for t in tasks)


def listing_order(files: Sequence[str]) -> list[str]:
    """`files` in the order Hadoop's file systems list them, Spark's order among ranges of equal
    length: a local directory in its own order (readdir, as Hadoop's local file system lists it
    and `os.listdir` does), directories and other file systems (object stores, HDFS: sorted
    listings) in path order."""
    ordered = sorted(files)
    local = [f for f in ordered if open_file_system(f)[0].type_name == "local"]
    if not local:
        return ordered
    where: dict[str, tuple[str, int]] = {}
    listings: dict[str, dict[str, int]] = {}
    for f in local:
        path = open_file_system(f)[1]
        parent, _, name = path.rpartition("/")
        if parent not in listings:
            try:
                listings[parent] = {n: i for i, n in enumerate(os.listdir(parent or "/"))}
            except OSError:
                listings[parent] = {}
        where[f] = (parent, listings[parent].get(name, -1))
    return sorted(ordered, key=lambda f: where.get(f, (f, 0)))


def planned_tasks(
    files: Sequence[str], settings: SplitSettings
) -> tuple[tuple[FilePiece, ...], ...]:
    """The arrow reader's tasks for these files (in listing order): Spark's partitions as
    `plan_splits` plans them, each split its midpoint row groups (`split_tasks`)."""
    sizes = io_map(_file_size, list(files))
    return split_tasks(plan_splits(files, sizes, settings))
