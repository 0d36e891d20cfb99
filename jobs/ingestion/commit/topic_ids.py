"""The topic id every partition of a run carries in its partition.metadata (§9.3).

A broker refuses a partition dir whose partition.metadata names another topic id than the
cluster's, so the id is never random: `topics.<name>.topic_id` (the id the target cluster
already has, from `kafka-topics.sh --describe`) when given, else the id an existing partition
of the topic already holds, else the name-based `topic_id_for_name` (uuid5 over a fixed
namespace), so two runs of the same input give byte-identical directories.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from jobs.ingestion.commit.state import StateMap
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.run.meta import IngestError
from kafkalog_core.log.checkpoints import topic_id_for_name, topic_id_to_str
from kafkalog_core.log.names import partition_dir_name


class TopicIdMismatchError(IngestError):
    """An existing partition holds another topic id than the configured one."""


def check_topic_ids(config: IngestConfig, state: StateMap) -> None:
    """Refuse a run whose configured topic id differs from an existing partition's (before any
    write): overwriting it would make the broker refuse the partition, or worse, adopt it."""
    configured = {t: spec.topic_id for t, spec in config.topics.items() if spec.topic_id}
    check_configured_topic_ids(configured, state)


def check_configured_topic_ids(configured: Mapping[str, str], state: StateMap) -> None:
    """`check_topic_ids` for {topic: configured id} (the ingest config or write options)."""
    for (topic, partition), s in sorted(state.items()):
        given = configured.get(topic)
        if given is None or s.topic_id is None:
            continue
        if s.topic_id != given:
            raise TopicIdMismatchError(
                f"{partition_dir_name(topic, partition)}/partition.metadata holds topic id "
                f"{s.topic_id}, but topics.{topic}.topic_id is {given}: refusing to mix "
                "two topics' data (write into another output root, or fix the setting)"
            )


def resolve_topic_ids(
    config: IngestConfig, topics: Iterable[str], state: StateMap
) -> dict[str, str]:
    """The topic id of each topic of the run (see the module doc for the order)."""
    configured = {t: spec.topic_id for t, spec in config.topics.items() if spec.topic_id}
    return topic_ids_for(topics, state, configured)


def topic_ids_for(
    topics: Iterable[str], state: StateMap, configured: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Configured id, else an existing partition's, else the name-based id; per topic."""
    existing: dict[str, str] = {}
    for (topic, _), s in sorted(state.items()):
        if s.topic_id is not None:
            existing.setdefault(topic, s.topic_id)
    given = configured or {}
    return {
        topic: given.get(topic) or existing.get(topic) or topic_id_to_str(topic_id_for_name(topic))
        for topic in sorted(set(topics))
    }
