"""A streaming query of `format("kafkalog")` as a Spark driver of its own, for the kill tests:

    python -m tests.datasource.stream_driver ROOT CHECKPOINT OUT

It reads topic `s` of ROOT from `latest` (processing-time trigger, local[1]) until everything
there is processed, and hands each micro-batch's (partition, offset, value) rows to OUT/<batch
id>.json (written to a temporary name, then renamed: a replayed batch writes the same file).

The source is `ArrivingSource`: `format("kafkalog")` whose starting offsets, the first time they
are resolved, are followed by 20 more records per partition: a producer that writes while the
query starts, between the moment its start is fixed and its first micro-batch.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from jobs.datasource.source import KafkaLogDataSource
from jobs.datasource.stream import KafkaLogStreamReader
from tests.datasource.helpers import driver_command, write_topic

TOPIC, PARTITIONS = "s", 2
FIRST, ARRIVING = 40, 20  # records per partition before the start, and arriving at it


class ArrivingReader(KafkaLogStreamReader):
    def _starting_offsets(self):
        starts = super()._starting_offsets()
        arrived = Path(self.options.path).parent / "arrived"
        if not arrived.exists():  # once per test, whichever process or restart gets here
            write_topic(Path(self.options.path), TOPIC, PARTITIONS, ARRIVING, first=FIRST)
            arrived.touch()
        return starts


class ArrivingSource(KafkaLogDataSource):
    @classmethod
    def name(cls) -> str:
        return "kafkalog_arriving"

    def streamReader(self, schema):  # noqa: N802
        from jobs.datasource.options import parse_read_options

        return ArrivingReader(parse_read_options(self.options, streaming=True), self._decoded())


def save_batch(out: Path):
    def save(frame, batch_id: int) -> None:
        rows = [[r.partition, r.offset, r.value.decode()] for r in frame.collect()]
        tmp = out / f"{batch_id}.json.tmp"
        with open(tmp, "w") as f:
            json.dump(rows, f)
        os.replace(tmp, out / f"{batch_id}.json")

    return save


def command(root: Path, checkpoint: Path, out: Path) -> list[str]:
    return driver_command("tests.datasource.stream_driver", root, checkpoint, out)


def main(argv: list[str]) -> None:
    from tests.conftest import session_builder

    root, checkpoint, out = argv
    Path(out).mkdir(parents=True, exist_ok=True)
    spark = session_builder("kafkalog-stream-driver").master("local[1]").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(ArrivingSource)
    query = (
        spark.readStream.format("kafkalog_arriving")
        .option("subscribe", TOPIC)
        .option("startingOffsets", "latest")
        .load(root)
        .selectExpr("partition", "offset", "value")
        .writeStream.foreachBatch(save_batch(Path(out)))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds")
        .start()
    )
    query.processAllAvailable()
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
