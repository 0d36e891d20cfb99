"""What `encode_records` is asked for (`BatchOptions`) and what it returns (`EncodedBatches`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kafkalog_core.errors import ConfigError
from kafkalog_core.record.batch import (
    INT32_MAX,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
    Compression,
    TimestampType,
)

DEFAULT_MAX_BATCH_BYTES = 1048576  # the target size of one batch (like batch.size, but 1 MiB)
DEFAULT_MAX_MESSAGE_BYTES = 1048588  # max.message.bytes default (1 MiB + 12)


@dataclass(frozen=True, slots=True)
class BatchOptions:
    """How `encode_records` fills batch headers and where it splits batches.

    Defaults are what the Java producer writes for a non-idempotent, non-transactional send:
    producerId/epoch/baseSequence -1, partitionLeaderEpoch -1, CreateTime, no compression.
    `base_sequence` is the first batch's; later batches continue the sequence (with Kafka's
    wraparound) as one producer's consecutive batches would.
    """

    compression: Compression = Compression.NONE
    compression_level: int | None = None
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    log_append_time_ms: int | None = None
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    is_transactional: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "compression", Compression(self.compression))
        object.__setattr__(self, "timestamp_type", TimestampType(self.timestamp_type))
        if self.max_batch_bytes <= RECORD_BATCH_OVERHEAD:
            raise ConfigError(
                f"max_batch_bytes={self.max_batch_bytes} must be larger than the "
                f"{RECORD_BATCH_OVERHEAD}-byte batch header"
            )
        if self.max_message_bytes < RECORD_BATCH_OVERHEAD:
            raise ConfigError(
                f"max_message_bytes={self.max_message_bytes} is below the "
                f"{RECORD_BATCH_OVERHEAD}-byte batch header"
            )
        if self.timestamp_type is TimestampType.LOG_APPEND_TIME:
            if self.log_append_time_ms is None:
                raise ConfigError(
                    "timestamp_type=LogAppendTime needs log_append_time_ms (the broker's append "
                    "time written as every batch's maxTimestamp)"
                )
            if self.log_append_time_ms < 0:
                raise ConfigError(f"log_append_time_ms={self.log_append_time_ms} must be >= 0")
        if self.is_transactional and self.producer_id == NO_PRODUCER_ID:
            raise ConfigError("is_transactional=True needs a producer_id (it is -1)")
        if self.producer_id != NO_PRODUCER_ID:
            if self.producer_epoch < 0:
                raise ConfigError(
                    f"producer_id={self.producer_id} needs producer_epoch >= 0, got {self.producer_epoch}"
                )
            if self.base_sequence < 0:
                raise ConfigError(
                    f"producer_id={self.producer_id} needs base_sequence >= 0, got {self.base_sequence}"
                )
        if not -(2**31) <= self.partition_leader_epoch <= INT32_MAX:
            raise ConfigError(
                f"partition_leader_epoch={self.partition_leader_epoch} is not an int32"
            )
        if not -(2**15) <= self.producer_epoch < 2**15:
            raise ConfigError(f"producer_epoch={self.producer_epoch} is not an int16")
        if not -1 <= self.base_sequence <= INT32_MAX:
            raise ConfigError(f"base_sequence={self.base_sequence} must be -1 or 0..{INT32_MAX}")


@dataclass(frozen=True, slots=True, eq=False)
class EncodedBatches:
    """Encoded batches laid out back to back in `buffer`, with one array entry per batch.

    `buffer` is a bytes-like object (a `memoryview` over Arrow- or Python-owned memory; it keeps
    that memory alive): write it to a file as is, or take `batch(i)`.
    """

    buffer: memoryview
    positions: np.ndarray  # int64: byte position of each batch in `buffer`
    sizes: np.ndarray  # int64: total bytes of each batch (length + 12)
    base_offsets: np.ndarray  # int64
    last_offsets: np.ndarray  # int64
    max_timestamps: np.ndarray  # int64: the header's maxTimestamp
    record_counts: np.ndarray  # int64
    start_offset: int = 0  # base_offset given to encode_records: next_offset when empty

    def __len__(self) -> int:
        return int(self.positions.shape[0])

    def batch(self, i: int) -> memoryview:
        """The bytes of batch `i`."""
        start = int(self.positions[i])
        return self.buffer[start : start + int(self.sizes[i])]

    @property
    def total_bytes(self) -> int:
        return len(self.buffer)

    @property
    def next_offset(self) -> int:
        """The offset after the last record (the log end offset after appending these)."""
        return int(self.last_offsets[-1]) + 1 if len(self) else self.start_offset
