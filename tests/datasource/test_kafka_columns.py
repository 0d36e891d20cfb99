"""The Kafka source's columns from decoded records (`to_kafka_batches`), value by value as Spark's
own Kafka source gives them."""

from __future__ import annotations

import pyarrow as pa

from jobs.datasource.scan import to_kafka_batches
from kafkalog_core.record.schema import RECORD_SCHEMA


def test_a_record_without_headers_has_null_headers_as_in_sparks_kafka_source() -> None:
    """KafkaRecordToRowConverter gives null, not an empty array, when a record has no headers."""
    headers = [[], [{"key": "h", "value": b"1"}], [{"key": "n", "value": None}]]
    table = pa.table(
        {
            "offset": pa.array([0, 1, 2], pa.int64()),
            "timestamp": pa.array([10, 11, 12], pa.int64()),
            "timestamp_type": pa.array([0, 0, 0], pa.int8()),
            "key": pa.array([None, b"k", b"k"], pa.binary()),
            "value": pa.array([b"v", b"", None], pa.binary()),
            "headers": pa.array(headers, RECORD_SCHEMA.field("headers").type),
        }
    )
    (batch,) = to_kafka_batches(table, "t", 0, include_headers=True)
    assert batch.column("headers").to_pylist() == [None, *headers[1:]]
