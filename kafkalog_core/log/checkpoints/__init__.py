"""Checkpoint and metadata files of a log dir and a partition dir (KAFKA_LOG_FACTS.md §9, §6).

One module per file kind; every name is re-exported here, so callers import from
`kafkalog_core.log.checkpoints`:

- `checkpoint_file`: `atomic_write`/`fsync_dir`, Java's text rules, the generic `CheckpointFile`.
- `offsets`: `OffsetCheckpointFile` (recovery point, log start offset, replication, cleaner) and
  the read-only `read_*` readers of a log dir root's offset checkpoints.
- `leader_epoch`: `leader-epoch-checkpoint` and `LeaderEpochCache`.
- `topic_ids`: Kafka's topic id strings, usable and name-derived ids.
- `partition_metadata`: `partition.metadata` (a partition dir's topic id).
- `meta_properties`: `meta.properties` and the java.util.Properties text format.
- `clean_shutdown`: the `.kafka_cleanshutdown` marker.

Every parse failure is a `CorruptCheckpointError` naming the file and the offending line.
"""

from __future__ import annotations

from kafkalog_core.log import names as _names
from kafkalog_core.log.checkpoints.checkpoint_file import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    CheckpointFile,
    atomic_write,
    fsync_dir,
    java_split,
    parse_java_int,
)
from kafkalog_core.log.checkpoints.clean_shutdown import CleanShutdownFile
from kafkalog_core.log.checkpoints.leader_epoch import (
    EpochEntry,
    LeaderEpochCache,
    LeaderEpochCheckpointFile,
)
from kafkalog_core.log.checkpoints.meta_properties import (
    MetaProperties,
    format_properties,
    parse_properties,
)
from kafkalog_core.log.checkpoints.offsets import (
    OffsetCheckpointFile,
    TopicPartition,
    read_cleaner_checkpoint,
    read_high_watermarks,
    read_log_start_checkpoint,
    read_offset_checkpoint,
    read_recovery_points,
)
from kafkalog_core.log.checkpoints.partition_metadata import PartitionMetadataFile
from kafkalog_core.log.checkpoints.topic_ids import (
    METADATA_TOPIC_ID,
    TOPIC_ID_NAMESPACE,
    ZERO_UUID,
    is_usable_topic_id,
    new_topic_id,
    topic_id_for_name,
    topic_id_from_str,
    topic_id_to_str,
)

# the file names, under the names this module had before names.py held them
RECOVERY_POINT_CHECKPOINT = _names.RECOVERY_POINT_CHECKPOINT_FILE
LOG_START_OFFSET_CHECKPOINT = _names.LOG_START_OFFSET_CHECKPOINT_FILE
REPLICATION_OFFSET_CHECKPOINT = _names.REPLICATION_OFFSET_CHECKPOINT_FILE
CLEANER_OFFSET_CHECKPOINT = _names.CLEANER_OFFSET_CHECKPOINT_FILE
LEADER_EPOCH_CHECKPOINT = _names.LEADER_EPOCH_CHECKPOINT_FILE
PARTITION_METADATA = _names.PARTITION_METADATA_FILE
META_PROPERTIES = _names.META_PROPERTIES_FILE
CLEAN_SHUTDOWN = _names.CLEAN_SHUTDOWN_FILE

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "CLEAN_SHUTDOWN",
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "METADATA_TOPIC_ID",
    "META_PROPERTIES",
    "PARTITION_METADATA",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "TOPIC_ID_NAMESPACE",
    "ZERO_UUID",
    "CheckpointFile",
    "CleanShutdownFile",
    "EpochEntry",
    "LeaderEpochCache",
    "LeaderEpochCheckpointFile",
    "MetaProperties",
    "OffsetCheckpointFile",
    "PartitionMetadataFile",
    "TopicPartition",
    "atomic_write",
    "format_properties",
    "fsync_dir",
    "is_usable_topic_id",
    "java_split",
    "new_topic_id",
    "parse_java_int",
    "parse_properties",
    "read_cleaner_checkpoint",
    "read_high_watermarks",
    "read_log_start_checkpoint",
    "read_offset_checkpoint",
    "read_recovery_points",
    "topic_id_for_name",
    "topic_id_from_str",
    "topic_id_to_str",
]
