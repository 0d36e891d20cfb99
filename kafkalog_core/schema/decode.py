"""Keys or values read back into columns: registry-framed or plain Avro, Protobuf, JSON Schema
and JSON payloads -> one Arrow column of the reader schema's type, plus the reason for every
record that could not be decoded.

What a task needs arrives in one `Decoding` (resolved once, on the driver): the reader schema,
and for framed records the writer schema of every schema id the registry knows for the subject.
Each record is decoded with the writer schema its id names and resolved to the reader schema:
Avro by Avro's resolution rules, Protobuf by field numbers (the reader's message of the same
name), JSON by property names. A record that cannot be decoded (not framed, an unknown id, bad
bytes) gets a reason; the caller fails the read with it or keeps a null.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core.errors import SchemaError
from kafkalog_core.schema.confluent import read_confluent_frame

__all__ = ["Decoding", "decode_column"]


@dataclass(frozen=True)
class Decoding:
    """How one column (key or value) is decoded; small and picklable, shipped to the tasks.

    `reader`: an Avro schema (JSON form), a `ProtobufSchema`, or a JSON Schema (dict).
    `writers`: schema id -> the writer schema of that id (same kinds), for framed records.
    `any_id`: framed records whose id is not in `writers` are decoded with the reader schema
    (no registry was given: the reader schema is the only one known).
    """

    field: str
    format: str
    framed: bool
    reader: Any
    writers: Mapping[int, Any] = field(default_factory=dict)
    any_id: bool = False

    def arrow_type(self) -> pa.DataType:
        if self.format == "avro":
            from kafkalog_core.schema.avro_read import arrow_type_for_avro

            return arrow_type_for_avro(self.reader, f"{self.field} schema")
        if self.format == "protobuf":
            return self.reader.arrow_type()
        from kafkalog_core.schema.json_schema import arrow_type_for_json_schema

        return arrow_type_for_json_schema(self.reader, f"{self.field} schema")

    def writer(self, schema_id: int) -> Any | None:
        if schema_id in self.writers:
            return self.writers[schema_id]
        return self.reader if self.any_id else None


@dataclass
class _Frames:
    """Each record's payload (the framing taken off), the schema id it names (-1: none) and
    the Protobuf message indexes, plus a reason for every record that cannot be decoded."""

    payloads: pa.Array
    ids: np.ndarray
    indexes: list[Any] | None
    reasons: list[str | None]


def _frames(values: pa.Array, decoding: Decoding) -> _Frames:
    n = len(values)
    reasons: list[str | None] = [None] * n
    if not decoding.framed:
        return _Frames(values, np.full(n, -1, np.int64), None, reasons)
    protobuf = decoding.format == "protobuf"
    frames = read_confluent_frame(values, protobuf=protobuf, strict=False)
    assumed = f"not in the registry framing ({decoding.field}.framing=confluent)"
    for row, why in frames.problems:
        reasons[row] = f"{assumed}: the value {why}"
    ids = frames.schema_ids.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    present = pc.is_valid(values).to_numpy(zero_copy_only=False)
    for row in np.flatnonzero(present & (ids < 0)):
        if reasons[row] is None:  # beyond the rows the framing reader lists by name
            reasons[row] = assumed
    for schema_id in np.unique(ids[ids >= 0]):
        if decoding.writer(int(schema_id)) is None:
            for row in np.flatnonzero(ids == schema_id):
                reasons[row] = (
                    f"unknown schema id {schema_id} (in the header that "
                    f"{decoding.field}.framing=confluent reads)"
                )
    indexes = frames.message_indexes.to_pylist() if protobuf else None
    return _Frames(frames.payloads, ids, indexes, reasons)


def decode_column(payloads: pa.Array, decoding: Decoding) -> tuple[pa.Array, list[str | None]]:
    """(decoded values of `decoding.arrow_type()`, reason per record or None). A null payload
    (a tombstone) decodes to null with no reason."""
    frames = _frames(payloads, decoding)
    arrow_type = decoding.arrow_type()
    if decoding.format in ("json", "json_schema"):
        return _decode_json(frames, arrow_type)
    values = frames.payloads.to_pylist()
    out: list[Any] = [None] * len(values)
    decoders: dict[Any, Callable[[bytes], Any]] = {}
    per_record = _avro_payload if decoding.format == "avro" else _protobuf_payload
    for i, payload in enumerate(values):
        if payload is None or frames.reasons[i] is not None:
            continue
        indexes = tuple(frames.indexes[i]) if frames.indexes is not None else ()
        try:
            out[i] = per_record(payload, int(frames.ids[i]), indexes, decoding, decoders)
        except SchemaError as e:
            frames.reasons[i] = str(e)
        except Exception as e:  # the libraries' own errors for bytes that are not the schema
            frames.reasons[i] = f"bad bytes for schema id {frames.ids[i]}: {type(e).__name__}: {e}"
            if not decoding.framed:
                frames.reasons[i] = (
                    f"bad bytes for a plain payload ({decoding.field}.framing=none): "
                    f"{type(e).__name__}: {e}"
                )
    return pa.array(out, arrow_type), frames.reasons


def _avro_payload(
    payload: bytes,
    schema_id: int,
    indexes: tuple[int, ...],
    decoding: Decoding,
    decoders: dict[Any, Callable[[bytes], Any]],
) -> Any:
    decode = decoders.get(schema_id)
    if decode is None:
        from kafkalog_core.schema.avro_read import AvroRecordReader

        reader = decoders.get("reader") or AvroRecordReader(decoding.reader)
        decoders["reader"] = reader  # type: ignore[assignment]
        writer = decoding.reader if schema_id < 0 else decoding.writer(schema_id)
        decode = decoders[schema_id] = reader.for_writer(writer)  # type: ignore[attr-defined]
    return decode(payload)


def _protobuf_payload(
    payload: bytes,
    schema_id: int,
    indexes: tuple[int, ...],
    decoding: Decoding,
    decoders: dict[Any, Callable[[bytes], Any]],
) -> Any:
    key = (schema_id, indexes)
    decode = decoders.get(key)
    if decode is None:
        reader = decoding.reader
        if decoding.framed:
            writer = decoding.writer(schema_id)
            name = writer.message_at(indexes)
            if name != reader.message:
                try:  # the reader's message of the writer's name: Protobuf resolves by numbers
                    reader.with_message(name).descriptor  # noqa: B018 (checks the name)
                    reader = reader.with_message(name)
                except KeyError:
                    raise SchemaError(
                        f"schema id {schema_id} names message {name}; the reader schema has "
                        f"{reader.message}"
                    ) from None
        decode = decoders[key] = reader.decoder()
    return decode(payload)


def _decode_json(frames: _Frames, arrow_type: pa.DataType) -> tuple[pa.Array, list[str | None]]:
    """All good payloads through Arrow's JSON reader at once; if that refuses, one by one to
    find the records at fault."""
    from kafkalog_core.schema.json_schema import decode_json_values

    payloads = frames.payloads
    good = pc.is_valid(payloads).to_numpy(zero_copy_only=False) & np.array(
        [r is None for r in frames.reasons], bool
    )
    rows = np.flatnonzero(good)
    texts = pc.take(payloads, pa.array(rows)).to_pylist() if len(rows) else []
    try:
        decoded = decode_json_values(texts, arrow_type)
    except ValueError:
        parts: list[pa.Array] = []
        keep: list[int] = []
        for row, text in zip(rows, texts, strict=True):
            try:
                parts.append(decode_json_values([text], arrow_type))
                keep.append(int(row))
            except ValueError as e:
                frames.reasons[row] = f"bad JSON: {e}"
        rows = np.array(keep, np.int64)
        decoded = pa.concat_arrays(parts) if parts else pa.array([], arrow_type)
    # scatter the decoded rows back to their places, nulls elsewhere
    where = np.full(len(payloads), -1, np.int64)
    where[rows] = np.arange(len(rows))
    indices = pa.array(where, mask=where < 0)
    return pc.take(decoded, indices), frames.reasons
