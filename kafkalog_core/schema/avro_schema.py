"""Avro schemas: the one Spark's `to_avro` derives from a column's type, and the validation of a
given one (an .avsc file, a registry's text).

Spark's rules (its `SchemaConverters.toAvroType`): a struct is a record named by its field (the
top one `topLevelRecord`), in the namespace of the records around it; a nullable field is the
union `[type, "null"]`; byte, short and int are `int`; a decimal is a `fixed` of the fewest
bytes that hold its precision, named `<field>.fixed` in that namespace, with the `decimal`
logical type; a date is `int` + `date`; a timestamp is `long` + `timestamp-micros` (without a
zone `local-timestamp-micros`); maps have string keys.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa

from kafkalog_core.errors import SchemaError

__all__ = [
    "PRIMITIVES",
    "avro_schema_for",
    "decimal_fixed_size",
    "parse_avro_schema",
    "type_name",
]

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_NAMED = ("record", "enum", "fixed")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def decimal_fixed_size(precision: int) -> int:
    """The fewest bytes whose two's complement holds every value of `precision` digits."""
    size = 1
    while 2 ** (8 * size - 1) < 10**precision:
        size += 1
    return size


def _nullable(schema: Any, nullable: bool) -> Any:
    return [schema, "null"] if nullable else schema


def _check_name(name: str, where: str) -> None:
    if not _NAME.fullmatch(name):
        raise SchemaError(
            f"{where}: {name!r} is not an Avro name (letters, digits and _, not starting with "
            "a digit)"
        )


def avro_schema_for(
    arrow_type: pa.DataType,
    record_name: str = "topLevelRecord",
    namespace: str = "",
    *,
    nullable: bool = False,
) -> dict:
    """The Avro schema Spark's `to_avro` writes for a column of `arrow_type`.

    `nullable` makes the top a union with null, as Spark does for a nullable column; the
    default (not nullable) is what a struct of columns gets. The result is always a dict:
    a primitive comes as `{"type": "long"}`.
    """
    schema = _derive(arrow_type, nullable, record_name, namespace, record_name)
    return schema if isinstance(schema, dict) else {"type": schema}


def _derive(t: pa.DataType, nullable: bool, name: str, namespace: str, path: str) -> Any:
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_boolean(t):
        s: Any = "boolean"
    elif (
        pa.types.is_int8(t)
        or pa.types.is_int16(t)
        or pa.types.is_int32(t)
        or pa.types.is_uint8(t)
        or pa.types.is_uint16(t)
    ):
        s = "int"
    elif pa.types.is_int64(t) or pa.types.is_uint32(t) or pa.types.is_uint64(t):
        s = "long"
    elif pa.types.is_float32(t):
        s = "float"
    elif pa.types.is_float64(t):
        s = "double"
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        s = "string"
    elif (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        s = "bytes"
    elif pa.types.is_decimal(t):
        full = f"{namespace}.{name}.fixed" if namespace else f"{name}.fixed"
        space, _, short = full.rpartition(".")
        s = {
            "type": "fixed",
            "name": short,
            "namespace": space,
            "size": decimal_fixed_size(t.precision),
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    elif pa.types.is_date(t):
        s = {"type": "int", "logicalType": "date"}
    elif pa.types.is_timestamp(t):
        logical = "timestamp-micros" if t.tz is not None else "local-timestamp-micros"
        s = {"type": "long", "logicalType": logical}
    elif pa.types.is_time32(t):
        s = {"type": "int", "logicalType": "time-millis"}
    elif pa.types.is_time64(t):
        s = {"type": "long", "logicalType": "time-micros"}
    elif pa.types.is_map(t):
        if not (pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)):
            raise SchemaError(
                f"{path}: an Avro map needs string keys, not {t.key_type} (Avro maps are "
                "keyed by strings)"
            )
        values = _derive(t.item_type, t.item_field.nullable, name, namespace, path)
        s = {"type": "map", "values": values}
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        items = _derive(t.value_type, t.value_field.nullable, name, namespace, path)
        s = {"type": "array", "items": items}
    elif pa.types.is_struct(t):
        _check_name(name, path)
        child_space = f"{namespace}.{name}" if namespace else name
        fields = []
        for f in t:
            where = f"{path}.{f.name}"
            _check_name(f.name, where)
            fields.append(
                {"name": f.name, "type": _derive(f.type, f.nullable, f.name, child_space, where)}
            )
        s = {"type": "record", "name": name}
        if namespace:
            s["namespace"] = namespace
        s["fields"] = fields
    else:
        raise SchemaError(f"{path}: Avro has no type for an Arrow {t}")
    return _nullable(s, nullable)


def type_name(schema: Any) -> str:
    """A short text of a schema for messages: `"long"`, `record orders`, `["null", "string"]`."""
    if isinstance(schema, str):
        return json.dumps(schema)
    if isinstance(schema, list):
        return "[" + ", ".join(type_name(s) for s in schema) + "]"
    kind = schema.get("type")
    if kind in _NAMED:
        return f"{kind} {schema.get('name')}"
    logical = schema.get("logicalType")
    if kind in ("array", "map"):
        inner = schema.get("items" if kind == "array" else "values")
        return f"{kind}<{type_name(inner)}>"
    return f"{json.dumps(kind)} ({logical})" if logical else type_name(kind)


def parse_avro_schema(text: str) -> dict:
    """An Avro schema's JSON text, checked as Avro Java checks it when it parses one.

    A primitive at the top comes back as `{"type": name}`. Refusals are one SchemaError naming
    the problem and where it is.
    """
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as e:
        raise SchemaError(f"the Avro schema is not JSON: {e}") from None
    if isinstance(schema, list):
        raise SchemaError("an Avro schema whose top is a union is not supported as a value schema")
    _Validator().check(schema, "", "schema")
    return schema if isinstance(schema, dict) else {"type": schema}


class _Validator:
    """One walk over a schema: types, names, references, logical types."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def _full(self, name: Any, namespace: str, where: str) -> tuple[str, str]:
        if not isinstance(name, str) or not name:
            raise SchemaError(f'{where}: a named type needs a "name"')
        if "." in name:
            space, _, short = name.rpartition(".")
        else:
            space, short = namespace, name
        for part in ([*space.split(".")] if space else []) + [short]:
            _check_name(part, where)
        return (f"{space}.{short}" if space else short), space

    def check(self, schema: Any, namespace: str, where: str) -> None:
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return
            full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
            if full not in self.names and schema not in self.names:
                raise SchemaError(
                    f"{where}: {schema!r} is neither an Avro type nor a name defined before"
                )
            return
        if isinstance(schema, list):
            seen: set[str] = set()
            for i, branch in enumerate(schema):
                if isinstance(branch, list):
                    raise SchemaError(f"{where}: a union may not hold a union")
                self.check(branch, namespace, f"{where}[{i}]")
                key = branch if isinstance(branch, str) else branch.get("type")
                if isinstance(branch, dict) and key in _NAMED:
                    key = f"{key}:{branch.get('name')}"
                if key in seen:
                    raise SchemaError(f"{where}: the union holds {key!r} twice")
                seen.add(str(key))
            return
        if not isinstance(schema, dict):
            raise SchemaError(f"{where}: {schema!r} is not an Avro schema")
        kind = schema.get("type")
        if isinstance(kind, (list, dict)):
            self.check(kind, namespace, where)
            return
        if kind in PRIMITIVES:
            self._logical(schema, kind, where)
            return
        if kind in _NAMED:
            full, space = self._full(schema.get("name"), schema.get("namespace", namespace), where)
            if full in self.names:
                raise SchemaError(f"{where}: the name {full!r} is defined twice")
            self.names.add(full)
            if kind == "record":
                self._record(schema, space, full, where)
            elif kind == "enum":
                self._enum(schema, where)
            else:
                size = schema.get("size")
                if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                    raise SchemaError(f'{where}: fixed {full} needs a "size" >= 0')
                self._logical(schema, kind, where)
            return
        if kind == "array":
            if "items" not in schema:
                raise SchemaError(f'{where}: an array needs "items"')
            self.check(schema["items"], namespace, f"{where}[]")
            return
        if kind == "map":
            if "values" not in schema:
                raise SchemaError(f'{where}: a map needs "values"')
            self.check(schema["values"], namespace, f"{where}{{}}")
            return
        raise SchemaError(f"{where}: {kind!r} is not an Avro type")

    def _record(self, schema: dict, space: str, full: str, where: str) -> None:
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise SchemaError(f'{where}: record {full} needs a "fields" list')
        seen: set[str] = set()
        for f in fields:
            if not isinstance(f, dict) or "type" not in f:
                raise SchemaError(f"{where}: every field of record {full} needs a name and a type")
            name = f.get("name")
            at = f"{where}.{name}" if where != "schema" else str(name)
            if not isinstance(name, str):
                raise SchemaError(f"{where}: a field of record {full} has no name")
            _check_name(name, at)
            if name in seen:
                raise SchemaError(f"{at}: record {full} has two fields named {name!r}")
            seen.add(name)
            self.check(f["type"], space, at)

    def _enum(self, schema: dict, where: str) -> None:
        symbols = schema.get("symbols")
        if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
            raise SchemaError(f'{where}: enum {schema.get("name")} needs a "symbols" list')
        for s in symbols:
            _check_name(s, where)
        if len(set(symbols)) != len(symbols):
            raise SchemaError(f"{where}: enum {schema.get('name')} repeats a symbol")

    def _logical(self, schema: dict, kind: str, where: str) -> None:
        if schema.get("logicalType") != "decimal":
            return
        precision, scale = schema.get("precision"), schema.get("scale", 0)
        if not isinstance(precision, int) or isinstance(precision, bool) or precision < 1:
            raise SchemaError(f'{where}: a decimal needs a "precision" >= 1, not {precision!r}')
        if not isinstance(scale, int) or isinstance(scale, bool) or not 0 <= scale <= precision:
            raise SchemaError(
                f'{where}: a decimal\'s "scale" must lie in 0..precision ({precision}), '
                f"not {scale!r}"
            )
        if kind == "fixed" and decimal_fixed_size(precision) > schema["size"]:
            raise SchemaError(
                f"{where}: a fixed of {schema['size']} bytes cannot hold a decimal of "
                f"precision {precision}"
            )
        if kind not in ("bytes", "fixed"):
            raise SchemaError(f"{where}: the decimal logical type needs bytes or fixed, not {kind}")
