"""Producer state replay and .snapshot files (§9.6, §4, §13 case 27) against real snapshots."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from kafkalog_core.errors import CorruptSnapshotError
from kafkalog_core.log.index.txn_index import AbortedTxn, TransactionIndex
from kafkalog_core.log.producer_state import (
    ControlType,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    list_snapshots,
    read_snapshot,
    snapshot_offset,
    write_snapshot,
)
from kafkalog_core.record.batch import BatchHeader, make_attributes

BROKER_DIR = Path("segments/broker-2x-interval4096/test_topic_a-0")
CONFLUENT = Path("logdirs/confluent-5.1.2")


def header(
    base_offset: int,
    records: int = 1,
    *,
    pid: int = -1,
    epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    max_timestamp: int = 1000,
    magic: int = 2,
) -> BatchHeader:
    return BatchHeader(
        base_offset=base_offset,
        length=100,
        partition_leader_epoch=0,
        magic=magic,
        crc=0,
        attributes=make_attributes(is_transactional=transactional, is_control=control),
        last_offset_delta=records - 1,
        base_timestamp=max_timestamp,
        max_timestamp=max_timestamp,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=base_sequence,
        records_count=records,
    )


PID1, PID2, EPOCH = 5, 10, 0


def recover_case_27(state: ProducerStateManager, txn_index: TransactionIndex) -> None:
    """LogSegmentTest.testRecoverTransactionIndex's segment, replayed as recovery does."""
    batches = [
        (header(100, 2, pid=PID1, epoch=EPOCH, base_sequence=0, transactional=True), None),
        (header(102, 2, pid=PID2, epoch=EPOCH, base_sequence=0, transactional=True), None),
        (header(104, 2), None),
        (header(106, pid=PID2, epoch=EPOCH, transactional=True, control=True), ControlType.ABORT),
        (header(107, pid=PID1, epoch=EPOCH, transactional=True, control=True), ControlType.COMMIT),
    ]
    for batch, control_type in batches:
        aborted = state.update(batch, control_type, 0 if control_type is not None else None)
        if aborted is not None:
            txn_index.append(aborted)


def test_recover_transaction_index(tmp_path: Path) -> None:  # case 27
    state = ProducerStateManager(100)
    txn_index = TransactionIndex(tmp_path / "00000000000000000100.txnindex", 100)
    recover_case_27(state, txn_index)
    assert state.map_end_offset == 108
    assert txn_index.all_entries() == [AbortedTxn(PID2, 102, 106, 100)]
    assert state.ongoing_txns == []
    assert state.first_unstable_offset is None
    pid1 = state.entry(PID1)
    assert pid1 is not None
    assert (pid1.last_offset, pid1.offset_delta, pid1.last_sequence) == (101, 1, 1)
    assert pid1.current_txn_first_offset == -1 and pid1.coordinator_epoch == 0


def test_recover_transaction_index_with_preloaded_txn(tmp_path: Path) -> None:  # case 27 variant
    state = ProducerStateManager(100)
    state.load_entry(
        ProducerStateEntry(
            producer_id=PID2,
            producer_epoch=EPOCH,
            last_sequence=10,
            last_offset=10,
            offset_delta=5,
            timestamp=-1,
            coordinator_epoch=0,
            current_txn_first_offset=75,
        )
    )
    assert state.first_unstable_offset == 75
    txn_index = TransactionIndex(tmp_path / "00000000000000000100.txnindex", 100)
    recover_case_27(state, txn_index)
    assert txn_index.all_entries() == [AbortedTxn(PID2, 75, 106, 100)]
    assert state.map_end_offset == 108


def test_lso_without_other_open_txn_is_marker_plus_one() -> None:
    state = ProducerStateManager()
    state.update(header(0, 3, pid=1, epoch=0, base_sequence=0, transactional=True))
    assert state.first_unstable_offset == 0
    aborted = state.update(
        header(3, pid=1, epoch=0, transactional=True, control=True), ControlType.ABORT, 7
    )
    assert aborted == AbortedTxn(1, 0, 3, 4)
    entry = state.entry(1)
    assert entry is not None and entry.coordinator_epoch == 7


def test_lso_uses_earliest_txn_of_another_producer() -> None:
    state = ProducerStateManager()
    state.update(header(0, pid=1, epoch=0, base_sequence=0, transactional=True))
    state.update(header(1, pid=2, epoch=0, base_sequence=0, transactional=True))
    state.update(header(2, pid=3, epoch=0, base_sequence=0, transactional=True))
    assert state.ongoing_txns == [(0, 1), (1, 2), (2, 3)]
    aborted = state.update(header(3, pid=2, epoch=0, control=True), ControlType.ABORT, 0)
    assert aborted == AbortedTxn(2, 1, 3, 0)
    aborted = state.update(header(4, pid=1, epoch=0, control=True), ControlType.ABORT, 0)
    assert aborted == AbortedTxn(1, 0, 4, 2)
    assert state.update(header(5, pid=3, epoch=0, control=True), ControlType.COMMIT, 0) is None
    assert state.ongoing_txns == []


def test_markers_for_empty_txns_and_empty_control_batches() -> None:
    state = ProducerStateManager()
    assert state.update(header(0, pid=1, epoch=0, control=True), ControlType.ABORT, 0) is None
    assert state.update(header(1, pid=2, epoch=0, control=True)) is None  # cleaned marker
    empty = state.entry(2)
    assert empty == ProducerStateEntry(2)
    assert state.map_end_offset == 2


def test_legacy_and_non_idempotent_batches() -> None:
    state = ProducerStateManager(0)
    state.update(header(0, 5))
    assert state.map_end_offset == 5 and state.is_empty()
    state.update(header(5, magic=1))
    assert state.map_end_offset == 5  # Kafka's recovery ignores pre-v2 batches


def test_epoch_bump_by_marker_drops_batch_metadata() -> None:
    state = ProducerStateManager()
    state.update(header(0, 2, pid=9, epoch=3, base_sequence=4, transactional=True))
    entry = state.entry(9)
    assert entry is not None and entry.first_sequence == 4 and entry.last_sequence == 5
    state.update(header(2, pid=9, epoch=4, control=True, max_timestamp=5000), ControlType.ABORT, 1)
    entry = state.entry(9)
    assert entry == ProducerStateEntry(9, 4, -1, -1, 0, 5000, 1, -1)
    assert not entry.has_batch_metadata


def test_snapshot_bytes_layout(tmp_path: Path) -> None:
    entry = ProducerStateEntry(7, 2, 41, 1234, 9, 1_700_000_000_000, 3, 1225)
    data = encode_snapshot([entry])
    body = struct.pack(">i", 1) + struct.pack(
        ">qhiqiqiq", 7, 2, 41, 1234, 9, 1_700_000_000_000, 3, 1225
    )
    assert len(body) == 4 + 46
    assert data == struct.pack(">hI", 1, crc32c(body)) + body
    assert decode_snapshot(data) == [entry]


def test_snapshot_round_trip_through_manager(tmp_path: Path) -> None:
    state = ProducerStateManager(100)
    recover_case_27(state, TransactionIndex(tmp_path / "x.txnindex", 100))
    state.update(header(108, 2, pid=PID1, epoch=EPOCH, base_sequence=2, transactional=True))
    path = state.take_snapshot(tmp_path)
    assert path.name == "00000000000000000110.snapshot"
    assert snapshot_offset(path) == 110
    assert list_snapshots(tmp_path) == [(110, path)]
    loaded = ProducerStateManager()
    loaded.load_snapshot(path)
    assert loaded.map_end_offset == 110
    assert loaded.entries == state.entries
    assert loaded.ongoing_txns == [(108, PID1)]
    assert [e.producer_id for e in read_snapshot(path)] == [PID1, PID2]


def test_corrupt_snapshots(tmp_path: Path) -> None:
    good = encode_snapshot([ProducerStateEntry(1, 0, 0, 0, 0, 10, -1, -1)])
    path = tmp_path / "00000000000000000001.snapshot"
    path.write_bytes(b"\x00\x02" + good[2:])
    with pytest.raises(CorruptSnapshotError, match="unknown file version 2"):
        read_snapshot(path)
    flipped = bytearray(good)
    flipped[-1] ^= 1
    path.write_bytes(bytes(flipped))
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        read_snapshot(path)
    path.write_bytes(good[:5])
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(path)
    truncated = good[:-4]
    path.write_bytes(truncated[:2] + struct.pack(">I", crc32c(truncated[6:])) + truncated[6:])
    with pytest.raises(CorruptSnapshotError, match="schema"):
        read_snapshot(path)


def test_real_snapshots(fixtures_dir: Path, tmp_path: Path) -> None:
    paths = sorted((fixtures_dir / BROKER_DIR).glob("*.snapshot"))
    paths += sorted((fixtures_dir / CONFLUENT).glob("*/*.snapshot"))
    assert len(paths) > 10
    for path in paths:
        entries = read_snapshot(path)  # version and CRC verified
        data = path.read_bytes()
        assert struct.unpack_from(">I", data, 2)[0] == crc32c(data[6:])
        copy = tmp_path / path.name
        write_snapshot(copy, entries)
        assert copy.read_bytes() == data  # our writer gives the broker's bytes
        state = ProducerStateManager()
        state.load_snapshot(path)
        assert state.map_end_offset == int(path.name.split(".")[0])


def test_dump_line() -> None:
    entry = ProducerStateEntry(7, 2, 41, 1234, 9, 1700, 3, 1225)
    assert entry.dump_line() == (
        "producerId: 7 producerEpoch: 2 coordinatorEpoch: 3 currentTxnFirstOffset: "
        "OptionalLong[1225] lastTimestamp: 1700 firstSequence: 32 lastSequence: 41 "
        "lastOffset: 1234 offsetDelta: 9 timestamp: 1700"
    )
    assert ProducerStateEntry(8).dump_line() == (
        "producerId: 8 producerEpoch: -1 coordinatorEpoch: -1 currentTxnFirstOffset: "
        "OptionalLong.empty lastTimestamp: -1 "
    )
