"""Fixtures shared by the job tests (the session's `spark` is in tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.jobs.ingest_helpers import SMALL_SPLIT_BYTES


@pytest.fixture
def small_splits(spark):
    """spark.sql.files.maxPartitionBytes of `SMALL_SPLIT_BYTES`: one task per (~10-20 KB) test
    file, so a run has several tasks and every partition several ranges."""
    key = "spark.sql.files.maxPartitionBytes"
    old = spark.conf.get(key)
    spark.conf.set(key, str(SMALL_SPLIT_BYTES))
    yield
    spark.conf.set(key, old)
