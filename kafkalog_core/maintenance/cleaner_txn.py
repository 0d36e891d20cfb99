"""What the cleaner knows about producers and transactions while it reads a log (§8.6).

- `CleanedTransactions` is Kafka's CleanedTransactionMetadata: fed the transactional and
  control batches in offset order, it says which data batches belong to an aborted transaction
  (their records go) and which markers may go (a COMMIT whose transaction had no batch in this
  pass, an ABORT whose batches are all gone). An ABORT marker that stays re-enters the new
  segment's `.txnindex`.
- `ActiveProducers` is the producer state a broker holds when it cleans: every producer seen in
  the log that has not expired (producer.id.expiration.ms, unless it has an open transaction),
  with its last data offset and epoch; the cleaner keeps each one's last batch, emptied if need
  be, so that the producer's sequence and epoch survive.

The aborted transactions come from the segments' `.txnindex` files, as the cleaner reads them
(`read_aborted_txns`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kafkalog_core.log.index.txn_index import AbortedTxn, TransactionIndex
from kafkalog_core.log.names import txn_index_file_name
from kafkalog_core.log.producer_state import ProducerStateEntry
from kafkalog_core.record.batch import BatchHeader
from kafkalog_core.record.control import ControlRecordType

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "ActiveProducers",
    "CleanedTransactions",
    "read_aborted_txns",
]

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms (broker)


def read_aborted_txns(
    partition_dir: str | os.PathLike[str], segment_bases: Sequence[int], log_start_offset: int
) -> list[AbortedTxn]:
    """The `.txnindex` entries of the given segments (in order) that end at or after the log
    start offset: what Kafka's collectAbortedTransactions hands the cleaner."""
    found: list[AbortedTxn] = []
    for base in segment_bases:
        path = Path(partition_dir) / txn_index_file_name(base)
        if path.exists():
            found.extend(
                t
                for t in TransactionIndex(path, base).all_entries()
                if t.last_offset >= log_start_offset
            )
    return found


@dataclass
class _Aborted:
    txn: AbortedTxn
    seen_batch: bool = (
        False  # a batch of it was read in this pass (Kafka's lastObservedBatchOffset)
    )


class CleanedTransactions:
    """Kafka's CleanedTransactionMetadata, one per pass over a log.

    `index_sink` receives the AbortedTxn of every ABORT marker that stays (the current output
    segment's `.txnindex`); None in the pass that builds the offset map.
    """

    def __init__(
        self,
        aborted: Iterable[AbortedTxn],
        index_sink: Callable[[AbortedTxn], None] | None = None,
    ) -> None:
        self._pending = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self._aborted: dict[int, _Aborted] = {}  # producer id -> its ongoing aborted txn
        self._committed: set[int] = set()  # producers with batches of an ongoing committed txn
        self.index_sink = index_sink

    def _consume_up_to(self, offset: int) -> None:
        """Aborted transactions that have begun by `offset` become ongoing (first one wins)."""
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= offset:
            txn = pending[self._next]
            self._aborted.setdefault(txn.producer_id, _Aborted(txn))
            self._next += 1

    def on_data_batch(self, header: BatchHeader) -> bool:
        """A data batch was read; True when it belongs to an aborted transaction (discardable)."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing.seen_batch = True
            return True
        self._committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, control_type: int | None) -> bool:
        """A control batch was read (`control_type` None: it holds no record); True when the
        marker may go once its delete horizon has passed."""
        self._consume_up_to(header.last_offset)
        if control_type is None:
            return True  # emptied by an earlier cleaning
        pid = header.producer_id
        if control_type == ControlRecordType.ABORT:
            ongoing = self._aborted.pop(pid, None)
            if ongoing is not None and ongoing.seen_batch:
                if self.index_sink is not None:
                    self.index_sink(ongoing.txn)
                return False
            return True
        if control_type == ControlRecordType.COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False


class ActiveProducers:
    """The producers a broker still tracks at `now_ms`: their last data offset and epoch."""

    def __init__(
        self,
        entries: Iterable[ProducerStateEntry],
        now_ms: int,
        expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        live = sorted(
            (
                e
                for e in entries
                if e.current_txn_first_offset >= 0 or now_ms - e.timestamp < expiration_ms
            ),
            key=lambda e: e.producer_id,
        )
        self.ids = np.array([e.producer_id for e in live], np.int64)
        self.last_data_offsets = np.array([e.last_offset for e in live], np.int64)
        self.epochs = np.array([e.producer_epoch for e in live], np.int64)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def last_batches(
        self,
        producer_ids: np.ndarray,
        last_offsets: np.ndarray,
        epochs: np.ndarray,
        is_control: np.ndarray,
    ) -> np.ndarray:
        """Which batches are a producer's last one still needed for its state (§8.6): its last
        data batch, or, when it has no data batch, a marker of its current epoch."""
        producer_ids = np.asarray(producer_ids, np.int64)
        if not len(self) or not producer_ids.size:
            return np.zeros(producer_ids.shape[0], bool)
        at = np.minimum(np.searchsorted(self.ids, producer_ids), len(self) - 1)
        known = (producer_ids >= 0) & (self.ids[at] == producer_ids)
        last_data = self.last_data_offsets[at]
        return known & np.where(
            last_data >= 0, last_offsets == last_data, is_control & (epochs == self.epochs[at])
        )
