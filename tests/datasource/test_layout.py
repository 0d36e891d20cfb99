"""Planning opens only the segments a read needs (no Spark: the driver-side view alone)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.datasource import layout
from jobs.datasource.options import parse_read_options
from jobs.datasource.plan import plan_partitions, resolve_offsets
from tests.datasource.helpers import oracle, write_topic


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Base offsets of the segments the view opens (its .log, .index and .timeindex)."""
    seen: list[int] = []
    real = layout._open_segment

    def spy(directory: Path, base_offset: int):
        seen.append(base_offset)
        return real(directory, base_offset)

    monkeypatch.setattr(layout, "_open_segment", spy)
    return seen


def test_narrow_read_opens_first_last_and_the_segments_read(
    tmp_path: Path, opened: list[int]
) -> None:
    write_topic(tmp_path, "t", 1, 400)  # 2000-byte segments: many of them
    bases = sorted(int(p.stem) for p in (tmp_path / "t-0").glob("*.log"))
    assert len(bases) >= 5
    start = bases[len(bases) // 2] + 1  # inside one middle segment
    options = parse_read_options(
        {
            "path": str(tmp_path),
            "subscribe": "t",
            "startingOffsets": json.dumps({"t": {"0": start}}),
            "endingOffsets": json.dumps({"t": {"0": start + 2}}),
        }
    )
    with layout.partition_views(tmp_path, options.subscription) as views:
        starts = resolve_offsets(views, options.starting, options, starting=True)
        ends = resolve_offsets(views, options.ending, options, starting=False)
        packs = plan_partitions(views, starts, ends, options)
        assert views[0].size_in_bytes == sum(
            p.stat().st_size for p in (tmp_path / "t-0").glob("*.log")
        )
    assert [s.start_offset for p in packs for s in p.slices] == [start]
    middle = bases[len(bases) // 2]
    assert sorted(set(opened)) == sorted({bases[0], middle, bases[-1]})
    assert len(opened) == len(set(opened))  # each opened once


def test_timestamp_lookup_opens_segments_up_to_the_one_that_has_it(
    tmp_path: Path, opened: list[int]
) -> None:
    write_topic(tmp_path, "t", 1, 400)
    bases = sorted(int(p.stem) for p in (tmp_path / "t-0").glob("*.log"))
    rows = oracle(tmp_path / "t-0")
    target = rows[len(rows) // 3]  # (offset, timestamp, key, value), timestamps increasing
    with layout.partition_views(
        tmp_path, parse_read_options({"path": str(tmp_path), "subscribe": "t"}).subscription
    ) as views:
        assert views[0].offset_for_timestamp(target[1]) == target[0]
    holder = max(b for b in bases if b <= target[0])
    assert set(opened) == {b for b in bases if b <= holder}
