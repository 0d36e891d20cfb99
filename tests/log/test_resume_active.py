"""LogSegment.resume_as_active: a closed segment continued as its writer's live one.

The oracle is one PartitionLog appending everything without closing in between; the segment
closed, reopened and resumed must end with the same bytes in all its files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kafkalog_core.config import LogConfig
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.record.encoder import BatchOptions, EncodedBatches, encode_records

INCREASING = list(range(1000, 1012))
# the batches after the last index points do not raise the max: a close adds no entry there
FALLING_TAIL = [1000, 1001, 5000, 1003, 1004, 1005, 1006, 1007, 6000, 1009, 1010, 1011]
# equal timestamps: the close entry (if any) and the running max do not move
FLAT = [7000] * 12


def _config(**extra: int) -> LogConfig:
    return LogConfig.from_dict({"index.interval.bytes": "150", **extra})


def _batches(first: int, stamps: list[int]) -> EncodedBatches:
    """One single-record batch per timestamp, offsets from `first` (varied value sizes)."""
    n = len(stamps)
    table = pa.table(
        {
            "key": [b"k%d" % (first + i) for i in range(n)],
            "value": [b"v" * (20 + 13 * ((first + i) % 5)) for i in range(n)],
            "timestamp": pa.array(stamps, pa.int64()),
        }
    )
    return encode_records(table, base_offset=first, options=BatchOptions(max_batch_bytes=62))


def _append(log: PartitionLog, stamps: list[int]) -> None:
    if stamps:
        log.append_batches(_batches(log.log_end_offset, stamps), now_ms=0)


def _files(directory: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(directory.iterdir())
        if p.suffix in (".log", ".index", ".timeindex")
    }


def _reopen(directory: Path, config: LogConfig) -> PartitionLog:
    return PartitionLog.open(directory, config, had_clean_shutdown=True, leader_epoch=0)


def _written(directory: Path, config: LogConfig, parts: list[list[int]], *, resume: bool, rest):
    """`parts` appended with a close and a reopen after each (the first part: new), the last
    reopen resumed (`resume`) or not, then `rest` appended; the files."""
    log = PartitionLog.create(directory, config, leader_epoch=0)
    opened_at = 0
    for part in parts:
        _append(log, part)
        log.close(fsync=False)
        last_opened, opened_at = opened_at, log.log_end_offset
        log = _reopen(directory, config)
    if resume:
        log.active_segment.resume_as_active(last_opened)
    _append(log, rest)
    log.close(fsync=False)
    return _files(directory)


@pytest.mark.parametrize("stamps", [INCREASING, FALLING_TAIL, FLAT], ids=["up", "fall", "flat"])
@pytest.mark.parametrize("cut", [1, 2, 5, 8, 11])
def test_resumed_segment_continues_as_one_writer(tmp_path, stamps, cut):
    config = _config()
    expected = _written(tmp_path / "one", config, [], resume=False, rest=stamps)
    got = _written(tmp_path / "two", config, [stamps[:cut]], resume=True, rest=stamps[cut:])
    assert got == expected


@pytest.mark.parametrize("stamps", [INCREASING, FALLING_TAIL], ids=["up", "fall"])
@pytest.mark.parametrize("cuts", [(3, 4), (3, 8), (6, 7), (2, 10)])
def test_resumed_after_a_reopen_keeps_the_published_entries(tmp_path, stamps, cuts):
    """A writer that reopened a closed segment (as a broker does: its close entry stays, the
    byte count restarts) and appended: resumed from where it reopened the segment."""
    config = _config()
    a, b = cuts
    published = [stamps[:a]]
    expected = _written(tmp_path / "one", config, published, resume=False, rest=stamps[a:])
    got = _written(
        tmp_path / "two", config, [*published, stamps[a:b]], resume=True, rest=stamps[b:]
    )
    assert got == expected


def test_a_plain_reopen_differs(tmp_path):
    """Why the resume exists: reopening alone keeps the close entry and forgets the bytes since
    the last index entry, so the continued files differ from one writer's."""
    config = _config()
    expected = _written(tmp_path / "one", config, [], resume=False, rest=INCREASING)
    got = _written(tmp_path / "two", config, [INCREASING[:5]], resume=False, rest=INCREASING[5:])
    assert got != expected


def test_rolls_after_the_resume_follow_the_writer(tmp_path):
    """A resumed segment fills to segment.bytes and rolls where one writer rolls."""
    size = int(_batches(0, [1000]).sizes[0])
    config = _config(**{"segment.bytes": str(5 * size + size // 2)})
    stamps = [1000 + i for i in range(23)]
    expected = _written(tmp_path / "one", config, [], resume=False, rest=stamps)
    got = _written(tmp_path / "two", config, [stamps[:7]], resume=True, rest=stamps[7:])
    assert got == expected
    assert len([n for n in got if n.endswith(".log")]) > 2


def test_resume_state_matches_the_live_writer(tmp_path):
    """The reconstructed state itself: bytes since the last index entry and the running max."""
    config = _config()
    live = PartitionLog.create(tmp_path / "live", config, leader_epoch=0)
    _append(live, INCREASING)
    seg = live.active_segment
    state = (seg._bytes_since_last_index_entry, seg._max_ts(), len(seg.time_index))
    live.close(fsync=False)
    reopened = _reopen(tmp_path / "live", config)
    closed = reopened.active_segment
    assert len(closed.time_index) == state[2] + 1  # the close's entry
    closed.resume_as_active()
    assert (closed._bytes_since_last_index_entry, closed._max_ts(), len(closed.time_index)) == state
    assert np.int64(closed.size) == np.int64(seg.size)


# the last batch raises the max (the close's entry is its), or an earlier one does
LAST_RAISES = [1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 1010, 9000]


@pytest.mark.parametrize(
    "stamps", [INCREASING, FALLING_TAIL, FLAT, LAST_RAISES], ids=["up", "fall", "flat", "last"]
)
@pytest.mark.parametrize("keep", [0, 1, 4, 7, 11])
def test_cut_before_leaves_what_a_close_before_that_batch_leaves(tmp_path, stamps, keep):
    """`cut_before(k)` on a closed segment gives the files of the writer that closed it just
    before appending batch k; resumed, it continues as that writer (the relayout's cut)."""
    config = _config()
    full = tmp_path / "full"
    log = PartitionLog.create(full, config, leader_epoch=0)
    _append(log, stamps)
    log.close(fsync=False)
    segment = _reopen(full, config).active_segment
    segment.cut_before(keep)
    segment.close()
    expected = _written(
        tmp_path / "before", config, [stamps[:keep]] if keep else [], resume=False, rest=[]
    )
    assert _files(full) == expected
    resumed = _reopen(full, config)
    resumed.active_segment.resume_as_active(0)
    _append(resumed, [9500, 9600])
    resumed.close(fsync=False)
    one = PartitionLog.create(tmp_path / "one", config, leader_epoch=0)
    _append(one, [*stamps[:keep], 9500, 9600])
    one.close(fsync=False)
    assert _files(full) == _files(tmp_path / "one")
