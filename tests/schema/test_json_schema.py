"""JSON Schema values: derived schemas accepted by the `jsonschema` validator for the JSON that
`format: json` renders, the row checks (structure once, per-row validator only for keywords
beyond it), and JSON decoded into the reader schema's Arrow types."""

from __future__ import annotations

import datetime as dt
import json

import jsonschema
import pyarrow as pa
import pytest

from kafkalog_core.errors import SchemaError
from kafkalog_core.schema.json_schema import (
    arrow_type_for_json_schema,
    check_json_rows,
    decode_json_values,
    json_misfits,
    json_schema_for,
    parse_json_schema,
)
from tests.schema.orders import ORDER_COLUMNS

ORDER = pa.struct(
    [
        *ORDER_COLUMNS,
        ("blob", pa.binary()),
        ("address", pa.struct([("city", pa.string())])),
    ]
)
# what Spark's to_json writes for rows of ORDER (null fields left out)
DOCS = [
    b'{"id":7,"customer":"ada","amount":12.50,"day":"2024-05-01",'
    b'"at":"2024-05-01T12:00:00.123Z","tags":["new",null],"blob":"AAE=","address":{"city":"Paris"}}',
    b'{"id":8}',
]


def test_derived_schema_accepts_the_rendered_json() -> None:
    schema = json_schema_for(ORDER, "Order")
    validator = jsonschema.Draft7Validator(schema)
    jsonschema.Draft7Validator.check_schema(schema)
    for doc in DOCS:
        assert list(validator.iter_errors(json.loads(doc))) == []
    assert schema["required"] == ["id"]
    assert not validator.is_valid({"customer": "no id"})


def test_reader_types_from_a_schema_and_decoding() -> None:
    schema = json_schema_for(ORDER, "Order")
    arrow = arrow_type_for_json_schema(schema)
    assert arrow == pa.struct(
        [
            ("id", pa.int64()),
            ("customer", pa.string()),
            ("amount", pa.float64()),
            ("day", pa.date32()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("tags", pa.list_(pa.string())),
            ("blob", pa.binary()),
            ("address", pa.struct([("city", pa.string())])),
        ]
    )
    decoded = decode_json_values(DOCS, arrow).to_pylist()
    assert decoded[0] == {
        "id": 7,
        "customer": "ada",
        "amount": 12.5,
        "day": dt.date(2024, 5, 1),
        "at": dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=dt.timezone.utc),
        "tags": ["new", None],
        "blob": b"\x00\x01",
        "address": {"city": "Paris"},
    }
    assert decoded[1]["id"] == 8 and decoded[1]["address"] is None
    with pytest.raises(ValueError):
        decode_json_values([b'{"id": "x"}'], arrow)


def test_structural_schema_checks_without_the_validator_per_row() -> None:
    values = pa.array([{"id": 1, "customer": None}, {"id": 2, "customer": "b"}], ORDER)
    # no encoded rows are handed over: a per-row validator would fail on them
    check_json_rows(values, pa.array([None, None], pa.binary()), json_schema_for(ORDER), "value")
    required = {
        "type": "object",
        "properties": {"customer": {"type": "string"}},
        "required": ["customer"],
    }
    with pytest.raises(SchemaError, match="value: row 0: required property 'customer' is null"):
        check_json_rows(values, pa.array([None, None], pa.binary()), required, "value")
    with pytest.raises(
        SchemaError, match=r"value\.id: the schema wants string, the column is int64"
    ):
        check_json_rows(
            values,
            pa.array([], pa.binary()),
            {"properties": {"id": {"type": "string"}}, "type": "object"},
            "value",
        )
    closed = {
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "additionalProperties": False,
    }
    with pytest.raises(SchemaError, match=r"value\.customer: the schema allows no property"):
        check_json_rows(values, pa.array([], pa.binary()), closed, "value")


def test_keywords_beyond_the_structure_run_the_validator_on_each_row() -> None:
    # a pattern on the items of a list: no column holds them alone, the rows go through
    items = {"type": "array", "items": {"type": "string", "pattern": "^a"}}
    schema = {"type": "object", "properties": {"tags": items}}
    arrow = pa.struct([("tags", pa.list_(pa.string()))])
    values = pa.array([{"tags": ["ann"]}, {"tags": ["al", "bob"]}], arrow)
    encoded = pa.array([b'{"tags":["ann"]}', b'{"tags":["al","bob"]}'], pa.binary())
    with pytest.raises(SchemaError, match=r"value\.tags\[1\]: row 1: 'bob' does not match '\^a'"):
        check_json_rows(values, encoded, schema, "value")


def test_parse_refusals() -> None:
    with pytest.raises(SchemaError, match="orders.json: not JSON"):
        parse_json_schema("{nope", "orders.json")
    with pytest.raises(SchemaError, match="not a valid JSON Schema"):
        parse_json_schema('{"type": 5}', "orders.json")
    assert parse_json_schema('{"type": "object"}') == {"type": "object"}
    with pytest.raises(SchemaError, match=r"\$ref is not followed"):
        arrow_type_for_json_schema({"$ref": "#/definitions/x"})


def test_connect_type_hints_keep_narrow_numbers_narrow() -> None:
    schema = json_schema_for(pa.struct([("n", pa.int32()), ("f", pa.float32())]))
    assert arrow_type_for_json_schema(schema) == pa.struct([("n", pa.int32()), ("f", pa.float32())])


def test_bounds_of_plain_properties_are_checked_by_column_not_per_row() -> None:
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 1},
            "name": {"type": "string", "maxLength": 3, "enum": ["ann", "bob", "cy"]},
            "inner": {
                "type": "object",
                "properties": {"x": {"type": "number", "exclusiveMaximum": 5}},
            },
        },
    }
    arrow = pa.struct(
        [("id", pa.int64()), ("name", pa.string()), ("inner", pa.struct([("x", pa.float64())]))]
    )
    ok = pa.array(
        [{"id": 1, "name": "ann", "inner": {"x": 4.5}}, {"id": 2, "name": None, "inner": None}],
        arrow,
    )
    never = pa.array([None, None], pa.binary())  # the validator would fail on these: not run
    check_json_rows(ok, never, schema, "value")
    cases = [
        (
            {"id": 0, "name": "ann", "inner": None},
            r"value\.id: row 1: 0 is less than the minimum of 1",
        ),
        ({"id": 1, "name": "dave", "inner": None}, r"value\.name: row 1: 'dave' is longer than 3"),
        ({"id": 1, "name": "al", "inner": None}, r"value\.name: row 1: 'al' is not one of"),
        (
            {"id": 1, "name": None, "inner": {"x": 5.0}},
            r"value\.inner\.x: row 1: 5\.0 is greater than or equal",
        ),
    ]
    for bad, message in cases:
        rows = pa.array([ok[0].as_py(), bad], arrow)
        with pytest.raises(SchemaError, match=message):
            check_json_rows(rows, never, schema, "value")
    # the same schema through the validator agrees on each case
    validator = jsonschema.Draft7Validator(schema)
    assert all(
        not validator.is_valid({k: v for k, v in bad.items() if v is not None}) for bad, _ in cases
    )


def test_misfits_list_every_row_with_its_first_reason() -> None:
    """Each bad row once, by row, whichever check finds it (a required null, a bound of a
    column, a refused distinct value, the per-row validator for a list's items); the rows the
    column checks find are not validated again."""
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 1, "maximum": 9},
            "code": {"type": "string", "pattern": "^[A-Z]+$"},
            "xs": {"type": "array", "items": {"type": "integer", "maximum": 5}},
        },
        "required": ["code"],
    }
    arrow = pa.struct([("id", pa.int64()), ("code", pa.string()), ("xs", pa.list_(pa.int64()))])
    rows = [
        {"id": 1, "code": "A", "xs": [1]},
        {"id": 0, "code": "A", "xs": [1]},
        {"id": 10, "code": "A", "xs": [9]},  # two problems: the column check's comes first
        {"id": 2, "code": None, "xs": []},
        {"id": 3, "code": "a", "xs": []},
        {"id": 4, "code": "B", "xs": [0, 6]},
        None,
    ]
    values = pa.array(rows, arrow)
    texts = [None if r is None else json.dumps(r).encode() for r in rows]
    texts[3] = b"not json: the validator never reads this row"
    assert json_misfits(values, pa.array(texts, pa.binary()), schema) == [
        (1, "field id: 0 is less than the minimum of 1"),
        (2, "field id: 10 is greater than the maximum of 9"),
        (3, "required property 'code' is null"),
        (4, "field code: 'a' is refused: 'a' does not match '^[A-Z]+$'"),
        (5, "field xs[1]: 6 is greater than the maximum of 5"),
    ]


def test_other_keywords_of_plain_properties_run_the_validator_on_distinct_values() -> None:
    schema = {
        "type": "object",
        "properties": {"currency": {"type": "string", "pattern": "^[A-Z]{3}$"}},
    }
    arrow = pa.struct([("currency", pa.string())])
    never = pa.array([None] * 4, pa.binary())  # a per-row validator would fail on these
    check_json_rows(
        pa.array([{"currency": c} for c in ["EUR", "USD", "EUR", None]], arrow), never, schema
    )
    rows = pa.array([{"currency": c} for c in ["EUR", "usd", "EUR", "usd"]], arrow)
    with pytest.raises(
        SchemaError, match=r"value\.currency: row 1: 'usd' is refused: 'usd' does not match"
    ):
        check_json_rows(rows, never, schema)
    # a scalar value (not an object) is never skipped: the validator sees each row
    with pytest.raises(SchemaError, match="row 0: 9 is greater than the maximum of 5"):
        check_json_rows(
            pa.array([9], pa.int64()), pa.array([b"9"]), {"type": "integer", "maximum": 5}
        )
