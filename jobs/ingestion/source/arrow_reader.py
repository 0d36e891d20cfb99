"""The arrow task reader: Spark tasks read the source's Parquet files themselves, with pyarrow.

Why: in the direct write mode most of a run is the JVM's side of the data path. Spark decodes
Parquet into rows, evaluates the mapping, ships the keys to Python for murmur2 and back, and
converts every row back into Arrow for `mapInArrow`. When the source is Parquet files (a
Parquet path or catalog table, or a Delta table read through delta-rs) and the mapping only
names columns, the tasks can read the very same files with pyarrow straight into Arrow: Spark
schedules the tasks and collects their manifests, and nothing else (the range mode's arrow path,
`arrow_range`, builds on this plan). The per-row checks and the partitioning are
`arrow_mapping.map_batch`, the numpy twin of the mapping's Spark SQL stage (the mapping tests hold
both to the same results), with the same error messages.

What qualifies (`plan_arrow_read` says why not, otherwise):
- source: Parquet files, a catalog table stored as Parquet (`arrow_sources`), or a Delta table
  through delta-rs at a pinned version, without filter, interval, since_version or reader
  options; local files (on a cluster: a mount every executor sees at the same path) or URIs
  whose scheme pyarrow opens (`source_fs`: s3, gs, abfs, hdfs, file, ...; planning reads the
  footers through it, and every task builds its own file system);
- mapping: topic constant or a string column; key and value binary or string columns (format
  bytes or string); timestamp a timestamp-with-time-zone (s, ms or us; or INT96, as Spark writes
  them), date or integer column, or none; partition by key or from an integer column; headers
  from a map<string, string|binary> or list<struct<key string, value string|binary>> column
  and/or named values that are a column name (string or binary) or a plain 'string literal'
  (`arrow_mapping.headers_column` builds them as the Spark mapping does); no reject path;
- the columns have the same type in every file, and none is a partition column (Delta's or the
  table's: its values live in the file paths, not in the files) unless its values are supplied
  (`arrow_sources.PathPartitions`: a table's string and integer ones, parsed from the paths).

Source order is Spark's: the tasks are Spark's file splits, planned in Python from the files'
sizes and the session's settings (`splits.planned_tasks`: task k = Spark's partition k, its
files in Spark's order, each split's midpoint row groups), so both readers write the same
records in the same order with the same `pos`, and a classic and a Spark Connect session the
same plan.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.config.mapping import FieldMapping, HeadersMapping
from jobs.ingestion.mapping.arrow_mapping import (
    as_bytes,
    checked_records,
    headers_column,
    int32_partitions,
    mapping_input,
    no_headers,
)
from jobs.ingestion.mapping.rules import ORDER_COLUMN, MappingRules, mapping_rules
from jobs.ingestion.mapping.structured import StructuredValue
from jobs.ingestion.source.fs import (
    Resolver,
    io_map,
    open_file_system,
    resolvers_for,
    why_not_open,
)
from jobs.ingestion.source.pieces import FilePiece, file_metadata
from jobs.ingestion.source.splits import SplitSettings, bucket_tasks, planned_tasks
from jobs.ingestion.source.table_files import PathPartitions

if TYPE_CHECKING:
    pass

__all__ = [
    "ArrowReadPlan",
    "FilePiece",
    "column_types",
    "file_metadata",
    "ordered_inputs",
    "plan_arrow_read",
]

# Rows per Arrow batch read from Parquet: big enough that per-batch Python work vanishes.
BATCH_ROWS = 65536
# Parquet is read through a buffered stream of this many bytes per column, without pre-buffering:
# pyarrow's default reads a row group's whole column chunks at once, so a task's memory grew with
# the source's row-group size (a 132 MiB row group: 280 MiB peak; streamed: 164 MiB, any size).
READ_BUFFER_BYTES = 1 << 20
_MS_PER_DAY = 86_400_000
# A header value expression the tasks can evaluate: a bare column name or a plain string literal.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LITERAL = re.compile(r"'([^'\\]*)'")
_SQL_LITERALS = ("null", "true", "false")


@dataclass(frozen=True)
class _Columns:
    """Which file column feeds each record field, and how (small and picklable)."""

    topic_name: str | None  # constant topic
    topic_column: str | None
    key_column: str | None
    value_column: str | None  # None: the value is built from columns (`value_encoding`)
    timestamp_column: str | None
    timestamp_kind: str  # none | timestamp | integer | date | now
    timestamp_factor: tuple[int, int]  # ms = value * a // b; now: (run start ms, 1)
    partition_column: str | None
    headers_column: str | None = None  # map or list<struct<key, value>> column
    # named header values after the column's entries: (name, column, literal), one of the two
    header_values: tuple[tuple[str, str | None, str | None], ...] = ()
    # a key / value made from columns in a structured format (avro, json)
    key_encoding: StructuredValue | None = None
    value_encoding: StructuredValue | None = None

    @property
    def headers(self) -> bool:
        return self.headers_column is not None or bool(self.header_values)

    @property
    def names(self) -> list[str]:
        named = (
            self.topic_column,
            self.key_column,
            self.value_column,
            self.timestamp_column,
            self.partition_column,
            self.headers_column,
            *(column for _, column, _ in self.header_values),
            *(self.key_encoding.names if self.key_encoding else ()),
            *(self.value_encoding.names if self.value_encoding else ()),
        )
        return list(dict.fromkeys(n for n in named if n is not None))


@dataclass(frozen=True)
class ArrowReadPlan:
    """Everything the tasks need: their files, the column plan and the mapping's rules."""

    tasks: tuple[tuple[FilePiece, ...], ...]
    columns: _Columns
    rules: MappingRules
    file_systems: tuple[str, ...] = ()  # pyarrow's type names of the file systems read
    resolvers: tuple[tuple[str, Resolver], ...] = ()  # `source_fs` hooks the tasks install

    @property
    def where(self) -> str:
        """Where the files are, for the summary: "local files" or "files on s3 through pyarrow"."""
        remote = [t for t in self.file_systems if t != "local"]
        return f"files on {', '.join(remote)} through pyarrow" if remote else "local files"


# ---------------------------------------------------------------------------------------------
# Planning (driver, no Spark)


def _plain_column(fm: FieldMapping | None, setting: str) -> tuple[str | None, str | None]:
    """(column name, None) for a plain column mapping, (None, why not) otherwise."""
    if fm is None or fm.now:
        return None, None
    if fm.column is None:
        return None, f"{setting} is an expression or a column list"
    return fm.column, None


def _read_types(
    paths: Sequence[str], names: Sequence[str], nested: Sequence[str] = ()
) -> tuple[dict[str, pa.DataType] | None, str]:
    """Each named column's type as the tasks read it, the same in every file (else None and
    why not); the `nested` ones may be a map or list. INT96 timestamps (Spark's default for
    timestamps it writes) read as microseconds since the epoch, the instants Spark reads."""
    types: dict[str, pa.DataType] = {}
    for path, meta in zip(paths, io_map(file_metadata, paths), strict=True):
        schema = meta.schema.to_arrow_schema()
        leaves = {meta.schema.column(j).path: j for j in range(meta.num_columns)}
        for name in names:
            index = schema.get_field_index(name)
            if index < 0 or (name not in leaves and name not in nested):
                return None, f"column {name!r} is not a plain column of data file {path}"
            dtype = schema.field(index).type
            if name in leaves and meta.schema.column(leaves[name]).physical_type == "INT96":
                dtype = pa.timestamp("us", tz="UTC")
            if types.setdefault(name, dtype) != dtype:
                first = types[name]
                return None, f"column {name!r} is {first} in one file and {dtype} in {path}"
    return types, ""


def column_types(
    files: Sequence[str], names: Sequence[str]
) -> tuple[dict[str, pa.DataType] | None, str]:
    """Each named column's type, the same in every file, or (None, why not): for checks beyond
    the mapping's (`arrow_range`'s ordering columns)."""
    return _read_types(sorted(files), names)


def _is_bytes(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
        or pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
    )


def _timestamp_plan(fm: FieldMapping, dtype: pa.DataType) -> tuple[str, tuple[int, int]] | None:
    """(kind, (a, b)) with ms = value * a // b, exactly as the mapping's Spark SQL converts."""
    if pa.types.is_timestamp(dtype):
        if dtype.tz is None or dtype.unit == "ns":  # Spark reads those as NTZ / not at all
            return None
        return "timestamp", {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000)}[dtype.unit]
    if pa.types.is_date32(dtype):
        return "date", (_MS_PER_DAY, 1)
    if pa.types.is_signed_integer(dtype):
        return "integer", {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000)}[fm.unit]
    return None


def _encoded_why(
    encoding: StructuredValue | None, fm: FieldMapping | None, setting: str, json_options: object
) -> str:
    """Why the tasks cannot build this key/value ("" if they can or it is a plain column)."""
    if fm is None or fm.format in (None, "bytes", "string"):
        return ""
    if encoding is None:  # no structured format resolved for it (or none asked for)
        if fm.format == "json" and json_options:
            return f"{setting} is format json with mapping.json_options (Spark's to_json)"
        return f"{setting} is format {fm.format}"
    if encoding.columns is None and encoding.column is None:
        return f"{setting} is an expression"
    if any(not re.fullmatch(r"[^.`]+", n) for n in encoding.names):
        return f"{setting} names a nested field"
    return ""


def _spark_reads_alike(dtype: pa.DataType) -> str:
    """Why Spark would read this Parquet column as another type than pyarrow does ("" if it
    reads the same values and type): what the structured encoders see must not differ."""
    if pa.types.is_struct(dtype):
        return next((w for f in dtype if (w := _spark_reads_alike(f.type))), "")
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return _spark_reads_alike(dtype.value_type)
    if pa.types.is_map(dtype):
        if not _is_text(dtype.key_type):
            return "a map whose keys are not strings"
        return _spark_reads_alike(dtype.item_type)
    if pa.types.is_timestamp(dtype):
        return "nanosecond timestamps" if dtype.unit == "ns" else ""
    if pa.types.is_unsigned_integer(dtype):
        return "unsigned integers (Spark widens them)"
    if (
        pa.types.is_boolean(dtype)
        or pa.types.is_signed_integer(dtype)
        or pa.types.is_float32(dtype)
        or pa.types.is_float64(dtype)
        or pa.types.is_decimal128(dtype)
        or pa.types.is_date32(dtype)
        or _is_bytes(dtype)
        or pa.types.is_fixed_size_binary(dtype)
        or pa.types.is_null(dtype)
    ):
        return ""
    return f"{dtype} is not read alike by Spark and pyarrow"


def _is_text(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_string(dtype) or pa.types.is_large_string(dtype))


def _headers_plan(
    h: HeadersMapping | None,
) -> tuple[tuple[str | None, tuple[tuple[str, str | None, str | None], ...]], str]:
    """((headers column, (name, column, literal) per named value), why not): named values must
    be a bare column name or a string literal without quotes or escapes inside."""
    if h is None:
        return (None, ()), ""
    values = []
    for name, expr in h.values:
        text = expr.strip()
        literal = _LITERAL.fullmatch(text)
        if literal is not None:
            values.append((name, None, literal.group(1)))
        elif _IDENTIFIER.fullmatch(text) and text.lower() not in _SQL_LITERALS:
            values.append((name, text, None))
        else:
            return (None, ()), f"mapping.headers.values.{name} is an expression"
    if h.column is not None and not re.fullmatch(r"[^.`]+", h.column):  # as `mapping_fields`
        return (None, ()), "mapping.headers.column is a nested field"
    return (h.column, tuple(values)), ""


def _headers_type_why(column: str, dtype: pa.DataType) -> str:
    """Why the tasks cannot read this headers column as Spark's mapping would ("" if they can)."""
    if pa.types.is_map(dtype):
        key, value = dtype.key_type, dtype.item_type
    elif (pa.types.is_list(dtype) or pa.types.is_large_list(dtype)) and pa.types.is_struct(
        dtype.value_type
    ):
        entry = dtype.value_type
        if entry.get_field_index("key") < 0 or entry.get_field_index("value") < 0:
            return f"headers column {column!r} is {dtype}"
        key, value = entry.field("key").type, entry.field("value").type
    else:
        return f"headers column {column!r} is {dtype}"
    if not _is_text(key) or not _is_bytes(value):
        return f"headers column {column!r} is {dtype}, not string keys and string/binary values"
    return ""


def plan_arrow_read(
    config: IngestConfig,
    files: Sequence[str],
    *,
    partition_columns: Sequence[str] = (),
    partitions: PathPartitions | None = None,
    partitions_why: str = "",
    splits: Callable[[], SplitSettings] = SplitSettings,
    buckets: int | None = None,
    encodings: Mapping[str, StructuredValue | None] | None = None,
) -> tuple[ArrowReadPlan | None, str]:
    """The arrow reader's plan for these source files (Spark's or the Delta snapshot's list),
    or (None, why not) when the run does not qualify (see the module docstring); `partitions`:
    the values of partition columns the tasks can supply (a table's, from its paths), and
    `partitions_why` why not, when they cannot (said if the mapping reads them); `splits`: asked
    once the run qualifies, the session's settings that shape Spark's file splits, the tasks
    (`split_settings`); `buckets`: Spark scans the files one partition per bucket;
    `encodings`: the key's and the
    value's `StructuredValue` ("key", "value") when the mapping gives them a structured format,
    resolved on the driver (`structured.structured_value`)."""
    source, m = config.source, config.mapping
    if source.format not in ("parquet", "delta", "table"):
        return None, f"source format {source.format}"
    if source.filter or source.interval is not None or source.since_version is not None:
        return None, "the source has a filter, an interval or since_version"
    if source.options:
        return None, "the source has reader options"
    if config.reject_path is not None:
        return None, "output.reject_path is set"
    if config.ordering:
        return None, "an ordering is configured"
    (headers, header_values), why = _headers_plan(m.headers)
    if why:
        return None, why
    if m.topic.expr is not None:
        return None, "mapping.topic is an expression"
    if m.partition.expr is not None:
        return None, "mapping.partition is an expression"
    encodings = encodings or {}
    key_encoding, value_encoding = encodings.get("key"), encodings.get("value")
    key, why = (None, "") if key_encoding else _plain_column(m.key, "mapping.key")
    value, why_value = (None, "") if value_encoding else _plain_column(m.value, "mapping.value")
    timestamp, why_ts = _plain_column(m.timestamp, "mapping.timestamp")
    why_encoded = _encoded_why(key_encoding, m.key, "mapping.key", m.json_options) or (
        _encoded_why(value_encoding, m.value, "mapping.value", m.json_options)
    )
    for reason in (why, why_value, why_ts, why_encoded):
        if reason:
            return None, reason
    why = why_not_open(files)
    if why:
        return None, why
    sources = sorted(files)
    if not sources:
        return None, "the source has no data files"
    assert value is not None or value_encoding is not None
    columns = _Columns(
        topic_name=m.topic.name,
        topic_column=m.topic.column,
        key_column=key,
        value_column=value,
        timestamp_column=timestamp,
        timestamp_kind="none",
        timestamp_factor=(1, 1),
        partition_column=m.partition.column,
        headers_column=headers,
        header_values=header_values,
        key_encoding=key_encoding,
        value_encoding=value_encoding,
    )
    names = columns.names
    structured = [n for e in (key_encoding, value_encoding) if e for n in e.names]
    supplied = sorted(set(names) & set(partitions.types if partitions is not None else ()))
    shadowed = sorted(set(names) & set(partition_columns) - set(supplied))
    if shadowed:
        kind = "Delta" if source.format == "delta" else "table"
        why = f"the mapping reads {kind} partition column(s) {shadowed}"
        return None, f"{why}: {partitions_why}" if partitions_why else why
    in_files = [n for n in names if n not in supplied]
    nested = [*([headers] if headers else []), *structured]
    types, why = _read_types(sources, in_files, nested=nested)
    if types is None:
        return None, why
    if partitions is not None:
        types.update({n: partitions.types[n] for n in supplied})
    if m.topic.column is not None and not _is_text(types[m.topic.column]):
        return None, "the topic column is not a string column"
    header_columns = [c for _, c, _ in header_values if c is not None]
    for name in (key, value, *header_columns):
        if name is not None and not _is_bytes(types[name]):
            return None, f"column {name!r} is {types[name]}, not binary or string"
    if headers is not None:
        why = _headers_type_why(headers, types[headers])
        if why:
            return None, why
    for name in structured:
        why = _spark_reads_alike(types[name])
        if why:
            return None, f"column {name!r} is {types[name]}: {why}"
    kind, factor = "none", (1, 1)
    if m.timestamp is not None and m.timestamp.now:
        kind, factor = "now", (m.timestamp.now_value, 1)
    elif timestamp is not None:
        assert m.timestamp is not None
        planned = _timestamp_plan(m.timestamp, types[timestamp])
        if planned is None:
            return None, f"timestamp column {timestamp!r} is {types[timestamp]}"
        kind, factor = planned
    if m.partition.column is not None and not pa.types.is_signed_integer(types[m.partition.column]):
        return None, f"partition column {m.partition.column!r} is not a signed integer"
    if buckets is not None:
        tasks = bucket_tasks(files, buckets)
        if tasks is None:
            return None, "a file of the bucketed table has no bucket id in its name"
    else:
        tasks = planned_tasks(files, splits())  # in Spark's listing order
    if supplied:
        assert partitions is not None
        tasks = tuple(
            tuple(
                replace(
                    p,
                    partition_values=tuple(
                        (n, v) for n, v in partitions.values[p.path] if n in supplied
                    ),
                )
                for p in task
            )
            for task in tasks
        )
    return ArrowReadPlan(
        tasks,
        replace(columns, timestamp_kind=kind, timestamp_factor=factor),
        mapping_rules(config),
        file_systems=tuple(sorted({open_file_system(p)[0].type_name for p in sources})),
        resolvers=resolvers_for(sources),
    ), ""


# ---------------------------------------------------------------------------------------------
# Task side (no Spark)


def _batches(
    task: Sequence[FilePiece], names: Sequence[str], rows: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    for piece in task:
        fs, path = open_file_system(piece.path)
        groups = None if piece.row_groups is None else list(piece.row_groups)
        constant = dict(piece.partition_values)
        with pq.ParquetFile(
            path,
            filesystem=fs,
            buffer_size=READ_BUFFER_BYTES,
            pre_buffer=False,
            coerce_int96_timestamp_unit="us",  # as `_read_types` plans them
        ) as parquet:
            for batch in parquet.iter_batches(
                batch_size=rows,
                row_groups=groups,
                columns=[n for n in names if n not in constant],
                use_threads=False,
            ):
                for name, value in constant.items():  # as Spark adds a table's partitions
                    batch = batch.append_column(name, pa.repeat(value, batch.num_rows))
                yield batch


def _timestamps_ms(column: pa.Array, columns: _Columns) -> pa.Array:
    a, b = columns.timestamp_factor
    if columns.timestamp_kind == "date":
        column = column.cast(pa.int32())  # days since the epoch
    column = column.cast(pa.int64())
    values = column.fill_null(0).to_numpy(zero_copy_only=False)
    ms = values * a if a != 1 else values
    if b != 1:
        ms = np.floor_divide(ms, b)
    mask = column.is_null().to_numpy(zero_copy_only=False) if column.null_count else None
    return pa.array(ms, pa.int64(), mask=mask)


def _mapping_input(
    batch: pa.RecordBatch, columns: _Columns, task_index: int, first_row: int
) -> pa.RecordBatch:
    """A source batch as stage 2 of the mapping sees it (what `_prepare` gives in Spark)."""
    n = batch.num_rows
    if columns.topic_column is not None:
        topic = batch.column(columns.topic_column)
    else:
        topic = pc.take(pa.array([columns.topic_name]), pa.array(np.zeros(n, dtype=np.int32)))
    misfits = []  # why a row's key, then its value, does not fit its schema
    if columns.key_encoding is not None:
        key, misfit = columns.key_encoding.encode(columns.key_encoding.values(batch))
        misfits.append(misfit)
    elif columns.key_column is None:
        key = pa.nulls(n, pa.binary())
    else:
        key = as_bytes(batch.column(columns.key_column))
    if columns.value_encoding is not None:
        value, misfit = columns.value_encoding.encode(columns.value_encoding.values(batch))
        misfits.append(misfit)
    else:
        assert columns.value_column is not None
        value = as_bytes(batch.column(columns.value_column))
    if columns.timestamp_kind == "now":  # `timestamp: now`: the run's start time
        timestamp = pa.array(np.full(n, columns.timestamp_factor[0], dtype=np.int64))
    elif columns.timestamp_column is None:  # no timestamp mapped: -1 (LogAppendTime topics)
        timestamp = pa.array(np.full(n, -1, dtype=np.int64))
    else:
        timestamp = _timestamps_ms(batch.column(columns.timestamp_column), columns)
    if columns.partition_column is None:
        partition = pa.nulls(n, pa.int32())
    else:
        partition = int32_partitions(batch.column(columns.partition_column))
    if columns.headers:
        headers = headers_column(
            None if columns.headers_column is None else batch.column(columns.headers_column),
            [
                (name, batch.column(column) if column else pa.repeat(pa.scalar(text), n))
                for name, column, text in columns.header_values
            ],
        )
    else:
        headers = no_headers(n)
    return mapping_input(
        {
            "topic": topic,
            "key": key,
            "value": value,
            "headers": headers,
            "timestamp": timestamp,
            "partition": partition,
            **({"misfit": pc.coalesce(*misfits)} if misfits else {}),
        },
        task_index,
        first_row,
    )


def mapped_batches(
    task: Sequence[FilePiece], task_index: int, columns: _Columns, rules: MappingRules
) -> Iterator[pa.RecordBatch]:
    """This task's records (topic, partition, key, value, timestamp), checked, in file order."""

    def inputs() -> Iterator[pa.RecordBatch]:
        row = 0
        for batch in _batches(task, columns.names):
            yield _mapping_input(batch, columns, task_index, row)
            row += batch.num_rows

    return checked_records(inputs(), rules, headers=columns.headers)


def ordered_inputs(
    task: Sequence[FilePiece], task_index: int, columns: _Columns, ordering: Sequence[str]
) -> Iterator[pa.RecordBatch]:
    """Stage 2's input of this task's files with `_kl_order` = (o0, o1, .., pos) over the
    plain ordering columns `ordering`, the struct the Spark mapping builds (for `arrow_range`,
    which sorts by it; `map_batch` passes it through)."""
    row = 0
    names = list(dict.fromkeys([*columns.names, *ordering]))
    for batch in _batches(task, names):
        inputs = _mapping_input(batch, columns, task_index, row)
        row += batch.num_rows
        index = inputs.schema.get_field_index(ORDER_COLUMN)
        pos = inputs.column(index).field("pos")
        order = pa.StructArray.from_arrays(
            [*(batch.column(name) for name in ordering), pos],
            names=[*(f"o{i}" for i in range(len(ordering))), "pos"],
        )
        yield inputs.set_column(index, ORDER_COLUMN, order)
