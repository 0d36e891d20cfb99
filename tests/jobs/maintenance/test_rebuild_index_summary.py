"""rebuild-index's summary says what happened in one sentence, and shows its notes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from jobs.rebuild_index import REPORT_SCHEMA, summarize


def _row(base: int, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(REPORT_SCHEMA.names)
    row.update(
        topic="t",
        partition=0,
        topic_partition="t-0",
        base_offset=base,
        log_file=f"{base:020d}.log",
        size_bytes=100,
        log_status="ok",
        index_status="ok",
        time_index_status="ok",
        txn_index_status="ok",
        bytes_quarantined=0,
        action="none",
        ok=True,
    )
    row.update(fields)
    return row


def _summary(rows: list[dict[str, Any]], mode: str) -> list[str]:
    table = pa.Table.from_pylist(rows, schema=REPORT_SCHEMA)
    return summarize(table, Path("/logs"), mode, "r1")[0].splitlines()


def test_rebuild_all_of_healthy_segments_is_one_sentence() -> None:
    rows = [_row(b, action="rebuilt index, time index") for b in (0, 10, 20)]
    lines = _summary(rows, "rebuild")
    assert lines[1:] == [
        "  0 of 3 segments needed work; the rebuild rewrote the indexes of 3 "
        "(--all rewrites every segment's indexes, ok or not)"
    ]


def test_rebuild_that_fixed_and_quarantined_says_so() -> None:
    rows = [
        _row(0),
        _row(10, ok=False, index_status="missing", action="rebuilt index"),
        _row(20, ok=False, log_status="corrupt", action="quarantined", bytes_quarantined=7),
    ]
    lines = _summary(rows, "rebuild")
    assert (
        "  2 of 3 segments needed work; the rebuild rewrote the indexes of 1 and quarantined "
        "the corrupt tail of 1"
    ) in lines


def test_verify_prints_the_notes_it_mentions() -> None:
    rows = [_row(0, note="index entries every 8192 bytes"), _row(10)]
    lines = _summary(rows, "verify")
    assert "  2 segments ok, 0 not ok" in lines
    assert "    t-0/00000000000000000000.log: index entries every 8192 bytes" in lines
    assert not any("see the note column" in line for line in lines)
