"""Real-broker bytes (compressed, magic 0/1 message sets, mixed formats) read through Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog_core.log.names import log_file_name
from tests.datasource.helpers import oracle

pytestmark = pytest.mark.spark


def broker_blobs(manifest: dict) -> list[dict]:
    """Byte-exact slices of broker logs (fetch responses) that a real broker wrote."""
    return [
        e
        for e in manifest["batches"]
        if e["kind"] == "records_blob" and e["real_broker"] is True and e["entries"]
    ]


def test_every_broker_blob_reads_as_kafka_python_decodes_it(
    spark, manifest: dict, fixtures_dir: Path, tmp_path: Path
) -> None:
    blobs = broker_blobs(manifest)
    formats = {f for e in blobs for f in e["entry_counts"]}
    assert {"v1/none", "v1/gzip", "v2/none", "v2/gzip"} <= formats  # legacy and compressed
    for k, entry in enumerate(blobs):
        d = tmp_path / f"blob{k}-{entry['partition']}"  # topic names of our own, legal ones
        d.mkdir()
        blob = (fixtures_dir / "batches" / entry["file"]).read_bytes()
        (d / log_file_name(0)).write_bytes(blob)  # every blob starts at offset 0
    df = spark.read.format("kafkalog").option("subscribePattern", "blob.*").load(str(tmp_path))
    rows = df.select("topic", "offset", "key", "value").collect()
    for k, entry in enumerate(blobs):
        topic = f"blob{k}"
        got = sorted((r.offset, r.key, r.value) for r in rows if r.topic == topic)
        d = tmp_path / f"{topic}-{entry['partition']}"
        expected = sorted((o, key, value) for o, _, key, value in oracle(d))
        assert got == expected, entry["file"]
        assert got, entry["file"]
