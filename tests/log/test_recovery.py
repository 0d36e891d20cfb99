"""Crash safety: every leftover a crash can produce is loaded back to a valid log (§6, §8.8, §13 36-37)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from kafka.record.memory_records import MemoryRecords

from kafkalog_core.config import LogConfig
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.log.producer_state import ProducerStateManager
from kafkalog_core.log.segment.log_segment import LogSegment
from kafkalog_core.record.batch import iter_batch_headers
from kafkalog_core.record.control import ControlRecordType, build_end_txn_marker_batch
from kafkalog_core.record.encoder import BatchOptions, Record, build_batch, encode_records

N = 200


def config(**kw) -> LogConfig:
    base = {"segment.bytes": "4000", "index.interval.bytes": "200"}
    base.update({k: str(v) for k, v in kw.items()})
    return LogConfig.from_dict(base)


def write_log(dir: Path, n: int = N) -> PartitionLog:
    log = PartitionLog.create(dir, config())
    data = pa.table(
        {
            "key": [b"k%d" % i for i in range(n)],
            "value": [b"v" * 40 for _ in range(n)],
            "timestamp": pa.array([10_000 + 10 * i for i in range(n)], pa.int64()),
        }
    )
    log.append_batches(encode_records(data, options=BatchOptions(max_batch_bytes=62)))
    log.close()
    return log


def reopen(dir: Path, clean: bool = False, rp: int = 0) -> PartitionLog:
    return PartitionLog.open(dir, config(), had_clean_shutdown=clean, recovery_point=rp)


def assert_valid(log: PartitionLog, n: int) -> None:
    """All of [0, n) readable, indexes consistent with the .log, kafka-python agrees."""
    assert log.log_end_offset == n
    assert log.read_records().column("offset").to_pylist() == list(range(n))
    for seg in log.segments:
        assert seg.indexes_look_valid() is None, seg
        mr = MemoryRecords(seg.log_path.read_bytes())
        while mr.has_next():
            assert mr.next_batch().validate_crc()
    for t in (10_000, 10_005, 10_000 + 10 * (n - 1)):
        assert log.fetch_offset_by_timestamp(t).offset == (t - 10_000 + 9) // 10


def segs(dir: Path) -> list[Path]:
    return sorted(dir.glob("*.log"))


def test_torn_last_batch(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    write_log(d)
    last = segs(d)[-1]
    data = last.read_bytes()
    last.write_bytes(data[:-10])  # the last batch lost its tail
    log = reopen(d)
    assert log.load_report.truncated_bytes > 0
    assert_valid(log, N - 1)


def test_index_longer_than_log(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    write_log(d)
    first = segs(d)[0]
    idx = first.with_suffix(".index")
    idx.write_bytes(idx.read_bytes() + bytes.fromhex("000000ff00100000"))
    log = reopen(d, clean=True)
    assert [b for b, _ in log.load_report.rebuilt_indexes] == [0]
    assert_valid(log, N)


def test_zero_padded_indexes(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    write_log(d)
    for p in list(d.glob("*.index")) + list(d.glob("*.timeindex")):
        p.write_bytes(p.read_bytes() + bytes(12 * 100))  # a crash before trimming
    log = reopen(d, clean=True)
    assert len(log.load_report.rebuilt_indexes) == len(segs(d))
    assert_valid(log, N)
    log.close()
    assert all(len(p.read_bytes()) % 8 == 0 for p in d.glob("*.index"))


def flip_crc_mid_segment(log_file: Path) -> int:
    """Flip one byte inside the batch in the middle of `log_file` (its CRC no longer matches);
    returns that batch's position."""
    headers = list(iter_batch_headers(log_file.read_bytes()))
    victim = headers[len(headers) // 2]
    data = bytearray(log_file.read_bytes())
    data[victim.position + victim.size - 1] ^= 0xFF  # the last record's value byte
    log_file.write_bytes(bytes(data))
    return victim.position


def test_missing_timeindex_is_created_empty(tmp_path: Path) -> None:
    """Kafka's sanityCheck creates a missing .timeindex empty and rebuilds nothing; a broker then
    judges the segment's age by the .log's mtime, so we leave it empty too."""
    d = tmp_path / "t-0"
    write_log(d)
    target = sorted(d.glob("*.timeindex"))[1]
    target.unlink()
    log = reopen(d, clean=True)
    base = int(target.name[:20])
    assert log.load_report.rebuilt_indexes == []
    assert log.load_report.empty_time_indexes == [base]
    seg = next(s for s in log.segments if s.base_offset == base)
    assert seg.max_timestamp_so_far == -1
    assert seg.largest_timestamp == seg.last_modified_ms
    log.close()
    assert target.read_bytes() == b""


def test_pass4_cut_keeps_later_segments(tmp_path: Path) -> None:
    """Issue 36 item 1: an unclean shutdown with recovery point 0; the second segment has no
    .index and a CRC-bad batch. Kafka's pass 4 recovers it (cutting the bad batch and the rest
    of that segment) but ignores what it cut; recoverLog's second recovery of it cuts nothing,
    so every later segment stays."""
    d = tmp_path / "t-0"
    write_log(d)
    files = segs(d)
    later = {f.name: f.read_bytes() for f in files[2:]}
    position = flip_crc_mid_segment(files[1])
    files[1].with_suffix(".index").unlink()
    log = reopen(d, rp=0)
    report = log.load_report
    assert report.dropped_segments == []
    assert [(t.file, t.position) for t in report.truncations] == [(files[1].name, position)]
    assert {f.name: f.read_bytes() for f in files[2:]} == later
    assert log.log_end_offset == N
    offsets = log.read_records().column("offset").to_pylist()
    cut_from = log.segments[1].read_next_offset()
    assert offsets == list(range(cut_from)) + list(range(int(files[2].name[:20]), N))


def test_our_reasons_never_cut(tmp_path: Path) -> None:
    """Issue 36 item 2: a clean shutdown, the second segment's .timeindex deleted and one CRC
    flip. Kafka recovers nothing, so not a byte may go. An .index only kafkalog distrusts
    (zero padding) is rebuilt over the whole .log, past the CRC mismatch, cutting nothing."""
    d = tmp_path / "t-0"
    write_log(d)
    files = segs(d)
    flip_crc_mid_segment(files[1])
    files[1].with_suffix(".timeindex").unlink()
    before = {f.name: f.read_bytes() for f in files}
    log = reopen(d, clean=True)
    assert log.load_report.truncated_bytes == 0 and log.load_report.dropped_segments == []
    assert log.log_end_offset == N
    log.close()
    assert {f.name: f.read_bytes() for f in files} == before
    index = files[1].with_suffix(".index")
    entries = index.read_bytes()
    index.write_bytes(entries + bytes(8 * 50))  # zero padding: kafkalog's own distrust
    log = reopen(d, clean=True)
    assert [b for b, _ in log.load_report.rebuilt_indexes] == [int(files[1].name[:20])]
    assert log.load_report.truncated_bytes == 0
    log.close()
    assert {f.name: f.read_bytes() for f in files} == before
    assert index.read_bytes() == entries  # every entry back, also past the bad batch
    assert files[1].with_suffix(".timeindex").read_bytes() == b""  # still as Kafka left it


def test_garbage_in_middle_drops_later_segments(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    write_log(d)
    files = segs(d)
    assert len(files) >= 3
    victim = files[1]
    data = bytearray(victim.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 40] = b"\xde\xad" * 20
    victim.write_bytes(bytes(data))
    log = reopen(d)  # unclean: recover from the recovery point (0)
    report = log.load_report
    assert report.truncated_bytes > 0
    assert report.dropped_segments == [int(f.name[:20]) for f in files[2:]]
    kept = log.log_end_offset
    assert int(files[1].name[:20]) < kept < int(files[2].name[:20])
    assert_valid(log, kept)
    assert not any(f.exists() for f in files[2:])


def test_clean_shutdown_skips_recovery(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    write_log(d)
    log = reopen(d, clean=True)
    assert log.load_report.recovered_segments == [] and not log.load_report.changed_anything
    assert log.recovery_point == N


def test_recovery_starts_at_recovery_point_segment(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    write_log(d)
    bases = [int(f.name[:20]) for f in segs(d)]
    log = reopen(d, rp=bases[2] + 1)
    assert log.load_report.recovered_segments == bases[2:]


def test_deleted_cleaned_swap_leftovers(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    write_log(d)
    files = segs(d)
    base1 = int(files[1].name[:20])
    base2 = int(files[2].name[:20])
    # an old .deleted file (case 37) and an orphan index
    (d / "00000000000000000000.log.deleted").write_bytes(b"junk")
    (d / f"{99999:020d}.index").write_bytes(b"")
    # a completed swap: segment 1 rewritten as a .swap (same content), old files still there
    (d / f"{base1:020d}.log.swap").write_bytes(files[1].read_bytes())
    # an unfinished clean: .cleaned at base2 and a .swap at >= base2 must be rolled back
    (d / f"{base2:020d}.log.cleaned").write_bytes(b"partial")
    (d / f"{base2 + 1:020d}.log.swap").write_bytes(b"partial")
    log = reopen(d, clean=True)
    r = log.load_report
    assert "00000000000000000000.log.deleted" in r.deleted_files
    assert f"{99999:020d}.index" in r.deleted_files
    assert f"{base2:020d}.log.cleaned" in r.deleted_files
    assert f"{base2 + 1:020d}.log.swap" in r.deleted_files
    assert r.swaps_completed == [f"{base1:020d}.log.swap"]
    assert f"{base1:020d}.log" in r.replaced_by_swap
    assert (base1, "missing .index") in r.rebuilt_indexes  # the swapped-in segment had none
    assert not any(p.name.endswith((".deleted", ".cleaned", ".swap")) for p in d.iterdir())
    assert_valid(log, N)


def test_killed_atomic_writes_leftovers(tmp_path: Path) -> None:
    """`<file>.tmp` copies that a write killed before its rename left (a producer snapshot, the
    leader-epoch checkpoint, partition.metadata, an index) go at the next open; what they were
    to replace is kept, and other `.tmp` files (a rebuild's quarantine copy) are not ours to
    delete here."""
    d = tmp_path / "t-0"
    write_log(d)
    epoch = (d / "leader-epoch-checkpoint").read_bytes()
    leftovers = [
        f"{N:020d}.snapshot.tmp",
        "leader-epoch-checkpoint.tmp",
        "partition.metadata.tmp",
        f"{0:020d}.index.tmp",
        f"{0:020d}.timeindex.tmp",
    ]
    kept = [f"{0:020d}.log.quarantine.tmp", "notes.tmp", f"{0:020d}.log.tmp"]
    for name in leftovers + kept:
        (d / name).write_bytes(b"half-written")
    log = reopen(d, clean=True)
    assert sorted(n for n in log.load_report.deleted_files if n.endswith(".tmp")) == sorted(
        leftovers
    )
    assert all(not (d / n).exists() for n in leftovers)
    assert all((d / n).read_bytes() == b"half-written" for n in kept)
    assert (d / "leader-epoch-checkpoint").read_bytes() == epoch
    assert_valid(log, N)


def test_case36_corrupt_index_rebuild(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    write_log(d)
    for p in list(d.glob("*.index")) + list(d.glob("*.timeindex")):
        p.write_bytes(b"  ")
    log = reopen(d)
    assert_valid(log, N)


def test_case37_bogus_index_removed(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    write_log(d, 5)
    bogus = d / f"{5:020d}.index"
    bogus.write_bytes(b"")
    reopen(d, clean=True)
    assert not bogus.exists()


def test_preallocated_zero_tail_is_truncated(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    write_log(d)
    last = segs(d)[-1]
    with open(last, "ab") as f:
        f.write(bytes(5000))
    log = reopen(d)
    assert log.load_report.truncated_bytes == 5000
    assert_valid(log, N)


def test_log_start_checkpoint_above_leo_starts_over(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    write_log(d)
    log = PartitionLog.open(d, config(), had_clean_shutdown=True, log_start_offset=1000)
    assert [s.base_offset for s in log.segments] == [1000]
    assert log.log_start_offset == log.log_end_offset == 1000


def test_compacted_batches_with_offset_gaps(tmp_path: Path) -> None:
    """Cleaned batches keep base/last offsets with records missing in between (§14.14)."""
    d = tmp_path / "c-0"
    log = PartitionLog.create(d, config(**{"cleanup.policy": "compact"}))
    seg = log.active_segment
    offsets = []
    for base in range(0, 100, 10):
        recs = [Record(delta, 5000 + base + delta, b"k%d" % delta, b"v") for delta in (1, 4, 9)]
        raw = build_batch(recs, base_offset=base)
        seg.append(base + 9, 5000 + base + 9, base + 9, raw)
        offsets += [base + 1, base + 4, base + 9]
    log.close()
    again = reopen(d)
    assert again.log_end_offset == 100
    assert again.read_records().column("offset").to_pylist() == offsets
    assert again.fetch_offset_by_timestamp(5000 + 12).offset == 14
    assert again.read_records(15, 30).column("offset").to_pylist() == [19, 21, 24, 29]


def test_transactions_rebuild_txnindex_with_producer_state(tmp_path: Path) -> None:
    d = tmp_path / "x-0"
    log = PartitionLog.create(d, config(**{"segment.bytes": "100000"}))
    seg = log.active_segment

    def add(raw: bytes, last: int) -> None:
        seg.append(last, 1, last, raw)

    add(
        build_batch(
            [Record(0, 1, b"a", b"1")],
            base_offset=0,
            producer_id=7,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        ),
        0,
    )
    add(build_batch([Record(0, 1, b"b", b"2")], base_offset=1), 1)
    marker = build_end_txn_marker_batch(
        base_offset=2,
        producer_id=7,
        producer_epoch=0,
        coordinator_epoch=0,
        control_type=ControlRecordType.ABORT,
        timestamp=1,
    )
    add(marker, 2)
    log.close()
    psm = ProducerStateManager()
    s = LogSegment(d, 0)
    s.recover(psm)
    [txn] = s.txn_index.all_entries()
    assert (txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset) == (
        7,
        0,
        2,
        3,
    )
    assert psm.map_end_offset == 3


@pytest.mark.parametrize("cut", [1, 17, 60, 61])
def test_torn_header_anywhere(tmp_path: Path, cut: int) -> None:
    d = tmp_path / "t-0"
    write_log(d)
    last = segs(d)[-1]
    data = last.read_bytes()
    batch_start = list(iter_batch_headers(data))[-1].position
    last.write_bytes(data[: batch_start + cut])
    log = reopen(d)
    assert_valid(log, N - 1)
