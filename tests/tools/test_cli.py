"""The `kafkalog` console command: argument parsing, exit codes, one-line errors, --json."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafkalog_core.tools.cli import main

SEGMENT = "00000000000000000000"


def segment(tmp_path: Path) -> Path:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    builder.append(0, timestamp=1000, key=b"k", value=b"v", headers=[])
    log = tmp_path / f"{SEGMENT}.log"
    log.write_bytes(bytes(builder.build()))
    return log


def test_dump_log_exit_0_and_kafka_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = segment(tmp_path)
    assert main(["dump-log", "--files", str(log), "--print-data-log"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[:2] == [f"Dumping {log}", "Log starting offset: 0"]
    assert captured.out.splitlines()[-1].endswith("key: k payload: v")
    assert captured.err == ""


def test_comma_separated_files_are_dumped_in_order(
    fixtures_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = fixtures_dir / "segments" / "broker-2x-interval4096" / "test_topic_a-0"
    for suffix in (".log", ".index"):
        shutil.copy(source / f"{SEGMENT}{suffix}", tmp_path / f"{SEGMENT}{suffix}")
    files = [str(tmp_path / f"{SEGMENT}.index"), str(tmp_path / f"{SEGMENT}.log")]
    assert main(["dump-log", "--files", ",".join(files), "--max-bytes", "5000"]) == 0
    dumping = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Dumping ")]
    assert dumping == [f"Dumping {f}" for f in files]


def test_missing_file_is_one_clear_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / f"{SEGMENT}.log"
    assert main(["dump-log", "--files", str(missing)]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"kafkalog: error: {missing}: No such file or directory\n"
    assert captured.out == f"Dumping {missing}\n"


def test_corrupt_segment_never_prints_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / f"{SEGMENT}.log"
    log.write_bytes(b"\x00" * 100)
    assert main(["dump-log", "--files", str(log), "--deep-iteration"]) == 1
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1 and "Traceback" not in captured.err
    assert captured.out.splitlines()[-1] == f"Found 100 invalid bytes at the end of {SEGMENT}.log"


def test_json_output_parses_as_json_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = segment(tmp_path)
    assert main(["dump-log", "--files", str(log), "--deep-iteration", "--json"]) == 0
    objects = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["kind"] for o in objects] == ["dumping", "log_start", "batch", "record"]
    assert objects[2]["is_valid"] is True and objects[3]["offset"] == 0
    assert "key" not in objects[3]  # data only with --print-data-log, as in the text form


def test_usage_errors_return_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dump-log"]) == 2  # --files is required
    assert "--files" in capsys.readouterr().err
    assert main([]) == 2
    assert main(["dump-log", "--files", "x.log", "--max-bytes", "-1"]) == 2


def test_help_returns_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dump-log", "--help"]) == 0
    assert "--print-data-log" in capsys.readouterr().out


def test_console_entry_point_runs_as_a_module(tmp_path: Path) -> None:
    log = segment(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "kafkalog_core.tools.cli", "dump-log", "--files", str(log)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0
    assert done.stdout.splitlines()[2].startswith("baseOffset: 0 lastOffset: 0 count: 1 ")
