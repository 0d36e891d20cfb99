"""TransactionIndex: 34-byte AbortedTxn entries, Kafka's TransactionIndexTest behaviour (§4)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kafkalog_core.errors import CorruptIndexError, InvalidOffsetError
from kafkalog_core.log.index.txn_index import AbortedTxn, TransactionIndex


@pytest.fixture
def index(tmp_path: Path) -> TransactionIndex:
    return TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)


def test_entry_bytes() -> None:
    txn = AbortedTxn(producer_id=10, first_offset=102, last_offset=106, last_stable_offset=100)
    data = txn.to_bytes()
    assert data == struct.pack(">hqqqq", 0, 10, 102, 106, 100)
    assert len(data) == 34
    assert AbortedTxn.from_bytes(data) == txn
    assert str(txn) == (
        "version: 0 producerId: 10 firstOffset: 102 lastOffset: 106 lastStableOffset: 100"
    )


def test_file_created_only_on_first_append(index: TransactionIndex) -> None:
    assert not index.file_exists()
    assert index.all_entries() == []
    index.sanity_check()
    index.flush()
    index.close()
    index.reset()
    index.truncate_to(0)
    assert not index.file_exists()
    index.append(AbortedTxn(0, 0, 10, 11))
    assert index.file_exists()
    assert index.path.stat().st_size == 34


def test_positional_write_and_read(tmp_path: Path, index: TransactionIndex) -> None:
    txns = [
        AbortedTxn(0, 0, 10, 11),
        AbortedTxn(1, 5, 15, 13),
        AbortedTxn(2, 18, 35, 25),
        AbortedTxn(3, 32, 50, 40),
    ]
    for txn in txns:
        index.append(txn)
    assert index.all_entries() == txns
    assert index.path.read_bytes() == b"".join(t.to_bytes() for t in txns)
    reopened = TransactionIndex(index.path, 0)
    assert reopened.all_entries() == txns
    reopened.sanity_check()


def test_collect_aborted_txns(index: TransactionIndex) -> None:
    txns = [
        AbortedTxn(0, 0, 10, 11),
        AbortedTxn(1, 5, 15, 13),
        AbortedTxn(2, 18, 35, 25),
        AbortedTxn(3, 32, 50, 40),
    ]
    for txn in txns:
        index.append(txn)
    # include iff lastOffset >= fetch and firstOffset < upper; stop once LSO >= upper
    assert index.collect_aborted_txns(0, 32) == (txns[:3], True)
    assert index.collect_aborted_txns(0, 32).aborted_transactions == txns[:3]
    assert index.collect_aborted_txns(0, 33) == (txns, True)
    assert index.collect_aborted_txns(0, 11) == (txns[:1], True)
    assert index.collect_aborted_txns(0, 100) == (txns, False)
    assert index.collect_aborted_txns(51, 100) == ([], False)
    aborted, complete = index.collect_aborted_txns(16, 23)
    assert aborted == [txns[2]] and complete


def test_append_must_increase(index: TransactionIndex) -> None:
    index.append(AbortedTxn(0, 0, 10, 11))
    with pytest.raises(InvalidOffsetError, match="increase sequentially"):
        index.append(AbortedTxn(1, 5, 10, 13))
    with pytest.raises(InvalidOffsetError):
        index.append(AbortedTxn(1, 5, 9, 13))
    assert index.entries == 1


def test_truncate_to(index: TransactionIndex) -> None:
    txns = [
        AbortedTxn(0, 0, 10, 2),
        AbortedTxn(1, 5, 15, 16),
        AbortedTxn(2, 18, 35, 25),
        AbortedTxn(3, 32, 50, 40),
    ]
    for txn in txns:
        index.append(txn)
    index.truncate_to(51)
    assert index.all_entries() == txns
    index.truncate_to(50)
    assert index.all_entries() == txns[:3]
    assert index.path.stat().st_size == 3 * 34
    index.truncate_to(16)
    assert index.all_entries() == txns[:2]
    assert index.last_offset == 15
    with pytest.raises(InvalidOffsetError):
        index.append(AbortedTxn(5, 12, 15, 16))
    index.append(AbortedTxn(5, 12, 16, 17))
    assert TransactionIndex(index.path, 0).all_entries() == [*txns[:2], AbortedTxn(5, 12, 16, 17)]
    index.reset()
    assert index.file_exists() and index.path.stat().st_size == 0
    assert index.all_entries() == []


def test_sanity_check(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000020.txnindex", 20)
    index.append(AbortedTxn(0, 0, 10, 11))  # lastOffset below the segment base
    with pytest.raises(CorruptIndexError, match="less than start offset 20"):
        TransactionIndex(index.path, 20).sanity_check()
    ok = TransactionIndex(tmp_path / "00000000000000000010.txnindex", 10)
    ok.append(AbortedTxn(0, 0, 10, 11))  # first offset may be in an earlier segment
    ok.sanity_check()


def test_version_quirk_reads_only_the_first_byte(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    good = AbortedTxn(7, 1, 2, 3)
    # int16 version 5 has first byte 0 -> accepted (reads as version 0)
    path.write_bytes(struct.pack(">hqqqq", 5, 7, 1, 2, 3))
    assert TransactionIndex(path, 0).all_entries() == [good]
    # int16 version -1 -> first byte 0xFF is negative as a signed byte -> accepted
    path.write_bytes(struct.pack(">hqqqq", -1, 7, 1, 2, 3))
    assert TransactionIndex(path, 0).all_entries()[0].version == -1
    # int16 version 256 -> first byte 1 -> rejected
    path.write_bytes(good.to_bytes() + struct.pack(">hqqqq", 256, 7, 1, 5, 3))
    with pytest.raises(CorruptIndexError, match="Unexpected aborted transaction version 1"):
        TransactionIndex(path, 0).all_entries()
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, 0).sanity_check()


def test_ragged_tail_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    txn = AbortedTxn(7, 1, 2, 3)
    path.write_bytes(txn.to_bytes() + b"\x00" * 20)
    assert TransactionIndex(path, 0).all_entries() == [txn]


def test_rename_and_delete(tmp_path: Path, index: TransactionIndex) -> None:
    assert not index.delete()
    index.append(AbortedTxn(0, 0, 10, 11))
    target = tmp_path / "00000000000000000000.txnindex.swap"
    index.rename_to(target)
    assert index.path == target and target.exists()
    assert index.delete()
    assert not target.exists()
