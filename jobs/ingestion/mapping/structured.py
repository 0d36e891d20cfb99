"""Keys and values made from columns in a structured format (`format: avro`, `protobuf`,
`json_schema` or `json` of a column list or a struct column): the schema resolved once on the
driver, the bytes encoded in the tasks by `kafkalog_core.schema`, whichever reader runs.

The driver resolves a `StructuredValue` from the source DataFrame's schema: an `Encoding`
with the schema (a `schema_file` checked against the columns, the registry's, or the one
derived from their Spark types, as Spark's `to_avro` derives it, nullability included; see
`jobs.schemas.resolve`), the framing id and the session time zone (JSON writes timestamps in
it, as Spark's `to_json` does). It is small and picklable: the
Spark path encodes with it in an Arrow UDF, the arrow task reader on the batches it reads, so
both give the same bytes. JSON with `mapping.json_options` stays Spark's own `to_json`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from jobs.ingestion.config.mapping import STRUCTURED_FORMATS, FieldMapping
from jobs.schemas.resolve import resolve_encoding_once
from kafkalog_core.errors import ConfigError, SchemaError
from kafkalog_core.schema.encoding import Encoding

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType

    from jobs.ingestion.config.ingest_config import IngestConfig

__all__ = [
    "ENCODED_TYPE",
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
    format: str  # json | avro | protobuf | json_schema
    columns: tuple[str, ...] | None  # a column list: one record of these, in this order
    column: str | None  # or one column (a struct; any type for avro); neither: an expr
    encoding: Encoding  # the schema, framing id and JSON zone, resolved once per run

    @property
    def names(self) -> tuple[str, ...]:
        """The source columns it reads."""
        return self.columns if self.columns is not None else (str(self.column),)

    def values(self, batch: pa.RecordBatch) -> pa.Array:
        """The record (a struct of the columns) or the column each row encodes."""
        if self.columns is not None:
            return pa.StructArray.from_arrays([batch.column(c) for c in self.columns], self.columns)
        return batch.column(self.column)

    def encode(self, values: pa.Array) -> tuple[pa.Array, pa.Array]:
        """(each row's bytes, each row's misfit: why it does not fit the schema, naming the
        field, or null). A misfit row's bytes are null; the mapping's checks reject it or stop
        the run with it (`MISFIT_COLUMN`). Columns the schema refuses are one SchemaError."""
        try:
            encoded, misfits = self.encoding.encode_rows(values)
        except SchemaError as e:
            raise SchemaError(
                f"{self.setting} (format {self.format}): the columns do not fit the "
                f"{self.encoding.field} schema: {e}"
            ) from None
        return encoded, self._reasons(len(values), misfits)

    def _reasons(self, n: int, misfits: list[tuple[int, str]]) -> pa.Array:
        if not misfits:
            return pa.nulls(n, pa.string())
        texts = pa.array(
            [
                f"{self.setting} (format {self.format}): the row does not fit the "
                f"{self.encoding.field} schema: {why}"
                for _, why in misfits
            ],
            pa.string(),
        )
        at = np.full(n, -1, dtype=np.int64)
        at[[row for row, _ in misfits]] = np.arange(len(misfits))
        return texts.take(pa.array(at, mask=at < 0))


def structured_value(
    df: DataFrame,
    fm: FieldMapping | None,
    setting: str,
    zone: str,
    json_options: Mapping[str, str],
    spark_type: DataType | None = None,
    topic: str | None = None,
) -> StructuredValue | None:
    """The driver's resolution of a key/value mapping in a structured format, or None for the
    other formats (and JSON with json_options, which Spark's to_json writes). `spark_type`: the
    type of the mapping's expression as Spark resolved it (an `expr`, which only Spark's path
    evaluates); otherwise the columns' types in `df`. `topic`: the constant topic a registry
    subject is named after (TopicNameStrategy)."""
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
    if fm.format == "json" and not (
        pa.types.is_struct(arrow_type)
        or pa.types.is_map(arrow_type)
        or pa.types.is_list(arrow_type)
    ):
        raise ConfigError(
            f"{setting}.format=json needs a struct, map or array (or 'columns: [...]'), not "
            f"{spark_type.simpleString()}"
        )
    assert fm.schema is not None
    encoding = dataclasses.replace(
        resolve_encoding_once(fm.schema, topic, arrow_type, setting), zone=zone
    )
    return StructuredValue(setting, fm.format, columns, column, encoding)


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


def session_zone(df: DataFrame) -> str:
    """The Spark session's time zone (what to_json writes timestamps in)."""
    return str(df.sparkSession.conf.get("spark.sql.session.timeZone"))


ENCODED_TYPE = "struct<bytes:binary,misfit:string>"  # what `spark_encoder` gives per row


def spark_encoder(structured: StructuredValue):
    """An Arrow UDF (Spark's path) that encodes a column as `structured` says: per row a
    struct of the bytes and the misfit (`ENCODED_TYPE`), so the row is encoded once."""
    from pyspark.sql.functions import arrow_udf

    def encode(values: pa.Array) -> pa.Array:
        encoded, misfits = structured.encode(values)
        return pa.StructArray.from_arrays(
            [encoded.cast(pa.binary()), misfits], names=["bytes", "misfit"]
        )

    return arrow_udf(encode, ENCODED_TYPE)


def structured_values(df: DataFrame, config: IngestConfig) -> dict[str, StructuredValue | None]:
    """The key's and the value's `StructuredValue` ("key", "value"; None for other formats), as
    the Spark path resolves them, for the arrow task reader."""
    m = config.mapping
    zone = session_zone(df)
    return {
        name: structured_value(df, fm, f"mapping.{name}", zone, m.json_options, topic=m.topic.name)
        for name, fm in (("key", m.key), ("value", m.value))
    }
