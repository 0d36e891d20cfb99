"""The ingest job with `mapping.value.format: avro` and a registry: the schema derived from the
columns is registered once per run, every value is framed with its id and decodes with fastavro
(not our code); an incompatible schema stops the run with one line naming the subject and the
reason, and nothing is written. The registry is the stand-in (a local HTTP server that stands
in for a Schema Registry)."""

from __future__ import annotations

import io
import json
from datetime import timezone
from pathlib import Path

import fastavro
import pytest

from jobs import ingest
from jobs.ingestion.config.ingest_config import IngestConfig
from kafkalog_core.errors import RegistryError
from tests.jobs.ingest_helpers import config_doc, read_partition, source_rows, write_parquet
from tests.schema.standin_registry import StandInRegistry

pytestmark = pytest.mark.spark
UTC = timezone.utc


def config(source: Path, root: Path, url: str, **value: object) -> IngestConfig:
    mapping = {
        "value": {
            "columns": ["id", "user", "event_time"],
            "format": "avro",
            "record_name": "shop.Event",
            "schema_registry": {"url": url, "auto_register": True},
            **value,
        }
    }
    doc = config_doc(source, root, mapping=mapping, ordering="source")
    doc["topics"]["events"]["partitions"] = 2
    return IngestConfig.from_dict(doc)


def test_avro_values_registered_once_and_framed(spark, tmp_path: Path) -> None:
    rows = source_rows(40)
    source = write_parquet(tmp_path / "src", rows)
    with StandInRegistry() as registry:
        ingest.run(
            spark,
            config(source, tmp_path / "out", registry.url),
            run_id="avro-1",
            out=lambda *_: None,
        )
        registered = [r for r in registry.state.requests if r[0] == "POST"]
        schema = json.loads(registry.state.schemas[0][1])
    assert registered == [("POST", "/subjects/events-value/versions")]  # once per run
    assert schema["name"] == "Event" and schema["namespace"] == "shop"
    parsed = fastavro.parse_schema(schema)
    decoded = []
    for p in range(2):
        for _, _, value, _, _ in read_partition(tmp_path / "out" / f"events-{p}")[0]:
            assert value[:5] == b"\x00\x00\x00\x00\x01"
            decoded.append(fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed))
    assert sorted(d["id"] for d in decoded) == [r["id"] for r in rows]
    by_id = {d["id"]: d for d in decoded}
    assert all(by_id[r["id"]]["user"] == r["user"] for r in rows)
    assert all(by_id[r["id"]]["event_time"] == r["event_time"] for r in rows)


def test_an_incompatible_schema_stops_the_run_before_anything_is_written(
    spark, tmp_path: Path
) -> None:
    source = write_parquet(tmp_path / "src", source_rows(10))
    with StandInRegistry() as registry:
        registry.register(
            "events-value",
            json.dumps(
                {
                    "type": "record",
                    "name": "Event",
                    "namespace": "shop",
                    "fields": [{"name": "x", "type": "string"}],
                }
            ),
        )
        with pytest.raises(
            RegistryError, match="subject 'events-value' refused the schema as incompatible"
        ):
            ingest.run(
                spark,
                config(source, tmp_path / "out", registry.url),
                run_id="avro-2",
                out=lambda *_: None,
            )
    assert not list((tmp_path / "out").glob("events-*"))


def test_protobuf_values_with_a_schema_id_read_by_the_runtime(spark, tmp_path: Path) -> None:
    from kafkalog_core.schema.protobuf import parse_proto
    from tests.schema.orders import runtime_class

    rows = source_rows(12)
    source = write_parquet(tmp_path / "src", rows)
    proto = tmp_path / "event.proto"
    proto.write_text(
        'syntax = "proto3";\npackage shop;\nimport "google/protobuf/timestamp.proto";\n'
        "message Event { int64 id = 1; string user = 2; google.protobuf.Timestamp event_time = 3; }\n"
    )
    value = {
        "columns": ["id", "user", "event_time"],
        "format": "protobuf",
        "schema_file": str(proto),
        "schema_id": 7,
    }
    doc = config_doc(source, tmp_path / "out", mapping={"value": value}, ordering="source")
    doc["topics"]["events"]["partitions"] = 1
    ingest.run(spark, IngestConfig.from_dict(doc), run_id="pb-1", out=lambda *_: None)
    message = runtime_class(parse_proto(proto.read_text()))
    got = {}
    for _, _, framed, _, _ in read_partition(tmp_path / "out" / "events-0")[0]:
        assert framed[:6] == b"\x00\x00\x00\x00\x07\x00"  # id 7, the first message
        event = message.FromString(framed[6:])
        got[event.id] = (event.user, event.event_time.ToDatetime(tzinfo=UTC))
    assert got == {r["id"]: (r["user"], r["event_time"]) for r in rows}


def test_avro_with_a_schema_id_and_no_registry_reads_back_with_no_schema(
    spark, tmp_path: Path
) -> None:
    """The schema derived from the columns is kept with the output; the read finds it by the id
    in each value's header."""
    from jobs.schemas.store import WriterSchemaStore
    from tests.datasource.helpers import read

    rows = source_rows(6)
    source = write_parquet(tmp_path / "src", rows)
    value = {"columns": ["id", "user"], "format": "avro", "schema_id": 12}
    doc = config_doc(source, tmp_path / "out", mapping={"value": value}, ordering="source")
    doc["topics"]["events"]["partitions"] = 1
    ingest.run(spark, IngestConfig.from_dict(doc), run_id="avro-1", out=lambda *_: None)
    stored = WriterSchemaStore.of_output(tmp_path / "out").load("events-value")
    assert stored is not None and (stored.format, sorted(stored.texts)) == ("avro", [12])
    df = read(spark, tmp_path / "out", subscribe="events", **{"value.format": "avro"})
    got = {r.value_decoded.id: r.value_decoded.user for r in df.collect()}
    assert got == {r["id"]: r["user"] for r in rows}
