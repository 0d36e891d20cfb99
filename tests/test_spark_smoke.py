"""A real (local) Spark runs Python workers with this interpreter and our package."""

import pytest

pytestmark = pytest.mark.spark


def test_spark_runs_python_workers_that_import_the_core(spark):
    def crc_of_partition(rows):
        from kafkalog_core.record.batch import Compression

        yield sum(1 for _ in rows) * 0 + int(Compression.ZSTD)

    result = spark.sparkContext.parallelize(range(10), 2).mapPartitions(crc_of_partition).collect()
    assert result == [4, 4]
