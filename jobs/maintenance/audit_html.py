"""The compaction audit as one HTML file that opens offline: charts as embedded PNGs.

matplotlib draws (headless it falls back to its Agg backend; no display needed); the images are inlined as base64, so the
file needs no network, no CDN and no sibling files.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from pathlib import Path

import pyarrow as pa

MAX_BARS = 60  # dirty-ratio bars: the partitions with the highest ratios beyond this many


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


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


def _stacked_by_topic(
    rows: list[dict], column: str, title: str, xlabel: str, ylabel: str, nothing: str
):
    per_topic: dict[str, dict[str, int]] = {}
    labels: list[str] = []
    for r in rows:
        buckets = json.loads(r[column])
        labels = list(buckets)
        into = per_topic.setdefault(r["topic"], dict.fromkeys(buckets, 0))
        for label, n in buckets.items():
            into[label] += n
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
    figures = {
        "Dirty ratio": dirty_ratio_chart(rows),
        "Duplicate keys": _stacked_by_topic(
            rows,
            "key_distribution",
            "How many records each key has",
            "records per key",
            "keys",
            "No record has a key.",
        ),
        "Tombstone age": _stacked_by_topic(
            rows,
            "tombstone_ages",
            "Tombstones by age",
            "age (now - record timestamp)",
            "tombstones",
            "No tombstones: no record has a key with a null value.",
        ),
    }
    if compacted is not None and compacted.num_rows:
        figures["Before and after compaction"] = compaction_chart(compacted.to_pylist())
    return figures


def charts(table: pa.Table, compacted: pa.Table | None = None) -> dict[str, str]:
    """The charts as base64 PNGs, by title."""
    return {name: _png(fig) for name, fig in audit_figures(table, compacted).items()}


_COLUMNS = (
    "topic",
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


def _table(rows: list[dict], columns: tuple[str, ...]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for r in rows:
        cells = []
        for c in columns:
            value = r[c]
            text = f"{value:.3f}" if isinstance(value, float) else str(value)
            cells.append(f"<td>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def write_audit_html(
    table: pa.Table,
    path: str | os.PathLike[str],
    *,
    title: str,
    summary: str,
    compacted: pa.Table | None = None,
) -> Path:
    """Write the report page: summary, charts, one table row per partition; with a compact
    run's report rows (`compacted`), its before/after chart and rows as well."""
    images = charts(table, compacted)
    tables = _table(table.to_pylist(), _COLUMNS)
    if compacted is not None and compacted.num_rows:
        run = html.escape(str(compacted.column("run_id")[0]))
        tables += f"<h2>Compact run {run}</h2>" + _table(compacted.to_pylist(), _COMPACT_COLUMNS)
    figures = "".join(
        f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(name)}</figcaption></figure>"
        for name, data in images.items()
    )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px}}figure{{display:inline-block;margin:1em}}
pre{{background:#f6f6f6;padding:1em}}</style></head>
<body><h1>{html.escape(title)}</h1><pre>{html.escape(summary)}</pre>{figures}
{tables}</body></html>
"""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, target)
    return target
