"""The compaction audit job: the real-broker fixture against kafka-python, known answers on a
generated partition against the core's single-process reference, the HTML page, read-only."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pyarrow.compute as pc
import pytest

import jobs.compact as compact_job
import jobs.compaction_audit as audit_job
from jobs.maintenance.report import read_report
from kafkalog_core.log.names import CLEAN_SHUTDOWN_FILE, segment_log_files
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.maintenance.cleaner import (
    CLEANED,
    NOT_ELIGIBLE,
    CleanerSettings,
    clean_partition,
)
from kafkalog_core.maintenance.cleaner_audit import (
    BOUND_MIN_COMPACTION_LAG,
    partition_cleaning_state,
)
from kafkalog_core.maintenance.cleaner_facts import kafka_retained, partition_record_facts
from tests.log.cleaner_logs import DAY, changelog_partition
from tests.log.test_cleaner_audit import (
    COMPACT,
    NOW,
    compacted_partitions,
    kafka_python_counts,
    kafka_python_records,
    transactions_partition,
)


def _checksums(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def confluent_audit(spark, fixtures_dir: Path, tmp_path_factory):
    root = fixtures_dir / "logdirs" / "confluent-5.1.2"
    work = tmp_path_factory.mktemp("audit")
    conf = work / "topics.yaml"
    # a copied broker dir has no topic configs: say which topics are compacted
    conf.write_text(
        "topics:\n"
        + "".join(
            f"  {p.name.rpartition('-')[0]}: {{cleanup.policy: compact}}\n"
            for p in compacted_partitions(root)
            if not p.name.startswith("__consumer_offsets")
        )
    )
    before = _checksums(root)
    result = audit_job.run(
        spark,
        str(root),
        topic_config=str(conf),
        report=str(work / "report"),
        html=str(work / "audit.html"),
        now=NOW,
        out=lambda _line: None,
    )
    assert _checksums(root) == before  # read-only
    return root, work, result


def test_real_broker_counts_match_kafka_python(confluent_audit) -> None:
    root, _work, result = confluent_audit
    rows = {f"{r['topic']}-{r['partition']}": r for r in result.rows.to_pylist()}
    partitions = compacted_partitions(root)
    assert sorted(rows) == sorted(p.name for p in partitions)  # only the compacted topics
    for d in partitions:
        want = kafka_python_counts(kafka_python_records(d))
        row = rows[d.name]
        assert {name: row[name] for name in want} == want, d.name
        assert row["verdict"].startswith("nothing to clean"), d.name
    assert sum(r["superseded_records"] for r in rows.values()) > 0


def test_report_and_offline_html(confluent_audit) -> None:
    _root, work, result = confluent_audit
    report = read_report(work / "report")
    assert report.num_rows == result.rows.num_rows
    assert set(report.column("job").to_pylist()) == {"compaction-audit"}
    page = (work / "audit.html").read_text()
    assert page.count('<figure class="chart') == 3 and "<img" not in page
    assert not re.search(r"(src|href)=\"https?:", page)  # opens offline
    assert "<h2>__consumer_offsets</h2>" in page and "compaction audit" in result.summary


def test_html_with_no_file_goes_beside_the_log_dir_not_into_the_current_dir() -> None:
    args = audit_job._parser().parse_args(["--log-dir", "/data/logs", "--html"])
    assert args.html == ""  # run() writes to default_html_path
    where = audit_job.default_html_path(Path("/data/logs"))
    assert where == Path("/data/.logs.kafkalog/compaction-audit.html")
    assert audit_job._parser().parse_args(["--log-dir", "x"]).html is None


def test_generated_partition_matches_the_single_process_reference(spark, tmp_path: Path) -> None:
    root = tmp_path / "logs"
    transactions_partition(root / "t-0")
    d = root / "t-0"
    PartitionLog.open(d, COMPACT, recovery_point=0).close()  # its .txnindex, as a broker's
    (tmp_path / "t.yaml").write_text("topics:\n  t: {cleanup.policy: compact}\n")
    result = audit_job.run(
        spark, str(root), topic_config=str(tmp_path / "t.yaml"), now=NOW, out=lambda _l: None
    )
    (row,) = result.rows.to_pylist()
    state = partition_cleaning_state(d, COMPACT, None, NOW)
    facts, counts = partition_record_facts(d, COMPACT, NOW, state=state)
    keep = kafka_retained(facts)
    assert row["removable_records_now"] == int((~keep).sum()) > 0
    round_ = clean_partition(d, COMPACT, NOW)
    assert row["bytes_freed_now"] == round_.bytes_before - round_.bytes_after > 0
    assert row["records"] == counts.records == 12
    assert (row["null_key_records"], row["tombstones"], row["aborted_records"]) == (1, 3, 1)
    assert row["transaction_markers"] == 2
    # keys a b c d e f g, aborted c excluded: a has 3 records, b 2, g 2
    assert row["distinct_keys"] == 6 and row["superseded_records"] == 4
    assert row["verdict"].startswith("would be cleaned now (dirty ratio 1.00 > 0.5)")
    assert row["would_clean_now"]
    assert pc.sum(result.rows.column("records")).as_py() == 12


def test_delete_topics_are_skipped_unless_all_topics(spark, tmp_path: Path) -> None:
    root = tmp_path / "logs"
    transactions_partition(root / "t-0")
    result = audit_job.run(spark, str(root), now=NOW, out=lambda _l: None)
    assert result.rows.num_rows == 0
    result = audit_job.run(spark, str(root), now=NOW, all_topics=True, out=lambda _l: None)
    (row,) = result.rows.to_pylist()
    assert row["verdict"].startswith("not compacted")


def test_a_partition_split_by_segment_gives_the_same_report(spark, tmp_path: Path) -> None:
    root = tmp_path / "logs"
    transactions_partition(root / "t-0")  # two segments: 0 and 20
    transactions_partition(root / "t-1")
    (tmp_path / "t.yaml").write_text("topics:\n  t: {cleanup.policy: compact}\n")
    runs = [
        audit_job.run(
            spark,
            str(root),
            topic_config=str(tmp_path / "t.yaml"),
            now=NOW,
            tasks=tasks,
            out=lambda _l: None,
        ).rows.to_pylist()
        for tasks in (1, 8)  # 8 slots: each partition is more than a fair share, so it splits
    ]
    assert runs[0] == runs[1]
    assert runs[0][0]["removable_records_now"] > 0


@pytest.mark.parametrize(
    "settings",
    [CleanerSettings(), CleanerSettings(dedupe_buffer_size=96)],  # a map of 3 keys: it fills
    ids=["default", "map-full"],
)
def test_the_audit_reports_what_compact_does_on_the_same_log(
    spark, tmp_path: Path, settings: CleanerSettings
) -> None:
    root = tmp_path / "logs"
    changelog_partition(root / "t-0")
    transactions_partition(root / "t-1")  # written without its .txnindex
    conf = tmp_path / "t.yaml"
    conf.write_text(
        "topics:\n  t: {cleanup.policy: compact, segment.bytes: 1200, index.interval.bytes: 256}\n"
    )
    common = {"topic_config": str(conf), "now": NOW, "settings": settings, "out": lambda _l: None}
    audit_result = audit_job.run(spark, str(root), **common)
    compact_result = compact_job.run(spark, str(root), **common)
    audit, compact = audit_result.rows.to_pylist(), compact_result.rows.to_pylist()
    assert len(audit) == len(compact) == 2
    for a, c in zip(audit, compact, strict=True):
        assert a["round_end_offset"] == c["round_end_offset"] is not None
        assert (a["round_bytes_before"], a["round_bytes_after"]) == (
            c["bytes_before"],
            c["bytes_after"],
        )
        assert a["bytes_freed_now"] == c["bytes_before"] - c["bytes_after"] > 0
        assert a["removable_records_now"] == c["records_read"] - c["records_kept"] > 0
        assert a["offset_map_full"] == c["map_full"]
        # the active segment is never read: its superseded records stay, on their own line
        assert a["round_end_offset"] <= a["first_uncleanable_offset"]
    full = settings.max_keys < 10
    assert any(a["offset_map_full"] for a in audit) == full
    if full:
        assert all(a["round_end_offset"] < a["first_uncleanable_offset"] for a in audit)
        assert "the offset map fills at 3 keys" in audit[0]["verdict"]
    # the hand-written partition has no .txnindex: both keep the aborted record, and say why
    assert ".txnindex" in audit[1]["verdict"] and audit[1]["aborted_records"] == 0
    # the same totals on both screens
    audit_summary, compact_summary = audit_result.summary, compact_result.summary
    freed = re.search(r"(\S+ \S+ -> \S+ \S+), (\d+) records removed", compact_summary)
    assert freed and f"{freed.group(1)}, {freed.group(2)} records removed" in audit_summary
    assert "left in the active segments" in audit_summary


def test_after_an_unclean_shutdown_both_judge_the_lag_by_the_rebuilt_time_index(
    spark, tmp_path: Path
) -> None:
    """A log dir without `.kafka_cleanshutdown` (and no recovery-point checkpoint: from offset 0)
    is recovered by a broker's load, which rebuilds every time index from the records. Restored
    without .timeindex files into .log files dated 10 days back, with records 2 days old and a
    3-day min.compaction.lag.ms, a broker's cleaner waits; the audit, the dry run and --apply
    must all wait too. With the marker the broker judges by the mtime and cleans now."""
    root = tmp_path / "logs"
    pdir = changelog_partition(root / "t-0")
    for path in pdir.glob("*.timeindex"):
        path.unlink()
    old_s = (NOW - 10 * DAY) / 1000
    for path in segment_log_files(pdir):
        os.utime(path, (old_s, old_s))
    conf = tmp_path / "t.yaml"
    conf.write_text(
        "topics:\n  t: {cleanup.policy: compact, segment.bytes: 1200, "
        f"min.compaction.lag.ms: {3 * DAY}}}\n"
    )
    common = {"topic_config": str(conf), "now": NOW, "out": lambda _l: None}
    before = {p.name: p.read_bytes() for p in pdir.iterdir()}
    [audit] = audit_job.run(spark, str(root), **common).rows.to_pylist()
    assert (audit["uncleanable_bound"], audit["first_uncleanable_offset"]) == (
        BOUND_MIN_COMPACTION_LAG,
        0,
    )
    assert audit["bytes_freed_now"] == 0
    [dry] = compact_job.run(spark, str(root), **common).rows.to_pylist()
    [applied] = compact_job.run(spark, str(root), apply=True, **common).rows.to_pylist()
    assert dry["status"] == applied["status"] == NOT_ELIGIBLE
    assert {p.name: p.read_bytes() for p in pdir.iterdir()} == before
    (root / CLEAN_SHUTDOWN_FILE).write_text("")
    [audit] = audit_job.run(spark, str(root), **common).rows.to_pylist()
    assert audit["bytes_freed_now"] > 0
    [applied] = compact_job.run(spark, str(root), apply=True, **common).rows.to_pylist()
    assert applied["status"] == CLEANED
