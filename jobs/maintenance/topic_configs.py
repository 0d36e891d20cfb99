"""Topic configs for a log dir: a broker keeps them in its metadata, not in the log dir.

Precedence per setting: the `--topic-config` file, then the configs recorded by the newest
committed ingest run of that topic (when our ingest wrote the dir), then the settings Kafka
gives its internal topics (`__consumer_offsets` is compacted), then Kafka's default. Each resolved setting remembers
where it came from, and the reports say so.

`--topic-config` forms:
- a YAML file: `{defaults: {...}, topics: {name: {...}}}` (nested keys are joined with dots);
- a `.properties` file: Kafka names, applied to every topic;
- a directory of `<topic>.properties` / `<topic>.yaml` files, one per topic.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.ingestion.run.history import COMMITTED, IngestHistory
from kafkalog_core.config import LogConfig, flatten_settings
from kafkalog_core.errors import ConfigError
from kafkalog_core.properties import read_properties

DEFAULT = "default"
INTERNAL = "Kafka internal topic"
# Kafka creates its internal topics with these settings; a copied broker dir has no other record
INTERNAL_TOPIC_CONFIGS: dict[str, dict[str, Any]] = {
    "__consumer_offsets": {
        "cleanup.policy": "compact",
        "segment.bytes": 104857600,
        "compression.type": "producer",
    },
    "__transaction_state": {
        "cleanup.policy": "compact",
        "segment.bytes": 104857600,
        "min.insync.replicas": 2,
        "unclean.leader.election.enable": False,
    },
}


@dataclass(frozen=True)
class ResolvedTopicConfig:
    """One topic's LogConfig and, per non-default setting, its source."""

    topic: str
    config: LogConfig
    sources: Mapping[str, str]  # Kafka name -> "file <path>" / "ingest run <id>"

    def source_of(self, name: str) -> str:
        return self.sources.get(name, DEFAULT)

    def describe(self, names: Sequence[str]) -> str:
        """`retention.ms=604800000 (default), ...` for a report column."""
        values = self.config.to_dict()
        return ", ".join(f"{n}={values[n]} ({self.source_of(n)})" for n in names)


def _read_yaml(path: Path) -> Any:
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read topic config {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None


def _read_settings(path: Path) -> dict[str, Any]:
    """One file of settings for one topic (or all topics), validated by LogConfig."""
    if path.suffix in (".yaml", ".yml"):
        doc = _read_yaml(path) or {}
        if not isinstance(doc, Mapping):
            raise ConfigError(f"{path}: expected a mapping of Kafka topic setting names")
        settings = flatten_settings(doc)
    else:
        try:
            settings = read_properties(path)
        except OSError as e:
            raise ConfigError(f"cannot read topic config {path}: {e.strerror or e}") from None
        except ValueError as e:  # not UTF-8, or a malformed \uXXXX as Properties.load refuses it
            raise ConfigError(f"{path}: {e}") from None
    _validated(settings, str(path))
    return settings


def _validated(settings: Mapping[str, Any], where: str) -> None:
    try:
        LogConfig.from_dict(settings)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def load_topic_config_file(
    path: str | os.PathLike[str],
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(settings for every topic, {topic: settings}) from a `--topic-config` path."""
    source = Path(path)
    if source.is_dir():
        per_topic = {}
        for item in sorted(source.iterdir()):
            if item.suffix in (".properties", ".yaml", ".yml") and not item.name.startswith("."):
                per_topic[item.stem] = _read_settings(item)
        return {}, per_topic
    if not source.exists():
        raise ConfigError(f"topic config {source} does not exist")
    if source.suffix not in (".yaml", ".yml"):
        return _read_settings(source), {}
    doc = _read_yaml(source) or {}
    if not isinstance(doc, Mapping) or not set(doc) <= {"defaults", "topics"}:
        raise ConfigError(
            f"{source}: a YAML topic config has `defaults:` and/or `topics: {{name: {{...}}}}`"
        )
    defaults = flatten_settings(doc.get("defaults") or {})
    _validated(defaults, f"{source} defaults")
    topics = doc.get("topics") or {}
    if not isinstance(topics, Mapping):
        raise ConfigError(f"{source}: `topics` must map topic names to settings")
    per_topic = {}
    for topic, settings in topics.items():
        if not isinstance(settings, Mapping):
            raise ConfigError(f"{source}: topic {topic!r} must map Kafka setting names to values")
        per_topic[str(topic)] = flatten_settings(settings)
        _validated({**defaults, **per_topic[str(topic)]}, f"{source} topic {topic}")
    return defaults, per_topic


def history_topic_configs(log_dir: str | os.PathLike[str]) -> dict[str, tuple[str, dict[str, Any]]]:
    """{topic: (run id, settings)} from the newest committed ingest run that wrote each topic.

    Per topic, not per run: a run records only the topics it wrote, so a later run of another
    topic (the demo writes two, one run each) must not hide an earlier run's settings.
    """
    history = IngestHistory(Path(log_dir).absolute())
    if not history.exists():
        return {}
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for record in history.last_runs(1_000_000):  # newest first
        if record.get("status") == COMMITTED:
            for topic, settings in (record.get("topic_configs") or {}).items():
                found.setdefault(topic, (str(record["run_id"]), dict(settings)))
    return found


def resolve_topic_configs(
    log_dir: str | os.PathLike[str],
    topics: Sequence[str],
    topic_config: str | os.PathLike[str] | None = None,
) -> dict[str, ResolvedTopicConfig]:
    """Every topic's LogConfig with the source of each setting (file > ingest history > default)."""
    from_history = history_topic_configs(log_dir)
    defaults, per_topic = load_topic_config_file(topic_config) if topic_config else ({}, {})
    resolved = {}
    for topic in sorted(set(topics)):
        settings: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for name, value in INTERNAL_TOPIC_CONFIGS.get(topic, {}).items():
            settings[name], sources[name] = value, INTERNAL
        run_id, recorded = from_history.get(topic, ("", {}))
        for name, value in recorded.items():
            settings[name], sources[name] = value, f"ingest run {run_id}"
        for name, value in {**defaults, **per_topic.get(topic, {})}.items():
            settings[name], sources[name] = value, f"file {topic_config}"
        try:
            config = LogConfig.from_dict(settings)
        except ConfigError as e:
            raise ConfigError(f"topic {topic}: {e}") from None
        resolved[topic] = ResolvedTopicConfig(topic, config, sources)
    return resolved
