"""Maintenance and format("kafkalog") on a cluster, in one submit (each submit costs a driver
JVM and two executors): verify a log dir's indexes, read the log dir, write its records to
another, read them back.

cluster_job.py SOURCE_ROOT TOPIC COPY_ROOT    prints the verify summary, then `DATASOURCE {json}`
"""

from __future__ import annotations

import hashlib
import json
import sys

from jobs import rebuild_index
from jobs.spark.session import get_or_create_session


def digest(rows) -> str:
    """Order-free fingerprint of (key, value) pairs."""
    pairs = sorted((bytes(r.key or b""), bytes(r.value or b"")) for r in rows)
    return hashlib.sha256(repr(pairs).encode()).hexdigest()


if __name__ == "__main__":
    source, topic, copy = sys.argv[1:4]
    spark = get_or_create_session("kafkalog-cluster-job")
    rebuild_index.run(spark, source)  # verify, read-only: prints its summary
    records = spark.read.format("kafkalog").option("subscribe", topic).load(source)
    original = records.select("key", "value").collect()
    (
        records.select("key", "value", "timestamp")
        .repartition(2)
        .write.format("kafkalog")
        .option("topic", "copy")
        .option("topics.copy.partitions", "2")
        .option("runId", "copy-1")
        .mode("append")
        .save(copy)
    )
    back = spark.read.format("kafkalog").option("subscribe", "copy").load(copy)
    found = {
        "read": len(original),
        "read_digest": digest(original),
        "copied": back.count(),
        "copied_digest": digest(back.select("key", "value").collect()),
    }
    print("DATASOURCE " + json.dumps(found))
    spark.stop()
