"""Record headers serialized with the same element-wise joins as the record fields."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog_core.errors import InvalidRecordError
from kafkalog_core.record.encoder.columns import as_binary, binary_lengths
from kafkalog_core.record.encoder.varints import varint_fields_binary, varint_size_array


def headers_suffix(
    column: pa.Array | None, n: int, base_offset: int
) -> tuple[pa.Array | None, np.ndarray]:
    """headersCount + headers of each record as a binary array (None = no headers at all)."""
    if column is None:
        return None, np.ones(1, dtype=np.int64)  # one 0x00 headersCount byte for every row
    if len(column) != n:
        raise InvalidRecordError(f"column 'headers' has {len(column)} rows but 'value' has {n}")
    if column.null_count == n:
        return None, np.ones(1, dtype=np.int64)
    t = column.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t)):
        raise InvalidRecordError(
            f"column 'headers' has type {t}; expected list<struct<key: string, value: binary>> "
            "or map<string, binary>"
        )
    filled = column.fill_null(pa.scalar([], type=t)) if column.null_count else column
    offsets = filled.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    start, stop = int(offsets[0]), int(offsets[-1])
    if start == stop:  # every list empty (a sink's default): the same 0x00 count per record
        return None, np.ones(1, dtype=np.int64)
    if pa.types.is_map(t):
        h_keys = filled.keys.slice(start, stop - start)
        h_values = filled.items.slice(start, stop - start)
    else:
        entries = filled.values.slice(start, stop - start)
        if not pa.types.is_struct(entries.type) or entries.type.num_fields != 2:
            raise InvalidRecordError(
                f"column 'headers' has entries of type {entries.type}; expected struct<key, value>"
            )
        h_keys, h_values = entries.flatten()
    counts = np.diff(offsets)
    h_keys = as_binary(h_keys, "headers.key")
    h_values = as_binary(h_values, "headers.value")
    if h_keys.null_count:
        first = int(np.flatnonzero(h_keys.is_null().to_numpy(zero_copy_only=False))[0])
        record = int(np.searchsorted(offsets - start, first, side="right")) - 1
        raise InvalidRecordError(
            f"record {record} (offset {base_offset + record}): header {first - (offsets[record] - start)} "
            "has a null key (Kafka header keys must be non-null)"
        )
    key_lengths = binary_lengths(h_keys)
    value_lengths = binary_lengths(h_values)
    entry = pc.binary_join_element_wise(
        varint_fields_binary([(key_lengths, varint_size_array(key_lengths))], len(key_lengths)),
        h_keys,
        varint_fields_binary(
            [(value_lengths, varint_size_array(value_lengths))], len(value_lengths)
        ),
        h_values,
        pa.scalar(b"", pa.large_binary()),
        null_handling="replace",
        null_replacement=b"",
    )
    per_record = pc.binary_join(
        pa.LargeListArray.from_arrays(pa.array(offsets - start, pa.int64()), entry),
        pa.scalar(b"", pa.large_binary()),
    )
    suffix = pc.binary_join_element_wise(
        varint_fields_binary([(counts, varint_size_array(counts))], n),
        per_record,
        pa.scalar(b"", pa.large_binary()),
    )
    return suffix, binary_lengths(suffix)
