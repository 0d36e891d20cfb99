"""Delta tables without the Delta Spark extension: delta-rs reads the log, Spark reads the files.

delta-rs (`deltalake`) resolves the snapshot on the driver (version, live data files, partition
values, schema) and Spark scans exactly those Parquet files. Three things make that correct:

* The snapshot is pinned once (`DeltaSnapshot`), so a concurrent writer cannot change what a run
  reads, and the version can be recorded for an idempotent retry.
* Partition columns live in the log, not in the files. `spark.read.parquet(*files)` drops them
  (or, with partition discovery, re-infers their types from directory names). We scan all files in
  one Parquet relation, take each row's file from Spark's hidden `_metadata.file_path` and
  broadcast-join a small (file -> typed partition values) table built from delta-rs's Arrow add
  actions, so values keep the Delta schema's types exactly (dates, timestamps, decimals, nulls).
  A file that fails to match raises inside the job instead of silently losing rows.
* Tables whose files do not mean what they say without extra log information (deletion vectors,
  column mapping, type widening, unknown reader features) are refused with a clear `ConfigError`.

`rows_since_version` defines "rows since version v" for incremental runs: the rows of the pinned
snapshot that live in data files added after v. It is well defined only when no file of the
snapshot at v was removed since (no delete, update, merge, overwrite or optimize touched old
data); otherwise the run is refused, naming the first version that removed data.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DeltaFile",
    "DeltaSnapshot",
    "load_snapshot",
    "open_table",
    "read_delta_with_deltars",
    "read_snapshot",
    "resolve_timestamp_version",
    "rows_since_version",
    "table_root",
]

# Reader features whose files Spark's plain Parquet reader still reads correctly.
# deletionVectors is refused separately (with its own advice); variantType is set by delta-rs on
# every table with table features, and a variant column (if any) fails loudly in Spark's schema.
_SAFE_READER_FEATURES = frozenset(
    {"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck", "variantType", "variantType-preview"}
)

# Hidden columns used while joining partition values; never visible in the result.
_FILE_KEY = "__kafkalog_file_key"
_MATCHED = "__kafkalog_file_matched"


@dataclass(frozen=True)
class DeltaFile:
    """One live data file of a snapshot: where Spark reads it and its typed partition values."""

    uri: str  # absolute path/URI as handed to Spark (decoded, i.e. the real file name)
    partition_values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DeltaSnapshot:
    """A table version pinned on the driver: everything Spark needs to read exactly it."""

    table_uri: str
    version: int
    schema: pa.Schema  # logical schema, partition columns included, in table column order
    partition_columns: tuple[str, ...]
    files: tuple[DeltaFile, ...]  # sorted by uri: the same input gives the same Spark splits
    partition_table: pa.Table  # one row per file: uri + typed partition columns

    @property
    def data_schema(self) -> pa.Schema:
        """The columns stored in the Parquet files (everything but the partition columns)."""
        keep = [f for f in self.schema if f.name not in self.partition_columns]
        return pa.schema(keep)


# ---------------------------------------------------------------------------------------------
# Snapshot on the driver


def open_table(path: str, version: int | None = None):  # -> deltalake.DeltaTable
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    try:
        return DeltaTable(path, version=version)
    except TableNotFoundError:
        raise ConfigError(f"source.path={path!r}: no Delta table there (no _delta_log)") from None
    except DeltaError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        if version is not None:
            raise ConfigError(
                f"source.version={version}: cannot load version {version} of Delta table "
                f"{path!r}: {first}"
            ) from None
        raise ConfigError(f"source.path={path!r}: cannot open Delta table: {first}") from None


def _check_readable(dt, path: str) -> None:
    """Refuse tables whose Parquet files alone do not give the table's rows."""
    protocol = dt.protocol()
    configuration = dt.metadata().configuration or {}
    features = set(protocol.reader_features or ())
    mode = str(configuration.get("delta.columnMapping.mode", "none")).lower()
    if mode != "none" or "columnMapping" in features:
        raise ConfigError(
            f"source.path={path!r}: Delta table uses column mapping (delta.columnMapping.mode="
            f"{mode}); its Parquet column names differ from the table's, so it can only be read "
            "through Spark's Delta source (enable io.delta.sql.DeltaSparkSessionExtension)"
        )
    if "deletionVectors" in features:
        raise ConfigError(
            f"source.path={path!r}: Delta table has the deletionVectors reader feature; deleted "
            "rows would be read back without the Delta Spark extension. Enable "
            "io.delta.sql.DeltaSparkSessionExtension, or purge them (REORG TABLE ... APPLY "
            "(PURGE)) and drop the feature"
        )
    if any(f.startswith("typeWidening") for f in features):
        raise ConfigError(
            f"source.path={path!r}: Delta table uses type widening (reader feature "
            "typeWidening); older files hold narrower types than the schema, so it can only be "
            "read through Spark's Delta source"
        )
    unknown = sorted(features - _SAFE_READER_FEATURES)
    if unknown:
        raise ConfigError(
            f"source.path={path!r}: Delta reader features {unknown} are not supported without "
            "the Delta Spark extension"
        )
    if protocol.min_reader_version > 3:
        raise ConfigError(
            f"source.path={path!r}: Delta minReaderVersion={protocol.min_reader_version} is "
            "newer than this reader supports (3)"
        )


def table_root(path: str) -> str:
    """The table location in the form Spark expects: absolute local path, or the URI as given."""
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        local = parsed.path if parsed.scheme == "file" else path
        return os.path.abspath(local)
    if parsed.scheme == "s3":  # delta-rs speaks s3://, Hadoop's S3 connector is s3a://
        return "s3a" + path[2:].rstrip("/")
    return path.rstrip("/")


def _file_location(root: str, log_path: str) -> str:
    """Absolute location of a data file from its (URI-encoded) path in the Delta log."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", log_path):  # absolute URI (shallow clones)
        parsed = urlparse(log_path)
        if parsed.scheme == "file":
            return unquote(parsed.path)
        return table_root(unquote(log_path))
    return root.rstrip("/") + "/" + unquote(log_path)


def _to_utc(ts: datetime | str) -> datetime:
    if isinstance(ts, str):
        try:
            ts = datetime.fromisoformat(ts.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(
                f"source.timestamp={ts!r} is invalid: must be ISO-8601, e.g. 2024-05-01T12:00:00Z"
            ) from None
    if ts.tzinfo is None:  # naive timestamps are UTC, like Delta's commit timestamps
        ts = ts.replace(tzinfo=timezone.utc)
    return ts.astimezone(timezone.utc)


def resolve_timestamp_version(path: str, timestamp: datetime | str) -> int:
    """Delta's timestamp time travel: the latest version committed at or before `timestamp`.

    Resolved from the commit history ourselves, because delta-rs silently falls back to the
    first version for a timestamp before the table existed.
    """
    ts_ms = int(_to_utc(timestamp).timestamp() * 1000)
    dt = open_table(path)
    commits = [(int(h["version"]), int(h["timestamp"])) for h in dt.history() if "version" in h]
    if not commits:
        raise ConfigError(f"source.timestamp: Delta table {path!r} has no readable history")
    eligible = [v for v, t in commits if t <= ts_ms]
    if not eligible:
        first_v, first_t = min(commits)
        first = datetime.fromtimestamp(first_t / 1000, tz=timezone.utc).isoformat()
        raise ConfigError(
            f"source.timestamp={_to_utc(timestamp).isoformat()} is before the first available "
            f"commit of Delta table {path!r} (version {first_v} at {first})"
        )
    return max(eligible)


def load_snapshot(
    path: str, version: int | None = None, timestamp: datetime | str | None = None
) -> DeltaSnapshot:
    """Pin a snapshot on the driver (no Spark): version, live files, partition values, schema."""
    if version is not None and timestamp is not None:
        raise ConfigError("source: set at most one of version and timestamp")
    if version is not None and (isinstance(version, bool) or int(version) < 0):
        raise ConfigError(f"source.version={version!r} is invalid: must be an int >= 0")
    if timestamp is not None:
        version = resolve_timestamp_version(path, timestamp)
    dt = open_table(path, version)
    _check_readable(dt, path)
    schema = pa.schema(dt.schema().to_arrow())
    partition_columns = tuple(dt.metadata().partition_columns or ())
    root = table_root(path)

    actions = pa.table(dt.get_add_actions(flatten=False))
    paths = actions.column("path").to_pylist()
    uris = [_file_location(root, p) for p in paths]
    columns: dict[str, pa.Array] = {"uri": pa.array(uris, pa.string())}
    for name in partition_columns:
        target = schema.field(name).type
        if "partition" in actions.column_names:
            values = pa.concat_arrays(
                [c.field(name) for c in actions.column("partition").chunks]
                or [pa.array([], target)]
            )
            columns[name] = values.cast(target)
        else:
            columns[name] = pa.nulls(len(uris), target)
    table = pa.table(columns)
    if table.num_rows:
        table = table.sort_by("uri")
    files = tuple(
        DeltaFile(row["uri"], {k: row[k] for k in partition_columns}) for row in table.to_pylist()
    )
    return DeltaSnapshot(
        table_uri=root,
        version=int(dt.version()),
        schema=schema,
        partition_columns=partition_columns,
        files=files,
        partition_table=table,
    )


# ---------------------------------------------------------------------------------------------
# Spark side


def _spark_schema(schema: pa.Schema):
    """Arrow -> Spark StructType via PySpark's own converter (keeps nullability and types)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _normalized_path_expr(column):
    """Spark's URI-encoded file path -> the decoded path without scheme, comparable to ours.

    `url_decode` turns '+' into a space (form encoding), so literal '+' is protected first;
    Hadoop's path encoding never produces '+' for a space.
    """
    from pyspark.sql import functions as F

    decoded = F.url_decode(F.replace(column, F.lit("+"), F.lit("%2B")))
    return F.regexp_replace(decoded, r"^[A-Za-z][A-Za-z0-9+.\-]*:/*", "/")


def _normalized_path(uri: str) -> str:
    return re.sub(r"^[A-Za-z][A-Za-z0-9+.\-]*:/*", "/", uri) if ":" in uri else uri


def read_snapshot(
    spark: SparkSession, snapshot: DeltaSnapshot, files: Sequence[DeltaFile] | None = None
) -> DataFrame:
    """Scan (a subset of) a pinned snapshot's files with partition columns, in table order."""
    from pyspark.sql import functions as F

    chosen = list(snapshot.files if files is None else files)
    full_schema = _spark_schema(snapshot.schema)
    if not chosen:
        return spark.createDataFrame([], full_schema)
    scan = spark.read.schema(_spark_schema(snapshot.data_schema)).parquet(*[f.uri for f in chosen])
    if not snapshot.partition_columns:
        return scan.select(*[F.col(f"`{n}`") for n in snapshot.schema.names])

    parts = snapshot.partition_table.filter(
        pc.is_in(snapshot.partition_table.column("uri"), pa.array(sorted({f.uri for f in chosen})))
    )
    keys = pa.array([_normalized_path(u) for u in parts.column("uri").to_pylist()], pa.string())
    lookup_arrow = (
        parts.drop_columns(["uri"])
        .append_column(_FILE_KEY, keys)
        .append_column(_MATCHED, pa.array([True] * parts.num_rows, pa.bool_()))
    )
    lookup = spark.createDataFrame(lookup_arrow)  # Arrow in: partition values keep exact types
    with_key = scan.withColumn(_FILE_KEY, _normalized_path_expr(F.col("_metadata.file_path")))
    joined = with_key.join(F.broadcast(lookup), on=_FILE_KEY, how="left")
    # A left join never drops rows; a file that failed to match would get null partition
    # values, so every partition column raises instead.
    unmatched = F.raise_error(
        F.concat(
            F.lit("kafkalog: Delta data file missing from the pinned snapshot's file list: "),
            F.col(_FILE_KEY),
        )
    )
    out = []
    for name in snapshot.schema.names:
        column = F.col(f"`{name}`")
        if name in snapshot.partition_columns:
            dtype = full_schema[name].dataType
            column = F.when(F.col(_MATCHED).isNull(), unmatched.cast(dtype)).otherwise(column)
        out.append(column.alias(name))
    return joined.select(*out)


def read_delta_with_deltars(
    spark: SparkSession,
    path: str,
    version: int | None = None,
    timestamp: datetime | str | None = None,
) -> tuple[DataFrame, int]:
    """Read a Delta table through delta-rs (snapshot on the driver) and Spark's Parquet scan."""
    snapshot = load_snapshot(path, version=version, timestamp=timestamp)
    return read_snapshot(spark, snapshot), snapshot.version


# ---------------------------------------------------------------------------------------------
# Incremental reads


def _first_removing_version(path: str, after: int, upto: int) -> tuple[int, str] | None:
    """(version, operation) of the first commit in (after, upto] that removed files, if known."""
    try:
        history = open_table(path).history()
    except ConfigError:
        return None
    for entry in sorted(history, key=lambda h: int(h.get("version", -1))):
        v = int(entry.get("version", -1))
        if not after < v <= upto:
            continue
        metrics = entry.get("operationMetrics") or {}
        removed = 0
        for key in ("num_removed_files", "numRemovedFiles"):
            with contextlib.suppress(TypeError, ValueError):
                removed += int(metrics.get(key, 0) or 0)
        if removed:
            return v, str(entry.get("operation", "?"))
    return None


def rows_since_version(
    spark: SparkSession,
    path: str,
    since_version: int,
    version: int | None = None,
    timestamp: datetime | str | None = None,
) -> tuple[DataFrame, int]:
    """Rows of the pinned snapshot that were added after `since_version` (exclusive).

    Semantics: the rows of snapshot `version` (latest by default) living in data files that
    are not in snapshot `since_version`. That equals "rows appended since" exactly when every
    file of `since_version` is still live; if any was removed (delete, update, merge,
    overwrite, optimize, ...), the answer is ill-defined and the run is refused.
    Files added and rewritten after `since_version` are fine: their rows are counted once.
    """
    if isinstance(since_version, bool) or int(since_version) < 0:
        raise ConfigError(f"source.since_version={since_version!r} is invalid: must be an int >= 0")
    target = load_snapshot(path, version=version, timestamp=timestamp)
    if since_version > target.version:
        raise ConfigError(
            f"source.since_version={since_version} is after the table's version {target.version}"
            f" ({path!r})"
        )
    base = load_snapshot(path, version=since_version)
    live = {f.uri for f in target.files}
    gone = [f.uri for f in base.files if f.uri not in live]
    if gone:
        where = _first_removing_version(path, since_version, target.version)
        which = f" (first at version {where[0]}, operation {where[1]})" if where else ""
        raise ConfigError(
            f"source.since_version={since_version}: {len(gone)} data file(s) of version "
            f"{since_version} were removed by version {target.version}{which}, so 'rows since "
            f"version {since_version}' is ill-defined; run a full read instead (no since_version), or "
            "ingest the changes as upserts and tombstones (source.changes: cdf)"
        )
    old = {f.uri for f in base.files}
    added = [f for f in target.files if f.uri not in old]
    return read_snapshot(spark, target, added), target.version
