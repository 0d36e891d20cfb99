"""The column types Spark's Kafka sink takes, checked on the driver before a write's tasks.

Spark's sink (KafkaWriter.validateQuery) refuses a DataFrame whose `value`, `key`, `topic`,
`partition` or `headers` column has another type, at analysis; `df.write.format("kafkalog")`
does the same in `DataSource.writer`, so a wrong type is one line naming the column, its type
and what the sink takes, not an Arrow kernel error from inside a task. Taken besides Spark's
own types, as the ingest mapping takes them: tinyint/smallint/bigint partitions (values must fit
an int), a string header value, a map<string, binary|string> headers column, timestamp_ntz.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from kafkalog_core.errors import ConfigError


def _bytes(t: DataType) -> bool:
    return isinstance(t, StringType | BinaryType)


def _string(t: DataType) -> bool:
    return isinstance(t, StringType)


def _integer(t: DataType) -> bool:
    return isinstance(t, ByteType | ShortType | IntegerType | LongType)


def _timestamp(t: DataType) -> bool:
    """kafkalog's own column (Spark's Kafka sink has none): a timestamp, or epoch ms."""
    return isinstance(t, TimestampType | TimestampNTZType | LongType | IntegerType)


def _headers(t: DataType) -> bool:
    if isinstance(t, MapType):
        return _string(t.keyType) and _bytes(t.valueType)
    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in t.elementType.fields}
    return set(fields) == {"key", "value"} and _string(fields["key"]) and _bytes(fields["value"])


# column -> (test, what Spark's Kafka sink takes, in Spark's type names)
SINK_COLUMNS: dict[str, tuple[Callable[[DataType], bool], str]] = {
    "value": (_bytes, "string or binary"),
    "key": (_bytes, "string or binary"),
    "topic": (_string, "string"),
    "partition": (_integer, "int (tinyint, smallint or bigint values that fit an int are taken)"),
    "headers": (_headers, "array<struct<key:string,value:binary>>"),
    "timestamp": (_timestamp, "timestamp or bigint epoch milliseconds"),
}


def check_sink_schema(
    schema: StructType, topic_option: str | None, encoded: Collection[str] = ()
) -> None:
    """Refuse a DataFrame the Kafka sink would refuse: no `value` column, no topic, or a sink
    column of another type; one line naming the column, its type and what the sink takes.
    `encoded`: the key/value columns a format (`value.format=avro`...) encodes, of any type
    that format takes (it checks them itself)."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise ConfigError('df.write.format("kafkalog") needs a "value" column (as the Kafka sink)')
    if topic_option is None and "topic" not in types:
        raise ConfigError('no topic: add a "topic" column or .option("topic", ...)')
    for name, (accepts, wanted) in SINK_COLUMNS.items():
        if name not in types or (name == "topic" and topic_option is not None):
            continue  # the topic option overrides the column, as in Spark's sink
        if name in encoded:
            continue
        if not accepts(types[name]):
            raise ConfigError(
                f'df.write.format("kafkalog"): column "{name}" is '
                f"{types[name].simpleString()}; the Kafka sink takes {wanted} "
                f'(e.g. col("{name}").cast(...))'
            )
