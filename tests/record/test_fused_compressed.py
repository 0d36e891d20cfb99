"""The fused lz4/snappy encode (`_native.write_compressed_batches`) against the general path.

The general path (records regions, then `compression.compress_many` per batch, then the headers
around the payloads; what runs without the C module) is the reference: the fused path must give
the same bytes for every level, batch size and option, store incompressible lz4 blocks raw, and
its batches must read back with kafka-python, an independent reader.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from kafkalog_core import native as kafkalog_native
from kafkalog_core.errors import RecordTooLargeError
from kafkalog_core.record.batch import RECORD_BATCH_OVERHEAD, Compression
from kafkalog_core.record.compression import (
    LZ4_FRAME_DESCRIPTOR,
    SNAPPY_XERIAL_HEADER,
    decompress,
    fused_codec,
)
from kafkalog_core.record.encoder import BatchOptions, encode_records
from kafkalog_core.record.encoder import encode as encode_module
from tests.record.test_kafka_python_oracle import kafka_python_decode

native = kafkalog_native.module
pytestmark = pytest.mark.skipif(
    native is None or not hasattr(native, "write_compressed_batches"),
    reason="C extension not built",
)
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _table(n: int, *, seed: int = 1, random_values: bool = False, increasing: bool = True):
    """JSON-like values that compress (or random ones that do not), a few headers."""
    rng = np.random.default_rng(seed)
    if random_values:
        values = [rng.bytes(int(rng.integers(200, 3000))) for _ in range(n)]
    else:
        values = [
            b'{"id":%d,"event":"view","page":"/p/%d"}' % (rng.integers(0, 10**9), i % 50)
            for i in range(n)
        ]
    timestamps = (
        1_700_000_000_000 + np.cumsum(rng.integers(0, 30, n))
        if increasing
        else rng.integers(0, 2**40, n)
    )
    headers = [None if i % 3 else [{"key": "h", "value": b"x%d" % i}] for i in range(n)]
    return pa.table(
        {
            "key": pa.array([None if i % 7 == 0 else b"k%d" % (i % 13) for i in range(n)]),
            "value": pa.array(values),
            "timestamp": pa.array(timestamps.astype(np.int64)),
            "headers": pa.array(headers, HEADERS_TYPE),
        }
    )


def _fused_and_fallback(monkeypatch, table, options, base_offset=0):
    """(fused encode, general-path encode, per fused C call whether it was given the plan's
    record sizes)."""
    calls = []
    real = native.write_compressed_batches

    def spy(*args):
        calls.append(args[7] is not None)  # bodies
        return real(*args)

    with monkeypatch.context() as m:
        m.setattr(native, "write_compressed_batches", spy)
        fused = encode_records(table, base_offset=base_offset, options=options)
    with monkeypatch.context() as m:
        m.setattr(encode_module, "_native", None)
        fallback = encode_records(table, base_offset=base_offset, options=options)
    return fused, fallback, calls


def _assert_same(fused, fallback) -> None:
    assert bytes(fused.buffer) == bytes(fallback.buffer)
    for name in ("positions", "sizes", "base_offsets", "last_offsets", "max_timestamps"):
        np.testing.assert_array_equal(getattr(fused, name), getattr(fallback, name), name)


CODEC_LEVELS = [
    (Compression.LZ4, None),
    (Compression.LZ4, 1),
    (Compression.LZ4, 9),
    (Compression.LZ4, 12),
    (Compression.LZ4, 17),
    (Compression.SNAPPY, None),
]


@pytest.mark.parametrize(("codec", "level"), CODEC_LEVELS)
@pytest.mark.parametrize("max_batch_bytes", [100, 16 * 1024, 1 << 20])
def test_fused_equals_fallback(monkeypatch, codec, level, max_batch_bytes):
    """100-byte target: one record per batch; 1 MiB: regions of many lz4/snappy blocks."""
    table = _table(12_000 if max_batch_bytes > 100 else 300)
    options = BatchOptions(
        compression=codec,
        compression_level=level,
        max_batch_bytes=max_batch_bytes,
        partition_leader_epoch=4,
    )
    fused, fallback, calls = _fused_and_fallback(monkeypatch, table, options, base_offset=50)
    assert calls == [True]  # increasing timestamps, no batch over max.message.bytes
    _assert_same(fused, fallback)
    if max_batch_bytes == 100:
        assert set(fused.record_counts.tolist()) == {1}
    else:
        assert int(fused.sizes.max()) > 64 * 1024 or max_batch_bytes < 64 * 1024


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.SNAPPY])
def test_fused_incompressible_region(monkeypatch, codec):
    """Random values: lz4 stores its blocks raw (length word flagged), snappy grows them;
    both paths agree and the records read back."""
    table = _table(400, seed=5, random_values=True)
    options = BatchOptions(compression=codec, max_batch_bytes=1 << 20)
    fused, fallback, calls = _fused_and_fallback(monkeypatch, table, options)
    assert calls == [True]
    _assert_same(fused, fallback)
    raw = bytes(fused.buffer)
    records_area = raw[RECORD_BATCH_OVERHEAD : int(fused.sizes[0])]
    if codec is Compression.LZ4:
        assert records_area.startswith(LZ4_FRAME_DESCRIPTOR)
        first_word = int.from_bytes(records_area[7:11], "little")
        assert first_word == 0x80000000 | 64 * 1024  # a full block, stored
        assert records_area[11 : 11 + 64 * 1024] == decompress(codec, records_area)[: 64 * 1024]
    else:
        assert records_area.startswith(SNAPPY_XERIAL_HEADER)
    assert [r[3] for _, rows in kafka_python_decode(raw) for r in rows] == table.column(
        "value"
    ).to_pylist()


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.SNAPPY])
def test_fused_idempotent_transactional_and_any_timestamps(monkeypatch, codec):
    """Producer fields and the numpy split (timestamps that go backwards) on the fused path."""
    table = _table(3000, seed=8, increasing=False)
    options = BatchOptions(
        compression=codec,
        max_batch_bytes=4096,
        producer_id=77,
        producer_epoch=2,
        base_sequence=2**31 - 40,  # wraps past Int.MAX within the run
        is_transactional=True,
    )
    fused, fallback, calls = _fused_and_fallback(monkeypatch, table, options, base_offset=9)
    assert calls == [False]  # the numpy split plans no record sizes
    _assert_same(fused, fallback)
    batches = kafka_python_decode(fused.buffer)
    assert all(b.is_transactional and b.producer_id == 77 for b, _ in batches)
    assert batches[1][0].base_sequence == (2**31 - 40 + len(batches[0][1])) % 2**31


def test_fused_empty_table(monkeypatch):
    table = _table(0)
    fused, fallback, _ = _fused_and_fallback(
        monkeypatch, table, BatchOptions(compression=Compression.LZ4)
    )
    assert len(fused) == len(fallback) == 0 and bytes(fused.buffer) == b""


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.SNAPPY])
@pytest.mark.parametrize("max_batch_bytes", [16 * 1024, 1 << 20])
def test_fused_batches_read_back_with_kafka_python(codec, max_batch_bytes):
    table = _table(20_000, seed=3)
    encoded = encode_records(
        table,
        base_offset=1000,
        options=BatchOptions(compression=codec, max_batch_bytes=max_batch_bytes),
    )
    batches = kafka_python_decode(encoded.buffer)
    assert len(batches) == len(encoded) and len(batches) > 1
    rows = [r for _, rs in batches for r in rs]
    assert [r[0] for r in rows] == list(range(1000, 21_000))
    assert [r[1] for r in rows] == table.column("timestamp").to_pylist()
    assert [r[2] for r in rows] == table.column("key").to_pylist()
    assert [r[3] for r in rows] == table.column("value").to_pylist()
    assert [r[4] for r in rows[:4]] == [[("h", b"x0")], [], [], [("h", b"x3")]]
    assert all(b.compression_type == codec for b, _ in batches)


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.SNAPPY])
def test_fused_batch_over_max_message_bytes(codec):
    """Random values do not shrink: the compressed batch is over the limit, named by offset."""
    table = _table(40, seed=2, random_values=True)
    options = BatchOptions(compression=codec, max_batch_bytes=1 << 20, max_message_bytes=20_000)
    with pytest.raises(RecordTooLargeError, match=r"batch at offset 7 is \d+ bytes.*=20000"):
        encode_records(table, base_offset=7, options=options)


def test_fused_without_plan_sizes_when_a_batch_could_be_too_large(monkeypatch):
    """The plan's record sizes are int32: used only when no batch can exceed
    max.message.bytes; otherwise the C writer sizes records itself, with the same bytes."""
    table = _table(2000, seed=4)
    options = BatchOptions(
        compression=Compression.LZ4, max_batch_bytes=50_000, max_message_bytes=40_000
    )
    fused, fallback, calls = _fused_and_fallback(monkeypatch, table, options)
    assert calls == [False]
    _assert_same(fused, fallback)


def _direct_call(out, compress_into=None, sizes=None, headers=None, bodies=None):
    """write_compressed_batches on two one-record batches, lz4 framing."""
    table = _table(2)
    columns = [kafkalog_native.column(table.column(c).combine_chunks()) for c in ("key", "value")]
    fused = fused_codec(Compression.LZ4)
    return native.write_compressed_batches(
        out,
        np.zeros(2 * RECORD_BATCH_OVERHEAD, np.uint8) if headers is None else headers,
        np.array([0, 1], np.int64),
        np.array([5, 6], np.int64),
        *columns,
        None,
        bodies,
        np.zeros(2, np.int64) if sizes is None else sizes,
        fused.framing,
        fused.block_size,
        compress_into or fused.compress_into,
    )


def test_write_compressed_batches_refuses_a_short_buffer_and_bad_codecs():
    sizes = np.zeros(2, np.int64)
    written = _direct_call(np.zeros(1000, np.uint8), sizes=sizes)
    assert written == int(sizes.sum()) and sizes.min() > RECORD_BATCH_OVERHEAD
    for short in (10, RECORD_BATCH_OVERHEAD + 3, written - 1):
        with pytest.raises(ValueError, match="output buffer too small"):
            _direct_call(np.zeros(short, np.uint8))

    def broken(src, dst):
        raise RuntimeError("codec failed")

    with pytest.raises(RuntimeError, match="codec failed"):
        _direct_call(np.zeros(1000, np.uint8), broken)
    with pytest.raises(ValueError, match="compress_into returned"):
        _direct_call(np.zeros(1000, np.uint8), lambda src, dst: len(dst) + 1)
    held = []
    for keep in (lambda src, dst: src, lambda src, dst: dst[:4], lambda src, dst: src.cast("B")):
        with pytest.raises(ValueError, match="kept a view"):
            _direct_call(
                np.zeros(1000, np.uint8), lambda src, dst, k=keep: held.append(k(src, dst)) or 0
            )


def test_both_c_writers_check_headers_and_record_sizes_alike():
    """write_batches and write_compressed_batches share one check of the batch headers (61
    bytes per batch) and of the plan's record sizes (an int32 per record)."""
    table = _table(2)
    columns = [kafkalog_native.column(table.column(c).combine_chunks()) for c in ("key", "value")]
    starts, timestamps = np.array([0, 1], np.int64), np.array([5, 6], np.int64)
    short_headers = np.zeros(2 * RECORD_BATCH_OVERHEAD - 1, np.uint8)
    short_bodies = np.zeros(1, np.int32)
    out = np.zeros(1000, np.uint8)
    with pytest.raises(ValueError, match="headers: expected 122 bytes, got 121"):
        _direct_call(out, headers=short_headers)
    with pytest.raises(ValueError, match="headers: expected 122 bytes, got 121"):
        native.write_batches(out, short_headers, starts, timestamps, *columns, None)
    with pytest.raises(ValueError, match="bodies: expected an int32 per record"):
        _direct_call(out, bodies=short_bodies)
    with pytest.raises(ValueError, match="bodies: expected an int32 per record"):
        native.write_batches(out, None, starts, timestamps, *columns, None, short_bodies)


def test_write_compressed_batches_refuses_a_negative_count_and_passes_a_codecs_type_error():
    with pytest.raises(ValueError, match="compress_into returned -5"):
        _direct_call(np.zeros(1000, np.uint8), lambda src, dst: -5)
    with pytest.raises(TypeError):
        _direct_call(np.zeros(1000, np.uint8), lambda src, dst: "four")
