"""What the schema tests share: Python values in the shapes Avro libraries take, and both
encoders (the C rows and the Arrow twin) on the same input."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import avro.io
import avro.schema
import fastavro
import pyarrow as pa

from kafkalog_core import native


def for_avro(value: Any, t: pa.DataType) -> Any:
    """An Arrow to_pylist value as Avro libraries take it (maps as dicts)."""
    if value is None:
        return None
    if pa.types.is_map(t):
        return {k: for_avro(v, t.item_type) for k, v in value}
    if pa.types.is_list(t):
        return [for_avro(v, t.value_type) for v in value]
    if pa.types.is_struct(t):
        return {f.name: for_avro(value[f.name], f.type) for f in t}
    return value


def fastavro_bytes(schema: dict, array: pa.Array) -> list[bytes | None]:
    """Each row as fastavro's schemaless_writer writes it (None for a null row)."""
    parsed = fastavro.parse_schema(schema)
    out: list[bytes | None] = []
    for value in array.to_pylist():
        if value is None:
            out.append(None)
            continue
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, for_avro(value, array.type))
        out.append(buf.getvalue())
    return out


def avro_reference_roundtrip(schema: dict, payload: bytes) -> bytes:
    """The Apache Avro Python package decodes the payload (all of it) and writes it again."""
    parsed = avro.schema.parse(json.dumps(schema))
    source = io.BytesIO(payload)
    datum = avro.io.DatumReader(parsed).read(avro.io.BinaryDecoder(source))
    assert source.tell() == len(payload), "the reader left bytes unread"
    out = io.BytesIO()
    avro.io.DatumWriter(parsed).write(datum, avro.io.BinaryEncoder(out))
    return out.getvalue()


def both_paths(monkeypatch, encode: Callable[[], pa.Array]) -> tuple[pa.Array, pa.Array]:
    """The encoder's output with the C module, then without it (the Arrow path)."""
    assert native.schema_module is not None, "kafkalog_core._native_schema was not built"
    with_c = encode()
    with monkeypatch.context() as m:
        m.setattr(native, "schema_module", None)
        without_c = encode()
    return with_c, without_c
