"""Source rows -> Kafka records: a pure DataFrame -> DataFrame transform, validated per row.

`map_records(df, config)` returns exactly:

    topic string, partition int, key binary, value binary,
    headers array<struct<key: string, value: binary>>, timestamp bigint (ms; -1 = none),
    _kl_order struct<o0, o1, ..., pos: bigint>

Sort a partition's rows by `_kl_order` (ascending) to get its offsets: `o0..` are the
configured `ordering` expressions and `pos` is the source row id (monotonically_increasing_id
taken right after reading, stable for the same input files and split settings), so ties are
broken deterministically and the same input always yields the same offsets.

Two stages:
1. Spark expressions (checked against the source schema on the driver, so a missing column or a
   bad expression is a `ConfigError` naming the mapping setting before any job runs): topic,
   key/value bytes in their format, headers, timestamp in ms, explicit partition, ordering.
2. Partitioning and the per-row checks, also as Spark expressions: only the bytes that are
   hashed go to Python, in one scalar Arrow UDF (`_positive_murmur2`: the core's vectorized
   murmur2, identical to the Java producer, `% partitions` in Spark) that receives the key
   column alone (with `null_keys: value_hash`, the value instead of a null key). Null keys
   follow a deterministic rule (see `PartitionMapping`); an explicit partition column or
   round-robin without a key needs no Python at all. The checks: a structured key or value
   that does not fit its schema (found by its encoder in stage 1, `MISFIT_COLUMN`), topic name
   (Kafka's rules) and configured, partition in range, key present on compacted topics,
   timestamp present and >= 0 (CreateTime), and the record alone in a batch within max.message.bytes (uncompressed topics,
   from octet lengths with Kafka's varint sizes; compressed sizes are the encoder's to check).
   `jobs.ingestion.mapping.arrow_mapping.map_batch` is the same stage over an Arrow batch in numpy:
   what the arrow task reader runs, what the direct mode's write tasks run on Spark's stage-1
   rows (`prepare_records`, no reject path), and the oracle the tests compare these
   expressions with.

A row failing a check either fails the job with the reason and the offending record
(`ERROR_PREFIX` in a Spark error, see `invalid_record_error`), or, with `output.reject_path`,
goes to the rejects DataFrame with its reason (`map_records_with_rejects`). Never dropped.

Where things live: this module is the API; stage 1 is `mapping_fields`, stage 2
`mapping_checks`, and the output columns and per-topic rules both stages and the Arrow twin
share are `mapping_rules` (every name re-exported here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.mapping.checks import check_and_partition
from jobs.ingestion.mapping.fields import prepare_fields as _prepare
from jobs.ingestion.mapping.rules import (
    ERROR_COLUMN,
    ERROR_PREFIX,
    HEADERS_TYPE,
    ORDER_COLUMN,
    PARTITION_IN_COLUMN,
    POSITION_COLUMN,
    RECORD_COLUMNS,
    MappingRules,
    TopicRules,
    mapping_rules,
)
from kafkalog_core.errors import InvalidRecordError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "ERROR_COLUMN",
    "ERROR_PREFIX",
    "HEADERS_TYPE",
    "ORDER_COLUMN",
    "PARTITION_IN_COLUMN",
    "POSITION_COLUMN",
    "RECORD_COLUMNS",
    "MappedRecords",
    "MappingRules",
    "TopicRules",
    "invalid_record_error",
    "map_records",
    "map_records_with_rejects",
    "mapping_rules",
    "prepare_records",
    "sample_keys",
]


@dataclass(frozen=True)
class MappedRecords:
    """All mapped rows with their check result, and the two views of them.

    `mapped` holds every row plus `_kl_error` (null = valid): persist it if you use both views,
    or the source is read twice.
    """

    mapped: DataFrame
    records: DataFrame  # valid rows: RECORD_COLUMNS + ORDER_COLUMN
    rejects: DataFrame  # invalid rows: error, RECORD_COLUMNS, source_row_id


def _map_all(df: DataFrame, config: IngestConfig) -> DataFrame:
    """Every mapped row with `_kl_error` (null = valid): stage 1, then stage 2."""
    return check_and_partition(_prepare(df, config), config)


def map_records_with_rejects(df: DataFrame, config: IngestConfig) -> MappedRecords:
    """Map and split: valid records, and rejected rows with the reason (for output.reject_path)."""
    from pyspark.sql import functions as F

    mapped = _map_all(df, config)
    records = mapped.where(F.col(ERROR_COLUMN).isNull()).select(*RECORD_COLUMNS, ORDER_COLUMN)
    rejects = mapped.where(F.col(ERROR_COLUMN).isNotNull()).select(
        F.col(ERROR_COLUMN).alias("error"),
        *RECORD_COLUMNS,
        F.col(f"{ORDER_COLUMN}.pos").alias("source_row_id"),
    )
    return MappedRecords(mapped, records, rejects)


def prepare_records(df: DataFrame, config: IngestConfig) -> DataFrame:
    """Stage 1 alone: topic, key, value, headers (when mapped), timestamp, the explicit
    partition and the source row id, neither partitioned nor checked. For write tasks that run
    stage 2 themselves (`arrow_mapping.checked_records`) on the rows they receive anyway, so
    Python sees each row once (the murmur2 UDF is a Python evaluation of its own)."""
    prepared = _prepare(df, config)
    return prepared.select(
        *(c for c in prepared.columns if c != "headers" or config.mapping.headers)
    )


def map_records(df: DataFrame, config: IngestConfig) -> DataFrame:
    """Source rows -> validated Kafka records (schema in the module docstring).

    Without `config.reject_path`, the first invalid row fails the Spark job with
    `ERROR_PREFIX` + reason + the record (see `invalid_record_error`). With it, invalid rows are
    left out here; get them from `map_records_with_rejects(...).rejects`.
    """
    from pyspark.sql import functions as F

    if config.reject_path is not None:
        return map_records_with_rejects(df, config).records
    mapped = _map_all(df, config)
    failure = F.raise_error(F.concat(F.lit(ERROR_PREFIX), F.col(ERROR_COLUMN)))
    # The check is tied to `partition`, which every consumer of these rows reads.
    partition = F.when(F.col(ERROR_COLUMN).isNull(), F.col("partition")).otherwise(
        failure.cast("int")
    )
    columns = [partition.alias(c) if c == "partition" else F.col(c) for c in RECORD_COLUMNS]
    return mapped.select(*columns, F.col(ORDER_COLUMN))


_RAISED = re.compile(re.escape(ERROR_PREFIX) + r"(.*?)(?:\s+SQLSTATE: \w+)?\s*$", re.S)


def sample_keys(df: DataFrame, config: IngestConfig, fraction: float, seed: int) -> DataFrame:
    """(topic, partition, `_kl_order`) of a Bernoulli sample of the source rows, for choosing
    range bounds (`jobs.ingestion.ranges.bounds`).

    The sample is taken before the mapping, so only sampled rows are mapped (the key hashing
    included), and after the source row ids, so `pos` is the id the full run gives the row.
    Nothing is checked: an invalid row only shifts a bound (the write pass reports it).
    """
    from pyspark.sql import functions as F

    mapped = check_and_partition(_prepare(df, config, (fraction, seed)), config)
    return mapped.where(F.col("topic").isNotNull()).select("topic", "partition", ORDER_COLUMN)


def invalid_record_error(error: BaseException) -> InvalidRecordError | None:
    """The InvalidRecordError inside a Spark failure caused by `map_records`, else None.

    Jobs catch the Spark exception and print `str(...)` of this as their one error line.
    """
    text = str(error)
    start = text.find(ERROR_PREFIX)
    if start < 0:
        return None
    line = text[start:].splitlines()[0]
    match = _RAISED.match(line)
    reason = match.group(1) if match else line[len(ERROR_PREFIX) :]
    return InvalidRecordError(reason.strip())
