"""The `kafkalog` console command: one argparse sub-command per tool.

Why a thin main: all behaviour lives in pure functions (`dump_log.dump_files`) that tests call
with string buffers; `main` only parses arguments and maps failures to exit codes. A
`KafkaLogError` (or an unreadable file) becomes one `kafkalog: error: ...` line on stderr and
exit status 1, never a traceback. argparse usage errors exit with status 2, as usual.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from kafkalog_core.errors import KafkaLogError
from kafkalog_core.log.checkpoints import topic_id_from_str
from kafkalog_core.log.segment.scan import DEFAULT_INDEX_INTERVAL_BYTES
from kafkalog_core.properties import read_properties
from kafkalog_core.record.batch import INT32_MAX
from kafkalog_core.tools.check_logdir import run_check_logdir
from kafkalog_core.tools.dump_log import DEFAULT_MAX_MESSAGE_SIZE, DumpOptions, dump_files
from kafkalog_core.tools.place import run_place

Handler = Callable[[argparse.Namespace, TextIO, TextIO], int]


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0 or value > INT32_MAX:
        raise argparse.ArgumentTypeError(f"must be between 0 and {INT32_MAX}: {value}")
    return value


def _add_dump_log(subcommands: argparse._SubParsersAction) -> None:
    parser = subcommands.add_parser(
        "dump-log",
        help="dump .log/.index/.timeindex/.txnindex/.snapshot files like kafka-dump-log.sh",
        description=(
            "Parse segment files and dump their contents, line for line like Kafka's "
            "kafka-dump-log.sh (DumpLogSegments); --json writes JSON Lines instead."
        ),
    )
    parser.add_argument(
        "--files",
        required=True,
        help="REQUIRED: the comma separated list of data and index log files to be dumped",
    )
    parser.add_argument(
        "--print-data-log",
        action="store_true",
        help="print the key and payload of each record (implies --deep-iteration)",
    )
    parser.add_argument(
        "--deep-iteration", action="store_true", help="print one line per record, not per batch"
    )
    parser.add_argument(
        "--verify-index-only",
        action="store_true",
        help="check index entries against the log without printing them",
    )
    parser.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="only run the index sanity check (Kafka's OffsetIndex/TimeIndex.sanityCheck)",
    )
    parser.add_argument(
        "--max-message-size",
        type=_non_negative_int,
        default=DEFAULT_MAX_MESSAGE_SIZE,
        metavar="SIZE",
        help=f"bytes read at each offset-index entry (default {DEFAULT_MAX_MESSAGE_SIZE})",
    )
    parser.add_argument(
        "--max-bytes",
        type=_non_negative_int,
        default=INT32_MAX,
        metavar="SIZE",
        help="read at most this many bytes of each .log (default: all)",
    )
    parser.add_argument(
        "--skip-record-metadata",
        action="store_true",
        help="omit the per-record metadata (offset, timestamp, sizes) from record lines",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line (batches, records, index entries, errors) on stdout",
    )
    parser.set_defaults(handler=_run_dump_log)


def _run_dump_log(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    files = [name for name in args.files.split(",") if name]
    if not files:
        raise KafkaLogError("--files names no file")
    options = DumpOptions(
        print_data_log=args.print_data_log,
        deep_iteration=args.deep_iteration,
        verify_index_only=args.verify_index_only,
        index_sanity_check=args.index_sanity_check,
        max_message_size=args.max_message_size,
        max_bytes=args.max_bytes,
        skip_record_metadata=args.skip_record_metadata,
        json=args.json,
    )
    return dump_files(files, options, out, err)


def _add_check_logdir(subcommands: argparse._SubParsersAction) -> None:
    parser = subcommands.add_parser(
        "check-logdir",
        help="validate a whole log dir the way a broker's startup would (read-only)",
        description=(
            "Check names, root checkpoints, meta.properties, partition.metadata (one topic id "
            "per topic), leader-epoch-checkpoint, segments and indexes of a log dir. One line "
            "per finding: 'refuse' (exit status 1: a broker would not load the dir), 'repair' "
            "(the broker fixes it at startup, maybe dropping data) or 'note'."
        ),
    )
    parser.add_argument("dir", metavar="DIR", help="the log dir (a broker's log.dirs entry)")
    parser.add_argument(
        "--index-interval-bytes",
        type=_non_negative_int,
        default=DEFAULT_INDEX_INTERVAL_BYTES,
        metavar="BYTES",
        help="the topics' index.interval.bytes, to compare indexes with what recovery builds "
        f"(default {DEFAULT_INDEX_INTERVAL_BYTES})",
    )
    parser.set_defaults(handler=_run_check_logdir)


def _run_check_logdir(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return run_check_logdir(args.dir, out, index_interval_bytes=args.index_interval_bytes)


def _add_place(subcommands: argparse._SubParsersAction) -> None:
    parser = subcommands.add_parser(
        "place",
        help="put ingested partitions into a stopped KRaft broker's log dir(s); a dry run "
        "unless --apply",
        description=(
            "Check the topics of OUTPUT against the cluster's metadata (the broker's "
            "__cluster_metadata-0: topic id, partition count, replicas, settings), then copy "
            "each partition dir into the broker's log dir, rename it into place and merge the "
            "root checkpoints (replication-offset, recovery-point, log-start-offset); "
            "check-logdir runs on the result. The broker must be stopped. Without --apply it "
            "only prints what it would do."
        ),
    )
    parser.add_argument("output", metavar="OUTPUT", help="kafkalog's output root (the ingest's)")
    parser.add_argument(
        "log_dirs", metavar="LOG_DIR", nargs="+", help="the stopped broker's log.dirs entries"
    )
    parser.add_argument(
        "--topic",
        action="append",
        required=True,
        dest="topics",
        metavar="NAME",
        help="a topic to place (repeatable)",
    )
    parser.add_argument(
        "--topic-id",
        action="append",
        default=[],
        metavar="[NAME=]ID",
        help="the id the topic must have in the cluster (kafka-topics.sh --describe shows it)",
    )
    parser.add_argument(
        "--topic-config",
        metavar="FILE",
        help="a .properties file of the settings the ingest used (Kafka names); a setting that "
        "differs from the cluster's is refused",
    )
    parser.add_argument(
        "--metadata-dir",
        metavar="DIR",
        help="the broker's metadata.log.dir, when it is not one of the LOG_DIRs",
    )
    parser.add_argument("--apply", action="store_true", help="place them (default: a dry run)")
    parser.set_defaults(handler=_run_place)


def _topic_ids(values: Sequence[str], topics: Sequence[str]) -> dict[str, uuid.UUID]:
    ids = {}
    for value in values:
        name, sep, text = value.rpartition("=")
        if not sep:
            if len(topics) != 1:
                raise KafkaLogError(f"--topic-id {value}: say which topic (NAME=ID)")
            name = topics[0]
        try:
            ids[name] = topic_id_from_str(text)
        except ValueError as error:
            raise KafkaLogError(f"--topic-id {value}: {error}") from None
    return ids


def _run_place(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    configs = None
    if args.topic_config:
        try:
            settings = read_properties(Path(args.topic_config))
        except ValueError as error:
            raise KafkaLogError(f"{args.topic_config}: {error}") from None
        configs = {topic: settings for topic in args.topics}
    return run_place(
        args.output,
        args.log_dirs,
        args.topics,
        out,
        apply=args.apply,
        topic_ids=_topic_ids(args.topic_id, args.topics),
        topic_configs=configs,
        metadata_dir=args.metadata_dir,
    )


def build_parser() -> argparse.ArgumentParser:
    """The `kafkalog` parser; each tool registers one sub-command here."""
    parser = argparse.ArgumentParser(
        prog="kafkalog", description="Tools for Apache Kafka's on-disk log format."
    )
    subcommands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_dump_log(subcommands)
    _add_check_logdir(subcommands)
    _add_place(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `kafkalog` console script; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help (0) or a usage error (2, message already printed)
        return exit_.code if isinstance(exit_.code, int) else 2
    out, err = sys.stdout, sys.stderr
    for stream in (out, err):
        # Record data is printed as decoded text; never die on a terminal that is not UTF-8.
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")
    handler: Handler = args.handler
    try:
        return handler(args, out, err)
    except BrokenPipeError:  # `kafkalog dump-log ... | head`
        return 1
    except (KafkaLogError, OSError) as error:
        err.write(f"kafkalog: error: {error}\n")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
