"""What the schema tests share: an order's columns, two Avro versions of an order, and the
protobuf runtime's own message class for a schema (built from protoc's descriptors)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# an order's columns, one of each kind the encoders map (the map and binary columns are added
# where a format has them)
ORDER_COLUMNS = [
    pa.field("id", pa.int64(), nullable=False),
    pa.field("customer", pa.string()),
    pa.field("amount", pa.decimal128(10, 2)),
    pa.field("day", pa.date32()),
    pa.field("at", pa.timestamp("us", tz="UTC")),
    pa.field("tags", pa.list_(pa.string())),
]

AVRO_V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}],
}
# v1 plus two fields with defaults: reads v1's records (backward compatible)
AVRO_V2: dict[str, Any] = {
    **AVRO_V1,
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "currency", "type": "string", "default": "EUR"},
        {
            "name": "at",
            "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
            "default": None,
        },
    ],
}


def text(schema: dict[str, Any]) -> str:
    return json.dumps(schema)


def runtime_class(schema: Any) -> Any:
    """The message class built by the protobuf runtime from protoc's descriptor set."""
    files = descriptor_pb2.FileDescriptorSet.FromString(schema.descriptor_set)
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(schema.message))
