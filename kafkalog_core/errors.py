"""One small exception hierarchy for everything kafkalog can refuse.

Every message names what is at fault (file, byte position, offset, setting) so that a job can
print it as a single line instead of a traceback from deep inside.
"""

from __future__ import annotations


class KafkaLogError(Exception):
    """Base class of every error kafkalog raises on purpose."""


class CorruptRecordError(KafkaLogError):
    """Bytes that are not a valid record batch: truncated, bad CRC, bad varint, wrong count..."""


class InvalidRecordError(KafkaLogError):
    """A well-formed record that Kafka would refuse (null key on a compacted topic, bad timestamp)."""


class RecordTooLargeError(KafkaLogError):
    """A record or batch larger than max.message.bytes or segment.bytes."""


class ConfigError(KafkaLogError):
    """A configuration value outside what Kafka (or kafkalog) accepts; names setting, value, range."""


class InvalidTopicError(KafkaLogError):
    """A topic name Kafka would reject (illegal characters, length, '.' or '..')."""


class CorruptIndexError(KafkaLogError):
    """An offset, time or transaction index that fails its sanity check."""


class InvalidOffsetError(KafkaLogError):
    """An index append that breaks Kafka's monotonicity rules."""


class IndexFullError(KafkaLogError):
    """An append to an index that has no free slot left."""


class LogSegmentOffsetOverflowError(KafkaLogError):
    """An offset that does not fit a segment's 32-bit relative offset."""


class OffsetOutOfRangeError(KafkaLogError):
    """A read below the log start offset or above the log end offset."""


class CorruptSnapshotError(KafkaLogError):
    """A producer-state .snapshot file with a bad version or CRC."""


class CorruptCheckpointError(KafkaLogError):
    """A checkpoint / metadata text file that does not parse."""


class MetadataRecordError(KafkaLogError):
    """A KRaft metadata record (`__cluster_metadata`) that does not parse, or of a version this
    reader does not know."""


class LogDirError(KafkaLogError):
    """A log dir layout problem: unparsable partition directory, duplicate partition, lock held."""


class SchemaError(KafkaLogError):
    """A value schema (Avro, Protobuf, JSON Schema) that does not parse or does not fit the data."""

    @classmethod
    def of_misfits(cls, misfits: list[tuple[int, str]], where: str = "") -> SchemaError:
        """Rows that do not fit, as (row index, why): the first one named, the others counted."""
        row, why = misfits[0]
        more = f" ({len(misfits) - 1} more rows do not fit)" if len(misfits) > 1 else ""
        return cls(f"{where}row {row}: {why}{more}")


class RegistryError(KafkaLogError):
    """A Schema Registry that cannot be reached or refuses a lookup or registration."""
