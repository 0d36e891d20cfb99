"""The Schema Registry's wire framing: magic 0, the id as a 4-byte big-endian int, Protobuf's
message indexes (Confluent's zig-zag varints; [0] as the single byte 0), the payload; and
taking framed values apart again, all rows at once."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest

from kafkalog_core.errors import SchemaError
from kafkalog_core.schema import frame_confluent, read_confluent_frame


def test_framing_bytes_and_tombstones():
    payloads = pa.array([b"abc", None, b""])
    framed = frame_confluent(payloads, 17)
    assert framed.to_pylist() == [
        b"\x00" + struct.pack(">i", 17) + b"abc",
        None,
        b"\x00\x00\x00\x00\x11",
    ]
    assert framed.type == pa.binary()
    assert frame_confluent(payloads.cast(pa.large_binary()), 2**31 - 1).type == pa.large_binary()


@pytest.mark.parametrize(
    ("indexes", "expected"),
    [
        ([0], b"\x00"),
        ([1], b"\x02\x02"),
        ([0, 2], b"\x04\x00\x04"),
        ([3, 1, 70], b"\x06\x06\x02\x8c\x01"),
    ],
)
def test_message_indexes_and_back(indexes, expected):
    framed = frame_confluent(pa.array([b"P", None]), 258, indexes)
    assert framed[0].as_py() == b"\x00\x00\x00\x01\x02" + expected + b"P"
    frames = read_confluent_frame(framed, protobuf=True)
    assert frames.schema_ids.to_pylist() == [258, None]
    assert frames.payloads.to_pylist() == [b"P", None]
    assert frames.message_indexes.to_pylist() == [indexes, None]


def test_reading_many_rows_gives_ids_and_zero_copy_payloads():
    payloads = pa.array([bytes([i]) * i for i in range(200)])
    framed = pa.concat_arrays(
        [frame_confluent(payloads.slice(0, 100), 1), frame_confluent(payloads.slice(100), 2)]
    )
    frames = read_confluent_frame(framed.slice(3))
    assert frames.schema_ids.to_pylist() == [1] * 97 + [2] * 100
    assert frames.payloads.to_pylist() == payloads.slice(3).to_pylist()


def test_values_that_are_not_framed_name_the_row():
    values = pa.array([b"\x00\x00\x00\x00\x01ok", b"\x01\x00\x00\x00\x01", b"\x00\x00"])
    with pytest.raises(
        SchemaError, match="row 1: the value starts with byte 1, not the framing's magic byte 0"
    ):
        read_confluent_frame(values)
    frames = read_confluent_frame(values, strict=False)
    assert frames.schema_ids.to_pylist() == [1, None, None]
    assert frames.payloads.to_pylist() == [b"ok", None, None]
    assert [row for row, _ in frames.problems] == [1, 2]
    with pytest.raises(SchemaError, match="row 0: the value ends inside its message indexes"):
        read_confluent_frame(pa.array([b"\x00\x00\x00\x00\x01\x04\x02"]), protobuf=True)


def test_ids_outside_four_bytes_are_refused():
    with pytest.raises(SchemaError, match="does not fit"):
        frame_confluent(pa.array([b"x"]), 2**31)
