"""The audit's HTML page in a real browser: Debian's headless chromium, driven by Playwright
(launched with executable_path, never `playwright install`), loads the file offline. No console
error, no request for anything outside the file, every chart has marks or its "nothing to show"
sentence, the partition table sorts on a click, nothing runs off a 1,400 px page. The screenshot
stays in the test's temp dir."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.maintenance.audit_html import write_audit_html

CHROMIUM = Path("/usr/bin/chromium")
SETTINGS = (
    "cleanup.policy=compact (file topics.yaml), min.cleanable.dirty.ratio=0.5 (default), "
    "min.compaction.lag.ms=0 (default)"
)


def _row(topic: str, partition: int, ratio: float, tombstones: int, compacted=True) -> dict:
    return {
        "topic": topic,
        "partition": partition,
        "compacted": compacted,
        "records": 100 + partition,
        "distinct_keys": 40,
        "superseded_records": 60 - partition,
        "tombstones": tombstones,
        "null_key_records": 0,
        "dirty_ratio": ratio,
        "min_cleanable_dirty_ratio": 0.5,
        "would_clean_now": ratio > 0.5,
        "bytes_freed_now": 1000 * partition,
        "verdict": "would be cleaned now" if ratio > 0.5 else "not yet: dirty ratio below 0.5",
        "key_distribution": json.dumps({"1": 10, "2-4": 30 if ratio else 0}),
        "tombstone_ages": json.dumps({"< 1 d": tombstones, "1-7 d": 0}),
        "settings": SETTINGS if compacted else SETTINGS.replace("compact (file", "delete (file"),
    }


def _compact_rows() -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "run_id": "compact-1",
                "topic": "customers",
                "partition": p,
                "status": "cleaned",
                "segments_before": 2,
                "bytes_before": 9000 + p,
                "bytes_after": 3000 + p,
                "records_read": 100,
                "records_kept": 40,
                "superseded_removed": 60,
                "tombstones_removed": 0,
                "round_end_offset": 100,
            }
            for p in range(3)
        ]
    )


@pytest.fixture(scope="module")
def browser():
    assert CHROMIUM.exists(), (
        "the browser test needs Debian's chromium: apt-get install -y chromium"
    )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        yield launched
        launched.close()


def _open(browser, page_file: Path):
    """The page at 1,400 px, and the console errors and outside requests it made."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    outside: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: None if r.url.startswith("file://") else outside.append(r.url))
    page.goto(page_file.as_uri())
    page.wait_for_load_state("load")
    return page, errors, outside


def _charts(page) -> list[tuple[str, int, str]]:
    """Per chart: its caption, how many marks it draws, its "nothing to show" sentence."""
    return page.eval_on_selector_all(
        "figure.chart",
        """figures => figures.map(f => [
            f.querySelector("figcaption").textContent,
            f.querySelectorAll("svg rect").length,
            (f.querySelector(".nothing") || {textContent: ""}).textContent])""",
    )


def test_the_report_in_a_browser(browser, tmp_path: Path) -> None:
    rows = [_row("customers", p, r, t) for p, r, t in [(0, 0.9, 3), (1, 0.2, 0), (2, 0.7, 1)]]
    rows.append(_row("events", 0, 0.0, 0, compacted=False))
    summary = "compaction-audit run-1 on /a/very/long/path/" + "x" * 300 + ": 4 partitions"
    file = write_audit_html(
        pa.Table.from_pylist(rows),
        tmp_path / "audit.html",
        title="Compaction audit of /logs",
        summary=summary,
        compacted=_compact_rows(),
    )
    page, errors, outside = _open(browser, file)
    page.screenshot(path=str(tmp_path / "audit.png"), full_page=True)
    assert errors == [] and outside == []
    charts = _charts(page)
    assert len(charts) == 4
    for caption, marks, words in charts:
        assert marks > 0 or words, caption
    # the threshold marks only the compacted topic's partitions, and each bar says its value
    assert page.locator("svg line.marker").count() == 3
    assert "customers-0: dirty ratio 0.900" in (
        page.locator("svg rect.clean-now title").first.text_content() or ""
    )
    # per topic: its settings with their sources, and the verdict in words
    customers = page.locator("section", has_text="customers").first
    assert "min.cleanable.dirty.ratio" in customers.inner_text()
    assert "(default)" in customers.inner_text()
    assert "2 of 3 partitions would be cleaned now." in customers.inner_text()
    assert "Not compacted" in page.locator("section", has_text="events").first.inner_text()
    # nothing runs off the page
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400

    table = customers.locator("table.sortable")
    ratios = table.locator("th", has_text="dirty_ratio")

    def column(name: str) -> list[str]:
        index = table.locator("th").all_inner_texts().index(name)
        return [
            row.locator("td").nth(index).inner_text() for row in table.locator("tbody tr").all()
        ]

    assert column("partition") == ["0", "1", "2"]
    ratios.click()
    assert column("partition") == ["1", "2", "0"]  # ascending dirty ratio
    ratios.click()
    assert column("partition") == ["0", "2", "1"]
    assert errors == []


def test_after_a_compaction_the_empty_charts_say_why(browser, tmp_path: Path) -> None:
    rows = [_row("customers", p, 0.0, 0) for p in range(2)]
    file = write_audit_html(
        pa.Table.from_pylist(rows), tmp_path / "after.html", title="after", summary="s"
    )
    page, errors, outside = _open(browser, file)
    page.screenshot(path=str(tmp_path / "after.png"), full_page=True)
    assert errors == [] and outside == []
    words = {caption: text for caption, marks, text in _charts(page) if not marks}
    assert (
        "Every compacted partition is clean"
        in words["Dirty ratio per compacted partition, against min.cleanable.dirty.ratio"]
    )
    assert words["Tombstones by age (age: now - record timestamp)"].startswith("No tombstones")
