"""LogSegment: Kafka's index placement, lookups, truncation, roll and recovery (§3, §5, §13 19-29)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from kafkalog_core.errors import LogSegmentOffsetOverflowError
from kafkalog_core.log.segment.log_segment import LONG_MAX, LogSegment, RollParams
from kafkalog_core.log.segment.scan import TxnTracker
from kafkalog_core.record.batch import make_attributes, pack_header
from kafkalog_core.record.varint import encode_varint

INT_MAX = 2**31 - 1


# ---- a tiny, independent v2 batch builder for tests --------------------------------------------
def _record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytearray(b"\x00")
    body += encode_varint(ts_delta) + encode_varint(offset_delta)
    for field in (key, value):
        if field is None:
            body += encode_varint(-1)
        else:
            body += encode_varint(len(field)) + field
    body += encode_varint(0)  # no headers
    return bytes(encode_varint(len(body)) + body)


def make_batch(
    base_offset: int,
    timestamps: list[int],
    *,
    values: list[bytes] | None = None,
    ple: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control_type: int | None = None,
    offset_deltas: list[int] | None = None,
) -> bytes:
    """One uncompressed v2 batch (CreateTime) with one record per timestamp."""
    n = len(timestamps)
    values = values or [b"v%d" % (base_offset + i) for i in range(n)]
    deltas = offset_deltas or list(range(n))
    base_ts = timestamps[0]
    if control_type is not None:
        recs = _record(0, 0, struct.pack(">hh", 0, control_type), struct.pack(">hi", 0, 0))
    else:
        recs = b"".join(
            _record(deltas[i], timestamps[i] - base_ts, b"k", values[i]) for i in range(n)
        )
    buf = bytearray(61) + recs
    pack_header(
        buf,
        0,
        base_offset=base_offset,
        length=len(buf) - 12,
        partition_leader_epoch=ple,
        attributes=make_attributes(
            is_transactional=transactional or control_type is not None,
            is_control=control_type is not None,
        ),
        last_offset_delta=deltas[-1],
        base_timestamp=base_ts,
        max_timestamp=max(timestamps),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=n,
    )
    return bytes(buf)


def append_one(
    seg: LogSegment, offset: int, ts: int, *, largest_ts: int | None = None, **kw
) -> int:
    data = make_batch(offset, [ts], **kw)
    seg.append(offset, ts if largest_ts is None else largest_ts, offset, data)
    return len(data)


def seg_at(tmp_path: Path, base: int, interval: int = 4096, **kw) -> LogSegment:
    return LogSegment(tmp_path, base, index_interval_bytes=interval, **kw)


# ---- §13 case 19: index placement -------------------------------------------------------------
def test_case19_index_placement_and_recovery_identical(tmp_path: Path) -> None:
    seg = seg_at(tmp_path, 0)
    value = b"x" * 0
    sizes = set()
    for i in range(200):
        data = make_batch(i, [1000 + i], values=[value])
        sizes.add(len(data))
    (s,) = sizes
    # pad the value so each batch is exactly 70 bytes, as in the facts sheet
    value = b"x" * (70 - s)
    for i in range(200):
        data = make_batch(i, [1000 + i], values=[value])
        assert len(data) == 70
        seg.append(i, 1000 + i, i, data)
    assert list(zip(*seg.offset_index.entries_array(), strict=True)) == [
        (59, 4130),
        (118, 8260),
        (177, 12390),
    ]
    assert list(zip(*seg.time_index.entries_array(), strict=True)) == [
        (1059, 59),
        (1118, 118),
        (1177, 177),
    ]
    seg.close()
    idx, tidx = seg.index_path.read_bytes(), seg.time_index_path.read_bytes()
    assert tidx[-12:] == struct.pack(">qi", 1199, 199)
    assert len(idx) == 24 and len(tidx) == 48
    seg2 = seg_at(tmp_path, 0)
    assert seg2.recover() == 0
    seg2.close()
    assert seg2.index_path.read_bytes() == idx
    assert seg2.time_index_path.read_bytes() == tidx


# ---- §13 case 20: find offset by timestamp ------------------------------------------------------
def _ten_appends(tmp_path: Path, count: int = 10, largest_ts=None) -> tuple[LogSegment, int]:
    s = len(make_batch(40, [400]))
    seg = seg_at(tmp_path, 40, interval=2 * s - 1)
    for off in range(40, 40 + count):
        lt = off if largest_ts == "offset" else 10 * off
        data = make_batch(off, [10 * off])
        assert len(data) == s
        seg.append(off, lt, off, data)
    return seg, s


def test_case20_find_offset_by_timestamp(tmp_path: Path) -> None:
    seg, s = _ten_appends(tmp_path)
    assert seg.largest_timestamp == 490
    find = {t: seg.find_offset_by_timestamp(t, 40) for t in (420, 421, 430, 431, 401, 399, 491)}
    assert find[420].offset == 42 and find[420].timestamp == 420
    assert find[421].offset == 43
    assert find[430].offset == 43
    assert find[431].offset == 44
    assert find[401].offset == 41
    assert find[399].offset == 40
    assert find[491] is None
    assert list(zip(*seg.time_index.entries_array(), strict=True)) == [
        (420, 42), (440, 44), (460, 46), (480, 48)
    ]  # fmt: skip
    assert list(zip(*seg.offset_index.entries_array(), strict=True)) == [
        (42, 2 * s), (44, 4 * s), (46, 6 * s), (48, 8 * s)
    ]  # fmt: skip


def test_case21_truncate_reloads_largest_timestamp(tmp_path: Path) -> None:
    seg, _ = _ten_appends(tmp_path, count=30, largest_ts="offset")
    assert seg.time_index.entries == 14
    seg.truncate_to(41)
    assert seg.time_index.entries == 0
    assert seg.read_next_offset() == 41
    assert seg.largest_timestamp == 400


def test_case22_next_offset(tmp_path: Path) -> None:
    seg = seg_at(tmp_path, 40)
    assert seg.read_next_offset() == 40
    data = make_batch(50, [1, 2, 3])
    seg.append(52, 3, 52, data)
    assert seg.read_next_offset() == 53


@pytest.mark.parametrize(
    "base,largest",
    [(0, -(2**31)), (0, 2**31), (1, 0), (100, 10), (2**31, 0), (-(2**31), 0), (2**31, 2**32)],
)
def test_case23_offset_overflow(tmp_path: Path, base: int, largest: int) -> None:
    seg = LogSegment(tmp_path, base) if base >= 0 else LogSegment(tmp_path, 0)
    if base < 0:
        seg.base_offset = base  # a negative base cannot name a file; test the rule itself
    with pytest.raises(LogSegmentOffsetOverflowError):
        seg.append(largest, 1, largest, make_batch(0, [1]))


def test_case24_empty_segment_never_rolls_on_time(tmp_path: Path) -> None:
    seg = seg_at(tmp_path, 0, created_ms=0)
    params = RollParams(300000, 2**31, -1, 0, 100, now=300001)
    assert not seg.should_roll(params)
    overflow = RollParams(300000, 2**31, -1, INT_MAX + 200, 100, now=300001)
    assert seg.should_roll(overflow)


def test_case25_truncate_into_gap(tmp_path: Path) -> None:
    seg = seg_at(tmp_path, 40)
    append_one(seg, 40, 10)
    append_one(seg, 43, 20)
    seg.truncate_to(41)
    assert [h.base_offset for h in seg.batches()] == [40]
    assert seg.read_next_offset() == 41


@pytest.mark.parametrize("k", [0, 5, 19])
def test_case26_recovery_with_corrupt_message(tmp_path: Path, k: int) -> None:
    seg = seg_at(tmp_path, 0)
    for i in range(20):
        append_one(seg, i, 100 + i)
    seg.flush()
    pos = next(h.position for h in seg.batches() if h.base_offset == k) + 7
    with open(seg.log_path, "r+b") as f:
        f.seek(pos)
        f.write(b"\xab" * 3000)
    seg2 = seg_at(tmp_path, 0)
    truncated = seg2.recover()
    assert truncated > 0
    assert [h.last_offset for h in seg2.batches()] == list(range(k))


def test_case27_recover_transaction_index(tmp_path: Path) -> None:
    seg = seg_at(tmp_path, 100)
    pid1, pid2 = 5, 10
    batches = [
        make_batch(
            100, [1, 1], producer_id=pid1, producer_epoch=0, base_sequence=0, transactional=True
        ),
        make_batch(
            102, [1, 1], producer_id=pid2, producer_epoch=0, base_sequence=0, transactional=True
        ),
        make_batch(104, [1, 1]),
        make_batch(106, [1], producer_id=pid2, producer_epoch=0, control_type=0),
        make_batch(107, [1], producer_id=pid1, producer_epoch=0, control_type=1),
    ]
    for b in batches:
        n = struct.unpack_from(">q", b)[0] + struct.unpack_from(">i", b, 23)[0]
        seg.append(n, 1, n, b)
    tracker = TxnTracker.empty()
    seg.recover(tracker)
    assert tracker.map_end_offset == 108
    [txn] = seg.txn_index.all_entries()
    assert (txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset) == (
        10,
        102,
        106,
        100,
    )
    preloaded = TxnTracker(open_txns={pid2: 75})
    seg.recover(preloaded)
    [txn] = seg.txn_index.all_entries()
    assert (txn.first_offset, txn.last_offset, txn.last_stable_offset) == (75, 106, 100)


class _EpochCache:
    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    @property
    def latest_epoch(self) -> int | None:
        return self.entries[-1][0] if self.entries else None

    def assign(self, epoch: int, offset: int) -> None:
        self.entries.append((epoch, offset))


def test_case28_recovery_rebuilds_epoch_cache(tmp_path: Path) -> None:
    seg = seg_at(tmp_path, 100)
    for off, ple in [(104, 0), (106, 1), (108, 1), (110, 2)]:
        append_one(seg, off, 1, ple=ple)
    cache = _EpochCache()
    seg.recover(leader_epoch_cache=cache)
    assert cache.entries == [(0, 104), (1, 106), (2, 110)]


def test_case29_first_batch_timestamp(tmp_path: Path) -> None:
    seg = seg_at(tmp_path, 0)
    assert seg.get_first_batch_timestamp() == LONG_MAX
    append_one(seg, 0, 1000)
    assert seg.get_first_batch_timestamp() == 1000
    seg.close()
    assert seg_at(tmp_path, 0).get_first_batch_timestamp() == 1000


# ---- reads --------------------------------------------------------------------------------------
def test_read_translate_and_min_one_message(tmp_path: Path) -> None:
    seg, s = _ten_appends(tmp_path)
    info = seg.read(45, 10 * s)
    assert info.position == 5 * s and len(info.records) == 5 * s
    assert seg.read(45, 1).records == b"\x00" * 0 + info.records[:1]
    one = seg.read(45, 1, min_one_message=True)
    assert len(one.records) == s
    assert seg.read(50, 100) is None
    assert seg.translate_offset(47).position == 7 * s


def test_reopen_keeps_max_timestamp_and_close_adds_final_entry(tmp_path: Path) -> None:
    seg, _ = _ten_appends(tmp_path)
    seg.close()
    reopened = seg_at(tmp_path, 40)
    assert reopened.max_timestamp_so_far == 490
    assert reopened.time_index.last_entry == (490, 49)


def test_inactive_segment_trims_and_adds_entry(tmp_path: Path) -> None:
    seg, _ = _ten_appends(tmp_path)
    seg.on_become_inactive_segment()
    assert seg.time_index.last_entry == (490, 49)
    assert seg.offset_index.max_entries == seg.offset_index.entries


def test_change_suffixes_and_delete(tmp_path: Path) -> None:
    seg, _ = _ten_appends(tmp_path)
    seg.close()
    seg.change_file_suffixes("", ".deleted")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "00000000000000000040.index.deleted",
        "00000000000000000040.log.deleted",
        "00000000000000000040.timeindex.deleted",
    ]
    seg.delete()
    assert list(tmp_path.iterdir()) == []


def test_no_txnindex_file_unless_written(tmp_path: Path) -> None:
    seg, _ = _ten_appends(tmp_path)
    seg.recover()
    seg.close()
    assert not seg.txn_index_path.exists()


def test_sanity_check_missing_index(tmp_path: Path) -> None:
    seg, _ = _ten_appends(tmp_path)
    seg.close()
    seg.index_path.unlink()
    with pytest.raises(FileNotFoundError):
        seg_at(tmp_path, 40).sanity_check(False)


def test_indexes_look_valid_detects_padding_and_too_long(tmp_path: Path) -> None:
    seg, _ = _ten_appends(tmp_path)
    seg.close()
    assert seg_at(tmp_path, 40).indexes_look_valid() is None
    good = seg.index_path.read_bytes()
    seg.index_path.write_bytes(good + b"\x00" * 80)
    assert seg_at(tmp_path, 40).indexes_look_valid() is not None
    seg.index_path.write_bytes(good + struct.pack(">ii", 30, 99999))
    assert seg_at(tmp_path, 40).indexes_look_valid() is not None


@pytest.mark.parametrize("seed", range(40))
def test_index_entries_equal_the_rule_applied_append_by_append(seed: int) -> None:
    """The vectorized index rule (every append larger than the interval) and its loop give
    what Kafka's rule gives one append at a time."""
    from kafkalog_core.log.segment.scan import index_entries_for_appends

    rng = np.random.default_rng(seed)
    interval = int(rng.integers(1, 5000))
    low = interval + 1 if seed % 2 else 1  # half the cases: every append beyond the interval
    sizes = rng.integers(low, low + 9000, int(rng.integers(0, 30)))
    since = int(rng.integers(0, 2 * interval))
    expected, left = [], since
    for i, size in enumerate(sizes.tolist()):
        if left > interval:
            expected.append(i)
            left = 0
        left += size
    entries, after = index_entries_for_appends(sizes.astype(np.int64), since, interval)
    assert entries.tolist() == expected
    assert after == left
