"""Source rows -> Kafka records: a pure DataFrame -> DataFrame transform, validated per row.

`map_records(df, config)` returns exactly:

    topic string, partition int, key binary, value binary,
    headers array<struct<key: string, value: binary>>, timestamp bigint (ms; -1 = none),
    _kl_order struct<o0, o1, ..., pos: bigint>

Sort a partition's rows by `_kl_order` (ascending) to get its offsets: `o0..` are the
configured `ordering` expressions and `pos` is the source row id (monotonically_increasing_id
taken right after reading, stable for the same input files and split settings), so ties are
broken deterministically and the same input always yields the same offsets.

Two stages:
1. Spark expressions (checked against the source schema on the driver, so a missing column or a
   bad expression is a `ConfigError` naming the mapping setting before any job runs): topic,
   key/value bytes in their format, headers, timestamp in ms, explicit partition, ordering.
2. Partitioning and the per-row checks, also as Spark expressions: only the bytes that are
   hashed go to Python, in one scalar Arrow UDF (`_positive_murmur2`: the core's vectorized
   murmur2, identical to the Java producer, `% partitions` in Spark) that receives the key
   column alone (with `null_keys: value_hash`, the value instead of a null key). Null keys
   follow a deterministic rule (see `PartitionMapping`); an explicit partition column or
   round-robin without a key needs no Python at all. The checks: topic name (Kafka's rules) and
   configured, partition in range, key present on compacted topics, timestamp present and >= 0
   (CreateTime), and the record alone in a batch within max.message.bytes (uncompressed topics,
   from octet lengths with Kafka's varint sizes; compressed sizes are the encoder's to check).
   `jobs.ingestion.arrow_mapping.map_batch` is the same stage over an Arrow batch in numpy:
   what the arrow task reader runs, and the oracle the tests compare these expressions with.

A row failing a check either fails the job with the reason and the offending record
(`ERROR_PREFIX` in a Spark error, see `invalid_record_error`), or, with `output.reject_path`,
goes to the rejects DataFrame with its reason (`map_records_with_rejects`). Never dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from jobs.ingestion.config import FieldMapping, IngestConfig
from jobs.spark.errors import DATA_ERROR_PREFIX
from kafkalog_core.errors import ConfigError, InvalidRecordError, InvalidTopicError
from kafkalog_core.log.names import MAX_TOPIC_NAME_LENGTH, validate_topic_name
from kafkalog_core.partitioner import murmur2_array
from kafkalog_core.record.batch import RECORD_BATCH_OVERHEAD

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    "ERROR_COLUMN",
    "ERROR_PREFIX",
    "ORDER_COLUMN",
    "PARTITION_IN_COLUMN",
    "POSITION_COLUMN",
    "RECORD_COLUMNS",
    "MappedRecords",
    "MappingRules",
    "invalid_record_error",
    "map_records",
    "map_records_with_rejects",
    "mapping_rules",
    "prepare_records",
]

RECORD_COLUMNS = ("topic", "partition", "key", "value", "headers", "timestamp")
ORDER_COLUMN = "_kl_order"
ERROR_COLUMN = "_kl_error"
POSITION_COLUMN = "_kl_pos"
PARTITION_IN_COLUMN = "_kl_partition_in"
ERROR_PREFIX = DATA_ERROR_PREFIX + "invalid record: "  # is_data_error knows it
HEADERS_TYPE = "array<struct<key:string,value:binary>>"


# ---------------------------------------------------------------------------------------------
# Stage 1: Spark expressions


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


def _to_bytes(df: DataFrame, fm: FieldMapping, where: str, json_options: dict[str, str]) -> Column:
    """A key/value mapping as Kafka bytes, in its format (serializer semantics)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    column, setting = _base(df, fm, where)
    dtype = _resolve(df, column, setting)
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


def _prepare(df: DataFrame, config: IngestConfig) -> DataFrame:
    """Stage 1: every record field as a Spark expression, checked against the source schema."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    m = config.mapping
    df = df.withColumn(POSITION_COLUMN, F.monotonically_increasing_id())
    if m.topic.is_constant:
        topic = F.lit(m.topic.name)
    else:
        setting = "mapping.topic.column" if m.topic.column else "mapping.topic.expr"
        topic = (
            _column(df, m.topic.column, setting) if m.topic.column else F.expr(str(m.topic.expr))
        )
        _resolve(df, topic, setting)
        topic = topic.cast("string")

    key = (
        F.lit(None).cast("binary")
        if m.key is None
        else _to_bytes(df, m.key, "mapping.key", dict(m.json_options))
    )
    value = _to_bytes(df, m.value, "mapping.value", dict(m.json_options))
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
    )


# ---------------------------------------------------------------------------------------------
# Topic rules (what the checks need per topic; small and picklable)


@dataclass(frozen=True)
class TopicRules:
    """What the per-row checks need about one topic (small and picklable)."""

    partitions: int
    compact: bool
    log_append_time: bool
    max_message_bytes: int | None  # None: compressed topic, size checked after compression


@dataclass(frozen=True)
class MappingRules:
    """Everything the Arrow function needs; shipped to executors in its closure."""

    topics: dict[str, TopicRules]
    defaults: TopicRules | None
    by_key: bool
    null_keys: str

    def rules_for(self, topic: str) -> TopicRules | str:
        """The topic's rules, or why its records are invalid."""
        try:
            validate_topic_name(topic)
        except InvalidTopicError as e:
            return str(e)
        rules = self.topics.get(topic, self.defaults)
        if rules is None:
            return f"topic {topic!r} is not configured (add it under topics, or set topic_defaults)"
        return rules


def _rules(spec) -> TopicRules:
    lc = spec.log_config
    uncompressed = lc.codec is None or int(lc.codec) == 0
    return TopicRules(
        partitions=spec.partitions,
        compact=bool(lc.compact),
        log_append_time=lc.message_timestamp_type == "LogAppendTime",
        max_message_bytes=int(lc.max_message_bytes) if uncompressed else None,
    )


def mapping_rules(config: IngestConfig) -> MappingRules:
    return MappingRules(
        topics={name: _rules(spec) for name, spec in config.topics.items()},
        defaults=None if config.topic_defaults is None else _rules(config.topic_defaults),
        by_key=config.mapping.partition.by_key,
        null_keys=config.mapping.partition.null_keys,
    )


# ---------------------------------------------------------------------------------------------
# Stage 2: per-row checks as Spark expressions, murmur2 in one scalar Arrow UDF over the key

# Topic.validate: ASCII letters, digits, '.', '_' and '-' (a "find" of any other character, so
# Java's `$`-before-a-final-newline cannot let "t\n" through).
_ILLEGAL_TOPIC_CHAR = "[^a-zA-Z0-9._-]"
# Python's str.isprintable(): no Unicode "Other" (C*) or "Separator" (Z*) character but ' '.
_NOT_PRINTABLE = "[\\p{C}\\p{Z}&&[^ ]]"
_PREVIEW_LIMIT = 40


def _text(value: str) -> Column:
    from pyspark.sql import functions as F

    return F.lit(value)


def _py_repr(text: Column) -> Column:
    """Python's repr() of a str as Spark SQL: the quote it picks and its backslash escapes.

    Exact for printable text plus tab/newline/carriage return (which is what the messages ever
    show for a valid topic or a previewed key/value); other control characters are shown raw.
    """
    from pyspark.sql import functions as F

    escaped = F.replace(text, _text("\\"), _text("\\\\"))
    for char, escape in (("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")):
        escaped = F.replace(escaped, _text(char), _text(escape))
    double = (F.instr(text, "'") > 0) & (F.instr(text, '"') == 0)
    return F.when(double, F.concat(_text('"'), escaped, _text('"'))).otherwise(
        F.concat(_text("'"), F.replace(escaped, _text("'"), _text("\\'")), _text("'"))
    )


def _preview_column(data: Column) -> Column:
    """`_preview` of a binary column as Spark SQL (only ever evaluated for rejected rows)."""
    from pyspark.sql import functions as F

    text = data.cast("string")
    printable = F.is_valid_utf8(text) & ~text.rlike(_NOT_PRINTABLE)
    shown = F.when(
        printable,
        F.concat(
            _py_repr(F.substring(text, 1, _PREVIEW_LIMIT)),
            F.when(F.char_length(text) > _PREVIEW_LIMIT, _text("...")).otherwise(_text("")),
        ),
    ).otherwise(
        F.concat(
            _text("0x"),
            F.lower(F.hex(F.substring(data, 1, _PREVIEW_LIMIT))),
            F.when(F.octet_length(data) > _PREVIEW_LIMIT, _text("...")).otherwise(_text("")),
        )
    )
    size = F.octet_length(data).cast("string")
    return F.when(data.isNull(), _text("null")).otherwise(
        F.concat(shown, _text(" ("), size, _text(" bytes)"))
    )


def _varint_size_column(value: Column, max_bytes: int = 10) -> Column:
    """Bytes of the zig-zag varint of a value >= 0 (`varint.size_of_varint`): the zig-zag is
    2 * value, and every 7 bits of it take one byte. Pass a column, not an expression: it is
    read once per threshold."""
    from pyspark.sql import functions as F

    size = None
    for nbytes in range(1, max_bytes):
        below = value < F.lit(1 << (7 * nbytes - 1))
        size = F.when(below, nbytes) if size is None else size.when(below, nbytes)
    assert size is not None
    return size.otherwise(max_bytes).cast("bigint")


def _field_size_column(length: Column) -> Column:
    """A length-prefixed field from its octet length (an int): varint(len) + len, or
    varint(-1) = 1 byte for null."""
    from pyspark.sql import functions as F

    return F.when(length.isNull(), F.lit(1).cast("bigint")).otherwise(
        _varint_size_column(length, 5) + length.cast("bigint")
    )


_KEY_LENGTH, _VALUE_LENGTH, _HEADER_BYTES = "_kl_key_len", "_kl_value_len", "_kl_header_bytes"
_BODY, _SIZE, _REASON = "_kl_body", "_kl_size", "_kl_reason"


def _with_record_size(df: DataFrame, has_headers: bool) -> DataFrame:
    """Adds `_kl_size`: `_single_record_batch_size` as Spark expressions (octet lengths, varint
    thresholds), one projection per level so no expression is copied into another's thresholds.

    DefaultRecord: varint(bodySize) + attributes(1) + varlong(tsDelta)(1) + varint(offDelta)(1)
    + key + value + varint(headerCount) + headers(varint len + key, varint len or -1 + value).
    """
    from pyspark.sql import functions as F

    if has_headers:
        headers = F.col("headers")
        count = F.coalesce(F.size(headers), F.lit(0))
        entries = F.aggregate(
            headers,
            F.lit(0).cast("bigint"),
            lambda acc, e: (
                acc
                + _field_size_column(F.octet_length(e["key"]))
                + _field_size_column(F.octet_length(e["value"]))
            ),
        )
        header_bytes = _varint_size_column(count, 5) + F.coalesce(entries, F.lit(0).cast("bigint"))
    else:  # an empty array on every row: varint(0) = 1 byte
        header_bytes = F.lit(1).cast("bigint")
    df = df.select(
        "*",
        F.octet_length("key").alias(_KEY_LENGTH),
        F.octet_length("value").alias(_VALUE_LENGTH),
        header_bytes.alias(_HEADER_BYTES),
    )
    body = (
        F.lit(3).cast("bigint")
        + _field_size_column(F.col(_KEY_LENGTH))
        + _field_size_column(F.col(_VALUE_LENGTH))
        + F.col(_HEADER_BYTES)
    )
    df = df.select("*", body.alias(_BODY))
    size = (
        F.lit(RECORD_BATCH_OVERHEAD).cast("bigint")
        + _varint_size_column(F.col(_BODY))
        + F.col(_BODY)
    )
    return df.select("*", size.alias(_SIZE))


def _positive_murmur2(keys: pa.Array) -> pa.Array:
    """toPositive(murmur2(key)) of every key, vectorized by the core; null key -> null.

    `% partitions` is left to Spark, so one UDF serves topics with different partition counts:
    (h & 0x7fffffff) % n is exactly `partition_for_keys(keys, n)`.
    """
    hashes = (murmur2_array(keys).view(np.uint32) & np.uint32(0x7FFFFFFF)).astype(np.int32)
    if keys.null_count:
        return pa.array(hashes, pa.int32(), mask=keys.is_null().to_numpy(zero_copy_only=False))
    return pa.array(hashes, pa.int32())


def _murmur2_udf(data: Column) -> Column:
    """The Arrow UDF call: only this one binary column travels to Python (4 bytes come back)."""
    from pyspark.sql import functions as F

    def positive_murmur2(keys: pa.Array) -> pa.Array:
        return _positive_murmur2(keys)

    positive_murmur2.__annotations__ = {"keys": pa.Array, "return": pa.Array}
    return F.arrow_udf(positive_murmur2, "int")(data)


@dataclass(frozen=True)
class _TopicColumns:
    """Per-row topic rules as Spark columns (literals when the topic is a constant)."""

    ok: Column  # valid name and configured (never null)
    reason: Column  # why not ok (null when ok)
    partitions: Column
    compact: Column
    log_append_time: Column
    max_message_bytes: Column  # -1: compressed topic, not checked here


def _topic_columns(plan: MappingRules, topic: Column, constant: str | None) -> _TopicColumns:
    from pyspark.sql import functions as F

    if constant is not None:  # checked once, here on the driver
        rules = plan.rules_for(constant)
        if isinstance(rules, str):
            return _TopicColumns(
                F.lit(False), _text(rules), F.lit(1), F.lit(False), F.lit(False), F.lit(-1)
            )
        mmb = -1 if rules.max_message_bytes is None else rules.max_message_bytes
        return _TopicColumns(
            F.lit(True),
            F.lit(None).cast("string"),
            F.lit(rules.partitions),
            F.lit(rules.compact),
            F.lit(rules.log_append_time),
            F.lit(mmb).cast("bigint"),
        )

    listed = sorted(plan.topics)
    length = F.char_length(topic)
    if plan.defaults is None:
        ok = topic.isin(listed) if listed else F.lit(False)
    else:  # any valid name (listed names are valid: the config checked them)
        ok = (
            (length >= 1)
            & (length <= MAX_TOPIC_NAME_LENGTH)
            & ~topic.isin(".", "..")
            & ~topic.rlike(_ILLEGAL_TOPIC_CHAR)
        )
    ok = F.coalesce(ok, F.lit(False))
    illegal = "topic name "
    reason = (
        F.when(topic.isNull(), _text("topic is null"))
        .when(topic == "", _text("topic name '' is illegal: it can't be empty"))
        .when(
            topic.isin(".", ".."),
            F.concat(
                _text(illegal), _py_repr(topic), _text(' is illegal: it cannot be "." or ".."')
            ),
        )
        .when(
            length > MAX_TOPIC_NAME_LENGTH,
            F.concat(
                _text(illegal),
                _py_repr(F.substring(topic, 1, 40)),
                _text(
                    f"... is illegal: it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters "
                    "(has "
                ),
                length.cast("string"),
                _text(")"),
            ),
        )
        .when(
            topic.rlike(_ILLEGAL_TOPIC_CHAR),
            F.concat(
                _text(illegal),
                _py_repr(topic),
                _text(
                    " is illegal: it contains a character other than ASCII alphanumerics, '.', "
                    "'_' and '-'"
                ),
            ),
        )
        .when(
            ~ok,
            F.concat(
                _text("topic "),
                _py_repr(topic),
                _text(" is not configured (add it under topics, or set topic_defaults)"),
            ),
        )
    )

    def by_topic(attr: str, unset: Any, dtype: str) -> Column:
        """CASE over the listed topics, grouped by value; the defaults' value otherwise."""

        def value_of(rules: TopicRules | None) -> Any:
            value = None if rules is None else getattr(rules, attr)
            return unset if value is None else value

        fallback = value_of(plan.defaults)
        groups: dict[Any, list[str]] = {}
        for name in listed:
            value = value_of(plan.topics[name])
            if value != fallback:
                groups.setdefault(value, []).append(name)
        column = None
        for value, names in groups.items():
            test = topic.isin(names)
            column = (
                F.when(test, F.lit(value)) if column is None else column.when(test, F.lit(value))
            )
        fallback_column = F.lit(fallback)
        return (fallback_column if column is None else column.otherwise(fallback)).cast(dtype)

    return _TopicColumns(
        ok,
        reason,
        by_topic("partitions", 1, "int"),  # 1 for unknown topics: never a modulo by zero
        by_topic("compact", False, "boolean"),
        by_topic("log_append_time", False, "boolean"),
        by_topic("max_message_bytes", -1, "bigint"),
    )


def _check_and_partition(prepared: DataFrame, config: IngestConfig) -> DataFrame:
    """Stage 2: partition every row and check it, in Spark; Python sees only the hashed column."""
    from pyspark.sql import functions as F

    plan = mapping_rules(config)
    m = config.mapping
    topic, key, value = F.col("topic"), F.col("key"), F.col("value")
    ts, pos = F.col("timestamp"), F.col(ORDER_COLUMN)["pos"]
    t = _topic_columns(plan, topic, m.topic.name if m.topic.is_constant else None)
    rules = [*plan.topics.values(), *([plan.defaults] if plan.defaults else [])]
    if m.topic.is_constant:
        constant = plan.rules_for(str(m.topic.name))
        rules = [] if isinstance(constant, str) else [constant]

    # Partition: murmur2 of the key (Arrow UDF), the null-key rule, or the explicit column.
    given = F.col(PARTITION_IN_COLUMN)
    if plan.by_key:
        spread = None
        if plan.null_keys == "round_robin":
            spread = (pos % t.partitions).cast("int")
            hashed = None if m.key is None else _murmur2_udf(key) % t.partitions
        else:  # value_hash: a null key hashes the value (null value: empty bytes)
            source = value if m.key is None else F.coalesce(key, value)
            hashed = _murmur2_udf(F.coalesce(source, F.lit(bytearray()))) % t.partitions
        if hashed is None:
            chosen = spread
        elif spread is None:
            chosen = hashed
        else:
            chosen = F.when(key.isNull(), spread).otherwise(hashed)
        partition = F.when(t.ok, chosen).otherwise(F.lit(-1))
    else:
        partition = F.coalesce(given, F.lit(-1))
    staged = prepared.select("*", partition.cast("int").alias("partition"))

    # Checks, in priority order: the first failing one is the row's reason.
    topic_repr = _py_repr(topic)
    reason = F.when(~t.ok, t.reason)
    if not plan.by_key:
        reason = reason.when(given.isNull(), _text("partition is null")).when(
            (given < 0) | (given >= t.partitions),
            F.concat(
                _text("partition "),
                given.cast("string"),
                _text(" is out of range for topic "),
                topic_repr,
                _text(" with "),
                t.partitions.cast("string"),
                _text(" partitions"),
            ),
        )
    if any(r.compact for r in rules):
        reason = reason.when(
            t.compact & key.isNull(),
            F.concat(
                _text("null key on compacted topic "),
                topic_repr,
                _text(" (cleanup.policy=compact)"),
            ),
        )
    if any(not r.log_append_time for r in rules):
        create = ~t.log_append_time
        reason = reason.when(
            create & ts.isNull(), _text("timestamp is null (message.timestamp.type=CreateTime)")
        ).when(create & (ts < 0), F.concat(_text("negative timestamp "), ts.cast("string")))
    if any(r.max_message_bytes is not None for r in rules):
        staged = _with_record_size(staged, bool(m.headers))
        size = F.col(_SIZE)
        reason = reason.when(
            (t.max_message_bytes >= 0) & (size > t.max_message_bytes),
            F.concat(
                _text("record of "),
                size.cast("string"),
                _text(" bytes (as a single-record batch) exceeds max.message.bytes="),
                t.max_message_bytes.cast("string"),
                _text(" of topic "),
                topic_repr,
            ),
        )
    described = F.concat(
        _text("; record: topic="),
        F.coalesce(topic_repr, _text("None")),
        _text(" partition="),
        F.col("partition").cast("string"),
        _text(" key="),
        _preview_column(key),
        _text(" value="),
        _preview_column(value),
        _text(" timestamp="),
        F.coalesce(ts.cast("string"), _text("None")),
        _text(" source row id="),
        pos.cast("string"),
    )
    # The reason is a column of its own, so `error` reads it instead of repeating the checks.
    staged = staged.select("*", reason.alias(_REASON))
    error = F.when(F.col(_REASON).isNotNull(), F.concat(F.col(_REASON), described))
    return staged.select(
        topic.alias("topic"),
        F.col("partition"),
        key.alias("key"),
        value.alias("value"),
        F.col("headers"),
        F.coalesce(ts, F.lit(-1).cast("bigint")).alias("timestamp"),
        F.col(ORDER_COLUMN),
        error.alias(ERROR_COLUMN),
    )


# ---------------------------------------------------------------------------------------------
# Public API


@dataclass(frozen=True)
class MappedRecords:
    """All mapped rows with their check result, and the two views of them.

    `mapped` holds every row plus `_kl_error` (null = valid): persist it if you use both views,
    or the source is read twice.
    """

    mapped: DataFrame
    records: DataFrame  # valid rows: RECORD_COLUMNS + ORDER_COLUMN
    rejects: DataFrame  # invalid rows: error, RECORD_COLUMNS, source_row_id


def _map_all(df: DataFrame, config: IngestConfig) -> DataFrame:
    """Every mapped row with `_kl_error` (null = valid): stage 1, then stage 2."""
    return _check_and_partition(_prepare(df, config), config)


def map_records_with_rejects(df: DataFrame, config: IngestConfig) -> MappedRecords:
    """Map and split: valid records, and rejected rows with the reason (for output.reject_path)."""
    from pyspark.sql import functions as F

    mapped = _map_all(df, config)
    records = mapped.where(F.col(ERROR_COLUMN).isNull()).select(*RECORD_COLUMNS, ORDER_COLUMN)
    rejects = mapped.where(F.col(ERROR_COLUMN).isNotNull()).select(
        F.col(ERROR_COLUMN).alias("error"),
        *RECORD_COLUMNS,
        F.col(f"{ORDER_COLUMN}.pos").alias("source_row_id"),
    )
    return MappedRecords(mapped, records, rejects)


def prepare_records(df: DataFrame, config: IngestConfig) -> DataFrame:
    """Stage 1 alone: topic, key, value, headers (when mapped), timestamp, the explicit
    partition and the source row id, neither partitioned nor checked. For write tasks that run
    stage 2 themselves (`arrow_mapping.checked_records`) on the rows they receive anyway, so
    Python sees each row once (the murmur2 UDF is a Python evaluation of its own)."""
    prepared = _prepare(df, config)
    return prepared.select(
        *(c for c in prepared.columns if c != "headers" or config.mapping.headers)
    )


def map_records(df: DataFrame, config: IngestConfig) -> DataFrame:
    """Source rows -> validated Kafka records (schema in the module docstring).

    Without `config.reject_path`, the first invalid row fails the Spark job with
    `ERROR_PREFIX` + reason + the record (see `invalid_record_error`). With it, invalid rows are
    left out here; get them from `map_records_with_rejects(...).rejects`.
    """
    from pyspark.sql import functions as F

    if config.reject_path is not None:
        return map_records_with_rejects(df, config).records
    mapped = _map_all(df, config)
    failure = F.raise_error(F.concat(F.lit(ERROR_PREFIX), F.col(ERROR_COLUMN)))
    # The check is tied to `partition`, which every consumer of these rows reads.
    partition = F.when(F.col(ERROR_COLUMN).isNull(), F.col("partition")).otherwise(
        failure.cast("int")
    )
    columns = [partition.alias(c) if c == "partition" else F.col(c) for c in RECORD_COLUMNS]
    return mapped.select(*columns, F.col(ORDER_COLUMN))


_RAISED = re.compile(re.escape(ERROR_PREFIX) + r"(.*?)(?:\s+SQLSTATE: \w+)?\s*$", re.S)


def invalid_record_error(error: BaseException) -> InvalidRecordError | None:
    """The InvalidRecordError inside a Spark failure caused by `map_records`, else None.

    Jobs catch the Spark exception and print `str(...)` of this as their one error line.
    """
    text = str(error)
    start = text.find(ERROR_PREFIX)
    if start < 0:
        return None
    line = text[start:].splitlines()[0]
    match = _RAISED.match(line)
    reason = match.group(1) if match else line[len(ERROR_PREFIX) :]
    return InvalidRecordError(reason.strip())
