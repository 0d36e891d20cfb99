"""Starting write-back early is a pure hint: it never changes what a log holds."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kafkalog_core.config import LogConfig
from kafkalog_core.log import writeback
from kafkalog_core.log.partition.partition_log import PartitionLog

CONFIG = LogConfig.from_dict({"segment.bytes": 40_000, "index.interval.bytes": 512})


def _records(n: int, start: int) -> pa.Table:
    rng = np.random.default_rng(start)
    return pa.table(
        {
            "key": pa.array([b"k%d" % (i % 11) for i in range(start, start + n)]),
            "value": pa.array([bytes(rng.integers(0, 255, 90, dtype=np.uint8)) for _ in range(n)]),
            "timestamp": pa.array(1_700_000_000_000 + np.arange(start, start + n), pa.int64()),
        }
    )


def _write(directory: Path, hint: bool) -> dict[str, bytes]:
    log = PartitionLog.create(directory, CONFIG, leader_epoch=0)
    for chunk in range(6):
        log.append_records(_records(300, chunk * 300), max_batch_bytes=4096, now_ms=0)
        if hint:
            log.start_writeback()
    log.close(fsync=True)
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_a_log_written_with_write_back_hints_is_byte_identical(tmp_path):
    hinted = _write(tmp_path / "hinted", hint=True)
    plain = _write(tmp_path / "plain", hint=False)
    assert hinted == plain
    assert sum(name.endswith(".log") for name in hinted) >= 3  # rolled segments too
    reopened = PartitionLog.open(tmp_path / "hinted", CONFIG, had_clean_shutdown=True)
    assert reopened.log_end_offset == 1800
    reopened.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_write_back_is_accepted_on_linux_and_a_bad_descriptor_is_harmless(tmp_path):
    assert writeback.available()
    path = tmp_path / "f"
    with open(path, "wb") as f:
        f.write(os.urandom(1 << 20))
        f.flush()
        assert writeback.start_writeback(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    os.close(fd)
    assert writeback.start_writeback(fd) is False  # closed descriptor: refused, no exception
