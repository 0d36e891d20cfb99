"""dump-log's whole output on real fixtures, byte for byte, against golden files.

Why: test_dump_log.py holds each line kind to Kafka's DumpLogSegments format; this file pins
the complete output (stdout, stderr, exit status) of whole runs, so a refactor of the dumpers
or the renderer cannot change one byte unnoticed. The golden files were written by the
single-module dump_log.py before it was split (see git history); regenerate them only for an
intended output change: `KAFKALOG_REGEN_GOLDEN=1 pytest tests/tools/test_dump_log_golden.py`.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from kafkalog_core.tools.dump_log import DumpOptions, dump_files
from tests.tools.test_dump_log import BATCH_A_HEX, BATCH_C_HEX  # §1.7 batch A, COMMIT marker C

GOLDEN = Path(__file__).parent / "golden"
BROKER = "segments/broker-2x-interval4096/test_topic_a-0"
CONFIGS = "logdirs/confluent-5.1.2/docker-connect-configs-0"
OFFSETS = "logdirs/confluent-5.1.2/__consumer_offsets-29"
MIXED = "batches/kafkajs_fetch_v4_mixed_formats.p0.records.bin"

MIXED_V2_AT = 120499  # the first v2 batch of MIXED, after 1611 v1 messages of 75 bytes

# files made by _built: (kind, the name in the run's dir)
BUILT_FILES = [
    ("mixed", "00000000000000000000.log"),
    ("torn", "00000000000000000005.log"),
    ("marker", "00000000000000000010.log"),
    ("txnindex", "00000000000000000000.txnindex"),
    ("snapshot", "00000000000000000042.snapshot"),
    ("badsnapshot", "00000000000000000043.snapshot"),
    ("index", "00000000000000000007.index"),  # no .log next to it
    ("unknown", "00000000000000000000.unknown"),
]

# case -> ([(fixture path, or a kind of _built; the name in the run's dir)], options)
CASES: dict[str, tuple[list[tuple[str, str]], dict[str, object]]] = {
    "broker_segment_deep": (
        [
            (f"{BROKER}/00000000000000000000.log", "00000000000000000000.log"),
            (f"{BROKER}/00000000000000000000.index", "00000000000000000000.index"),
            (f"{BROKER}/00000000000000000000.timeindex", "00000000000000000000.timeindex"),
            (f"{BROKER}/00000000000000000362.snapshot", "00000000000000000362.snapshot"),
        ],
        {"print_data_log": True},
    ),
    "compacted_shallow_and_snapshots": (
        [
            (f"{CONFIGS}/00000000000000000000.log", "00000000000000000000.log"),
            (f"{CONFIGS}/00000000000000000049.snapshot", "00000000000000000049.snapshot"),
            (f"{OFFSETS}/00000000000000000000.log", "00000000000000000001.log"),
        ],
        {},
    ),
    "consumer_offsets_skip_metadata": (
        [(f"{OFFSETS}/00000000000000000000.log", "00000000000000000000.log")],
        {"print_data_log": True, "skip_record_metadata": True},
    ),
    "built_files_text": (
        BUILT_FILES,
        {"print_data_log": True},
    ),
    "built_files_json": (
        BUILT_FILES,
        {"print_data_log": True, "json": True},
    ),
}


def _built(fixtures_dir: Path, kind: str) -> bytes:
    """Small files made from fixture bytes: magic 1 and 2 in one log, a torn tail, ..."""
    if kind in ("mixed", "torn"):
        data = (fixtures_dir / MIXED).read_bytes()
        v2_size = 12 + struct.unpack_from(">i", data, MIXED_V2_AT + 8)[0]
        mixed = data[: 5 * 75] + data[MIXED_V2_AT : MIXED_V2_AT + v2_size]
        return mixed if kind == "mixed" else mixed[:-7]
    if kind == "marker":
        return bytes.fromhex(BATCH_A_HEX + BATCH_C_HEX)
    if kind == "txnindex":
        entry = struct.Struct(">hqqqq")  # version, producerId, first, last, lastStable
        return entry.pack(0, 7, 3, 9, 2) + entry.pack(0, 8, 10, 12, 11) + b"\0"
    if kind == "snapshot":  # version 1, crc, count, then per producer (see test_dump_log.py)
        entries = [(5, 1, 9, 41, 4, 1700, 3, 37), (6, 0, -1, -1, 0, 1800, -1, -1)]
        body = struct.pack(">i", len(entries)) + b"".join(
            struct.pack(">qhiqiqiq", *e) for e in entries
        )
        return struct.pack(">hI", 1, crc32c(body)) + body
    if kind == "badsnapshot":
        return b"\0\1not a snapshot"
    if kind == "index":
        return struct.pack(">ii", 0, 0)
    return b"?"


def _build(fixtures_dir: Path, case_dir: Path, files: list[tuple[str, str]]) -> list[str]:
    paths = []
    for source, name in files:
        target = case_dir / name
        if "/" in source:
            shutil.copyfile(fixtures_dir / source, target)
        else:
            target.write_bytes(_built(fixtures_dir, source))
        paths.append(str(target))
    return paths


def _run(paths: list[str], options: dict[str, object], case_dir: Path) -> str:
    out, err = io.StringIO(), io.StringIO()
    code = dump_files(paths, DumpOptions(**options), out, err)  # type: ignore[arg-type]
    text = f"== exit {code}\n== stdout\n{out.getvalue()}== stderr\n{err.getvalue()}"
    return text.replace(str(case_dir), "<dir>")


@pytest.mark.parametrize("case", sorted(CASES))
def test_dump_log_output_is_the_golden_output(
    case: str, fixtures_dir: Path, tmp_path: Path
) -> None:
    files, options = CASES[case]
    case_dir = tmp_path / case
    case_dir.mkdir()
    text = _run(_build(fixtures_dir, case_dir, files), options, case_dir)
    golden = GOLDEN / f"dump_log_{case}.txt"
    if os.environ.get("KAFKALOG_REGEN_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(text, encoding="utf-8", newline="")
    expected = golden.read_bytes().decode("utf-8")
    assert text == expected


def test_golden_files_cover_every_line_kind() -> None:
    """The goldens are worth pinning only if they hold every kind of output line."""
    text = "".join(p.read_text(encoding="utf-8") for p in sorted(GOLDEN.glob("dump_log_*.txt")))
    for pattern in (
        r"^Log starting offset: \d+$",
        r"^baseOffset: .* isvalid: true$",  # a v2 batch
        r"^offset: \d+ position: \d+ CreateTime: ",  # a magic 1 entry
        r"^\| offset: .* headerKeys: \[.*\] key: .* payload: ",
        r"^\| offset: .* isValid: true crc: \d+\}",
        r"^offset: \d+ position: \d+$",  # an .index entry
        r"^timestamp: \d+ offset: \d+$",  # a .timeindex entry
        r"^producerId: \d+ producerEpoch: ",  # a .snapshot entry
        r"^version: 0 producerId: .* lastStableOffset: \d+$",
        r"endTxnMarker: COMMIT coordinatorEpoch: ",
        r"^The following indexed offsets are not found in the log\.$",
        r"^Non-consecutive offsets in ",
        r"^Found \d+ invalid bytes at the end of ",
        r"^Ignoring unknown file ",
        r"^kafkalog: error: ",
        r'^\{"kind":"record".*"key_encoding":"utf-8"',
        r'^\{"kind":"error"',
    ):
        assert re.search(pattern, text, re.MULTILINE), pattern
