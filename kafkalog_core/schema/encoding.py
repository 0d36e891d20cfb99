"""How a task encodes one key or value column: the format, the schema (resolved once on the
driver) and the registry framing's schema id (None: plain). One `encode` for every caller, so
a data source write and an ingest run give the same bytes for the same rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kafkalog_core.errors import SchemaError
from kafkalog_core.schema.arrays import null_rows

__all__ = ["Encoding"]


@dataclass(frozen=True)
class Encoding:
    """`schema`: an Avro schema (dict), a `ProtobufSchema`, a JSON Schema (dict), or None for
    `json`. `schema_id`: frame each value for the registry with this id; None leaves it plain."""

    field: str
    format: str
    schema: Any = None
    schema_id: int | None = None
    zone: str | None = None  # JSON: timestamps written in this zone (Spark's session zone)

    def encode(self, values: pa.Array | pa.ChunkedArray) -> pa.Array:
        """Each row's bytes (null rows stay null: tombstones); a row that does not fit the
        schema is a SchemaError naming the row and the field."""
        encoded, misfits = self.encode_rows(values)
        if misfits:
            raise SchemaError.of_misfits(misfits, f"{self.field}: ")
        return encoded

    def encode_rows(
        self, values: pa.Array | pa.ChunkedArray
    ) -> tuple[pa.Array, list[tuple[int, str]]]:
        """(each row's bytes, the rows that do not fit the schema: (row index, why, naming the
        field)); such a row is null in the bytes, never half written. Columns whose types the
        schema refuses are a SchemaError (no row would fit)."""
        from kafkalog_core.schema.confluent import frame_confluent

        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        indexes = None
        try:
            if self.format == "avro":
                from kafkalog_core.schema.avro_encode import encode_avro_rows

                payloads, misfits = encode_avro_rows(values, self.schema)
            elif self.format == "protobuf":
                payloads, misfits = self.schema.encode_rows(values, where=self.field)
                indexes = self.schema.message_indexes
            else:
                from kafkalog_core.schema.json_encode import encode_json

                payloads, misfits = encode_json(values, self.zone), []
                if self.format == "json_schema":
                    from kafkalog_core.schema.json_schema import json_misfits

                    misfits = json_misfits(values, payloads, self.schema, self.field)
                    if misfits:
                        payloads = null_rows(payloads, [row for row, _ in misfits])
        except SchemaError as e:
            message = str(e)
            raise SchemaError(
                message if message.startswith(self.field) else f"{self.field}: {message}"
            ) from None
        if self.schema_id is not None:
            payloads = frame_confluent(payloads, self.schema_id, indexes)
        return payloads, misfits
