"""The dump-log run: every file given, dumped by the walker its suffix names, then the report.

`dump_file_events` chooses the walker (§12.2) and turns a failure into one `error` event;
`dump_files` writes each event as Kafka's text (render.py) or as JSON Lines, stdout and stderr
as DumpLogSegments splits them, and the end-of-run report last.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, TextIO

from kafkalog_core.tools.dump_log.indexes import dump_offset_index, dump_time_index, dump_txn_index
from kafkalog_core.tools.dump_log.log_file import dump_log
from kafkalog_core.tools.dump_log.options import DumpOptions
from kafkalog_core.tools.dump_log.render import render_text, to_json
from kafkalog_core.tools.dump_log.report import DumpReport, describe, error_event
from kafkalog_core.tools.dump_log.snapshot import dump_producer_snapshot


def dump_files(paths: list[str], options: DumpOptions, out: TextIO, err: TextIO) -> int:
    """Dump every file like DumpLogSegments; returns 0, or 1 if any file could not be dumped."""
    report = DumpReport()
    for path in paths:
        for event in dump_file_events(path, options, report):
            if options.json:
                out.write(to_json(event) + "\n")
            elif event["kind"] in ("error", "unknown_file"):
                err.write(render_text(event, options) + "\n")
            else:
                out.write(render_text(event, options) + "\n")
    out.flush()
    if options.json:
        for event in report.error_events():
            out.write(to_json(event) + "\n")
        out.flush()
    else:
        for line in report.text_lines():
            err.write(line + "\n")
    err.flush()
    return 1 if report.errors else 0


def dump_file_events(
    path: str, options: DumpOptions, report: DumpReport
) -> Iterator[dict[str, Any]]:
    """`Dumping <file>` and then the events of the file kind chosen by its suffix (§12.2).

    A KafkaLogError or OSError ends this file with one `error` event (and counts in `report`);
    problems Kafka reports at the end of the run are added to `report` instead.
    """
    yield {"kind": "dumping", "file": path}
    name = os.path.basename(path)
    suffix = name[name.rfind(".") :] if "." in name else ""
    walkers = {
        ".log": dump_log,
        ".checkpoint": dump_log,
        ".index": dump_offset_index,
        ".timeindex": dump_time_index,
        ".snapshot": dump_producer_snapshot,
        ".txnindex": dump_txn_index,
    }
    walker = walkers.get(suffix)
    if walker is None:
        yield {"kind": "unknown_file", "file": path}
        return
    try:
        if not os.path.isfile(path):  # Kafka dies with NoSuchFileException; we say it in a line
            raise FileNotFoundError(2, "No such file or directory", path)
        yield from walker(path, options, report)
    except Exception as error:  # noqa: BLE001 - one line per file, never a traceback
        report.errors += 1
        yield error_event(path, "exception", message=describe(path, error))
