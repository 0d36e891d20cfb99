"""The contract of the record mapping: its output columns, its error prefix and the per-topic
rules the row checks apply.

Spark-free and small, so the Arrow twin (`arrow_mapping`), the arrow task reader and the data
source writer import it without PySpark; `mapping` re-exports every name.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.spark.errors import DATA_ERROR_PREFIX
from kafkalog_core.errors import InvalidTopicError
from kafkalog_core.log.names import validate_topic_name

__all__ = [
    "DELETE_COLUMN",
    "ERROR_COLUMN",
    "ERROR_PREFIX",
    "HEADERS_TYPE",
    "MISFIT_COLUMN",
    "ORDER_COLUMN",
    "PARTITION_IN_COLUMN",
    "POSITION_COLUMN",
    "RECORD_COLUMNS",
    "MappingRules",
    "TopicRules",
    "mapping_rules",
]

RECORD_COLUMNS = ("topic", "partition", "key", "value", "headers", "timestamp")
ORDER_COLUMN = "_kl_order"
ERROR_COLUMN = "_kl_error"
POSITION_COLUMN = "_kl_pos"
PARTITION_IN_COLUMN = "_kl_partition_in"
DELETE_COLUMN = "_kl_delete"  # stage 1 of change rows: the row is a delete (a tombstone)
# stage 1 of a structured key/value: why the row does not fit its schema (null: it fits)
MISFIT_COLUMN = "_kl_misfit"
ERROR_PREFIX = DATA_ERROR_PREFIX + "invalid record: "  # is_data_error knows it
HEADERS_TYPE = "array<struct<key:string,value:binary>>"


@dataclass(frozen=True)
class TopicRules:
    """What the per-row checks need about one topic (small and picklable)."""

    partitions: int
    compact: bool
    log_append_time: bool
    max_message_bytes: int | None  # None: compressed topic, size checked after compression


@dataclass(frozen=True)
class MappingRules:
    """Everything the Arrow function needs; shipped to executors in its closure."""

    topics: dict[str, TopicRules]
    defaults: TopicRules | None
    by_key: bool
    null_keys: str
    # a null in the partition column: the default partitioner (the data source, as Spark's
    # Kafka sink) rather than an invalid row (ingest)
    null_partition_by_key: bool = False

    def rules_for(self, topic: str) -> TopicRules | str:
        """The topic's rules, or why its records are invalid."""
        try:
            validate_topic_name(topic)
        except InvalidTopicError as e:
            return str(e)
        rules = self.topics.get(topic, self.defaults)
        if rules is None:
            return f"topic {topic!r} is not configured (add it under topics, or set topic_defaults)"
        return rules


def _rules(spec) -> TopicRules:
    lc = spec.log_config
    uncompressed = lc.codec is None or int(lc.codec) == 0
    return TopicRules(
        partitions=spec.partitions,
        compact=bool(lc.compact),
        log_append_time=lc.message_timestamp_type == "LogAppendTime",
        max_message_bytes=int(lc.max_message_bytes) if uncompressed else None,
    )


def mapping_rules(config: IngestConfig) -> MappingRules:
    return MappingRules(
        topics={name: _rules(spec) for name, spec in config.topics.items()},
        defaults=None if config.topic_defaults is None else _rules(config.topic_defaults),
        by_key=config.mapping.partition.by_key,
        null_keys=config.mapping.partition.null_keys,
    )
