"""Record batches -> Arrow records (RECORD_SCHEMA): the read path of dump-log and the Spark reader.

The package exports the API below; its modules, one job each:

- `batch_view.py`: `RecordBatch` (one batch of a buffer, records on demand, its control
  record) and `read_batches`.
- `decode.py`: `decode_records`: many batches decoded as one vectorized group, the located
  `CorruptRecordError`s; `record_spans`: where each record's fields lie, for a rewrite.
- `walk.py`: where each record's fields lie: the sequential length walk, numpy varints, the
  optional C walk (`kafkalog_core._native_decode`); the messages of refusals live here and in
  decode.py only.
- `spans.py`: Arrow binary/string arrays from (start, length) spans, zero-copy then compacted.

Validation is strict and typed: anything malformed is a `CorruptRecordError` naming the batch
position, the record and the problem.
"""

from __future__ import annotations

from kafkalog_core.record.decoder.batch_view import (
    ControlRecord,
    RecordBatch,
    is_control_batch,
    read_batches,
)
from kafkalog_core.record.decoder.decode import RecordSpans, decode_records, record_spans
from kafkalog_core.record.decoder.walk import MIN_RECORD_BODY, MIN_RECORD_SIZE
from kafkalog_core.record.schema import HEADERS_TYPE, RECORD_SCHEMA

__all__ = [
    "HEADERS_TYPE",
    "MIN_RECORD_BODY",
    "MIN_RECORD_SIZE",
    "RECORD_SCHEMA",
    "ControlRecord",
    "RecordBatch",
    "RecordSpans",
    "decode_records",
    "record_spans",
    "is_control_batch",
    "read_batches",
]
