"""Which data files the arrow task reader reads for a source, or why it cannot read the source.

The files are the ones Spark would read, so both readers see the same data: a Parquet path's
and a Parquet catalog table's come from Spark (`inputFiles`), a Delta table read through
delta-rs from its pinned snapshot. A catalog table qualifies when the catalog says its files are
Parquet and Spark reads them with its Parquet reader: a datasource table
(`saveAsTable(format="parquet")`, `CREATE TABLE ... USING parquet`) or a Hive-format table whose
input format is Parquet's, while `spark.sql.hive.convertMetastoreParquet` is true (the default;
with false Spark reads it through the Hive SerDe, whose semantics differ). Its partition columns
(from the catalog) are not in the files but in the directory names (`col=value`, escaped as
Spark escapes them): string and integer ones are parsed from there (`PathPartitions`), and the
tasks add them to the rows as Spark does; a table with other partition types, files outside
`col=value` directories (custom partition locations), or paths whose values are not the ones
Spark gives the rows (`spark_partition_values`, asked of Spark: the catalog's, for a partition
placed in a directory named for another value) has none supplied, and `plan_arrow_read` refuses
mappings that read them. Views, temporary views, other providers (csv, json, delta,
...) and Hive tables of other formats (text, ORC, ...) keep the Spark reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.ingestion.config.ingest_config import IngestConfig
    from jobs.spark.sources import SourceRead

__all__ = [
    "CatalogTable",
    "PathPartitions",
    "SourceFiles",
    "catalog_table",
    "input_files",
    "source_files",
    "spark_partition_values",
]

# The partition column types whose values the tasks parse from the paths, as Spark types them.
PATH_TYPES = {
    "string": pa.string(),
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
}
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # the directory name of a null (or empty) value


@dataclass(frozen=True)
class PathPartitions:
    """A table's partition columns as the tasks supply them: their types and, per file, each
    column's value (a typed scalar) from the file's path."""

    types: dict[str, pa.DataType]
    values: dict[str, tuple[tuple[str, pa.Scalar], ...]]


@dataclass(frozen=True)
class SourceFiles:
    """The files (decoded local paths or URIs, `source_fs`, in Spark's listing order: the order
    of its file splits among equal lengths) and partition columns, or why not."""

    files: list[str] | None
    partition_columns: tuple[str, ...] = ()
    why: str = ""
    partitions: PathPartitions | None = None  # their values, when the paths give them
    partitions_why: str = ""  # why the paths do not give them, for a table that has them
    buckets: int | None = None  # Spark scans them one partition per bucket (`bucket_tasks`)


@dataclass(frozen=True)
class CatalogTable:
    """What the catalog says about a table: its type (MANAGED, EXTERNAL, VIEW; "" for a
    temporary view), provider, Hive input format and partition columns."""

    kind: str
    provider: str
    input_format: str
    partition_columns: tuple[str, ...]
    partition_types: tuple[str, ...] = ()  # Spark's simple type names
    buckets: int = 0  # its bucket count (0: not bucketed)

    @property
    def parquet(self) -> bool:
        """Its data files are Parquet files that Spark reads as Parquet."""
        provider = self.provider.lower()
        if provider == "hive":
            return "parquet" in self.input_format.lower()
        return provider in ("parquet", "org.apache.spark.sql.parquet") or provider.endswith(
            ".parquetfileformat"
        )


def catalog_table(spark: SparkSession, name: str) -> CatalogTable:
    """The catalog's description of table `name` (`DESCRIBE TABLE EXTENDED`, `listColumns`)."""
    details = {
        row.col_name: (row.data_type or "").strip()
        for row in spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()
    }
    partitions = [c for c in spark.catalog.listColumns(name) if c.isPartition]
    return CatalogTable(
        kind=details.get("Type", ""),
        provider=details.get("Provider", ""),
        input_format=details.get("InputFormat", ""),
        partition_columns=tuple(c.name for c in partitions),
        partition_types=tuple(c.dataType for c in partitions),
        buckets=int(buckets) if (buckets := details.get("Num Buckets", "")).isdigit() else 0,
    )


def _path_value(text: str, dtype: pa.DataType) -> pa.Scalar | None:
    """A partition value from its directory name as Spark reads it, or None if not parseable."""
    text = unquote(text)
    if text == HIVE_NULL:
        return pa.scalar(None, dtype)
    if pa.types.is_string(dtype):
        return pa.scalar(text, dtype)
    if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", text):  # Python's int() takes more than Spark's cast
        return None
    try:
        return pa.scalar(int(text), dtype)  # out of range: OverflowError / ArrowInvalid
    except (ValueError, OverflowError, pa.ArrowInvalid):
        return None


def _path_partitions(table: CatalogTable, files: list[str]) -> PathPartitions | None:
    """Each file's partition values from its `col=value` directories (None: not all of them)."""
    types = {
        c: PATH_TYPES.get(t)
        for c, t in zip(table.partition_columns, table.partition_types, strict=True)
    }
    if not types or None in types.values():
        return None
    count = len(types)
    values: dict[str, tuple[tuple[str, pa.Scalar], ...]] = {}
    for f in files:
        parsed = []
        segments = f.split("/")[-1 - count : -1]
        if len(segments) != count:
            return None
        for (column, dtype), segment in zip(types.items(), segments, strict=True):
            key, sep, text = segment.partition("=")
            value = _path_value(text, dtype) if sep and key == column else None
            if value is None:
                return None
            parsed.append((column, value))
        values[f] = tuple(parsed)
    return PathPartitions(dict(types), values)  # type: ignore[arg-type]


def spark_partition_values(
    df: DataFrame, columns: list[str]
) -> dict[tuple[str, str, str], set[tuple[object, ...]]] | None:
    """Each data file of `df`'s file scan (by `file_key`) with the partition values Spark gives
    its rows (a catalog-tracked partition's from the catalog, not from its path): one query of the
    files' `_metadata.file_path` and the partition columns, which reads no data column, the same
    on a classic session and a Spark Connect client. None when Spark cannot say (a table with a
    column of that name hides the metadata column)."""
    import pyspark.sql.functions as F

    from jobs.ingestion.source.splits import file_key

    if "_metadata" in df.columns:
        return None
    query = df.select(F.col("_metadata.file_path"), *(F.col(f"`{c}`") for c in columns))
    found: dict[tuple[str, str, str], set[tuple[object, ...]]] = {}
    for row in query.distinct().toArrow().to_pylist():
        values = tuple(row[c] for c in columns)
        found.setdefault(file_key(unquote(row["file_path"])), set()).add(values)
    return found


def _as_spark_reads(spark: SparkSession, name: str, partitions: PathPartitions) -> bool:
    """Whether Spark gives each file's rows the partition values its path says: it takes a
    catalog-tracked partition's values from the catalog, and a partition added at a custom
    location may lie in a directory named for another value (`ALTER TABLE ... ADD PARTITION
    (n=5) LOCATION '.../n=6'`). A file without rows has no values to give."""
    from jobs.ingestion.source.splits import file_key

    theirs = spark_partition_values(spark.table(name), list(partitions.types))
    if theirs is None:
        return False
    return all(
        theirs.get(file_key(path), set()) <= {tuple(v.as_py() for _, v in values)}
        for path, values in partitions.values.items()
    )


def _hive_serde_why(spark: SparkSession, name: str) -> str:
    """Why the tasks cannot read Hive-format Parquet table `name` as Spark does: Spark reads it
    through the Hive SerDe when `spark.sql.hive.convertMetastoreParquet` is false (its
    `RelationConversions`), whose semantics are not its Parquet reader's (columns matched to the
    metastore's lower-cased names or by position, its own timestamp and type conversions), and
    its `inputFiles` is the table's directory; "" when Spark converts the read to its Parquet
    reader (the default)."""
    convert = spark.conf.get("spark.sql.hive.convertMetastoreParquet", "true")
    if str(convert).strip().lower() != "false":
        return ""
    return (
        f"Spark reads table {name} through the Hive SerDe, not its Parquet reader "
        "(spark.sql.hive.convertMetastoreParquet=false)"
    )


def input_files(df: DataFrame) -> list[str]:
    """`df.inputFiles()`, decoded: the one public call that a classic session and a Spark
    Connect client both answer (a classic session's costs ~0.2 ms per file in py4j)."""
    return [unquote(f) for f in df.inputFiles()]


def _table_files(spark: SparkSession, name: str, source: SourceRead) -> SourceFiles:
    from jobs.ingestion.source.splits import listing_order

    table = catalog_table(spark, name)
    if table.kind == "VIEW":
        return SourceFiles(None, why=f"table {name} is a view")
    if not table.kind:
        return SourceFiles(None, why=f"table {name} is a temporary view")
    if not table.parquet:
        stored = table.provider or "unknown"
        if table.provider.lower() == "hive":
            stored = f"hive, input format {table.input_format or 'unknown'}"
        return SourceFiles(None, why=f"table {name} is not stored as Parquet (provider {stored})")
    if table.provider.lower() == "hive":
        why = _hive_serde_why(spark, name)
        if why:
            return SourceFiles(None, why=why)
    files = listing_order(input_files(source.df))
    partitions = _path_partitions(table, files)
    why = ""
    if table.partition_columns and partitions is None:
        why = "their values cannot be taken from the files' paths (a type or directory layout "
        why += "the tasks do not parse)"
    elif partitions is not None and not _as_spark_reads(spark, name, partitions):
        partitions = None
        why = "a partition's directory names other values than the catalog gives its rows "
        why += "(a partition added at a custom location)"
    return SourceFiles(
        files,
        table.partition_columns,
        partitions=partitions,
        partitions_why=why,
        buckets=table.buckets if table.buckets and _bucketed_scan(spark) else None,
    )


def _bucketed_scan(spark: SparkSession) -> bool:
    """Whether Spark scans a bucketed table by its buckets when the query does not need them:
    with bucketing on and its automatic choice of the bucketed scan off."""
    on = spark.conf.get("spark.sql.sources.bucketing.enabled", "true")
    auto = spark.conf.get("spark.sql.sources.bucketing.autoBucketedScan.enabled", "true")
    return str(on).lower() == "true" and str(auto).lower() == "false"


def source_files(spark: SparkSession, config: IngestConfig, source: SourceRead) -> SourceFiles:
    """The data files Spark would read and the source's partition columns, or why not; a Delta
    table named by a file: URI keeps that scheme for its files."""
    from jobs.ingestion.source.splits import listing_order
    from jobs.spark.delta import load_snapshot
    from jobs.spark.sources import delta_reader_for

    spec = config.source
    if spec.format == "parquet":
        return SourceFiles(listing_order(input_files(source.df)))
    if spec.format == "table":
        return _table_files(spark, str(spec.table), source)
    if (
        spec.format == "delta"
        and spec.path is not None
        and spec.since_version is None
        and spec.changes is None
        and delta_reader_for(spark, spec) == "delta-rs"
    ):
        snapshot = load_snapshot(str(spec.path), version=source.version)
        files = [f.uri for f in snapshot.files]
        if str(spec.path).lower().startswith("file:"):  # snapshot: absolute local paths
            files = ["file://" + f if f.startswith("/") else f for f in files]
        return SourceFiles(files, snapshot.partition_columns)
    return SourceFiles(
        None,
        why="the source is not a Parquet path or table, or a Delta table read by delta-rs "
        "(its rows, not its changes)",
    )
