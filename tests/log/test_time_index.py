"""TimeIndex against Kafka's TimeIndexTest cases (KAFKA_LOG_FACTS.md §13 cases 15-18) and real files."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from kafkalog_core.errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from kafkalog_core.log.index.time_index import TimeIndex, TimestampOffset

BROKER_DIR = Path("segments/broker-2x-interval4096/test_topic_a-0")


@pytest.fixture
def index(tmp_path: Path) -> TimeIndex:
    """Kafka's test setup: base 45, 30 slots of 12 bytes."""
    return TimeIndex(tmp_path / "00000000000000000045.timeindex", 45, 30 * 12)


def _fill(index: TimeIndex) -> None:
    for i in range(1, 30):
        index.maybe_append(i * 10, i * 10 + 45)


def test_lookup(index: TimeIndex) -> None:  # case 15
    assert index.lookup(100) == TimestampOffset(-1, 45)
    _fill(index)
    assert index.lookup(9) == TimestampOffset(-1, 45)
    assert index.lookup(25) == TimestampOffset(20, 65)
    assert index.lookup(30) == TimestampOffset(30, 75)
    assert index.entry(0) == TimestampOffset(10, 55)
    assert index.entry(3) == TimestampOffset(40, 85)
    assert index.lookup(10**12) == TimestampOffset(290, 335)
    found = index.lookup_many(np.array([9, 25, 30, 10**12]))
    assert list(zip(*found, strict=True)) == [(-1, 45), (20, 65), (30, 75), (290, 335)]


def test_full_rules(index: TimeIndex) -> None:  # case 16
    _fill(index)
    assert index.entries == 29
    assert index.is_full
    with pytest.raises(IndexFullError):
        index.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(10000, 280, skip_full_check=True)
    assert index.maybe_append(10000, 1000, skip_full_check=True)
    assert index.entries == 30
    assert index.last_entry == TimestampOffset(10000, 1000)
    with pytest.raises(IndexFullError):  # no slot at all left
        index.maybe_append(10001, 1001, skip_full_check=True)


def test_truncate(index: TimeIndex) -> None:  # case 17
    _fill(index)
    index.truncate_to(65)
    assert index.entries == 1 and index.last_entry == TimestampOffset(10, 55)
    index.truncate_to(55)
    assert index.entries == 0
    _fill(index)
    index.truncate_to(66)
    assert index.last_entry == TimestampOffset(20, 65)


def test_truncate_exact_first(index: TimeIndex) -> None:  # case 17 exactly
    _fill(index)
    index.truncate_to(55)
    assert index.entries == 0
    assert index.last_entry == TimestampOffset(-1, 45)


def test_append_rules(index: TimeIndex) -> None:  # case 18 and §3.4
    assert index.last_entry == TimestampOffset(-1, 45)
    assert index.maybe_append(1, 46)
    assert index.last_entry == TimestampOffset(1, 46)
    assert not index.maybe_append(1, 47)  # equal timestamp: ignored silently
    assert index.entries == 1
    assert index.maybe_append(5, 46)  # equal offset is allowed
    with pytest.raises(InvalidOffsetError, match="timestamp"):
        index.maybe_append(4, 50)
    with pytest.raises(InvalidOffsetError, match="offset"):
        index.maybe_append(6, 45)
    assert index.entries == 2


def test_v0_timestamps_leave_index_empty(index: TimeIndex) -> None:
    assert not index.maybe_append(-1, 45)
    assert not index.maybe_append(-1, 50)
    assert index.entries == 0


def test_file_bytes_exact_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.timeindex"
    idx = TimeIndex(path, 100)
    idx.maybe_append(1_700_000_000_000, 159)
    idx.maybe_append(1_700_000_000_500, 218)
    idx.close()
    assert path.read_bytes() == struct.pack(">qiqi", 1_700_000_000_000, 59, 1_700_000_000_500, 118)
    reopened = TimeIndex(path, 100)
    assert reopened.entries == 2
    assert reopened.last_entry == TimestampOffset(1_700_000_000_500, 218)
    assert reopened.max_timestamp == 1_700_000_000_500
    ts, offs = reopened.entries_array()
    assert ts.tolist() == [1_700_000_000_000, 1_700_000_000_500] and offs.tolist() == [159, 218]
    reopened.sanity_check()
    assert TimeIndex(tmp_path / "new.timeindex", 0).max_entries == 873813


def test_zero_padded_file_fails_sanity(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000050.timeindex"
    path.write_bytes(struct.pack(">qi", 1000, 3) + b"\x00" * (12 * 5))
    idx = TimeIndex(path, 50, 12 * 6)
    assert idx.entries == 6
    assert idx.is_full
    assert idx.entry(3) == TimestampOffset(0, 50)
    assert idx.entries_before_padding() == 1
    with pytest.raises(CorruptIndexError, match="last timestamp is 0"):
        idx.sanity_check()


def test_sanity_ragged_length_and_offset_below_base(tmp_path: Path) -> None:
    ragged = tmp_path / "00000000000000000000.timeindex"
    ragged.write_bytes(struct.pack(">qi", 5, 1) + b"\x01")
    with pytest.raises(CorruptIndexError, match="multiple of 12"):
        TimeIndex(ragged, 0).sanity_check()
    below = tmp_path / "00000000000000000010.timeindex"
    below.write_bytes(struct.pack(">qi", 5, -3))
    with pytest.raises(CorruptIndexError, match="last offset is 7"):
        TimeIndex(below, 10).sanity_check()


def test_real_broker_time_indexes(fixtures_dir: Path) -> None:
    paths = sorted((fixtures_dir / BROKER_DIR).glob("*.timeindex"))
    assert paths
    for path in paths:
        base = int(path.name.split(".")[0])
        idx = TimeIndex(path, base)
        assert idx.entries * 12 == path.stat().st_size
        idx.sanity_check()
        timestamps, offsets = idx.entries_array()
        assert np.all(np.diff(timestamps) > 0)
        assert np.all(np.diff(offsets) >= 0)
        assert np.all(offsets >= base)
        assert idx.to_bytes() == path.read_bytes()
        idx.close()  # read-only fixture: must not write


def _outcome(index: TimeIndex, call) -> tuple[object, list[TimestampOffset]]:
    """What a call returned (or raised) and the entries it left."""
    try:
        result: object = call()
    except (InvalidOffsetError, IndexFullError) as e:
        result = type(e)
    return result, [index.entry(i) for i in range(index.entries)]


@pytest.mark.parametrize("seed", range(60))
def test_maybe_append_many_equals_one_by_one(tmp_path: Path, seed: int) -> None:
    """The vectorized form keeps maybe_append's rules: ignored equal timestamps, errors for
    backwards timestamps/offsets, the full mark - same result, same entries."""
    rng = np.random.default_rng(seed)
    slots = int(rng.integers(2, 12))
    k = int(rng.integers(0, 15))
    steps = rng.integers(-1 if seed % 4 == 0 else 0, 4, k)  # some backwards steps
    timestamps = np.cumsum(steps) + (-1 if seed % 5 == 0 else 100)
    offsets = 45 + np.cumsum(rng.integers(-1 if seed % 7 == 0 else 0, 3, k))
    pre = int(rng.integers(0, 3))
    one = TimeIndex(tmp_path / "a.timeindex", 45, slots * 12)
    many = TimeIndex(tmp_path / "b.timeindex", 45, slots * 12)
    for idx in (one, many):
        for j in range(min(pre, slots - 2)):
            idx.maybe_append(50 + j, 45 + j)

    def one_by_one() -> int:
        return sum(
            one.maybe_append(int(t), int(o)) for t, o in zip(timestamps, offsets, strict=True)
        )

    assert _outcome(many, lambda: many.maybe_append_many(timestamps, offsets)) == _outcome(
        one, one_by_one
    )


def test_maybe_append_many_vector_path(index: TimeIndex) -> None:
    """In-order input takes the numpy path: equal timestamps skipped, nothing else lost."""
    written = index.maybe_append_many(
        np.array([10, 10, 20, 20, 30]), np.array([46, 47, 48, 49, 50])
    )
    assert written == 3
    assert [index.entry(i) for i in range(3)] == [
        TimestampOffset(10, 46),
        TimestampOffset(20, 48),
        TimestampOffset(30, 50),
    ]
