"""Decoded key/value columns of a read: `key_decoded` / `value_decoded` (and `decode_error`
with `decode.onError=null`) beside Spark's Kafka columns.

The driver resolves the schemas once (`plan_decoded`: the registry is asked there, while Spark
asks for the schema; without a registry or a schema, the writer schemas the output's runs kept,
jobs/schemas/store.py) and the plan travels to the tasks with the reader; a task decodes its rows
with the core's `decode_column` and fails with one line naming topic, partition and offset, or
keeps a null and the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from jobs.datasource.options import SUBSCRIBE, ReadOptions
from kafkalog_core.errors import SchemaError
from kafkalog_core.schema.decode import Decoding

__all__ = ["DECODE_ERROR", "DecodedColumns", "plan_decoded"]

DECODE_ERROR = "decode_error"


@dataclass(frozen=True)
class DecodedColumns:
    """The columns to decode, each with the Arrow type Spark expects for it."""

    columns: tuple[tuple[Decoding, Any, pa.DataType], ...]  # (decoding, Spark type, Arrow type)
    on_error: str  # "fail" or "null"

    def spark_fields(self) -> list[Any]:
        from pyspark.sql.types import StringType, StructField

        fields = [StructField(f"{d.field}_decoded", spark, True) for d, spark, _ in self.columns]
        if self.on_error == "null":
            fields.append(StructField(DECODE_ERROR, StringType(), True))
        return fields

    def add_to(self, table: pa.Table, topic: str, partition: int) -> pa.Table:
        """The table with its decoded columns (task side)."""
        from kafkalog_core.schema.decode import decode_column

        reasons_by_row: list[list[str]] = [[] for _ in range(table.num_rows)]
        for decoding, _, arrow_type in self.columns:
            values, reasons = decode_column(table.column(decoding.field).combine_chunks(), decoding)
            for row, reason in enumerate(reasons):
                if reason is None:
                    continue
                if self.on_error == "fail":
                    offset = table.column("offset")[row].as_py()
                    raise SchemaError(
                        f"kafkalog: cannot decode the {decoding.field} of {topic}-{partition} "
                        f"at offset {offset}: {reason} (decode.onError=null keeps such records "
                        "with a null)"
                    )
                reasons_by_row[row].append(f"{decoding.field}: {reason}")
            table = table.append_column(f"{decoding.field}_decoded", values.cast(arrow_type))
        if self.on_error == "null":
            errors = pa.array(["; ".join(r) if r else None for r in reasons_by_row], pa.string())
            table = table.append_column(DECODE_ERROR, errors)
        return table


def _topic(options: ReadOptions) -> str | None:
    """The one topic a TopicNameStrategy subject is named after, when the read names one."""
    subscription = options.subscription
    if subscription.kind == SUBSCRIBE and len(subscription.topics) == 1:
        return subscription.topics[0]
    topics = {t for t, _ in subscription.assigned}
    return next(iter(topics)) if len(topics) == 1 else None


def plan_decoded(options: ReadOptions) -> DecodedColumns | None:
    """Resolve the decoded columns' schemas (driver side; None when no column is decoded)."""
    if not options.decoded:
        return None
    from jobs.schemas.resolve import resolve_decoding, spark_arrow_type
    from jobs.schemas.store import WriterSchemaStore

    store = WriterSchemaStore.of_output(options.path)
    columns = []
    for settings in options.decoded:
        decoding = resolve_decoding(settings, _topic(options), settings.field, store)
        spark_type, arrow_type = spark_arrow_type(
            decoding.arrow_type(), f"{settings.field}_decoded"
        )
        columns.append((decoding, spark_type, arrow_type))
    return DecodedColumns(tuple(columns), options.decode_on_error)
