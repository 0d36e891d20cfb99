"""The ingest job's configuration: a YAML file plus command-line overrides, validated up front.

Everything that can be checked without Spark is checked here (structure, names, formats, Kafka
topic names, partition counts, every topic's log configs through the core's `LogConfig`, and the
rules that tie them together), so a bad config is one `ConfigError` line naming the setting,
before a session starts. Column names and SQL expressions are checked against the source's
schema by `jobs.ingestion.mapping.spark_mapping.map_records`, still before any Spark job runs.

File layout (Kafka's names wherever Kafka has one; see conf/ingest-*.yaml):

    run_id: null                    # usually --run-id from the scheduler
    source: {format: delta, path: ..., version: ..., since_version: ..., changes: cdf, ...}
    output: {root: <log dir>, reject_path: null, write_mode: auto|range|direct,
             direct_tasks: auto|splits|partitions}
    topics: {<name>: {partitions: 6, topic_id: <22 chars>, config: {cleanup.policy: compact}}}
    topic_defaults: {partitions: 3, config: {...}}   # optional, for topic values not listed
    mapping:
      topic: <name> | {column: c} | {expr: e}
      key: {column|expr: ..., format: bytes|string|json|long|int}
      value: {column|expr|columns: ..., format: ...}
      headers: {column: c, values: {name: expr}}
      timestamp: {column|expr: ..., unit: ms|s|us} | now   # now: the run's start time
      partition: {column|expr: ..., null_keys: value_hash|round_robin}
      json_options: {...}           # Spark to_json options for format json
    ordering: source | [expr, ...]   # changes: cdf puts the commit version first

This module is the whole config (`IngestConfig`), its file and its command line; the sections
with classes of their own are `config_topics` (topics, topic_defaults) and `config_mapping`
(mapping), and `config_values` says how a value is refused. Every name is re-exported here.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from jobs.ingestion.config.mapping import (
    FORMATS,
    NULL_KEY_PARTITIONERS,
    TIMESTAMP_UNITS,
    FieldMapping,
    HeadersMapping,
    MappingSpec,
    PartitionMapping,
    TopicMapping,
)
from jobs.ingestion.config.topics import MAX_PARTITIONS, TopicSpec
from jobs.ingestion.config.values import as_mapping, invalid, non_empty_text, only_known
from jobs.spark.change_feed import CHANGE_ORDERING
from jobs.spark.sources import DataInterval, SourceSpec
from kafkalog_core.errors import ConfigError, InvalidTopicError
from kafkalog_core.log.names import validate_topic_name

__all__ = [
    "FORMATS",
    "MAX_PARTITIONS",
    "NULL_KEY_PARTITIONERS",
    "TIMESTAMP_UNITS",
    "FieldMapping",
    "HeadersMapping",
    "IngestConfig",
    "MappingSpec",
    "PartitionMapping",
    "TopicMapping",
    "TopicSpec",
    "build_arg_parser",
    "config_from_args",
    "load_ingest_config",
]

WRITE_MODES = ("auto", "range", "direct")
DIRECT_TASKS = ("auto", "splits", "partitions")
_RUN_ID = re.compile(r"[^\s/\\]{1,200}")


@dataclass(frozen=True)
class IngestConfig:
    """A fully validated ingest run. Frozen and picklable (parts are shipped to executors)."""

    source: SourceSpec
    output_root: str
    mapping: MappingSpec
    topics: Mapping[str, TopicSpec]
    topic_defaults: TopicSpec | None = None  # template (name "*") for topics not listed
    ordering: tuple[str, ...] = ()  # SQL expressions, ascending; () = source order
    reject_path: str | None = None  # invalid rows go here (with the reason) instead of failing
    run_id: str | None = None
    config_path: str | None = None
    # range: shuffle + sort (any ordering, ~tasks/partitions ranges per partition);
    # direct: no shuffle, each input split writes its share (source order only); auto: see
    # jobs.ingest.choose_write_mode
    write_mode: str = "auto"
    # the direct mode's tasks with the arrow reader: splits (a task per input split, the
    # relayout after) or partitions (a task per group of partitions, each reading every split);
    # auto: see jobs.ingest.direct_tasks_choice
    direct_tasks: str = "auto"

    def topic(self, name: str) -> TopicSpec | None:
        """The spec for a topic value: listed, else from topic_defaults, else None."""
        spec = self.topics.get(name)
        if spec is None and self.topic_defaults is not None:
            return replace(self.topic_defaults, name=name)
        return spec

    @property
    def run_id_slug(self) -> str | None:
        """The run id made safe as one path component (Airflow ids contain ':' and '+')."""
        if self.run_id is None:
            return None
        return re.sub(r"[^A-Za-z0-9._-]", "_", self.run_id)

    @classmethod
    def from_dict(cls, raw: Any, *, config_path: str | None = None) -> IngestConfig:
        """Validate a parsed config document; ConfigError names the first bad setting."""
        raw = as_mapping(raw, "config")
        only_known(
            raw,
            ("run_id", "source", "output", "topics", "topic_defaults", "mapping", "ordering"),
            "config",
        )
        if raw.get("source") is None:
            raise ConfigError("source is required (format and path or table)")
        source = SourceSpec.from_dict(raw["source"], "source")
        output = as_mapping(raw.get("output"), "output")
        only_known(output, ("root", "reject_path", "write_mode", "direct_tasks"), "output")
        if output.get("root") is None:
            raise ConfigError("output.root is required (the Kafka log dir to write)")
        root = non_empty_text(str(output["root"]), "output.root")
        reject = output.get("reject_path")
        reject = None if reject is None else non_empty_text(str(reject), "output.reject_path")
        write_mode = str(output.get("write_mode", "auto"))
        if write_mode not in WRITE_MODES:
            raise invalid(
                "output.write_mode", write_mode, f"must be one of {', '.join(WRITE_MODES)}"
            )
        direct_tasks = str(output.get("direct_tasks", "auto"))
        if direct_tasks not in DIRECT_TASKS:
            raise invalid(
                "output.direct_tasks", direct_tasks, f"must be one of {', '.join(DIRECT_TASKS)}"
            )
        if direct_tasks != "auto" and write_mode == "range":
            raise ConfigError(
                f"output.direct_tasks={direct_tasks} applies to the direct mode, not "
                "output.write_mode=range"
            )

        topics_raw = as_mapping(raw.get("topics"), "topics")
        topics: dict[str, TopicSpec] = {}
        for name, spec in topics_raw.items():
            try:
                validate_topic_name(str(name))
            except InvalidTopicError as e:
                raise ConfigError(f"topics: {e}") from None
            topics[str(name)] = TopicSpec.from_dict(str(name), spec, f"topics.{name}")
        defaults = None
        if raw.get("topic_defaults") is not None:
            defaults = TopicSpec.from_dict("*", raw["topic_defaults"], "topic_defaults")
        if not topics and defaults is None:
            raise ConfigError("topics is required: at least one topic with its partitions")

        mapping = MappingSpec.from_raw(raw.get("mapping"), "mapping")
        ordering = _ordering(raw.get("ordering", "source"))
        run_id = raw.get("run_id")
        if run_id is not None:
            run_id = str(run_id)
            if not _RUN_ID.fullmatch(run_id) or run_id in (".", ".."):
                raise invalid(
                    "run_id", run_id, "must be 1-200 characters without spaces or slashes"
                )

        if write_mode == "direct" and source.changes == "cdf":
            raise ConfigError(
                "output.write_mode=direct keeps the source order: source.changes=cdf orders the "
                "changes by their commit version (use write_mode range or auto)"
            )
        if write_mode == "direct" and ordering:
            raise ConfigError(
                "output.write_mode=direct keeps the source order: it cannot apply `ordering` "
                "(use write_mode range or auto)"
            )
        if source.changes == "cdf":  # a run's changes by commit version, then the ordering
            ordering = CHANGE_ORDERING + ordering
        config = cls(
            source,
            root,
            mapping,
            topics,
            defaults,
            ordering,
            reject,
            run_id,
            config_path,
            write_mode,
            direct_tasks,
        )
        config._check_rules()
        return config

    def _check_rules(self) -> None:
        """Rules that tie topics and mapping together."""
        m = self.mapping
        if m.topic.is_constant:
            only = self.topic(str(m.topic.name))
            if only is None:
                raise ConfigError(
                    f"mapping.topic={m.topic.name!r} is not listed under topics "
                    "(and no topic_defaults)"
                )
            reachable = [only]
        else:
            reachable = list(self.topics.values())
            if self.topic_defaults is not None:
                reachable.append(self.topic_defaults)
        for spec in reachable:
            where = f"topics.{spec.name}" if spec.name in self.topics else "topic_defaults"
            if spec.log_config.compact and m.key is None:
                raise ConfigError(
                    f"mapping.key is required: {where} has cleanup.policy=compact, and Kafka "
                    "refuses records without a key on compacted topics"
                )
            if m.timestamp is None and spec.log_config.message_timestamp_type != "LogAppendTime":
                raise ConfigError(
                    f"mapping.timestamp is required: {where} uses message.timestamp.type="
                    "CreateTime (set a column/expr; `timestamp: now` for the run's start time, "
                    "as a producer stamps its clock; or message.timestamp.type=LogAppendTime)"
                )

    def at_run_start(self, started_ms: int) -> IngestConfig:
        """The config with `timestamp: now` bound to the run's start time (else unchanged)."""
        ts = self.mapping.timestamp
        if ts is None or not ts.now:
            return self
        return replace(
            self, mapping=replace(self.mapping, timestamp=replace(ts, now_ms=started_ms))
        )

    def with_overrides(
        self,
        *,
        run_id: str | None = None,
        output_root: str | None = None,
        reject_path: str | None = None,
        version: int | None = None,
        timestamp: str | None = None,
        since_version: int | None = None,
        interval_start: str | None = None,
        interval_end: str | None = None,
        interval_column: str | None = None,
    ) -> IngestConfig:
        """Apply command-line values (Airflow templating) on top of the file, re-validated."""
        source = self.source
        changes: dict[str, Any] = {}
        if version is not None:
            changes["version"] = version
            changes["timestamp"] = None
        if timestamp is not None:
            changes["timestamp"] = timestamp
            changes["version"] = None
        if since_version is not None:
            changes["since_version"] = since_version
        if interval_start is not None or interval_end is not None or interval_column is not None:
            current = source.interval
            column = interval_column or (current.column if current else None)
            if column is None:
                raise ConfigError(
                    "--data-interval-start/--data-interval-end need source.interval.column in the "
                    "config (or --interval-column)"
                )
            changes["interval"] = DataInterval(
                column,
                interval_start
                if interval_start is not None
                else (current.start if current else None),
                interval_end if interval_end is not None else (current.end if current else None),
            )
        if changes:
            source = replace(source, **changes)
            source.validate("source")
        out = replace(
            self,
            source=source,
            run_id=self.run_id if run_id is None else run_id,
            output_root=self.output_root if output_root is None else output_root,
            reject_path=self.reject_path if reject_path is None else reject_path,
        )
        if out.run_id is not None and (
            not _RUN_ID.fullmatch(out.run_id) or out.run_id in (".", "..")
        ):
            raise invalid(
                "--run-id", out.run_id, "must be 1-200 characters without spaces or slashes"
            )
        return out

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> IngestConfig:
        """`jobs/ingest.py` arguments -> validated config (see `build_arg_parser`)."""
        args = build_arg_parser().parse_args(list(argv))
        return config_from_args(args)


def _ordering(raw: Any) -> tuple[str, ...]:
    if raw is None or raw == "source":
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise invalid(
            "ordering", raw, "must be 'source' or a non-empty list of columns/expressions"
        )
    return tuple(non_empty_text(str(x), "ordering") for x in raw)


# ---------------------------------------------------------------------------------------------
# Files and command line


def _set_dotted(doc: dict[str, Any], dotted: str, value: Any) -> None:
    """--set a.b.c=v: the first segments are YAML keys; topic config names keep their dots."""
    parts = dotted.split(".")
    node = doc
    for i, part in enumerate(parts[:-1]):
        if part == "config" and i > 0:  # topics.<t>.config.<kafka.name>: rest is one key
            node = node.setdefault(part, {})
            node[".".join(parts[i + 1 :])] = value
            return
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def load_ingest_config(path: str | Path, overrides: Sequence[str] = ()) -> IngestConfig:
    """Read a YAML config; `overrides` are `dotted.key=yaml-value` strings (from --set)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"--config {path}: cannot read ({e.strerror or e})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: the config must be a YAML mapping")
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise invalid("--set", item, "must be dotted.key=value")
        try:
            parsed = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            parsed = value
        _set_dotted(doc, key.strip(), parsed)
    try:
        return IngestConfig.from_dict(doc, config_path=str(path))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def build_arg_parser(prog: str = "ingest") -> argparse.ArgumentParser:
    """The ingest job's command line (Airflow-friendly: everything templatable is a flag)."""
    p = argparse.ArgumentParser(
        prog=prog, description="Write a table into Kafka partition directories."
    )
    p.add_argument("--config", required=True, help="YAML job config (see conf/ingest-*.yaml)")
    p.add_argument("--run-id", help="scheduler run id; a retry with the same id is idempotent")
    p.add_argument("--data-interval-start", help="keep rows with interval column >= this (ISO)")
    p.add_argument("--data-interval-end", help="keep rows with interval column < this (ISO)")
    p.add_argument("--interval-column", help="column the data interval filters (else from config)")
    travel = p.add_mutually_exclusive_group()
    travel.add_argument("--version", type=int, help="Delta: read this table version")
    travel.add_argument("--timestamp", help="Delta: read the version as of this instant (ISO)")
    p.add_argument(
        "--since-version",
        type=int,
        help="Delta: only rows added after this version (with source.changes: cdf, the changes "
        "after it; default: after the last version ingested)",
    )
    p.add_argument("--output", help="override output.root (the Kafka log dir)")
    p.add_argument("--reject-path", help="route invalid rows here instead of failing")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set topics.orders.partitions=12 (repeatable)",
    )
    return p


def config_from_args(args: argparse.Namespace) -> IngestConfig:
    """Parsed arguments -> validated config (file, then --set, then the dedicated flags)."""
    config = load_ingest_config(args.config, args.set)
    return config.with_overrides(
        run_id=args.run_id,
        output_root=args.output,
        reject_path=args.reject_path,
        version=args.version,
        timestamp=args.timestamp,
        since_version=args.since_version,
        interval_start=args.data_interval_start,
        interval_end=args.data_interval_end,
        interval_column=args.interval_column,
    )
