"""The ingest job with `mapping.value.format: avro` and a registry: the schema derived from the
columns is registered once per run, every value is framed with its id and decodes with fastavro
(not our code); an incompatible schema stops the run with one line naming the subject and the
reason, and nothing is written. The registry is the stand-in (a local HTTP server that stands
in for a Schema Registry)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pytest

from jobs import ingest
from jobs.ingestion.config.ingest_config import IngestConfig
from kafkalog_core.errors import RegistryError
from tests.jobs.ingest_helpers import config_doc, read_partition, source_rows, write_parquet
from tests.schema.standin_registry import StandInRegistry

pytestmark = pytest.mark.spark


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
