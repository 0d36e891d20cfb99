"""dump-log output must be DumpLogSegments' output, line for line (KAFKA_LOG_FACTS.md §12).

Inputs are built independently of kafkalog: kafka-python's DefaultRecordBatchBuilder, the
hex of §1.7, hand-packed index bytes, and real broker segments from shared/fixtures.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafkalog_core.tools.dump_log import DumpOptions, dump_files

SEGMENT = "00000000000000000000"

# §1.7 batch A (PLE -1) and the COMMIT marker C (PLE 0)
BATCH_A_HEX = (
    "00000000000000000000003affffffff02716a618900000000000000000000000003e800000000000003e8"
    "ffffffffffffffffffffffffffff0000000110000000026b027600"
)
BATCH_C_HEX = (
    "0000000000000007000000420000000002be37f0a700300000000000000000000003e800000000000003e8"
    "00000000000000050000ffffffff000000012000000008000000010c00000000000000"
)

BATCH_A_LINE = (
    "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 "
    "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
    "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1000 size: 70 magic: 2 "
    "compresscodec: none crc: 1902797193 isvalid: true"
)
RECORD_A_LINE = "| offset: 0 CreateTime: 1000 keySize: 1 valueSize: 1 sequence: -1 headerKeys: [] key: k payload: v"

# The §12.3 batch line shape, every field in Kafka's order with single spaces.
V2_BATCH_LINE = re.compile(
    r"baseOffset: (?P<base>-?\d+) lastOffset: (?P<last>-?\d+) count: (?P<count>\d+) "
    r"baseSequence: -?\d+ lastSequence: -?\d+ producerId: -?\d+ producerEpoch: -?\d+ "
    r"partitionLeaderEpoch: -?\d+ isTransactional: (true|false) isControl: (true|false) "
    r"deleteHorizonMs: (OptionalLong\.empty|OptionalLong\[-?\d+\]) position: (?P<pos>\d+) "
    r"(CreateTime|LogAppendTime): -?\d+ size: (?P<size>\d+) magic: 2 "
    r"compresscodec: (none|gzip|snappy|lz4|zstd) crc: \d+ isvalid: (?P<valid>true|false)"
)


def run(paths: list[Path | str], **options: object) -> tuple[str, str, int]:
    out, err = io.StringIO(), io.StringIO()
    code = dump_files([str(p) for p in paths], DumpOptions(**options), out, err)  # type: ignore[arg-type]
    return out.getvalue(), err.getvalue(), code


def batch_a_kafka_python() -> bytes:
    """Batch A built by kafka-python (it writes partitionLeaderEpoch 0, as a broker with epoch 0)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    builder.append(0, timestamp=1000, key=b"k", value=b"v", headers=[])
    return bytes(builder.build())


def build_batch(
    base_offset: int, records: list[tuple[int, bytes | None, bytes | None]], ts: int = 1000
) -> bytes:
    """A v2 batch by kafka-python; `records` = (offset delta, key, value); base offset patched in
    (bytes 0-8 are outside the CRC, which is exactly what a broker does)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    for delta, key, value in records:
        builder.append(delta, timestamp=ts + delta, key=key, value=value, headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# ---------------------------------------------------------------------------------------------
# .log
# ---------------------------------------------------------------------------------------------


def test_batch_a_prints_the_two_exact_lines_of_12_3(tmp_path: Path) -> None:
    data = batch_a_kafka_python()
    patched = bytearray(bytes.fromhex(BATCH_A_HEX))
    struct.pack_into(">i", patched, 12, 0)  # PLE 0, outside the CRC
    assert data == bytes(patched)  # kafka-python and §1.7 agree on every byte
    log = write(tmp_path, f"{SEGMENT}.log", data)

    out, err, code = run([log], print_data_log=True)

    assert out == f"Dumping {log}\nLog starting offset: 0\n{BATCH_A_LINE}\n{RECORD_A_LINE}\n"
    assert err == ""
    assert code == 0


def test_shallow_dump_has_no_record_lines_and_base_offset_comes_from_the_name(
    tmp_path: Path,
) -> None:
    log = write(tmp_path, "00000000000000000042.log", build_batch(42, [(0, b"k", b"v")]))
    out, _, _ = run([log])
    lines = out.splitlines()
    assert lines[1] == "Log starting offset: 42"
    assert len(lines) == 3 and lines[2].startswith("baseOffset: 42 lastOffset: 42 count: 1 ")


def test_skip_record_metadata_and_null_key_follow_kafka_prefix_rules(tmp_path: Path) -> None:
    data = build_batch(0, [(0, b"k", b"v"), (1, None, b"w"), (2, b"x", None)])
    log = write(tmp_path, f"{SEGMENT}.log", data)
    out, _, _ = run([log], print_data_log=True, skip_record_metadata=True)
    # Kafka: "| " only before the key; the payload always starts with a bare space.
    assert out.splitlines()[3:] == ["| key: k payload: v", " payload: w", "| key: x"]

    out, _, _ = run([log], print_data_log=True)
    assert out.splitlines()[4] == (
        "| offset: 1 CreateTime: 1001 keySize: -1 valueSize: 1 sequence: -1 headerKeys: [] payload: w"
    )


def test_print_data_log_replaces_undecodable_utf8(tmp_path: Path) -> None:
    log = write(tmp_path, f"{SEGMENT}.log", build_batch(0, [(0, b"\xff", b"ok\xc3")]))
    out, _, _ = run([log], print_data_log=True, skip_record_metadata=True)
    assert out.splitlines()[-1] == "| key: \ufffd payload: ok\ufffd"


def test_print_data_log_replaces_encoded_surrogates_as_java_does(tmp_path: Path) -> None:
    # Java's String(bytes, UTF_8) takes ED A0..BF (+ a continuation byte) as one malformed
    # sequence where Python's "replace" gives one U+FFFD per byte (seen in broker-written data).
    value = b"a\xed\xa0\x80b\xed\xba\xd8xc\xed\xb4"
    log = write(tmp_path, f"{SEGMENT}.log", build_batch(0, [(0, b"\xed\xbf\xbfk", value)]))
    out, _, _ = run([log], print_data_log=True, skip_record_metadata=True)
    assert out.splitlines()[-1] == ("| key: \ufffdk payload: a\ufffdb\ufffd\ufffdxc\ufffd")


def test_commit_marker_prints_end_txn_marker_and_no_data(tmp_path: Path) -> None:
    log = write(tmp_path, f"{SEGMENT}.log", bytes.fromhex(BATCH_C_HEX))
    out, err, code = run([log], print_data_log=True)
    assert out.splitlines()[2:] == [
        "baseOffset: 7 lastOffset: 7 count: 1 baseSequence: -1 lastSequence: -1 producerId: 5 "
        "producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: true "
        "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1000 size: 78 magic: 2 "
        "compresscodec: none crc: 3191337127 isvalid: true",
        "| offset: 7 CreateTime: 1000 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 0",
    ]
    assert (err, code) == ("", 0)


def test_abort_marker_type_is_read_from_the_key(tmp_path: Path) -> None:
    data = bytearray(bytes.fromhex(BATCH_C_HEX))
    key_at = data.index(bytes.fromhex("00000001"), 61)  # control key: version 0, type 1
    data[key_at + 3] = 0  # type 0 = ABORT
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    log = write(tmp_path, f"{SEGMENT}.log", bytes(data))
    out, _, _ = run([log], deep_iteration=True)
    assert out.splitlines()[-1].endswith(" endTxnMarker: ABORT coordinatorEpoch: 0")


def test_bad_crc_prints_isvalid_false_and_still_dumps_records(tmp_path: Path) -> None:
    data = bytearray(batch_a_kafka_python())
    data[-2] ^= 0x01  # value "v" -> "w": structure intact, CRC wrong
    log = write(tmp_path, f"{SEGMENT}.log", bytes(data))
    out, err, code = run([log], print_data_log=True)
    lines = out.splitlines()
    assert lines[2] == BATCH_A_LINE.replace("isvalid: true", "isvalid: false")
    assert lines[3].endswith("key: k payload: w")
    assert (err, code) == ("", 0)


def test_torn_tail_reports_invalid_bytes_unless_max_bytes_given(tmp_path: Path) -> None:
    a = batch_a_kafka_python()
    b = build_batch(1, [(0, b"k2", b"v2")])
    log = write(tmp_path, f"{SEGMENT}.log", a + b[:30])
    out, err, code = run([log])
    assert out.splitlines()[-1] == f"Found 30 invalid bytes at the end of {SEGMENT}.log"
    assert len(out.splitlines()) == 4 and (err, code) == ("", 0)

    out, _, _ = run([log], max_bytes=100)
    assert "invalid bytes" not in out and out.count("baseOffset:") == 1
    out, _, _ = run([log], max_bytes=69)  # the first batch does not fit: nothing at all
    assert out.splitlines()[2:] == []


def test_garbage_is_one_error_line_never_a_traceback(tmp_path: Path) -> None:
    log = write(tmp_path, f"{SEGMENT}.log", batch_a_kafka_python() + bytes(40))
    out, err, code = run([log], deep_iteration=True)
    assert out.splitlines()[2] == BATCH_A_LINE
    assert out.splitlines()[-1] == f"Found 40 invalid bytes at the end of {SEGMENT}.log"
    assert len(err.splitlines()) == 1 and err.startswith("kafkalog: error: ")
    assert "smaller than the minimum record overhead" in err
    assert "Traceback" not in err and code == 1


def test_structurally_broken_records_are_reported_and_the_walk_goes_on(tmp_path: Path) -> None:
    data = bytearray(batch_a_kafka_python())
    data[61] = 0x7E  # first record's length varint says 63 bytes: runs past the batch
    second = build_batch(1, [(0, b"k2", b"v2")])
    log = write(tmp_path, f"{SEGMENT}.log", bytes(data) + second)
    out, err, code = run([log], deep_iteration=True)
    assert out.count("baseOffset:") == 2 and "| offset: 1 " in out
    assert len(err.splitlines()) == 1 and err.startswith("kafkalog: error: ")
    assert code == 1


def test_non_consecutive_offsets_go_to_stderr_newest_first(tmp_path: Path) -> None:
    # A compacted-looking segment: offsets 0, 2 | 5, 6 | 9
    data = (
        build_batch(0, [(0, b"a", b"1"), (2, b"b", b"2")])
        + build_batch(5, [(0, b"c", b"3"), (1, b"d", b"4")])
        + build_batch(9, [(0, b"e", b"5")])
    )
    log = write(tmp_path, f"{SEGMENT}.log", data)
    out, err, code = run([log], deep_iteration=True)
    assert [line.split()[2] for line in out.splitlines() if line.startswith("| ")] == [
        "0", "2", "5", "6", "9",
    ]  # fmt: skip
    # Kafka prepends each pair to a Scala List, so the newest pair is printed first.
    assert err == (
        f"Non-consecutive offsets in {log.resolve()}\n"
        "  6 is followed by 9\n  2 is followed by 5\n  0 is followed by 2\n"
    )
    assert code == 0
    assert run([log])[1] == ""  # shallow iteration does not look at record offsets


def test_legacy_v1_batches_use_the_offset_line_variant(fixtures_dir: Path, tmp_path: Path) -> None:
    source = fixtures_dir / "batches" / "kafkago_v1c_v1_v1c.records.bin"
    log = tmp_path / f"{SEGMENT}.log"
    shutil.copy(source, log)
    out, err, code = run([log], deep_iteration=True)
    lines = out.splitlines()
    assert lines[2] == (
        "offset: 1 position: 0 CreateTime: 1633414139337 size: 133 magic: 1 compresscodec: gzip "
        "crc: 2006645387 isvalid: true"
    )
    # inner messages of the gzip wrapper, with Kafka's stray '}' after the legacy crc
    assert lines[3] == (
        "| offset: 0 CreateTime: 1633414139305 keySize: 5 valueSize: 33 isValid: true crc: 2673261612}"
    )
    assert (err, code) == ("", 0)


# ---------------------------------------------------------------------------------------------
# real broker segment (2.x, index.interval.bytes 4096)
# ---------------------------------------------------------------------------------------------


@pytest.fixture()
def broker_segment(fixtures_dir: Path, tmp_path: Path) -> Path:
    source = fixtures_dir / "segments" / "broker-2x-interval4096" / "test_topic_a-0"
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copy(source / f"{SEGMENT}{suffix}", tmp_path / f"{SEGMENT}{suffix}")
    return tmp_path


def kafka_python_batches(log: Path) -> list[tuple[int, int, int, list[int]]]:
    """(position, size, last offset, record offsets) of every batch, read by kafka-python."""
    data = log.read_bytes()
    found, position = [], 0
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        size = struct.unpack_from(">i", data, position + 8)[0] + 12
        offsets = [r.offset for r in batch]
        found.append((position, size, batch.base_offset + batch.last_offset_delta, offsets))
        position += size
    return found


def test_broker_log_batches_have_the_12_3_shape(broker_segment: Path) -> None:
    log = broker_segment / f"{SEGMENT}.log"
    out, err, code = run([log])
    lines = out.splitlines()
    assert lines[:2] == [f"Dumping {log}", "Log starting offset: 0"]
    expected = kafka_python_batches(log)
    matches = [V2_BATCH_LINE.fullmatch(line) for line in lines[2:]]
    assert all(matches), [line for line, m in zip(lines[2:], matches, strict=True) if not m][:1]
    position = 0
    for m, (kp_position, kp_size, kp_last, _) in zip(matches, expected, strict=True):
        assert m is not None
        assert int(m["pos"]) == position == kp_position  # cumulative
        assert (int(m["size"]), int(m["last"])) == (kp_size, kp_last)
        assert m["valid"] == "true"
        position += int(m["size"])
    assert position == log.stat().st_size  # no "invalid bytes" line
    assert (err, code) == ("", 0)


def test_broker_index_dumps_without_mismatches(broker_segment: Path) -> None:
    index = broker_segment / f"{SEGMENT}.index"
    relative, position = struct.unpack(">ii", index.read_bytes())
    out, err, code = run([index])
    assert out == f"Dumping {index}\noffset: {relative} position: {position}\n"
    assert (err, code) == ("", 0)
    # the entry really names the batch starting at that position (recovery rule of §3.5)
    batches = kafka_python_batches(broker_segment / f"{SEGMENT}.log")
    assert (position, relative) in [(p, last) for p, _, last, _ in batches]

    out, err, _ = run([index], verify_index_only=True)
    assert (out, err) == (f"Dumping {index}\n", "")
    out, _, _ = run([index], index_sanity_check=True)
    assert out == f"Dumping {index}\n{index} passed sanity check.\n"


def test_broker_timeindex_reports_record_level_offsets_as_not_found(broker_segment: Path) -> None:
    """§15: this 2.x broker stored the offset of the first record with the max timestamp, not
    the batch's last offset. DumpLogSegments looks for a batch whose lastOffset equals the
    entry's offset; for a record-level offset inside a batch it finds the batch holding it,
    whose lastOffset is larger, and reports "not found" with that lastOffset. The timestamp and
    ordering checks only run for entries that were found, so nothing else is reported."""
    timeindex = broker_segment / f"{SEGMENT}.timeindex"
    raw = timeindex.read_bytes()
    entries = [struct.unpack_from(">qi", raw, at) for at in range(0, len(raw), 12)]
    batches = kafka_python_batches(broker_segment / f"{SEGMENT}.log")

    expected_not_found = []
    for _, offset in entries:
        holder = next(b for b in batches if b[2] >= offset)
        assert offset in holder[3] and holder[2] != offset  # record-level, inside the batch
        expected_not_found.append(f"Indexed offset: {offset}, found log offset: {holder[2]}")

    out, err, code = run([timeindex])
    assert out == f"Dumping {timeindex}\n" + "".join(
        f"timestamp: {ts} offset: {off}\n" for ts, off in entries
    )
    assert err.splitlines() == [
        "The following indexed offsets are not found in the log.",
        *expected_not_found,
    ]
    # pinned values, so a change in the fixture or the reading is noticed
    assert expected_not_found == [
        "Indexed offset: 66, found log offset: 70",
        "Indexed offset: 303, found log offset: 361",
    ]
    assert code == 0
    out, _, _ = run([timeindex], index_sanity_check=True)
    assert out.splitlines()[-1] == f"{timeindex} passed sanity check."


# ---------------------------------------------------------------------------------------------
# hand-written indexes
# ---------------------------------------------------------------------------------------------


def test_empty_index_prints_exactly_is_empty(tmp_path: Path) -> None:
    """§13 case 48."""
    write(tmp_path, f"{SEGMENT}.log", batch_a_kafka_python())
    index = write(tmp_path, f"{SEGMENT}.index", b"")
    out, err, code = run([index])
    assert out == f"Dumping {index}\n" + f"{index} is empty.\n"
    assert (err, code) == ("", 0)


def three_batch_segment(tmp_path: Path) -> list[int]:
    """Batches [0,1] [2,2] [3,5] at base 100; returns their positions."""
    batches = [
        build_batch(100, [(0, b"a", b"1"), (1, b"b", b"2")], ts=1000),
        build_batch(102, [(0, b"c", b"3")], ts=2000),
        build_batch(103, [(0, b"d", b"4"), (1, b"e", b"5"), (2, b"f", b"6")], ts=3000),
    ]
    write(tmp_path, "00000000000000000100.log", b"".join(batches))
    positions, at = [], 0
    for batch in batches:
        positions.append(at)
        at += len(batch)
    return positions


def test_index_mismatches_and_zero_padding(tmp_path: Path) -> None:
    p = three_batch_segment(tmp_path)
    # (relative offset, position): right, wrong (names batch 2 but says offset 3), right,
    # then crash padding that must not be printed
    entries = [(1, p[0]), (3, p[1]), (5, p[2]), (0, 0), (0, 0)]
    index = write(
        tmp_path, "00000000000000000100.index", b"".join(struct.pack(">ii", *e) for e in entries)
    )
    out, err, code = run([index])
    assert out.splitlines()[1:] == [
        f"offset: 101 position: {p[0]}",
        f"offset: 103 position: {p[1]}",
        f"offset: 105 position: {p[2]}",
    ]
    assert err == f"Mismatches in :{index.resolve()}\n  Index offset: 103, log offset: 102\n"
    assert code == 0


def test_index_entry_past_the_log_is_an_error_line(tmp_path: Path) -> None:
    three_batch_segment(tmp_path)
    index = write(tmp_path, "00000000000000000100.index", struct.pack(">ii", 1, 10**6))
    out, err, code = run([index])
    assert err.startswith("kafkalog: error: ") and len(err.splitlines()) == 1
    assert code == 1


def test_timeindex_mismatch_out_of_order_and_not_found(tmp_path: Path) -> None:
    p = three_batch_segment(tmp_path)
    write(tmp_path, "00000000000000000100.index", struct.pack(">ii", 2, p[1]))
    # record timestamps: batch [100,101] -> 1000,1001; [102] -> 2000; [103..105] -> 3000..3002
    entries = [
        (1001, 1),  # right
        (1999, 2),  # batch 102 max is 2000: mismatch
        (1500, 5),  # right offset, wrong ts (3002), and below the previous 1999: out of order
        (3002, 4),  # offset 104 is inside batch [103,105]: not found, log offset 105
        (4000, 9),  # offset 109 beyond the log: not found, -1
    ]
    timeindex = write(
        tmp_path,
        "00000000000000000100.timeindex",
        b"".join(struct.pack(">qi", *e) for e in entries),
    )
    out, err, code = run([timeindex])
    assert out.splitlines()[1:] == [f"timestamp: {ts} offset: {100 + rel}" for ts, rel in entries]
    absolute = timeindex.resolve()
    assert err.splitlines() == [
        f"Found timestamp mismatch in :{absolute}",
        "  Index timestamp: 1999, log timestamp: 2000",
        "  Index timestamp: 1500, log timestamp: 3002",
        f"Found out of order timestamp in :{absolute}",
        "  Index timestamp: 1500, Previously indexed timestamp: 1999",
        "The following indexed offsets are not found in the log.",
        "Indexed offset: 104, found log offset: 105",
        "Indexed offset: 109, found log offset: -1",
    ]
    assert code == 0
    out, _, _ = run([timeindex], verify_index_only=True)
    assert out == f"Dumping {timeindex}\n"


# ---------------------------------------------------------------------------------------------
# .txnindex, .snapshot, unknown files
# ---------------------------------------------------------------------------------------------


def test_txnindex_lines(tmp_path: Path) -> None:
    entries = [(0, 7, 10, 20, 21), (0, 8, 15, 30, 31)]
    txn = write(
        tmp_path,
        f"{SEGMENT}.txnindex",
        b"".join(struct.pack(">hqqqq", *e) for e in entries) + b"\x00" * 5,
    )
    out, err, code = run([txn])
    assert out == (
        f"Dumping {txn}\n"
        "version: 0 producerId: 7 firstOffset: 10 lastOffset: 20 lastStableOffset: 21\n"
        "version: 0 producerId: 8 firstOffset: 15 lastOffset: 30 lastStableOffset: 31\n"
    )
    assert (err, code) == ("", 0)


def snapshot_bytes(entries: list[tuple[int, ...]]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    return struct.pack(">hI", 1, crc32c(body)) + body


def test_snapshot_lines_keep_the_trailing_space(tmp_path: Path) -> None:
    # pid, epoch, lastSeq, lastOffset, offsetDelta, timestamp, coordinatorEpoch, txnFirstOffset
    entries = [(5, 1, 9, 41, 4, 1700, 3, 37), (6, 0, -1, -1, 0, 1800, -1, -1)]
    snap = write(tmp_path, "00000000000000000042.snapshot", snapshot_bytes(entries))
    out, err, code = run([snap])
    assert out == (
        f"Dumping {snap}\n"
        "producerId: 5 producerEpoch: 1 coordinatorEpoch: 3 currentTxnFirstOffset: OptionalLong[37] "
        "lastTimestamp: 1700 firstSequence: 5 lastSequence: 9 lastOffset: 41 offsetDelta: 4 "
        "timestamp: 1700\n"
        "producerId: 6 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        "OptionalLong.empty lastTimestamp: 1800 \n"
    )
    assert (err, code) == ("", 0)


def test_real_snapshots_are_empty(fixtures_dir: Path) -> None:
    snaps = sorted((fixtures_dir / "logdirs" / "confluent-5.1.2" / "_schemas-0").glob("*.snapshot"))
    snaps += sorted(
        (fixtures_dir / "segments" / "broker-2x-interval4096" / "test_topic_a-0").glob("*.snapshot")
    )[:2]
    out, err, code = run(snaps)
    assert out == "".join(f"Dumping {s}\n" for s in snaps)  # version 1, valid CRC, 0 producers
    assert (err, code) == ("", 0)


def test_corrupt_snapshot_prints_the_message_on_stderr(tmp_path: Path) -> None:
    data = bytearray(snapshot_bytes([(5, 1, 9, 41, 4, 1700, 3, 37)]))
    data[-1] ^= 0xFF
    snap = write(tmp_path, f"{SEGMENT}.snapshot", bytes(data))
    out, err, code = run([snap])
    assert out == f"Dumping {snap}\n"
    assert "CRC" in err and len(err.splitlines()) == 1
    assert code == 0  # Kafka catches CorruptSnapshotException and carries on


def test_unknown_suffix_is_ignored_on_stderr(tmp_path: Path) -> None:
    other = write(tmp_path, "leader-epoch-checkpoint.tmp", b"0\n")
    out, err, code = run([other])
    assert out == f"Dumping {other}\n"
    assert err == f"Ignoring unknown file {other}\n"
    assert code == 0


def test_missing_file_is_one_line_and_the_run_goes_on(tmp_path: Path) -> None:
    log = write(tmp_path, f"{SEGMENT}.log", batch_a_kafka_python())
    missing = tmp_path / "00000000000000000099.log"
    out, err, code = run([missing, log])
    assert err == f"kafkalog: error: {missing}: No such file or directory\n"
    assert out.splitlines()[-1] == BATCH_A_LINE
    assert code == 1


# ---------------------------------------------------------------------------------------------
# confluent 5.1.2 log dir (Kafka 2.1): compacted topics, lz4, LogAppendTime
# ---------------------------------------------------------------------------------------------


def test_confluent_compacted_topics_deep_iteration(fixtures_dir: Path) -> None:
    """The compacted topics of this dir were never cleaned (its cleaner-offset-checkpoint holds
    no partition), so their offsets are contiguous: kafka-python agrees, and Kafka would print
    no "Non-consecutive offsets" block. The gap reporting itself is pinned by
    test_non_consecutive_offsets_go_to_stderr_newest_first on a synthetic compacted segment."""
    root = fixtures_dir / "logdirs" / "confluent-5.1.2"
    logs = [
        root / "_schemas-0" / f"{SEGMENT}.log",
        root / "__consumer_offsets-37" / f"{SEGMENT}.log",
    ]
    out, err, code = run(logs, deep_iteration=True)
    for log in logs:
        offsets = [o for *_, offs in kafka_python_batches(log) for o in offs]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    assert out.count("| offset: ") == sum(
        len(offs) for log in logs for *_, offs in kafka_python_batches(log)
    )
    assert (err, code) == ("", 0)


def test_confluent_lz4_and_log_append_time(fixtures_dir: Path) -> None:
    root = fixtures_dir / "logdirs" / "confluent-5.1.2"
    log = (
        root
        / "_confluent-controlcenter-5-1-2-1-monitoring-trigger-event-rekey-0"
        / f"{SEGMENT}.log"
    )
    out, err, code = run([log], deep_iteration=True)
    lines = out.splitlines()
    batch_lines = [line for line in lines if line.startswith("baseOffset: ")]
    assert batch_lines and all(V2_BATCH_LINE.fullmatch(line) for line in batch_lines)
    assert all(line.endswith("isvalid: true") for line in batch_lines)
    assert any("compresscodec: lz4" in line or "LogAppendTime" in line for line in batch_lines)
    # every record of a LogAppendTime batch shows the batch maxTimestamp
    for i, line in enumerate(lines):
        if line.startswith("baseOffset: ") and " LogAppendTime: " in line:
            max_ts = line.split(" LogAppendTime: ")[1].split()[0]
            record = lines[i + 1]
            assert record.split()[3:5] == ["LogAppendTime:", max_ts]
    assert (err, code) == ("", 0)


# ---------------------------------------------------------------------------------------------
# --json
# ---------------------------------------------------------------------------------------------


def test_json_lines(tmp_path: Path, broker_segment: Path) -> None:
    (tmp_path / "own").mkdir()
    log = write(
        tmp_path / "own",
        f"{SEGMENT}.log",
        batch_a_kafka_python() + build_batch(1, [(0, None, b"\xff\x00")]) + b"xx",
    )
    out, err, code = run([log], print_data_log=True, json=True)
    objects = [json.loads(line) for line in out.splitlines()]
    assert err == "" and code == 0
    assert [o["kind"] for o in objects] == [
        "dumping", "log_start", "batch", "record", "batch", "record", "invalid_bytes",
    ]  # fmt: skip
    batch = objects[2]
    assert batch["file"] == str(log)
    assert batch["crc"] == 1902797193 and batch["is_valid"] is True and batch["position"] == 0
    assert batch["delete_horizon_ms"] is None and batch["compresscodec"] == "none"
    assert objects[3]["key"] == "k" and objects[3]["key_encoding"] == "utf-8"
    assert objects[5]["key"] is None and objects[5]["key_encoding"] is None
    assert objects[5]["value"] == "/wA=" and objects[5]["value_encoding"] == "base64"
    assert objects[6]["bytes"] == 2

    timeindex = broker_segment / f"{SEGMENT}.timeindex"
    out, err, _ = run([timeindex], json=True)
    objects = [json.loads(line) for line in out.splitlines()]
    assert err == ""
    assert [o["kind"] for o in objects] == [
        "dumping",
        "time_index_entry",
        "time_index_entry",
        "error",
        "error",
    ]
    assert objects[3] == {
        "kind": "error", "file": str(timeindex.resolve()), "error": "time_index_offset_not_found",
        "index_offset": 66, "log_offset": 70,
    }  # fmt: skip
