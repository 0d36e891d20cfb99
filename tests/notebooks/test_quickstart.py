"""notebooks/quickstart.ipynb in a Jupyter kernel: a Delta table in, a Kafka log dir out."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.notebooks import kernel

NOTEBOOK = "quickstart.ipynb"


def test_shows_the_ingest_and_three_ways_to_read_back() -> None:
    source = kernel.committed_source(NOTEBOOK)
    for needed in ("IngestConfig.from_dict(", "ingest.run(spark, config", "PartitionLog.open("):
        assert needed in source
    assert ".read_records()" in source and '"dump-log"' in source


@pytest.mark.spark
def test_ingests_once_and_reads_the_records_back(tmp_path: Path) -> None:
    nb = kernel.execute(NOTEBOOK, tmp_path)
    kernel.assert_shown_as_a_user_sees_it(nb, tmp_path)

    logs = tmp_path / "tmp" / "kafkalog-quickstart" / "kafka-logs"
    entries = {p.name for p in logs.iterdir()}
    assert {"orders-0", "orders-1", "orders-2"} <= entries
    assert "recovery-point-offset-checkpoint" in entries
    assert all(not (logs / e).is_dir() or e.startswith("orders-") for e in entries)
    assert list((tmp_path / "cwd").iterdir()) == []  # nothing written in the working directory

    ingest = kernel.cell_with(nb, "result = ingest.run(")
    assert kernel.stdout(ingest).startswith("run quickstart-1: committed, 200 records")
    assert kernel.value(ingest) == "('committed', 200)"
    assert kernel.value(kernel.cell_with(nb, "again = ingest.run(")) == "'no-op'"
    sizes = ast.literal_eval(kernel.stdout(kernel.cell_with(nb, "frames = []")).splitlines()[0])
    assert sum(sizes.values()) == 200 and sorted(sizes) == [0, 1, 2]
    dump = kernel.stdout(kernel.cell_with(nb, '"dump-log"'))
    assert "| offset: 0 CreateTime:" in dump and "headerKeys: [channel]" in dump
    assert "compresscodec: lz4" in dump
