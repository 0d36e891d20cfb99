"""The optional C loops (`kafkalog_core._native`, built from `_native.c` by pip) and how Arrow
columns are handed to them.

`module` (encoder, murmur2, the cleaner's key map, the merge of sorted runs), `decode_module`
(the record decoder's walk, `_native_decode.c`) and `schema_module` (Avro and JSON values,
`_native_schema.c`) are None when an extension was not built (no compiler at install time, a
zipped `--py-files` copy) or `KAFKALOG_NATIVE=0` is set; callers then run their numpy or Arrow
paths, which give the same results (the tests compare both)."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa

module: ModuleType | None
try:
    from kafkalog_core import _native as module
except ImportError:  # pragma: no cover - depends on the install
    module = None
decode_module: ModuleType | None
try:
    from kafkalog_core import _native_decode as decode_module
except ImportError:  # pragma: no cover - depends on the install
    decode_module = None
schema_module: ModuleType | None
try:
    from kafkalog_core import _native_schema as schema_module
except ImportError:  # pragma: no cover - depends on the install
    schema_module = None
if os.environ.get("KAFKALOG_NATIVE", "") == "0":
    module = decode_module = schema_module = None

# (offsets of the column's n rows: n + 1 int32/int64, validity bitmap or None, its bit offset,
# data buffer or None)
NativeColumn = tuple[np.ndarray, Any, int, Any]


def column(array: pa.Array) -> NativeColumn:
    """A binary or large_binary array as the C loops read it (zero-copy)."""
    n = len(array)
    buffers = array.buffers()
    validity = buffers[0] if array.null_count else None
    if buffers[1] is None:
        return np.zeros(n + 1, dtype=np.int64), validity, array.offset, None
    dtype = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    offsets = np.frombuffer(buffers[1], dtype=dtype)[array.offset : array.offset + n + 1]
    return offsets, validity, array.offset, buffers[2]
