"""Cross-check against kafka-python 3.0.12, an independent implementation of the v2 format.

Everything we encode must decode with kafka-python's DefaultRecordBatch (CRC valid) to the same
offsets, timestamps, keys, values and headers; uncompressed batches must equal its
DefaultRecordBatchBuilder's bytes except the partitionLeaderEpoch (kafka-python writes 0).

kafka-python decodes snappy only through python-snappy, which is not installed; the tests give
its (independent) xerial-frame reader cramjam's raw snappy block decoder instead.
"""

from __future__ import annotations

import types

import cramjam
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafkalog_core.record.batch import Compression, TimestampType
from kafkalog_core.record.control import ControlRecordType, build_end_txn_marker_batch
from kafkalog_core.record.encoder import BatchOptions, Record, build_batch, encode_records

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
CODECS = list(Compression)

if kafka_codec.snappy is None:
    kafka_codec.snappy = types.SimpleNamespace(
        decompress=lambda block: bytes(cramjam.snappy.decompress_raw(bytes(block)))
    )


def kafka_python_decode(buf) -> list[tuple[DefaultRecordBatch, list[tuple]]]:
    """All batches and records of `buf` as kafka-python reads them; CRCs must be valid."""
    out = []
    records = MemoryRecords(bytes(buf))
    while records.has_next():
        batch = records.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc(), f"CRC invalid for batch at offset {batch.base_offset}"
        rows = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
        out.append((batch, rows))
    return out


def expected_rows(keys, values, timestamps, headers, base_offset, log_append_time=None):
    rows = []
    for i, value in enumerate(values):
        ts = timestamps[i] if log_append_time is None else log_append_time
        hs = [(k, v) for k, v in (headers[i] or [])] if headers is not None else []
        rows.append((base_offset + i, ts, keys[i], value, hs))
    return rows


def table_of(keys, values, timestamps, headers=None) -> pa.Table:
    columns = {
        "key": pa.array(keys, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "timestamp": pa.array(timestamps, pa.int64()),
    }
    if headers is not None:
        columns["headers"] = pa.array(
            [None if h is None else [{"key": k, "value": v} for k, v in h] for h in headers],
            HEADERS_TYPE,
        )
    return pa.table(columns)


# --- fixed cases -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_every_codec_decodes_with_kafka_python(codec):
    rng = np.random.default_rng(11)
    n = 400
    keys = [None if i % 7 == 0 else b"key-%d" % i for i in range(n)]
    values = [
        None
        if i % 13 == 0
        else bytes(rng.integers(0, 4, int(rng.integers(0, 3000)), dtype=np.uint8))
        for i in range(n)
    ]
    timestamps = [1_700_000_000_000 + i * 3 - (i % 5) * 10 for i in range(n)]
    headers = [[("a", b"1"), ("b", None)] if i % 3 == 0 else [] for i in range(n)]
    options = BatchOptions(compression=codec, max_batch_bytes=32 * 1024)
    encoded = encode_records(
        table_of(keys, values, timestamps, headers), base_offset=500, options=options
    )
    decoded = kafka_python_decode(encoded.buffer)
    assert len(decoded) == len(encoded) > 1
    rows = [row for _, batch_rows in decoded for row in batch_rows]
    assert rows == expected_rows(keys, values, timestamps, headers, 500)
    for b, (batch, _) in enumerate(decoded):
        assert batch.compression_type == int(codec)
        assert batch.base_offset == encoded.base_offsets[b]
        assert batch.max_timestamp == encoded.max_timestamps[b]
        assert batch.leader_epoch == -1
    # the scalar path decodes the same way
    scalar = build_batch(
        [Record(i, timestamps[i], keys[i], values[i], headers[i]) for i in range(20)],
        base_offset=0,
        compression=codec,
    )
    assert [row for _, r in kafka_python_decode(scalar) for row in r] == expected_rows(
        keys[:20], values[:20], timestamps[:20], headers[:20], 0
    )


def test_uncompressed_bytes_equal_kafka_python_builder():
    rng = np.random.default_rng(5)
    n = 1000
    keys = [
        None
        if i % 9 == 0
        else bytes(rng.integers(0, 256, int(rng.integers(0, 40)), dtype=np.uint8))
        for i in range(n)
    ]
    values = [
        None
        if i % 17 == 0
        else bytes(rng.integers(0, 256, int(rng.integers(0, 400)), dtype=np.uint8))
        for i in range(n)
    ]
    timestamps = [int(t) for t in 1_600_000_000_000 + np.cumsum(rng.integers(-50, 200, n))]
    headers = [[(f"k{j}", None if j == 1 else b"v" * j) for j in range(i % 4)] for i in range(n)]
    encoded = encode_records(
        table_of(keys, values, timestamps, headers),
        options=BatchOptions(partition_leader_epoch=0, max_batch_bytes=16 * 1024),
    )
    first = 0
    for b in range(len(encoded)):
        builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 2**31 - 1)
        count = int(encoded.record_counts[b])
        for i in range(count):
            r = first + i
            builder.append(i, timestamps[r], keys[r], values[r], headers[r])
        theirs = bytes(builder.build())
        ours = bytes(encoded.batch(b))
        # kafka-python's baseOffset is the producer's 0; ours is the log offset
        assert ours[8:] == theirs[8:], f"batch {b}"
        first += count


def test_log_append_time_reads_as_max_timestamp():
    options = BatchOptions(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time_ms=99999)
    encoded = encode_records(
        table_of([b"a", None], [b"x", b"y"], [5, -1]), base_offset=3, options=options
    )
    ((batch, rows),) = kafka_python_decode(encoded.buffer)
    assert batch.timestamp_type == 1 and batch.first_timestamp == 5
    assert rows == [(3, 99999, b"a", b"x", []), (4, 99999, None, b"y", [])]


def test_control_batch_example_c_with_kafka_python():
    raw = build_end_txn_marker_batch(
        base_offset=7,
        producer_id=5,
        producer_epoch=0,
        coordinator_epoch=0,
        control_type=ControlRecordType.COMMIT,
        timestamp=1000,
        partition_leader_epoch=0,
    )
    batch = DefaultRecordBatch(bytearray(raw))
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional and batch.producer_id == 5
    (record,) = list(batch)
    assert record.type == ControlRecordType.COMMIT and record.commit and record.offset == 7


def test_idempotent_header_fields_with_kafka_python():
    options = BatchOptions(
        producer_id=77,
        producer_epoch=2,
        base_sequence=10,
        is_transactional=True,
        max_batch_bytes=200,
    )
    encoded = encode_records(
        table_of([b"k"] * 30, [b"v" * 20] * 30, list(range(30))), options=options
    )
    sequence = 10
    for batch, rows in kafka_python_decode(encoded.buffer):
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 2, sequence)
        assert batch.is_transactional
        sequence += len(rows)


# --- properties ------------------------------------------------------------------------------

large_blobs = st.tuples(st.integers(2000, 9000), st.integers(0, 2**32)).map(
    lambda t: np.random.default_rng(t[1]).bytes(t[0])  # big values without big entropy draws
)
blobs = st.one_of(st.none(), st.binary(max_size=40), large_blobs)
header_lists = st.one_of(
    st.none(),
    st.lists(
        st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3
    ),
)
timestamps_st = st.one_of(
    st.just(-1), st.integers(0, 2**45), st.integers(1_700_000_000_000, 1_700_000_100_000)
)


@st.composite
def record_sets(draw):
    n = draw(st.integers(1, 60))
    keys = draw(st.lists(blobs, min_size=n, max_size=n))
    values = draw(st.lists(blobs, min_size=n, max_size=n))
    timestamps = draw(st.lists(timestamps_st, min_size=n, max_size=n))
    headers = draw(st.one_of(st.none(), st.lists(header_lists, min_size=n, max_size=n)))
    return keys, values, timestamps, headers


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=record_sets(),
    codec=st.sampled_from(CODECS),
    max_batch_bytes=st.sampled_from([100, 1000, 5000, 1 << 20]),
    base_offset=st.integers(0, 2**40),
    log_append_time=st.one_of(st.none(), st.integers(0, 2**42)),
)
def test_property_kafka_python_decodes_what_we_encode(
    data, codec, max_batch_bytes, base_offset, log_append_time
):
    keys, values, timestamps, headers = data
    options = BatchOptions(
        compression=codec,
        max_batch_bytes=max_batch_bytes,
        max_message_bytes=1 << 30,
        timestamp_type=TimestampType.CREATE_TIME
        if log_append_time is None
        else TimestampType.LOG_APPEND_TIME,
        log_append_time_ms=log_append_time,
    )
    table = table_of(keys, values, timestamps, headers)
    encoded = encode_records(table, base_offset=base_offset, options=options)
    decoded = kafka_python_decode(encoded.buffer)
    rows = [row for _, batch_rows in decoded for row in batch_rows]
    assert rows == expected_rows(keys, values, timestamps, headers, base_offset, log_append_time)
    # offsets contiguous, counts and positions consistent
    assert int(encoded.record_counts.sum()) == len(values)
    assert encoded.next_offset == base_offset + len(values)
    assert list(encoded.base_offsets[1:]) == list(encoded.last_offsets[:-1] + 1)
    assert int(encoded.sizes.sum()) == encoded.total_bytes
    # batch size limit (uncompressed size; a lone oversized record may exceed it)
    uncompressed = encode_records(
        table,
        base_offset=base_offset,
        options=BatchOptions(max_batch_bytes=max_batch_bytes, max_message_bytes=1 << 30),
    )
    assert list(uncompressed.record_counts) == list(encoded.record_counts)
    for size, count in zip(
        uncompressed.sizes.tolist(), uncompressed.record_counts.tolist(), strict=True
    ):
        assert size <= max_batch_bytes or count == 1
    for (batch, _), max_ts in zip(decoded, encoded.max_timestamps.tolist(), strict=True):
        assert batch.max_timestamp == max_ts
        if log_append_time is None:
            assert batch.timestamp_type == 0
        else:
            assert batch.timestamp_type == 1 and max_ts == log_append_time
    # and the vectorized bytes equal the scalar path's, batch by batch
    if codec in (Compression.NONE, Compression.SNAPPY, Compression.LZ4):  # deterministic codecs
        first = 0
        for b in range(len(encoded)):
            count = int(encoded.record_counts[b])
            scalar = build_batch(
                [
                    Record(
                        i,
                        timestamps[first + i],
                        keys[first + i],
                        values[first + i],
                        (headers[first + i] or []) if headers else [],
                    )
                    for i in range(count)
                ],
                base_offset=base_offset + first,
                compression=codec,
                timestamp_type=options.timestamp_type,
                max_timestamp=log_append_time,
            )
            assert bytes(encoded.batch(b)) == scalar
            first += count
