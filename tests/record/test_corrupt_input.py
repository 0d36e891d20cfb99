"""Malformed input gives exactly one error type, CorruptRecordError, naming where and what.

Never an IndexError, struct.error, endless loop or silently skipped record (§13 case 6).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog_core.errors import CorruptRecordError, KafkaLogError
from kafkalog_core.record.batch import (
    RECORD_BATCH_OVERHEAD,
    Compression,
    make_attributes,
    read_header,
)
from kafkalog_core.record.compression import compress
from kafkalog_core.record.decoder import RecordBatch, decode_records, read_batches
from kafkalog_core.record.varint import encode_varint
from tests.record.test_decoder import EXAMPLE_B, EXAMPLE_C, make_batch, raw_record

THREE = b"".join(raw_record(i, i, key=b"key%d" % i, value=b"value%d" % i) for i in range(3))


def _decode_unverified(data: bytes) -> None:
    decode_records(data, verify=False, include_control=True)


def test_corrupt_length_field() -> None:
    """§13 case 6: length field of a valid 3-record batch set to 10."""
    data = bytearray(make_batch(THREE, 3))
    struct.pack_into(">i", data, 8, 10)
    header = read_header(bytes(data), 0)
    batch = RecordBatch(bytes(data), header)
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match="smaller than the minimum"):
        batch.ensure_valid()
    with pytest.raises(CorruptRecordError, match="smaller than the v2 batch overhead"):
        batch.records()
    assert header.size == 22
    with pytest.raises(CorruptRecordError, match="smaller than the minimum record overhead"):
        list(read_batches(bytes(data)))


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize(
    ("declared", "problem"), [(4, "premature EOF"), (2, "records still remaining")]
)
def test_record_count_mismatch(codec: Compression, declared: int, problem: str) -> None:
    """§13 case 6: declared count does not match the records, compressed or not."""
    area = THREE if codec is Compression.NONE else compress(codec, THREE)
    data = make_batch(area, declared, attributes=make_attributes(compression=codec))
    with pytest.raises(CorruptRecordError, match=problem) as caught:
        decode_records(data)
    assert "position 0" in str(caught.value)


def test_huge_record_count_fails_fast() -> None:
    with pytest.raises(CorruptRecordError, match="premature EOF"):
        decode_records(make_batch(THREE, 2**31 - 1))
    with pytest.raises(CorruptRecordError, match="negative records count"):
        decode_records(make_batch(THREE, -1))


def _record_with(body_fields: bytes, declared: int | None = None) -> bytes:
    length = len(body_fields) if declared is None else declared
    return encode_varint(length) + body_fields


def test_record_length_mismatch() -> None:
    fields = (
        b"\x00"
        + encode_varint(0)
        + encode_varint(0)
        + encode_varint(1)
        + b"k"
        + encode_varint(1)
        + b"v"
    )
    fields += encode_varint(0)
    # declared one byte longer than the fields, with a spare byte so the walk stays in bounds
    record = _record_with(fields + b"\x00", declared=len(fields) + 1)
    with pytest.raises(CorruptRecordError, match="record length mismatch"):
        decode_records(make_batch(record, 1))


def test_varint_too_long() -> None:
    record = _record_with(b"\x00" + b"\xff" * 11 + b"\x00" * 8)
    with pytest.raises(CorruptRecordError, match="too long"):
        decode_records(make_batch(record, 1))
    with pytest.raises(CorruptRecordError, match="too long"):
        decode_records(make_batch(b"\xff" * 6 + b"\x00" * 10, 1))


@pytest.mark.parametrize(
    ("count", "problem"),
    [(-3, "negative headers count"), (50, "headers count larger than the remaining")],
)
def test_bad_headers_count(count: int, problem: str) -> None:
    fields = (
        b"\x00\x00\x00" + encode_varint(-1) + encode_varint(-1) + encode_varint(count) + b"\x00" * 4
    )
    with pytest.raises(CorruptRecordError, match=problem):
        decode_records(make_batch(_record_with(fields), 1))


def test_bad_key_lengths() -> None:
    fields = b"\x00\x00\x00" + encode_varint(-5) + encode_varint(-1) + encode_varint(0)
    with pytest.raises(CorruptRecordError, match="key length"):
        decode_records(make_batch(_record_with(fields), 1))
    fields = b"\x00\x00\x00" + encode_varint(40) + b"abc" + encode_varint(-1) + encode_varint(0)
    with pytest.raises(CorruptRecordError, match="key runs past"):
        decode_records(make_batch(_record_with(fields), 1))


def test_negative_record_length() -> None:
    with pytest.raises(CorruptRecordError, match="negative record length"):
        decode_records(make_batch(encode_varint(-3) + b"\x00" * 10, 1))


def test_header_key_must_be_utf8() -> None:
    fields = b"\x00\x00\x00" + encode_varint(-1) + encode_varint(-1) + encode_varint(1)
    fields += encode_varint(2) + b"\xff\xfe" + encode_varint(-1)
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        decode_records(make_batch(_record_with(fields), 1))


def test_truncated_batch() -> None:
    data = make_batch(THREE, 3)
    # a reader of a live log stops silently at a partial tail ...
    assert decode_records(data[:-1]).num_rows == 0
    # ... but a view over a batch that does not fit its buffer refuses to decode
    header = next(read_batches(data)).header
    with pytest.raises(CorruptRecordError, match="truncated"):
        RecordBatch(data[:-1], header).records()


def test_bad_crc() -> None:
    data = bytearray(make_batch(THREE, 3))
    data[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_records(bytes(data))


def test_corrupt_compressed_stream() -> None:
    area = bytearray(compress(Compression.GZIP, THREE))
    area[12:20] = b"\x00" * 8
    with pytest.raises(CorruptRecordError, match="gzip"):
        decode_records(make_batch(bytes(area), 3, attributes=Compression.GZIP))


def test_error_names_the_culprit_batch_in_a_group() -> None:
    good = make_batch(THREE, 3)
    bad = make_batch(THREE, 4, base_offset=3)
    with pytest.raises(CorruptRecordError, match=rf"position {len(good)} \(base offset 3\)"):
        decode_records(good + bad + good)


def test_size_below_v2_overhead_in_a_log() -> None:
    data = bytearray(EXAMPLE_B)
    struct.pack_into(">i", data, 8, 30)  # 42-byte "batch" with magic 2
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(data) + b"\x00" * 100)


# ---------------------------------------------------------------------------------------------
# fuzzing: mutate valid batches, expect success or CorruptRecordError, nothing else
# ---------------------------------------------------------------------------------------------

_MIXED = b"".join(
    raw_record(
        i,
        i * 3,
        key=None if i % 3 == 0 else b"k" * i,
        value=b"v" * (i * 5),
        headers=[("h", b"x")] * (i % 3),
    )
    for i in range(12)
)
_SEEDS = [
    EXAMPLE_B,
    EXAMPLE_C,
    make_batch(THREE, 3),
    make_batch(_MIXED, 12),
    make_batch(compress(Compression.GZIP, _MIXED), 12, attributes=1),
    make_batch(compress(Compression.ZSTD, _MIXED), 12, attributes=4),
    make_batch(compress(Compression.LZ4, _MIXED), 12, attributes=3),
    make_batch(compress(Compression.SNAPPY, _MIXED), 12, attributes=2),
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.sampled_from(_SEEDS),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.integers(0, 10_000),
    repeat=st.booleans(),
)
def test_fuzzed_batches_fail_cleanly(
    seed: bytes, edits: list[tuple[int, int]], cut: int, repeat: bool
) -> None:
    data = bytearray(seed * 2 if repeat else seed)
    for at, byte in edits:
        data[at % len(data)] = byte
    if cut % 4 == 0:
        data = data[: cut % (len(data) + 1)]
    for verify in (False, True):
        try:
            table = decode_records(bytes(data), verify=verify, include_control=True)
            table.validate(full=True)
            for batch in read_batches(bytes(data), verify=verify):
                batch.control_record()
        except CorruptRecordError:
            pass


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=300), st.integers(-5, 40))
def test_random_records_area_fails_cleanly(area: bytes, count: int) -> None:
    data = make_batch(area, count)
    try:
        decode_records(data, verify=True).validate(full=True)
    except KafkaLogError as error:
        assert isinstance(error, CorruptRecordError)


def test_records_area_offset_is_v2_overhead() -> None:
    assert RECORD_BATCH_OVERHEAD == 61
