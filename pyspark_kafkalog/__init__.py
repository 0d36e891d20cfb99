"""PySpark finds this module by its `pyspark_` name and registers `format("kafkalog")` itself.

`register(spark)` does it by hand, for sessions whose executors get kafkalog via --py-files.
"""

from __future__ import annotations

from typing import Any

from jobs.datasource.source import KafkaLogDataSource as DefaultSource

__all__ = ["DefaultSource", "register"]


def register(spark: Any) -> None:
    """Register `format("kafkalog")` in `spark` (needed only where auto-discovery cannot see it)."""
    spark.dataSource.register(DefaultSource)
