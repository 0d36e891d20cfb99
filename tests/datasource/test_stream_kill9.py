"""kill -9 of a streaming query's driver during its first micro-batch, then the same query again
from its checkpoint: every record after the query's start is read once.

Spark's Kafka source writes its starting offsets to the checkpoint before batch 0: a restart
must not resolve `latest` again, or what arrived between the first start and the kill is
skipped. The driver (tests/datasource/stream_driver.py) has a producer write 20 records per
partition right after the start is fixed; the killer SIGKILLs the driver, its JVM and its Python
workers when the first micro-batch hands its rows to the sink.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.datasource import stream_driver
from tests.datasource.helpers import write_topic
from tests.killer import killed_program, read_steps

pytestmark = pytest.mark.spark

FIRST_BATCH_WRITE = r"^open .*/out/\d+\.json\.tmp$"


def test_a_stream_killed_in_its_first_batch_reads_each_record_once(tmp_path: Path) -> None:
    root, checkpoint, out = tmp_path / "logs", tmp_path / "ckpt", tmp_path / "out"
    write_topic(root, stream_driver.TOPIC, stream_driver.PARTITIONS, stream_driver.FIRST)
    command = stream_driver.command(root, checkpoint, out)
    killed = killed_program(command, log=tmp_path / "steps", under=out, at=FIRST_BATCH_WRITE)
    assert killed.returncode == -9, killed.stderr.decode()[-3000:]
    assert read_steps(tmp_path / "steps")[-1].startswith("open ")
    assert (tmp_path / "arrived").exists()  # the producer wrote before the kill

    again = killed_program(command, log=tmp_path / "steps-again", under=tmp_path / "none")
    assert again.returncode == 0, again.stderr.decode()[-3000:]

    rows = [tuple(r) for f in sorted(out.glob("*.json")) for r in json.loads(f.read_text())]
    want = [
        (p, offset, f"value-{p}-{offset}")
        for p in range(stream_driver.PARTITIONS)
        for offset in range(stream_driver.FIRST, stream_driver.FIRST + stream_driver.ARRIVING)
    ]
    assert sorted(rows) == want  # the arrivals once each; nothing from before the start
