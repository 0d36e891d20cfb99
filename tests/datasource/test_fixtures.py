"""Real-broker bytes (compressed, magic 0/1 message sets, mixed formats) read through Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.datasource.options import parse_read_options
from jobs.datasource.reader import KafkaLogReader
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


def test_ending_offset_inside_a_legacy_compressed_wrapper(
    manifest: dict, fixtures_dir: Path, tmp_path: Path
) -> None:
    """A magic 1 gzip wrapper names its last inner offset: an end inside it keeps the rows below."""
    d = tmp_path / "legacy-0"
    d.mkdir()
    blob = fixtures_dir / "batches/kafkago_v1c_v1c.records.bin"
    (d / log_file_name(0)).write_bytes(blob.read_bytes())
    everything = [offset for offset, _, _, _ in oracle(d)]
    assert everything[:2] == [0, 1]  # the first wrapper holds offsets 0 and 1, named 1
    for end in range(1, len(everything) + 1):
        reader = KafkaLogReader(
            parse_read_options(
                {
                    "path": str(tmp_path),
                    "subscribe": "legacy",
                    "endingOffsets": f'{{"legacy": {{"0": {end}}}}}',
                }
            )
        )
        got = [
            o
            for p in reader.partitions()
            for b in reader.read(p)
            for o in b.column("offset").to_pylist()
        ]
        assert got == [o for o in everything if o < end]
