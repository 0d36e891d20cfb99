"""Property tests: whatever a writer puts in a batch, the decoder gives back exactly.

Two writers: our vectorized encoder (encode_records) and kafka-python's
DefaultRecordBatchBuilder, an independent implementation of the same format.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafkalog_core.record.batch import Compression, TimestampType
from kafkalog_core.record.decoder import HEADERS_TYPE, decode_records, read_batches
from kafkalog_core.record.encoder import BatchOptions, encode_records

_blobs = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=100, max_size=400))
_headers = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3
)
_timestamps = st.one_of(st.just(-1), st.integers(0, 2**45))
_record = st.tuples(_blobs, _blobs, _headers, _timestamps)

_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _expected(records: list, base_offset: int) -> list[dict]:
    return [
        {
            "offset": base_offset + i,
            "timestamp": ts,
            "timestamp_type": 0,
            "key": key,
            "value": value,
            "headers": [{"key": k, "value": v} for k, v in headers],
        }
        for i, (key, value, headers, ts) in enumerate(records)
    ]


@_SETTINGS
@given(
    records=st.lists(_record, min_size=1, max_size=40),
    base_offset=st.integers(0, 2**40),
    codec=st.sampled_from(list(Compression)),
    max_batch_bytes=st.sampled_from([200, 2000, 1 << 20]),
    with_headers=st.booleans(),
)
def test_encoder_to_decoder(
    records: list, base_offset: int, codec: Compression, max_batch_bytes: int, with_headers: bool
) -> None:
    if not with_headers:
        records = [(k, v, [], ts) for k, v, _, ts in records]
    columns = {
        "key": pa.array([r[0] for r in records], pa.binary()),
        "value": pa.array([r[1] for r in records], pa.binary()),
        "timestamp": pa.array([r[3] for r in records], pa.int64()),
    }
    if with_headers:
        columns["headers"] = pa.array(
            [[{"key": k, "value": v} for k, v in r[2]] for r in records], HEADERS_TYPE
        )
    encoded = encode_records(
        pa.table(columns),
        base_offset=base_offset,
        options=BatchOptions(compression=codec, max_batch_bytes=max_batch_bytes),
    )
    buffer = bytes(encoded.buffer)
    table = decode_records(buffer)
    assert table.to_pylist() == _expected(records, base_offset)
    batches = list(read_batches(buffer))
    assert len(batches) == len(encoded)
    assert [b.header.base_offset for b in batches] == encoded.base_offsets.tolist()
    assert [b.record_count for b in batches] == encoded.record_counts.tolist()
    # one batch at a time gives the same rows as the grouped pass
    assert pa.concat_tables([b.records() for b in batches]).equals(table)


@_SETTINGS
@given(
    values=st.lists(_blobs, min_size=1, max_size=30),
    log_append_time=st.integers(0, 2**41),
    codec=st.sampled_from([Compression.NONE, Compression.LZ4]),
)
def test_log_append_time_round_trip(values: list, log_append_time: int, codec: Compression) -> None:
    encoded = encode_records(
        pa.table(
            {"value": pa.array(values, pa.binary()), "timestamp": pa.array(np.arange(len(values)))}
        ),
        options=BatchOptions(
            compression=codec,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time_ms=log_append_time,
        ),
    )
    table = decode_records(bytes(encoded.buffer))
    assert table.column("value").to_pylist() == values
    assert set(table.column("timestamp").to_pylist()) == {log_append_time}
    assert set(table.column("timestamp_type").to_pylist()) == {1}


# kafka-python has no snappy without python-snappy, which is not installed here
_KAFKA_PYTHON_CODECS = [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]


@_SETTINGS
@given(
    records=st.lists(_record, min_size=1, max_size=30),
    gaps=st.lists(st.integers(1, 300), min_size=30, max_size=30),
    codec=st.sampled_from(_KAFKA_PYTHON_CODECS),
    producer=st.sampled_from([(-1, -1, -1), (7, 0, 2**31 - 5)]),
)
def test_kafka_python_batches_decode(
    records: list, gaps: list, codec: Compression, producer: tuple
) -> None:
    producer_id, producer_epoch, base_sequence = producer
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 22,
    )
    offsets = np.cumsum([0] + gaps[: len(records) - 1]).tolist()
    # kafka-python cannot write timestamp -1 (it means "now" to it): use explicit ones
    for offset, (key, value, headers, ts) in zip(offsets, records, strict=True):
        builder.append(offset, max(ts, 0), key, value, [(k, v) for k, v in headers])
    data = bytes(builder.build())
    batch = next(read_batches(data, verify=True))
    # kafka-python sends uncompressed when compressing does not pay off
    assert batch.header.compression in (codec, Compression.NONE)
    expected = _expected([(k, v, h, max(ts, 0)) for k, v, h, ts in records], 0)
    for row, offset in zip(expected, offsets, strict=True):
        row["offset"] = offset
    assert batch.records().to_pylist() == expected
    if base_sequence >= 0:
        assert batch.sequences().tolist() == [(base_sequence + o) % 2**31 for o in offsets]
