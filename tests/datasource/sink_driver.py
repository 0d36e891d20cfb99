"""A streaming query from one log dir into another as a Spark driver of its own, for the sink's
kill tests:

    python -m tests.datasource.sink_driver SOURCE OUT CHECKPOINT

`copy` is the query: topic `s` of SOURCE from the earliest offsets, 50 records a micro-batch
(Trigger.AvailableNow), into topic `copy` (2 partitions) of OUT through
`writeStream.format("kafkalog")`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.datasource.helpers import driver_command


def copy(spark, source: Path, out: Path, checkpoint: Path) -> None:
    query = (
        spark.readStream.format("kafkalog")
        .option("subscribe", "s")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "50")
        .load(str(source))
        .select("key", "value")
        .writeStream.format("kafkalog")
        .option("topic", "copy")
        .option("topics.copy.partitions", "2")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(out))
    )
    query.awaitTermination(300)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def command(source: Path, out: Path, checkpoint: Path) -> list[str]:
    return driver_command("tests.datasource.sink_driver", source, out, checkpoint)


def main(argv: list[str]) -> None:
    from tests.conftest import session_builder

    source, out, checkpoint = map(Path, argv)
    spark = session_builder("kafkalog-sink-driver").master("local[1]").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    copy(spark, source, out, checkpoint)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
