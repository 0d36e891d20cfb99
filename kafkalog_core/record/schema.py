"""The Arrow shape of decoded records, shared by the v2 decoder and the legacy (magic 0/1) reader.

Its own module so that neither reader has to import the other for it.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "HEADERS_TYPE",
    "HEADER_STRUCT_TYPE",
    "RECORD_SCHEMA",
    "RECORD_SIZE_FIELD",
    "VALUE_SIZE_FIELD",
]

HEADER_STRUCT_TYPE = pa.struct(
    [pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]
)
HEADERS_TYPE = pa.list_(HEADER_STRUCT_TYPE)

RECORD_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.int64()),
        pa.field("timestamp_type", pa.int8()),  # 0 CreateTime, 1 LogAppendTime, -1 none (magic 0)
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
    ]
)

# Opt-in extra column (`with_sizes=True`): the record's encoded bytes inside its batch. For v2,
# the length varint plus the body in the (decompressed) records area; for magic 0/1, the whole
# message with its 12-byte log overhead. What compaction frees when it drops the record.
RECORD_SIZE_FIELD = pa.field("record_size", pa.int32())
# what `decode_records(values=False)` gives in place of `value`: its byte length, -1 for null
VALUE_SIZE_FIELD = pa.field("value_size", pa.int32())
