"""Indexes judged as a broker judges them (§3.6, §3.7): by where their lookups land, not by the
spacing recovery would give them. Any spacing is ok; an entry that sends a reader to the wrong
place is `wrong-entries`; trailing zero entries are `zero-padded`."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kafkalog_core.log.names import log_file_name
from kafkalog_core.log.segment.log_segment import LogSegment
from kafkalog_core.maintenance.rebuild import rebuild_partition, rebuild_segment
from kafkalog_core.maintenance.verify import (
    OK,
    WRONG_ENTRIES,
    ZERO_PADDED,
    verify_partition,
    verify_segment,
)
from kafkalog_core.record.batch import iter_batch_headers
from tests.log.test_segment import make_batch

BROKER = "segments/broker-2x-interval4096/test_topic_a-0"
SPACINGS = (1, 4096, 65536)
OFFSET_ENTRY = np.dtype([("rel", ">i4"), ("pos", ">i4")])
TIME_ENTRY = np.dtype([("ts", ">i8"), ("rel", ">i4")])


def _batches(base: int = 0, count: int = 120, value: int = 1000) -> list[bytes]:
    """Batches of three records, ~3 KB each; timestamps rise, but batch 40 holds older ones
    (a producer's retry): the time index must not point at it."""
    out = []
    for i in range(count):
        first = 10_000 + 30 * i if i != 40 else 9_000
        out.append(
            make_batch(base + 3 * i, [first, first + 10, first + 20], values=[b"x" * value] * 3)
        )
    return out


def _segment(d: Path, batches: list[bytes], base: int = 0) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    log = d / log_file_name(base)
    log.write_bytes(b"".join(batches))
    return log


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """One segment whose indexes hold an entry for every batch but the first (spacing 1)."""
    path = _segment(tmp_path / "t-0", _batches())
    rebuild_segment(path, 1)
    return path


def _read(path: Path, dtype: np.dtype) -> np.ndarray:
    return np.frombuffer(path.read_bytes(), dtype=dtype).copy()


def test_every_spacing_is_ok_whatever_interval_verify_believes(tmp_path: Path) -> None:
    path = _segment(tmp_path / "t-0", _batches())
    headers = list(iter_batch_headers(path.read_bytes()))
    for written in SPACINGS:
        rebuild_segment(path, written, rebuild_all=True)
        assert path.with_suffix(".index").stat().st_size > 0  # entries at every spacing
        for believed in SPACINGS:
            v = verify_segment(path, believed)
            assert (v.index.status, v.time_index.status) == (OK, OK), (written, believed)
            assert v.is_ok
            assert bool(v.to_dict()["note"]) == (written != believed)
        # the index sends every lookup to the batch holding its offset
        seg = LogSegment(path.parent, 0, read_only=True)
        for h in headers[::7]:
            for offset in (h.base_offset, h.last_offset):
                assert seg.translate_offset(offset).position == h.position
        for h in headers[1::9]:
            found = seg.find_offset_by_timestamp(h.max_timestamp)
            assert found is not None and found.timestamp == h.max_timestamp
        seg.release_handles()
    # a rebuild leaves an index written at another spacing alone, unless --all
    before = path.with_suffix(".index").read_bytes()
    assert rebuild_segment(path, 4096).action == "none"
    assert path.with_suffix(".index").read_bytes() == before
    assert rebuild_segment(path, 4096, rebuild_all=True).action.startswith("rebuilt")
    assert path.with_suffix(".index").read_bytes() != before


def test_real_broker_segments_are_ok_at_any_interval(fixtures_dir: Path) -> None:
    src = fixtures_dir / BROKER
    for believed in SPACINGS:
        pv = verify_partition(src, believed)  # read-only, in place
        assert pv.is_ok, believed
        rows = pv.to_rows()
        assert {(r["index_status"], r["time_index_status"]) for r in rows} == {(OK, OK)}


def test_a_multi_batch_append_entry_and_a_record_level_time_entry_are_ok(log: Path) -> None:
    headers = list(iter_batch_headers(log.read_bytes()))
    index = log.with_suffix(".index")
    entries = _read(index, OFFSET_ENTRY)
    # a follower's append of batches 5 and 6: the last offset of 6 at the position of 5
    k = int(np.flatnonzero(entries["pos"] == headers[5].position)[0])
    entries["rel"][k] = headers[6].last_offset
    entries = np.delete(entries, k + 1)
    index.write_bytes(entries.tobytes())
    time_index = log.with_suffix(".timeindex")
    times = _read(time_index, TIME_ENTRY)
    times["rel"][3] -= 2  # another record of the same batch (Kafka 2.x stored a record's own)
    time_index.write_bytes(times.tobytes())
    v = verify_segment(log)
    assert (v.index.status, v.time_index.status) == (OK, OK), v.problems


def test_offsets_in_a_compaction_gap_are_ok(tmp_path: Path) -> None:
    batches = [make_batch(10 * i, [1000 + i, 1001 + i]) for i in range(30)]  # offsets 10i, 10i+1
    path = _segment(tmp_path / "t-0", batches)
    rebuild_segment(path, 1)
    index = path.with_suffix(".index")
    entries = _read(index, OFFSET_ENTRY)
    entries["rel"] -= 5  # inside the gap before each batch: lookups still land on it
    index.write_bytes(entries.tobytes())
    assert verify_segment(path).index.status == OK


def _edit(
    suffix: str, dtype: np.dtype, change: Callable[[np.ndarray, list], np.ndarray]
) -> Callable[[Path], Path]:
    """A damage: `change(entries, the segment's batch headers)` rewrites the index entries."""

    def apply(log: Path) -> Path:
        path = log.with_suffix(suffix)
        headers = list(iter_batch_headers(log.read_bytes()))
        path.write_bytes(change(_read(path, dtype), headers).tobytes())
        return path

    return apply


def _offsets(change: Callable[[np.ndarray, list], np.ndarray]) -> Callable[[Path], Path]:
    return _edit(".index", OFFSET_ENTRY, change)


def _times(change: Callable[[np.ndarray, list], np.ndarray]) -> Callable[[Path], Path]:
    return _edit(".timeindex", TIME_ENTRY, change)


def _mid_batch(e: np.ndarray, _h: list) -> np.ndarray:
    e["pos"][10] += 61
    return e


def _batch_after_the_offset(e: np.ndarray, h: list) -> np.ndarray:
    e["pos"][10] = h[12].position  # entry 10 is batch 11's offset: now at batch 12's position
    return np.delete(e, 11)


def _not_increasing(e: np.ndarray, _h: list) -> np.ndarray:
    e["rel"][20] = e["rel"][19]
    return e


def _past_the_end(e: np.ndarray, h: list) -> np.ndarray:
    extra = np.array([(h[-1].last_offset + 5, h[-1].position + h[-1].size)], dtype=OFFSET_ENTRY)
    return np.concatenate([e, extra])


def _position_past_the_end(e: np.ndarray, h: list) -> np.ndarray:
    e["pos"][-1] = h[-1].position + h[-1].size
    return e


def _below_base(e: np.ndarray, _h: list) -> np.ndarray:
    e["rel"][0] = -1
    return e


def _time_skips_an_earlier_batch(t: np.ndarray, h: list) -> np.ndarray:
    # the timestamp of batch 10 at the offset of batch 12: batches 10 and 11 hold timestamps
    # as large, so a lookup by time would start past them
    k = int(np.flatnonzero(t["ts"] == h[10].max_timestamp)[0])
    t["rel"][k] = h[12].last_offset
    return np.delete(t, [k + 1, k + 2])


def _time_not_reached(t: np.ndarray, h: list) -> np.ndarray:
    k = int(np.flatnonzero(t["ts"] == h[10].max_timestamp)[0])
    t["ts"][k] += 15  # not reached until batch 11
    return t


def _time_offsets_back(t: np.ndarray, _h: list) -> np.ndarray:
    t["rel"][5] = t["rel"][4] - 1
    return t


def _last_time_entry_missing(t: np.ndarray, _h: list) -> np.ndarray:
    return t[:-1]


def _time_index_emptied(t: np.ndarray, _h: list) -> np.ndarray:
    return t[:0]


BAD = {
    "offset entry pointing mid-batch": (_offsets(_mid_batch), "not the start of a batch"),
    "offset entry at a batch after its offset": (
        _offsets(_batch_after_the_offset),
        "a lookup would start after it",
    ),
    "offsets not increasing": (_offsets(_not_increasing), "not above the entry before"),
    "offset entry past the end of the log": (_offsets(_past_the_end), "past the segment's last"),
    "position past the end of the log": (_offsets(_position_past_the_end), "past the end"),
    "offset below the base offset": (_offsets(_below_base), "below the base offset"),
    "time entry below an earlier batch's max": (
        _times(_time_skips_an_earlier_batch),
        "a lookup by time would skip it",
    ),
    "time entry no batch up to it reaches": (_times(_time_not_reached), "no record has it"),
    "time entry offsets going back": (_times(_time_offsets_back), "below the entry before"),
    "time index without its last entry": (
        _times(_last_time_entry_missing),
        "not the segment's largest timestamp",
    ),
    "empty time index for a segment with timestamps": (
        _times(_time_index_emptied),
        "no entry, but the segment's largest timestamp",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_entries_that_send_a_reader_to_the_wrong_place(log: Path, case: str) -> None:
    damage, message = BAD[case]
    path = damage(log)
    v = verify_segment(log)
    check = v.index if path.suffix == ".index" else v.time_index
    assert check.status == WRONG_ENTRIES, check
    assert message in check.problem and path.name in check.problem
    assert not v.is_ok
    rebuild_segment(log, 1)  # rebuild writes what recovery builds: right again
    assert verify_segment(log).is_ok


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_a_partial_trailing_entry_is_caught(log: Path, suffix: str) -> None:
    path = log.with_suffix(suffix)
    path.write_bytes(path.read_bytes() + b"\x01\x02\x03\x04\x05")
    check = verify_segment(log).indexes[0 if suffix == ".index" else 1]
    assert check.status == WRONG_ENTRIES and "not a multiple of the entry size" in check.problem


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_trailing_zero_entries_are_zero_padding_whatever_the_spacing(
    log: Path, suffix: str
) -> None:
    path = log.with_suffix(suffix)
    path.write_bytes(path.read_bytes() + bytes(12 * 8))  # preallocated, then crash
    check = verify_segment(log, 4096).indexes[0 if suffix == ".index" else 1]
    assert check.status == ZERO_PADDED


def test_no_timestamps_no_time_entries(tmp_path: Path) -> None:
    path = _segment(tmp_path / "t-0", [make_batch(i, [-1]) for i in range(50)])
    rebuild_segment(path, 1)
    assert path.with_suffix(".timeindex").read_bytes() == b""
    assert verify_segment(path).is_ok


def test_a_copy_without_its_history_verifies_clean(tmp_path: Path) -> None:
    """Our output with a non-default interval, judged at Kafka's default (what a copy without
    the ingest history is judged at): ok, and a rebuild changes nothing."""
    d = tmp_path / "t-0"
    for base in (0, 360, 720):
        _segment(d, _batches(base, 120), base)
    rebuild_partition(d, 200)
    copy = tmp_path / "copy" / "t-0"
    shutil.copytree(d, copy)
    assert verify_partition(copy).is_ok
    before = {p.name: p.read_bytes() for p in copy.iterdir()}
    assert all(r["action"] == "none" for r in rebuild_partition(copy).to_rows())
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == before
