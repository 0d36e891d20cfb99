"""Control records: worked example C (§1.7), key/value parsing rules (§1.5)."""

from __future__ import annotations

import struct

import pytest

from kafkalog_core.errors import CorruptRecordError, InvalidRecordError
from kafkalog_core.record.batch import is_valid, read_header
from kafkalog_core.record.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
    parse_control_record_key,
    parse_end_txn_marker_value,
)
from kafkalog_core.record.encoder import Record, build_batch

EXAMPLE_C = bytes.fromhex(
    "0000000000000007000000420000000002be37f0a700300000000000000000000003e800000000000003e80000"
    "0000000000050000ffffffff000000012000000008000000010c00000000000000"
)


def test_example_c_commit_marker():
    raw = build_end_txn_marker_batch(
        base_offset=7,
        producer_id=5,
        producer_epoch=0,
        coordinator_epoch=0,
        control_type=ControlRecordType.COMMIT,
        timestamp=1000,
        partition_leader_epoch=0,
    )
    assert raw == EXAMPLE_C
    assert len(raw) == 78
    assert struct.unpack_from(">I", raw, 17)[0] == 3191337127
    h = read_header(raw)
    assert is_valid(raw, h)
    assert h.is_control and h.is_transactional and h.attributes == 0x30
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (5, 0, -1)


def test_marker_defaults_and_abort():
    raw = build_end_txn_marker_batch(
        base_offset=0,
        producer_id=9,
        producer_epoch=4,
        coordinator_epoch=12,
        control_type=ControlRecordType.ABORT,
        timestamp=55,
    )
    h = read_header(raw)
    assert len(raw) == 78 and h.partition_leader_epoch == -1
    # key and value sit at the end of the one record: key len 4, key, value len 6, value, 0 headers
    assert raw[-12:-8] == b"\x00\x00\x00\x00"  # version 0, type ABORT
    assert raw[-7:-1] == struct.pack(">hi", 0, 12)


def test_marker_type_must_be_commit_or_abort():
    with pytest.raises(InvalidRecordError, match="ABORT or COMMIT"):
        build_end_txn_marker_batch(
            base_offset=0,
            producer_id=1,
            producer_epoch=0,
            coordinator_epoch=0,
            control_type=ControlRecordType.LEADER_CHANGE,
            timestamp=0,
        )


def test_control_types_and_keys():
    assert [t.value for t in ControlRecordType] == [-1, 0, 1, 2, 3, 4, 5, 6]
    for t in ControlRecordType:
        if t is ControlRecordType.UNKNOWN:
            with pytest.raises(InvalidRecordError):
                t.key_bytes()
        else:
            assert parse_control_record_key(t.key_bytes()) is t


def test_parse_control_record_key_rules():
    assert parse_control_record_key(struct.pack(">hh", 0, 1)) is ControlRecordType.COMMIT
    assert parse_control_record_key(struct.pack(">hh", 0, 77)) is ControlRecordType.UNKNOWN
    assert parse_control_record_key(struct.pack(">hh", 0, -3)) is ControlRecordType.UNKNOWN
    # a newer version is read as version 0; extra bytes are ignored
    assert parse_control_record_key(struct.pack(">hh", 3, 0) + b"xx") is ControlRecordType.ABORT
    with pytest.raises(CorruptRecordError, match="negative version -1"):
        parse_control_record_key(struct.pack(">hh", -1, 0))
    with pytest.raises(CorruptRecordError, match="at least 4 bytes"):
        parse_control_record_key(b"\x00\x00\x00")
    with pytest.raises(CorruptRecordError, match="null key"):
        parse_control_record_key(None)


def test_parse_end_txn_marker_value_rules():
    assert parse_end_txn_marker_value(struct.pack(">hi", 0, 99)) == 99
    assert parse_end_txn_marker_value(memoryview(struct.pack(">hi", 2, -5) + b"extra")) == -5
    with pytest.raises(CorruptRecordError, match="negative version"):
        parse_end_txn_marker_value(struct.pack(">hi", -2, 0))
    with pytest.raises(CorruptRecordError, match="at least 6 bytes"):
        parse_end_txn_marker_value(b"\x00\x00\x00\x00\x01")


def test_end_transaction_marker_round_trip():
    marker = EndTransactionMarker(ControlRecordType.COMMIT, 17)
    assert EndTransactionMarker.from_record(marker.key_bytes(), marker.value_bytes()) == marker
    with pytest.raises(InvalidRecordError):
        EndTransactionMarker.from_record(
            ControlRecordType.SNAPSHOT_HEADER.key_bytes(), marker.value_bytes()
        )


def test_marker_equals_generic_control_batch():
    marker = EndTransactionMarker(ControlRecordType.ABORT, 3)
    generic = build_batch(
        [Record(0, 1234, marker.key_bytes(), marker.value_bytes())],
        base_offset=11,
        is_transactional=True,
        is_control=True,
        producer_id=8,
        producer_epoch=1,
    )
    assert generic == build_end_txn_marker_batch(
        base_offset=11,
        producer_id=8,
        producer_epoch=1,
        coordinator_epoch=3,
        control_type=ControlRecordType.ABORT,
        timestamp=1234,
    )
