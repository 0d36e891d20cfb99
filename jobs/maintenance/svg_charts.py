"""Bar charts as inline SVG for the offline report pages: they scale with the page (a viewBox,
width 100%), show each bar's value on hover (an SVG `<title>`), keep their legend outside the
plot, and a chart with nothing to draw is a sentence saying why instead.

Plain text out, no dependencies: the page is one file that needs no network.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Bar", "Series", "bar_chart", "nothing_to_show", "stacked_chart"]

_WIDTH_PER_BAR = 28
_HEIGHT = 240
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 12, 12, 84
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7")


@dataclass(frozen=True)
class Bar:
    """One bar: its label under the axis, its value, what the hover says, and its CSS class."""

    label: str
    value: float
    hover: str
    kind: str = "bar"
    marker: float | None = None  # a threshold drawn across the bar (e.g. the ratio to beat)
    marker_hover: str = ""


@dataclass(frozen=True)
class Series:
    """One stacked layer: a name for the legend and a value per label."""

    name: str
    values: Sequence[float]


def nothing_to_show(title: str, words: str) -> str:
    """A chart's place when there is nothing to draw: its title and why."""
    return (
        f'<figure class="chart empty"><figcaption>{html.escape(title)}</figcaption>'
        f'<p class="nothing">{html.escape(words)}</p></figure>'
    )


def _ticks(top: float) -> list[float]:
    if top <= 0:
        return [0.0]
    step = 10 ** len(str(int(top))) / 10 if top >= 1 else 0.25
    while top / step > 6:
        step *= 2
    return [i * step for i in range(int(top / step) + 1)]


def _number(value: float) -> str:
    return f"{value:g}" if value != int(value) else f"{int(value):,}"


def _frame(title: str, width: int, top: float, y_label: str, body: list[str], legend: str) -> str:
    plot_h = _HEIGHT - _TOP - _BOTTOM
    parts = [
        f'<svg viewBox="0 0 {width} {_HEIGHT}" role="img" aria-label="{html.escape(title)}" '
        'preserveAspectRatio="xMinYMin meet">'
    ]
    for tick in _ticks(top):
        y = _TOP + plot_h - (tick / top * plot_h if top else 0)
        parts.append(
            f'<line class="grid" x1="{_LEFT}" x2="{width - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="tick" x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{_number(tick)}</text>"
        )
    parts.append(
        f'<text class="axis" transform="translate(14 {_TOP + plot_h / 2}) rotate(-90)" '
        f'text-anchor="middle">{html.escape(y_label)}</text>'
    )
    parts.extend(body)
    parts.append("</svg>")
    return (
        f'<figure class="chart"><figcaption>{html.escape(title)}</figcaption>{legend}'
        f'<div class="plot">{"".join(parts)}</div></figure>'
    )


def _label(x: float, text: str) -> str:
    y = _HEIGHT - _BOTTOM + 12
    return (
        f'<text class="label" x="{x:.1f}" y="{y}" text-anchor="end" '
        f'transform="rotate(-45 {x:.1f} {y})">{html.escape(text)}</text>'
    )


def bar_chart(
    title: str, bars: Sequence[Bar], *, y_label: str, top: float | None = None, legend: str = ""
) -> str:
    """One bar per item; `top` fixes the axis (a ratio's 1.0), otherwise the largest value."""
    plot_h = _HEIGHT - _TOP - _BOTTOM
    top = top or max([b.value for b in bars] + [b.marker or 0 for b in bars] + [1])
    width = max(480, _LEFT + _RIGHT + _WIDTH_PER_BAR * len(bars))
    body = []
    for i, b in enumerate(bars):
        x = _LEFT + i * _WIDTH_PER_BAR + 4
        h = max(b.value / top * plot_h, 0)
        body.append(
            f'<rect class="{b.kind}" x="{x}" y="{_TOP + plot_h - h:.1f}" '
            f'width="{_WIDTH_PER_BAR - 8}" height="{h:.1f}">'
            f"<title>{html.escape(b.hover)}</title></rect>"
        )
        if b.marker is not None:
            y = _TOP + plot_h - b.marker / top * plot_h
            body.append(
                f'<line class="marker" x1="{x - 3}" x2="{x + _WIDTH_PER_BAR - 5}" '
                f'y1="{y:.1f}" y2="{y:.1f}"><title>{html.escape(b.marker_hover)}</title></line>'
            )
        body.append(_label(x + (_WIDTH_PER_BAR - 8) / 2, b.label))
    return _frame(title, width, top, y_label, body, legend)


def stacked_chart(
    title: str, labels: Sequence[str], series: Sequence[Series], *, y_label: str, unit: str
) -> str:
    """Per label, one bar stacked from every series (in legend order)."""
    plot_h = _HEIGHT - _TOP - _BOTTOM
    totals = [sum(s.values[i] for s in series) for i in range(len(labels))]
    top = max(totals + [1])
    width = max(480, _LEFT + _RIGHT + 48 * len(labels))
    body = []
    for i, label in enumerate(labels):
        x = _LEFT + i * 48 + 8
        base = 0.0
        for n, s in enumerate(series):
            value = s.values[i]
            if not value:
                continue
            h = value / top * plot_h
            y = _TOP + plot_h - (base + value) / top * plot_h
            hover = f"{s.name}: {_number(value)} {unit} at {label}"
            body.append(
                f'<rect class="bar" style="fill:{PALETTE[n % len(PALETTE)]}" x="{x}" '
                f'y="{y:.1f}" width="32" height="{h:.1f}"><title>{html.escape(hover)}</title>'
                "</rect>"
            )
            base += value
        body.append(_label(x + 16, label))
    legend = "".join(
        f'<li><span class="swatch" style="background:{PALETTE[n % len(PALETTE)]}"></span>'
        f"{html.escape(s.name)}</li>"
        for n, s in enumerate(series)
    )
    return _frame(title, width, top, y_label, body, f'<ul class="legend">{legend}</ul>')
