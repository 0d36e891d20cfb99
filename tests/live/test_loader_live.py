"""Issue 36 items 1 and 2 through a real broker: kafkalog's loader keeps what Kafka's keeps.

A topic of 1 MiB segments (Kafka's smallest) is produced to the live broker, which is then
stopped cleanly. Its partition dir is damaged as each scenario says; kafkalog's loader opens a
copy with the broker's shutdown state while the broker loads the original. Both must leave the
same .log bytes: after an unclean shutdown the broker keeps every segment after the one whose
missing .index made pass 4 cut a CRC-bad batch (item 1), and after a clean one it cuts nothing
for a missing .timeindex and a CRC-bad batch, creating the time index empty (item 2).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from kafkalog_core.config import LogConfig
from kafkalog_core.log.checkpoints import OffsetCheckpointFile
from kafkalog_core.log.names import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT_FILE
from kafkalog_core.log.partition.partition_log import PartitionLog
from kafkalog_core.record.batch import iter_batch_headers
from tests.live.records import consume_all, create_topic, produce

SEGMENT_BYTES = 1 << 20
RECORDS = [(b"k%d" % i, b"%06d" % i * 160) for i in range(3600)]  # about 3.5 MiB: 4 segments


def _flip_middle_batch(log: Path) -> int:
    """Flip the last byte of the middle batch of `log` (its CRC fails); its position."""
    data = bytearray(log.read_bytes())
    headers = list(iter_batch_headers(bytes(data)))
    victim = headers[len(headers) // 2]
    data[victim.position + victim.size - 1] ^= 0xFF
    log.write_bytes(bytes(data))
    return victim.position


def _logs(pdir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(pdir.glob("*.log"))}


def _damaged(kafka_broker, tmp_path: Path, topic: str, missing: str, clean: bool):
    """Produce, stop, damage the second segment (its `missing` index file deleted, a CRC flip),
    set the shutdown state; returns (the broker's partition dir, kafkalog's loaded copy, the
    damaged segment's name, the flipped batch's position, the .log files before any load)."""
    create_topic(kafka_broker, topic, **{"segment.bytes": SEGMENT_BYTES})
    produce(kafka_broker, topic, RECORDS, **{"linger.ms": 0, "batch.size": 16384})
    kafka_broker.stop()
    (node,) = kafka_broker.nodes.values()
    root = node.log_dirs[0]
    pdir = root / f"{topic}-0"
    logs = sorted(pdir.glob("*.log"))
    assert len(logs) >= 3, [p.name for p in logs]
    position = _flip_middle_batch(logs[1])
    logs[1].with_suffix(missing).unlink()
    recovery_point = 0
    if not clean:  # an unclean shutdown with recovery point 0 for the partition
        (root / CLEAN_SHUTDOWN_FILE).unlink()
        checkpoint = OffsetCheckpointFile(root / RECOVERY_POINT_CHECKPOINT_FILE)
        points = checkpoint.read()
        points[(topic, 0)] = recovery_point
        checkpoint.write(points)
    before = _logs(pdir)
    copy = tmp_path / f"{topic}-0"
    shutil.copytree(pdir, copy)
    config = LogConfig.from_dict({"segment.bytes": str(SEGMENT_BYTES)})
    loaded = PartitionLog.open(copy, config, had_clean_shutdown=clean, recovery_point=0)
    # the offsets it holds, past a kept CRC-bad batch too (read as a consumer walks them)
    offsets = [
        offset
        for seg in loaded.segments
        for h in iter_batch_headers(seg.log_path.read_bytes())
        for offset in range(h.base_offset, h.last_offset + 1)
    ]
    loaded.close()
    kafka_broker.start()  # the broker's LogLoader on the original
    return pdir, copy, logs[1].name, position, before, offsets


def test_pass_4_cut_keeps_later_segments_as_a_broker(kafka_broker, tmp_path: Path) -> None:
    pdir, copy, damaged, position, before, offsets = _damaged(
        kafka_broker, tmp_path, "loader-pass4", ".index", clean=False
    )
    consumed = [o for o, _k, _v in consume_all(kafka_broker, "loader-pass4")]
    kafka_broker.stop()
    broker_logs = _logs(pdir)
    kafka_broker.start()
    assert broker_logs == _logs(copy)  # the same bytes kept, segment for segment
    assert sorted(broker_logs) == sorted(before)  # no segment dropped
    assert len(broker_logs[damaged]) == position  # pass 4 cut the bad batch and what follows
    assert all(broker_logs[name] == data for name, data in before.items() if name > damaged)
    assert consumed == offsets  # what a consumer reads is what kafkalog's log holds


def test_a_missing_timeindex_and_a_bad_batch_cut_nothing(kafka_broker, tmp_path: Path) -> None:
    pdir, copy, damaged, _position, before, offsets = _damaged(
        kafka_broker, tmp_path, "loader-timeindex", ".timeindex", clean=True
    )
    kafka_broker.stop()
    broker_logs = _logs(pdir)
    broker_time_index = (pdir / damaged).with_suffix(".timeindex").read_bytes()
    kafka_broker.start()
    assert broker_logs == before == _logs(copy)  # not a byte cut, by either
    assert broker_time_index == b"" == (copy / damaged).with_suffix(".timeindex").read_bytes()
    assert offsets == list(range(len(RECORDS)))  # every record still there
