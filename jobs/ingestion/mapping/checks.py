"""Stage 2 of the record mapping: partitioning and the per-row checks, as Spark expressions.

Only the bytes that are hashed go to Python, in one scalar Arrow UDF (the core's vectorized
murmur2); the checks (a structured key or value that does not fit its schema, topic name,
partition in range, key on compacted topics and on a change feed's deletes, timestamp, the
record alone in a batch within max.message.bytes) are expressions that leave their reason in
`_kl_error`. `mapping`'s module doc has the whole story.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.mapping.rules import (
    DELETE_COLUMN,
    ERROR_COLUMN,
    MISFIT_COLUMN,
    ORDER_COLUMN,
    PARTITION_IN_COLUMN,
    MappingRules,
    TopicRules,
    mapping_rules,
)
from kafkalog_core.log.names import MAX_TOPIC_NAME_LENGTH
from kafkalog_core.partitioner import murmur2_array
from kafkalog_core.record.batch import RECORD_BATCH_OVERHEAD

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["check_and_partition"]


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


def check_and_partition(prepared: DataFrame, config: IngestConfig) -> DataFrame:
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

    # Checks, in priority order: the first failing one is the row's reason. A key or value
    # that does not fit its schema comes first: the row has no record to check.
    topic_repr = _py_repr(topic)
    reason = F.when(~t.ok, t.reason)
    if MISFIT_COLUMN in prepared.columns:
        misfit = F.col(MISFIT_COLUMN)
        reason = F.when(misfit.isNotNull(), misfit).when(~t.ok, t.reason)
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
    if DELETE_COLUMN in prepared.columns:  # change rows: a delete is a tombstone, keyed
        reason = reason.when(
            F.col(DELETE_COLUMN) & key.isNull(),
            _text(
                "a delete without a key: its tombstone is the key with a null value "
                "(set mapping.key, or filter deletes out with source.filter)"
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
