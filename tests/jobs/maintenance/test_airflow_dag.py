"""conf/airflow/kafkalog_pipeline.py runs end to end under Airflow (`airflow dags test`) against
local Spark: ingest -> changelog ingest (a Delta table's change data feed) -> compact ->
retention dry run -> --apply -> verify -> compaction audit.

Airflow lives in its own cached venv (.venv-airflow, conf/venv.sh), never in kafkalog's. The
tasks are real SparkSubmitOperators calling the venv's spark-submit on the repo's jobs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from jobs.maintenance.report import read_report
from tests.jobs.ingest_helpers import read_root

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def airflow_python() -> Path:
    script = f'. "{ROOT}/conf/venv.sh" && kafkalog_ensure_airflow_venv'
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stderr[-3000:]
    return Path(result.stdout.strip().splitlines()[-1])


def test_templates_render_to_safe_run_ids_and_iso_now(airflow_python: Path) -> None:
    code = (
        "import jinja2, datetime as d\n"
        "from jobs.maintenance.schedule import AIRFLOW_RUN_ID, AIRFLOW_NOW\n"
        "end = d.datetime(2024, 5, 2, tzinfo=d.timezone.utc)\n"
        "print(jinja2.Template(AIRFLOW_RUN_ID).render(run_id='scheduled__2024-05-01T00:00:00+00:00'))\n"
        "print(jinja2.Template(AIRFLOW_NOW).render(data_interval_end=end))\n"
    )
    out = subprocess.run(
        [str(airflow_python), "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        "scheduled__2024-05-01T00_00_00_00_00",
        "2024-05-02T00:00:00+00:00",
    ]


@pytest.mark.spark
def test_the_dag_runs_every_job(airflow_python: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    start = datetime(2024, 4, 1, tzinfo=timezone.utc)
    n = 200
    pq.write_table(
        pa.table(
            {
                "customer_id": [f"c{i % 30}" for i in range(n)],
                "name": [f"n{i}" for i in range(n)],
                "updated_at": pa.array(
                    [start.timestamp() * 1e6 + i * 60e6 for i in range(n)], pa.int64()
                ).cast(pa.timestamp("us", tz="UTC")),
            }
        ),
        src / "customers.parquet",
    )
    changes = str(tmp_path / "changes")  # versions 0-2: 10 inserts, 2 updates, 3 deletes
    write_deltalake(
        changes,
        pa.table({"id": list(range(10)), "name": [f"n{i}" for i in range(10)]}),
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    DeltaTable(changes).update(new_values={"name": "new"}, predicate="id < 2")
    DeltaTable(changes).delete("id >= 7")
    logs, reports = tmp_path / "logs", tmp_path / "reports"
    changelog = tmp_path / "changelog.yaml"
    changelog.write_text(
        f"source: {{format: delta, path: {changes}, changes: cdf}}\n"
        f"output: {{root: {logs}}}\n"
        "topics:\n  customer-changes:\n    partitions: 1\n"
        "    config: {cleanup.policy: compact, message.timestamp.type: LogAppendTime}\n"
        "mapping:\n  topic: customer-changes\n  key: {column: id, format: string}\n"
        "  value: {columns: [id, name], format: json}\n"
    )
    config = tmp_path / "ingest.yaml"
    config.write_text(
        f"source: {{format: parquet, path: {src}}}\n"
        f"output: {{root: {logs}}}\n"
        "topics:\n  customers:\n    partitions: 2\n"
        "    config: {cleanup.policy: compact, segment.bytes: 4096}\n"
        "mapping:\n  topic: customers\n  key: {column: customer_id, format: string}\n"
        "  value: {columns: [customer_id, name, updated_at], format: json}\n"
        "  timestamp: {column: updated_at}\n"
    )
    home = tmp_path / "airflow"
    home.mkdir()
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "conf" / "airflow"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW_VAR_KAFKALOG_INGEST_CONFIG": str(config),
        "AIRFLOW_VAR_KAFKALOG_LOG_DIR": str(logs),
        "AIRFLOW_VAR_KAFKALOG_REPORT_ROOT": str(reports),
        "AIRFLOW_VAR_KAFKALOG_CHANGELOG_CONFIG": str(changelog),
        "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
        "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",  # kafkalog's spark-submit
        "PYSPARK_PYTHON": sys.executable,
    }
    airflow = str(airflow_python.parent / "airflow")
    migrate = subprocess.run(
        [airflow, "db", "migrate"], capture_output=True, text=True, env=env, timeout=300
    )
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    run = subprocess.run(
        [airflow, "dags", "test", "kafkalog_pipeline", "2024-05-01"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=tmp_path,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0 and "state=success" in output, output[-5000:]
    partitions = {p.name for p in logs.iterdir() if p.is_dir()}
    assert partitions == {"customers-0", "customers-1", "customer-changes-0"}
    changelog_records = [r for r in read_root(logs) if r[0] == "customer-changes"]
    assert len(changelog_records) == 15
    latest = {r[3]: r[4] for r in changelog_records}
    assert [k for k, v in sorted(latest.items()) if v is None] == [b"7", b"8", b"9"]
    assert latest[b"0"] == b'{"id":0,"name":"new"}'
    jobs = {}
    for job in ("compact", "retention", "rebuild-index", "compaction-audit"):
        table = read_report(reports / job)
        jobs[job] = set(table.column("run_id").to_pylist())
    retention_ids = jobs["retention"]
    assert len(retention_ids) == 2 and all(r.startswith("manual__") for r in retention_ids)
    assert {r.rsplit("-retention-", 1)[1] for r in retention_ids} == {"dry-run", "apply"}
    compacted = read_report(reports / "compact").to_pylist()
    assert {(r["topic"], r["partition"]): r["status"] for r in compacted} == {
        ("customers", 0): "cleaned",
        ("customers", 1): "cleaned",
        ("customer-changes", 0): "not cleaned",  # one segment, the active one: nothing to clean
    }
    audit = read_report(reports / "compaction-audit").to_pylist()
    customers = [r for r in audit if r["topic"] == "customers"]
    assert sum(r["distinct_keys"] for r in customers) == 30
    # the audit saw the compacted log: what compact kept of its rounds, and the records beyond
    kept, read = (
        sum(r[c] for r in compacted if r["topic"] == "customers")
        for c in ("records_kept", "records_read")
    )
    assert kept < read and sum(r["records"] for r in customers) == kept + n - read
    (changed,) = [r for r in audit if r["topic"] == "customer-changes"]
    assert (changed["records"], changed["distinct_keys"], changed["tombstones"]) == (15, 10, 3)
    (html,) = (reports / "compaction-audit-html").iterdir()
    page = html.read_text()  # the three charts and compact's before/after
    # four charts, each drawn or saying why it has nothing to show
    assert page.count('<figure class="chart') == 4 and "Compact run manual__" in page
