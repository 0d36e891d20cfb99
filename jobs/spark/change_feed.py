"""A Delta table's Change Data Feed as the rows an ingest run writes (`source.changes: cdf`).

A run reads the changes of the versions after one (exclusive: the last version ingested, or
`since_version`) up to the pinned target version. The rows are the table's columns plus Delta's
three: `_change_type` (insert, update_postimage, delete), `_commit_version` (bigint) and
`_commit_timestamp` (timestamp, the commit's time), from either reader:

* Spark's Delta source (`readChangeFeed`) when the session has the Delta extension;
* delta-rs (`DeltaTable.load_cdf`) otherwise. It reads on the driver, so its batches are streamed
  into one Parquet file in the run's staging (`scratch`, a directory every executor sees) and
  Spark reads that: the driver holds one batch at a time, whatever the range's size.

Both readers keep the `update_preimage` rows: whether an update's old key is gone (a key change)
is known only once the mapping's key is computed (`gone_keys_as_deletes`, stage 1 of the
mapping). What a delete becomes (a tombstone: the key, a null value) and the order within a run
(`CHANGE_ORDERING`, then the configured ordering) are the mapping's and the config's.

Every version of the range must record the feed (`delta.enableChangeDataFeed = true` in that
version's metadata), or its changes are not in the log: refused before reading, naming the
property, as Delta's own reader refuses such a range (delta-rs checks only some versions). And
every file the range's changes are read from must still be there (`check_feed_files_present`):
a VACUUM removes them, and the readers would fail deep in the read; refused naming the versions
and the way out, a full load of the latest version and the feed from there.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

import pyarrow as pa

from jobs.spark.delta import open_table, table_root
from kafkalog_core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "CHANGE_COLUMNS",
    "CHANGE_ORDERING",
    "CHANGE_TYPE",
    "COMMIT_TIMESTAMP",
    "COMMIT_VERSION",
    "DELETE",
    "FEED_PROPERTY",
    "check_feed_files_present",
    "check_feed_recorded",
    "gone_keys_as_deletes",
    "read_changes_deltars",
    "read_changes_spark",
]

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
CHANGE_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
DELETE = "delete"
INSERT = "insert"
PREIMAGE = "update_preimage"
POSTIMAGE = "update_postimage"
FEED_PROPERTY = "delta.enableChangeDataFeed"

# Offsets within a run: by commit version, a version's deletes before its inserts (an overwrite
# or a key's replacement deletes and inserts the same key in one commit: the insert is what the
# table holds after it), then the configured ordering.
CHANGE_ORDERING = (COMMIT_VERSION, f"CASE WHEN {CHANGE_TYPE} = '{DELETE}' THEN 0 ELSE 1 END")

_CHANGE_FIELDS = (
    pa.field(CHANGE_TYPE, pa.string()),
    pa.field(COMMIT_VERSION, pa.int64()),
    pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC")),
)
FEED_FILE = "changes.parquet"


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def check_feed_recorded(location: str, first: int, last: int) -> None:
    """Refuse when a version in [first, last] of the table at `location` did not record its
    changes: its metadata (the one in effect after that commit) lacks the feed property."""
    if first > last:
        return
    table = open_table(location, first)
    for version in range(first, last + 1):
        if version > first:
            table.load_as_version(version)
        configuration = table.metadata().configuration or {}
        if str(configuration.get(FEED_PROPERTY, "false")).lower() != "true":
            raise ConfigError(
                f"source.changes=cdf: Delta table {location!r} has no change data for version "
                f"{version} (changes of versions {first}-{last} asked for); set the table "
                f"property {FEED_PROPERTY} = true (ALTER TABLE ... SET TBLPROPERTIES), which "
                "records the changes of later versions, and start after it (--since-version)"
            )


def check_feed_files_present(location: str, first: int, last: int) -> None:
    """Refuse when a version in [first, last] of the table at `location` lost the files its
    changes are read from (a VACUUM removed them): its `cdc` files, or, for a version without
    any, the data files it added or removed. One line naming the versions and the way out."""
    import json

    import pyarrow.fs as pafs

    if first > last:
        return
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+://", location):
        fs, root = pafs.FileSystem.from_uri(location)
    else:
        fs, root = pafs.LocalFileSystem(), str(Path(location).absolute())
    root = root.rstrip("/")
    wanted: dict[str, int] = {}  # file -> the first version in the range that reads it
    for version in range(first, last + 1):
        try:
            with fs.open_input_stream(f"{root}/_delta_log/{version:020d}.json") as commit:
                actions = [json.loads(line) for line in commit.read().splitlines() if line]
        except (OSError, ValueError):
            continue  # a commit delta-rs or Delta cannot load either: their error says so
        cdc = [a["cdc"]["path"] for a in actions if "cdc" in a]
        data = [
            a[kind]["path"]
            for a in actions
            for kind in ("add", "remove")
            if kind in a and a[kind].get("dataChange", True)
        ]
        for file in cdc or data:
            if "://" not in file:
                wanted.setdefault(f"{root}/{unquote(file)}", version)
    if not wanted:
        return
    infos = fs.get_file_info(list(wanted))
    gone = sorted({wanted[i.path] for i in infos if i.type == pafs.FileType.NotFound})
    if gone:
        raise ConfigError(
            f"source.changes=cdf: the change data of version(s) {_versions(gone)} of Delta "
            f"table {location!r} is gone (its files were vacuumed); load version {last} in full "
            f"(--version {last}, without changes: cdf), then go on with changes: cdf from there "
            f"(--since-version {last})"
        )


def _versions(versions: list[int]) -> str:
    """`0-3, 7`: sorted versions as runs."""
    runs: list[list[int]] = []
    for v in versions:
        if runs and runs[-1][1] == v - 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def feed_schema(table_schema: pa.Schema) -> pa.Schema:
    """The rows' schema: the table's columns, then Delta's three change columns."""
    return pa.schema([*table_schema, *_CHANGE_FIELDS])


def read_changes_deltars(
    spark: SparkSession, path: str, first: int, last: int, scratch: str | Path
) -> DataFrame:
    """The changes of versions [first, last] through delta-rs, staged as Parquet in `scratch`
    (emptied first: a rerun of a killed run writes it again) and read by Spark."""
    from deltalake.exceptions import DeltaError
    from pyspark.sql.pandas.types import from_arrow_schema

    table = open_table(path, last)
    schema = feed_schema(pa.schema(table.schema().to_arrow()))
    spark_schema = from_arrow_schema(schema)
    if first > last:
        return spark.createDataFrame([], spark_schema)
    check_feed_recorded(path, first, last)
    check_feed_files_present(path, first, last)
    import pyarrow.parquet as pq

    target = Path(scratch)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    try:
        stream = pa.RecordBatchReader.from_stream(
            table.load_cdf(starting_version=first, ending_version=last)
        )
        with pq.ParquetWriter(target / FEED_FILE, schema) as writer:
            for batch in stream:
                if batch.num_rows:
                    writer.write_batch(_conformed(batch, schema))
    except (DeltaError, pa.ArrowException, OSError) as error:
        check_feed_files_present(path, first, last)  # vacuumed while being read
        raise ConfigError(
            f"source.changes=cdf: cannot read the change data of Delta table {path!r}, "
            f"versions {first}-{last}: {_first_line(error)}"
        ) from None
    return spark.read.schema(spark_schema).parquet(str(target))


def _conformed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A feed batch in the target version's schema: delta-rs's view types cast to plain ones, a
    column added after the batch's version null (as Delta reads an older file)."""
    columns = []
    for field in schema:
        index = batch.schema.get_field_index(field.name)
        if index < 0:
            columns.append(pa.nulls(batch.num_rows, field.type))
        else:
            columns.append(batch.column(index).cast(field.type))
    return pa.record_batch(columns, schema=schema)


def read_changes_spark(
    spark: SparkSession, path: str | None, table: str | None, first: int, last: int
) -> DataFrame:
    """The changes of versions [first, last] through Spark's Delta source (by path or name)."""
    from pyspark.sql import functions as F

    ident = table if table else "delta.`" + str(path).replace("`", "``") + "`"
    if first > last:
        empty = spark.sql(f"SELECT * FROM {ident} VERSION AS OF {last}").limit(0)
        return empty.select(
            "*",
            F.lit(None).cast("string").alias(CHANGE_TYPE),
            F.lit(None).cast("bigint").alias(COMMIT_VERSION),
            F.lit(None).cast("timestamp").alias(COMMIT_TIMESTAMP),
        )
    location = path if path else spark.sql(f"DESCRIBE DETAIL {ident}").collect()[0]["location"]
    check_feed_recorded(_deltars_location(str(location)), first, last)
    check_feed_files_present(_deltars_location(str(location)), first, last)
    reader = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", first)
        .option("endingVersion", last)
    )
    return reader.table(table) if table else reader.load(str(path))


def gone_keys_as_deletes(changes: DataFrame, key: Column) -> tuple[DataFrame, Column]:
    """The change rows with each update's preimage resolved by its record `key`: a preimage whose
    key has neither a postimage nor an insert in the same commit version is a key that version
    removed (an UPDATE or MERGE that changed the key), so it becomes a delete (a tombstone, as
    Debezium writes for a primary key change); every other preimage is dropped (the update's
    record is its postimage). Returns the rows and their key as a column of them.

    Keys compare null-safe: a keyless mapping's updates keep nothing of their preimages. Only the
    (version, key) pairs of inserts and postimages are exchanged to find the gone keys, not the
    rows."""
    from pyspark.sql import functions as F

    key_column, version, kept_key = "_kl_change_key", "_kl_kept_version", "_kl_kept_key"
    rows = changes.withColumn(key_column, key)
    kind = F.col(CHANGE_TYPE)
    preimages = rows.where(kind == PREIMAGE)
    others = rows.where(~F.coalesce(kind == PREIMAGE, F.lit(False)))
    kept = others.where(kind.isin(INSERT, POSTIMAGE)).select(
        F.col(COMMIT_VERSION).alias(version), F.col(key_column).alias(kept_key)
    )
    same = (F.col(COMMIT_VERSION) == F.col(version)) & F.col(key_column).eqNullSafe(F.col(kept_key))
    gone = preimages.join(kept, same, "left_anti").withColumn(CHANGE_TYPE, F.lit(DELETE))
    return others.unionByName(gone), F.col(key_column)


def _deltars_location(location: str) -> str:
    """A table location as Spark names it, as delta-rs opens it (a local path, or s3://)."""
    if location.startswith("file:"):
        return table_root(location)
    if location.startswith("s3a://"):
        return "s3://" + location[len("s3a://") :]
    return location
