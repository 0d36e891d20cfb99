"""murmur2 / toPositive / key -> partition (§11, §13 case 1); vectorized == scalar == kafka-python."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kafkalog_core import partitioner
from kafkalog_core.errors import ConfigError
from kafkalog_core.partitioner import murmur2, murmur2_array, partition_for_keys, to_positive

# UtilsTest.testMurmur2
VECTORS = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}
# §11 derived partitions for 3, 10, 100 partitions
PARTITIONS = {
    "21": (0, 0, 40),
    "foobar": (0, 6, 66),
    "a-little-bit-long-string": (2, 2, 12),
    "a-little-bit-longer-string": (2, 9, 19),
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": (2, 7, 77),
    "abc": (0, 7, 7),
}


NATIVE = partitioner._native


@pytest.fixture(
    params=["native", 0, 8, 10**9], ids=["native", "all-vector", "default", "all-scalar"]
)
def vector_threshold(request, monkeypatch):
    """Run each vectorized test through the C loop, and through the numpy path's all-vector,
    default split and all-scalar modes."""
    if request.param == "native":
        if NATIVE is None:
            pytest.skip("C extension not built")
        return request.param
    monkeypatch.setattr(partitioner, "_native", None)
    monkeypatch.setattr(partitioner, "_VECTOR_MIN_ACTIVE", request.param)
    return request.param


def _each_path(threshold):
    """Yield once per implementation: the C loop (when built), then numpy with `threshold`."""
    old = partitioner._native, partitioner._VECTOR_MIN_ACTIVE
    try:
        if NATIVE is not None:
            partitioner._native = NATIVE
            yield "native"
        partitioner._native = None
        partitioner._VECTOR_MIN_ACTIVE = threshold
        yield "numpy"
    finally:
        partitioner._native, partitioner._VECTOR_MIN_ACTIVE = old


@pytest.mark.parametrize(("key", "expected"), list(VECTORS.items()))
def test_murmur2_vectors(key: str, expected: int) -> None:
    assert murmur2(key.encode()) == expected
    assert murmur2(key) == expected  # str = its UTF-8 bytes
    assert murmur2(memoryview(key.encode())) == expected
    assert murmur2(bytearray(key.encode())) == expected


def test_murmur2_vectors_vectorized(vector_threshold) -> None:
    keys = pa.array(list(VECTORS))
    got = murmur2_array(keys)
    assert got.dtype == np.int32
    assert got.tolist() == list(VECTORS.values())


@pytest.mark.parametrize(("key", "parts"), list(PARTITIONS.items()))
def test_derived_partition_table(key: str, parts: tuple[int, int, int]) -> None:
    for n, expected in zip((3, 10, 100), parts, strict=True):
        assert to_positive(murmur2(key.encode())) % n == expected
        assert partition_for_keys(pa.array([key]), n).tolist() == [expected]


def test_case_1_partition_examples(vector_threshold) -> None:
    assert partition_for_keys(pa.array(["foobar"]), 10).tolist() == [6]
    assert partition_for_keys(pa.array(["abc"]), 100).tolist() == [7]
    keys = pa.array(list(PARTITIONS) * 3)
    for i, n in enumerate((3, 10, 100)):
        assert partition_for_keys(keys, n).tolist() == [p[i] for p in PARTITIONS.values()] * 3


def test_to_positive_is_not_abs() -> None:
    assert to_positive(-5) == 2147483643
    assert to_positive(5) == 5
    assert to_positive(-(2**31)) == 0
    assert to_positive(2**31 - 1) == 2**31 - 1
    assert to_positive(-1) == 2**31 - 1


def test_murmur2_is_signed_int32() -> None:
    values = [murmur2(bytes([i]) * i) for i in range(200)]
    assert all(-(2**31) <= v < 2**31 for v in values)
    assert any(v < 0 for v in values) and any(v > 0 for v in values)


def test_murmur2_empty_key() -> None:
    assert murmur2(b"") == _oracle(b"")
    assert murmur2_array(pa.array([b""])).tolist() == [murmur2(b"")]


def _oracle(key: bytes) -> int:
    h = kafka_python_murmur2(key)  # kafka-python returns it unsigned
    return h - 2**32 if h >= 2**31 else h


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=100))
def test_scalar_matches_kafka_python(key: bytes) -> None:
    assert murmur2(key) == _oracle(key)


_keys = st.lists(st.one_of(st.none(), st.binary(max_size=100)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(keys=_keys, threshold=st.sampled_from([0, 3, 8, 10**9]))
def test_vectorized_equals_scalar_binary(keys: list[bytes | None], threshold: int) -> None:
    expected = [0 if k is None else murmur2(k) for k in keys]
    parts = [-1 if k is None else to_positive(murmur2(k)) % 7 for k in keys]
    for _ in _each_path(threshold):
        for t in (pa.binary(), pa.large_binary(), pa.binary_view()):
            assert murmur2_array(pa.array(keys, type=t)).tolist() == expected
            if keys:  # a sliced column: offsets and validity bits that do not start at 0
                sliced = pa.array([b"x", *keys], type=t).slice(1)
                assert murmur2_array(sliced).tolist() == expected
        assert partition_for_keys(pa.array(keys, type=pa.binary()), 7).tolist() == parts


@settings(max_examples=150, deadline=None)
@given(
    keys=st.lists(st.one_of(st.none(), st.text(max_size=40)), max_size=60),
    threshold=st.sampled_from([0, 8, 10**9]),
)
def test_vectorized_equals_scalar_strings_non_ascii(keys: list[str | None], threshold: int) -> None:
    expected = [0 if k is None else murmur2(k.encode("utf-8")) for k in keys]
    for _ in _each_path(threshold):
        for t in (pa.string(), pa.large_string(), pa.string_view()):
            assert murmur2_array(pa.array(keys, type=t)).tolist() == expected


def test_every_length_0_to_100(vector_threshold) -> None:
    rng = np.random.default_rng(7)
    keys = [rng.integers(0, 256, size=n, dtype=np.uint8).tobytes() for n in range(101)] * 2
    keys += ["ü€😀" * n for n in range(20)]  # type: ignore[list-item]
    as_bytes = [k.encode() if isinstance(k, str) else k for k in keys]
    expected = [_oracle(k) for k in as_bytes]
    assert murmur2_array(pa.array(as_bytes)).tolist() == expected
    assert [murmur2(k) for k in as_bytes] == expected


def test_nulls(vector_threshold) -> None:
    keys = pa.array([None, b"abc", None, b"", b"foobar", None], type=pa.binary())
    assert murmur2_array(keys).tolist() == [0, 479470107, 0, murmur2(b""), -790332482, 0]
    assert partition_for_keys(keys, 100).tolist() == [
        -1,
        7,
        -1,
        to_positive(murmur2(b"")) % 100,
        66,
        -1,
    ]
    assert partition_for_keys(pa.nulls(3), 5).tolist() == [-1, -1, -1]


def test_null_slots_with_garbage_offsets() -> None:
    """A null slot's offsets may span bytes; they must not be hashed or crash."""
    data = pa.py_buffer(b"abcdefghij")
    offsets = pa.py_buffer(np.array([0, 3, 10, 10], dtype=np.int32).tobytes())
    validity = pa.py_buffer(bytes([0b101]))  # slot 1 is null but covers 7 bytes
    arr = pa.Array.from_buffers(pa.binary(), 3, [validity, offsets, data], null_count=1)
    assert murmur2_array(arr).tolist() == [murmur2(b"abc"), 0, murmur2(b"")]
    assert partition_for_keys(arr, 3).tolist()[1] == -1


def test_chunked_and_sliced_arrays(vector_threshold) -> None:
    keys = [f"key-{i}".encode() * (i % 13) for i in range(500)]
    expected = [murmur2(k) for k in keys]
    chunked = pa.chunked_array(
        [pa.array(keys[:123]), pa.array(keys[123:400]), pa.array(keys[400:])]
    )
    assert murmur2_array(chunked).tolist() == expected
    assert murmur2_array(pa.array(keys).slice(37, 200)).tolist() == expected[37:237]
    empty_chunked = pa.chunked_array([], type=pa.binary())
    assert murmur2_array(empty_chunked).tolist() == []
    assert partition_for_keys(empty_chunked, 3).tolist() == []
    assert murmur2_array(pa.array([], type=pa.string())).tolist() == []


def test_dictionary_and_python_list_inputs() -> None:
    keys = ["abc", "foobar", "abc", None]
    dict_arr = pa.array(keys).dictionary_encode()
    assert murmur2_array(dict_arr).tolist() == [479470107, -790332482, 479470107, 0]
    assert partition_for_keys(keys, 10).tolist() == [7, 6, 7, -1]  # type: ignore[arg-type]


def test_long_keys_mixed_with_short(vector_threshold) -> None:
    rng = np.random.default_rng(1)
    keys = [
        rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
        for n in [100_003, 5, 0, 64, 4097] * 5
    ]
    assert murmur2_array(pa.array(keys)).tolist() == [_oracle(k) for k in keys]


def test_rejects_non_binary_keys_and_bad_partition_counts() -> None:
    with pytest.raises(TypeError):
        murmur2_array(pa.array([1, 2, 3]))
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ConfigError, match="num_partitions"):
            partition_for_keys(pa.array(["a"]), bad)  # type: ignore[arg-type]


def test_partition_distribution_matches_scalar_at_scale() -> None:
    rng = np.random.default_rng(3)
    keys = [rng.bytes(int(n)) for n in rng.integers(0, 40, size=20_000)]
    got = partition_for_keys(pa.array(keys), 12)
    assert got.tolist() == [to_positive(murmur2(k)) % 12 for k in keys]
    assert got.dtype == np.int32


def test_keys_of_one_length_take_the_matrix_path_and_agree_with_kafka_python() -> None:
    """Every length 0..40 as a column of equal-length keys (whole and sliced)."""
    rng = np.random.default_rng(11)
    for length in range(41):
        keys = [rng.integers(0, 256, size=length, dtype=np.uint8).tobytes() for _ in range(60)]
        expected = [_oracle(k) for k in keys]
        column = pa.array(keys, pa.binary())
        assert murmur2_array(column).tolist() == expected, length
        assert murmur2_array(column.slice(7, 30)).tolist() == expected[7:37], length
        large = pa.array(keys, pa.large_binary())
        assert murmur2_array(large).tolist() == expected, length
