"""Spark's Kafka source schema as DDL, and the column types Spark's Kafka sink takes.

Kept free of heavy imports: Spark calls `schema()` in a fresh Python worker on every
`load()`, so what this module pulls in is paid once per query.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kafkalog_core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

# Spark's Kafka source schema, column for column
KAFKA_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"


def kafka_schema_ddl(include_headers: bool) -> str:
    return f"{KAFKA_SCHEMA_DDL}, {HEADERS_DDL}" if include_headers else KAFKA_SCHEMA_DDL


def _bytes(t: DataType) -> bool:
    from pyspark.sql.types import BinaryType, StringType

    return isinstance(t, StringType | BinaryType)


def _string(t: DataType) -> bool:
    from pyspark.sql.types import StringType

    return isinstance(t, StringType)


def _integer(t: DataType) -> bool:
    from pyspark.sql.types import ByteType, IntegerType, LongType, ShortType

    return isinstance(t, ByteType | ShortType | IntegerType | LongType)


def _timestamp(t: DataType) -> bool:
    from pyspark.sql.types import TimestampNTZType, TimestampType

    return isinstance(t, TimestampType | TimestampNTZType)


def _headers(t: DataType) -> bool:
    """array<struct<key: string, value: binary>> (Spark's; a string value is taken too) or a
    map<string, binary|string> (as the ingest mapping's headers column)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

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
    "timestamp": (_timestamp, "timestamp"),
}


def check_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """Refuse, on the driver before any task runs, a DataFrame the Kafka sink would refuse: no
    `value` column, no topic, or a sink column of another type; one line naming the column,
    its type and what the sink takes."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise ConfigError('df.write.format("kafkalog") needs a "value" column (as the Kafka sink)')
    if topic_option is None and "topic" not in types:
        raise ConfigError('no topic: add a "topic" column or .option("topic", ...)')
    for name, (accepts, wanted) in SINK_COLUMNS.items():
        if name not in types or (name == "topic" and topic_option is not None):
            continue  # the topic option overrides the column, as in Spark's sink
        if not accepts(types[name]):
            raise ConfigError(
                f'df.write.format("kafkalog"): column "{name}" is '
                f"{types[name].simpleString()}; the Kafka sink takes {wanted} "
                f'(e.g. col("{name}").cast(...))'
            )
