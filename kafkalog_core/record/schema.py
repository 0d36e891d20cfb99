"""The Arrow shape of decoded records, shared by the v2 decoder and the legacy (magic 0/1) reader.

Its own module so that neither reader has to import the other for it.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["HEADERS_TYPE", "HEADER_STRUCT_TYPE", "RECORD_SCHEMA"]

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
