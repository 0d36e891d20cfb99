"""`kafka-dump-log.sh` (DumpLogSegments) compatible dumps of segment files (KAFKA_LOG_FACTS.md §12).

Why it is shaped this way: every file kind has one generator that walks the file and yields
*events* (plain dicts with a `kind`). One renderer turns an event into the exact line Kafka
prints; `--json` serializes the same event as one JSON object per line instead. So the text and
JSON forms cannot drift apart, and the walkers never think about formatting.

What goes where, as in Kafka:

- stdout: `Dumping <file>`, then the file's lines.
- stderr, after *all* files: offset-index mismatches, then time-index problems (timestamp
  mismatches, out-of-order timestamps, offsets not found), then non-consecutive record offsets.
  Kafka keeps the index mismatches and the non-consecutive pairs in a Scala `List` it prepends
  to, so they come out newest first; the time-index lists come out in file order. Both are
  reproduced. Across several files Kafka iterates a hash map; we keep the order files were given.
- stderr, at once: `Ignoring unknown file <file>` and, where Kafka would die with a stack trace
  (missing file, garbage where a batch should start, an index entry pointing past the log), one
  `kafkalog: error: ...` line. The dump then goes on with the next file and the run exits 1.

`--json` writes everything, errors included (`"kind": "error"`), to stdout as JSON Lines; see
`DumpOptions.json` for the record key/value encoding.

Large segments are memory-mapped and walked batch by batch; records are decoded in bounded
runs of batches. The package exports the API; its modules, one job each:

- `run.py`: `dump_files` / `dump_file_events`: the walker per suffix, stdout/stderr, exit status.
- `options.py`: `DumpOptions`. `report.py`: `DumpReport`, error events, the one-line failures.
- `log_file.py`: the .log (and KRaft .checkpoint) walker. `events.py`: batch and record events.
- `indexes.py`: .index / .timeindex checked against the .log, .txnindex.
- `snapshot.py`: producer-state .snapshot files.
- `render.py`: events -> Kafka's text lines or JSON Lines.
The command line (`kafkalog dump-log`) is in tools/cli.py.
"""

from __future__ import annotations

from kafkalog_core.tools.dump_log.indexes import (
    NO_TIMESTAMP,
    dump_offset_index,
    dump_time_index,
    dump_txn_index,
)
from kafkalog_core.tools.dump_log.log_file import dump_log
from kafkalog_core.tools.dump_log.options import DEFAULT_MAX_MESSAGE_SIZE, DumpOptions
from kafkalog_core.tools.dump_log.render import RECORD_INDENT
from kafkalog_core.tools.dump_log.report import DumpReport
from kafkalog_core.tools.dump_log.run import dump_file_events, dump_files
from kafkalog_core.tools.dump_log.snapshot import dump_producer_snapshot

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "NO_TIMESTAMP",
    "RECORD_INDENT",
    "DumpOptions",
    "DumpReport",
    "dump_file_events",
    "dump_files",
    "dump_log",
    "dump_offset_index",
    "dump_producer_snapshot",
    "dump_time_index",
    "dump_txn_index",
]
