"""The maintenance reports: one Delta table per job, appended per run, keyed by run id.

Re-running a run id replaces that run's rows (Spark's `replaceWhere`, delta-rs's predicate
overwrite), so a retried Airflow task leaves one copy. Spark's Delta source writes when the
session has the Delta extension; delta-rs otherwise (its jars cannot be downloaded everywhere).
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from jobs.spark.session import has_delta_extension

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RUN_COLUMNS = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("job", pa.string()),
        pa.field("run_at", pa.timestamp("us", tz="UTC")),
    ]
)


def with_run_columns(rows: pa.Table, run_id: str, job: str) -> pa.Table:
    """`rows` prefixed by run_id, job and run_at columns."""
    n = rows.num_rows
    now = datetime.now(tz=timezone.utc)
    columns = [
        pa.array([run_id] * n, pa.string()),
        pa.array([job] * n, pa.string()),
        pa.array([now] * n, pa.timestamp("us", tz="UTC")),
    ]
    return pa.Table.from_arrays(
        columns + rows.columns, schema=pa.schema(list(RUN_COLUMNS) + list(rows.schema))
    )


def write_report(
    spark: SparkSession | None,
    rows: pa.Table,
    path: str | os.PathLike[str],
    *,
    run_id: str,
    job: str,
) -> None:
    """Append this run's rows (replacing an earlier attempt's rows of the same run id)."""
    table = with_run_columns(rows, run_id, job)
    target = str(Path(path).absolute()) if "://" not in str(path) else str(path)
    quoted = run_id.replace("'", "''")
    if spark is not None and has_delta_extension(spark):
        frame = spark.createDataFrame(table)
        (
            frame.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", f"run_id = '{quoted}'")
            .option("mergeSchema", "true")
            .save(target)
        )
        return
    from deltalake import DeltaTable, write_deltalake

    if DeltaTable.is_deltatable(target):
        write_deltalake(
            target,
            table,
            mode="overwrite",
            predicate=f"run_id = '{quoted}'",
            schema_mode="merge",
        )
    else:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        write_deltalake(target, table, mode="append")


def read_report(path: str | os.PathLike[str]) -> pa.Table:
    """A report table (all runs), read with delta-rs."""
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_table()


def newest_run(path: str | os.PathLike[str]) -> pa.Table | None:
    """The rows of the newest run (latest `run_at`) of a report table; None when there is none."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path)):
        return None
    rows = read_report(path)
    if rows.num_rows == 0:
        return None
    newest = pc.max(rows.column("run_at"))
    run_id = rows.filter(pc.equal(rows.column("run_at"), newest)).column("run_id")[0]
    return rows.filter(pc.equal(rows.column("run_id"), run_id))
