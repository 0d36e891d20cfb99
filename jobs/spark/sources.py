"""Source tables for the jobs: Delta (Spark's Delta source or delta-rs), Parquet, JSON, CSV, catalog.

`SourceSpec` is the `source:` block of a job config. `check_source_exists` resolves the source on
the driver (path / table / Delta log / columns) so a typo is one clear `ConfigError` line before
any Spark job runs; `read_source` returns the DataFrame plus a description and, for Delta, the
pinned table version (recorded by the job so a retry reads the same snapshot).

Delta reader choice (`delta_reader`): `spark` when the session has the Delta extension, else
`delta-rs` (see `jobs.spark.delta`); `auto` (default) picks by `has_delta_extension`.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import date, datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from jobs.spark.change_feed import read_changes_deltars, read_changes_spark
from jobs.spark.delta import (
    load_snapshot,
    open_table,
    read_delta_with_deltars,
    resolve_timestamp_version,
    rows_since_version,
)
from jobs.spark.session import has_delta_extension
from kafkalog_core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "FORMATS",
    "DataInterval",
    "SourceRead",
    "SourceSpec",
    "check_source_exists",
    "delta_reader_for",
    "read_source",
]

FORMATS = ("delta", "parquet", "json", "csv", "table")
DELTA_READERS = ("auto", "spark", "delta-rs")
CHANGES = ("cdf",)  # what source.changes may name (unset: the rows of one version)
TASK_READERS = ("auto", "spark", "arrow")


def _fail(setting: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"{setting}={value!r} is invalid: {why}")


def _opt_int(raw: Mapping[str, Any], key: str, where: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value))
        except ValueError:
            raise _fail(f"{where}.{key}", value, "must be an int >= 0") from None
    if value < 0:
        raise _fail(f"{where}.{key}", value, "must be an int >= 0")
    return value


def _opt_str(raw: Mapping[str, Any], key: str, where: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or str(value) == "":
        raise _fail(f"{where}.{key}", value, "must be a non-empty string")
    return str(value)


@dataclass(frozen=True)
class DataInterval:
    """Airflow's data interval as a half-open filter: start <= column < end (either optional)."""

    column: str
    start: str | None = None
    end: str | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "source.interval") -> DataInterval:
        if not isinstance(raw, Mapping):
            raise _fail(where, raw, "must be a mapping with column, start, end")
        unknown = sorted(set(raw) - {"column", "start", "end"})
        if unknown:
            raise ConfigError(f"{where}: unknown setting(s) {unknown}; known: column, start, end")
        column = _opt_str(raw, "column", where)
        if column is None:
            raise ConfigError(f"{where}.column is required (the column the interval filters on)")
        return cls(column, _opt_str(raw, "start", where), _opt_str(raw, "end", where))


@dataclass(frozen=True)
class SourceSpec:
    """Where the rows come from and which of them (the `source:` block of a job config)."""

    format: str  # delta | parquet | json | csv | table
    path: str | None = None  # file/dir/glob, or a Delta table directory / URI
    table: str | None = None  # catalog table name (format table, or delta with the extension)
    options: Mapping[str, str] = field(default_factory=dict)  # passed to the Spark reader
    schema: str | None = None  # DDL schema for json/csv (skips inference)
    version: int | None = None  # Delta time travel: this version
    timestamp: str | None = None  # Delta time travel: latest version at or before this instant
    since_version: int | None = None  # Delta incremental: rows added (or changes) after it
    # cdf: the Delta Change Data Feed after the last ingested version (jobs.spark.change_feed)
    changes: str | None = None
    filter: str | None = None  # SQL predicate applied after reading
    interval: DataInterval | None = None  # data-interval filter (Airflow)
    delta_reader: str = "auto"  # auto | spark | delta-rs
    # who reads the rows in the ingest's tasks: Spark, or pyarrow straight from the files
    # (arrow: see jobs.ingestion.source.arrow_reader for what qualifies); auto = arrow when it can
    task_reader: str = "auto"

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "source") -> SourceSpec:
        """Parse and validate a `source:` mapping; every problem names its setting."""
        if not isinstance(raw, Mapping):
            raise _fail(where, raw, "must be a mapping")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown setting(s) {unknown}; known: {sorted(known)}")
        fmt = str(raw.get("format", "")).lower()
        if fmt not in FORMATS:
            raise _fail(f"{where}.format", raw.get("format"), f"must be one of {list(FORMATS)}")
        options = raw.get("options") or {}
        if not isinstance(options, Mapping):
            raise _fail(f"{where}.options", options, "must be a mapping of reader options")
        interval = raw.get("interval")
        reader = str(raw.get("delta_reader", "auto")).lower()
        if reader not in DELTA_READERS:
            raise _fail(f"{where}.delta_reader", reader, f"must be one of {list(DELTA_READERS)}")
        changes = raw.get("changes")
        if changes is not None and str(changes).lower() not in CHANGES:
            raise _fail(f"{where}.changes", changes, f"must be one of {list(CHANGES)} or unset")
        task_reader = str(raw.get("task_reader", "auto")).lower()
        if task_reader not in TASK_READERS:
            raise _fail(f"{where}.task_reader", task_reader, f"must be one of {list(TASK_READERS)}")
        spec = cls(
            format=fmt,
            path=_opt_str(raw, "path", where),
            table=_opt_str(raw, "table", where),
            options={str(k): _option_value(v) for k, v in options.items()},
            schema=_opt_str(raw, "schema", where),
            version=_opt_int(raw, "version", where),
            timestamp=_opt_str(raw, "timestamp", where),
            since_version=_opt_int(raw, "since_version", where),
            changes=None if changes is None else str(changes).lower(),
            filter=_opt_str(raw, "filter", where),
            interval=None if interval is None else DataInterval.from_dict(interval),
            delta_reader=reader,
            task_reader=task_reader,
        )
        spec.validate(where)
        return spec

    def validate(self, where: str = "source") -> None:
        """Cross-field rules (what a format allows)."""
        if self.format == "table":
            if not self.table or self.path:
                raise ConfigError(f"{where}: format table needs 'table' (a catalog name), no path")
        elif self.format == "delta":
            if bool(self.path) == bool(self.table):
                raise ConfigError(f"{where}: format delta needs exactly one of 'path' or 'table'")
        elif not self.path or self.table:
            raise ConfigError(f"{where}: format {self.format} needs 'path' (and no table)")
        if self.format != "delta":
            for name in ("version", "timestamp", "since_version", "changes"):
                if getattr(self, name) is not None:
                    what = "the change data feed" if name == "changes" else "time travel"
                    raise ConfigError(
                        f"{where}.{name}: {what} applies only to format delta, not {self.format}"
                    )
        if self.version is not None and self.timestamp is not None:
            raise ConfigError(f"{where}: set at most one of version and timestamp")
        if (
            self.since_version is not None
            and self.version is not None
            and self.since_version > self.version
        ):
            raise ConfigError(
                f"{where}.since_version={self.since_version} is after "
                f"{where}.version={self.version}"
            )
        if self.schema is not None and self.format not in ("json", "csv"):
            raise ConfigError(f"{where}.schema applies only to json and csv sources")
        if self.timestamp is not None:
            _parse_instant(self.timestamp, f"{where}.timestamp")

    @property
    def location(self) -> str:
        return str(self.path if self.path is not None else self.table)


def _option_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _parse_instant(text: str, setting: str) -> datetime:
    """ISO-8601 (a trailing Z allowed); naive values are UTC."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise _fail(
            setting, text, "must be an ISO-8601 instant, e.g. 2024-05-01T00:00:00Z"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value


@dataclass(frozen=True)
class SourceRead:
    """What a job got: the rows, a one-line description for logs, the pinned Delta version."""

    df: DataFrame
    description: str
    version: int | None = None


# ---------------------------------------------------------------------------------------------
# Existence checks (driver only)


def delta_reader_for(spark: SparkSession, spec: SourceSpec) -> str:
    """'spark' or 'delta-rs': which Delta reader this spec uses in this SparkSession."""
    if spec.delta_reader == "spark":
        if not has_delta_extension(spark):
            raise ConfigError(
                "source.delta_reader=spark needs the Delta extension in the session "
                "(spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension and its jars)"
            )
        return "spark"
    if spec.delta_reader == "delta-rs":
        return "delta-rs"
    return "spark" if has_delta_extension(spark) else "delta-rs"


def _path_exists(spark: SparkSession, path: str) -> bool:
    """Whether a source path (a glob allowed) names anything, through pyarrow's file system for
    its scheme (`jobs.ingestion.source.fs`). A scheme pyarrow cannot open here is asked of
    Hadoop's FileSystem on a classic session; a Spark Connect client leaves it to the read."""
    from jobs.ingestion.source.fs import open_file_system

    try:
        fs, inner = open_file_system(path)
    except Exception:  # noqa: BLE001 - a scheme this pyarrow does not open
        return _hadoop_path_exists(spark, path)
    if isinstance(fs, pafs.LocalFileSystem):
        return bool(glob.glob(inner))
    if glob.has_magic(inner):
        return True  # no glob on an object store here: Spark's read says what is missing
    try:
        return fs.get_file_info(inner).type != pafs.FileType.NotFound
    except OSError:  # refused here (credentials, network): Spark's read, where it runs, says
        return True


def _hadoop_path_exists(spark: SparkSession, path: str) -> bool:
    """Through Hadoop's FileSystem (HDFS, s3a, abfs, ...) so globs work as Spark reads them;
    True (the read will say) on a Spark Connect client, which has no JVM at hand."""
    from jobs.spark.tasks import is_connect

    if is_connect(spark):
        return True
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    statuses = fs.globStatus(hpath)
    return statuses is not None and len(statuses) > 0


def _spark_delta_ident(spec: SourceSpec) -> str:
    if spec.table:
        return spec.table
    return "delta.`" + str(spec.path).replace("`", "``") + "`"


def _analysis_error(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _source_schema(spark: SparkSession, spec: SourceSpec) -> StructType:
    """Resolve the source and return its schema; ConfigError when it does not exist."""
    from pyspark.errors import AnalysisException

    where = f"source.{'table' if spec.table else 'path'}={spec.location!r}"
    if spec.format == "table" or (spec.format == "delta" and spec.table):
        if spec.format == "delta" and delta_reader_for(spark, spec) != "spark":
            raise ConfigError(
                f"{where}: Delta tables by name need the Delta Spark extension; without it, "
                "give the table's path (source.path) to read it through delta-rs"
            )
        if not spark.catalog.tableExists(str(spec.table)):
            raise ConfigError(f"{where}: no such table in the catalog")
        try:
            return spark.table(str(spec.table)).schema
        except AnalysisException as e:
            raise ConfigError(f"{where}: {_analysis_error(e)}") from None
    if spec.format == "delta":
        if delta_reader_for(spark, spec) == "delta-rs":
            from pyspark.sql.pandas.types import from_arrow_schema

            snapshot = load_snapshot(str(spec.path), spec.version, spec.timestamp)
            return from_arrow_schema(snapshot.schema)
        if not _path_exists(spark, os.path.join(str(spec.path), "_delta_log")):
            raise ConfigError(f"{where}: no Delta table there (no _delta_log)")
        try:
            return spark.read.format("delta").load(str(spec.path)).schema
        except AnalysisException as e:
            raise ConfigError(f"{where}: {_analysis_error(e)}") from None
    if not _path_exists(spark, str(spec.path)):
        raise ConfigError(f"{where}: path does not exist")
    try:
        return _file_reader(spark, spec).schema
    except AnalysisException as e:
        raise ConfigError(f"{where}: {_analysis_error(e)}") from None


def check_source_exists(
    spark: SparkSession, spec: SourceSpec, required_columns: Sequence[str] = ()
) -> StructType:
    """Fail fast: the path/table exists and has every required column. Returns the schema.

    Runs on the driver only (file listing, Delta log, catalog); JSON/CSV without a `schema`
    infer one, which Spark does with a small job.
    """
    schema = _source_schema(spark, spec)
    needed = list(required_columns)
    if spec.interval is not None:
        needed.append(spec.interval.column)
    names = {f.name.lower(): f.name for f in schema.fields}
    for column in needed:
        top = column.split(".", 1)[0].strip("`")
        if top.lower() not in names:
            raise ConfigError(
                f"column {column!r} not found in source {spec.location!r}; "
                f"available: {', '.join(f.name for f in schema.fields)}"
            )
    return schema


# ---------------------------------------------------------------------------------------------
# Reading


def _file_reader(spark: SparkSession, spec: SourceSpec) -> DataFrame:
    reader = spark.read.format(spec.format).options(**dict(spec.options))
    if spec.format == "csv" and "header" not in spec.options:
        reader = reader.option("header", "true")
    if spec.schema:
        reader = reader.schema(spec.schema)
    return reader.load(str(spec.path))


def _spark_delta_version(spark: SparkSession, spec: SourceSpec) -> int:
    """Pin the version to read: given, resolved from a timestamp, or the latest."""
    from pyspark.sql import functions as F

    if spec.version is not None:
        return spec.version
    history = spark.sql(f"DESCRIBE HISTORY {_spark_delta_ident(spec)}")
    if spec.timestamp is not None:
        instant = _parse_instant(spec.timestamp, "source.timestamp")
        history = history.where(F.col("timestamp") <= F.lit(instant))
    row = history.agg(F.max("version").alias("v")).collect()[0]
    if row["v"] is None:
        raise ConfigError(
            f"source.timestamp={spec.timestamp!r} is before the first commit of {spec.location!r}"
        )
    return int(row["v"])


_REMOVING_OPERATIONS_OK = ("OPTIMIZE", "REORG", "VACUUM START", "VACUUM END")


def _read_delta_spark(spark: SparkSession, spec: SourceSpec) -> tuple[DataFrame, int]:
    """Spark's Delta source at a pinned version; since_version through the change data feed."""
    from pyspark.sql import functions as F

    ident = _spark_delta_ident(spec)
    version = _spark_delta_version(spark, spec)
    if spec.since_version is None:
        return spark.sql(f"SELECT * FROM {ident} VERSION AS OF {version}"), version
    if spec.since_version > version:
        raise ConfigError(
            f"source.since_version={spec.since_version} is after the table's version {version}"
        )
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {ident}").collect()}
    if str(props.get("delta.enableChangeDataFeed", "false")).lower() != "true":
        raise ConfigError(
            f"source.since_version with Spark's Delta source needs the change data feed "
            f"(ALTER TABLE ... SET TBLPROPERTIES (delta.enableChangeDataFeed = true)) on "
            f"{spec.location!r}; or read it through delta-rs (source.delta_reader: delta-rs)"
        )
    history = spark.sql(f"DESCRIBE HISTORY {ident}").where(
        (F.col("version") > spec.since_version) & (F.col("version") <= version)
    )
    removing = (
        history.where(~F.col("operation").isin(*_REMOVING_OPERATIONS_OK))
        .where(
            (F.coalesce(F.col("operationMetrics")["numRemovedFiles"].cast("long"), F.lit(0)) > 0)
            | (
                F.coalesce(
                    F.col("operationMetrics")["numDeletionVectorsAdded"].cast("long"), F.lit(0)
                )
                > 0
            )
        )
        .orderBy("version")
        .select("version", "operation")
        .limit(1)
        .collect()
    )
    if removing:
        raise ConfigError(
            f"source.since_version={spec.since_version}: version {removing[0]['version']} "
            f"({removing[0]['operation']}) removed or changed rows, so 'rows since version "
            f"{spec.since_version}' is ill-defined; run a full read instead, or ingest the "
            "changes as upserts and tombstones (source.changes: cdf)"
        )
    reader = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", spec.since_version + 1)
        .option("endingVersion", version)
    )
    changes = reader.table(spec.table) if spec.table else reader.load(str(spec.path))
    if spec.since_version == version:
        changes = changes.limit(0)
    inserts = changes.where(F.col("_change_type") == "insert").drop(
        "_change_type", "_commit_version", "_commit_timestamp"
    )
    return inserts, version


def _read_changes(
    spark: SparkSession, spec: SourceSpec, reader: str, scratch: str | os.PathLike[str] | None
) -> tuple[DataFrame, int]:
    """The change data feed after `since_version` (from version 0 when unset) up to the pinned
    version (`jobs.spark.change_feed`); delta-rs stages it in `scratch`."""
    if reader == "spark":
        version = _spark_delta_version(spark, spec)
    elif spec.timestamp is not None:
        version = resolve_timestamp_version(str(spec.path), spec.timestamp)
    else:
        version = int(open_table(str(spec.path), spec.version).version())
    since = spec.since_version
    if since is not None and since > version:
        raise ConfigError(
            f"source: the changes after version {since} (since_version, or the last version "
            f"ingested) cannot be read at version {version} of {spec.location!r}"
        )
    first = 0 if since is None else since + 1
    if reader == "spark":
        return read_changes_spark(spark, spec.path, spec.table, first, version), version
    if scratch is None:
        raise ConfigError("source.changes=cdf through delta-rs needs a staging directory")
    return read_changes_deltars(spark, str(spec.path), first, version, scratch), version


def _interval_literal(value: str, dtype, setting: str) -> Column:
    """The interval bound as a literal of the column's type, parsed on the driver."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        instant = _parse_instant(value, setting)
        if isinstance(dtype, T.TimestampNTZType):
            return F.lit(instant.astimezone(timezone.utc).replace(tzinfo=None)).cast(
                "timestamp_ntz"
            )
        return F.lit(instant)
    if isinstance(dtype, T.DateType):
        try:
            return F.lit(date.fromisoformat(value[:10]))
        except ValueError:
            raise _fail(setting, value, "must be an ISO date for a date column") from None
    if isinstance(dtype, (T.IntegralType,)):
        try:
            return F.lit(int(value)).cast(dtype)
        except ValueError:
            raise _fail(
                setting, value, f"must be an integer for a {dtype.simpleString()} column"
            ) from None
    if isinstance(dtype, T.StringType):
        return F.lit(value)
    raise ConfigError(
        f"{setting}: interval column type {dtype.simpleString()} is not supported "
        "(use timestamp, date, integer or string)"
    )


def _apply_filters(df: DataFrame, spec: SourceSpec) -> DataFrame:
    from pyspark.errors import AnalysisException, ParseException
    from pyspark.sql import functions as F

    if spec.filter:
        try:
            df = df.where(F.expr(spec.filter))
        except (AnalysisException, ParseException) as e:
            raise ConfigError(f"source.filter={spec.filter!r}: {_analysis_error(e)}") from None
    if spec.interval is not None:
        iv = spec.interval
        try:
            field_ = df.schema[iv.column]
        except (KeyError, LookupError):
            raise ConfigError(
                f"source.interval.column={iv.column!r} not found in source {spec.location!r}"
            ) from None
        column = F.col(f"`{iv.column}`")
        if iv.start is not None:
            df = df.where(
                column >= _interval_literal(iv.start, field_.dataType, "source.interval.start")
            )
        if iv.end is not None:
            df = df.where(
                column < _interval_literal(iv.end, field_.dataType, "source.interval.end")
            )
    return df


def read_source(
    spark: SparkSession,
    spec: SourceSpec,
    required_columns: Sequence[str] = (),
    scratch: str | os.PathLike[str] | None = None,
) -> SourceRead:
    """Check, then read the source with its filters applied; the Delta version is pinned.

    `scratch`: a directory every executor sees, for what a read stages (the change data feed
    through delta-rs)."""
    check_source_exists(spark, spec, required_columns)
    version: int | None = None
    if spec.format == "delta":
        reader = delta_reader_for(spark, spec)
        if spec.changes == "cdf":
            df, version = _read_changes(spark, spec, reader, scratch)
        elif reader == "spark":
            df, version = _read_delta_spark(spark, spec)
        elif spec.since_version is not None:
            df, version = rows_since_version(
                spark, str(spec.path), spec.since_version, spec.version, spec.timestamp
            )
        else:
            df, version = read_delta_with_deltars(
                spark, str(spec.path), spec.version, spec.timestamp
            )
        since = ""
        if spec.changes == "cdf":
            after = "" if spec.since_version is None else f" after version {spec.since_version}"
            since = f" changes{after}"
        elif spec.since_version is not None:
            since = f" rows added after version {spec.since_version}"
        description = f"delta {spec.location} @ version {version}{since} (via {reader})"
    elif spec.format == "table":
        df = spark.table(str(spec.table))
        description = f"table {spec.table}"
    else:
        df = _file_reader(spark, spec)
        description = f"{spec.format} {spec.path}"
    df = _apply_filters(df, spec)
    if spec.filter:
        description += f" where {spec.filter}"
    if spec.interval is not None:
        iv = spec.interval
        description += f" [{iv.column} in [{iv.start or '-inf'}, {iv.end or '+inf'}))"
    return SourceRead(df, description, version)
