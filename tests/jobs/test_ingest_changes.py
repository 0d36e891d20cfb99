"""`source.changes: cdf`: a Delta table's Change Data Feed in, upserts and tombstones out.

One table, five versions (create, update, delete, a merge that re-inserts a deleted key, updates
and deletes, and an overwrite that deletes and re-inserts every key in one commit), ingested in
1, 2 and 5 runs: each gives the same records, read back by kafka-python, and the latest record
per key is the table's current row, or a tombstone for a deleted key.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from jobs.ingest import run
from jobs.ingestion.config.ingest_config import IngestConfig
from jobs.ingestion.run.history import IngestHistory
from kafkalog_core.errors import ConfigError, KafkaLogError
from tests.jobs import delta_spark_driver
from tests.jobs.ingest_helpers import read_root, snapshot, staging_leftovers

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("updated_at", pa.timestamp("us", tz="UTC"))]
)
T0 = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
FEED = {"delta.enableChangeDataFeed": "true"}
TOPIC = "customers"
# The feed's rows: inserts, update postimages and deletes (no preimage) of versions 0-4.
RECORDS = 6 + 2 + 2 + 4 + 10


def _rows(items: list[tuple[int, str]], hour: int) -> pa.Table:
    return pa.table(
        {
            "id": [i for i, _ in items],
            "name": [n for _, n in items],
            "updated_at": [T0 + dt.timedelta(hours=hour)] * len(items),
        },
        schema=SCHEMA,
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:
    """Versions 0-4 of a keyed table with the change data feed on from its creation."""
    path = str(tmp_path_factory.mktemp("cdf") / "customers")
    write_deltalake(path, _rows([(i, f"v0-{i}") for i in range(1, 7)], 0), configuration=FEED)
    DeltaTable(path).update(new_values={"name": "v1"}, predicate="id = 2 OR id = 4")  # 1
    DeltaTable(path).delete("id = 1 OR id = 3")  # 2
    merged = _rows([(1, "v3-back"), (2, "v3"), (5, "gone"), (7, "v3-new")], 3)
    merged = merged.append_column("op", pa.array(["u", "u", "d", "u"]))
    (  # 3: re-inserts key 1, updates 2, deletes 5, inserts 7
        DeltaTable(path)
        .merge(source=merged, predicate="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_delete(predicate="s.op = 'd'")
        .when_matched_update(updates={"name": "s.name", "updated_at": "s.updated_at"})
        .when_not_matched_insert(
            updates={"id": "s.id", "name": "s.name", "updated_at": "s.updated_at"}
        )
        .execute()
    )
    # 4: an overwrite: every old row deleted and the new ones inserted in one commit (1 changed,
    # 6 gone, 8 new; the others deleted and inserted again with the same values)
    current = DeltaTable(path).to_pyarrow_table().sort_by("id").to_pylist()
    kept = [(r["id"], "v4" if r["id"] == 1 else r["name"]) for r in current if r["id"] != 6]
    write_deltalake(path, _rows([*kept, (8, "v4-new")], 4), mode="overwrite")
    assert DeltaTable(path).version() == 4
    return path


def _doc(table: str, root: Path, *, reader: str = "delta-rs", **source) -> dict:
    return {
        "source": {
            "format": "delta",
            "path": table,
            "changes": "cdf",
            "delta_reader": reader,
            **source,
        },
        "output": {"root": str(root)},
        "topics": {
            TOPIC: {
                "partitions": 2,
                "config": {"cleanup.policy": "compact", "segment.bytes": 1024},
            }
        },
        "mapping": {
            "topic": TOPIC,
            "key": {"column": "id", "format": "string"},
            "value": {"columns": ["id", "name", "updated_at"], "format": "json"},
            "timestamp": {"column": "_commit_timestamp"},
            "headers": {"values": {"version": "cast(_commit_version as string)"}},
        },
        "ordering": ["id"],
    }


def _ingest(spark, doc: dict, run_id: str, **kw):
    return run(spark, IngestConfig.from_dict(doc), run_id=run_id, out=lambda *_: None, **kw)


def _in_runs(spark, table: str, root: Path, versions: list[int], reader: str = "delta-rs"):
    for version in versions:
        doc = _doc(table, root, reader=reader, version=version)
        result = _ingest(spark, doc, f"v{version}", tasks=1)
        assert result.status == "committed" and result.source_version == version
    return read_root(root)


@pytest.fixture(scope="module")
def one_run(spark, table, tmp_path_factory) -> list[tuple]:
    return _in_runs(spark, table, tmp_path_factory.mktemp("one") / "logs", [4])


def _latest_per_key(records: list[tuple]) -> dict[int, dict | None]:
    latest: dict[int, dict | None] = {}
    for _topic, _partition, _offset, key, value, _headers, _ts in records:  # offset order
        latest[int(key)] = None if value is None else json.loads(value)
    return latest


def _version(headers: list[dict]) -> int:
    (header,) = headers
    assert header["key"] == "version"
    return int(header["value"])


def test_latest_record_per_key_is_the_tables_row_or_a_tombstone(one_run, table):
    assert len(one_run) == RECORDS
    current = {r["id"]: r for r in DeltaTable(table).to_pyarrow_table().to_pylist()}
    latest = _latest_per_key(one_run)
    assert set(latest) == set(range(1, 9))
    for key, value in latest.items():
        if key not in current:
            assert value is None, key  # a tombstone, not a JSON object of nulls
            continue
        row = current[key]
        at = dt.datetime.fromisoformat(value.pop("updated_at").replace("Z", "+00:00"))
        assert value == {"id": key, "name": row["name"]} and at == row["updated_at"]
    assert {k for k, v in latest.items() if v is None} == {3, 5, 6}


def test_records_follow_commit_versions_with_their_commit_timestamps(one_run, table):
    commits = {h["version"]: h["timestamp"] for h in DeltaTable(table).history()}
    by_partition: dict[int, list[int]] = {}
    deletes = 0
    for _topic, partition, _offset, key, value, headers, ts in one_run:
        version = _version(headers)
        assert ts == commits[version]
        by_partition.setdefault(partition, []).append(version)
        deletes += value is None
        assert key is not None
    assert deletes == 2 + 1 + 5  # versions 2, 3 and 4 (the overwrite deletes all five rows)
    for versions in by_partition.values():
        assert versions == sorted(versions)


def test_five_runs_give_the_same_records(spark, table, tmp_path, one_run):
    assert _in_runs(spark, table, tmp_path / "logs", [0, 1, 2, 3, 4]) == one_run
    history = IngestHistory(tmp_path / "logs")
    assert [r["source_version"] for r in history.last_runs()] == ["4", "3", "2", "1", "0"]


def test_two_runs_the_second_killed_and_rerun_give_the_same_records(
    spark, table, tmp_path, one_run
):
    root = tmp_path / "logs"
    _ingest(spark, _doc(table, root, version=1), "first")
    before = snapshot(root)
    with pytest.raises(KafkaLogError, match="injected failure"):
        _ingest(spark, _doc(table, root), "second", fail_after_batches=1)
    assert snapshot(root) == before and IngestHistory(root).find_run("second") is None
    result = _ingest(spark, _doc(table, root), "second")
    assert result.records == RECORDS - 8 and "changes after version 1" in result.source
    assert read_root(root) == one_run
    assert staging_leftovers(root) == []
    # Nothing new: another run id and the same one again are no-ops.
    assert _ingest(spark, _doc(table, root), "third").status == "no-op"
    assert _ingest(spark, _doc(table, root), "second").status == "no-op"
    assert read_root(root) == one_run


def test_since_version_skips_ahead_but_never_back(spark, table, tmp_path):
    root = tmp_path / "logs"
    doc = _doc(table, root, since_version=2, version=3)
    doc["mapping"]["value"]["columns"] = ["*"]  # the table's columns, not Delta's change columns
    first = _ingest(spark, doc, "a")
    assert first.records == 4 and "changes after version 2" in first.source
    values = [json.loads(r[4]) for r in read_root(root) if r[4] is not None]
    assert len(values) == 3 and all(set(v) == {"id", "name", "updated_at"} for v in values)
    with pytest.raises(ConfigError, match=r"since_version=1: the changes up to version 3 .*"):
        _ingest(spark, _doc(table, root, since_version=1), "b")


def _rekeyed_table(path: str) -> str:
    """Keys k01-k10 (v0); v1: `UPDATE ... SET id = 'k99' WHERE id = 'k01'`; v2: a MERGE that moves
    k02 to k98 and k05 to k02 (k02's old row gone, its key kept by k05's row: no tombstone)."""
    rows = pa.table(
        {
            "id": [f"k{i:02d}" for i in range(1, 11)],
            "name": [f"n{i}" for i in range(1, 11)],
            "updated_at": [T0] * 10,
        },
        schema=pa.schema([("id", pa.string()), *list(SCHEMA)[1:]]),
    )
    write_deltalake(path, rows, configuration=FEED)
    DeltaTable(path).update(updates={"id": "'k99'"}, predicate="id = 'k01'")  # 1
    moves = pa.table({"old": ["k02", "k05"], "new": ["k98", "k02"]})
    (  # 2
        DeltaTable(path)
        .merge(source=moves, predicate="t.id = s.old", source_alias="s", target_alias="t")
        .when_matched_update(updates={"id": "s.new"})
        .execute()
    )
    return path


@pytest.fixture(scope="module")
def rekeyed(tmp_path_factory) -> str:
    return _rekeyed_table(str(tmp_path_factory.mktemp("rekeyed") / "t"))


def assert_live_keys_are_the_tables_rows(records: list[tuple], table: str) -> None:
    """After compaction the topic holds each key's latest record: the live ones must be exactly
    the table's rows, the keys a commit moved away tombstones."""
    latest: dict[str, dict | None] = {}
    for _topic, _partition, _offset, key, value, _headers, _ts in records:  # offset order
        latest[key.decode()] = None if value is None else json.loads(value)
    rows = {r["id"]: r["name"] for r in DeltaTable(table).to_pyarrow_table().to_pylist()}
    live = {k: v["name"] for k, v in latest.items() if v is not None}
    assert live == rows and len(live) == 10
    assert {k for k, v in latest.items() if v is None} == {"k01", "k05"}


def test_a_changed_key_leaves_a_tombstone_for_the_old_key(spark, rekeyed, tmp_path):
    root = tmp_path / "logs"
    result = _ingest(spark, _doc(rekeyed, root), "all")
    assert result.status == "committed" and result.records == 10 + 1 + 1 + 2 + 1
    assert_live_keys_are_the_tables_rows(read_root(root), rekeyed)
    # one run per version: the same records
    assert _in_runs(spark, rekeyed, tmp_path / "per-version", [0, 1, 2]) == read_root(root)


def test_a_range_without_the_feed_is_refused_naming_the_property(spark, tmp_path):
    path = str(tmp_path / "late")
    write_deltalake(path, _rows([(1, "a"), (2, "b")], 0))  # 0: no feed
    DeltaTable(path).alter.set_table_properties(FEED)  # 1: the feed from here on
    DeltaTable(path).delete("id = 2")  # 2
    root = tmp_path / "logs"
    with pytest.raises(ConfigError) as info:
        _ingest(spark, _doc(path, root), "r1")
    message = str(info.value)
    assert "version 0" in message and "delta.enableChangeDataFeed = true" in message
    assert "\n" not in message and not root.exists()  # a refused first run leaves nothing
    result = _ingest(spark, _doc(path, root, since_version=0), "r1")
    assert [(r[3], r[4]) for r in read_root(root)] == [(b"2", None)]
    assert result.records == 1


def test_a_keyless_topic_refuses_deletes(spark, table, tmp_path):
    doc = _doc(table, tmp_path / "logs", version=2)
    doc["topics"][TOPIC]["config"] = {}
    del doc["mapping"]["key"]
    with pytest.raises(KafkaLogError, match="a delete without a key") as info:
        _ingest(spark, doc, "keyless")
    assert "\n" not in str(info.value)


def test_config_rules():
    doc = _doc("t", Path("/tmp/x"))
    assert IngestConfig.from_dict(doc).ordering[0] == "_commit_version"
    with pytest.raises(ConfigError, match="write_mode=direct .* source.changes=cdf"):
        IngestConfig.from_dict({**doc, "output": {"root": "/tmp/x", "write_mode": "direct"}})
    with pytest.raises(ConfigError, match=r"source.changes: the change data feed applies only"):
        IngestConfig.from_dict(
            {**doc, "source": {"format": "parquet", "path": "p", "changes": "cdf"}}
        )
    with pytest.raises(ConfigError, match=r"source.changes='rows' is invalid"):
        IngestConfig.from_dict({**doc, "source": {**doc["source"], "changes": "rows"}})


def _vacuumed_table(path: str) -> str:
    """Versions 0-3 (create, update, delete, append), then a VACUUM with no retention: version
    0's data file (its inserts) goes, and the change files of versions 1 and 2 are deleted too
    (delta-rs's vacuum keeps _change_data)."""
    write_deltalake(path, _rows([(1, "a"), (2, "b"), (3, "c")], 0), configuration=FEED)
    DeltaTable(path).update(new_values={"name": "x"}, predicate="id = 1")  # 1
    DeltaTable(path).delete("id = 2")  # 2
    write_deltalake(path, _rows([(4, "d")], 3), mode="append")  # 3
    DeltaTable(path).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    for file in (Path(path) / "_change_data").iterdir():
        file.unlink()
    return path


def assert_vacuumed_range_refused(message: str, table: str) -> None:
    latest = DeltaTable(table).version()  # the vacuum commits versions of its own
    assert "\n" not in message and "version(s) 0-2 of Delta table" in message
    assert f"--version {latest}" in message and f"--since-version {latest}" in message


def test_vacuumed_change_files_are_one_line_naming_the_versions(spark, tmp_path):
    path = _vacuumed_table(str(tmp_path / "t"))
    root = tmp_path / "logs"
    with pytest.raises(ConfigError) as info:
        _ingest(spark, _doc(path, root), "r1")
    assert_vacuumed_range_refused(str(info.value), path)
    assert not root.exists()  # a refused first run leaves nothing: no log dir, no history
    # the way out: the changes after the versions whose files are gone read fine
    result = _ingest(spark, _doc(path, root, since_version=2), "r2")
    assert result.status == "committed" and result.records == 1


# ---------------------------------------------------------------------------------------------
# Spark's Delta reader (`delta_reader: spark`): the same cases, in a Delta-enabled driver


@pytest.fixture(scope="module")
def spark_reader(table, rekeyed, tmp_path_factory) -> dict:
    """The runs through Spark's Delta reader, all in one driver (tests/jobs/delta_spark_driver):
    the five-version table in runs up to versions 1 and 4, the re-keyed table, the vacuumed
    table (refused, then after version 2)."""
    work = tmp_path_factory.mktemp("spark-reader")
    vacuumed = _vacuumed_table(str(work / "vacuumed"))
    roots = {name: work / name / "logs" for name in ("five", "rekeyed", "vacuumed")}
    runs = [
        {"doc": _doc(table, roots["five"], reader="spark", version=1), "run_id": "v1", "tasks": 1},
        {"doc": _doc(table, roots["five"], reader="spark", version=4), "run_id": "v4", "tasks": 1},
        {"doc": _doc(rekeyed, roots["rekeyed"], reader="spark"), "run_id": "all"},
        {"doc": _doc(vacuumed, roots["vacuumed"], reader="spark"), "run_id": "r1"},
        {"doc": _doc(vacuumed, roots["vacuumed"], reader="spark", since_version=2), "run_id": "r2"},
    ]
    results = delta_spark_driver.run_all(runs, work)
    return {"results": results, "roots": roots, "vacuumed": vacuumed}


def test_spark_delta_source_gives_the_same_records(spark_reader, one_run):
    v1, v4 = spark_reader["results"][:2]
    assert (v1["source_version"], v4["source_version"]) == (1, 4), (v1, v4)
    # `_commit_timestamp` is the commit's time in both, but Spark's reader takes the commit
    # file's modification time and delta-rs the commitInfo's timestamp: milliseconds apart
    got = read_root(spark_reader["roots"]["five"])
    assert [r[:6] for r in got] == [r[:6] for r in one_run]


def test_spark_delta_source_a_changed_key_leaves_a_tombstone(spark_reader, rekeyed):
    result = spark_reader["results"][2]
    assert result["status"] == "committed" and result["records"] == 15, result
    assert_live_keys_are_the_tables_rows(read_root(spark_reader["roots"]["rekeyed"]), rekeyed)


def test_spark_delta_source_vacuumed_change_files_are_one_line(spark_reader):
    refused, after = spark_reader["results"][3:]
    assert "error" in refused, refused
    assert_vacuumed_range_refused(refused["error"], spark_reader["vacuumed"])
    assert after["status"] == "committed" and after["records"] == 1, after
