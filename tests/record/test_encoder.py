"""The v2 encoder: worked examples A/B (§1.7), header fields, splitting, errors, scalar == vectorized."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from crc32c import crc32c

from kafkalog_core.errors import ConfigError, InvalidRecordError, RecordTooLargeError
from kafkalog_core.record.batch import (
    Compression,
    TimestampType,
    is_valid,
    iter_batch_headers,
    read_header,
)
from kafkalog_core.record.encoder import (
    BatchOptions,
    EncodedBatches,
    Record,
    build_batch,
    encode_records,
)

EXAMPLE_A = bytes.fromhex(
    "00000000000000000000003affffffff02716a618900000000000000000000000003e800000000000003e8ff"
    "ffffffffffffffffffffffffff0000000110000000026b027600"
)
EXAMPLE_B = bytes.fromhex(
    "00000000000000000000004dffffffff02f6ee7ff900000000000100000000000003e800000000000003e9ff"
    "ffffffffffffffffffffffffff000000021c000000066b65790a76616c75650018000202010476320202680278"
)
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def example_b_table() -> pa.Table:
    return pa.table(
        {
            "key": pa.array([b"key", None], pa.binary()),
            "value": pa.array([b"value", b"v2"], pa.binary()),
            "timestamp": pa.array([1000, 1001], pa.int64()),
            "headers": pa.array([[], [{"key": "h", "value": b"x"}]], HEADERS_TYPE),
        }
    )


def scalar_batches(table: pa.Table, encoded: EncodedBatches, **fields) -> bytes:
    """The same batches built record by record with build_batch (the reference path)."""
    rows = table.to_pylist()
    out = []
    for b in range(len(encoded)):
        first = int(encoded.base_offsets[b]) - encoded.start_offset
        count = int(encoded.record_counts[b])
        records = []
        for i in range(count):
            row = rows[first + i]
            headers = row.get("headers") or []
            if isinstance(headers, dict):
                headers = list(headers.items())
            elif headers and isinstance(headers[0], dict):
                headers = [(h["key"], h["value"]) for h in headers]
            ts = row.get("timestamp", -1)
            records.append(
                Record(i, -1 if ts is None else ts, row.get("key"), row["value"], headers)
            )
        out.append(build_batch(records, base_offset=int(encoded.base_offsets[b]), **fields))
    return b"".join(out)


# --- worked examples -------------------------------------------------------------------------


def test_example_a_vectorized_and_scalar():
    encoded = encode_records(
        {
            "key": pa.array([b"k"]),
            "value": pa.array([b"v"]),
            "timestamp": pa.array([1000], pa.int64()),
        }
    )
    assert bytes(encoded.buffer) == EXAMPLE_A
    assert len(EXAMPLE_A) == 70
    assert struct.unpack_from(">I", EXAMPLE_A, 17)[0] == 1902797193
    assert crc32c(EXAMPLE_A[21:]) == 1902797193
    assert build_batch([Record(0, 1000, b"k", b"v")], base_offset=0) == EXAMPLE_A


def test_example_b_vectorized_and_scalar():
    encoded = encode_records(example_b_table())
    assert bytes(encoded.buffer) == EXAMPLE_B
    assert struct.unpack_from(">I", EXAMPLE_B, 17)[0] == 4142825465
    scalar = build_batch(
        [Record(0, 1000, b"key", b"value"), Record(1, 1001, None, b"v2", [("h", b"x")])],
        base_offset=0,
    )
    assert scalar == EXAMPLE_B


def test_example_b_with_map_headers_and_string_columns():
    table = pa.table(
        {
            "key": pa.array(["key", None], pa.string()),
            "value": pa.array(["value", "v2"], pa.large_string()),
            "timestamp": pa.array([1000, 1001], pa.timestamp("ms")),
            "headers": pa.array([[], [("h", b"x")]], pa.map_(pa.string(), pa.binary())),
        }
    )
    assert bytes(encode_records(table).buffer) == EXAMPLE_B


def test_encoded_batches_api():
    encoded = encode_records(example_b_table(), base_offset=100)
    assert len(encoded) == 1
    assert encoded.total_bytes == 89
    assert encoded.next_offset == 102
    assert list(encoded.positions) == [0]
    assert list(encoded.sizes) == [89]
    assert list(encoded.base_offsets) == [100]
    assert list(encoded.last_offsets) == [101]
    assert list(encoded.max_timestamps) == [1001]
    assert list(encoded.record_counts) == [2]
    assert bytes(encoded.batch(0)) == bytes(encoded.buffer)
    header = read_header(encoded.buffer, 0)
    assert header.base_offset == 100 and is_valid(encoded.buffer, header)


def test_empty_input():
    encoded = encode_records({"value": pa.array([], pa.binary())}, base_offset=42)
    assert len(encoded) == 0
    assert encoded.total_bytes == 0
    assert encoded.next_offset == 42


# --- header fields ---------------------------------------------------------------------------


def test_every_header_field_from_options():
    n = 10
    table = pa.table(
        {
            "value": pa.array([b"v%d" % i for i in range(n)]),
            "timestamp": pa.array(np.arange(n, dtype=np.int64) + 5000),
        }
    )
    options = BatchOptions(
        partition_leader_epoch=7,
        producer_id=12345,
        producer_epoch=3,
        base_sequence=2**31 - 5,
        is_transactional=True,
        max_batch_bytes=61 + 4 * 9,  # 4 records of 9 bytes per batch
    )
    encoded = encode_records(table, base_offset=1000, options=options)
    headers = list(iter_batch_headers(encoded.buffer, verify=True))
    assert [h.records_count for h in headers] == [4, 4, 2]
    assert [h.base_offset for h in headers] == [1000, 1004, 1008]
    # the sequence continues across batches and wraps past Int.MAX
    assert [h.base_sequence for h in headers] == [2**31 - 5, 2**31 - 1, 3]
    for h in headers:
        assert h.partition_leader_epoch == 7
        assert (h.producer_id, h.producer_epoch) == (12345, 3)
        assert h.is_transactional and not h.is_control
        assert h.timestamp_type is TimestampType.CREATE_TIME
        assert h.size <= options.max_batch_bytes
    scalar = b"".join(
        build_batch(
            [
                Record(
                    i, 5000 + h.base_offset - 1000 + i, None, b"v%d" % (h.base_offset - 1000 + i)
                )
                for i in range(h.records_count)
            ],
            base_offset=h.base_offset,
            partition_leader_epoch=7,
            producer_id=12345,
            producer_epoch=3,
            base_sequence=h.base_sequence,
            is_transactional=True,
        )
        for h in headers
    )
    assert bytes(encoded.buffer) == scalar


def test_defaults_are_java_producer_defaults():
    encoded = encode_records({"value": pa.array([b"x"])})
    h = read_header(encoded.buffer)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, -1)
    assert h.partition_leader_epoch == -1
    assert h.attributes == 0
    # no timestamp column = NO_TIMESTAMP
    assert (h.base_timestamp, h.max_timestamp) == (-1, -1)


def test_max_timestamp_semantics():
    table = {"value": pa.array([b"a", b"b", b"c"]), "timestamp": pa.array([-1, 50, 20], pa.int64())}
    encoded = encode_records(table)
    h = read_header(encoded.buffer)
    assert h.base_timestamp == -1 and h.max_timestamp == 50
    assert bytes(encoded.buffer) == scalar_batches(pa.table(table), encoded)
    all_missing = encode_records({"value": pa.array([b"a", b"b"]), "timestamp": pa.array([-1, -1])})
    assert read_header(all_missing.buffer).max_timestamp == -1


def test_log_append_time_keeps_producer_time_and_stamps_max():
    table = {"value": pa.array([b"a", b"b"]), "timestamp": pa.array([1000, 900], pa.int64())}
    options = BatchOptions(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time_ms=123456)
    encoded = encode_records(table, options=options)
    h = read_header(encoded.buffer)
    assert h.timestamp_type is TimestampType.LOG_APPEND_TIME and h.attributes == 0x08
    assert h.base_timestamp == 1000 and h.max_timestamp == 123456
    assert list(encoded.max_timestamps) == [123456]
    assert bytes(encoded.buffer) == scalar_batches(
        pa.table(table), encoded, timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=123456
    )


def test_log_append_time_needs_the_time():
    with pytest.raises(ConfigError, match="log_append_time_ms"):
        BatchOptions(timestamp_type=TimestampType.LOG_APPEND_TIME)


def test_option_validation():
    with pytest.raises(ConfigError, match="producer_id"):
        BatchOptions(is_transactional=True)
    with pytest.raises(ConfigError, match="base_sequence"):
        BatchOptions(producer_id=1, producer_epoch=0)
    with pytest.raises(ConfigError, match="max_batch_bytes"):
        BatchOptions(max_batch_bytes=61)


def test_arrow_timestamp_units_convert_to_ms():
    for unit, raw in (("s", 2), ("ms", 2000), ("us", 2_000_999), ("ns", 2_000_999_999)):
        encoded = encode_records(
            {
                "value": pa.array([b"x", b"y"]),
                "timestamp": pa.array([raw, None], pa.timestamp(unit)),
            }
        )
        h = read_header(encoded.buffer)
        assert h.base_timestamp == 2000, unit
        assert h.max_timestamp == 2000, unit


# --- splitting -------------------------------------------------------------------------------


def test_split_respects_max_batch_bytes_and_offsets_contiguous():
    rng = np.random.default_rng(7)
    n = 3000
    sizes = rng.integers(0, 300, n)
    values = [bytes(rng.integers(0, 256, s, dtype=np.uint8)) for s in sizes]
    table = pa.table(
        {"value": pa.array(values), "timestamp": pa.array(np.cumsum(rng.integers(0, 5000, n)))}
    )
    options = BatchOptions(max_batch_bytes=4096)
    encoded = encode_records(table, base_offset=5, options=options)
    assert int(encoded.sizes.max()) <= 4096
    assert encoded.next_offset == 5 + n
    assert int(encoded.record_counts.sum()) == n
    assert list(encoded.base_offsets[1:]) == list(encoded.last_offsets[:-1] + 1)
    # batches are reasonably full: each one could not take the whole next batch's first record
    # plus a generous 1% slack
    fills = encoded.sizes[:-1] + 300 + 21
    assert np.all(fills > 4096 * 0.99)
    assert bytes(encoded.buffer) == scalar_batches(table, encoded)


def test_single_oversize_record_gets_its_own_batch():
    values = [b"a", b"x" * 5000, b"b", b"c"]
    encoded = encode_records(
        {"value": pa.array(values)}, options=BatchOptions(max_batch_bytes=1000)
    )
    assert list(encoded.record_counts) == [1, 1, 2]
    assert encoded.sizes[1] > 1000


def test_record_too_large():
    with pytest.raises(RecordTooLargeError, match=r"offset 11 .*max_message_bytes=2000"):
        encode_records(
            {"value": pa.array([b"a", b"x" * 5000])},
            base_offset=10,
            options=BatchOptions(max_batch_bytes=1000, max_message_bytes=2000),
        )


# --- errors ----------------------------------------------------------------------------------


def test_negative_timestamp_is_refused_with_offset():
    with pytest.raises(InvalidRecordError, match=r"record 1 \(offset 101\): timestamp -2"):
        encode_records(
            {"value": pa.array([b"a", b"b"]), "timestamp": pa.array([5, -2], pa.int64())},
            base_offset=100,
        )
    with pytest.raises(InvalidRecordError, match="timestamp -5"):
        build_batch([Record(0, -5, None, b"x")], base_offset=0)


def test_null_header_key_is_refused():
    headers = pa.array(
        [
            [{"key": "a", "value": b"1"}],
            [{"key": "b", "value": None}, {"key": None, "value": b"2"}],
        ],
        HEADERS_TYPE,
    )
    with pytest.raises(InvalidRecordError, match=r"record 1 \(offset 1\): header 1 has a null key"):
        encode_records({"value": pa.array([b"a", b"b"]), "headers": headers})
    with pytest.raises(InvalidRecordError, match="null"):
        build_batch([Record(0, 1, None, b"x", [(None, b"v")])], base_offset=0)


def test_missing_value_column_and_bad_types():
    with pytest.raises(InvalidRecordError, match="'value'"):
        encode_records({"key": pa.array([b"a"])})
    with pytest.raises(InvalidRecordError, match="'key'"):
        encode_records({"key": pa.array([1]), "value": pa.array([b"a"])})


# --- scalar build_batch features used by the cleaner -----------------------------------------


def test_build_batch_gaps_negative_deltas_and_overrides():
    records = [
        Record(2, 5000, b"k1", None),
        Record(5, 4000, None, b"v", [("h1", None), ("h2", b"")]),
    ]
    raw = build_batch(
        records,
        base_offset=100,
        last_offset_delta=9,
        producer_id=3,
        producer_epoch=1,
        base_sequence=17,
        partition_leader_epoch=4,
    )
    h = read_header(raw)
    assert is_valid(raw, h)
    assert h.last_offset_delta == 9 and h.last_offset == 109
    assert h.base_timestamp == 5000 and h.max_timestamp == 5000
    assert h.records_count == 2
    # second record: timestampDelta -1000 -> zig-zag 1999 -> cf 0f
    assert bytes.fromhex("cf0f0a") in raw


def test_build_batch_delete_horizon():
    raw = build_batch([Record(0, 1000, b"k", None)], base_offset=0, delete_horizon_ms=90000)
    h = read_header(raw)
    assert h.has_delete_horizon and h.delete_horizon_ms == 90000 and h.attributes == 0x40
    assert h.max_timestamp == 1000
    # timestampDelta = 1000 - 90000 = -89000 (varlong)
    from kafkalog_core.record.varint import encode_varint

    assert encode_varint(-89000) in raw


def test_build_batch_empty_header_like_the_cleaner():
    raw = build_batch(
        [],
        base_offset=50,
        last_offset_delta=4,
        max_timestamp=7777,
        producer_id=9,
        producer_epoch=2,
        base_sequence=40,
        is_transactional=True,
        compression=Compression.GZIP,  # ignored: writeEmptyHeader writes no codec
    )
    assert len(raw) == 61
    h = read_header(raw)
    assert is_valid(raw, h)
    assert h.records_count == 0 and h.base_timestamp == -1 and h.max_timestamp == 7777
    assert h.compression is Compression.NONE and h.is_transactional
    assert h.last_offset == 54


def test_build_batch_refuses_non_increasing_offset_deltas():
    with pytest.raises(InvalidRecordError, match="offset delta"):
        build_batch([Record(3, 1, None, b"a"), Record(3, 1, None, b"b")], base_offset=0)


# --- vectorized == scalar --------------------------------------------------------------------


@pytest.mark.parametrize("with_headers", [False, True])
def test_vectorized_equals_scalar(with_headers):
    rng = np.random.default_rng(3)
    n = 500
    keys = [
        None
        if rng.random() < 0.2
        else bytes(rng.integers(0, 256, rng.integers(0, 70), dtype=np.uint8))
        for _ in range(n)
    ]
    values = [
        None
        if rng.random() < 0.1
        else bytes(rng.integers(0, 256, rng.integers(0, 9000), dtype=np.uint8))
        for _ in range(n)
    ]
    timestamps = rng.integers(-1, 2**41, n)
    timestamps[rng.random(n) < 0.2] = -1
    columns = {
        "key": pa.array(keys, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "timestamp": pa.array(timestamps, pa.int64()),
    }
    if with_headers:
        headers = []
        for _ in range(n):
            count = int(rng.integers(0, 4)) if rng.random() < 0.7 else 0
            headers.append(
                None
                if rng.random() < 0.1
                else [
                    {
                        "key": f"h{j}" * int(rng.integers(1, 30)),
                        "value": None if rng.random() < 0.3 else b"x" * int(rng.integers(0, 200)),
                    }
                    for j in range(count)
                ]
            )
        columns["headers"] = pa.array(headers, HEADERS_TYPE)
    table = pa.table(columns)
    encoded = encode_records(table, base_offset=77, options=BatchOptions(max_batch_bytes=50000))
    assert len(encoded) > 5
    assert bytes(encoded.buffer) == scalar_batches(table, encoded)
    for h in iter_batch_headers(encoded.buffer, verify=True):
        assert h.size <= 50000 or h.records_count == 1


def test_chunked_table_and_sliced_arrays():
    table = pa.concat_tables([example_b_table().slice(0, 1), example_b_table().slice(1, 1)])
    assert table.column("value").num_chunks == 2
    assert bytes(encode_records(table).buffer) == EXAMPLE_B
    big = pa.table(
        {"value": pa.array([b"zz", b"value", b"v2"]), "key": pa.array([b"q", b"key", None])}
    ).slice(1)
    encoded = encode_records(big)
    assert bytes(encoded.buffer) == scalar_batches(big, encoded)


def test_vectorizedvarint_words_and_sizes_match_scalar():
    from kafkalog_core.record.encoder.varints import varint_size_array, varint_words
    from kafkalog_core.record.varint import encode_varint

    values = [0, 1, -1, 63, -64, 64, -65, 8191, -8192, 8192, 2**20, 2**27, 2**31 - 1, -(2**31)]
    values += [2**34, -(2**40), 2**48 - 1, 2**55 - 1, -(2**55)]
    array = np.array(values, dtype=np.int64)
    sizes = varint_size_array(array)
    assert sizes.tolist() == [len(encode_varint(v)) for v in values]
    for width in range(1, 9):
        fits = [v for v in values if len(encode_varint(v)) <= width]
        words = varint_words(np.array(fits, dtype=np.int64), width)
        for v, w in zip(fits, words.tolist(), strict=True):
            encoded = encode_varint(v)
            assert int(w).to_bytes(8, "little")[: len(encoded)] == encoded, (v, width)
            assert int(w) >> (8 * len(encoded)) == 0, (v, width)
            # the same value on every row takes the one-word path
            (same,) = np.broadcast_to(varint_words(np.array([v, v], dtype=np.int64), width), (1,))
            assert int(same) == int(w), (v, width)


def test_fast_layout_equals_general_layout():
    """No headers column (4-input join) vs all-empty headers (general join with holes)."""
    rng = np.random.default_rng(9)
    n = 3000
    keys = [
        None if i % 5 == 0 else bytes(rng.integers(0, 256, i % 30, dtype=np.uint8))
        for i in range(n)
    ]
    values = [
        None if i % 11 == 0 else bytes(rng.integers(0, 256, i % 500, dtype=np.uint8))
        for i in range(n)
    ]
    timestamps = 1_700_000_000_000 + np.cumsum(rng.integers(0, 100, n))
    plain = pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "timestamp": timestamps,
        }
    )
    with_empty_headers = plain.append_column("headers", pa.array([[]] * n, HEADERS_TYPE))
    options = BatchOptions(max_batch_bytes=8000)
    fast = encode_records(plain, base_offset=3, options=options)
    general = encode_records(with_empty_headers, base_offset=3, options=options)
    assert len(fast) > 10
    assert bytes(fast.buffer) == bytes(general.buffer)
    assert bytes(fast.buffer) == scalar_batches(plain, fast)


@pytest.mark.parametrize(
    "key_type,value_type",
    [
        (pa.string(), pa.string()),
        (pa.large_string(), pa.large_binary()),
        (pa.binary_view(), pa.string_view()),
        (pa.large_binary(), pa.binary()),
    ],
)
def test_input_types_give_the_same_bytes(key_type, value_type):
    keys = ["k1", None, "", "key-4"] * 50
    values = ["v", "", None, "value" * 40] * 50
    reference = encode_records(
        {
            "key": pa.array([None if k is None else k.encode() for k in keys], pa.binary()),
            "value": pa.array([None if v is None else v.encode() for v in values], pa.binary()),
            "timestamp": pa.array(range(200), pa.int64()),
        },
        options=BatchOptions(max_batch_bytes=2000),
    )
    as_type = encode_records(
        {
            "key": pa.array(keys, pa.string()).cast(key_type),
            "value": pa.array(values, pa.string()).cast(value_type),
            "timestamp": pa.array(range(200), pa.int64()),
        },
        options=BatchOptions(max_batch_bytes=2000),
    )
    assert len(reference) > 3
    assert bytes(as_type.buffer) == bytes(reference.buffer)


def test_uniform_records_split_like_the_walk():
    """Records of one estimated size take a shortcut in the split; it must match the walk."""
    n = 2000
    values = [b"v" * 50] * n
    uniform = encode_records(
        {"value": pa.array(values), "timestamp": pa.array([7] * n, pa.int64())},
        options=BatchOptions(max_batch_bytes=1500),
    )
    # a larger last record makes every record before it go through the per-batch walk
    walked = encode_records(
        {"value": pa.array([*values, b"x" * 60]), "timestamp": pa.array([7] * (n + 1), pa.int64())},
        options=BatchOptions(max_batch_bytes=1500),
    )
    assert len(uniform) > 10
    assert list(uniform.record_counts[:-1]) == list(walked.record_counts[: len(uniform) - 1])
    assert int(uniform.sizes.max()) <= 1500
