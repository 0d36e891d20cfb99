"""The schemas of `format("kafkalog")`'s two views as DDL: all that `DataSource.schema()` needs.

Kept free of heavy imports: Spark calls `schema()` in a fresh Python worker on every
`load()`, so what this module pulls in is paid once per query.
"""

from __future__ import annotations

from collections.abc import Mapping

# Spark's Kafka source schema, column for column
KAFKA_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"


def view_of(options: Mapping[str, str]) -> str:
    """The `view` option as given (names match without case), RECORDS_VIEW when absent."""
    given = next((v for k, v in options.items() if k.lower() == VIEW_OPTION), RECORDS_VIEW)
    return str(given).strip().lower()


def kafka_schema_ddl(include_headers: bool) -> str:
    return f"{KAFKA_SCHEMA_DDL}, {HEADERS_DDL}" if include_headers else KAFKA_SCHEMA_DDL


def kafka_schema_fields(include_headers: bool) -> list:
    """The same columns as StructFields, for a schema with decoded columns after them (a DDL
    string cannot be parsed in the worker that asks for the schema: it has no JVM)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return fields


def decodes(options: Mapping[str, str]) -> bool:
    """True when the read decodes its key or value (a `key.format` / `value.format` option)."""
    return any(name.lower() in ("key.format", "value.format") for name in options)


VIEW_OPTION = "view"  # what a row is: a record (the default, the Kafka source's) or a segment
RECORDS_VIEW = "records"
SEGMENTS_VIEW = "segments"  # jobs/datasource/segments.py

# The segments view (jobs/datasource/segments.py), one row per segment, in Kafka's terms:
# nextOffset is the offset after its last batch (its base offset when empty), size the bytes of
# its .log, firstBatchTimestamp the first batch's max timestamp (what segment.ms rolls on),
# maxTimestamp the largest (what retention.ms deletes on), and the two index entry counts are
# null where the index file is missing.
SEGMENTS_COLUMNS = (
    ("topic", "string"),
    ("partition", "int"),
    ("baseOffset", "long"),
    ("nextOffset", "long"),
    ("size", "long"),
    ("batches", "long"),
    ("records", "long"),
    ("firstBatchTimestamp", "timestamp"),
    ("maxTimestamp", "timestamp"),
    ("lastModified", "timestamp"),
    ("offsetIndexEntries", "int"),
    ("timeIndexEntries", "int"),
)
SEGMENTS_SCHEMA_DDL = ", ".join(f"{name} {kind}" for name, kind in SEGMENTS_COLUMNS)
