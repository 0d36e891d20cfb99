"""JSON Schema values: a schema from Arrow columns or a `.json` file, rows checked against it,
and JSON payloads decoded into Arrow columns.

The bytes of a JSON Schema value are the bytes of `format: json` (Spark's `to_json` rendering:
null fields left out, timestamps and dates as ISO text, binary as base64); only the framing and
the registry differ. Checking rows costs a per-row validator call, so it is paid only where the
Arrow types cannot answer: the schema's structure (types, properties, required, items) is
checked once against the column types, a required column's nulls by one vectorized count, and
the `jsonschema` validator runs on each row only when the schema has keywords beyond the
structure (minimum, pattern, enum, ...). Decoding reads all payloads at once with Arrow's JSON
reader against the reader schema's types.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core.errors import SchemaError

__all__ = [
    "arrow_type_for_json_schema",
    "check_json_rows",
    "decode_json_values",
    "json_misfits",
    "json_schema_for",
    "parse_json_schema",
]

DRAFT = "http://json-schema.org/draft-07/schema#"
# keywords the structural check answers from the column types; anything else needs the validator
_STRUCTURAL = {
    "$schema",
    "$id",
    "title",
    "description",
    "type",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "format",
    "contentEncoding",
    "oneOf",
    "anyOf",
    "connect.type",
    "default",
    "examples",
}
_CONNECT_INTS = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64()}
_CONNECT_FLOATS = {"float32": pa.float32(), "float64": pa.float64()}


# --- derived schemas --------------------------------------------------------------------------


def _schema_of(arrow: pa.DataType, where: str) -> dict[str, Any]:
    if pa.types.is_boolean(arrow):
        return {"type": "boolean"}
    if pa.types.is_integer(arrow):
        return {"type": "integer", "connect.type": _int_name(arrow)}
    if pa.types.is_floating(arrow):
        return {"type": "number", "connect.type": "float32" if arrow == pa.float32() else "float64"}
    if pa.types.is_decimal(arrow):
        return {"type": "number"}
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):
        return {"type": "string"}
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
        return {"type": "string", "contentEncoding": "base64"}
    if pa.types.is_date32(arrow):
        return {"type": "string", "format": "date"}
    if pa.types.is_timestamp(arrow):
        return {"type": "string", "format": "date-time"}
    if pa.types.is_struct(arrow):
        properties = {
            f.name: _nullable(_schema_of(f.type, f"{where}.{f.name}"), f.nullable) for f in arrow
        }
        required = [f.name for f in arrow if not f.nullable]
        out: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            out["required"] = required
        return out
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return {
            "type": "array",
            "items": _nullable(
                _schema_of(arrow.value_type, f"{where}[]"), arrow.value_field.nullable
            ),
        }
    if pa.types.is_map(arrow):
        if not (pa.types.is_string(arrow.key_type) or pa.types.is_large_string(arrow.key_type)):
            raise SchemaError(f"{where}: a JSON object's keys are text, not {arrow.key_type}")
        return {
            "type": "object",
            "additionalProperties": _nullable(
                _schema_of(arrow.item_type, f"{where}{{}}"), arrow.item_field.nullable
            ),
        }
    raise SchemaError(f"{where}: Arrow type {arrow} has no JSON Schema form here")


def _int_name(arrow: pa.DataType) -> str:
    return {8: "int8", 16: "int16", 32: "int32"}.get(arrow.bit_width, "int64")


def _nullable(schema: dict[str, Any], nullable: bool) -> dict[str, Any]:
    return {"oneOf": [{"type": "null"}, schema]} if nullable else schema


def json_schema_for(arrow_type: pa.DataType, title: str = "topLevelRecord") -> dict[str, Any]:
    """A draft-07 JSON Schema for values of `arrow_type` as `format: json` renders them."""
    schema = _schema_of(arrow_type, title)
    return {"$schema": DRAFT, "title": title, **schema}


def parse_json_schema(text: str, where: str = "schema") -> dict[str, Any]:
    """A JSON Schema document (an object that the validator accepts), else SchemaError."""
    from jsonschema import exceptions, validators

    try:
        schema = json.loads(text)
    except json.JSONDecodeError as e:
        raise SchemaError(f"{where}: not JSON ({e})") from None
    if not isinstance(schema, dict):
        raise SchemaError(f"{where}: a JSON Schema is an object, got {type(schema).__name__}")
    try:
        validators.validator_for(schema).check_schema(schema)
    except exceptions.SchemaError as e:
        raise SchemaError(f"{where}: not a valid JSON Schema: {e.message}") from None
    return schema


# --- the schema's shape as column types --------------------------------------------------------


def _without_null(schema: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """(the schema of the non-null values, whether null is allowed)."""
    for key in ("oneOf", "anyOf"):
        branches = schema.get(key)
        if isinstance(branches, list):
            rest = [b for b in branches if b != {"type": "null"}]
            if len(rest) == 1 and len(rest) < len(branches):
                merged = {k: v for k, v in schema.items() if k != key}
                return {**merged, **rest[0]}, True
    kind = schema.get("type")
    if isinstance(kind, list) and "null" in kind:
        rest = [k for k in kind if k != "null"]
        if len(rest) == 1:
            return {**schema, "type": rest[0]}, True
    return schema, kind == "null"


def arrow_type_for_json_schema(schema: Mapping[str, Any], where: str = "schema") -> pa.DataType:
    """The Arrow type values of this schema decode into (objects with properties -> structs in
    property order, objects with only additionalProperties -> maps, arrays -> lists, integers
    -> int64 unless `connect.type` says narrower, numbers -> double, date-time strings ->
    timestamps, date strings -> dates, base64 strings -> binary)."""
    body, _ = _without_null(schema)
    if "$ref" in body:
        raise SchemaError(f"{where}: $ref is not followed here; inline the referenced schema")
    kind = body.get("type")
    if kind == "object" or (kind is None and "properties" in body):
        properties = body.get("properties")
        if isinstance(properties, Mapping) and properties:
            return pa.struct(
                [
                    pa.field(name, arrow_type_for_json_schema(sub, f"{where}.{name}"))
                    for name, sub in properties.items()
                ]
            )
        extra = body.get("additionalProperties")
        if isinstance(extra, Mapping):
            return pa.map_(pa.string(), arrow_type_for_json_schema(extra, f"{where}{{}}"))
        raise SchemaError(f"{where}: an object with neither properties nor a schema for its values")
    if kind == "array":
        items = body.get("items")
        if not isinstance(items, Mapping):
            raise SchemaError(f"{where}: an array needs one schema for its items")
        return pa.list_(arrow_type_for_json_schema(items, f"{where}[]"))
    if kind == "integer":
        return _CONNECT_INTS.get(body.get("connect.type"), pa.int64())
    if kind == "number":
        return _CONNECT_FLOATS.get(body.get("connect.type"), pa.float64())
    if kind == "boolean":
        return pa.bool_()
    if kind == "string":
        if body.get("format") == "date-time":
            return pa.timestamp("us", tz="UTC")
        if body.get("format") == "date":
            return pa.date32()
        if body.get("contentEncoding") == "base64":
            return pa.binary()
        return pa.string()
    raise SchemaError(f"{where}: JSON Schema type {kind!r} has no single column type")


# --- checking rows ----------------------------------------------------------------------------


_SCALAR_TYPES = {"string", "integer", "number", "boolean"}


def _is_scalar_leaf(schema: Any) -> bool:
    """A property schema of one scalar type, self-contained (no reference to elsewhere)."""
    if not isinstance(schema, Mapping) or "$ref" in json.dumps(schema):
        return False
    return _without_null(schema)[0].get("type") in _SCALAR_TYPES


def _structural_only(schema: Any, in_container: bool = False, property_: bool = False) -> bool:
    """True when the column checks answer the whole schema, so no row goes through the
    validator: every object-level keyword is one the column types answer, and each scalar
    property reached through objects only (not inside a list or a map) is checked by column
    (`_check_leaves`: bounds by Arrow compute, other keywords by the validator on the column's
    distinct values)."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, Mapping):
        return False
    if property_ and not in_container and _is_scalar_leaf(schema):
        return True
    if set(schema) - _STRUCTURAL:
        return False
    if schema.get("format") not in (None, "date", "date-time"):
        return False
    subs: list[tuple[Any, bool, bool]] = [
        (s, in_container, True) for s in (schema.get("properties") or {}).values()
    ]
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping):
            subs.append((schema[key], True, False))
    for key in ("oneOf", "anyOf"):
        if key in schema:
            body, nullable = _without_null(schema)
            if body.get(key) is not None or not nullable:
                return False
            subs.append(({k: v for k, v in body.items()}, in_container, property_))
    return all(_structural_only(s, inside, prop) for s, inside, prop in subs)


# bounds a column answers at once (Arrow compute), for properties reached through objects only
_LEAF_KEYWORDS = {
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "enum",
    "const",
    "minLength",
    "maxLength",
}


# rows that break a rule: (which rows, where below the value, why for one of them)
_Broken = tuple[np.ndarray, str, Callable[[int], str]]


def _leaf_violations(column: pa.Array, body: Mapping[str, Any]) -> list[tuple[np.ndarray, str]]:
    """(rows where the column breaks a bound, the rule) for each of the body's bounds broken."""
    numeric = pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
    if pa.types.is_decimal(column.type):  # JSON numbers are read as doubles by validators
        column, numeric = column.cast(pa.float64()), True
    rules: list[tuple[Any, str]] = []
    if numeric:
        for key, compare, word in (
            ("minimum", pc.less, "less than the minimum of"),
            ("maximum", pc.greater, "greater than the maximum of"),
            ("exclusiveMinimum", pc.less_equal, "less than or equal to the minimum of"),
            ("exclusiveMaximum", pc.greater_equal, "greater than or equal to the maximum of"),
        ):
            if isinstance(body.get(key), (int, float)) and not isinstance(body.get(key), bool):
                rules.append((compare(column, body[key]), f"is {word} {body[key]}"))
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        lengths = pc.utf8_length(column)
        if isinstance(body.get("minLength"), int):
            rules.append(
                (pc.less(lengths, body["minLength"]), f"is shorter than {body['minLength']}")
            )
        if isinstance(body.get("maxLength"), int):
            rules.append(
                (pc.greater(lengths, body["maxLength"]), f"is longer than {body['maxLength']}")
            )
    allowed = body.get("enum")
    if "const" in body:
        allowed = [body["const"]]
    if isinstance(allowed, list):
        kinds = [v for v in allowed if v is not None and not isinstance(v, (dict, list))]
        try:
            inside = pc.is_in(column, value_set=pa.array(kinds, column.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            inside = pa.array(np.zeros(len(column), bool))  # no member of the column's type
        rules.append((pc.invert(inside), f"is not one of {allowed}"))
    found = []
    for broken, why in rules:
        broken = pc.and_(broken, pc.is_valid(column)).fill_null(False)
        if pc.any(broken).as_py():
            found.append((broken.to_numpy(zero_copy_only=False), why))
    return found


def _check_leaves(
    values: pa.Array, schema: Any, path: str, validator: Any, broken: list[_Broken]
) -> bool:
    """The vectorized bounds of every property reached through objects: each bound a row
    breaks goes to `broken`. False when a bound sits on a column these checks do not compare
    (a timestamp, a date, binary: their JSON is text): the validator's then."""
    if not isinstance(schema, Mapping) or not pa.types.is_struct(values.type):
        return True
    body, _ = _without_null(schema)
    handled = True
    for name, sub in (body.get("properties") or {}).items():
        if values.type.get_field_index(name) < 0 or not isinstance(sub, Mapping):
            continue
        column = pc.struct_field(values, name)  # null where the row or a parent is null
        here = f"{path}.{name}"
        if pa.types.is_struct(column.type):
            handled &= _check_leaves(column, sub, here, validator, broken)
            continue
        leaf = _without_null(sub)[0]
        others = set(leaf) - _STRUCTURAL - _LEAF_KEYWORDS
        if (set(leaf) & _LEAF_KEYWORDS or others) and not _comparable(column.type):
            handled = False
            continue
        found = _leaf_violations(column, leaf)
        if others:
            found += _distinct_violations(column, sub, validator)
        for rows, why in found:
            broken.append((rows, here, _shown(column, why)))
    return handled


def _shown(column: pa.Array, why: str) -> Callable[[int], str]:
    return lambda row: f"{column[row].as_py()!r} {why}"


def _distinct_violations(
    column: pa.Array, schema: Mapping[str, Any], validator: Any
) -> list[tuple[np.ndarray, str]]:
    """The validator on each distinct value of a scalar column instead of on each row (a
    currency column has a handful): the rows holding each value it refuses, and why."""
    values = column.cast(pa.float64()) if pa.types.is_decimal(column.type) else column
    check = validator.evolve(schema=schema)
    found = []
    for value in pc.unique(values.drop_null()).to_pylist():
        error = next(iter(check.iter_errors(value)), None)
        if error is not None:
            rows = pc.equal(values, pa.scalar(value, values.type)).fill_null(False)
            found.append((rows.to_numpy(zero_copy_only=False), f"is refused: {error.message}"))
    return found


def _comparable(t: pa.DataType) -> bool:
    """Column types whose JSON value the leaf checks compare exactly as a validator would."""
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_boolean(t)
    )


def _fits(
    arrow: pa.DataType, schema: Any, where: str, nested_nullable: list[str], top: bool = False
) -> None:
    """SchemaError naming the first column whose type the schema refuses; required properties
    whose columns may hold nulls below the top level go to `nested_nullable` (the validator's)."""
    if isinstance(schema, bool):
        if not schema:
            raise SchemaError(f"{where}: the schema allows no value here")
        return
    body, _ = _without_null(schema)
    kind = body.get("type")
    if kind is None:
        return
    kinds = kind if isinstance(kind, list) else [kind]
    if pa.types.is_struct(arrow) or pa.types.is_map(arrow):
        found = "object"
    elif pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        found = "array"
    elif pa.types.is_boolean(arrow):
        found = "boolean"
    elif pa.types.is_integer(arrow):
        found = "integer"
    elif pa.types.is_floating(arrow) or pa.types.is_decimal(arrow):
        found = "number"
    else:
        found = "string"
    if found not in kinds and not (found == "integer" and "number" in kinds):
        raise SchemaError(f"{where}: the schema wants {kind}, the column is {arrow} ({found})")
    if pa.types.is_struct(arrow):
        properties = body.get("properties") or {}
        names = {f.name for f in arrow}
        for name in body.get("required") or []:
            if name not in names:
                raise SchemaError(f"{where}: the schema requires {name!r}, no column has that name")
        for f in arrow:
            sub = properties.get(f.name)
            if sub is None:
                extra = body.get("additionalProperties", True)
                if extra is False:
                    raise SchemaError(f"{where}.{f.name}: the schema allows no property {f.name!r}")
                sub = extra if isinstance(extra, Mapping) else True
            if not top and f.name in (body.get("required") or []) and f.nullable:
                nested_nullable.append(f"{where}.{f.name}")
            _fits(f.type, sub, f"{where}.{f.name}", nested_nullable)
    elif found == "array" and isinstance(body.get("items"), Mapping):
        if arrow.value_field.nullable and not _without_null(body["items"])[1]:
            nested_nullable.append(f"{where}[]")  # null elements render as null
        _fits(arrow.value_type, body["items"], f"{where}[]", nested_nullable)
    elif pa.types.is_map(arrow) and isinstance(body.get("additionalProperties"), Mapping):
        if arrow.item_field.nullable and not _without_null(body["additionalProperties"])[1]:
            nested_nullable.append(f"{where}{{}}")
        _fits(arrow.item_type, body["additionalProperties"], f"{where}{{}}", nested_nullable)


def _top_level_required_nulls(
    values: pa.Array, schema: Mapping[str, Any], broken: list[_Broken]
) -> None:
    """A required property whose column is null in some (non-null) row: one vectorized count
    per such column; nested required properties are left to the validator below."""
    body, _ = _without_null(schema)
    if not pa.types.is_struct(values.type):
        return
    present = pc.is_valid(values)
    for name in body.get("required") or []:
        if values.type.get_field_index(name) < 0:
            continue
        column = pc.struct_field(values, name)
        missing = pc.and_(present, pc.is_null(column))
        if pc.any(missing).as_py():
            why = f"required property {name!r} is null"
            broken.append((missing.to_numpy(zero_copy_only=False), "", lambda _, why=why: why))


def _misfit_rows(
    values: pa.Array, encoded: pa.Array, schema: Mapping[str, Any], where: str
) -> list[tuple[int, str, str]]:
    """(row, where below the value, why) of each row that breaks the schema, by row, its first
    reason. Column types the schema refuses are a SchemaError (no row would fit)."""
    nested_nullable: list[str] = []
    _fits(values.type, schema, where, nested_nullable, top=True)
    broken: list[_Broken] = []
    _top_level_required_nulls(values, schema, broken)
    from jsonschema import validators

    validator = validators.validator_for(schema)(schema)
    handled = _check_leaves(values, schema, "", validator, broken)
    first: dict[int, tuple[str, str]] = {}
    for rows, path, why in broken:
        for row in np.flatnonzero(rows).tolist():
            if row not in first:
                first[row] = (path, why(row))
    if not (_structural_only(schema) and not nested_nullable and handled):
        for row, text in enumerate(encoded.to_pylist()):
            if text is None or row in first:
                continue
            error = next(iter(validator.iter_errors(json.loads(text))), None)
            if error is not None:
                path = "".join(
                    f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path
                )
                first[row] = (path, error.message)
    return [(row, *first[row]) for row in sorted(first)]


def json_misfits(
    values: pa.Array, encoded: pa.Array, schema: Mapping[str, Any], where: str = "value"
) -> list[tuple[int, str]]:
    """Each row that breaks the schema (row index, the first reason, naming the field), by
    row: the column types once, required columns' nulls and the bounds of plain properties
    (minimum, maximum, enum, lengths) vectorized, and only when the schema says more than that,
    each encoded row through the `jsonschema` validator. Column types the schema refuses are a
    SchemaError."""
    return [
        (row, f"field {path.lstrip('.')}: {why}" if path else why)
        for row, path, why in _misfit_rows(values, encoded, schema, where)
    ]


def check_json_rows(
    values: pa.Array, encoded: pa.Array, schema: Mapping[str, Any], where: str = "value"
) -> None:
    """`json_misfits` as a SchemaError naming the first row that breaks the schema and the
    field."""
    misfits = _misfit_rows(values, encoded, schema, where)
    if misfits:
        row, path, why = misfits[0]
        raise SchemaError(f"{where}{path}: row {row}: {why}")


# --- decoding ---------------------------------------------------------------------------------


def _raw_type(arrow: pa.DataType) -> pa.DataType:
    """What Arrow's JSON reader reads a column as before the casts (it reads timestamps, dates
    and base64 text as strings)."""
    if pa.types.is_timestamp(arrow) or pa.types.is_date32(arrow):
        return pa.string()
    if pa.types.is_struct(arrow):
        return pa.struct([f.with_type(_raw_type(f.type)) for f in arrow])
    if pa.types.is_list(arrow):
        return pa.list_(arrow.value_field.with_type(_raw_type(arrow.value_type)))
    return arrow


def _finish(raw: pa.Array, arrow: pa.DataType) -> pa.Array:
    """The raw column in its reader type: ISO text -> timestamp/date, base64 -> bytes."""
    if raw.type == arrow and not pa.types.is_binary(arrow) and not pa.types.is_nested(arrow):
        return raw
    if pa.types.is_timestamp(arrow) or pa.types.is_date32(arrow):
        return raw.cast(arrow)
    if pa.types.is_binary(arrow):
        return pa.array(
            [None if v is None else base64.b64decode(v) for v in raw.to_pylist()], pa.binary()
        )
    if pa.types.is_struct(arrow):
        children = [_finish(raw.field(i), f.type) for i, f in enumerate(arrow)]
        return pa.StructArray.from_arrays(children, fields=list(arrow), mask=pc.is_null(raw))
    if pa.types.is_list(arrow):
        values = _finish(raw.values, arrow.value_type)
        return pa.ListArray.from_arrays(raw.offsets, values, type=arrow, mask=pc.is_null(raw))
    return raw.cast(arrow)


def decode_json_values(payloads: Sequence[bytes], arrow_type: pa.DataType) -> pa.Array:
    """JSON documents -> one Arrow array of `arrow_type` (a struct: the reader schema's); a
    document that does not parse or does not fit raises ValueError (pyarrow's message)."""
    import pyarrow.json as pj

    if not pa.types.is_struct(arrow_type):
        raise SchemaError(f"a JSON value is read as an object of columns, not {arrow_type}")
    if not payloads:
        return pa.array([], arrow_type)
    raw_type = _raw_type(arrow_type)
    text = b"\n".join(payloads) + b"\n"
    try:
        table = pj.read_json(
            io.BytesIO(text),
            read_options=pj.ReadOptions(block_size=max(1 << 20, len(text) + 1)),
            parse_options=pj.ParseOptions(
                explicit_schema=pa.schema(list(raw_type)),
                unexpected_field_behavior="ignore",
                newlines_in_values=any(b"\n" in p for p in payloads),
            ),
        )
    except pa.ArrowInvalid as e:
        raise ValueError(str(e).splitlines()[0]) from None
    if table.num_rows != len(payloads):
        raise ValueError(f"{len(payloads)} documents read as {table.num_rows} rows")
    raw = pa.StructArray.from_arrays(
        [table.column(i).combine_chunks() for i in range(table.num_columns)], fields=list(raw_type)
    )
    try:
        return _finish(raw, arrow_type)
    except (pa.ArrowInvalid, ValueError) as e:
        raise ValueError(str(e).splitlines()[0]) from None
