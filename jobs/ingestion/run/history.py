"""Ingest history: one Delta row per run attempt, in the meta area beside the output root.

Written with delta-rs (`deltalake.write_deltalake`), so the driver needs no JVM for it and any
Delta reader (Spark, delta-rs, DuckDB) can query it. It answers the two questions that make a
re-run safe: "was run R already committed?" and "was version V of source S already ingested?";
and where an incremental source (a change data feed) continues: after its highest version.
The committed row is the last thing a publish writes, so its presence means the run is complete.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from jobs.ingestion.run.meta import IngestError
from kafkalog_core.root.meta_area import meta_root

HISTORY_DIR = "ingest-history"
_JSON_FIELDS = ("partitions", "timings", "topic_configs")
COMMITTED = "committed"


class PublishedRun(Protocol):
    """What the history records of a published plan (the commit's `PublishPlan`): the history
    sits below the commit, so it names only the fields it reads."""

    run_id: str
    run_info: Any  # RunInfo: source, version, timings, config hash, topic configs
    output_root: Any

    @property
    def record_count(self) -> int: ...

    def ranges(self) -> Any: ...


SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("source", pa.string()),
        pa.field("source_version", pa.string()),
        pa.field("started_at", pa.timestamp("us", tz="UTC")),
        pa.field("finished_at", pa.timestamp("us", tz="UTC")),
        pa.field("rows", pa.int64()),
        pa.field("partitions", pa.string()),  # JSON {"topic-p": [first, next)}
        pa.field("timings", pa.string()),  # JSON {"phase": ms}
        pa.field("config_hash", pa.string()),
        pa.field("description", pa.string()),
        pa.field("output_root", pa.string()),
        pa.field("host", pa.string()),
        pa.field("message", pa.string()),
        # JSON {"topic": {non-default topic configs}}: what maintenance jobs read back
        pa.field("topic_configs", pa.string()),
    ]
)


def _ms_to_dt(ms: int | None) -> datetime | None:
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


class IngestHistory:
    """Append-only run records at `<meta area>/ingest-history` (a Delta table)."""

    def __init__(self, output_root: str | os.PathLike[str]) -> None:
        self.output_root = Path(output_root)
        self.path = meta_root(output_root) / HISTORY_DIR

    def exists(self) -> bool:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(str(self.path))

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one row; unknown keys are refused, missing ones are null."""
        from deltalake import write_deltalake

        unknown = set(record) - set(SCHEMA.names)
        if unknown:
            raise IngestError(f"ingest history {self.path}: unknown fields {sorted(unknown)}")
        row = {name: [record.get(name)] for name in SCHEMA.names}
        for key in _JSON_FIELDS:
            value = row[key][0]
            if value is not None and not isinstance(value, str):
                row[key] = [json.dumps(value, sort_keys=True)]
        table = pa.Table.from_pydict(row, schema=SCHEMA)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # schema_mode="merge": a history written before a column was added gains it (nulls)
        write_deltalake(str(self.path), table, mode="append", schema_mode="merge")

    def append_run(
        self,
        plan: PublishedRun,
        *,
        status: str = COMMITTED,
        publish_seconds: float = 0.0,
        message: str = "",
    ) -> dict[str, Any]:
        """The record of a published plan (called by `publish` as its last durable step)."""
        info = plan.run_info
        timings = dict(info.timings_ms)
        timings["publish"] = int(publish_seconds * 1000)
        record = {
            "run_id": plan.run_id,
            "status": status,
            "source": info.source,
            "source_version": info.source_version,
            "started_at": _ms_to_dt(info.started_at_ms),
            "finished_at": datetime.now(tz=timezone.utc),
            "rows": plan.record_count,
            "partitions": plan.ranges(),
            "timings": timings,
            "config_hash": info.config_hash,
            "description": info.description,
            "output_root": str(plan.output_root),
            "host": socket.gethostname(),
            "message": message,
            "topic_configs": {t: dict(c) for t, c in info.topic_configs.items()},
        }
        self.append(record)
        return record

    def read(self) -> pa.Table:
        """All records, oldest first (empty table with the schema when nothing was written)."""
        from deltalake import DeltaTable

        if not self.exists():
            return SCHEMA.empty_table()
        table = DeltaTable(str(self.path)).to_pyarrow_table()
        for name in SCHEMA.names:  # columns added after this history was first written
            if name not in table.column_names:
                table = table.append_column(
                    SCHEMA.field(name), pa.nulls(table.num_rows, pa.string())
                )
        if table.num_rows == 0:
            return table
        return table.sort_by([("finished_at", "ascending"), ("run_id", "ascending")])

    def _rows(self) -> list[dict[str, Any]]:
        return [_decode(r) for r in self.read().to_pylist()]

    def find_run(self, run_id: str, status: str | None = COMMITTED) -> dict[str, Any] | None:
        """The latest record of `run_id` (with `status`, if given), else None."""
        matches = [
            r
            for r in self._rows()
            if r["run_id"] == run_id and (status is None or r["status"] == status)
        ]
        return matches[-1] if matches else None

    def find_source_version(
        self, source: str, version: str, status: str | None = COMMITTED
    ) -> dict[str, Any] | None:
        """The latest committed run that ingested `version` of `source`, else None."""
        matches = [
            r
            for r in self._rows()
            if r["source"] == source
            and r["source_version"] == str(version)
            and (status is None or r["status"] == status)
        ]
        return matches[-1] if matches else None

    def last_source_version(self, source: str) -> dict[str, Any] | None:
        """The committed run of `source` that ingested its highest version, else None: where
        an incremental run (a change data feed) continues."""
        matches = [
            r
            for r in self._rows()
            if r["source"] == source
            and r["status"] == COMMITTED
            and str(r["source_version"] or "").isdigit()
        ]
        return max(matches, key=lambda r: int(r["source_version"]), default=None)

    def last_runs(self, n: int = 10) -> list[dict[str, Any]]:
        """The `n` most recent records, newest first."""
        return list(reversed(self._rows()))[:n]


def _decode(row: dict[str, Any]) -> dict[str, Any]:
    for key in _JSON_FIELDS:
        if row.get(key):
            row[key] = json.loads(row[key])
    return row


def format_summary(record: Mapping[str, Any]) -> str:
    """A few lines for the driver to print after a run."""
    parts = record.get("partitions") or {}
    if isinstance(parts, str):
        parts = json.loads(parts)
    # The run's own laps, not finished - started: its start time is the first attempt's clock
    # or a pinned --now, which may be years before (a backfill) or a killed attempt's.
    timings = record.get("timings") or {}
    if isinstance(timings, str):
        timings = json.loads(timings)
    started, finished = record.get("started_at"), record.get("finished_at")
    if timings:
        took = f"{sum(timings.values()) / 1000:.1f}s"
    else:
        took = f"{(finished - started).total_seconds():.1f}s" if started and finished else "?"
    lines = [
        f"run {record.get('run_id')}: {record.get('status')}, {record.get('rows')} records "
        f"from {record.get('source')}@{record.get('source_version')} into "
        f"{len(parts)} partitions in {took}"
    ]
    for name in sorted(parts):
        first, nxt = parts[name]
        lines.append(f"  {name}: offsets [{first}, {nxt}) ({nxt - first} offsets)")
    return "\n".join(lines)
