"""Topic configs for a log dir: a broker keeps them in its metadata, not in the log dir.

Each topic's settings, and where each came from (the reports say so):
1. the `--topic-config` file, above everything;
2. for a topic the dir's own KRaft metadata log names (`__cluster_metadata-0`, a broker's dir):
   that metadata, "broker metadata (__cluster_metadata)": the topic's own configs, then the
   brokers' dynamic defaults it holds (`log.retention.ms`... for this broker, whose node.id
   meta.properties gives, then for every broker). It is the truth for a broker's dir: a setting
   it does not set is the default there, whatever an ingest run recorded. (A broker's static
   server.properties is not in the dir: give those settings with `--topic-config`.);
3. otherwise, for a topic our ingest job or `df.write.format("kafkalog")` wrote: the settings of
   the newest committed run that wrote THAT topic ("ingest run <id>"), whatever ran after it
   on the same root (a later run that wrote other topics says nothing about this one);
4. the settings Kafka gives its internal topics (`__consumer_offsets` is compacted);
5. Kafka's defaults.
A topic that none of 1-3 speaks for has Kafka's defaults by assumption only
(`ResolvedTopicConfig.assumed`): the retention job deletes nothing by them unless told to.

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
from kafkalog_core.config import LogConfig, dynamic_broker_defaults, flatten_settings
from kafkalog_core.errors import ConfigError
from kafkalog_core.log.checkpoints import MetaProperties
from kafkalog_core.log.cluster_metadata import ClusterMetadata, read_cluster_metadata
from kafkalog_core.log.names import CLUSTER_METADATA_TOPIC, META_PROPERTIES_FILE
from kafkalog_core.properties import read_properties

DEFAULT = "default"
INTERNAL = "Kafka internal topic"
BROKER_METADATA = f"broker metadata ({CLUSTER_METADATA_TOPIC})"
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
    # Kafka name -> "file <path>" / "broker metadata (__cluster_metadata)" / "ingest run <id>"
    sources: Mapping[str, str]
    # what speaks for the whole topic, its defaults included (the file, the broker's metadata,
    # the run that wrote it); "" when nothing does
    known_from: str = ""

    def source_of(self, name: str) -> str:
        return self.sources.get(name, DEFAULT)

    def assumed(self, names: Sequence[str]) -> tuple[str, ...]:
        """The settings among `names` that are Kafka's defaults only by assumption: no file,
        broker metadata or ingest run speaks for this topic, and nothing else set them."""
        if self.known_from:
            return ()
        return tuple(n for n in names if n not in self.sources)

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
) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """(settings for every topic, {topic: settings}) from a `--topic-config` path; the first is
    None when the file speaks only for the topics it names (a dir, a YAML without `defaults`)."""
    source = Path(path)
    if source.is_dir():
        per_topic = {}
        for item in sorted(source.iterdir()):
            if item.suffix in (".properties", ".yaml", ".yml") and not item.name.startswith("."):
                per_topic[item.stem] = _read_settings(item)
        return None, per_topic
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
    return (defaults if "defaults" in doc else None), per_topic


@dataclass(frozen=True)
class WrittenBy:
    """The newest committed run that wrote a topic, and the settings it wrote it with (None: a
    history row from before runs recorded their settings)."""

    run_id: str
    settings: Mapping[str, Any] | None


def _topic_of(partition_dir: str) -> str:
    return partition_dir.rsplit("-", 1)[0]


def history_topic_configs(log_dir: str | os.PathLike[str]) -> dict[str, WrittenBy]:
    """Per topic, the newest committed run (ingest or data-source write, any mode) that wrote
    it: a run wrote the topics its `topic_configs` and `partitions` name."""
    history = IngestHistory(Path(log_dir).absolute())
    if not history.exists():
        return {}
    found: dict[str, WrittenBy] = {}
    for record in history.last_runs(1_000_000):  # newest first
        if record.get("status") != COMMITTED:
            continue
        configs = record.get("topic_configs") or {}
        written = set(configs) | {_topic_of(p) for p in record.get("partitions") or {}}
        for topic in written - set(found):
            found[topic] = WrittenBy(str(record["run_id"]), configs.get(topic))
    return found


Layer = tuple[str, Mapping[str, Any]]  # (source, settings by Kafka name)


def _broker_defaults(log_dir: Path, broker: ClusterMetadata) -> list[Layer]:
    """The brokers' dynamic defaults in the metadata: every broker's, then this broker's."""
    layers = []
    if "" in broker.broker_configs:
        defaults = dynamic_broker_defaults(broker.broker_configs[""])
        layers.append((f"{BROKER_METADATA}, every broker's default", defaults))
    meta = log_dir / META_PROPERTIES_FILE
    node = MetaProperties.read(meta).node_id if meta.is_file() else None
    if node is not None and str(node) in broker.broker_configs:
        defaults = dynamic_broker_defaults(broker.broker_configs[str(node)])
        layers.append((f"{BROKER_METADATA}, broker {node}'s default", defaults))
    return layers


def resolve_topic_configs(
    log_dir: str | os.PathLike[str],
    topics: Sequence[str],
    topic_config: str | os.PathLike[str] | None = None,
) -> dict[str, ResolvedTopicConfig]:
    """Every topic's LogConfig with the source of each setting: the file, then the broker's
    metadata for the topics it names, else the run that wrote the topic, then Kafka's."""
    written = history_topic_configs(log_dir)
    broker = read_cluster_metadata(log_dir)
    broker_defaults = _broker_defaults(Path(log_dir), broker) if broker is not None else []
    defaults, per_topic = load_topic_config_file(topic_config) if topic_config else (None, {})
    known = set(LogConfig.names())
    resolved = {}
    for topic in sorted(set(topics)):
        from_broker = broker.settings_of(topic) if broker is not None else None
        run = written.get(topic)
        layers: list[Layer] = [(INTERNAL, INTERNAL_TOPIC_CONFIGS.get(topic, {}))]
        speakers: list[Layer] = []  # the sources that speak for the whole topic, weakest first
        if from_broker is not None:  # names LogConfig does not know are left out
            layers[:0] = broker_defaults
            speakers.append((BROKER_METADATA, {k: v for k, v in from_broker.items() if k in known}))
        elif run is not None and run.settings is not None:
            speakers.append((f"ingest run {run.run_id}", run.settings))
        if defaults is not None or topic in per_topic:
            speakers.append(
                (f"file {topic_config}", {**(defaults or {}), **per_topic.get(topic, {})})
            )
        settings: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for source, values in [*layers, *speakers]:
            for name, value in values.items():
                settings[name], sources[name] = value, source
        try:
            config = LogConfig.from_dict(settings)
        except ConfigError as e:
            raise ConfigError(f"topic {topic}: {e}") from None
        known_from = speakers[-1][0] if speakers else ""
        resolved[topic] = ResolvedTopicConfig(topic, config, sources, known_from)
    return resolved
