"""Rows whose structured key or value does not fit its schema (Avro, JSON Schema, Protobuf):
with `output.reject_path` each goes to the rejects with its reason (the setting, the field and
what is wrong) and every other row is written, as fastavro, json and the protobuf runtime read
it back; without one, the run stops with one line naming the field and the row (its key and
source row id), in each task reader and write mode, and nothing is published."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import re
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from jobs.ingest import main, run
from jobs.ingestion.config.ingest_config import IngestConfig
from kafkalog_core.errors import InvalidRecordError
from kafkalog_core.schema.protobuf import parse_proto
from tests.jobs.ingest_helpers import read_root
from tests.schema.orders import runtime_class

pytestmark = pytest.mark.spark

N = 24
UTC = datetime.timezone.utc
VALUE_COLUMNS = ["id", "status", "qty", "amount", "note", "tags"]
SCHEMA = pa.schema(
    [
        ("sid", pa.string()),
        ("id", pa.int64()),
        ("status", pa.string()),
        ("qty", pa.int64()),
        ("amount", pa.decimal128(10, 2)),
        ("note", pa.string()),
        ("tags", pa.list_(pa.int64())),
        ("event_time", pa.timestamp("us", tz="UTC")),
    ]
)

AVSC = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "qty", "type": "int"},
        {
            "name": "amount",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2},
        },
        {"name": "note", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "long"}},
    ],
}
KEY_AVSC = {"type": "record", "name": "OrderKey", "fields": [{"name": "id", "type": "int"}]}
JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "status": {"type": "string", "enum": ["NEW", "PAID"]},
        "qty": {"type": "integer", "maximum": 100},
        "amount": {"type": "number"},
        "note": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "integer", "maximum": 9}},
    },
    "required": ["id", "status", "qty", "note"],
}
PROTO = """syntax = "proto3";
message Order {
  int64 id = 1;
  Status status = 2;
  int32 qty = 3;
  string amount = 4;
  optional string note = 5;
  repeated int32 tags = 6;
}
enum Status { NEW = 0; PAID = 1; }
"""

V = "mapping.value ({}): the row does not fit the value schema: "
# format -> {row: its changes, the reason it is rejected for (the error's text before "; record")}
MISFITS: dict[str, dict[int, tuple[dict[str, Any], str]]] = {
    "avro": {
        3: (
            {"status": "LOST"},
            V.format("format avro") + "field status is not a symbol of the enum",
        ),
        7: (
            {"amount": decimal.Decimal("123.45")},
            V.format("format avro") + "field amount has more digits than the decimal's precision 4",
        ),
        11: ({"qty": 2**40}, V.format("format avro") + "field qty does not fit an Avro int"),
        15: (
            {"note": None},
            V.format("format avro") + "field note is null and the schema has no null",
        ),
        19: (
            {"id": 2**35},
            "mapping.key (format avro): the row does not fit the key schema: "
            "field id does not fit an Avro int",
        ),
    },
    "json_schema": {
        3: (
            {"status": "LOST"},
            V.format("format json_schema") + "field status: 'LOST' is not one of ['NEW', 'PAID']",
        ),
        11: (
            {"qty": 2**40},
            V.format("format json_schema")
            + "field qty: 1099511627776 is greater than the maximum of 100",
        ),
        15: ({"note": None}, V.format("format json_schema") + "required property 'note' is null"),
        19: (
            {"tags": [1, 50]},
            V.format("format json_schema") + "field tags[1]: 50 is greater than the maximum of 9",
        ),
    },
    "protobuf": {
        3: (
            {"status": "LOST"},
            V.format("format protobuf") + 'field status: unknown enum label "LOST"',
        ),
        11: (
            {"qty": 2**40},
            V.format("format protobuf") + "field qty: Value out of range: 1099511627776",
        ),
        19: (
            {"tags": [1, 2**40]},
            V.format("format protobuf") + "field tags[1]: Value out of range: 1099511627776",
        ),
    },
}


def _rows(fmt: str) -> list[dict[str, Any]]:
    rows = []
    for i in range(N):
        row = {
            "sid": f"row-{i:02d}",
            "id": i,
            "status": "PAID" if i % 2 else "NEW",
            "qty": i * 3,
            "amount": decimal.Decimal(i * 125).scaleb(-2),
            "note": f"n{i}",
            "tags": [i % 7, i % 5],
            "event_time": datetime.datetime(2024, 5, 1, tzinfo=UTC) + datetime.timedelta(seconds=i),
        }
        row.update(MISFITS[fmt].get(i, ({}, ""))[0])
        rows.append(row)
    return rows


@pytest.fixture(scope="module", params=list(MISFITS))
def case(request, tmp_path_factory) -> dict[str, Any]:
    return _case(request.param, tmp_path_factory.mktemp(request.param))


def _case(fmt: str, base: Path) -> dict[str, Any]:
    """One format's source (one Parquet file: the source row id is the row's index) and its
    key/value mapping, each with a schema file the misfit rows break."""
    rows = _rows(fmt)
    (base / "src").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, SCHEMA), base / "src" / "part-0.parquet")
    value: dict[str, Any] = {"columns": VALUE_COLUMNS, "format": fmt}
    key: dict[str, Any] = {"column": "sid", "format": "string"}
    if fmt == "avro":
        (base / "order.avsc").write_text(json.dumps(AVSC))
        (base / "key.avsc").write_text(json.dumps(KEY_AVSC))
        value["schema_file"] = str(base / "order.avsc")
        key = {"columns": ["id"], "format": "avro", "schema_file": str(base / "key.avsc")}
    elif fmt == "json_schema":
        (base / "order.json").write_text(json.dumps(JSON_SCHEMA))
        value["schema_file"] = str(base / "order.json")
    else:
        (base / "order.proto").write_text(PROTO)
        value["schema_file"] = str(base / "order.proto")
    return {"format": fmt, "rows": rows, "base": base, "key": key, "value": value}


def _doc(case: dict, root: Path, *, reader: str, mode: str, rejects: Path | None = None) -> dict:
    return {
        "source": {
            "format": "parquet",
            "path": str(case["base"] / "src"),
            "task_reader": reader,
        },
        "output": {
            "root": str(root),
            "write_mode": mode,
            "reject_path": None if rejects is None else str(rejects),
        },
        "topics": {"orders": {"partitions": 2}},
        "mapping": {
            "topic": "orders",
            "key": case["key"],
            "value": case["value"],
            "headers": {"values": {"sid": "sid"}},  # which source row a record or reject is
            "timestamp": {"column": "event_time"},
        },
        "ordering": ["event_time"] if mode == "range" else "source",
    }


def _decoder(case: dict):
    fmt = case["format"]
    if fmt == "avro":
        parsed = fastavro.parse_schema(AVSC)
        return lambda b: fastavro.schemaless_reader(io.BytesIO(b), parsed)
    if fmt == "json_schema":
        return lambda b: json.loads(b, parse_float=decimal.Decimal)
    message = runtime_class(parse_proto(PROTO))

    def decode(b: bytes) -> dict:
        m = message.FromString(b)
        return {
            "id": m.id,
            "status": ["NEW", "PAID"][m.status],
            "qty": m.qty,
            "amount": decimal.Decimal(m.amount),
            "note": m.note,
            "tags": list(m.tags),
        }

    return decode


def _expected_value(row: dict) -> dict:
    return {c: row[c] for c in VALUE_COLUMNS}


def test_misfit_rows_go_to_the_rejects_with_their_reason(spark, case, tmp_path):
    misfits = MISFITS[case["format"]]
    rows = case["rows"]
    root, rejects = tmp_path / "logs", tmp_path / "rejects"
    doc = _doc(case, root, reader="spark", mode="range", rejects=rejects)
    lines: list[str] = []
    result = run(spark, IngestConfig.from_dict(doc), run_id="mis-1", out=lines.append)
    assert (result.status, result.rejected, result.records) == (
        "committed",
        len(misfits),
        N - len(misfits),
    )
    assert f"kafkalog: {len(misfits)} invalid rows written to {rejects}" in lines

    rejected = pq.read_table(rejects / "run_id=mis-1").to_pylist()
    by_sid = {r["headers"][0]["value"].decode(): r for r in rejected}
    assert len(by_sid) == len(rejected) == len(misfits)
    for i, (_, reason) in misfits.items():
        got = by_sid[f"row-{i:02d}"]
        assert got["error"].split("; record: ")[0] == reason, got["error"]
        assert got["error"].endswith(f"source row id={i}"), got["error"]
        assert got["source_row_id"] == i
        field = "key" if reason.startswith("mapping.key") else "value"
        assert got[field] is None  # a misfit is never half written

    decode = _decoder(case)
    records = read_root(root)
    written = {r[5][0]["value"].decode(): r for r in records}
    good = [r for i, r in enumerate(rows) if i not in misfits]
    assert len(written) == len(records) == len(good)
    assert sorted(written) == [r["sid"] for r in good]
    for row in good:
        _, _, _, key, value, _, timestamp = written[row["sid"]]
        assert decode(value) == _expected_value(row), row["sid"]
        if case["format"] == "avro":
            key_schema = fastavro.parse_schema(KEY_AVSC)
            assert fastavro.schemaless_reader(io.BytesIO(key), key_schema) == {"id": row["id"]}
        else:
            assert key == row["sid"].encode()
        assert timestamp == int(row["event_time"].timestamp() * 1000)


def _one_line(text: str) -> str:
    assert text and "\n" not in text.strip(), f"not one line: {text!r}"
    assert "Traceback" not in text and "Py4J" not in text and "org.apache.spark" not in text
    return text.strip()


def _names_a_misfit_row(case: dict, message: str) -> None:
    """The line is a misfit row's reason and names that row: its key and source row id."""
    misfits = MISFITS[case["format"]]
    found = re.search(r"source row id=(\d+)$", message)
    assert found, message
    row = int(found.group(1))
    assert row in misfits, message
    assert message.split("; record: ")[0] == misfits[row][1], message
    if case["key"].get("format") == "string":
        assert f"key='row-{row:02d}'" in message, message


def _stops_with_one_line(spark, case: dict, root: Path, reader: str) -> None:
    doc = _doc(case, root, reader=reader, mode="direct")
    with pytest.raises(InvalidRecordError) as info:
        run(spark, IngestConfig.from_dict(doc), run_id="mis-2", out=lambda _: None)
    _names_a_misfit_row(case, _one_line(str(info.value)))
    assert not root.exists() or not any(root.iterdir()), "nothing may be published"


def test_without_a_reject_path_a_misfit_stops_the_run_with_one_line(spark, case, tmp_path):
    # the arrow task reader, direct mode: its write tasks encode and find the misfits
    _stops_with_one_line(spark, case, tmp_path / "logs", "arrow")


def test_spark_reader_direct_mode_stops_in_its_write_tasks(spark, tmp_path):
    # Spark's reader, direct mode: the tasks check what stage 1 encoded, the same check for
    # every format (the Spark mapping's own stop, in range mode, is the job test's below)
    _stops_with_one_line(spark, _case("avro", tmp_path / "avro"), tmp_path / "logs", "spark")


def test_the_job_prints_the_misfit_as_its_one_error_line(spark, case, tmp_path, capsys):
    root = tmp_path / "logs"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_doc(case, root, reader="spark", mode="range")))
    capsys.readouterr()
    assert main(["--config", str(path), "--run-id", "mis-3"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("kafkalog: error: mapping."), line
    _names_a_misfit_row(case, line[len("kafkalog: error: ") :])
    assert not root.exists() or not any(root.iterdir()), "nothing may be published"
