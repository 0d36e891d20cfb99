"""Structured values: Avro binary and Spark's JSON written from Arrow columns, and the Schema
Registry's wire framing. No Spark here; the ingest job and the data source call these.

- `avro_schema_for(arrow_type)`: the Avro schema Spark's `to_avro` derives for a column type.
- `parse_avro_schema(text)`, `check_avro_schema(schema, arrow_type)`: a given schema, checked.
- `encode_avro(values, schema)`: each row's Avro binary (no framing); null rows stay null.
- `encode_json(values)`: each row as Spark's `to_json` of a struct writes it.
- `frame_confluent(payloads, schema_id)`, `read_confluent_frame(values)`: the registry framing.
"""

from kafkalog_core.schema.avro_bind import check_avro_schema
from kafkalog_core.schema.avro_encode import avro_misfits, encode_avro
from kafkalog_core.schema.avro_schema import avro_schema_for, parse_avro_schema
from kafkalog_core.schema.confluent import ConfluentFrames, frame_confluent, read_confluent_frame
from kafkalog_core.schema.json_encode import encode_json

__all__ = [
    "ConfluentFrames",
    "avro_misfits",
    "avro_schema_for",
    "check_avro_schema",
    "encode_avro",
    "encode_json",
    "frame_confluent",
    "parse_avro_schema",
    "read_confluent_frame",
]
