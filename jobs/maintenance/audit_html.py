"""The compaction audit as one HTML file that opens offline, and its charts for a notebook.

The page: the run's summary, then per topic its settings (and where each came from) and the
verdict in words, a table per partition that sorts on a click, and charts drawn as inline SVG
(jobs/maintenance/svg_charts.py) that scale and show their values on hover; a chart with
nothing to show says why. One file: no network, no CDN, no sibling files.

`audit_figures` draws the same charts with matplotlib for a notebook's inline output (headless
it falls back to its Agg backend; no display needed).
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pyarrow as pa

from jobs.maintenance.svg_charts import Bar, Series, bar_chart, nothing_to_show, stacked_chart

MAX_BARS = 60  # dirty-ratio bars: the partitions with the highest ratios beyond this many


def _figure(width: float, height: float):
    """A figure and its axes that belong to the caller alone.

    Made through pyplot, which sets up a notebook's inline display, and closed there at once:
    an open pyplot figure is drawn again under whichever cell ends next, so a notebook would
    show each chart twice.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    plt.close(fig)
    return fig, ax


def _nothing_to_show(title: str, words: str):
    """A chart with nothing to draw says so in words instead of drawing an empty axis."""
    fig, ax = _figure(7, 1.6)
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, words, ha="center", va="center", transform=ax.transAxes, fontsize=11)
    return fig


def dirty_ratio_chart(rows: list[dict]):
    """Bars of each partition's dirty ratio, its threshold as a marker, colour = verdict."""
    title = "Dirty ratio per partition (red: the cleaner would clean it now)"
    if not rows:
        return _nothing_to_show(title, "No partition was audited.")
    shown = sorted(rows, key=lambda r: -r["dirty_ratio"])[:MAX_BARS]
    shown.sort(key=lambda r: (r["topic"], r["partition"]))
    fig, ax = _figure(max(6.0, 0.25 * len(shown) + 2), 3.6)
    names = [f"{r['topic']}-{r['partition']}" for r in shown]
    colours = ["#d62728" if r["would_clean_now"] else "#1f77b4" for r in shown]
    ax.bar(range(len(shown)), [r["dirty_ratio"] for r in shown], color=colours)
    ax.scatter(
        range(len(shown)),
        [r["min_cleanable_dirty_ratio"] for r in shown],
        marker="_",
        s=200,
        color="black",
        label="min.cleanable.dirty.ratio",
    )
    ax.set_xticks(range(len(shown)), names, rotation=90, fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_ylabel("dirty ratio")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    return fig


# the per-topic bucket charts: (name, column, title, x axis, unit, what an empty one says)
_DISTRIBUTIONS = (
    (
        "Duplicate keys",
        "key_distribution",
        "How many records each key has",
        "records per key",
        "keys",
        "No record has a key.",
    ),
    (
        "Tombstone age",
        "tombstone_ages",
        "Tombstones by age",
        "age: now - record timestamp",
        "tombstones",
        "No tombstones: no record has a key with a null value.",
    ),
)


def _per_topic(rows: list[dict], column: str) -> tuple[list[str], dict[str, dict[str, int]]]:
    """A JSON bucket column (`key_distribution`, `tombstone_ages`) summed per topic: the
    bucket labels in order, and per topic the count in each."""
    per_topic: dict[str, dict[str, int]] = {}
    labels: list[str] = []
    for r in rows:
        buckets = json.loads(r[column])
        labels = list(buckets)
        into = per_topic.setdefault(r["topic"], dict.fromkeys(buckets, 0))
        for label, n in buckets.items():
            into[label] += n
    return labels, per_topic


def _stacked_by_topic(
    rows: list[dict], column: str, title: str, xlabel: str, ylabel: str, nothing: str
):
    labels, per_topic = _per_topic(rows, column)
    if not any(any(counts.values()) for counts in per_topic.values()):
        return _nothing_to_show(title, nothing)
    fig, ax = _figure(7, 3.6)
    bottom = [0] * len(labels)
    for topic in sorted(per_topic):
        values = [per_topic[topic][label] for label in labels]
        # matplotlib hides legend labels starting with "_" (Kafka's internal topics do)
        ax.bar(labels, values, bottom=bottom, label=f" {topic}" if topic.startswith("_") else topic)
        bottom = [a + b for a, b in zip(bottom, values, strict=True)]
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if per_topic:
        ax.legend(fontsize=7, loc="upper right")
    return fig


def compaction_chart(rounds: list[dict]):
    """Log bytes of each partition a compact run cleaned, before and after its round."""
    title = "Before and after compaction (bytes of the segments each round rewrote)"
    done = [r for r in rounds if r["segments_before"]]
    if not done:
        return _nothing_to_show(title, "The compact run cleaned no partition.")
    done = sorted(done, key=lambda r: (r["topic"], r["partition"]))[:MAX_BARS]
    fig, ax = _figure(max(6.0, 0.35 * len(done) + 2), 3.6)
    at = range(len(done))
    ax.bar([x - 0.2 for x in at], [r["bytes_before"] for r in done], 0.4, label="before")
    ax.bar([x + 0.2 for x in at], [r["bytes_after"] for r in done], 0.4, label="after")
    ax.set_xticks(at, [f"{r['topic']}-{r['partition']}" for r in done], rotation=90, fontsize=7)
    ax.set_ylabel("bytes")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def audit_figures(table: pa.Table, compacted: pa.Table | None = None) -> dict:
    """The charts as matplotlib figures, by title (a notebook shows them inline); with a
    compact run's report rows (`compacted`), its before/after too."""
    rows = table.to_pylist()
    figures = {"Dirty ratio": dirty_ratio_chart(rows)}
    for name, column, title, xlabel, unit, nothing in _DISTRIBUTIONS:
        figures[name] = _stacked_by_topic(rows, column, title, xlabel, unit, nothing)
    if compacted is not None and compacted.num_rows:
        figures["Before and after compaction"] = compaction_chart(compacted.to_pylist())
    return figures


_COLUMNS = (
    "partition",
    "records",
    "distinct_keys",
    "superseded_records",
    "tombstones",
    "null_key_records",
    "dirty_ratio",
    "bytes_freed_now",
    "verdict",
)

_COMPACT_COLUMNS = (
    "topic",
    "partition",
    "status",
    "bytes_before",
    "bytes_after",
    "records_read",
    "records_kept",
    "superseded_removed",
    "tombstones_removed",
    "round_end_offset",
)

# `name=value (source)` items of the report's settings column
_SETTING = re.compile(r"([\w.]+)=(.*?) \(([^()]*)\)(?:, |$)")

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:72em;padding:0 1em;color:#222}
h1{font-size:1.5em;overflow-wrap:anywhere}h2{margin-top:2em;border-bottom:1px solid #ddd}
.summary{background:#f6f6f6;padding:1em;white-space:pre-wrap;overflow-wrap:anywhere}
.verdict{font-size:1.1em}dl.settings{display:grid;grid-template-columns:max-content 1fr;gap:.2em 1em}
dl.settings dt{font-family:monospace}dl.settings dd{margin:0}.source{color:#666}
table{border-collapse:collapse;font-size:13px;margin:1em 0;display:block;overflow-x:auto}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td.text{text-align:left}
th{cursor:pointer;background:#f0f0f0;user-select:none}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
.chart{margin:1.5em 0}.chart figcaption{font-weight:bold;margin-bottom:.3em}
.plot svg{width:100%;height:auto;max-height:22em}
svg text{font-size:11px;fill:#333}svg .grid{stroke:#eee}svg .marker{stroke:#000;stroke-width:2}
svg rect.bar{fill:#4e79a7}svg rect.clean-now{fill:#e15759}svg rect.before{fill:#bab0ac}
svg rect.after{fill:#4e79a7}svg rect:hover{opacity:.7}
.legend{list-style:none;padding:0;margin:.2em 0;display:flex;flex-wrap:wrap;gap:1em;font-size:13px}
.swatch{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:middle}
.swatch.line{height:2px;background:#000}.nothing{color:#555;font-style:italic}
"""

_SORT_SCRIPT = """
for (const table of document.querySelectorAll("table.sortable")) {
  table.querySelectorAll("th").forEach((th, i) => th.addEventListener("click", () => {
    const ascending = th.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("th").forEach((h) => h.removeAttribute("aria-sort"));
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    const key = (row) => {
      const v = row.cells[i].dataset.v;
      return v !== "" && !isNaN(Number(v)) ? Number(v) : v;
    };
    const rows = Array.from(table.tBodies[0].rows);
    rows.sort((a, b) => {
      const x = key(a), y = key(b);
      const c = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : typeof x === "number" ? -1 : 1;
      return ascending ? c : -c;
    });
    for (const row of rows) table.tBodies[0].appendChild(row);
  }));
}
"""


def _cell(value: object) -> str:
    if value is None:
        return '<td data-v=""></td>'
    text = f"{value:.3f}" if isinstance(value, float) else str(value)
    kind = "" if isinstance(value, int | float) else ' class="text"'
    return f'<td{kind} data-v="{html.escape(str(value))}">{html.escape(text)}</td>'


def _table(rows: list[dict], columns: tuple[str, ...], caption: str) -> str:
    """A table whose columns sort on a click (numbers as numbers)."""
    columns = tuple(c for c in columns if not rows or c in rows[0])
    head = "".join(f'<th title="sort by {html.escape(c)}">{html.escape(c)}</th>' for c in columns)
    body = "".join("<tr>" + "".join(_cell(r.get(c)) for c in columns) + "</tr>" for r in rows)
    return (
        f'<table class="sortable"><caption>{html.escape(caption)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def _settings(rows: list[dict]) -> str:
    """The topic's cleaner settings and where each came from."""
    text = rows[0].get("settings") or ""
    items = _SETTING.findall(text)
    if not items:
        return ""
    entries = "".join(
        f'<dt>{html.escape(name)}</dt><dd>{html.escape(value)} <span class="source">'
        f"({html.escape(source)})</span></dd>"
        for name, value, source in items
    )
    return f'<dl class="settings">{entries}</dl>'


def _verdict(rows: list[dict]) -> str:
    """The topic's verdict in words: how many partitions the cleaner would clean now, and each
    distinct verdict with the partitions it holds for."""
    n = len(rows)
    if not any(r.get("compacted", True) for r in rows):
        return (
            f"Not compacted: Kafka's log cleaner leaves this topic's {n} "
            f"partition{'s' * (n != 1)} alone (cleanup.policy has no compact)."
        )
    now = sum(bool(r.get("would_clean_now")) for r in rows)
    words = (
        f"{now} of {n} partition{'s' * (n != 1)} would be cleaned now."
        if now
        else f"No partition of the {n} would be cleaned now."
    )
    by_verdict: dict[str, list[str]] = {}
    for r in rows:
        by_verdict.setdefault(str(r.get("verdict")), []).append(str(r["partition"]))
    details = "".join(
        f"<li>partition{'s' * (len(ps) != 1)} {html.escape(', '.join(ps))}: "
        f"{html.escape(verdict)}</li>"
        for verdict, ps in by_verdict.items()
    )
    return f'<p class="verdict">{html.escape(words)}</p><ul>{details}</ul>'


def _dirty_ratio_svg(rows: list[dict]) -> str:
    title = "Dirty ratio per compacted partition, against min.cleanable.dirty.ratio"
    compacted = [r for r in rows if r.get("compacted", True)]
    if not compacted:
        return nothing_to_show(
            title, "No compacted partition was audited: the cleaner only cleans compacted topics."
        )
    if not any(r["dirty_ratio"] for r in compacted):
        return nothing_to_show(
            title,
            "Every compacted partition is clean (dirty ratio 0): nothing was written since the "
            "cleaner's last round.",
        )
    shown = sorted(compacted, key=lambda r: -r["dirty_ratio"])[:MAX_BARS]
    shown.sort(key=lambda r: (r["topic"], r["partition"]))
    bars = [
        Bar(
            label=f"{r['topic']}-{r['partition']}",
            value=r["dirty_ratio"],
            hover=f"{r['topic']}-{r['partition']}: dirty ratio {r['dirty_ratio']:.3f}, "
            f"{r['verdict']}",
            kind="clean-now" if r["would_clean_now"] else "bar",
            marker=r["min_cleanable_dirty_ratio"],
            marker_hover=f"min.cleanable.dirty.ratio {r['min_cleanable_dirty_ratio']}",
        )
        for r in shown
    ]
    legend = (
        '<ul class="legend"><li><span class="swatch" style="background:#e15759"></span>'
        'would be cleaned now</li><li><span class="swatch" style="background:#4e79a7"></span>'
        'not yet</li><li><span class="swatch line"></span>min.cleanable.dirty.ratio</li></ul>'
    )
    return bar_chart(title, bars, y_label="dirty ratio", top=1.0, legend=legend)


def _distribution_svg(rows: list[dict], column: str, title: str, unit: str, nothing: str) -> str:
    labels, per_topic = _per_topic(rows, column)
    if not any(any(counts.values()) for counts in per_topic.values()):
        return nothing_to_show(title, nothing)
    series = [Series(t, [per_topic[t][label] for label in labels]) for t in sorted(per_topic)]
    return stacked_chart(title, labels, series, y_label=unit, unit=unit)


def _compaction_svg(rounds: list[dict]) -> str:
    title = "Before and after compaction (bytes of the segments each round rewrote)"
    done = sorted(
        (r for r in rounds if r["segments_before"]), key=lambda r: (r["topic"], r["partition"])
    )
    if not done:
        return nothing_to_show(title, "The compact run cleaned no partition.")
    bars = []
    for r in done[: MAX_BARS // 2]:
        name = f"{r['topic']}-{r['partition']}"
        bars.append(
            Bar(
                name,
                r["bytes_before"],
                f"{name}: {r['bytes_before']:,} bytes before",
                "before",
            )
        )
        bars.append(
            Bar(
                "",
                r["bytes_after"],
                f"{name}: {r['bytes_after']:,} bytes after",
                "after",
            )
        )
    legend = (
        '<ul class="legend"><li><span class="swatch" style="background:#bab0ac"></span>before'
        '</li><li><span class="swatch" style="background:#4e79a7"></span>after</li></ul>'
    )
    return bar_chart(title, bars, y_label="bytes", legend=legend)


def page_charts(table: pa.Table, compacted: pa.Table | None = None) -> dict[str, str]:
    """The page's charts as SVG figures (or their "nothing to show" sentence), by title."""
    rows = table.to_pylist()
    charts = {"Dirty ratio": _dirty_ratio_svg(rows)}
    for name, column, title, xlabel, unit, nothing in _DISTRIBUTIONS:
        charts[name] = _distribution_svg(rows, column, f"{title} ({xlabel})", unit, nothing)
    if compacted is not None and compacted.num_rows:
        charts["Before and after compaction"] = _compaction_svg(compacted.to_pylist())
    return charts


def write_audit_html(
    table: pa.Table,
    path: str | os.PathLike[str],
    *,
    title: str,
    summary: str,
    compacted: pa.Table | None = None,
) -> Path:
    """Write the report page (atomically): summary, per topic its settings, verdict and
    partitions, the charts; with a compact run's report rows (`compacted`), its before/after."""
    rows = table.to_pylist()
    by_topic: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["topic"], r["partition"])):
        by_topic.setdefault(r["topic"], []).append(r)
    topics = "".join(
        f"<section><h2>{html.escape(topic)}</h2>{_settings(rs)}{_verdict(rs)}"
        f"{_table(rs, _COLUMNS, f'{topic}: one row per partition (click a heading to sort)')}"
        "</section>"
        for topic, rs in by_topic.items()
    )
    if not by_topic:
        topics = (
            '<p class="nothing">No partition was audited: the log dir has no compacted topic.</p>'
        )
    charts = "".join(page_charts(table, compacted).values())
    compact = ""
    if compacted is not None and compacted.num_rows:
        run = str(compacted.column("run_id")[0])
        compact = f"<h2>Compact run {html.escape(run)}</h2>" + _table(
            compacted.to_pylist(), _COMPACT_COLUMNS, f"what compact run {run} did per partition"
        )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{_STYLE}</style></head>
<body><h1>{html.escape(title)}</h1><pre class="summary">{html.escape(summary)}</pre>
{topics}<h2>Charts</h2>{charts}{compact}
<script>{_SORT_SCRIPT}</script></body></html>
"""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, target)
    return target
