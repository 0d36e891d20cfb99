"""The C record walk (`kafkalog_core._native_decode`) decodes exactly what the numpy walk does.

The numpy walk in decoder/walk.py is the reference (held to kafka-python and real broker bytes
elsewhere). Every case here decodes twice, with and without the C walk, and compares the
tables, or the error message when the bytes are malformed: the C walk must accept exactly what
the numpy walk accepts, and a refusal must end in the numpy walk's located error.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog_core import native as kafkalog_native
from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.record.decoder import decode_records
from kafkalog_core.record.decoder import walk as decoder_walk
from kafkalog_core.record.varint import encode_varint
from tests.conftest import FIXTURES
from tests.record.test_corrupt_input import _SEEDS
from tests.record.test_decoder import make_batch, raw_record

native = kafkalog_native.decode_module
needs_native = pytest.mark.skipif(native is None, reason="C extension not built")


def test_decode_module_is_built_where_required() -> None:
    if os.environ.get("KAFKALOG_REQUIRE_NATIVE") != "1":
        pytest.skip("KAFKALOG_REQUIRE_NATIVE is not set (the C extension is optional)")
    assert native is not None, "kafkalog_core._native_decode was not built by the install"


def _both(monkeypatch, data: bytes, **kwargs) -> tuple[object, object]:
    """(C walk result, numpy walk result); a result is a table or the error message."""

    def attempt() -> object:
        try:
            return decode_records(data, **kwargs)
        except CorruptRecordError as error:
            return str(error)

    ours = attempt()
    with monkeypatch.context() as m:
        m.setattr(decoder_walk, "decode_module", None)
        reference = attempt()
    return ours, reference


def _assert_same(ours: object, reference: object) -> None:
    if isinstance(reference, pa.Table):
        assert isinstance(ours, pa.Table), ours
        assert ours.equals(reference)
    else:
        assert ours == reference


def _segments() -> list[Path]:
    return sorted(FIXTURES.glob("segments/**/*.log")) + sorted(FIXTURES.glob("logdirs/**/*.log"))


@needs_native
@pytest.mark.parametrize("path", _segments(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_real_broker_segments_decode_the_same(monkeypatch, path: Path) -> None:
    ours, reference = _both(monkeypatch, path.read_bytes(), include_control=True, with_sizes=True)
    _assert_same(ours, reference)


@needs_native
def test_the_c_walk_is_what_runs(monkeypatch) -> None:
    """A guard against a fast path that silently never runs."""
    calls = []
    real = native.record_fields

    class Spy:
        FIELDS = native.FIELDS

        @staticmethod
        def record_fields(*args):
            calls.append(1)
            return real(*args)

    monkeypatch.setattr(decoder_walk, "decode_module", Spy)
    records = b"".join(raw_record(i, i, key=b"k%d" % i, value=b"v" * i) for i in range(40))
    table = decode_records(make_batch(records, 40))
    assert calls and table.num_rows == 40
    assert table.column("value").to_pylist()[7] == b"v" * 7


_MANY = b"".join(
    raw_record(
        i,
        timestamp_delta=(-1) ** i * i * 1_000_003,
        key=None if i % 5 == 0 else b"key-%d" % i,
        value=None if i % 7 == 0 else bytes(range(256))[: i * 37 % 256],
        headers=[(f"h{j}", None if j == 1 else b"x" * j) for j in range(i % 4)],
    )
    for i in range(200)
)


@needs_native
def test_mixed_records_decode_the_same(monkeypatch) -> None:
    data = make_batch(_MANY, 200) + make_batch(_MANY, 200, base_offset=200)
    ours, reference = _both(monkeypatch, data, with_sizes=True)
    assert isinstance(reference, pa.Table) and reference.num_rows == 400
    _assert_same(ours, reference)


@needs_native
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.sampled_from([*_SEEDS, make_batch(_MANY, 200)]),
    edits=st.lists(st.tuples(st.integers(0, 60_000), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 60_000),
)
def test_damaged_bytes_get_the_same_answer(seed: bytes, edits, cut: int) -> None:
    """Malformed records areas (CRC not checked, so the damage reaches the walk): the same
    table or the same located error either way."""
    data = bytearray(seed)
    for at, byte in edits:
        if at % len(data) >= 61:  # damage the records, not the header the walk is given
            data[at % len(data)] = byte
    if cut % 3 == 0:
        data = data[: cut % (len(data) + 1)]
    with pytest.MonkeyPatch.context() as monkeypatch:
        ours, reference = _both(monkeypatch, bytes(data), verify=False, include_control=True)
    _assert_same(ours, reference)


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=200), st.integers(0, 30))
def test_random_records_areas_get_the_same_answer(area: bytes, count: int) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        ours, reference = _both(monkeypatch, make_batch(area, count), verify=False)
    _assert_same(ours, reference)


def _walk(records: bytes, count: int) -> int:
    """native.record_fields on one records area: -1 accepted, 0 refused."""
    import numpy as np

    regions = np.array([0, len(records)], np.int64)
    counts = np.array([count], np.int64)
    out = np.empty((native.FIELDS, count), np.int64)
    return native.record_fields(records, regions, counts, out)


def _fields(*parts: bytes, extra: bytes = b"", declared_delta: int = 0) -> bytes:
    body = b"".join(parts) + extra
    return encode_varint(len(body) + declared_delta) + body


_OK_KEY = encode_varint(1) + b"k"
_NULL = encode_varint(-1)
_NO_HEADERS = encode_varint(0)
_REFUSED = {
    "declared longer than the fields": _fields(
        b"\x00\x00\x00", _OK_KEY, _NULL, _NO_HEADERS, b"\x00"
    ),
    "key length below -1": _fields(b"\x00\x00\x00", encode_varint(-2), _NULL, _NO_HEADERS),
    "key past the record": _fields(b"\x00\x00\x00", encode_varint(40), b"abc", _NULL, _NO_HEADERS),
    "value length below -1": _fields(b"\x00\x00\x00", _NULL, encode_varint(-3), _NO_HEADERS),
    "negative headers count": _fields(b"\x00\x00\x00", _NULL, _NULL, encode_varint(-1), b"\0" * 4),
    "headers count too big": _fields(b"\x00\x00\x00", _NULL, _NULL, encode_varint(9), b"\0" * 4),
    "negative header key length": _fields(
        b"\x00\x00\x00", _NULL, _NULL, encode_varint(1), encode_varint(-1), _NULL, b"\0" * 2
    ),
    "header value below -1": _fields(
        b"\x00\x00\x00", _NULL, _NULL, encode_varint(1), encode_varint(0), encode_varint(-2)
    ),
    "varint too long": _fields(b"\x00", b"\xff" * 11, b"\x00" * 8),
    "body below the minimum": encode_varint(5) + b"\x00" * 5,
    "negative record length": encode_varint(-3) + b"\x00" * 10,
}


@needs_native
@pytest.mark.parametrize("problem", sorted(_REFUSED))
def test_the_c_walk_refuses_malformed_records(problem: str) -> None:
    assert _walk(_REFUSED[problem], 1) == 0
    with pytest.raises(CorruptRecordError):
        decode_records(make_batch(_REFUSED[problem], 1))


@needs_native
def test_the_c_walk_refuses_wrong_counts() -> None:
    two = raw_record(0, key=b"a") + raw_record(1, value=None, headers=[("h", None)])
    assert _walk(two, 2) == -1
    assert _walk(two, 1) == 0  # bytes remain after the declared records
    assert _walk(two, 3) == 0  # premature end
    assert _walk(two[:-1], 2) == 0  # the last record runs past the area
