"""What the maintenance jobs leave, read by Apache Kafka's own client (tests/kafka_oracle.py):
`retention --apply` and `rebuild-index --mode rebuild` on a damaged copy leave logs that read
with no error, holding exactly the records they should."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import jobs.rebuild_index as index_job
import jobs.retention as retention_job
from kafkalog_core.config import LogConfig
from kafkalog_core.log import PartitionLog
from kafkalog_core.log.checkpoints import OffsetCheckpointFile
from tests.datasource.helpers import BASE_TS, records_table

pytestmark = pytest.mark.spark

N = 60  # records per partition, timestamps BASE_TS + i seconds
SETTINGS = "segment.bytes: 500, index.interval.bytes: 100, retention.ms: 30000"
TOPICS_YAML = (  # the settings the logs were written with, for the jobs
    f"topics:\n  plain: {{{SETTINGS}}}\n  packed: {{{SETTINGS}, compression.type: gzip}}\n"
)


@pytest.fixture
def written(kafka_client, tmp_path: Path):
    """A log dir (plain-0/1 and packed-0/1, gzip, several segments each) beside its topic
    settings, and what Kafka's client reads in it."""
    root = tmp_path / "logs"
    (tmp_path / "topics.yaml").write_text(TOPICS_YAML)
    topics = yaml.safe_load(TOPICS_YAML)["topics"]
    for topic in ("plain", "packed"):
        config = LogConfig.from_dict(topics[topic])
        for p in (0, 1):
            log = PartitionLog.create(root / f"{topic}-{p}", config)
            for first in range(0, N, 6):  # a batch of 6 records per append
                log.append_records(records_table(p, first, 6))
            log.close()
    return root, kafka_client.kafka_client_read(root)


def _run(job, spark, root: Path, **kw):
    """A maintenance job on `root` with the settings the logs were written with."""
    return job.run(
        spark,
        str(root),
        topic_config=str(root.parent / "topics.yaml"),
        out=lambda _line: None,
        **kw,
    )


def test_retention_apply_leaves_logs_kafka_reads_from_the_new_log_start(
    spark, kafka_client, written
) -> None:
    root, before = written
    segments_before = len(before.segments)
    now = BASE_TS + N * 1000  # retention.ms 30 s: the older half of every partition expires
    _run(retention_job, spark, root, apply=True, now=now)
    after = kafka_client.kafka_client_read(root)
    assert after.offset_problems() == []
    assert len(after.segments) < segments_before
    starts = OffsetCheckpointFile(root / "log-start-offset-checkpoint").read()
    first = after.first_offsets()
    assert {f"{t}-{p}": s for (t, p), s in starts.items()} == first
    assert all(0 < s < N for s in first.values())
    kept = [r for r in before.rows() if r[2] >= first[f"{r[0]}-{r[1]}"]]
    assert after.rows() == kept  # every record from the new log start on, as it was
    removed = [r for r in before.rows() if r[2] < first[f"{r[0]}-{r[1]}"]]
    assert max(r[6] for r in removed) < now - 30_000  # only expired records went


def _damage(root: Path, before) -> dict[str, int]:
    """plain-0: a segment cut mid-batch; packed-1: a byte flipped inside a gzip batch. The
    offset each damaged partition must end before."""
    cut = {}
    for d, segment_index, how in (("plain-0", 1, "truncate"), ("packed-1", 2, "flip")):
        segment = sorted(s for dd, s in before.segments if dd == d)[segment_index]
        batch = [b for b in before.batches if (b.dir, b.segment) == (d, segment)][1]
        path = root / d / segment
        data = bytearray(path.read_bytes())
        if how == "truncate":
            data = data[: batch.position + batch.size // 2]
        else:
            data[batch.position + batch.size - 5] ^= 0xFF  # in the records: the CRC catches it
        path.write_bytes(bytes(data))
        cut[d] = batch.base_offset
    return cut


def test_rebuild_of_a_damaged_copy_leaves_logs_kafka_reads(spark, kafka_client, written) -> None:
    root, before = written
    cut = _damage(root, before)
    with pytest.raises(kafka_client.JavaProgramError):
        kafka_client.kafka_client_read(root)  # the damage is there
    result = _run(index_job, spark, root, mode="rebuild")
    assert result.problems == 0
    after = kafka_client.kafka_client_read(root)
    assert after.offset_problems() == []
    # everything before the damaged batch, as it was; the other partitions untouched
    assert after.rows() == [r for r in before.rows() if r[2] < cut.get(f"{r[0]}-{r[1]}", N)]
