"""The maintenance frame: listing, dealing work to Spark tasks, --now, lock, topic configs, report."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.maintenance.common import (
    MaintenanceError,
    deal_units,
    list_partitions,
    maintenance_lock,
    parse_now,
    run_units,
    segment_sizes,
)
from jobs.maintenance.report import read_report, write_report
from jobs.maintenance.topic_configs import resolve_topic_configs
from kafkalog_core.errors import ConfigError, KafkaLogError
from kafkalog_core.root.run_lock import RunLock, RunLockedError


def _log_dir(tmp_path: Path) -> Path:
    root = tmp_path / "logs"
    dirs = ("orders-0", "orders-1", "a-b.c-12", "old-0.abc123-delete", ".hidden-0", "junk")
    for name in (*dirs, "__cluster_metadata-0"):
        (root / name).mkdir(parents=True)
    (root / "recovery-point-offset-checkpoint").write_text("0\n0\n")
    return root


def test_list_partitions_skips_what_a_broker_skips(tmp_path: Path) -> None:
    refs = list_partitions(_log_dir(tmp_path))
    assert [(r.topic, r.partition) for r in refs] == [("a-b.c", 12), ("orders", 0), ("orders", 1)]
    assert [r.dir_name for r in list_partitions(_log_dir(tmp_path / "x"), ["orders"])] == [
        "orders-0",
        "orders-1",
    ]


def test_list_partitions_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(MaintenanceError, match="does not exist"):
        list_partitions(tmp_path / "nope")
    with pytest.raises(MaintenanceError, match="no partition of topic"):
        list_partitions(_log_dir(tmp_path), ["missing"])


def test_deal_units_balances_by_weight() -> None:
    units = [{"id": i, "bytes": b} for i, b in enumerate([100, 1, 1, 1, 50, 50])]
    groups = deal_units(units, 2)
    loads = sorted(sum(u["bytes"] for u in g) for g in groups)
    assert loads == [101, 102]
    assert sorted(u["id"] for g in groups for u in g) == list(range(6))
    assert len(deal_units(units, 99)) == 6


def test_run_units_runs_each_unit_once_in_tasks(spark) -> None:
    schema = pa.schema([("unit", pa.int64()), ("square", pa.int64()), ("pid", pa.int64())])

    def task(unit):
        import os

        return [{"unit": unit["n"], "square": unit["n"] ** 2, "pid": os.getpid()}]

    rows = run_units(spark, [{"n": n, "bytes": n} for n in range(10)], task, schema, tasks=3)
    assert sorted(rows.column("unit").to_pylist()) == list(range(10))
    assert sorted(rows.column("square").to_pylist()) == [n * n for n in range(10)]


def test_run_units_turns_a_task_error_into_one_line(spark) -> None:
    schema = pa.schema([("x", pa.int64())])

    def task(unit):
        raise KafkaLogError("segment 00000000000000000042.log is corrupt")

    with pytest.raises(MaintenanceError, match=r"orders-3: segment 0+42.log is corrupt") as info:
        run_units(spark, [{"dir": "orders-3"}], task, schema)
    assert "Traceback" not in str(info.value)


def test_parse_now() -> None:
    assert parse_now("1714564800000") == 1714564800000
    assert parse_now("2024-05-01T12:00:00Z") == 1714564800000
    assert parse_now("2024-05-01T12:00:00") == 1714564800000  # naive means UTC
    assert parse_now("2024-05-01T14:00:00+02:00") == 1714564800000
    with pytest.raises(MaintenanceError, match="--now"):
        parse_now("yesterday")


def test_maintenance_and_ingest_share_the_lock(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    root.mkdir()
    for read_only in (False, True):
        with (
            RunLock(root, "ingest-1"),
            pytest.raises(RunLockedError, match="ingest-1"),
            maintenance_lock(root, "retention-1", read_only=read_only),
        ):
            pass
    with maintenance_lock(root, "retention-2"), pytest.raises(RunLockedError, match="retention-2"):
        RunLock(root, "ingest-2").acquire()
    with maintenance_lock(root, "verify-1", read_only=True):
        with pytest.raises(RunLockedError, match="in use by another run: a read-only run"):
            RunLock(root, "ingest-3").acquire()
        with maintenance_lock(root, "audit-1", read_only=True) as second:
            assert second.held  # read-only runs share it


def test_topic_configs_from_file_and_defaults(tmp_path: Path) -> None:
    root = _log_dir(tmp_path)
    conf = tmp_path / "topics.yaml"
    conf.write_text(
        "defaults: {retention: {ms: 1000}}\n"
        "topics:\n  orders: {cleanup.policy: compact, retention.bytes: 10}\n"
    )
    resolved = resolve_topic_configs(root, ["orders", "a-b.c"], conf)
    orders, other = resolved["orders"], resolved["a-b.c"]
    assert orders.config.retention_ms == 1000 and other.config.retention_ms == 1000
    assert orders.config.compact and not other.config.compact
    assert orders.source_of("retention.bytes") == f"file {conf}"
    assert other.source_of("retention.bytes") == "default"
    assert "segment.bytes=1073741824 (default)" in other.describe(["segment.bytes"])
    props = tmp_path / "all.properties"
    props.write_text("retention.ms=5\n")
    assert resolve_topic_configs(root, ["orders"], props)["orders"].config.retention_ms == 5
    per_topic = tmp_path / "dir"
    per_topic.mkdir()
    (per_topic / "orders.properties").write_text("segment.ms=100\n")
    resolved = resolve_topic_configs(root, ["orders", "a-b.c"], per_topic)
    assert resolved["orders"].config.segment_ms == 100
    assert resolved["a-b.c"].config.segment_ms == 604800000


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("topics:\n  orders: {retention.msx: 1}\n", "orders.*retention.msx"),
        ("topics:\n  orders: {retention.ms: soon}\n", "orders.*retention.ms"),
        ("what: 1\n", "defaults"),
    ],
)
def test_bad_topic_config_names_the_problem(tmp_path: Path, text: str, match: str) -> None:
    conf = tmp_path / "topics.yaml"
    conf.write_text(text)
    with pytest.raises(ConfigError, match=match):
        resolve_topic_configs(_log_dir(tmp_path), ["orders"], conf)


def test_report_appends_per_run_and_replaces_a_retried_run(tmp_path: Path) -> None:
    path = tmp_path / "report"
    rows = pa.table({"partition": ["a-0", "a-1"], "action": ["keep", "delete"]})
    write_report(None, rows, path, run_id="r1", job="retention")
    write_report(None, rows, path, run_id="r2", job="retention")
    write_report(None, rows.slice(0, 1), path, run_id="r1", job="retention")  # a retry
    table = read_report(path)
    runs = sorted(table.column("run_id").to_pylist())
    assert runs == ["r1", "r2", "r2"]
    assert set(table.column("job").to_pylist()) == {"retention"}


def _history(root: Path, *runs: dict) -> None:
    from jobs.ingestion.run.history import IngestHistory

    history = IngestHistory(root.absolute())
    for day, run in enumerate(runs, start=1):
        history.append({"finished_at": datetime(2024, 5, day, tzinfo=timezone.utc), **run})


def test_topic_configs_from_the_ingest_history_below_the_file(tmp_path: Path) -> None:
    root = _log_dir(tmp_path)
    _history(
        root,
        {"run_id": "old", "status": "committed", "topic_configs": {"orders": {"retention.ms": 1}}},
        {
            "run_id": "new",
            "status": "committed",
            "topic_configs": {"orders": {"retention.ms": 2, "segment.ms": 9}},
        },
        {"run_id": "failed", "status": "failed", "topic_configs": {"orders": {"retention.ms": 3}}},
        # a later run of another topic does not hide the orders run's settings
        {
            "run_id": "other",
            "status": "committed",
            "topic_configs": {"a-b.c": {"cleanup.policy": "compact"}},
        },
    )
    resolved = resolve_topic_configs(root, ["orders", "a-b.c"])
    orders, other = resolved["orders"], resolved["a-b.c"]
    assert orders.config.retention_ms == 2 and orders.source_of("retention.ms") == "ingest run new"
    assert other.config.compact and other.source_of("cleanup.policy") == "ingest run other"
    assert other.config.retention_ms == 604800000
    conf = tmp_path / "t.properties"
    conf.write_text("retention.ms=7\n")
    orders = resolve_topic_configs(root, ["orders"], conf)["orders"]
    assert orders.config.retention_ms == 7 and orders.config.segment_ms == 9
    assert orders.source_of("segment.ms") == "ingest run new"


def test_each_topic_takes_the_settings_of_the_newest_run_that_wrote_it(tmp_path: Path) -> None:
    """The demo's case: a later run that wrote another topic says nothing about this one."""
    root = _log_dir(tmp_path)
    customers = {"cleanup.policy": "compact", "segment.bytes": 8192, "index.interval.bytes": 1024}
    _history(
        root,
        {
            "run_id": "demo-customers",
            "status": "committed",
            "topic_configs": {"a-b.c": customers},
            "partitions": {"a-b.c-12": [0, 10]},
        },
        {"run_id": "demo-orders", "status": "committed", "topic_configs": {"orders": {}}},
        # a run from before runs recorded settings: it wrote a-b.c, nothing says how
        {"run_id": "unrecorded", "status": "committed", "partitions": {"x-y-3": [0, 1]}},
    )
    resolved = resolve_topic_configs(root, ["orders", "a-b.c", "x-y"])
    abc, orders, xy = resolved["a-b.c"], resolved["orders"], resolved["x-y"]
    assert abc.config.compact and abc.config.segment_bytes == 8192
    assert abc.source_of("cleanup.policy") == "ingest run demo-customers"
    assert "index.interval.bytes=1024 (ingest run demo-customers)" in abc.describe(
        ["index.interval.bytes"]
    )
    # orders: written with every default, by a run that says so; x-y: its settings are unknown
    assert orders.known_from == "ingest run demo-orders" and orders.assumed(["retention.ms"]) == ()
    assert xy.known_from == "" and xy.assumed(["retention.ms", "segment.ms"]) == (
        "retention.ms",
        "segment.ms",
    )


def test_broker_metadata_is_the_truth_for_the_topics_it_names(tmp_path: Path) -> None:
    from tests.log.test_cluster_metadata import (
        ORDERS_ID,
        config_record,
        data_batch,
        metadata_dir,
        topic_record,
    )

    root = _log_dir(tmp_path)
    values = [
        topic_record("orders", ORDERS_ID),
        config_record("retention.ms", "-1"),
        config_record("leader.replication.throttled.replicas", "0:1"),
        config_record("sasl.enabled.mechanisms", "PLAIN", resource="orders"),  # not a log's
        # the brokers' dynamic defaults: every broker's, then broker 1's (this dir's node.id)
        config_record("log.retention.ms", "5", resource="", kind=4),
        config_record("log.retention.bytes", "1000", resource="", kind=4),
        config_record("log.roll.ms", "77", resource="", kind=4),
        config_record("log.roll.ms", "88", resource="1", kind=4),
        config_record("log.index.interval.bytes", "99", resource="2", kind=4),
    ]
    (metadata_dir(root) / f"{0:020d}.log").write_bytes(data_batch(0, values))
    (root / "meta.properties").write_text("version=1\ncluster.id=abc\nnode.id=1\n")
    _history(
        root,
        {
            "run_id": "ingested",
            "status": "committed",
            "topic_configs": {"orders": {"segment.bytes": 4096}, "a-b.c": {"segment.ms": 8}},
        },
    )
    resolved = resolve_topic_configs(root, ["orders", "a-b.c"])
    orders, abc = resolved["orders"], resolved["a-b.c"]
    broker = "broker metadata (__cluster_metadata)"
    assert orders.config.retention_ms == -1 and orders.source_of("retention.ms") == broker
    assert orders.known_from == broker
    assert orders.config.retention_bytes == 1000
    assert orders.source_of("retention.bytes") == f"{broker}, every broker's default"
    assert orders.config.segment_ms == 88
    assert orders.source_of("segment.ms") == f"{broker}, broker 1's default"
    assert orders.config.index_interval_bytes == 4096  # broker 2's is not this dir's
    # the broker applies its default where its metadata sets nothing, whatever we ingested
    assert (
        orders.config.segment_bytes == 1073741824 and orders.source_of("segment.bytes") == "default"
    )
    # a topic the metadata does not name: the run that wrote it
    assert abc.config.segment_ms == 8 and abc.source_of("segment.ms") == "ingest run ingested"
    assert abc.config.retention_bytes == -1
    conf = tmp_path / "t.yaml"
    conf.write_text("topics:\n  orders: {retention.ms: 5}\n")
    orders = resolve_topic_configs(root, ["orders"], conf)["orders"]
    assert orders.config.retention_ms == 5 and orders.source_of("retention.ms") == f"file {conf}"


def test_segment_sizes_on_the_driver_and_in_tasks_agree(spark, tmp_path: Path) -> None:
    """A small root is listed by the driver (no Spark job); a big one by a pass in the tasks:
    both give every segment's (base offset, bytes) in offset order."""
    for name, segments in {"a-0": (0, 30, 7), "a-1": (5,), "b-0": ()}.items():
        (tmp_path / name).mkdir()
        for base in segments:
            (tmp_path / name / f"{base:020d}.log").write_bytes(b"x" * (base + 3))
        (tmp_path / name / f"{0:020d}.index").write_bytes(b"")  # not a segment size
    units = [{"dir": name} for name in ("a-0", "a-1", "b-0")]
    expected = {"a-0": [(0, 3), (7, 10), (30, 33)], "a-1": [(5, 8)], "b-0": []}
    assert segment_sizes(spark, tmp_path, units) == expected
    assert segment_sizes(spark, tmp_path, units, driver_limit=0) == expected
