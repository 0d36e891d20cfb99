"""Record batch v2 encoder: Arrow columns -> Kafka batches, vectorized; plus a scalar `build_batch`.

Where things live: `encode` (the vectorized path, `encode_records`; its module doc explains the
byte layout), `native_path` (the same with the C loops), `framing` (batch headers, sizes, CRCs,
compressed regions), `options` (BatchOptions, EncodedBatches), `split` (batch boundaries),
`varints` and `headers` (record fields as Arrow binary values and their joins), `columns`
(input columns), `scalar` (`Record`, `build_batch`).
"""

from kafkalog_core.record.encoder.encode import (
    DEFAULT_CHUNK_BYTES,
    encode_records,
    encode_records_chunked,
    record_timestamps,
)
from kafkalog_core.record.encoder.options import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
    BatchOptions,
    EncodedBatches,
)
from kafkalog_core.record.encoder.scalar import Record, build_batch
from kafkalog_core.record.encoder.split import split_context_rows

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "BatchOptions",
    "EncodedBatches",
    "Record",
    "build_batch",
    "encode_records",
    "encode_records_chunked",
    "record_timestamps",
    "split_context_rows",
]
