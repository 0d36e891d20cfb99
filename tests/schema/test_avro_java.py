"""Apache Avro's Java library (the avro jar inside pyspark, what the registry's serializers
are built on) reads the values we write and, writing them again from the Java values it read
(BigDecimal, LocalDate, Instant, UUID), gives the same bytes.

One JVM runs every case: `java AvroCheck.java` (a single-file program beside this test) with the
jars pyspark ships on its class path.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import fastavro
import pyarrow as pa
import pyspark
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog_core.schema import avro_schema_for, encode_avro
from tests.schema.columns import columns
from tests.schema.test_avro_encode import ORDERS, SCHEMA_FILE

JARS = Path(pyspark.__file__).parent / "jars"
PROGRAM = Path(__file__).parent / "java" / "AvroCheck.java"
NEEDED = (
    "avro-1.",
    "jackson-core-",
    "jackson-databind-",
    "jackson-annotations-",
    "slf4j-api-",
    "commons-compress-",
)


def java_check(cases: list[tuple[dict, bytes]], tmp_path: Path) -> list[list[str]]:
    """Each (schema, payload) through Avro Java: [rewritten hex, read everything, value]."""
    jars = [str(p) for p in sorted(JARS.glob("*.jar")) if p.name.startswith(NEEDED)]
    assert any(Path(j).name.startswith("avro-1.") for j in jars), f"no avro jar in {JARS}"
    source = tmp_path / "cases.txt"
    source.write_text("".join(f"{json.dumps(s)}\t{p.hex()}\n" for s, p in cases))
    run = subprocess.run(
        ["java", "-cp", ":".join(jars), str(PROGRAM), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [line.split("\t") for line in run.stdout.splitlines()]
    assert len(lines) == len(cases)
    return lines


@pytest.fixture(scope="module")
def random_cases() -> list[tuple[dict, bytes]]:
    """Random nested columns (Hypothesis draws them), every non-null row a case."""
    cases: list[tuple[dict, bytes]] = []

    @settings(
        max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    @given(array=columns(max_rows=5), seed=st.integers())
    def collect(array: pa.Array, seed: int) -> None:
        schema = avro_schema_for(array.type)
        cases.extend((schema, p) for p in encode_avro(array, schema).to_pylist() if p is not None)

    collect()
    schema = json.loads(json.dumps(SCHEMA_FILE))
    cases.extend((schema, p) for p in encode_avro(ORDERS, schema).to_pylist())
    decimals = pa.array(
        [{"d": v} for v in (-128, -129, 0, -1, 127, 128, -(10**37))],
        pa.struct([("d", pa.decimal128(38, 0))]),
    )
    bytes_schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {
                "name": "d",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 0},
            }
        ],
    }
    cases.extend((bytes_schema, p) for p in encode_avro(decimals, bytes_schema).to_pylist())
    return cases


def test_avro_java_reads_every_value_and_writes_the_same_bytes(random_cases, tmp_path):
    results = java_check(random_cases, tmp_path)
    for (schema, payload), result in zip(random_cases, results, strict=True):
        assert result[0] != "ERROR", f"{result[1]} for {json.dumps(schema)} {payload.hex()}"
        rewritten, read_all, _ = result
        assert read_all == "true", f"bytes left over in {payload.hex()}"
        if rewritten != payload.hex():
            # Java reads a map into a HashMap, so it writes the entries in its own order: the
            # same value, which fastavro reads back from both
            assert '"map"' in json.dumps(schema), json.dumps(schema)
            parsed = fastavro.parse_schema(schema)
            theirs = fastavro.schemaless_reader(io.BytesIO(bytes.fromhex(rewritten)), parsed)
            assert theirs == fastavro.schemaless_reader(io.BytesIO(payload), parsed)
    # the named values came through as Java read them (uuid parsed, decimal scale kept)
    orders = [
        r[2] for (s, _), r in zip(random_cases, results, strict=True) if s.get("name") == "Order"
    ]
    assert '"id": "123e4567-e89b-12d3-a456-426614174000"' in orders[0]
    assert '"at": "2024-05-01T12:00:00.123Z"' in orders[0]
    assert '"price": -12.50' in orders[0]
    assert '"status": "PAID"' in orders[0]
