"""What the ingest job writes, read by Apache Kafka's own client (tests/kafka_oracle.py): one
topic per compression type, every record as the source row it came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.ingest import LEADER_EPOCH, run
from jobs.ingestion.config.ingest_config import IngestConfig
from tests.jobs.ingest_helpers import config_doc, expected_records, source_rows, write_parquet

pytestmark = pytest.mark.spark

# Kafka's CompressionType name (what its client reports) -> the topic's compression.type
CODECS = {"none": "uncompressed", "gzip": "gzip", "snappy": "snappy", "lz4": "lz4", "zstd": "zstd"}


def test_every_compression_type_reads_back_through_kafkas_client(
    spark, kafka_client, tmp_path: Path
) -> None:
    rows = source_rows(250)  # null and empty payloads, null header values, equal timestamps
    for r in rows:
        r["topic"] = list(CODECS)[r["id"] % len(CODECS)]
    topics = {
        codec: {
            "partitions": 2,
            "config": {
                "compression.type": setting,
                "segment.bytes": 4096,
                "index.interval.bytes": 1024,
            },
        }
        for codec, setting in CODECS.items()
    }
    root = tmp_path / "logs"
    doc = config_doc(
        write_parquet(tmp_path / "src", rows),
        root,
        topics=topics,
        mapping={"topic": {"column": "topic"}},
    )
    result = run(
        spark,
        IngestConfig.from_dict(doc),
        run_id="codecs",
        batch_bytes=1024,
        out=lambda _line: None,
    )
    assert result.records == len(rows)

    read = kafka_client.kafka_client_read(root)
    assert read.rows() == expected_records(rows, dict.fromkeys(CODECS, 2))
    assert read.offset_problems() == []
    assert set(read.first_offsets().values()) == {0}
    assert len(read.segments) > len(read.first_offsets())  # some partitions rolled
    for codec in CODECS:
        batches = [b for b in read.batches if b.dir.startswith(f"{codec}-")]
        assert {b.compression for b in batches} == {codec}
    assert {(b.magic, b.timestamp_type) for b in read.batches} == {(2, "CreateTime")}
    assert {b.partition_leader_epoch for b in read.batches} == {LEADER_EPOCH}
    assert not any(b.transactional or b.control for b in read.batches)
    stamps: dict[tuple[str, str, int], list[int]] = {}
    for r in read.records:
        stamps.setdefault((r.dir, r.segment, r.position), []).append(r.timestamp)
    for b in read.batches:  # a batch's max timestamp is its records' maximum
        assert b.max_timestamp == max(stamps[(b.dir, b.segment, b.position)])
