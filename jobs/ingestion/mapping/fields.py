"""Stage 1 of the record mapping: every record field as a Spark expression (see `mapping`).

Each expression is checked against the source schema on the driver, so a missing column or a
bad expression is a `ConfigError` naming the mapping setting before any job runs: topic,
key/value bytes in their format, headers, timestamp in ms, explicit partition, ordering.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.config.mapping import FieldMapping
from jobs.ingestion.mapping.rules import (
    DELETE_COLUMN,
    HEADERS_TYPE,
    MISFIT_COLUMN,
    ORDER_COLUMN,
    PARTITION_IN_COLUMN,
    POSITION_COLUMN,
)
from jobs.ingestion.mapping.structured import session_zone, spark_encoder, structured_value
from jobs.spark.change_feed import CHANGE_COLUMNS, CHANGE_TYPE, DELETE, gone_keys_as_deletes
from kafkalog_core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["prepare_fields"]

# a structured key/value's ENCODED_TYPE struct, as stage 1 holds it before taking it apart
_ENCODED = {"key": "_kl_key_encoded", "value": "_kl_value_encoded"}


def _first_line(e: Exception) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def _resolve(df: DataFrame, column: Column, where: str):
    """Analyze one expression against the source; returns its Spark type or a ConfigError."""
    from pyspark.errors import AnalysisException, ParseException

    try:
        return df.select(column.alias("x")).schema["x"].dataType
    except (AnalysisException, ParseException) as e:
        raise ConfigError(f"{where}: {_first_line(e)}") from None


def _column(df: DataFrame, name: str, where: str) -> Column:
    from pyspark.sql import functions as F

    simple = re.fullmatch(r"[^.`]+", name)
    if simple and name not in df.columns:
        raise ConfigError(
            f"{where}={name!r}: column not found in the source; available: {', '.join(df.columns)}"
        )
    return F.col(f"`{name}`") if simple else F.col(name)


def _base(df: DataFrame, fm: FieldMapping, where: str) -> tuple[Column, str]:
    from pyspark.sql import functions as F

    if fm.column is not None:
        return _column(df, fm.column, f"{where}.column"), f"{where}.column"
    if fm.expr is not None:
        return F.expr(fm.expr), f"{where}.expr"
    assert fm.columns is not None
    names = [c for c in df.columns if c != POSITION_COLUMN] if fm.columns == ("*",) else fm.columns
    return F.struct(*[_column(df, c, f"{where}.columns") for c in names]), f"{where}.columns"


def _to_bytes(
    df: DataFrame,
    fm: FieldMapping,
    where: str,
    json_options: dict[str, str],
    topic: str | None = None,
) -> tuple[Column, bool]:
    """A key/value mapping as Kafka bytes, in its format (serializer semantics), and whether it
    is a structured format's `ENCODED_TYPE` struct (the bytes and the row's misfit) instead;
    `topic`: the constant topic, which names a schema format's registry subject."""
    column, setting = _base(df, fm, where)
    dtype = _resolve(df, column, setting)
    structured = structured_value(df, fm, where, session_zone(df), json_options, dtype, topic)
    if structured is not None:  # structured formats: the same encoder as the arrow task reader
        return spark_encoder(structured)(column), True
    return _plain_bytes(column, dtype, fm, where, json_options), False


def _plain_bytes(
    column: Column, dtype, fm: FieldMapping, where: str, json_options: dict[str, str]
) -> Column:
    """The bytes of the formats Spark's expressions write (bytes, string, json with options,
    long, int)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fmt = fm.format or ("bytes" if isinstance(dtype, (T.BinaryType, T.NullType)) else "string")
    kind = dtype.simpleString()
    if isinstance(dtype, T.NullType):
        return F.lit(None).cast("binary")
    if fmt == "bytes":
        if isinstance(dtype, T.BinaryType):
            return column
        if isinstance(dtype, T.StringType):
            return column.cast("binary")  # UTF-8
        raise ConfigError(f"{where}.format=bytes needs a binary or string column, not {kind}")
    if fmt == "string":  # StringSerializer: UTF-8 of the text
        if isinstance(dtype, T.BinaryType):
            return column
        if isinstance(dtype, (T.StructType, T.MapType, T.ArrayType)):
            raise ConfigError(f"{where}.format=string cannot encode a {kind}; use format json")
        return column.cast("string").cast("binary")
    if fmt == "json":
        if not isinstance(dtype, (T.StructType, T.MapType, T.ArrayType)):
            raise ConfigError(
                f"{where}.format=json needs a struct, map or array (or 'columns: [...]'), "
                f"not {kind}"
            )
        return F.to_json(column, dict(json_options)).cast("binary")
    if not isinstance(dtype, T.IntegralType):
        raise ConfigError(f"{where}.format={fmt} needs an integer column, not {kind}")
    if fmt == "long":  # LongSerializer: 8 bytes big-endian, two's complement
        return F.unhex(F.lpad(F.hex(column.cast("bigint")), 16, "0"))
    # IntegerSerializer: 4 bytes big-endian (values outside int fail the cast, ANSI mode)
    return F.unhex(F.lpad(F.hex(column.cast("int").cast("bigint").bitwiseAND(0xFFFFFFFF)), 8, "0"))


def _timestamp_ms(df: DataFrame, fm: FieldMapping) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if fm.now:  # the run's start time, one value for every record (as the arrow reader)
        return F.lit(fm.now_value).cast("bigint")
    column, setting = _base(df, fm, "mapping.timestamp")
    dtype = _resolve(df, column, setting)
    if isinstance(dtype, T.TimestampType):
        return F.unix_millis(column)
    if isinstance(dtype, T.TimestampNTZType):  # wall clock read as UTC
        epoch = F.lit("1970-01-01 00:00:00").cast("timestamp_ntz")
        return F.timestamp_diff("MILLISECOND", epoch, column)
    if isinstance(dtype, T.DateType):
        return F.unix_date(column).cast("bigint") * F.lit(86_400_000)
    if isinstance(dtype, T.IntegralType):
        value = column.cast("bigint")
        if fm.unit == "s":
            return value * F.lit(1000)
        if fm.unit == "us":
            return F.floor(value / F.lit(1000)).cast("bigint")
        return value
    if isinstance(dtype, T.NullType):
        return F.lit(None).cast("bigint")
    raise ConfigError(
        f"{setting}: a {dtype.simpleString()} is not a timestamp; use a timestamp, date or "
        "integer (epoch, see unit) column, or an expr"
    )


def _header_value(value: Column, dtype, where: str) -> Column:
    from pyspark.sql import types as T

    if isinstance(dtype, (T.BinaryType, T.NullType)):
        return value.cast("binary")
    if isinstance(dtype, (T.StructType, T.MapType, T.ArrayType)):
        raise ConfigError(
            f"{where}: header values must be strings or bytes, not {dtype.simpleString()}"
        )
    return value.cast("string").cast("binary")


def _headers(df: DataFrame, config: IngestConfig) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    h = config.mapping.headers
    parts: list[Column] = []
    if h is not None and h.column is not None:
        where = "mapping.headers.column"
        column = _column(df, h.column, where)
        dtype = _resolve(df, column, where)
        if isinstance(dtype, T.MapType) and isinstance(dtype.keyType, T.StringType):
            vtype = dtype.valueType
            entries = F.transform(
                F.map_entries(column),
                lambda e: F.struct(
                    e["key"].alias("key"), _header_value(e["value"], vtype, where).alias("value")
                ),
            )
        elif (
            isinstance(dtype, T.ArrayType)
            and isinstance(dtype.elementType, T.StructType)
            and {"key", "value"} <= set(dtype.elementType.names)
        ):
            vtype = dtype.elementType["value"].dataType
            entries = F.transform(
                column,
                lambda e: F.struct(
                    e["key"].cast("string").alias("key"),
                    _header_value(e["value"], vtype, where).alias("value"),
                ),
            )
        else:
            raise ConfigError(
                f"{where}={h.column!r}: headers need map<string, string|binary> or "
                f"array<struct<key, value>>, not {dtype.simpleString()}"
            )
        parts.append(F.coalesce(entries, F.array().cast(HEADERS_TYPE)))
    if h is not None and h.values:
        items = []
        for name, expr in h.values:
            where = f"mapping.headers.values.{name}"
            value = F.expr(expr)
            dtype = _resolve(df, value, where)
            items.append(
                F.struct(
                    F.lit(name).alias("key"), _header_value(value, dtype, where).alias("value")
                )
            )
        parts.append(F.array(*items))
    if not parts:
        return F.array().cast(HEADERS_TYPE)
    return (parts[0] if len(parts) == 1 else F.concat(*parts)).cast(HEADERS_TYPE)


def _table_columns(df: DataFrame, fm: FieldMapping | None) -> FieldMapping | None:
    """`columns: ["*"]` of change rows as the table's columns: Delta's change columns left out
    (a mapping names them when it wants them)."""
    if fm is None or fm.columns != ("*",):
        return fm
    names = [c for c in df.columns if c != POSITION_COLUMN and c not in CHANGE_COLUMNS]
    return replace(fm, columns=tuple(names))


def prepare_fields(
    df: DataFrame, config: IngestConfig, sample: tuple[float, int] | None = None
) -> DataFrame:
    """Stage 1: every record field as a Spark expression, checked against the source schema.

    `sample` = (fraction, seed): a Bernoulli sample of the rows, taken after the source row ids
    (so a sampled row keeps the id it has in the full run) and before any field is computed.

    Change rows (`source.changes: cdf`): an update's preimage is dropped, or is a delete when the
    update changed the record's key (`gone_keys_as_deletes`); a delete's value is null, whatever the value mapping
    (a tombstone: its key and no value, not an object of nulls), and `DELETE_COLUMN` marks the
    deletes for stage 2's check that a tombstone has a key. A key or value in a structured
    format is encoded once per row into its bytes and its misfit; `MISFIT_COLUMN` holds why
    the row does not fit (the key's reason first), for stage 2 to reject or raise.
    `columns: ["*"]` leaves Delta's change columns out (map them by name:
    `timestamp: {column: _commit_timestamp}`).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    m = config.mapping
    df = df.withColumn(POSITION_COLUMN, F.monotonically_increasing_id())
    if sample is not None:
        df = df.sample(fraction=sample[0], seed=sample[1])
    if m.topic.is_constant:
        topic = F.lit(m.topic.name)
    else:
        setting = "mapping.topic.column" if m.topic.column else "mapping.topic.expr"
        topic = (
            _column(df, m.topic.column, setting) if m.topic.column else F.expr(str(m.topic.expr))
        )
        _resolve(df, topic, setting)
        topic = topic.cast("string")

    changes = config.source.changes == "cdf"
    key_fm, value_fm = m.key, m.value
    if changes:
        key_fm, value_fm = _table_columns(df, key_fm), _table_columns(df, value_fm)
    fields: dict[str, Column] = {}
    structured: list[str] = []  # the fields encoded as ENCODED_TYPE structs
    for name, fm in (("key", key_fm), ("value", value_fm)):
        if fm is None:
            fields[name] = F.lit(None).cast("binary")
            continue
        where = f"mapping.{name}"
        fields[name], encoded = _to_bytes(df, fm, where, dict(m.json_options), m.topic.name)
        if encoded:
            structured.append(name)
    if structured:  # each encoded once, into a column of its own, then taken apart
        df = df.select("*", *(fields[n].alias(_ENCODED[n]) for n in structured))
        for n in structured:
            fields[n] = F.col(_ENCODED[n])["bytes"]
    key, value = fields["key"], fields["value"]
    misfits = {n: F.col(_ENCODED[n])["misfit"] for n in structured}
    extra: list[Column] = []
    if changes:
        df, key = gone_keys_as_deletes(df, key)
        delete = F.coalesce(F.col(CHANGE_TYPE) == F.lit(DELETE), F.lit(False))
        value = F.when(delete, F.lit(None).cast("binary")).otherwise(value)
        if "value" in misfits:  # a delete writes no value: nothing of it has to fit
            misfits["value"] = F.when(~delete, misfits["value"])
        extra.append(delete.alias(DELETE_COLUMN))
    if misfits:
        extra.append(F.coalesce(*misfits.values()).alias(MISFIT_COLUMN))
    timestamp = F.lit(-1).cast("bigint") if m.timestamp is None else _timestamp_ms(df, m.timestamp)

    p = m.partition
    if p.by_key:
        partition_in = F.lit(None).cast("int")
    else:
        setting = "mapping.partition.column" if p.column else "mapping.partition.expr"
        partition_in = _column(df, p.column, setting) if p.column else F.expr(str(p.expr))
        dtype = _resolve(df, partition_in, setting)
        if not isinstance(dtype, T.IntegralType):
            raise ConfigError(
                f"{setting}: partition must be an integer, not {dtype.simpleString()}"
            )
        partition_in = partition_in.cast("int")

    order_fields = []
    for i, expr in enumerate(config.ordering):
        column = F.expr(expr)
        dtype = _resolve(df, column, f"ordering[{i}]")
        if isinstance(dtype, (T.MapType, T.VariantType)):
            raise ConfigError(f"ordering[{i}]={expr!r}: a {dtype.simpleString()} cannot be sorted")
        order_fields.append(column.alias(f"o{i}"))
    order = F.struct(*order_fields, F.col(POSITION_COLUMN).alias("pos"))

    headers = _headers(df, config)
    return df.select(
        topic.alias("topic"),
        key.alias("key"),
        value.alias("value"),
        headers.alias("headers"),
        timestamp.alias("timestamp"),
        partition_in.alias(PARTITION_IN_COLUMN),
        order.alias(ORDER_COLUMN),
        *extra,
    )
