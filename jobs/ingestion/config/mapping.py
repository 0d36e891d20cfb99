"""The ingest config's `mapping:`: how a source row becomes a Kafka record (topic, key, value,
headers, timestamp, partition), checked for structure here and against the source schema by
`jobs.ingestion.mapping.spark_mapping`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jobs.ingestion.config.values import as_mapping, invalid, non_empty_text, only_known
from kafkalog_core.errors import ConfigError, InvalidTopicError
from kafkalog_core.log.names import validate_topic_name

__all__ = [
    "FORMATS",
    "FRAMINGS",
    "NULL_KEY_PARTITIONERS",
    "TIMESTAMP_UNITS",
    "FieldMapping",
    "HeadersMapping",
    "MappingSpec",
    "PartitionMapping",
    "STRUCTURED_FORMATS",
    "TopicMapping",
]

FORMATS = ("bytes", "string", "json", "long", "int", "avro")
# formats that build the bytes from several columns or a struct (`columns:` takes only these)
STRUCTURED_FORMATS = ("json", "avro")
FRAMINGS = ("confluent", "none")
NULL_KEY_PARTITIONERS = ("value_hash", "round_robin")
TIMESTAMP_UNITS = ("ms", "s", "us")


@dataclass(frozen=True)
class FieldMapping:
    """A record field from one column, one SQL expression, or (json, avro) several columns."""

    column: str | None = None
    expr: str | None = None
    columns: tuple[str, ...] | None = None  # json/avro: these columns as one record; ("*",) = all
    format: str | None = None  # None = by type: binary -> bytes, anything else -> string
    schema_file: str | None = None  # avro: a .avsc the columns must fit (else derived, as Spark)
    schema_id: int | None = None  # frame with this Schema Registry id
    framing: str | None = None  # confluent | none; None = confluent with a schema_id, else none
    unit: str = "ms"  # timestamp only: unit of integral columns
    # timestamp only: `timestamp: now`, the run's start time (fixed once per run, see
    # jobs.ingestion.staging.task_staging.run_start_ms); now_ms is filled in by `IngestConfig.at_run_start`
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
        raw = as_mapping(raw, where)
        known = ["column", "expr"]
        known += ["unit"] if timestamp else ["format", "schema_file", "schema_id", "framing"]
        if allow_columns:
            known.append("columns")
        only_known(raw, known, where)
        given = [k for k in ("column", "expr", "columns") if raw.get(k) is not None]
        if len(given) != 1:
            choices = " or ".join(k for k in ("column", "expr", "columns") if k in known)
            raise ConfigError(f"{where}: set exactly one of {choices}")
        fmt = raw.get("format")
        if fmt is not None and fmt not in FORMATS:
            raise invalid(f"{where}.format", fmt, f"must be one of {list(FORMATS)}")
        columns = raw.get("columns")
        if columns is not None:
            if columns == "*":
                columns = ["*"]
            if not isinstance(columns, list) or not columns:
                raise invalid(f"{where}.columns", columns, "must be a non-empty list or '*'")
            columns = tuple(non_empty_text(c, f"{where}.columns") for c in columns)
            if fmt not in (None, *STRUCTURED_FORMATS):
                raise ConfigError(
                    f"{where}: 'columns' builds one record of the columns; format must be "
                    f"{' or '.join(STRUCTURED_FORMATS)}"
                )
            fmt = fmt or "json"
        unit = raw.get("unit", "ms")
        if unit not in TIMESTAMP_UNITS:
            raise invalid(f"{where}.unit", unit, f"must be one of {list(TIMESTAMP_UNITS)}")
        schema_file, schema_id, framing = _schema_settings(raw, fmt, where)
        return cls(
            column=None
            if raw.get("column") is None
            else non_empty_text(raw["column"], f"{where}.column"),
            expr=None if raw.get("expr") is None else non_empty_text(raw["expr"], f"{where}.expr"),
            columns=columns,
            format=fmt,
            unit=unit,
            schema_file=schema_file,
            schema_id=schema_id,
            framing=framing,
        )


def _schema_settings(
    raw: Mapping, fmt: str | None, where: str
) -> tuple[str | None, int | None, str | None]:
    """(schema_file, schema_id, framing) of a key/value mapping, checked: a schema file only
    for avro, an id in 0..2**31-1, confluent framing only with an id to frame with."""
    schema_file = raw.get("schema_file")
    if schema_file is not None:
        schema_file = non_empty_text(schema_file, f"{where}.schema_file")
        if fmt != "avro":
            raise ConfigError(f"{where}.schema_file is an Avro schema (.avsc); set format: avro")
    schema_id = raw.get("schema_id")
    if schema_id is not None and (
        not isinstance(schema_id, int) or isinstance(schema_id, bool) or not 0 <= schema_id < 2**31
    ):
        raise invalid(f"{where}.schema_id", schema_id, "must be an integer in 0..2147483647")
    framing = raw.get("framing")
    if framing is not None and framing not in FRAMINGS:
        raise invalid(f"{where}.framing", framing, f"must be one of {list(FRAMINGS)}")
    if (schema_id is not None or framing is not None) and fmt not in STRUCTURED_FORMATS:
        raise ConfigError(f"{where}: schema_id and framing apply to format avro or json")
    if framing == "confluent" and schema_id is None:
        raise ConfigError(f"{where}.framing=confluent needs a schema_id to frame with")
    return schema_file, schema_id, framing


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
        raw = as_mapping(raw, where)
        only_known(raw, ("column", "expr"), where)
        given = [k for k in ("column", "expr") if raw.get(k) is not None]
        if len(given) != 1:
            raise ConfigError(f"{where}: set exactly one of column or expr")
        key = given[0]
        return cls(**{key: non_empty_text(raw[key], f"{where}.{key}")})


@dataclass(frozen=True)
class HeadersMapping:
    """Record headers: a map / array<struct<key,value>> column, and/or named SQL expressions."""

    column: str | None = None
    values: tuple[tuple[str, str], ...] = ()  # (header name, SQL expression), in this order

    @classmethod
    def from_raw(cls, raw: Any, where: str) -> HeadersMapping:
        if isinstance(raw, str):
            raw = {"column": raw}
        raw = as_mapping(raw, where)
        only_known(raw, ("column", "values"), where)
        values = as_mapping(raw.get("values"), f"{where}.values")
        if raw.get("column") is None and not values:
            raise ConfigError(f"{where}: set column and/or values")
        pairs = tuple(
            (str(k), non_empty_text(str(v), f"{where}.values.{k}")) for k, v in values.items()
        )
        column = raw.get("column")
        return cls(None if column is None else non_empty_text(column, f"{where}.column"), pairs)


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
        raw = as_mapping(raw, where)
        only_known(raw, ("column", "expr", "null_keys"), where)
        if raw.get("column") is not None and raw.get("expr") is not None:
            raise ConfigError(f"{where}: set at most one of column or expr")
        null_keys = raw.get("null_keys", "value_hash")
        if null_keys not in NULL_KEY_PARTITIONERS:
            raise invalid(
                f"{where}.null_keys", null_keys, f"must be one of {list(NULL_KEY_PARTITIONERS)}"
            )
        column, expr = raw.get("column"), raw.get("expr")
        return cls(
            None if column is None else non_empty_text(column, f"{where}.column"),
            None if expr is None else non_empty_text(expr, f"{where}.expr"),
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
        raw = as_mapping(raw, where)
        only_known(
            raw,
            ("topic", "key", "value", "headers", "timestamp", "partition", "json_options"),
            where,
        )
        if raw.get("value") is None:
            raise ConfigError(
                f"{where}.value is required (a column, expr or columns; use expr: 'CAST(NULL AS "
                "BINARY)' for tombstones)"
            )
        json_options = as_mapping(raw.get("json_options"), f"{where}.json_options")
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
