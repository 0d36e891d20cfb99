"""The ingest config's `topics:` and `topic_defaults:`: partition counts, topic ids and each
topic's log configs, validated by the core's `LogConfig`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.ingestion.config.values import as_mapping, invalid, only_known
from kafkalog_core.config import LogConfig, flatten_settings
from kafkalog_core.errors import ConfigError
from kafkalog_core.log.checkpoints import is_usable_topic_id, topic_id_from_str, topic_id_to_str

__all__ = ["MAX_PARTITIONS", "TopicSpec"]

MAX_PARTITIONS = 1 << 20  # sanity bound; Kafka has no hard limit but a log dir would not cope


@dataclass(frozen=True)
class TopicSpec:
    """A topic this run writes: partition count and its log configs (Kafka names)."""

    name: str
    partitions: int
    log_config: LogConfig
    topic_id: str | None = None  # Kafka's base64url form; None: derived from the name

    @classmethod
    def from_dict(cls, name: str, raw: Any, where: str) -> TopicSpec:
        raw = as_mapping(raw, where)
        known = ("partitions", "config") if name == "*" else ("partitions", "config", "topic_id")
        only_known(raw, known, where)
        topic_id = raw.get("topic_id")
        return cls(
            name,
            _partitions(raw.get("partitions"), f"{where}.partitions"),
            _log_config(raw.get("config"), f"{where}.config"),
            None if topic_id is None else _topic_id(topic_id, f"{where}.topic_id"),
        )


def _topic_id(value: Any, where: str) -> str:
    """A topic id as `kafka-topics.sh --describe` prints it (22 base64url characters)."""
    if not isinstance(value, str):
        raise invalid(where, value, "must be the topic id as kafka-topics --describe prints it")
    try:
        parsed = topic_id_from_str(value)
    except ValueError as e:
        raise invalid(where, value, f"not a Kafka topic id ({e})") from None
    if not is_usable_topic_id(parsed):
        raise invalid(where, value, "is a reserved id (zero or the metadata topic's) or starts '-'")
    return topic_id_to_str(parsed)


def _partitions(value: Any, where: str) -> int:
    if value is None:
        raise ConfigError(f"{where} is required (the topic's number of partitions)")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PARTITIONS:
        raise invalid(where, value, f"must be an int in [1, {MAX_PARTITIONS}]")
    return value


def _log_config(raw: Any, where: str) -> LogConfig:
    """A topic's `config:` (YAML may nest dotted names: segment: {bytes: 1}) as a LogConfig."""
    settings = flatten_settings(as_mapping(raw, where))
    try:
        return LogConfig.from_dict(settings)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
