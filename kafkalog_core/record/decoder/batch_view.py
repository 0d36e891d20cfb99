"""`RecordBatch`: a view of one batch in a buffer, and `read_batches` over a log buffer.

Header fields come without parsing, records on demand (decode.py), for v2 batches and legacy
(magic 0/1) top-level messages alike; `control_record()` reads a control batch's one record
(§1.5).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kafkalog_core.errors import CorruptRecordError
from kafkalog_core.record.batch import (
    CONTROL_MASK,
    INT32_MAX,
    MAGIC_V2,
    BatchHeader,
    ensure_valid,
    is_valid,
    iter_batch_headers,
)
from kafkalog_core.record.control import (
    ControlRecordType,
    parse_control_record_key,
    parse_end_txn_marker_value,
)
from kafkalog_core.record.decoder.decode import check_v2_bounds, decode_v2_group, records_area
from kafkalog_core.record.legacy import decode_legacy_entry

# ---------------------------------------------------------------------------------------------
# control records (§1.5)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """The record of a control batch: its type and, for COMMIT/ABORT markers, the coordinator epoch."""

    type: ControlRecordType
    coordinator_epoch: int | None

    @property
    def is_end_txn_marker(self) -> bool:
        return self.type in (ControlRecordType.ABORT, ControlRecordType.COMMIT)


def _parse_control(key: bytes | None, value: bytes | None, where: str) -> ControlRecord:
    try:
        ctype = parse_control_record_key(key)
        epoch = None
        if ctype in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            epoch = parse_end_txn_marker_value(value)
    except CorruptRecordError as error:
        raise CorruptRecordError(f"{where}: {error}") from None
    return ControlRecord(type=ctype, coordinator_epoch=epoch)


# ---------------------------------------------------------------------------------------------
# the batch view
# ---------------------------------------------------------------------------------------------


class RecordBatch:
    """A view of one batch in a buffer: header fields without parsing, records on demand.

    Works for v2 batches and for legacy (magic 0/1) top-level messages alike, so a reader of a
    mixed log (old segments, fetch responses) sees one type.
    """

    __slots__ = ("_buf", "_verify", "header")

    def __init__(
        self, buf: bytes | bytearray | memoryview, header: BatchHeader, *, verify: bool = False
    ) -> None:
        """`verify` also checks the CRCs of a legacy wrapper's inner messages in `records()`."""
        self._buf = memoryview(buf)
        self.header = header
        self._verify = verify

    def __repr__(self) -> str:
        h = self.header
        return (
            f"RecordBatch(position={h.position}, magic={h.magic}, base_offset={h.base_offset}, "
            f"last_offset={h.last_offset}, count={h.records_count}, size={h.size})"
        )

    @property
    def record_count(self) -> int:
        return self.header.records_count

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    def is_valid(self) -> bool:
        return is_valid(self._buf, self.header)

    def ensure_valid(self) -> None:
        ensure_valid(self._buf, self.header)

    def raw(self) -> memoryview:
        """The batch's bytes."""
        return self._buf[self.header.position : self.header.position + self.header.size]

    def records_data(self) -> bytes | memoryview:
        """The records area, decompressed: what the record walker reads (v2 only)."""
        h = self.header
        check_v2_bounds(self._buf, h)
        return records_area(self._buf, h)

    def records(self) -> pa.Table:
        """All records of the batch as a RECORD_SCHEMA table (control records included)."""
        if self.header.magic < MAGIC_V2:
            return decode_legacy_entry(self._buf, self.header, verify=self._verify)
        return decode_v2_group(self._buf, [self.header])

    def sequences(self) -> np.ndarray:
        """Each record's producer sequence: baseSequence + offsetDelta with Kafka's int32 wrap.

        -1 for every record when the batch has no baseSequence (non-idempotent producer).
        """
        h = self.header
        deltas = self.records().column("offset").to_numpy() - h.base_offset
        if h.base_sequence < 0:
            return np.full(deltas.shape[0], -1, np.int64)
        return (h.base_sequence + deltas) % (INT32_MAX + 1)

    def control_record(self) -> ControlRecord | None:
        """Type (and coordinator epoch for COMMIT/ABORT) of a control batch; None otherwise."""
        h = self.header
        if not h.is_control:
            return None
        table = self.records()
        where = f"control batch at position {h.position} (base offset {h.base_offset})"
        if table.num_rows == 0:
            raise CorruptRecordError(f"{where}: holds no control record")
        return _parse_control(
            table.column("key")[0].as_py(), table.column("value")[0].as_py(), where
        )


def read_batches(
    buf: bytes | bytearray | memoryview,
    *,
    start: int = 0,
    end: int | None = None,
    verify: bool = True,
) -> Iterator[RecordBatch]:
    """The batches of a log buffer as RecordBatch views (FileLogInputStream semantics, §1.8)."""
    for header in iter_batch_headers(buf, start=start, end=end, verify=verify):
        yield RecordBatch(buf, header, verify=verify)


def is_control_batch(header: BatchHeader) -> bool:
    """Attribute bit 5 on a v2 batch (kept here so readers need not import batch masks)."""
    return header.magic >= MAGIC_V2 and bool(header.attributes & CONTROL_MASK)
