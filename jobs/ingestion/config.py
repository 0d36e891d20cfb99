"""The ingest job's configuration: a YAML file plus command-line overrides, validated up front.

Everything that can be checked without Spark is checked here (structure, names, formats, Kafka
topic names, partition counts, every topic's log configs through the core's `LogConfig`, and the
rules that tie them together), so a bad config is one `ConfigError` line naming the setting,
before a session starts. Column names and SQL expressions are checked against the source's
schema by `jobs.ingestion.mapping.map_records`, still before any Spark job runs.

File layout (Kafka's names wherever Kafka has one; see conf/ingest-*.yaml):

    run_id: null                    # usually --run-id from the scheduler
    source: {format: delta, path: ..., version: ..., since_version: ..., interval: ...}
    output: {root: <log dir>, reject_path: null, write_mode: auto|range|direct}
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
    ordering: source | [expr, ...]
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from jobs.spark.sources import DataInterval, SourceSpec
from kafkalog_core.config import LogConfig
from kafkalog_core.errors import ConfigError, InvalidTopicError
from kafkalog_core.log.checkpoints import is_usable_topic_id, topic_id_from_str, topic_id_to_str
from kafkalog_core.log.names import validate_topic_name

__all__ = [
    "FORMATS",
    "NULL_KEY_PARTITIONERS",
    "FieldMapping",
    "HeadersMapping",
    "IngestConfig",
    "MappingSpec",
    "PartitionMapping",
    "TopicMapping",
    "TopicSpec",
    "build_arg_parser",
    "load_ingest_config",
]

FORMATS = ("bytes", "string", "json", "long", "int")
NULL_KEY_PARTITIONERS = ("value_hash", "round_robin")
TIMESTAMP_UNITS = ("ms", "s", "us")
WRITE_MODES = ("auto", "range", "direct")
MAX_PARTITIONS = 1 << 20  # sanity bound; Kafka has no hard limit but a log dir would not cope
_RUN_ID = re.compile(r"[^\s/\\]{1,200}")


def _fail(setting: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"{setting}={value!r} is invalid: {why}")


def _mapping(raw: Any, where: str) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise _fail(where, raw, "must be a mapping")
    return raw


def _only(raw: Mapping[str, Any], known: Sequence[str], where: str) -> None:
    unknown = sorted(str(k) for k in set(raw) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {unknown}; known: {sorted(known)}")


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, value, "must be a non-empty string")
    return value


# ---------------------------------------------------------------------------------------------
# Topics


@dataclass(frozen=True)
class TopicSpec:
    """A topic this run writes: partition count and its log configs (Kafka names)."""

    name: str
    partitions: int
    log_config: LogConfig
    topic_id: str | None = None  # Kafka's base64url form; None: derived from the name

    @classmethod
    def from_dict(cls, name: str, raw: Any, where: str) -> TopicSpec:
        raw = _mapping(raw, where)
        known = ("partitions", "config") if name == "*" else ("partitions", "config", "topic_id")
        _only(raw, known, where)
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
        raise _fail(where, value, "must be the topic id as kafka-topics --describe prints it")
    try:
        parsed = topic_id_from_str(value)
    except ValueError as e:
        raise _fail(where, value, f"not a Kafka topic id ({e})") from None
    if not is_usable_topic_id(parsed):
        raise _fail(where, value, "is a reserved id (zero or the metadata topic's) or starts '-'")
    return topic_id_to_str(parsed)


def _partitions(value: Any, where: str) -> int:
    if value is None:
        raise ConfigError(f"{where} is required (the topic's number of partitions)")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PARTITIONS:
        raise _fail(where, value, f"must be an int in [1, {MAX_PARTITIONS}]")
    return value


def _log_config(raw: Any, where: str) -> LogConfig:
    raw = _mapping(raw, where)
    flat: dict[str, Any] = {}

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            name = f"{prefix}{key}"
            if isinstance(value, Mapping):  # YAML may nest dotted names: segment: {bytes: 1}
                walk(value, name + ".")
            else:
                flat[name] = value

    walk(raw, "")
    try:
        return LogConfig.from_dict(flat)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


# ---------------------------------------------------------------------------------------------
# Mapping


@dataclass(frozen=True)
class FieldMapping:
    """A record field from one column, one SQL expression, or (json only) several columns."""

    column: str | None = None
    expr: str | None = None
    columns: tuple[str, ...] | None = None  # json: these columns as one object; ("*",) = all
    format: str | None = None  # None = by type: binary -> bytes, anything else -> string
    unit: str = "ms"  # timestamp only: unit of integral columns
    # timestamp only: `timestamp: now`, the run's start time (fixed once per run, see
    # jobs.ingestion.commit.run_start_ms); now_ms is filled in by `IngestConfig.at_run_start`
    now: bool = False
    now_ms: int | None = None

    @property
    def now_value(self) -> int:
        """The run's start time in ms for `timestamp: now` (set by `IngestConfig.at_run_start`)."""
        if not self.now or self.now_ms is None:
            raise ConfigError("mapping.timestamp: now has no run start time yet (at_run_start)")
        return self.now_ms

    @classmethod
    def from_raw(
        cls, raw: Any, where: str, *, allow_columns: bool = False, timestamp: bool = False
    ) -> FieldMapping:
        if timestamp and raw == "now":  # a column named now: {column: now}
            return cls(now=True)
        if isinstance(raw, str):  # shorthand: a bare column name
            raw = {"column": raw}
        raw = _mapping(raw, where)
        known = ["column", "expr"]
        known += ["unit"] if timestamp else ["format"]
        if allow_columns:
            known.append("columns")
        _only(raw, known, where)
        given = [k for k in ("column", "expr", "columns") if raw.get(k) is not None]
        if len(given) != 1:
            choices = " or ".join(k for k in ("column", "expr", "columns") if k in known)
            raise ConfigError(f"{where}: set exactly one of {choices}")
        fmt = raw.get("format")
        if fmt is not None and fmt not in FORMATS:
            raise _fail(f"{where}.format", fmt, f"must be one of {list(FORMATS)}")
        columns = raw.get("columns")
        if columns is not None:
            if columns == "*":
                columns = ["*"]
            if not isinstance(columns, list) or not columns:
                raise _fail(f"{where}.columns", columns, "must be a non-empty list or '*'")
            columns = tuple(_text(c, f"{where}.columns") for c in columns)
            if fmt not in (None, "json"):
                raise ConfigError(f"{where}: 'columns' builds a JSON object; format must be json")
            fmt = "json"
        unit = raw.get("unit", "ms")
        if unit not in TIMESTAMP_UNITS:
            raise _fail(f"{where}.unit", unit, f"must be one of {list(TIMESTAMP_UNITS)}")
        return cls(
            column=None if raw.get("column") is None else _text(raw["column"], f"{where}.column"),
            expr=None if raw.get("expr") is None else _text(raw["expr"], f"{where}.expr"),
            columns=columns,
            format=fmt,
            unit=unit,
        )


@dataclass(frozen=True)
class TopicMapping:
    """The record's topic: one constant name, or per row from a column / expression."""

    name: str | None = None
    column: str | None = None
    expr: str | None = None

    @property
    def is_constant(self) -> bool:
        return self.name is not None

    @classmethod
    def from_raw(cls, raw: Any, where: str) -> TopicMapping:
        if raw is None:
            raise ConfigError(f"{where} is required: a topic name or {{column: <name>}}")
        if isinstance(raw, str):
            try:
                return cls(name=validate_topic_name(raw))
            except InvalidTopicError as e:
                raise ConfigError(f"{where}: {e}") from None
        raw = _mapping(raw, where)
        _only(raw, ("column", "expr"), where)
        given = [k for k in ("column", "expr") if raw.get(k) is not None]
        if len(given) != 1:
            raise ConfigError(f"{where}: set exactly one of column or expr")
        key = given[0]
        return cls(**{key: _text(raw[key], f"{where}.{key}")})


@dataclass(frozen=True)
class HeadersMapping:
    """Record headers: a map / array<struct<key,value>> column, and/or named SQL expressions."""

    column: str | None = None
    values: tuple[tuple[str, str], ...] = ()  # (header name, SQL expression), in this order

    @classmethod
    def from_raw(cls, raw: Any, where: str) -> HeadersMapping:
        if isinstance(raw, str):
            raw = {"column": raw}
        raw = _mapping(raw, where)
        _only(raw, ("column", "values"), where)
        values = _mapping(raw.get("values"), f"{where}.values")
        if raw.get("column") is None and not values:
            raise ConfigError(f"{where}: set column and/or values")
        pairs = tuple((str(k), _text(str(v), f"{where}.values.{k}")) for k, v in values.items())
        column = raw.get("column")
        return cls(None if column is None else _text(column, f"{where}.column"), pairs)


@dataclass(frozen=True)
class PartitionMapping:
    """Explicit partition (column / expression) or Kafka's default partitioner on the key.

    Records with a null key cannot be placed by murmur2 (Kafka's producer uses its sticky
    partitioner, which is not reproducible). `null_keys` picks a deterministic rule instead:
    `value_hash` = toPositive(murmur2(value bytes, null as empty)) % partitions (depends on the
    content only); `round_robin` = Spark's source row id (monotonically_increasing_id, stable for
    the same input files and split settings) % partitions, exactly even within each input split.
    """

    column: str | None = None
    expr: str | None = None
    null_keys: str = "value_hash"

    @property
    def by_key(self) -> bool:
        return self.column is None and self.expr is None

    @classmethod
    def from_raw(cls, raw: Any, where: str) -> PartitionMapping:
        if isinstance(raw, str):
            raw = {"column": raw}
        raw = _mapping(raw, where)
        _only(raw, ("column", "expr", "null_keys"), where)
        if raw.get("column") is not None and raw.get("expr") is not None:
            raise ConfigError(f"{where}: set at most one of column or expr")
        null_keys = raw.get("null_keys", "value_hash")
        if null_keys not in NULL_KEY_PARTITIONERS:
            raise _fail(
                f"{where}.null_keys", null_keys, f"must be one of {list(NULL_KEY_PARTITIONERS)}"
            )
        column, expr = raw.get("column"), raw.get("expr")
        return cls(
            None if column is None else _text(column, f"{where}.column"),
            None if expr is None else _text(expr, f"{where}.expr"),
            null_keys,
        )


@dataclass(frozen=True)
class MappingSpec:
    """How a source row becomes a Kafka record."""

    topic: TopicMapping
    value: FieldMapping
    key: FieldMapping | None = None
    headers: HeadersMapping | None = None
    timestamp: FieldMapping | None = None  # None: only allowed when every topic is LogAppendTime
    partition: PartitionMapping = field(default_factory=PartitionMapping)
    json_options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_raw(cls, raw: Any, where: str = "mapping") -> MappingSpec:
        raw = _mapping(raw, where)
        _only(
            raw,
            ("topic", "key", "value", "headers", "timestamp", "partition", "json_options"),
            where,
        )
        if raw.get("value") is None:
            raise ConfigError(
                f"{where}.value is required (a column, expr or columns; use expr: 'CAST(NULL AS "
                "BINARY)' for tombstones)"
            )
        json_options = _mapping(raw.get("json_options"), f"{where}.json_options")
        return cls(
            topic=TopicMapping.from_raw(raw.get("topic"), f"{where}.topic"),
            value=FieldMapping.from_raw(raw["value"], f"{where}.value", allow_columns=True),
            key=None
            if raw.get("key") is None
            else FieldMapping.from_raw(raw["key"], f"{where}.key", allow_columns=True),
            headers=None
            if raw.get("headers") is None
            else HeadersMapping.from_raw(raw["headers"], f"{where}.headers"),
            timestamp=None
            if raw.get("timestamp") is None
            else FieldMapping.from_raw(raw["timestamp"], f"{where}.timestamp", timestamp=True),
            partition=PartitionMapping.from_raw(raw.get("partition"), f"{where}.partition"),
            json_options={str(k): _scalar_text(v) for k, v in json_options.items()},
        )

    def referenced_columns(self) -> list[str]:
        """Source columns named directly (not inside expressions), for the existence check."""
        out: list[str] = []
        for fm in (self.key, self.value, self.timestamp):
            if fm is not None and fm.column:
                out.append(fm.column)
            if fm is not None and fm.columns and fm.columns != ("*",):
                out.extend(fm.columns)
        for name in (self.topic.column, self.partition.column):
            if name:
                out.append(name)
        if self.headers is not None and self.headers.column:
            out.append(self.headers.column)
        return out


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# ---------------------------------------------------------------------------------------------
# The whole job


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
        raw = _mapping(raw, "config")
        _only(
            raw,
            ("run_id", "source", "output", "topics", "topic_defaults", "mapping", "ordering"),
            "config",
        )
        if raw.get("source") is None:
            raise ConfigError("source is required (format and path or table)")
        source = SourceSpec.from_dict(raw["source"], "source")
        output = _mapping(raw.get("output"), "output")
        _only(output, ("root", "reject_path", "write_mode"), "output")
        if output.get("root") is None:
            raise ConfigError("output.root is required (the Kafka log dir to write)")
        root = _text(str(output["root"]), "output.root")
        reject = output.get("reject_path")
        reject = None if reject is None else _text(str(reject), "output.reject_path")
        write_mode = str(output.get("write_mode", "auto"))
        if write_mode not in WRITE_MODES:
            raise _fail("output.write_mode", write_mode, f"must be one of {', '.join(WRITE_MODES)}")

        topics_raw = _mapping(raw.get("topics"), "topics")
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
                raise _fail("run_id", run_id, "must be 1-200 characters without spaces or slashes")

        if write_mode == "direct" and ordering:
            raise ConfigError(
                "output.write_mode=direct keeps the source order: it cannot apply `ordering` "
                "(use write_mode range or auto)"
            )
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
            raise _fail(
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
        raise _fail("ordering", raw, "must be 'source' or a non-empty list of columns/expressions")
    return tuple(_text(str(x), "ordering") for x in raw)


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
            raise _fail("--set", item, "must be dotted.key=value")
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
    p.add_argument("--since-version", type=int, help="Delta: only rows added after this version")
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
