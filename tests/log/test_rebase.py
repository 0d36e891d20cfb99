"""Moving a segment to another base offset gives the bytes of writing it there."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from kafkalog_core.config import LogConfig
from kafkalog_core.log.index.txn_index import AbortedTxn
from kafkalog_core.log.names import segment_log_files
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.log.rebase import RebaseError, rebase_segment, rebase_segments
from kafkalog_core.record.encoder import BatchOptions, encode_records
from tests.log.test_partition_log import table

CONFIG = LogConfig.from_dict({"segment.bytes": 3000, "index.interval.bytes": 200})


def _write(d: Path, base: int, n: int = 500) -> PartitionLog:
    log = PartitionLog.create(d, CONFIG, base_offset=base, leader_epoch=0)
    encoded = encode_records(table(n), base_offset=base, options=BatchOptions(max_batch_bytes=300))
    log.append_batches(encoded)
    log.close()
    return log


def _segment_files(d: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(d.iterdir())
        if p.suffix in (".log", ".index", ".timeindex", ".txnindex")
    }


@pytest.mark.parametrize("target", [1000, 7])
def test_moved_segments_equal_segments_written_there(tmp_path: Path, target: int) -> None:
    moved, direct = tmp_path / "moved-0", tmp_path / "direct-0"
    _write(moved, 0)
    _write(direct, target)
    logs = segment_log_files(moved)
    assert len(logs) >= 3
    rebase_segments(logs, target)
    assert _segment_files(moved) == _segment_files(direct)
    # an independent reader sees the new offsets
    records = MemoryRecords((moved / f"{target:020d}.log").read_bytes())
    first = next(iter(records.next_batch()))
    assert first.offset == target


def test_moving_down_and_back(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    _write(d, 0)
    before = _segment_files(d)
    logs = rebase_segments(segment_log_files(d), 5000)
    back = rebase_segments(logs, 0)
    assert [p.name for p in back] == [p.name for p in segment_log_files(d)]
    assert _segment_files(d) == before


def test_txn_index_entries_shift(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    _write(d, 0)
    first = segment_log_files(d)[0]
    txn = first.with_suffix(".txnindex")
    txn.write_bytes(AbortedTxn(9, 3, 5, 6).to_bytes())
    moved = rebase_segments(segment_log_files(d), 10_000)[0]
    shifted = AbortedTxn.from_bytes(moved.with_suffix(".txnindex").read_bytes())
    assert shifted == AbortedTxn(9, 10_003, 10_005, 10_006)


def test_a_move_onto_an_existing_file_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    _write(d, 0)
    logs = segment_log_files(d)
    second = int(logs[1].name[:20])
    with pytest.raises(RebaseError, match="exists"):
        rebase_segment(logs[0], second)
