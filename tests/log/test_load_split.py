"""Opening a partition dir whose segment's offsets overflow it: the load splits the segment as a
broker's load does (§6 pass 4, §8.8) and loses no record; what Kafka's load would fail on fails
with one error naming the file; what Kafka's recovery empties is emptied and reported."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from kafkalog_core.errors import LogDirError
from kafkalog_core.log.checkpoints import CleanShutdownFile
from kafkalog_core.log.log_manager import LogManager
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.log.segment.scan import scan_segment
from kafkalog_core.record.batch import iter_batch_headers
from tests.log.test_recovery import config
from tests.log.test_split import (
    INTERVAL,
    RAISE,
    checksums,
    raise_base_offset,
    records,
    write_partition,
)


@pytest.fixture
def pdir(tmp_path: Path) -> Path:
    return write_partition(tmp_path)


def expected(original: list[tuple[int, bytes]], first: int, last: int) -> list[tuple[int, bytes]]:
    """Every record once, in offset order: the raised batch's at their raised offsets."""
    moved = [(o + RAISE, v) for o, v in original if first <= o <= last]
    kept = [(o, v) for o, v in original if not first <= o <= last]
    return kept + moved


def read_back(log: PartitionLog) -> list[tuple[int, bytes]]:
    table = log.read_records()
    offsets, values = table.column("offset").to_pylist(), table.column("value").to_pylist()
    return list(zip(offsets, values, strict=True))


def assert_nothing_changes_on_a_second_open(d: Path, clean: bool = False) -> None:
    before = checksums(d)
    again = PartitionLog.open(d, config(), had_clean_shutdown=clean)  # unclean: all recovered
    assert not again.load_report.splits and not again.load_report.changed_anything
    again.close()
    assert checksums(d) == before


@pytest.mark.parametrize("where", ["last", "middle"])
@pytest.mark.parametrize("found_by", ["recovery", "missing .index"])
def test_open_splits_an_overflowing_segment_and_keeps_every_record(
    pdir: Path, where: str, found_by: str, kafka_client
) -> None:
    original = records(pdir)
    logs = sorted(pdir.glob("*.log"))
    log_path = logs[-1] if where == "last" else logs[1]
    first, last = raise_base_offset(log_path, 3)
    if found_by == "recovery":  # pass 5: an unclean shutdown, recovery from offset 0
        log = PartitionLog.open(pdir, config())
    else:  # pass 4: a clean shutdown, but the segment's .index must be rebuilt
        log_path.with_suffix(".index").unlink()
        log = PartitionLog.open(pdir, config(), had_clean_shutdown=True)
    report = log.load_report
    assert [line for line in report.splits if log_path.name in line], report
    assert not report.truncations and report.truncated_bytes == 0
    assert not report.dropped_segments
    want = expected(original, first, last)
    assert read_back(log) == want
    assert log.log_end_offset == last + RAISE + 1
    assert all(seg.indexes_look_valid() is None for seg in log.segments)
    log.close()
    assert records(pdir) == want
    read = kafka_client.kafka_client_read(pdir)  # Kafka's own client reads every segment
    assert [(r.offset, r.value) for r in read.records] == want
    assert_nothing_changes_on_a_second_open(pdir)


def test_log_manager_load_splits_and_a_second_load_changes_nothing(pdir: Path) -> None:
    original = records(pdir)
    log_path = sorted(pdir.glob("*.log"))[2]
    first, last = raise_base_offset(log_path, 1)
    root = pdir.parent
    mgr = LogManager([root], config())
    partition = mgr.load()[root].partitions[("orders", 0)]
    assert not partition.had_clean_shutdown and partition.splits
    assert read_back(mgr.get_log("orders", 0)) == expected(original, first, last)
    mgr.close()
    CleanShutdownFile(root).delete()  # the next load recovers every segment again
    before = checksums(pdir)
    again = LogManager([root], config())
    reloaded = again.load()[root].partitions[("orders", 0)]
    assert not reloaded.splits and not reloaded.changed_anything and reloaded.recovered_segments
    assert read_back(again.get_log("orders", 0)) == expected(original, first, last)
    again.close()
    CleanShutdownFile(root).delete()
    assert checksums(pdir) == before


def test_only_what_no_piece_can_hold_is_cut_and_the_report_says_where_and_why(
    pdir: Path,
) -> None:
    original = records(pdir)
    logs = sorted(pdir.glob("*.log"))
    log_path = logs[1]
    first, last = raise_base_offset(log_path, 2)
    data = bytearray(log_path.read_bytes())
    bad = list(iter_batch_headers(bytes(data)))[5]
    data[bad.position + 30] ^= 0xFF  # inside batch 5's CRC: a corrupt batch after the raised one
    log_path.write_bytes(bytes(data))
    size = len(data)
    log = PartitionLog.open(pdir, config())
    report = log.load_report
    [cut] = report.truncations
    assert (cut.file, cut.position, cut.bytes) == (log_path.name, bad.position, size - bad.position)
    assert "crc-mismatch" in cut.reason and report.truncated_bytes == cut.bytes
    assert str(cut).startswith(f"{log_path.name}: cut {cut.bytes} bytes at position {bad.position}")
    assert report.splits and not report.dropped_segments  # the later segments stay
    lost = {o for o, _ in original if bad.base_offset <= o < int(logs[2].name[:20])}
    assert lost and read_back(log) == [
        r for r in expected(original, first, last) if r[0] not in lost
    ]
    log.close()
    assert_nothing_changes_on_a_second_open(pdir)


def offsets_out_of_order(log_path: Path) -> None:
    """Give a batch that recovery indexes (not the first) the segment's base offset: the offset
    index refuses it (Kafka's InvalidOffsetException). Every offset still fits the segment."""
    scan = scan_segment(log_path, index_interval_bytes=INTERVAL)
    position = int(scan.index_positions[1])
    data = bytearray(log_path.read_bytes())
    struct.pack_into(">q", data, position, scan.base_offset)
    log_path.write_bytes(bytes(data))


def test_offsets_out_of_order_in_pass_4_fail_the_load_naming_the_file(pdir: Path) -> None:
    log_path = sorted(pdir.glob("*.log"))[1]
    offsets_out_of_order(log_path)
    log_path.with_suffix(".index").unlink()  # pass 4 must rebuild it: Kafka's load fails there
    before = checksums(pdir)
    with pytest.raises(LogDirError, match=re.escape(f"cannot load {log_path}") + ".*no larger"):
        PartitionLog.open(pdir, config(), had_clean_shutdown=True)
    assert checksums(pdir) == before  # nothing dropped, nothing written


def test_indexes_only_our_checks_distrust_are_loaded_as_kafka_loads_them(pdir: Path) -> None:
    log_path = sorted(pdir.glob("*.log"))[1]
    offsets_out_of_order(log_path)
    time_index = log_path.with_suffix(".timeindex")
    time_index.unlink()  # Kafka creates it empty and trusts the .index: no recovery, no failure
    index = log_path.with_suffix(".index")
    index.write_bytes(index.read_bytes() + bytes(8 * 4))  # zero padding only we distrust
    before = {name: digest for name, digest in checksums(pdir).items() if name != time_index.name}
    log = PartitionLog.open(pdir, config(), had_clean_shutdown=True)
    report = log.load_report
    [warning] = report.warnings  # our rebuild of the .index meets the offsets out of order
    assert str(log_path) in warning and "zero padding" in warning and "no larger" in warning
    assert not report.truncations and not report.rebuilt_indexes
    assert report.empty_time_indexes == [int(log_path.name[:20])]
    assert time_index.read_bytes() == b""
    log.close()
    after = checksums(pdir)
    assert {name: after[name] for name in before} == before


def test_a_piece_whose_offsets_go_back_is_kept_as_kafkas_split_would_keep_it(
    pdir: Path,
) -> None:
    original = records(pdir)
    log_path = sorted(pdir.glob("*.log"))[1]
    first, last = raise_base_offset(log_path, 3)
    data = bytearray(log_path.read_bytes())
    headers = list(iter_batch_headers(bytes(data)))
    lowered = headers[5].base_offset  # the last batch: back to batch 5's offset
    struct.pack_into(">q", data, headers[-1].position, lowered)
    log_path.write_bytes(bytes(data))
    log_path.with_suffix(".index").unlink()  # pass 4 recovers the segment: it overflows
    log = PartitionLog.open(pdir, config(), had_clean_shutdown=True)
    report = log.load_report
    assert report.splits and not report.truncations and not report.dropped_segments
    piece = f"{headers[4].base_offset:020d}.log"
    [warning] = report.warnings  # its indexes cannot be rebuilt: Kafka's split indexes it
    assert piece in warning and "a piece of a split" in warning and "no larger" in warning
    log.close()
    moved = {headers[-1].base_offset: lowered}
    want = sorted((moved.get(o, o), v) for o, v in expected(original, first, last))
    assert sorted(records(pdir)) == want  # every record kept
    assert_nothing_changes_on_a_second_open(pdir, clean=True)


def test_offsets_out_of_order_in_pass_5_empty_the_segment_as_kafka_does(pdir: Path) -> None:
    logs = sorted(pdir.glob("*.log"))
    offsets_out_of_order(logs[1])
    size = logs[1].stat().st_size
    log = PartitionLog.open(pdir, config())  # recoverLog: the segment truncated to empty
    report = log.load_report
    [cut] = report.truncations
    assert (cut.file, cut.position, cut.bytes) == (logs[1].name, 0, size)
    assert "recovery failed" in cut.reason and "no larger" in cut.reason
    assert report.dropped_segments == [int(p.name[:20]) for p in logs[2:]]
    assert log.log_end_offset == int(logs[1].name[:20])
