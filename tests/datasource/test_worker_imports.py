"""What each of Spark's Python workers imports for format("kafkalog"), in a fresh interpreter.

Spark calls `schema()` in one Python worker and plans (`reader()`, `partitions()`) in another;
every cold worker pays its imports again. These tests fail when a heavy module creeps back
into those paths (the decoder, the encoder, pyarrow.compute, the cleaner, the partition log).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.datasource.helpers import write_topic

REPO = Path(__file__).resolve().parents[2]

# Loaded by a planning worker only if something we import pulls them in (Spark does not).
HEAVY = [
    "pyarrow.compute",
    "kafkalog_core.config",
    "kafkalog_core.record.decoder",
    "kafkalog_core.record.encoder",
    "kafkalog_core.maintenance.cleaner_audit",
    "kafkalog_core.log.partition.partition_log",
    "kafkalog_core.log.log_loader",
    "jobs.datasource.scan",
    "jobs.datasource.writer",
    "jobs.ingestion",
]

_PROBE = """
import json, sys
import pyspark.sql.worker.{worker}  # what Spark's worker imports before calling us
before = set(sys.modules)
from pyspark_kafkalog import DefaultSource
source = DefaultSource({options})
{calls}
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _new_modules(worker: str, options: dict[str, str], calls: str) -> list[str]:
    code = _PROBE.format(worker=worker, options=repr(options), calls=calls)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.mark.parametrize("options", [{"includeHeaders": "true"}, {"view": "segments"}])
def test_schema_worker_imports_only_the_schema(options: dict[str, str]) -> None:
    new = _new_modules("create_data_source", options, "source.schema()")
    ours = {m for m in new if m.split(".")[0] in ("jobs", "kafkalog_core", "pyspark_kafkalog")}
    assert ours == {
        "jobs",
        "jobs.datasource",
        "jobs.datasource.one_line",  # the source's one-line errors: os and contextlib only
        "jobs.datasource.schema",
        "jobs.datasource.source",
        "pyspark_kafkalog",
    }
    assert "numpy" not in new and "pyarrow" not in new


_PLAN = "packs = source.reader(None).partitions()\nassert all(p.slices for p in packs), packs\n"
_PUSH_AND_PLAN = (
    "from pyspark.sql.datasource import EqualTo, GreaterThan\n"
    "from jobs.datasource.reader import KafkaLogFilteringReader\n"
    "from jobs.datasource.options import parse_read_options\n"
    "reader = KafkaLogFilteringReader(parse_read_options(source.options))\n"
    "rest = list(reader.pushFilters([EqualTo(('partition',), 0), GreaterThan(('offset',), 5)]))\n"
    "assert rest == [] and reader.partitions(), rest\n"
)


@pytest.mark.parametrize(
    ("worker", "calls"),
    [("plan_data_source_read", _PLAN), ("data_source_pushdown_filters", _PUSH_AND_PLAN)],
)
def test_planning_imports_no_decoder_encoder_or_cleaner(
    tmp_path: Path, worker: str, calls: str
) -> None:
    write_topic(tmp_path, "t", 2, 30)
    new = _new_modules(worker, {"path": str(tmp_path), "subscribe": "t"}, calls)
    assert "jobs.datasource.plan" in new  # the probe did plan
    assert _heavy(new) == []


def test_task_reads_without_encoder_or_cleaner(tmp_path: Path) -> None:
    """The task needs the decoder, but not the write side nor the planner's extras."""
    write_topic(tmp_path, "t", 1, 30)
    calls = (
        "reader = source.reader(None)\n"
        "rows = sum(b.num_rows for p in reader.partitions() for b in reader.read(p))\n"
        "assert rows == 30, rows\n"
    )
    new = _new_modules("plan_data_source_read", {"path": str(tmp_path), "subscribe": "t"}, calls)
    assert "kafkalog_core.record.decoder" in new  # the probe did decode
    needed = ("pyarrow.compute", "kafkalog_core.record.decoder", "jobs.datasource.scan")
    assert [m for m in _heavy(new) if not m.startswith(needed)] == []
