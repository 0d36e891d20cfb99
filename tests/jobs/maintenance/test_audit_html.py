"""The audit's charts: a chart with nothing to show says so in words; a compact run's before and
after join the page when its report rows are given."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pyarrow as pa

from jobs.maintenance.audit_html import audit_figures, write_audit_html


def _audit_rows(tombstones: int) -> pa.Table:
    ages = {"< 1 d": tombstones, "1-7 d": 0}
    row = {
        "topic": "customers",
        "partition": 0,
        "records": 10,
        "distinct_keys": 4,
        "superseded_records": 6,
        "tombstones": tombstones,
        "null_key_records": 0,
        "dirty_ratio": 1.0,
        "min_cleanable_dirty_ratio": 0.5,
        "would_clean_now": True,
        "bytes_freed_now": 100,
        "verdict": "would be cleaned now",
        "key_distribution": json.dumps({"1": 2, "2-4": 2}),
        "tombstone_ages": json.dumps(ages),
    }
    return pa.Table.from_pylist([row])


def _compact_rows() -> pa.Table:
    row = {
        "run_id": "compact-1",
        "topic": "customers",
        "partition": 0,
        "status": "cleaned",
        "segments_before": 3,
        "bytes_before": 900,
        "bytes_after": 300,
        "records_read": 10,
        "records_kept": 4,
        "superseded_removed": 6,
        "tombstones_removed": 0,
        "round_end_offset": 10,
    }
    return pa.Table.from_pylist([row])


def _words(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_a_chart_with_nothing_to_show_says_so_in_words() -> None:
    figures = audit_figures(_audit_rows(tombstones=0))
    empty = figures["Tombstone age"]
    assert _words(empty) == ["No tombstones: no record has a key with a null value."]
    assert not empty.axes[0].axison  # no empty axis from -0.04 to 0.04
    full = audit_figures(_audit_rows(tombstones=3))["Tombstone age"]
    assert full.axes[0].axison and not _words(full)
    assert _words(audit_figures(pa.Table.from_pylist([]))["Dirty ratio"]) == [
        "No partition was audited."
    ]
    plt.close("all")


def test_a_compact_run_adds_its_before_and_after(tmp_path) -> None:
    figures = audit_figures(_audit_rows(1), _compact_rows())
    chart = figures["Before and after compaction"]
    heights = sorted(p.get_height() for p in chart.axes[0].patches)
    assert heights == [300, 900]
    nothing = _compact_rows().to_pylist()
    nothing[0].update(status="not cleaned", segments_before=0)
    idle = audit_figures(_audit_rows(1), pa.Table.from_pylist(nothing))
    assert _words(idle["Before and after compaction"]) == ["The compact run cleaned no partition."]
    plt.close("all")
    page = write_audit_html(
        _audit_rows(1), tmp_path / "a.html", title="t", summary="s", compacted=_compact_rows()
    ).read_text()
    assert page.count('<figure class="chart">') == 4 and "Compact run compact-1" in page
    assert "<img" not in page and "http" not in page  # inline SVG, nothing to fetch
    plain = write_audit_html(_audit_rows(1), tmp_path / "b.html", title="t", summary="s")
    assert plain.read_text().count('<figure class="chart">') == 3
