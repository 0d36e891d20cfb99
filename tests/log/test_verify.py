"""Index verification and rebuild: every status from a constructed case, read-only
verify, idempotent and kill-safe rebuild, and the real-broker fixtures (§3.5, §6, §15)."""

from __future__ import annotations

import hashlib
import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from kafkalog_core.log.checkpoints import EpochEntry, LeaderEpochCheckpointFile
from kafkalog_core.log.names import producer_snapshot_file_name
from kafkalog_core.log.producer_state import write_snapshot
from kafkalog_core.log.segment.scan import CRC_MISMATCH, PARTIAL_BATCH
from kafkalog_core.maintenance import rebuild as rebuild_module
from kafkalog_core.maintenance.rebuild import rebuild_partition, rebuild_segment
from kafkalog_core.maintenance.verify import (
    CORRUPT_TAIL,
    MISSING,
    OK,
    WRONG_ENTRIES,
    ZERO_PADDED,
    verify_partition,
    verify_segment,
)
from kafkalog_core.record.batch import iter_batch_headers
from tests.log.test_broker_fixtures import copy_writable
from tests.log.test_recovery import write_log
from tests.log.test_segment import make_batch

INTERVAL = 200  # write_log's index.interval.bytes
BROKER = "segments/broker-2x-interval4096/test_topic_a-0"


def checksums(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def pdir(tmp_path: Path) -> Path:
    d = tmp_path / "orders-0"
    write_log(d)
    assert len(list(d.glob("*.log"))) >= 3
    return d


def logs(d: Path) -> list[Path]:
    return sorted(d.glob("*.log"))


def statuses(d: Path) -> list[tuple[str, str, str, str]]:
    return [
        (r["log_status"], r["index_status"], r["time_index_status"], r["txn_index_status"])
        for r in verify_partition(d, INTERVAL).to_rows()
    ]


def test_written_partition_is_ok_whatever_interval_it_is_judged_at(pdir: Path) -> None:
    assert set(statuses(pdir)) == {(OK, OK, OK, OK)}
    assert verify_partition(pdir, INTERVAL).is_ok
    assert not any(r["note"] for r in verify_partition(pdir, INTERVAL).to_rows())
    other = verify_segment(logs(pdir)[0], 4096)  # recovery at 4096 would write fewer entries
    assert other.is_ok and other.index.status == OK
    assert "index.interval.bytes=4096" in other.to_dict()["note"]


def test_missing_zero_padded_and_wrong_entries(pdir: Path) -> None:
    first, second, third = logs(pdir)[:3]
    first.with_suffix(".index").unlink()
    first.with_suffix(".timeindex").unlink()
    with open(second.with_suffix(".index"), "ab") as f:
        f.write(bytes(8 * 5))  # a broker's preallocated / crash-left tail
    with open(second.with_suffix(".timeindex"), "ab") as f:
        f.write(bytes(12 * 5))
    index = bytearray(third.with_suffix(".index").read_bytes())
    index[8 + 7] ^= 1  # position of entry 1
    third.with_suffix(".index").write_bytes(bytes(index))
    rows = verify_partition(pdir, INTERVAL).to_rows()
    assert (rows[0]["index_status"], rows[0]["time_index_status"]) == (MISSING, MISSING)
    assert (rows[1]["index_status"], rows[1]["time_index_status"]) == (ZERO_PADDED, ZERO_PADDED)
    assert rows[2]["index_status"] == WRONG_ENTRIES and "entry 1:" in rows[2]["problem"]
    assert all(r["log_status"] == OK for r in rows)


def test_corrupt_crc_in_the_middle(pdir: Path) -> None:
    first = logs(pdir)[0]
    data = bytearray(first.read_bytes())
    headers = list(iter_batch_headers(bytes(data)))
    bad = headers[len(headers) // 2]
    data[bad.position + 70] ^= 0xFF  # inside the records: only the CRC notices
    first.write_bytes(bytes(data))
    pv = verify_partition(pdir, INTERVAL)
    row = pv.to_rows()[0]
    assert row["log_status"] == CORRUPT_TAIL and row["bad_batch_reason"] == CRC_MISMATCH
    assert (row["first_bad_offset"], row["first_bad_position"]) == (bad.base_offset, bad.position)
    assert row["bytes_after_bad"] == len(data) - bad.position
    assert pv.log_end_offset == bad.base_offset
    assert all(s.after_corrupt_segment for s in pv.segments[1:])


def test_partial_tail(pdir: Path) -> None:
    last = logs(pdir)[-1]
    data = last.read_bytes()
    last_batch = list(iter_batch_headers(data))[-1]
    last.write_bytes(data[:-5])
    row = verify_partition(pdir, INTERVAL).to_rows()[-1]
    assert row["log_status"] == CORRUPT_TAIL and row["bad_batch_reason"] == PARTIAL_BATCH
    assert row["first_bad_position"] == last_batch.position
    assert row["bytes_after_bad"] == last_batch.size - 5


def test_offsets_not_increasing(pdir: Path) -> None:
    first = logs(pdir)[0]
    data = first.read_bytes()
    headers = list(iter_batch_headers(data))
    # repeat batch 1 after batch 2: valid CRC, offsets going back
    b1 = data[headers[1].position : headers[1].position + headers[1].size]
    end2 = headers[2].position + headers[2].size
    first.write_bytes(data[:end2] + b1 + data[end2:])
    v = verify_segment(first, INTERVAL)
    assert v.log_status == CORRUPT_TAIL
    assert v.scan is not None and v.scan.invalid is not None
    assert (v.scan.invalid.reason, v.scan.invalid.position) == ("offsets-not-increasing", end2)


def damage_everything(d: Path) -> None:
    first, second = logs(d)[:2]
    first.with_suffix(".index").unlink()
    with open(second.with_suffix(".timeindex"), "ab") as f:
        f.write(bytes(24))
    last = logs(d)[-1]
    last.write_bytes(last.read_bytes()[:-3])


def test_verify_changes_no_byte(pdir: Path) -> None:
    damage_everything(pdir)
    before = checksums(pdir)
    pv = verify_partition(pdir, INTERVAL)
    assert not pv.is_ok
    assert checksums(pdir) == before


def test_rebuild_then_verify_ok_and_second_rebuild_changes_nothing(pdir: Path) -> None:
    last_batch_size = list(iter_batch_headers(logs(pdir)[-1].read_bytes()))[-1].size
    damage_everything(pdir)
    write_snapshot(pdir / producer_snapshot_file_name(10**6), [])  # above the LEO
    LeaderEpochCheckpointFile(pdir / "leader-epoch-checkpoint").write(
        [EpochEntry(0, 0), EpochEntry(3, 10**6)]
    )
    first = rebuild_partition(pdir, INTERVAL)
    rows = first.to_rows()
    assert rows[-1]["bytes_quarantined"] == last_batch_size - 3
    assert verify_partition(pdir, INTERVAL).is_ok
    assert not (pdir / producer_snapshot_file_name(10**6)).exists()
    assert LeaderEpochCheckpointFile(pdir / "leader-epoch-checkpoint").read() == [EpochEntry(0, 0)]
    after_first = checksums(pdir)
    second = rebuild_partition(pdir, INTERVAL)
    assert all(r["action"] == "none" for r in second.to_rows()) and not second.actions
    assert checksums(pdir) == after_first


def test_rebuild_quarantines_tail_and_later_segments(pdir: Path) -> None:
    first = logs(pdir)[0]
    original = {p.name: p.read_bytes() for p in logs(pdir)}
    data = bytearray(first.read_bytes())
    bad = list(iter_batch_headers(bytes(data)))[3]
    data[bad.position + 20] ^= 0x01  # attributes: CRC mismatch
    first.write_bytes(bytes(data))
    pv = rebuild_partition(pdir, INTERVAL)
    assert logs(pdir) == [first]
    assert first.read_bytes() == bytes(data[: bad.position])
    quarantine = pdir / (first.name + ".quarantine")
    assert quarantine.read_bytes() == bytes(data[bad.position :])
    for name, content in list(original.items())[1:]:
        assert (pdir / (name + ".quarantine")).read_bytes() == content
        assert not (pdir / name.replace(".log", ".index")).exists()
    rows = pv.to_rows()
    assert rows[0]["bytes_quarantined"] == len(data) - bad.position
    assert all(r["after_corrupt_segment"] for r in rows[1:])
    assert verify_partition(pdir, INTERVAL).is_ok


def test_kill_between_quarantine_copy_and_truncate(
    pdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    last = logs(pdir)[-1]
    last.write_bytes(last.read_bytes()[:-7])
    reference = tmp_path / "reference"
    shutil.copytree(pdir, reference)
    rebuild_partition(reference, INTERVAL)

    def killed(fd: int, position: int) -> None:
        raise KeyboardInterrupt("killed before the truncate")

    monkeypatch.setattr(rebuild_module, "_truncate", killed)
    with pytest.raises(KeyboardInterrupt):
        rebuild_partition(pdir, INTERVAL)
    quarantined = list(pdir.glob("*.quarantine"))
    assert len(quarantined) == 1  # the copy exists before the .log is cut
    monkeypatch.undo()
    rebuild_partition(pdir, INTERVAL)
    assert checksums(pdir) == checksums(reference)
    assert list(pdir.glob("*.quarantine*")) == quarantined  # the tail is stored once


def test_a_kill_before_the_quarantine_rename_leaves_a_copy_the_next_rebuild_deletes(
    pdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    last = logs(pdir)[-1]
    last.write_bytes(last.read_bytes()[:-7])  # a torn last batch: a corrupt tail
    reference = tmp_path / "reference"
    shutil.copytree(pdir, reference)
    rebuild_partition(reference, INTERVAL)
    replace = rebuild_module.os.replace

    def killed_at_rename(src: str | Path, dst: str | Path) -> None:
        if str(src).endswith(".quarantine.tmp"):
            raise KeyboardInterrupt("killed before the quarantine rename")
        replace(src, dst)

    monkeypatch.setattr(rebuild_module.os, "replace", killed_at_rename)
    torn = last.read_bytes()
    with pytest.raises(KeyboardInterrupt):
        rebuild_partition(pdir, INTERVAL)
    monkeypatch.undo()
    leftover = pdir / (last.name + ".quarantine.tmp")  # the name quarantine_tail writes
    assert leftover.exists() and last.read_bytes() == torn  # nothing cut yet
    assert not list(pdir.glob("*.quarantine"))
    # a broker (or PartitionLog.open) recovers the tail on its own: no rebuild would
    # quarantine it again, so only the clean-up removes the copy
    shutil.copy(reference / last.name, last)
    pv = rebuild_partition(pdir, INTERVAL)
    assert not leftover.exists()
    assert f"deleted unfinished quarantine copy {leftover.name}" in pv.actions
    assert not list(pdir.glob("*.quarantine*"))


def test_rebuild_segment_deletes_only_its_own_unfinished_copies(pdir: Path) -> None:
    first, second = logs(pdir)[:2]
    mine = pdir / (first.name + ".1.quarantine.tmp")
    other = pdir / (second.name + ".quarantine.tmp")
    other_suffix = pdir / (first.name + ".bad.tmp")
    for path in (mine, other, other_suffix):
        path.write_bytes(b"partial copy")
    v = rebuild_segment(first, INTERVAL)
    assert not mine.exists() and other.exists() and other_suffix.exists()
    assert v.action == f"deleted unfinished quarantine copy {mine.name}"
    rebuild_segment(first, INTERVAL, quarantine_suffix=".bad")
    assert not other_suffix.exists() and other.exists()


def test_rebuild_deletes_index_writes_a_kill_left(pdir: Path) -> None:
    first, second = logs(pdir)[:2]
    left = [
        pdir / (first.stem + ".index.tmp"),  # atomic_write's name for a rebuilt .index
        pdir / (second.stem + ".timeindex.tmp"),
    ]
    kept = [pdir / "leader-epoch-checkpoint.tmp", pdir / (first.stem + ".snapshot.tmp")]
    for path in left + kept:
        path.write_bytes(b"half")
    before = checksums(pdir)
    assert (
        rebuild_segment(second, INTERVAL).action == f"deleted unfinished index write {left[1].name}"
    )
    assert left[0].exists() and not left[1].exists()  # one segment's files only
    pv = rebuild_partition(pdir, INTERVAL)
    assert pv.actions == [f"deleted unfinished index write {left[0].name}"]
    assert all(p.exists() for p in kept)  # not a rebuild's: left to their writers
    del before[str(left[0].relative_to(pdir))], before[str(left[1].relative_to(pdir))]
    assert checksums(pdir) == before  # nothing else written: the indexes were fine


def test_transaction_index_missing_then_rebuilt(tmp_path: Path) -> None:
    d = tmp_path / "txn-0"
    d.mkdir()
    batches = [
        make_batch(0, [1, 1], producer_id=5, producer_epoch=0, base_sequence=0, transactional=True),
        make_batch(2, [2]),
        make_batch(3, [3], producer_id=5, producer_epoch=0, control_type=0),  # ABORT
    ]
    log = d / "00000000000000000000.log"
    log.write_bytes(b"".join(batches))
    v = verify_segment(log, INTERVAL)
    assert v.txn_index.status == MISSING and v.index.status == MISSING
    done = rebuild_segment(log, INTERVAL)
    assert "00000000000000000000.txnindex" in done.action
    txn = (d / "00000000000000000000.txnindex").read_bytes()
    assert len(txn) == 34
    assert struct.unpack(">hqqqq", txn) == (0, 5, 0, 3, 4)
    assert verify_segment(log, INTERVAL).is_ok


def test_rows_make_an_arrow_table(pdir: Path) -> None:
    damage_everything(pdir)
    table = pa.Table.from_pylist(verify_partition(pdir, INTERVAL).to_rows())
    assert table.num_rows == len(logs(pdir))
    assert "time_index_status" in table.column_names


def test_confluent_logdir_missing_then_rebuilt(fixtures_dir: Path, tmp_path: Path) -> None:
    src = fixtures_dir / "logdirs/confluent-5.1.2"
    root = copy_writable(src, tmp_path / "logs")
    before = checksums(root)
    parts = sorted(p for p in root.iterdir() if p.is_dir())
    seen = 0
    for part in parts:
        for row in verify_partition(part).to_rows():
            seen += 1
            assert row["log_status"] == OK
            assert (row["index_status"], row["time_index_status"]) == (MISSING, MISSING)
    assert seen > 50 and checksums(root) == before
    for part in parts:
        rebuild_partition(part)
    for part in parts:
        assert verify_partition(part).is_ok, part


def test_broker_segments_rebuilt_byte_for_byte(fixtures_dir: Path, tmp_path: Path) -> None:
    src = fixtures_dir / BROKER
    before = checksums(src)
    in_place = verify_partition(src, 4096)  # read-only: works on the fixture itself
    assert checksums(src) == before
    assert {r["index_status"] for r in in_place.to_rows()} == {OK}
    assert {r["time_index_status"] for r in in_place.to_rows()} == {OK}
    # the 2.x record-level time-index offsets differ from recovery's: noted, not a problem
    assert any(".timeindex" in (r["note"] or "") for r in in_place.to_rows())
    d = copy_writable(src, tmp_path / "test_topic_a-0")
    for p in [*d.glob("*.index"), *d.glob("*.timeindex")]:
        p.unlink()
    pv = rebuild_partition(d, 4096)
    assert all(r["index_status"] == MISSING for r in pv.to_rows())
    for p in sorted(src.glob("*.index")):
        assert (d / p.name).read_bytes() == p.read_bytes(), p.name
    assert verify_partition(d, 4096).is_ok
    # a broker time index: identical timestamps, record-level offsets accepted as they are
    for p in sorted(src.glob("*.timeindex")):
        rebuilt, broker = (d / p.name).read_bytes(), p.read_bytes()
        assert len(rebuilt) == len(broker)
        assert all(rebuilt[i : i + 8] == broker[i : i + 8] for i in range(0, len(broker), 12))


def test_rebuild_all_rewrites_the_2x_time_index_in_the_current_convention(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    d = copy_writable(fixtures_dir / BROKER, tmp_path / "test_topic_a-0")
    assert all(r["action"] == "none" for r in rebuild_partition(d, 4096).to_rows())
    before = checksums(d)
    rebuild_partition(d, 4096, rebuild_all=True)
    after = checksums(d)
    changed = {name for name in before if before[name] != after[name]}
    assert changed and all(name.endswith(".timeindex") for name in changed)
    assert {r["time_index_status"] for r in verify_partition(d, 4096).to_rows()} == {OK}


def test_preallocated_zero_tail_is_cut_without_quarantine(pdir: Path) -> None:
    last = logs(pdir)[-1]
    data = last.read_bytes()
    last.write_bytes(data + bytes(4096))  # preallocate=true after an unclean shutdown
    v = verify_segment(last, INTERVAL)
    assert v.log_status == CORRUPT_TAIL and v.scan is not None
    assert v.scan.invalid is not None and v.scan.invalid.reason == "size"
    done = rebuild_segment(last, INTERVAL)
    assert "zero bytes" in done.action and done.bytes_quarantined == 0
    assert last.read_bytes() == data and not list(pdir.glob("*.quarantine"))


def test_a_slice_of_segments_verifies_like_the_whole_partition(tmp_path: Path) -> None:
    """A transaction opened in segment 0 and aborted in segment 10: the slice holding only
    segment 10 replays segment 0's headers and expects the same .txnindex entry."""
    from kafkalog_core.record.control import ControlRecordType
    from tests.log.test_cleaner_audit import batch, marker, write_partition

    d = tmp_path / "t-0"
    txn = {"producer_id": 7, "producer_epoch": 0, "is_transactional": True}
    write_partition(
        d,
        [
            (0, [batch(0, (b"a", b"1", 1)), batch(1, (b"b", b"2", 2), **txn)]),
            (10, [batch(10, (b"c", b"3", 3)), marker(11, 7, ControlRecordType.ABORT, 4)]),
            (20, [batch(20, (b"d", b"4", 5))]),
        ],
    )
    whole = verify_partition(d)
    aborted = [s.scan.aborted_txns for s in whole.segments]
    assert [len(a) for a in aborted] == [0, 1, 0] and aborted[1][0].first_offset == 1
    middle = verify_partition(d, only_segments=[10])
    assert [s.base_offset for s in middle.segments] == [10]
    assert middle.segments[0].scan.aborted_txns == aborted[1]
    assert middle.segments[0].to_dict() == whole.segments[1].to_dict()
    tail = verify_partition(d, only_segments=[20])
    assert tail.segments[0].to_dict() == whole.segments[2].to_dict()
    assert tail.problems == whole.problems  # the slice with the last segment checks the files
