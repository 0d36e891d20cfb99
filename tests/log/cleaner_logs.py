"""Partitions for the cleaner's tests: every kind of batch a compacted topic's log can hold.

`changelog_partition` writes raw batches segment by segment (the scalar encoder sets every header
field) and then loads the directory as a broker would after an unclean shutdown, which builds
the `.index`, `.timeindex` and `.txnindex` files from the batches. What it holds:

- plain batches of several records whose keys repeat (within a batch and across segments),
  some with headers, one with a null-key record, one LogAppendTime batch;
- an idempotent producer (its last batch must stay, emptied if need be);
- a transactional producer with a committed and an aborted transaction, and their markers;
- tombstones: one never cleaned (gets a delete horizon), one whose horizon has passed (goes),
  one whose horizon is still ahead (stays, copied as it is);
- batches of old tombstones that grow when they get a horizon (Kafka's write-buffer overflow
  ends the read chunk early);
- a large batch that does not fit the small I/O buffer the tests use (the buffer grows);
- an active segment beyond the cleanable range.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from kafkalog_core.config import LogConfig
from kafkalog_core.log.names import log_file_name
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.record.batch import Compression, TimestampType
from kafkalog_core.record.control import ControlRecordType, build_end_txn_marker_batch
from kafkalog_core.record.encoder import Record, build_batch

NOW = 1_700_000_000_000
DAY = 86_400_000
HOUR = 3_600_000
COMPACT = LogConfig.from_dict(
    {"cleanup.policy": "compact", "segment.bytes": 1200, "index.interval.bytes": 256}
)
IDEMPOTENT_PID = 100
TXN_PID = 200


class _Log:
    """Batches appended at consecutive offsets, cut into segments by hand."""

    def __init__(self, compression: Compression) -> None:
        self.compression = compression
        self.offset = 0
        self.segments: list[tuple[int, list[bytes]]] = [(0, [])]
        self.sequences: dict[int, int] = {}

    def roll(self) -> None:
        self.segments.append((self.offset, []))

    def add(self, records: Sequence[tuple[bytes | None, bytes | None, int]], **header) -> int:
        """A batch of (key, value, timestamp) at the next offsets; returns its base offset."""
        base = self.offset
        pid = header.get("producer_id", -1)
        if pid >= 0 and not header.get("is_control"):
            header.setdefault("base_sequence", self.sequences.get(pid, 0))
            self.sequences[pid] = header["base_sequence"] + len(records)
        header.setdefault("compression", self.compression)
        headers = header.pop("record_headers", ())
        batch = build_batch(
            [Record(i, ts, k, v, headers) for i, (k, v, ts) in enumerate(records)],
            base_offset=base,
            **header,
        )
        self.segments[-1][1].append(batch)
        self.offset += len(records)
        return base

    def marker(self, kind: ControlRecordType, pid: int, epoch: int, ts: int) -> None:
        batch = build_end_txn_marker_batch(
            control_type=kind,
            producer_id=pid,
            producer_epoch=epoch,
            coordinator_epoch=7,
            base_offset=self.offset,
            timestamp=ts,
        )
        self.segments[-1][1].append(batch)
        self.offset += 1


def changelog_partition(
    d: Path,
    compression: Compression = Compression.NONE,
    *,
    config: LogConfig = COMPACT,
    active: Sequence[tuple[bytes | None, bytes | None, int]] | None = None,
) -> Path:
    """Write the partition described in the module doc into `d` (a `topic-0` dir); `active`:
    the active segment's records (default: k0 and a tombstone of k1, which supersede)."""
    t = NOW - 2 * DAY
    if active is None:
        active = [(b"k0", b"v0-active", t + 50), (b"k1", None, t + 51)]
    log = _Log(compression)
    # segment 0: plain batches, repeated keys, headers, a null key, LogAppendTime
    log.add([(b"k0", b"v0-a", t), (b"k1", b"v1-a", t + 1), (b"k0", b"v0-b", t + 2)])
    log.add(
        [(b"k2", b"v2-a", t + 3), (b"k3", b"v3-a", t + 4)],
        record_headers=(("source", b"db"), ("trace", None)),
    )
    log.add([(None, b"no key", t + 5), (b"k4", b"v4-a", t + 6)])
    log.add(
        [(b"k5", b"v5-a", t + 7), (b"k1", b"v1-b", t + 8)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        max_timestamp=t + 50,
    )
    log.add([(b"k6", b"v6-a", t + 9)], producer_id=IDEMPOTENT_PID, producer_epoch=0)
    log.roll()
    # segment 1: the transactions and the idempotent producer
    log.add(
        [(b"k2", b"v2-txn", t + 10), (b"k7", b"v7-txn", t + 11)],
        producer_id=TXN_PID,
        producer_epoch=3,
        is_transactional=True,
    )
    log.add([(b"k6", b"v6-b", t + 12)], producer_id=IDEMPOTENT_PID, producer_epoch=0)
    log.marker(ControlRecordType.COMMIT, TXN_PID, 3, t + 13)
    log.add(
        [(b"k0", b"v0-aborted", t + 14), (b"k8", b"v8-aborted", t + 15)],
        producer_id=TXN_PID,
        producer_epoch=3,
        is_transactional=True,
    )
    log.marker(ControlRecordType.ABORT, TXN_PID, 3, t + 16)
    log.add([(b"k6", b"v6-c", t + 17)], producer_id=IDEMPOTENT_PID, producer_epoch=0)
    log.roll()
    # segment 2: tombstones in every state
    log.add([(b"k3", None, t + 20)])  # never cleaned: gets a delete horizon
    log.add([(b"k4", None, t + 21)], delete_horizon_ms=NOW - HOUR)  # horizon passed: goes
    log.add([(b"k5", None, t + 22)], delete_horizon_ms=NOW + HOUR)  # horizon ahead: stays
    log.add([(b"k9", b"v9-a", t + 23), (b"k9", None, t + 24)])  # value then tombstone
    log.roll()
    # segment 3: old tombstones whose records grow by 5 bytes each when they get a delete
    # horizon (the write buffer overflows before the read chunk ends), then a batch too big
    # for the read buffer (it grows)
    for b in range(3):
        log.add([(b"t%d%d" % (b, i), None, 1000 + i) for i in range(10)])
    log.add([(b"k7", b"v7-b", t + 39)])
    log.add([(b"big%03d" % i, b"x" * 40, t + 40) for i in range(20)])
    log.add([(b"k1", b"v1-c", t + 41)])
    log.roll()
    # segment 4 (active): beyond the cleanable range
    log.add(active)

    d.mkdir(parents=True, exist_ok=True)
    for base, batches in log.segments:
        (d / log_file_name(base)).write_bytes(b"".join(batches))
    PartitionLog.open(d, config, recovery_point=0).close()
    for k, (base, _) in enumerate(log.segments):  # mtimes in segment order, an hour apart
        mtime = (NOW - DAY + k * HOUR) * 10**6
        for suffix in (".log", ".index", ".timeindex"):
            path = d / (log_file_name(base)[:-4] + suffix)
            if path.exists():
                os.utime(path, ns=(mtime, mtime))
    return d
