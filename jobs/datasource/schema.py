"""Spark's Kafka source schema as DDL: all that `DataSource.schema()` needs.

Kept free of heavy imports: Spark calls `schema()` in a fresh Python worker on every
`load()`, so what this module pulls in is paid once per query.
"""

from __future__ import annotations

# Spark's Kafka source schema, column for column
KAFKA_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"


def kafka_schema_ddl(include_headers: bool) -> str:
    return f"{KAFKA_SCHEMA_DDL}, {HEADERS_DDL}" if include_headers else KAFKA_SCHEMA_DDL
