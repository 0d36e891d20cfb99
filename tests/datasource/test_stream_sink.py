"""`df.writeStream.format("kafkalog")`: each micro-batch is one staged, journaled publish whose
run id is the query's and the batch's, so a batch Spark replays after a crash is published once.

The kill tests run the query in a driver of its own (tests/datasource/sink_driver.py, local[1])
and SIGKILL it, its JVM and its Python workers at a step of the micro-batch's commit; the same
query is then started again from its checkpoint in the tests' session.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from jobs.ingestion.run.history import IngestHistory
from kafkalog_core.root.meta_area import publish_journal_path
from tests.datasource import sink_driver
from tests.datasource.helpers import oracle, write_topic
from tests.killer import killed_program, read_steps

pytestmark = pytest.mark.spark

KILLS = {
    # the tasks have staged, the commit has relaid out: nothing published yet
    "between staging and publish": r"^open .*/publish-journal\.json",
    # published and in the run history; Spark has not written its commit log yet
    "after the publish": r"^unlink .*/publish-journal\.json$",
}


def values(root: Path, topic: str, partitions: int) -> Counter:
    return Counter(v for p in range(partitions) for _, _, _, v in oracle(root / f"{topic}-{p}"))


def committed_runs(out: Path) -> list[str]:
    runs = IngestHistory(out).read().to_pylist()
    return sorted(r["run_id"] for r in runs if r["status"] == "committed")


def test_a_stream_into_a_log_dir_writes_each_record_once(spark, tmp_path: Path) -> None:
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    write_topic(source, "s", 2, 40)
    sink_driver.copy(spark, source, out, checkpoint)  # 80 records, 50 a micro-batch
    write_topic(source, "s", 2, 30, first=40)
    sink_driver.copy(spark, source, out, checkpoint)  # the query again: 60 more
    assert values(out, "copy", 2) == values(source, "s", 2)
    assert sum(values(out, "copy", 2).values()) == 140
    runs = committed_runs(out)
    assert len(runs) == 4 and all(re.fullmatch(r"stream-[0-9a-f-]{36}-batch-\d", r) for r in runs)
    assert len({r.rsplit("-batch-", 1)[0] for r in runs}) == 1  # one query id across restarts


@pytest.mark.parametrize("where", sorted(KILLS))
def test_a_stream_killed_in_a_commit_then_restarted_writes_each_record_once(
    spark, tmp_path: Path, where: str
) -> None:
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    write_topic(source, "s", 2, 40)
    killed = killed_program(
        sink_driver.command(source, out, checkpoint),
        log=tmp_path / "steps",
        under=tmp_path,  # the log dir and its meta area beside it (staging, journal, history)
        at=KILLS[where],
    )
    assert killed.returncode == -9, killed.stderr.decode()[-3000:]
    assert re.search(KILLS[where], read_steps(tmp_path / "steps")[-1])
    assert committed_runs(out) == ([] if where == "between staging and publish" else runs_0(out))

    sink_driver.copy(spark, source, out, checkpoint)  # the same query, from its checkpoint

    assert values(out, "copy", 2) == values(source, "s", 2)  # every record once
    assert not publish_journal_path(out).exists()
    assert len(committed_runs(out)) == 2  # batch 0 (once) and batch 1


def runs_0(out: Path) -> list[str]:
    runs = committed_runs(out)
    assert len(runs) == 1 and runs[0].endswith("-batch-0")
    return runs
