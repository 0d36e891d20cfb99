"""Which data files the arrow task reader reads for a source, or why it cannot read the source.

The files are the ones Spark would read, so both readers see the same data: a Parquet path's
and a Parquet catalog table's come from Spark (`inputFiles`), a Delta table read through
delta-rs from its pinned snapshot. A catalog table qualifies when the catalog says its files are
Parquet: a datasource table (`saveAsTable(format="parquet")`, `CREATE TABLE ... USING parquet`)
or a Hive-format table whose input format is Parquet's. Its partition columns (from the catalog)
are not in the files but in the directory names; `plan_arrow_read` refuses mappings that read
them. Views, temporary views and other providers (csv, json, delta, ...) keep the Spark reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.ingestion.config import IngestConfig
    from jobs.spark.sources import SourceRead

__all__ = ["CatalogTable", "SourceFiles", "catalog_table", "source_files"]


@dataclass(frozen=True)
class SourceFiles:
    """The files (decoded local paths or URIs, `source_fs`) and partition columns, or why not."""

    files: list[str] | None
    partition_columns: tuple[str, ...] = ()
    why: str = ""


@dataclass(frozen=True)
class CatalogTable:
    """What the catalog says about a table: its type (MANAGED, EXTERNAL, VIEW; "" for a
    temporary view), provider, Hive input format and partition columns."""

    kind: str
    provider: str
    input_format: str
    partition_columns: tuple[str, ...]

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
    partitions = tuple(c.name for c in spark.catalog.listColumns(name) if c.isPartition)
    return CatalogTable(
        kind=details.get("Type", ""),
        provider=details.get("Provider", ""),
        input_format=details.get("InputFormat", ""),
        partition_columns=partitions,
    )


def _table_files(spark: SparkSession, name: str, source: SourceRead) -> SourceFiles:
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
    files = [unquote(f) for f in source.df.inputFiles()]
    return SourceFiles(files, table.partition_columns)


def source_files(spark: SparkSession, config: IngestConfig, source: SourceRead) -> SourceFiles:
    """The data files Spark would read and the source's partition columns, or why not; a Delta
    table named by a file: URI keeps that scheme for its files."""
    from jobs.spark.delta import load_snapshot
    from jobs.spark.sources import delta_reader_for

    spec = config.source
    if spec.format == "parquet":
        return SourceFiles([unquote(f) for f in source.df.inputFiles()])
    if spec.format == "table":
        return _table_files(spark, str(spec.table), source)
    if (
        spec.format == "delta"
        and spec.path is not None
        and spec.since_version is None
        and delta_reader_for(spark, spec) == "delta-rs"
    ):
        snapshot = load_snapshot(str(spec.path), version=source.version)
        files = [f.uri for f in snapshot.files]
        if str(spec.path).lower().startswith("file:"):  # snapshot: absolute local paths
            files = ["file://" + f if f.startswith("/") else f for f in files]
        return SourceFiles(files, snapshot.partition_columns)
    return SourceFiles(
        None, why="the source is not a Parquet path or table, or a Delta table read by delta-rs"
    )
