"""The one header walk retention and the compaction audit read segments with."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.log.names import log_file_name
from kafkalog_core.maintenance import cleaner_audit, retention
from kafkalog_core.maintenance.segment_facts import SegmentFacts, read_segment_facts
from kafkalog_core.record.encoder import Record, build_batch


def _batch(base: int, *stamps: int) -> bytes:
    return build_batch([Record(i, ts, b"k", b"v") for i, ts in enumerate(stamps)], base_offset=base)


def _segment(tmp_path: Path, base: int, *batches: bytes) -> Path:
    path = tmp_path / log_file_name(base)
    path.write_bytes(b"".join(batches))
    return path


def test_both_callers_use_the_shared_walk() -> None:
    assert retention.SegmentFacts is SegmentFacts
    assert retention.read_segment_facts is read_segment_facts
    assert cleaner_audit.SegmentSummary is SegmentFacts


def test_facts_of_a_segment(tmp_path: Path) -> None:
    first, second = _batch(40, 700, 500), _batch(42, 300, 900, 100)
    path = _segment(tmp_path, 40, first, second)
    seen: list[int] = []
    facts = read_segment_facts(path, on_batch=lambda view, h: seen.append(h.base_offset))
    assert facts.base_offset == 40
    assert facts.size == len(first) + len(second)
    assert facts.next_offset == 45
    assert facts.batches == 2 and seen == [40, 42]
    assert facts.first_batch_timestamp == 700  # the first batch's max timestamp
    assert facts.max_timestamp == 900 == facts.largest_timestamp
    assert facts.corrupt_at is None


def test_empty_segment_falls_back_to_the_mtime(tmp_path: Path) -> None:
    facts = read_segment_facts(_segment(tmp_path, 7))
    assert (facts.next_offset, facts.batches, facts.max_timestamp) == (7, 0, -1)
    assert facts.largest_timestamp == facts.last_modified_ms > 0


def test_corrupt_header_stops_the_walk_or_is_refused(tmp_path: Path) -> None:
    good = _batch(0, 5)
    bad = bytearray(_batch(1, 6))
    bad[8:12] = (3).to_bytes(4, "big")  # a size field below the minimum
    path = _segment(tmp_path, 0, good, bytes(bad))
    facts = read_segment_facts(path)
    assert (facts.batches, facts.next_offset, facts.corrupt_at) == (1, 1, len(good))
    with pytest.raises(CorruptRecordError, match=str(path)):
        read_segment_facts(path, strict=True)


def test_verify_checks_the_crc(tmp_path: Path) -> None:
    flipped = bytearray(_batch(0, 5))
    flipped[-1] ^= 0xFF  # a record byte: the header still parses
    path = _segment(tmp_path, 0, bytes(flipped))
    assert read_segment_facts(path).batches == 1
    assert read_segment_facts(path, verify=True).corrupt_at == 0
    with pytest.raises(CorruptRecordError):
        read_segment_facts(path, verify=True, strict=True)
