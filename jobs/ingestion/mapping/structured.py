"""Keys and values made from columns in a structured format (`format: avro` or `json` of a
column list or a struct column): the schema resolved once on the driver, the bytes encoded in
the tasks by `kafkalog_core.schema`, whichever reader runs.

The driver resolves a `StructuredValue` from the source DataFrame's schema: the Avro schema
(the `.avsc` of `schema_file`, checked against the columns, or the one Spark's `to_avro`
derives from their Spark types, nullability included), the framing and the session time zone
(JSON writes timestamps in it, as Spark's `to_json` does). It is small and picklable: the
Spark path encodes with it in an Arrow UDF, the arrow task reader on the batches it reads, so
both give the same bytes. JSON with `mapping.json_options` stays Spark's own `to_json`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from jobs.ingestion.config.mapping import STRUCTURED_FORMATS, FieldMapping
from kafkalog_core.errors import ConfigError, SchemaError
from kafkalog_core.schema import (
    avro_misfits,
    avro_schema_for,
    check_avro_schema,
    encode_avro,
    encode_json,
    frame_confluent,
    parse_avro_schema,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType

    from jobs.ingestion.config.ingest_config import IngestConfig

__all__ = [
    "StructuredValue",
    "session_zone",
    "spark_encoder",
    "structured_value",
    "structured_values",
]


@dataclass(frozen=True)
class StructuredValue:
    """How a key or value is built from columns (see the module docstring)."""

    setting: str  # "mapping.value" / "mapping.key", for messages
    format: str  # avro | json
    columns: tuple[str, ...] | None  # a column list: one record of these, in this order
    column: str | None  # or one column (a struct; any type for avro); neither: an expr
    schema: str | None  # avro: the writer schema's JSON text
    schema_id: int | None
    framing: str  # confluent | none
    zone: str  # the Spark session's time zone

    @property
    def names(self) -> tuple[str, ...]:
        """The source columns it reads."""
        return self.columns if self.columns is not None else (str(self.column),)

    def values(self, batch: pa.RecordBatch) -> pa.Array:
        """The record (a struct of the columns) or the column each row encodes."""
        if self.columns is not None:
            return pa.StructArray.from_arrays([batch.column(c) for c in self.columns], self.columns)
        return batch.column(self.column)

    def encode(self, values: pa.Array) -> pa.Array:
        """Each row's bytes (null rows stay null); a row that does not fit the Avro schema is
        one SchemaError naming the field."""
        if self.format == "json":
            payloads = encode_json(values, self.zone)
        else:
            assert self.schema is not None
            schema = json.loads(self.schema)
            try:
                payloads = encode_avro(values, schema)
            except SchemaError:
                _, why = avro_misfits(values, schema)[0]
                raise SchemaError(
                    f"{self.setting} (format avro): a source row does not fit the value schema: "
                    f"{why}"
                ) from None
        if self.framing == "confluent":
            assert self.schema_id is not None
            payloads = frame_confluent(payloads, self.schema_id)
        return payloads


def structured_value(
    df: DataFrame,
    fm: FieldMapping | None,
    setting: str,
    zone: str,
    json_options: Mapping[str, str],
    spark_type: DataType | None = None,
) -> StructuredValue | None:
    """The driver's resolution of a key/value mapping in a structured format, or None for the
    other formats (and JSON with json_options, which Spark's to_json writes). `spark_type`: the
    type of the mapping's expression as Spark resolved it (an `expr`, which only Spark's path
    evaluates); otherwise the columns' types in `df`."""
    if fm is None or fm.format not in STRUCTURED_FORMATS:
        return None
    if fm.format == "json" and json_options:
        return None
    if fm.expr is not None:
        columns, column = None, None
    elif fm.columns is not None:
        names = (
            [c for c in df.columns if not c.startswith("_kl_")]
            if fm.columns == ("*",)
            else list(fm.columns)
        )
        columns: tuple[str, ...] | None = tuple(names)
        column = None
    else:
        columns, column = None, fm.column
    if spark_type is None:
        spark_type = _spark_type(df, columns, column, setting)
    arrow_type = _arrow_type(spark_type, setting)
    schema_text = None
    if fm.format == "json":
        if not (
            pa.types.is_struct(arrow_type)
            or pa.types.is_map(arrow_type)
            or pa.types.is_list(arrow_type)
        ):
            raise ConfigError(
                f"{setting}.format=json needs a struct, map or array (or 'columns: [...]'), not "
                f"{spark_type.simpleString()}"
            )
    else:
        schema = _avro_schema(fm, arrow_type, setting)
        schema_text = json.dumps(schema)
    framing = fm.framing or ("confluent" if fm.schema_id is not None else "none")
    return StructuredValue(
        setting, fm.format, columns, column, schema_text, fm.schema_id, framing, zone
    )


def _spark_type(df: DataFrame, columns, column, setting: str) -> DataType:
    from pyspark.sql import types as T

    fields = {f.name: f for f in df.schema.fields}
    if columns is not None:
        missing = [c for c in columns if c not in fields]
        if missing:
            raise ConfigError(
                f"{setting}.columns={missing[0]!r}: column not found in the source; available: "
                f"{', '.join(df.columns)}"
            )
        # F.struct(...) of the columns: the record itself is never null
        return T.StructType([fields[c] for c in columns])
    if column not in fields:
        raise ConfigError(
            f"{setting}.column={column!r}: column not found in the source; available: "
            f"{', '.join(df.columns)}"
        )
    return fields[column].dataType


def _arrow_type(spark_type: DataType, setting: str) -> pa.DataType:
    from pyspark.sql.pandas.types import to_arrow_type

    try:
        return to_arrow_type(spark_type, timezone="UTC")
    except Exception as e:  # noqa: BLE001 - a type Arrow cannot carry: one line
        raise ConfigError(
            f"{setting}: {spark_type.simpleString()} has no Arrow type ({e})"
        ) from None


def _avro_schema(fm: FieldMapping, arrow_type: pa.DataType, setting: str) -> dict:
    if fm.schema_file is None:
        try:
            return avro_schema_for(arrow_type)
        except SchemaError as e:
            raise SchemaError(f"{setting}: {e}") from None
    path = Path(fm.schema_file)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{setting}.schema_file={fm.schema_file!r}: {e.strerror or e}") from None
    try:
        schema = parse_avro_schema(text)
        check_avro_schema(schema, arrow_type)
    except SchemaError as e:
        raise SchemaError(f"{setting}.schema_file={fm.schema_file!r}: {e}") from None
    return schema


def session_zone(df: DataFrame) -> str:
    """The Spark session's time zone (what to_json writes timestamps in)."""
    return str(df.sparkSession.conf.get("spark.sql.session.timeZone"))


def spark_encoder(structured: StructuredValue):
    """An Arrow UDF (Spark's path) that encodes a column as `structured` says."""
    from pyspark.sql.functions import arrow_udf

    def encode(values: pa.Array) -> pa.Array:
        return structured.encode(values)

    return arrow_udf(encode, "binary")


def structured_values(df: DataFrame, config: IngestConfig) -> dict[str, StructuredValue | None]:
    """The key's and the value's `StructuredValue` ("key", "value"; None for other formats), as
    the Spark path resolves them, for the arrow task reader."""
    m = config.mapping
    zone = session_zone(df)
    return {
        name: structured_value(df, fm, f"mapping.{name}", zone, m.json_options)
        for name, fm in (("key", m.key), ("value", m.value))
    }
