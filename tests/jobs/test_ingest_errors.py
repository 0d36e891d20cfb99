"""Bad inputs to the ingest job: one clear KafkaLogError line from `run`, exit 1 and one
`kafkalog: error: ...` line from `main`, nothing published; with a reject path, bad rows are
set aside with their reason and the good ones ingested."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jobs.ingest import main, run
from jobs.ingestion.config.ingest_config import IngestConfig
from kafkalog_core.errors import ConfigError, InvalidRecordError, KafkaLogError
from kafkalog_core.root.run_lock import RunLock, RunLockedError
from tests.jobs.ingest_helpers import (
    config_doc,
    expected_records,
    read_root,
    source_rows,
    write_parquet,
)

pytestmark = pytest.mark.spark

BAD_TOPIC = "bad topic!"


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> dict:
    """200 rows; row id 42 carries an invalid topic name in its topic column."""
    rows = source_rows(200)
    rows[42]["topic"] = BAD_TOPIC
    return {"rows": rows, "path": write_parquet(tmp_path_factory.mktemp("bad") / "src", rows)}


def _topics(**config) -> dict:
    return {"events": {"partitions": 2, "config": config}}


# name -> (doc changes, expected error type, phrases the one line must contain)
CASES = {
    "missing-path": (
        {"source": {"format": "parquet", "path": "{tmp}/nowhere"}},
        ConfigError,
        ["source.path=", "nowhere", "path does not exist"],
    ),
    "missing-table": (
        {"source": {"format": "table", "table": "no_such_db_table"}},
        ConfigError,
        ["no_such_db_table", "no such table"],
    ),
    "missing-column": (
        {"mapping": {"key": {"column": "customer_id"}}},
        ConfigError,
        ["mapping.key.column='customer_id'", "column not found", "available: id"],
    ),
    "null-key-compact": (
        {
            "topics": _topics(**{"cleanup.policy": "compact"}),
            "mapping": {"key": {"expr": "CASE WHEN id = 17 THEN NULL ELSE user END"}},
        },
        InvalidRecordError,
        ["null key on compacted topic 'events'", "cleanup.policy=compact", "source row id"],
    ),
    "too-large": (
        {"topics": _topics(**{"max.message.bytes": 300})},
        InvalidRecordError,
        ["exceeds max.message.bytes=300", "topic 'events'"],
    ),
    "too-large-compressed": (  # checked after compression, by the encoder in the write pass
        {"topics": _topics(**{"max.message.bytes": 300, "compression.type": "gzip"})},
        KafkaLogError,
        ["events-", "larger than max_message_bytes=300 (max.message.bytes)"],
    ),
    "partition-out-of-range": (
        {"mapping": {"partition": {"column": "part"}}},
        InvalidRecordError,
        ["partition 2 is out of range for topic 'events' with 2 partitions"],
    ),
    "negative-timestamp": (
        {"mapping": {"timestamp": {"expr": "id - 100"}}},
        InvalidRecordError,
        ["negative timestamp -100"],
    ),
    "invalid-topic": (
        {"mapping": {"topic": {"column": "topic"}}},
        InvalidRecordError,
        [repr(BAD_TOPIC), "topic="],
    ),
    "bad-config-value": (
        {"topics": _topics(**{"segment.bytes": 10})},
        ConfigError,
        ["topics.events.config", "segment.bytes", "10"],
    ),
}


def _doc(source, tmp_path: Path, changes: dict) -> dict:
    doc = config_doc(source["path"], tmp_path / "logs", topics=_topics())
    for key, value in changes.items():
        if key == "mapping":
            doc["mapping"].update(value)
        elif key == "source":
            doc["source"] = {k: v.format(tmp=tmp_path) for k, v in value.items()}
        else:
            doc[key] = value
    return doc


def _one_line(text: str) -> str:
    assert text and "\n" not in text.strip(), f"not one line: {text!r}"
    assert "Traceback" not in text and "Py4J" not in text and "org.apache.spark" not in text
    return text.strip()


def _run_fails_with_one_line(spark, doc: dict, error_type: type, phrases: list[str]) -> None:
    with pytest.raises(KafkaLogError) as info:
        run(spark, IngestConfig.from_dict(doc), run_id="bad-1", out=lambda _: None)
    assert isinstance(info.value, error_type), repr(info.value)
    message = _one_line(str(info.value))
    for phrase in phrases:
        assert phrase in message, (phrase, message)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_gives_one_clear_error(spark, source, tmp_path, capsys, case):
    changes, error_type, phrases = CASES[case]
    doc = _doc(source, tmp_path, changes)
    root = tmp_path / "logs"

    # run(): the config is validated first (bad config values never reach Spark).
    _run_fails_with_one_line(spark, doc, error_type, phrases)
    assert not root.exists() or not any(root.iterdir()), "nothing may be published"

    # main(): exit status 1, exactly one `kafkalog: error:` line on stderr.
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    assert main(["--config", str(path), "--run-id", "bad-2"]) == 1
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert line.startswith("kafkalog: error: "), line
    for phrase in phrases:
        assert phrase in line, (phrase, line)
    assert not root.exists() or not any(root.iterdir())


@pytest.mark.parametrize(
    "case", [c for c, (_, kind, _) in CASES.items() if kind is InvalidRecordError]
)
def test_bad_record_in_the_direct_mode_is_the_same_one_line(spark, source, tmp_path, case):
    """The direct mode's write tasks partition and check the rows themselves (no Spark stage 2):
    the same error line, nothing published."""
    changes, error_type, phrases = CASES[case]
    doc = _doc(source, tmp_path, changes)
    doc["ordering"] = "source"
    doc["output"]["write_mode"] = "direct"
    doc["source"]["task_reader"] = "spark"
    _run_fails_with_one_line(spark, doc, error_type, phrases)
    root = tmp_path / "logs"
    assert not root.exists() or not any(root.iterdir()), "nothing may be published"


def test_bad_config_value_names_the_setting_in_the_config_loader():
    doc = config_doc("/unused", Path("/unused"), topics=_topics(**{"segment.bytes": 10}))
    with pytest.raises(ConfigError, match=r"segment\.bytes"):
        IngestConfig.from_dict(doc)


def test_reject_path_sets_bad_rows_aside_and_ingests_the_good(spark, source, tmp_path):
    """Invalid topic (row 42), negative timestamps (ids < 5) and partition out of range are
    rejected with their reasons; every other row is ingested exactly as without them."""
    rejects = tmp_path / "rejects"
    doc = _doc(
        source,
        tmp_path,
        {
            "mapping": {
                "topic": {"column": "topic"},
                "timestamp": {
                    "expr": "CASE WHEN id < 5 THEN -1000 - id ELSE unix_millis(event_time) END"
                },
            }
        },
    )
    doc["output"]["reject_path"] = str(rejects)
    lines: list[str] = []
    result = run(spark, IngestConfig.from_dict(doc), run_id="rej-1", out=lines.append)
    bad_ids = {0, 1, 2, 3, 4, 42}
    assert result.status == "committed"
    assert result.rejected == len(bad_ids)
    assert result.records == len(source["rows"]) - len(bad_ids)
    assert f"kafkalog: {len(bad_ids)} invalid rows written to {rejects}" in lines

    rows = spark.read.parquet(str(rejects / "run_id=rej-1")).collect()
    by_id = {r["source_row_id"]: r for r in rows}
    assert len(by_id) == len(bad_ids)
    reasons = sorted(r["error"] for r in rows)
    assert sum("negative timestamp" in r for r in reasons) == 5
    assert sum(repr(BAD_TOPIC) in r for r in reasons) == 1
    assert all("record: topic=" in r for r in reasons)

    good = [r for r in source["rows"] if r["id"] not in bad_ids]
    assert read_root(tmp_path / "logs") == expected_records(good, {"events": 2})


def test_a_held_lock_refuses_the_run(spark, source, tmp_path):
    doc = _doc(source, tmp_path, {})
    root = tmp_path / "logs"
    root.mkdir()
    with RunLock(root, "someone-else"), pytest.raises(RunLockedError) as info:
        run(spark, IngestConfig.from_dict(doc), run_id="second", out=lambda _: None)
    message = _one_line(str(info.value))
    assert f"output root {root} is locked by run someone-else" in message
    assert not any(root.iterdir())
    # Released: the same run goes through.
    result = run(spark, IngestConfig.from_dict(doc), run_id="second", out=lambda _: None)
    assert result.status == "committed" and result.records == len(source["rows"])
