"""The direct write mode (no shuffle): same records and offsets as the range mode, one range per
input split and partition, incremental runs, a killed task, and how `auto` chooses the mode and
the arrow reader's tasks (per split, or per group of partitions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.ingest import choose_write_mode, direct_tasks_choice, run, write_mode_choice
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.run.history import IngestHistory
from jobs.ingestion.tasks.planner import partition_owners
from kafkalog_core.errors import ConfigError, KafkaLogError
from tests.jobs.ingest_helpers import (
    SOURCE_ORDER_PARTITIONS,
    expected_records,
    read_root,
    segment_files,
    snapshot,
    source_order_doc,
    spark_read_order,
    staging_leftovers,
    two_sources,
)

FILES = 3
N_A, N_B = 600, 300


def _config(
    path: Path,
    root: Path,
    mode: str = "auto",
    task_reader: str = "auto",
    direct_tasks: str = "auto",
    **kw,
) -> IngestConfig:
    doc = source_order_doc(path, root, task_reader, **kw)
    doc["output"]["write_mode"] = mode
    doc["output"]["direct_tasks"] = direct_tasks
    return IngestConfig.from_dict(doc)


def _run(spark, path, root, run_id, mode="auto", task_reader="auto", direct_tasks="auto", **kw):
    config = _config(path, root, mode, task_reader, direct_tasks)
    return run(spark, config, run_id=run_id, out=lambda _: None, **kw)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict:
    """Rows whose source order is their (event_time, id) order, so `expected_records` holds."""
    return two_sources(tmp_path_factory.mktemp("direct"), N_A, N_B, files=FILES)


@pytest.mark.spark
def test_direct_writes_the_records_and_offsets_of_the_range_mode(spark, sources, tmp_path):
    roots, results = {}, {}
    for mode in ("direct", "range", "auto"):
        roots[mode] = tmp_path / mode / "logs"
        splits = {"direct_tasks": "splits"} if mode == "direct" else {}  # the relayout's way
        results[mode] = result = _run(
            spark, sources["path_a"], roots[mode], f"r-{mode}", mode, **splits
        )
        assert result.status == "committed" and result.records == N_A
        assert result.write_mode == ("range" if mode == "range" else "direct")
    ordered, starts = spark_read_order(spark, sources["path_a"], sources["a"])
    assert any(starts.values())  # several splits hold rows of one partition
    expected = expected_records(ordered, SOURCE_ORDER_PARTITIONS, in_order=True)
    assert read_root(roots["direct"]) == expected
    assert read_root(roots["range"]) == expected
    assert read_root(roots["auto"]) == expected
    # one range per input split, laid out again as one writer: one segment per partition (the
    # data is far below segment.bytes), however many splits hold its rows
    for pdir in (p.name for p in roots["direct"].iterdir() if p.is_dir()):
        assert [p.name[:20] for p in segment_files(roots["direct"] / pdir)] == ["0" * 20], pdir
    assert "the relayout encoded" in results["direct"].summary
    assert ": 3 partitions, 3 segments" in results["direct"].summary
    history = IngestHistory(roots["direct"]).find_run("r-direct")
    leo = {f"{t}-{p}": o + 1 for t, p, o, *_ in expected}
    assert history["partitions"] == {name: [0, end] for name, end in leo.items()}


@pytest.mark.spark
def test_direct_incremental_run_killed_then_rerun(spark, sources, tmp_path):
    """A second direct run continues the offsets (its first range continues the old last
    segment); killed mid-write it leaves nothing visible, and the rerun publishes once."""
    root = tmp_path / "logs"
    assert _run(spark, sources["path_a"], root, "a1", "direct").records == N_A
    before_files = {p: p.read_bytes() for p in root.glob("*/*.log")}
    before = snapshot(root)
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    old = spark.conf.get(key)
    spark.conf.set(key, "20")
    try:
        with pytest.raises(KafkaLogError, match="injected failure"):
            # Spark's reader in small Arrow batches puts the kill mid-write; the rerun reads
            # with the arrow reader, which must give the same bytes
            _run(spark, sources["path_b"], root, "b1", "direct", "spark", fail_after_batches=3)
    finally:
        spark.conf.set(key, old)
    # Whatever the tasks staged before the kill (which depends on which task got how far, and
    # whether its rows went to a partition it writes in place), nothing of it is visible, and
    # the run is not in the history
    assert snapshot(root) == before
    assert IngestHistory(root).find_run("b1") is None

    result = _run(spark, sources["path_b"], root, "b1", "direct")
    assert result.status == "committed" and result.records == N_B
    order_a, _ = spark_read_order(spark, sources["path_a"], sources["a"])
    order_b, _ = spark_read_order(spark, sources["path_b"], sources["b"])
    first = expected_records(order_a, SOURCE_ORDER_PARTITIONS, in_order=True)
    leo_a = {(t, p): o + 1 for t, p, o, *_ in first}
    both = first + expected_records(order_b, SOURCE_ORDER_PARTITIONS, leo=leo_a, in_order=True)
    assert read_root(root) == sorted(both, key=lambda r: (r[0], r[1], r[2]))
    assert staging_leftovers(root) == []
    grown = [p for p, old_bytes in before_files.items() if p.read_bytes() != old_bytes]
    assert grown and all(p.read_bytes().startswith(before_files[p]) for p in grown)


# ---------------------------------------------------------------------------------------------
# choosing the mode (no Spark)


def _plain_config(tmp_path: Path, mode: str = "auto", **doc_changes) -> IngestConfig:
    doc = source_order_doc(tmp_path / "src", tmp_path / "logs")
    doc["output"]["write_mode"] = mode
    doc.update(doc_changes)
    return IngestConfig.from_dict(doc)


def test_auto_says_why_it_takes_each_path(tmp_path):
    """No silent cliff: the summary prints the reason; no split count limit (the relayout)."""
    config = _plain_config(tmp_path)
    assert write_mode_choice(config, None, 500) == (
        "direct",
        "auto: source order, 500 input splits and 3 partitions (no shuffle; the splits' shares "
        "laid out as one writer afterwards, so any split count)",
    )
    ordered = _plain_config(tmp_path, ordering=["event_time"])
    assert (
        write_mode_choice(ordered, None, 1)[1] == "auto: the ordering needs the range mode's sort"
    )
    assert write_mode_choice(config, 4, 1)[1] == "auto: --tasks 4 asks for the range mode"
    many = _plain_config(tmp_path, topics={"events": {"partitions": 1000}})
    assert "1000 partitions, more than the direct mode's 256" in write_mode_choice(many, None, 1)[1]


def test_auto_picks_direct_only_for_source_order_and_known_partitions(tmp_path):
    config = _plain_config(tmp_path)
    assert choose_write_mode(config, None, 1) == "direct"
    assert choose_write_mode(config, None, 10_000) == "direct"
    assert choose_write_mode(config, 4, 1) == "range"  # a task count asks for the range mode
    ordered = _plain_config(tmp_path, ordering=["event_time"])
    assert choose_write_mode(ordered, None, 1) == "range"
    many = _plain_config(tmp_path, topics={"events": {"partitions": 1000}})
    assert choose_write_mode(many, None, 1) == "range"
    assert choose_write_mode(_plain_config(tmp_path, "range"), None, 1) == "range"
    assert choose_write_mode(_plain_config(tmp_path, "direct"), None, 500) == "direct"


def test_write_mode_errors_are_one_clear_line(tmp_path):
    with pytest.raises(ConfigError, match=r"output.write_mode='fast' is invalid: must be one of"):
        _plain_config(tmp_path, "fast")
    with pytest.raises(ConfigError, match="write_mode=direct keeps the source order"):
        _plain_config(tmp_path, "direct", ordering=["event_time"])
    with pytest.raises(ConfigError, match="--tasks 4 applies to output.write_mode=range"):
        choose_write_mode(_plain_config(tmp_path, "direct"), 4, 1)


@pytest.mark.spark
def test_partition_tasks_asked_of_spark_s_reader_are_one_clear_line(spark, sources, tmp_path):
    root = tmp_path / "logs"
    with pytest.raises(ConfigError) as refused:
        _run(spark, sources["path_a"], root, "x", "direct", "spark", "partitions")
    assert str(refused.value) == (
        "output.direct_tasks=partitions needs the arrow task reader's direct mode; "
        "task reader: source.task_reader is spark"
    )
    assert not list(root.glob("events-*"))  # nothing published (a next run drops the staging)


def _tasks_config(tmp_path: Path, direct_tasks: str = "auto", **doc_changes) -> IngestConfig:
    doc = source_order_doc(tmp_path / "src", tmp_path / "logs")
    doc["output"]["direct_tasks"] = direct_tasks
    doc.update(doc_changes)
    return IngestConfig.from_dict(doc)


def test_partition_owners_deal_every_partition_to_one_task():
    pairs = [("b", 1), ("a", 2), ("a", 0), ("b", 0), ("a", 1)]
    owners = partition_owners(pairs, 2)
    assert owners == (
        frozenset({("a", 0), ("a", 2), ("b", 1)}),
        frozenset({("a", 1), ("b", 0)}),
    )
    assert partition_owners(pairs[:1], 8) == (frozenset({("b", 1)}),)  # never an idle task
    many = partition_owners([("t", p) for p in range(1000)], 3)
    assert sorted(p for o in many for _, p in o) == list(range(1000))
    assert [len(o) for o in many] == [334, 333, 333]


def test_auto_says_which_direct_tasks_and_why(tmp_path):
    """Partition-owning tasks (each byte written once) on at most two task slots, several
    splits and plain columns; a task per split otherwise, each reason in the summary."""
    config = _tasks_config(tmp_path)
    owners, why = direct_tasks_choice(config, 2, 8, encoded=False)
    assert owners == partition_owners([("events", p) for p in range(3)], 2)
    assert why == (
        "auto: partitions, 2 tasks each read the 8 input splits and write up to 2 of the 3 "
        "partitions whole (each byte written once, no relayout)"
    )
    assert direct_tasks_choice(config, 4, 8, encoded=False) == (
        None,
        "auto: splits, as the session has 4 task slots, more than 2 (a partition-owning task "
        "reads the whole source)",
    )
    assert direct_tasks_choice(config, 2, 1, encoded=False) == (
        None,
        "auto: splits, as there is one input split (nothing to lay out)",
    )
    assert direct_tasks_choice(config, 1, 8, encoded=True)[1].startswith(
        "auto: splits, as the key or value is encoded from columns"
    )
    defaults = _tasks_config(
        tmp_path,
        mapping={
            **source_order_doc(tmp_path / "src", tmp_path)["mapping"],
            "topic": {"column": "kind"},
        },
        topic_defaults={"partitions": 2},
    )
    assert direct_tasks_choice(defaults, 2, 8, encoded=False) == (
        None,
        "auto: splits, as topic_defaults reaches any number of partitions",
    )
    # asked for: taken whatever the slots, splits or encoding (one task per partition at most)
    wanted = _tasks_config(tmp_path, "partitions")
    owners, why = direct_tasks_choice(wanted, 16, 1, encoded=True)
    assert len(owners) == 3 and why.startswith("output.direct_tasks is: partitions, 3 tasks")
    assert direct_tasks_choice(_tasks_config(tmp_path, "splits"), 2, 8, encoded=False) == (
        None,
        "output.direct_tasks is splits",
    )


def test_direct_tasks_errors_are_one_clear_line(tmp_path):
    with pytest.raises(ConfigError, match=r"output.direct_tasks='fast' is invalid: must be one"):
        _tasks_config(tmp_path, "fast")
    with pytest.raises(
        ConfigError, match="direct_tasks=partitions applies to the direct mode, not output.write"
    ):
        _tasks_config(
            tmp_path, output={"root": "x", "write_mode": "range", "direct_tasks": "partitions"}
        )
    base = source_order_doc(tmp_path / "src", tmp_path / "logs")
    defaults = _tasks_config(
        tmp_path,
        "partitions",
        mapping={**base["mapping"], "topic": {"column": "kind"}},
        topic_defaults={"partitions": 2},
    )
    with pytest.raises(ConfigError, match="partitions needs known partitions: topic_defaults"):
        direct_tasks_choice(defaults, 2, 8, encoded=False)
