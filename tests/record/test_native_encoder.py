"""The C loops of the encoder (`kafkalog_core._native`) write exactly the numpy path's bytes.

The numpy/Arrow path is the reference (it is itself checked against `build_batch`, kafka-python
and real broker bytes elsewhere); here every encode is run both ways and compared field by field,
for nulls, empty values, string/large types, sliced columns, headers, any timestamps, every
codec and LogAppendTime, and through the chunked (streaming) form.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog_core import native as kafkalog_native
from kafkalog_core.errors import RecordTooLargeError
from kafkalog_core.record.batch import Compression, TimestampType
from kafkalog_core.record.encoder import BatchOptions, encode_records, encode_records_chunked
from kafkalog_core.record.encoder import encode as encode_module
from kafkalog_core.record.encoder.native_path import split_parameters

native = kafkalog_native.module


def test_native_module_is_built_where_required():
    """tests/run.sh sets KAFKALOG_REQUIRE_NATIVE=1: an install that silently skipped the C
    extension must fail the suite, not quietly run only the numpy path."""
    if os.environ.get("KAFKALOG_REQUIRE_NATIVE") != "1":
        pytest.skip("KAFKALOG_REQUIRE_NATIVE is not set (the C extension is optional)")
    assert native is not None, "kafkalog_core._native was not built by the install"


needs_native = pytest.mark.skipif(native is None, reason="C extension not built")


def _encode_both(monkeypatch, table, **kwargs):
    with monkeypatch.context() as m:
        m.setattr(encode_module, "_native", None)
        reference = encode_records(table, **kwargs)
    return encode_records(table, **kwargs), reference


def _assert_same(ours, reference) -> None:
    assert bytes(ours.buffer) == bytes(reference.buffer)
    for name in (
        "positions",
        "sizes",
        "base_offsets",
        "last_offsets",
        "max_timestamps",
        "record_counts",
    ):
        np.testing.assert_array_equal(getattr(ours, name), getattr(reference, name), err_msg=name)
    assert ours.start_offset == reference.start_offset


@st.composite
def tables(draw):
    n = draw(st.integers(1, 120))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lengths = st.sampled_from([0, 1, 5, 63, 64, 127, 128, 300, 20000])

    def column(null_share: float) -> list[bytes | None]:
        width = draw(lengths)
        spread = draw(st.booleans())
        out: list[bytes | None] = []
        for _ in range(n):
            size = int(rng.integers(0, width + 1)) if spread else width
            out.append(None if rng.random() < null_share else rng.bytes(size))
        return out

    keys = column(draw(st.sampled_from([0.0, 0.3, 1.0])))
    values = column(draw(st.sampled_from([0.0, 0.2])))
    kind = draw(st.sampled_from(["increasing", "random", "missing", "huge"]))
    if kind == "increasing":
        timestamps = 1_700_000_000_000 + np.cumsum(rng.integers(0, 5000, n))
    elif kind == "random":
        timestamps = rng.integers(0, 2**40, n)
    elif kind == "missing":
        timestamps = np.where(rng.random(n) < 0.5, -1, rng.integers(0, 10**6, n))
    else:
        timestamps = np.array([0, 2**62] * n)[:n]
    key_type = draw(st.sampled_from([pa.binary(), pa.large_binary(), pa.string()]))
    if key_type == pa.string():
        keys = [None if k is None else k.hex() for k in keys]
    columns = {
        "key": pa.array(keys, key_type),
        "value": pa.array(values, draw(st.sampled_from([pa.binary(), pa.large_binary()]))),
        "timestamp": pa.array(timestamps.astype(np.int64)),
    }
    if draw(st.booleans()):
        headers = []
        for _ in range(n):
            count = int(rng.integers(0, 3))
            headers.append(
                None
                if rng.random() < 0.2
                else [
                    {"key": f"h{j}", "value": None if rng.random() < 0.2 else rng.bytes(j * 70)}
                    for j in range(count)
                ]
            )
        columns["headers"] = pa.array(
            headers,
            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
        )
    table = pa.table(columns)
    cut = draw(st.integers(0, n - 1))  # sliced columns: Arrow offsets that do not start at 0
    return table.slice(cut) if draw(st.booleans()) else table


options = st.builds(
    BatchOptions,
    max_batch_bytes=st.sampled_from([100, 1000, 16384, 1 << 20]),
    max_message_bytes=st.just(1 << 30),
    partition_leader_epoch=st.sampled_from([-1, 0, 7]),
)


@needs_native
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(table=tables(), opts=options, base_offset=st.sampled_from([0, 5, 2**40]))
def test_native_equals_numpy_uncompressed(monkeypatch, table, opts, base_offset):
    ours, reference = _encode_both(monkeypatch, table, base_offset=base_offset, options=opts)
    _assert_same(ours, reference)


@needs_native
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    table=tables(),
    codec=st.sampled_from(
        [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
    ),
    append_time=st.booleans(),
)
def test_native_equals_numpy_compressed_and_log_append_time(monkeypatch, table, codec, append_time):
    opts = BatchOptions(
        compression=codec,
        max_batch_bytes=4096,
        max_message_bytes=1 << 30,
        timestamp_type=TimestampType.LOG_APPEND_TIME if append_time else TimestampType.CREATE_TIME,
        log_append_time_ms=1_800_000_000_000 if append_time else None,
    )
    ours, reference = _encode_both(monkeypatch, table, base_offset=3, options=opts)
    _assert_same(ours, reference)


@needs_native
@pytest.mark.parametrize("increasing", [True, False])
@pytest.mark.parametrize("context_rows", [0, 5, 134, 300])  # most - 1 = 134 for 1000 bytes
def test_native_with_context_timestamps(monkeypatch, increasing, context_rows):
    """The split estimate looks `most - 1` records back, into the context when the input is
    young: the C split (non-decreasing timestamps) and the numpy one (any) must agree."""
    rng = np.random.default_rng(3)
    n = 500
    if increasing:
        all_ts = np.cumsum(rng.integers(0, 2000, context_rows + n))
    else:
        all_ts = rng.integers(0, 10**9, context_rows + n)
    table = pa.table(
        {
            "key": pa.array([rng.bytes(8) for _ in range(n)]),
            "value": pa.array([rng.bytes(int(rng.integers(0, 90))) for _ in range(n)]),
            "timestamp": pa.array(all_ts[context_rows:]),
        }
    )
    opts = BatchOptions(max_batch_bytes=1000)
    context = all_ts[:context_rows]
    ours, reference = _encode_both(
        monkeypatch, table, base_offset=9, options=opts, context_timestamps=context
    )
    _assert_same(ours, reference)


@needs_native
@settings(max_examples=60, deadline=None)
@given(table=tables(), chunk=st.sampled_from([1, 200, 5000, 1 << 20]))
def test_chunked_pieces_are_the_whole_encode(table, chunk):
    opts = BatchOptions(max_batch_bytes=1000, max_message_bytes=1 << 30)
    whole = encode_records(table, base_offset=11, options=opts)
    pieces, next_offset, batches = [], 11, 0
    for piece in encode_records_chunked(table, base_offset=11, options=opts, chunk_bytes=chunk):
        assert piece.start_offset == next_offset
        assert len(piece) >= 1
        # a piece holds whole batches and stays within chunk_bytes unless one batch is larger
        assert len(piece) == 1 or piece.total_bytes <= chunk
        pieces.append(bytes(piece.buffer))  # consumed before the next piece reuses the buffer
        np.testing.assert_array_equal(
            piece.base_offsets, whole.base_offsets[batches : batches + len(piece)]
        )
        next_offset, batches = piece.next_offset, batches + len(piece)
    assert b"".join(pieces) == bytes(whole.buffer)
    assert batches == len(whole)


@needs_native
@pytest.mark.parametrize("timestamps", ["increasing", "random"])  # streamed / whole plan
def test_with_two_buffers_a_piece_survives_the_next_one(timestamps):
    """buffers=2: piece k's bytes stay valid while piece k + 1 is encoded (what the
    write-behind append relies on) - read each piece only after the next has been made."""
    rng = np.random.default_rng(9)
    n = 3000
    stamps = (
        np.cumsum(rng.integers(0, 9, n))
        if timestamps == "increasing"
        else rng.integers(0, 10**6, n)
    )
    table = pa.table(
        {
            "value": pa.array([rng.bytes(int(rng.integers(1, 200))) for _ in range(n)]),
            "timestamp": pa.array(stamps),
        }
    )
    opts = BatchOptions(max_batch_bytes=1000)
    whole = bytes(encode_records(table, options=opts).buffer)
    held, parts = None, []
    for piece in encode_records_chunked(table, options=opts, chunk_bytes=5000, buffers=2):
        if held is not None:
            parts.append(bytes(held.buffer))  # the previous piece, after this one was written
        held = piece
    parts.append(bytes(held.buffer))
    assert len(parts) > 10
    assert b"".join(parts) == whole


@needs_native
def test_chunked_pieces_share_one_buffer():
    """The streaming form really reuses its buffer (what makes it cache-sized)."""
    n = 2000
    table = pa.table({"key": pa.array([b"k"] * n), "value": pa.array([b"v" * 100] * n)})
    opts = BatchOptions(max_batch_bytes=2000)
    addresses = {
        np.frombuffer(p.buffer, np.uint8).__array_interface__["data"][0]
        for p in encode_records_chunked(table, options=opts, chunk_bytes=10_000)
    }
    assert len(addresses) == 1


@needs_native
@pytest.mark.parametrize("hardware", [True, False])
def test_native_crc32c_matches_the_crc32c_package(hardware):
    used = native.set_hardware_crc(hardware)
    try:
        if hardware:
            assert isinstance(used, bool)
        else:
            assert used is False
        rng = np.random.default_rng(5)
        data = rng.bytes(70_001)
        for start in range(0, 9):
            for length in (0, 1, 7, 8, 9, 63, 64, 65, 1000, 65_000):
                piece = data[start : start + length]
                assert native.crc32c(piece) == crc32c(piece)
        assert native.crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C
    finally:
        native.set_hardware_crc(True)


@needs_native
@pytest.mark.parametrize("hardware", [True, False])
def test_native_batches_checksum_with_either_crc(monkeypatch, hardware):
    """The three-at-a-time CRC of whole batches (and the table fallback) give Kafka's CRCs."""
    rng = np.random.default_rng(8)
    n = 1000  # many batches of unequal size: the interleaved loop and its tails both run
    table = pa.table({"value": pa.array([rng.bytes(int(rng.integers(0, 300))) for _ in range(n)])})
    native.set_hardware_crc(hardware)
    try:
        ours, reference = _encode_both(
            monkeypatch, table, options=BatchOptions(max_batch_bytes=700)
        )
    finally:
        native.set_hardware_crc(True)
    _assert_same(ours, reference)
    assert len(ours) > 10


@needs_native
def test_write_batches_refuses_a_short_buffer_instead_of_overrunning_it():
    n = 10
    starts = np.zeros(1, np.int64)
    timestamps = np.zeros(n, np.int64)
    offsets = np.arange(n + 1, dtype=np.int64) * 4
    column = (offsets, None, 0, b"x" * (4 * n))
    header = np.zeros(61, np.uint8)
    with pytest.raises(ValueError, match="too small"):
        native.write_batches(
            np.zeros(50, np.uint8), header, starts, timestamps, column, column, None
        )
    outside = (offsets + 100, None, 0, b"x" * (4 * n))  # offsets pointing past the data
    with pytest.raises(ValueError, match="outside its data"):
        native.write_batches(
            np.zeros(10_000, np.uint8), header, starts, timestamps, outside, column, None
        )
    with pytest.raises(ValueError, match="starts"):
        native.region_sizes(
            np.zeros(1, np.int64), np.array([3], np.int64), timestamps, column, column, None
        )
    backwards = (np.array([0, 9, 3, 6, 12] + [12] * (n - 4), np.int64), None, 0, b"x" * 40)
    with pytest.raises(ValueError, match="decrease"):
        native.write_batches(
            np.zeros(10_000, np.uint8), header, starts, timestamps, backwards, column, None
        )
    with pytest.raises(ValueError, match="decrease at row 1"):
        native.max_length(n, backwards)
    with pytest.raises(ValueError, match="validity"):
        native.region_sizes(
            np.zeros(1, np.int64), starts, timestamps, (offsets, b"", 0, None), column, None
        )


@needs_native
def test_non_decreasing_checks_context_and_timestamps():
    empty = np.zeros(0, np.int64)
    assert native.non_decreasing(empty, np.array([1, 2, 2, 3]))
    assert not native.non_decreasing(empty, np.array([1, 2, 1, 3]))
    assert not native.non_decreasing(np.array([9]), np.array([5, 6, 7, 8]))
    assert not native.non_decreasing(np.array([3, 2]), np.array([5]))
    assert native.non_decreasing(np.array([1, 5]), np.array([5, 6]))


@needs_native
@pytest.mark.parametrize("piece_bytes", [1, 700, 5000])
def test_plan_batches_restarts_at_any_batch_start(piece_bytes):
    """Pieces planned one after another, each from where the last stopped, are the batches of
    one whole plan; each piece stays within piece_bytes unless it is a single batch."""
    rng = np.random.default_rng(4)
    n = 3000
    values = pa.array([rng.bytes(int(rng.integers(0, 120))) for _ in range(n)])
    keys = pa.array([None if i % 5 == 0 else b"k%d" % i for i in range(n)])
    timestamps = np.cumsum(rng.integers(0, 50, n))
    context = np.zeros(0, np.int64)
    columns = (kafkalog_native.column(keys), kafkalog_native.column(values), None)
    split = split_parameters(BatchOptions(max_batch_bytes=600))
    starts, sizes = np.empty(n, np.int64), np.empty(n, np.int64)
    count, end = native.plan_batches(
        starts, sizes, timestamps, context, *columns, *split, 0, 2**63 - 1
    )
    whole = list(zip(starts[:count].tolist(), sizes[:count].tolist(), strict=True))
    assert end == n and count > 20
    pieces, row = [], 0
    while row < n:
        count, end = native.plan_batches(
            starts, sizes, timestamps, context, *columns, *split, row, piece_bytes
        )
        assert count >= 1 and end > row
        piece = list(zip(starts[:count].tolist(), sizes[:count].tolist(), strict=True))
        assert count == 1 or sum(size + 61 for _, size in piece) <= piece_bytes
        assert piece[0][0] == row
        pieces += piece
        row = end
    assert pieces == whole


@needs_native
def test_chunked_encode_refuses_an_oversize_record_before_the_first_piece():
    """Appending pieces must be all-or-nothing: a record over max.message.bytes is refused
    before anything is yielded, wherever it is."""
    n = 5000
    values = [b"v" * 50] * n
    values[-1] = b"x" * 3000  # the last record alone is over the limit
    table = pa.table({"value": values, "timestamp": pa.array(np.arange(n))})
    opts = BatchOptions(max_batch_bytes=1000, max_message_bytes=2000)
    pieces = encode_records_chunked(table, options=opts, chunk_bytes=4000, buffers=2)
    with pytest.raises(RecordTooLargeError, match="max_message_bytes=2000"):
        next(pieces)


@needs_native
def test_chunked_encode_streams_a_record_larger_than_the_batch_target():
    """A record over max_batch_bytes (but within max.message.bytes) gets a batch of its own,
    in the streamed pieces exactly as in the whole encode."""
    n = 400
    values = [b"v" * 30] * n
    values[200] = b"x" * 5000
    table = pa.table({"value": values, "timestamp": pa.array(np.arange(n))})
    opts = BatchOptions(max_batch_bytes=1000, max_message_bytes=10_000)
    whole = encode_records(table, options=opts)
    streamed = b"".join(
        bytes(p.buffer)
        for p in encode_records_chunked(table, options=opts, chunk_bytes=3000, buffers=2)
    )
    assert streamed == bytes(whole.buffer)
    assert 5000 < int(whole.sizes.max()) <= 10_000


def test_numpy_path_is_what_runs_without_the_extension(monkeypatch):
    """KAFKALOG_NATIVE=0 / a missing extension: the same call still encodes (numpy path)."""
    monkeypatch.setattr(encode_module, "_native", None)
    table = pa.table({"key": pa.array([b"a", None]), "value": pa.array([b"hello", b""])})
    encoded = encode_records(table, options=BatchOptions())
    raw = bytes(encoded.buffer)
    assert len(encoded) == 1 and raw[16] == 2  # magic v2
    assert int.from_bytes(raw[17:21], "big") == crc32c(raw[21:])
