"""PySpark finds this module by its `pyspark_` name and registers `format("kafkalog")` itself.

`register(spark)` does it by hand, for sessions whose executors get kafkalog via --py-files,
and for a Spark Connect client (the data source then runs in the server's Python workers,
which must import kafkalog: without it, one line says what to install where).
"""

from __future__ import annotations

from typing import Any

from jobs.datasource.source import KafkaLogDataSource as DefaultSource

__all__ = ["DefaultSource", "register"]


def register(spark: Any) -> None:
    """Register `format("kafkalog")` in `spark` (needed only where auto-discovery cannot see it).

    On a Spark Connect client the server's Python workers are asked first whether they import
    kafkalog (a ConfigError line if not, instead of Spark's DATA_SOURCE_NOT_FOUND later)."""
    from jobs.spark.tasks import is_connect, require_kafkalog_on_workers

    if is_connect(spark):
        require_kafkalog_on_workers(spark)
    spark.dataSource.register(DefaultSource)
