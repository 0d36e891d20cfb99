"""How an Avro schema fits an Arrow type: the tree of `AvroNode`s both encoders walk.

The rules follow Spark's `AvroSerializer` (a record's fields matched to a struct's columns by
name; a column Avro has no field for is refused; a nullable union branch is chosen for nulls;
a timestamp without a logical type is written in milliseconds), with the widenings that lose
nothing: a smaller integer into a `long`, a float into a `double`, a narrower decimal precision.
What only the rows can tell (a null where the schema has none, a long beyond `int`, a binary of
the wrong size for a `fixed`, a decimal beyond the schema's precision, a string that is not an
enum symbol) is checked row by row when encoding (`avro_encode`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kafkalog_core.errors import SchemaError
from kafkalog_core.schema.avro_schema import PRIMITIVES, type_name

__all__ = ["AvroNode", "bind_avro", "check_avro_schema", "plain_type"]

# Arrow timestamp/time units per second
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_LOGICAL_UNITS = {
    "timestamp-millis": "ms",
    "timestamp-micros": "us",
    "timestamp-nanos": "ns",
    "local-timestamp-millis": "ms",
    "local-timestamp-micros": "us",
    "local-timestamp-nanos": "ns",
}


@dataclass
class AvroNode:
    """One Avro type bound to one Arrow type.

    `kind` is the Avro type written (`boolean`, `int`, `long`, `float`, `double`, `bytes`,
    `string`, `fixed`, `enum`, `record`, `array`, `map`, `null`; `absent` for a record field no
    column feeds, always null). `null_index`/`value_index` are the union branches written before
    a null and before a value (None: no union; no `null_index`: a null does not fit).
    """

    kind: str
    path: str
    arrow_type: pa.DataType
    null_index: int | None = None
    value_index: int | None = None
    children: list[AvroNode] = field(default_factory=list)
    columns: list[int | None] = field(default_factory=list)  # record: struct index per field
    size: int = 0  # fixed
    precision: int = 0  # decimal
    scale: int = 0
    decimal: bool = False
    symbols: tuple[str, ...] = ()
    unit: str = ""  # timestamps and times: the unit Avro wants ("ms", "us", "ns")
    int_range: tuple[int, int] | None = None  # values must lie in it (an Avro int from a long)


def plain_type(t: pa.DataType) -> pa.DataType:
    """The type the encoders read: dictionaries decoded, views and fixed-size lists as plain
    arrays, date64 as date32 (Arrow casts between them without loss)."""
    if pa.types.is_dictionary(t):
        return plain_type(t.value_type)
    if pa.types.is_string_view(t):
        return pa.large_string()
    if pa.types.is_binary_view(t):
        return pa.large_binary()
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return pa.large_list(
            pa.field(t.value_field.name, plain_type(t.value_type), t.value_field.nullable)
        )
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(plain_type(t.value_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(plain_type(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(
            plain_type(t.key_type),
            t.item_field.with_type(plain_type(t.item_type)),
        )
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(plain_type(f.type)) for f in t])
    return t


def check_avro_schema(schema: dict, arrow_type: pa.DataType) -> None:
    """Refuse (SchemaError naming the field and both types) a schema the columns do not fit."""
    bind_avro(schema, arrow_type)


def bind_avro(schema: dict, arrow_type: pa.DataType) -> AvroNode:
    """The encoders' tree for writing columns of `arrow_type` under `schema`."""
    return _Binder().bind(schema, plain_type(arrow_type), "", "", nullable=False)


def _misfit(path: str, schema: Any, t: pa.DataType, why: str = "") -> SchemaError:
    where = f"field {path}" if path else "the value"
    tail = f": {why}" if why else ""
    return SchemaError(
        f"Avro schema does not fit the columns: {where} is Arrow {t} but the schema says "
        f"{type_name(schema)}{tail}"
    )


class _Binder:
    def __init__(self) -> None:
        self.named: dict[str, dict] = {}

    def _define(self, schema: dict, namespace: str) -> str:
        name = schema["name"]
        space = schema.get("namespace", namespace) if "." not in name else name.rpartition(".")[0]
        full = name if "." in name else (f"{space}.{name}" if space else name)
        self.named[full] = schema
        return space

    def _resolve(self, schema: Any, namespace: str) -> Any:
        if isinstance(schema, str) and schema not in PRIMITIVES:
            for full in (schema, f"{namespace}.{schema}"):
                if full in self.named:
                    return self.named[full]
            raise SchemaError(f"Avro schema names {schema!r}, which it does not define")
        if isinstance(schema, dict) and isinstance(schema.get("type"), (list, dict)):
            return schema["type"]
        if isinstance(schema, dict) and schema.get("type") in PRIMITIVES and len(schema) == 1:
            return schema["type"]
        return schema

    def bind(
        self, schema: Any, t: pa.DataType, path: str, namespace: str, *, nullable: bool
    ) -> AvroNode:
        schema = self._resolve(schema, namespace)
        if isinstance(schema, list):
            return self._union(schema, t, path, namespace)
        node = self._branch(schema, t, path, namespace)
        return node

    def _union(self, branches: list, t: pa.DataType, path: str, namespace: str) -> AvroNode:
        resolved = [self._resolve(b, namespace) for b in branches]
        null_index = next((i for i, b in enumerate(resolved) if b == "null"), None)
        if pa.types.is_null(t):
            if null_index is None:
                raise _misfit(
                    path, branches, t, "the column is always null and the union has no null"
                )
            return AvroNode("null", path, t, null_index=null_index, value_index=null_index)
        first_error: SchemaError | None = None
        for i, b in enumerate(resolved):
            if b == "null":
                continue
            try:
                node = self._branch(b, t, path, namespace)
            except SchemaError as e:
                first_error = first_error or e
                continue
            node.null_index, node.value_index = null_index, i
            return node
        if first_error is not None and sum(b != "null" for b in resolved) == 1:
            raise first_error
        raise _misfit(path, branches, t, "no branch of the union fits")

    def _branch(self, schema: Any, t: pa.DataType, path: str, namespace: str) -> AvroNode:
        kind = schema if isinstance(schema, str) else schema.get("type")
        logical = None if isinstance(schema, str) else schema.get("logicalType")
        if kind == "record":
            return self._record(schema, t, path, namespace)
        if kind in ("enum", "fixed"):
            self._define(schema, namespace)
        if kind == "null":
            if pa.types.is_null(t):
                return AvroNode("null", path, t)
            raise _misfit(path, schema, t)
        node = AvroNode(kind, path, t)
        if kind == "boolean" and pa.types.is_boolean(t):
            return node
        if kind in ("int", "long") and pa.types.is_integer(t):  # as they are, any logical type
            node.int_range = _int_range(kind, t)
            return node
        if kind == "int" and pa.types.is_date(t):
            return node
        if kind == "int" and pa.types.is_time32(t) and logical in (None, "time-millis"):
            node.unit = "ms"
            return node
        if kind == "long" and pa.types.is_time64(t) and logical in (None, "time-micros"):
            node.unit = "us"
            return node
        if kind == "long" and pa.types.is_timestamp(t):
            zoned = t.tz is not None
            if logical is None:
                node.unit = "ms"  # Spark: a plain long gets milliseconds
                return node
            if logical in _LOGICAL_UNITS and logical.startswith("local-") != zoned:
                node.unit = _LOGICAL_UNITS[logical]
                return node
            raise _misfit(
                path,
                schema,
                t,
                "a timestamp with a zone takes timestamp-millis/micros/nanos, one without "
                "local-timestamp-millis/micros/nanos",
            )
        if kind == "float" and pa.types.is_float32(t):
            return node
        if kind == "double" and pa.types.is_floating(t) and not pa.types.is_float16(t):
            return node
        if kind == "string" and (pa.types.is_string(t) or pa.types.is_large_string(t)):
            return node
        if kind == "enum" and (pa.types.is_string(t) or pa.types.is_large_string(t)):
            node.symbols = tuple(schema["symbols"])
            return node
        if logical == "decimal" and kind in ("bytes", "fixed"):
            if not pa.types.is_decimal(t):
                raise _misfit(path, schema, t)
            node.decimal = True
            node.precision, node.scale = schema["precision"], schema.get("scale", 0)
            node.size = schema["size"] if kind == "fixed" else 0
            if node.scale != t.scale:
                raise _misfit(path, schema, t, f"the scales differ ({t.scale} and {node.scale})")
            return node
        if kind == "bytes" and _is_binary(t):
            return node
        if kind == "fixed" and _is_binary(t):
            node.size = schema["size"]
            if pa.types.is_fixed_size_binary(t) and t.byte_width != node.size:
                raise _misfit(path, schema, t, "the sizes differ")
            return node
        if kind == "array" and (pa.types.is_list(t) or pa.types.is_large_list(t)):
            item = self.bind(schema["items"], t.value_type, f"{path}[]", namespace, nullable=True)
            node.children = [item]
            return node
        if kind == "map" and pa.types.is_map(t):
            if not (pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)):
                raise _misfit(path, schema, t, "Avro maps are keyed by strings")
            key = AvroNode("string", f"{path}{{key}}", t.key_type)
            value = self.bind(
                schema["values"], t.item_type, f"{path}{{}}", namespace, nullable=True
            )
            node.children = [key, value]
            return node
        raise _misfit(path, schema, t)

    def _record(self, schema: dict, t: pa.DataType, path: str, namespace: str) -> AvroNode:
        space = self._define(schema, namespace)
        if not pa.types.is_struct(t):
            raise _misfit(path, schema, t)
        by_name = {t.field(i).name: i for i in range(t.num_fields)}
        fields = schema["fields"]
        known = {f["name"] for f in fields}
        extra = [name for name in by_name if name not in known]
        if extra:
            where = f"record {schema['name']}" + (f" (field {path})" if path else "")
            raise SchemaError(
                f"Avro schema does not fit the columns: {where} has no field for the column "
                f"{'.'.join(filter(None, [path, extra[0]]))} ({t.field(extra[0]).type})"
            )
        node = AvroNode("record", path, t)
        for f in fields:
            name = f["name"]
            at = f"{path}.{name}" if path else name
            if name in by_name:
                i = by_name[name]
                child = self.bind(f["type"], t.field(i).type, at, space, nullable=True)
                node.children.append(child)
                node.columns.append(i)
                continue
            resolved = self._resolve(f["type"], space)
            nulls = (
                [i for i, b in enumerate(resolved) if b == "null"]
                if isinstance(resolved, list)
                else []
            )
            if not nulls and resolved != "null":
                raise SchemaError(
                    f"Avro schema does not fit the columns: field {at} ({type_name(f['type'])}) "
                    "has no column and cannot be null"
                )
            index = nulls[0] if nulls else None
            node.children.append(
                AvroNode("absent", at, pa.null(), null_index=index, value_index=index)
            )
            node.columns.append(None)
        return node


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _int_range(kind: str, t: pa.DataType) -> tuple[int, int] | None:
    """The range a column's values must be checked against, or None when its type fits."""
    bits = 32 if kind == "int" else 64
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    width = t.bit_width
    signed = pa.types.is_signed_integer(t)
    if signed and width <= bits or not signed and width < bits:
        return None
    return lo, hi
