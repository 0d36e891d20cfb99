"""Avro values read back: the Arrow type a reader schema decodes into, and records decoded with
their writer schema and resolved to the reader schema (Avro's schema resolution, by fastavro),
so records written under several versions of a schema come out as one type.

Decoding is one fastavro call per record (the read side's general path). Logical types that
are plain numbers or text underneath (dates, times, timestamps, uuid) are read as those numbers
and typed by Arrow, which is exact and spares a Python datetime per value; decimals come back as
Python Decimals. The types follow Spark's `from_avro`: a union of null and one type is that
type, nullable; enums are text, fixed is binary; a union of several types has no column type.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from kafkalog_core.errors import SchemaError

__all__ = ["AvroRecordReader", "arrow_type_for_avro"]

_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
# logical types read as their underlying number or text (fastavro leaves them plain once the
# logicalType is taken off), typed by Arrow from those numbers
_PLAIN_LOGICAL: dict[str, pa.DataType] = {
    "date": pa.date32(),
    "timestamp-millis": pa.timestamp("ms", tz="UTC"),
    "timestamp-micros": pa.timestamp("us", tz="UTC"),
    "local-timestamp-millis": pa.timestamp("ms"),
    "local-timestamp-micros": pa.timestamp("us"),
    "time-millis": pa.int32(),
    "time-micros": pa.int64(),
    "uuid": pa.string(),
}


def arrow_type_for_avro(schema: Any, where: str = "schema") -> pa.DataType:
    """The Arrow type records of an Avro schema (JSON form) decode into."""
    return _arrow(schema, where, {}, ())


def _arrow(
    schema: Any, where: str, named: dict[str, Any], seen: tuple[str, ...], namespace: str = ""
) -> pa.DataType:
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
        target = named.get(full) or named.get(schema)
        if target is None:
            raise SchemaError(f"{where}: unknown Avro type {schema!r}")
        if full in seen or schema in seen:
            raise SchemaError(f"{where}: record {schema} contains itself: no column type")
        return _arrow(target, where, named, seen, namespace)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise SchemaError(
                f"{where}: a union of {len(branches)} non-null types has no column type here"
            )
        return _arrow(branches[0], where, named, seen, namespace)
    if not isinstance(schema, Mapping):
        raise SchemaError(f"{where}: not an Avro schema: {schema!r}")
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)
    if logical in _PLAIN_LOGICAL:
        return _PLAIN_LOGICAL[logical]
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    if kind in ("record", "error", "enum", "fixed"):
        space = schema.get("namespace", namespace) or ""
        name = str(schema.get("name", ""))
        full = name if "." in name or not space else f"{space}.{name}"
        named[full] = schema
        if kind == "enum":
            return pa.string()
        if kind == "fixed":
            return pa.binary()
        inner = (*seen, full)
        return pa.struct(
            [
                pa.field(f["name"], _arrow(f["type"], f"{where}.{f['name']}", named, inner, space))
                for f in schema.get("fields", [])
            ]
        )
    if kind == "array":
        return pa.list_(_arrow(schema["items"], f"{where}[]", named, seen, namespace))
    if kind == "map":
        return pa.map_(
            pa.string(), _arrow(schema["values"], f"{where}{{}}", named, seen, namespace)
        )
    if isinstance(kind, (str, list, dict)):
        return _arrow(kind, where, named, seen, namespace)
    raise SchemaError(f"{where}: not an Avro schema: {schema!r}")


def _plain(schema: Any) -> Any:
    """The schema with the logical types of `_PLAIN_LOGICAL` taken off (same binary layout)."""
    if isinstance(schema, list):
        return [_plain(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {k: _plain(v) if k in ("type", "items", "values") else v for k, v in schema.items()}
    if "fields" in out:
        out["fields"] = [{**f, "type": _plain(f["type"])} for f in out["fields"]]
    if out.get("logicalType") in _PLAIN_LOGICAL:
        del out["logicalType"]
    return out


@functools.lru_cache(maxsize=128)
def _parsed(text: str) -> Any:
    import fastavro

    return fastavro.parse_schema(_plain(json.loads(text)), named_schemas={})


class AvroRecordReader:
    """Decodes single records (schemaless, as the registry framing carries them) written with a
    writer schema into the reader schema's values."""

    def __init__(self, reader: Mapping[str, Any] | str | list[Any]) -> None:
        self.reader_text = json.dumps(reader, sort_keys=True)
        self._reader = _parsed(self.reader_text)

    def for_writer(self, writer: Any) -> Callable[[bytes], Any]:
        """A function decoding one record written with `writer` (the reader's own schema when
        it is the same), resolved to the reader schema."""
        import fastavro

        writer_text = json.dumps(writer, sort_keys=True)
        written = _parsed(writer_text)
        reader = None if writer_text == self.reader_text else self._reader
        read = fastavro.schemaless_reader

        def decode(payload: bytes) -> Any:
            return read(io.BytesIO(payload), written, reader)

        return decode
