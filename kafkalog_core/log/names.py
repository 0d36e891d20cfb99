"""File and directory names of a Kafka log dir, and topic-name validation (§2).

Kafka finds everything by name: a segment's base offset is its file name, a partition is its
directory name, and a pending delete/move/stray replica is a directory suffix. Getting one
character wrong makes a broker ignore (or delete) the data, so every name is built here.

- Segment files: base offset as 20-digit zero-padded decimal + extension, e.g.
  `00000000000000368769.log`; temporary suffixes (`.deleted`, `.cleaned`, `.swap`) are appended
  to the full name.
- Partition dirs: `<topic>-<partition>`, parsed by splitting at the LAST '-' (topics may contain
  '-' and '.'); `<topic>-<p>.<uuid>-delete|-future|-stray` for the special states, where
  `-delete` and `-stray` names have the topic truncated to keep the whole name <= 255 chars.
- Topic names: `Topic.validate` rules, which also guarantee a topic can never name a path outside
  its log dir (no '/', no '..' alone, only [a-zA-Z0-9._-]).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Final, NamedTuple

from kafkalog_core.errors import InvalidTopicError, LogDirError

__all__ = [
    "CLEANED_FILE_SUFFIX",
    "DELETED_FILE_SUFFIX",
    "DELETE_DIR_SUFFIX",
    "FUTURE_DIR_SUFFIX",
    "INDEX_FILE_SUFFIX",
    "INDEX_SUFFIXES",
    "KRAFT_CHECKPOINT_DELETED",
    "LOG_FILE_SUFFIX",
    "MAX_DIR_NAME_LENGTH",
    "MAX_TOPIC_NAME_LENGTH",
    "PRODUCER_SNAPSHOT_FILE_SUFFIX",
    "STRAY_DIR_SUFFIX",
    "SWAP_FILE_SUFFIX",
    "TIME_INDEX_FILE_SUFFIX",
    "TXN_INDEX_FILE_SUFFIX",
    "PartitionDirName",
    "SegmentFileName",
    "check_quarantine_suffix",
    "delete_dir_name",
    "future_dir_name",
    "index_file_name",
    "log_file_name",
    "offset_from_file_name",
    "parse_partition_dir",
    "parse_partition_dir_name",
    "parse_segment_file_name",
    "partition_dir_name",
    "producer_snapshot_file_name",
    "quarantine_file_name",
    "quarantine_files",
    "segment_log_files",
    "stray_dir_name",
    "time_index_file_name",
    "txn_index_file_name",
    "unfinished_write_of",
    "validate_topic_name",
]

# --- segment file extensions and temporary suffixes (LogFileUtils) -----------------------------
LOG_FILE_SUFFIX: Final = ".log"
INDEX_FILE_SUFFIX: Final = ".index"
TIME_INDEX_FILE_SUFFIX: Final = ".timeindex"
TXN_INDEX_FILE_SUFFIX: Final = ".txnindex"
PRODUCER_SNAPSHOT_FILE_SUFFIX: Final = ".snapshot"
SEGMENT_FILE_SUFFIXES: Final = (
    LOG_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
)
INDEX_SUFFIXES: Final = (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)
# a KRaft metadata snapshot being deleted: not a segment file, left alone by segment cleanup
KRAFT_CHECKPOINT_DELETED: Final = re.compile(r".*\.checkpoint\.deleted$")
DELETED_FILE_SUFFIX: Final = ".deleted"  # renamed before an asynchronous delete
CLEANED_FILE_SUFFIX: Final = ".cleaned"  # cleaner / split output still being written
SWAP_FILE_SUFFIX: Final = ".swap"  # complete replacement waiting to swap in
TEMPORARY_FILE_SUFFIXES: Final = (DELETED_FILE_SUFFIX, CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
TMP_FILE_SUFFIX: Final = ".tmp"  # checkpoint files while being written
# kafkalog's own, not Kafka's: a corrupt tail (or a whole segment after it) that rebuild-index
# moved aside for forensics, `<segment>.log.quarantine` or `<segment>.log.<n>.quarantine`. No
# loader reads it (it ends in no segment extension); retention removes it after retention.ms.
# It is the default of both sides: rebuild's `quarantine_suffix` and retention's `suffix`.
# `<quarantine name>.tmp` is the copy being written; a killed rebuild can leave one behind.
QUARANTINE_FILE_SUFFIX: Final = ".quarantine"
_QUARANTINE_SUFFIX_SHAPE: Final = re.compile(r"\.[A-Za-z][A-Za-z0-9_-]*")

# --- partition directory suffixes (LocalLog) ---------------------------------------------------
DELETE_DIR_SUFFIX: Final = "-delete"
FUTURE_DIR_SUFFIX: Final = "-future"
STRAY_DIR_SUFFIX: Final = "-stray"
DIR_SUFFIXES: Final = (DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)
MAX_DIR_NAME_LENGTH: Final = 255  # file-system name limit the delete/stray names are capped to

# --- other files of a log dir / partition dir (§2, §9) ----------------------------------------
RECOVERY_POINT_CHECKPOINT_FILE: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE: Final = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE: Final = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT_FILE: Final = "cleaner-offset-checkpoint"
META_PROPERTIES_FILE: Final = "meta.properties"
LOCK_FILE: Final = ".lock"
CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
LEADER_EPOCH_CHECKPOINT_FILE: Final = "leader-epoch-checkpoint"
PARTITION_METADATA_FILE: Final = "partition.metadata"
REMOTE_LOG_INDEX_CACHE_DIR: Final = "remote-log-index-cache"  # skipped when loading
CLUSTER_METADATA_TOPIC: Final = "__cluster_metadata"  # its dir is not a normal log

# --- topics (Topic.java) ----------------------------------------------------------------------
MAX_TOPIC_NAME_LENGTH: Final = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")

OFFSET_DIGITS: Final = 20
_INT32_MAX: Final = 2**31 - 1
_INT64_MAX: Final = 2**63 - 1
_DIGITS = re.compile(r"[0-9]+")
# LocalLog's DeleteDirPattern & co.: ^(\S+)-(\S+)\.(\S+)<suffix>$
_DIR_PATTERNS: Final = {
    suffix: re.compile(r"(\S+)-(\S+)\.(\S+)" + re.escape(suffix)) for suffix in DIR_SUFFIXES
}


# ---------------------------------------------------------------------------------------------
# segment files
# ---------------------------------------------------------------------------------------------
def _offset_prefix(base_offset: int) -> str:
    if isinstance(base_offset, bool) or not isinstance(base_offset, int):
        raise LogDirError(f"base offset {base_offset!r} is not an int")
    if not 0 <= base_offset <= _INT64_MAX:
        raise LogDirError(f"base offset {base_offset} is outside [0, 2^63-1]")
    return f"{base_offset:0{OFFSET_DIGITS}d}"


def log_file_name(base_offset: int, suffix: str = "") -> str:
    """`00000000000000368769.log` (+ suffix such as `.deleted`)."""
    return _offset_prefix(base_offset) + LOG_FILE_SUFFIX + suffix


def index_file_name(base_offset: int, suffix: str = "") -> str:
    """`<20 digits>.index` (+ suffix)."""
    return _offset_prefix(base_offset) + INDEX_FILE_SUFFIX + suffix


def time_index_file_name(base_offset: int, suffix: str = "") -> str:
    """`<20 digits>.timeindex` (+ suffix)."""
    return _offset_prefix(base_offset) + TIME_INDEX_FILE_SUFFIX + suffix


def txn_index_file_name(base_offset: int, suffix: str = "") -> str:
    """`<20 digits>.txnindex` (+ suffix); usually absent until an aborted txn is indexed."""
    return _offset_prefix(base_offset) + TXN_INDEX_FILE_SUFFIX + suffix


def producer_snapshot_file_name(snapshot_offset: int, suffix: str = "") -> str:
    """`<20 digits>.snapshot`, named by the next offset after the state it covers (§9.6)."""
    return _offset_prefix(snapshot_offset) + PRODUCER_SNAPSHOT_FILE_SUFFIX + suffix


def offset_from_file_name(name: str) -> int:
    """The offset a segment/snapshot file is named by: the digits before the first '.'.

    Stricter than Kafka's `Long.parseLong` in one way: a sign is refused, since no Kafka-written
    name carries one.
    """
    base = name.rsplit("/", 1)[-1]
    dot = base.find(".")
    digits = base if dot < 0 else base[:dot]
    if dot < 0 or not _DIGITS.fullmatch(digits):
        raise LogDirError(f"file name {name!r} does not start with a base offset ('<digits>.')")
    offset = int(digits)
    if offset > _INT64_MAX:
        raise LogDirError(f"file name {name!r}: offset {digits} does not fit a long")
    return offset


class SegmentFileName(NamedTuple):
    """A segment-related file name split into its parts."""

    base_offset: int
    extension: str  # ".log", ".index", ".timeindex", ".txnindex", ".snapshot" or other
    temporary_suffix: str  # "", ".deleted", ".cleaned" or ".swap"


def parse_segment_file_name(name: str) -> SegmentFileName:
    """Split `00000000000000000000.index.swap` into (0, ".index", ".swap")."""
    offset = offset_from_file_name(name)
    base = name.rsplit("/", 1)[-1]
    rest = base[base.find(".") :]
    temporary = ""
    for suffix in TEMPORARY_FILE_SUFFIXES:
        if rest.endswith(suffix) and len(rest) > len(suffix):
            temporary = suffix
            rest = rest[: -len(suffix)]
            break
    return SegmentFileName(offset, rest, temporary)


def unfinished_write_of(name: str) -> str | None:
    """What `name` was to become when it is a `<file>.tmp` that an atomic write (write, fsync,
    rename) of one of a partition's own files left, killed before its rename: an index or
    producer snapshot's extension (`.index`, `.timeindex`, `.txnindex`, `.snapshot`) or the file
    name `leader-epoch-checkpoint` / `partition.metadata`. None for any other name, a quarantine
    copy's `.tmp` among them (the rebuild and retention jobs report those).

    The file it was to replace is intact (or rebuilt from the .log, for an index), so the copy
    holds nothing to keep; who deletes it depends on who writes that file.
    """
    if not name.endswith(TMP_FILE_SUFFIX):
        return None
    target = name[: -len(TMP_FILE_SUFFIX)]
    if target in (LEADER_EPOCH_CHECKPOINT_FILE, PARTITION_METADATA_FILE):
        return target
    try:
        parsed = parse_segment_file_name(target)
    except LogDirError:
        return None
    if parsed.temporary_suffix or parsed.extension not in (
        PRODUCER_SNAPSHOT_FILE_SUFFIX,
        *INDEX_SUFFIXES,
    ):
        return None
    return parsed.extension


# ---------------------------------------------------------------------------------------------
# topics and partition directories
# ---------------------------------------------------------------------------------------------
def validate_topic_name(topic: str) -> str:
    """Topic.validate: refuse what Kafka refuses; returns the topic for chaining.

    Rules: non-empty, not "." or "..", at most 249 characters, only ASCII letters, digits, '.',
    '_' and '-'. These also make `<log dir>/<topic>-<p>` always a direct child of the log dir.
    """
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic name {topic!r} is illegal: it must be a string")
    if not topic:
        raise InvalidTopicError("topic name '' is illegal: it can't be empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f'topic name {topic!r} is illegal: it cannot be "." or ".."')
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name {topic[:40]!r}... is illegal: it can't be longer than "
            f"{MAX_TOPIC_NAME_LENGTH} characters (has {len(topic)})"
        )
    if not _LEGAL_TOPIC.fullmatch(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} is illegal: it contains a character other than ASCII "
            "alphanumerics, '.', '_' and '-'"
        )
    return topic


def _check_partition(partition: int) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise LogDirError(f"partition {partition!r} is not an int")
    if not 0 <= partition <= _INT32_MAX:
        raise LogDirError(f"partition {partition} is outside [0, 2^31-1]")
    return partition


def partition_dir_name(topic: str, partition: int) -> str:
    """`<topic>-<partition>`, e.g. `orders-3` (the topic is validated first)."""
    validate_topic_name(topic)
    return f"{topic}-{_check_partition(partition)}"


def _unique_id(unique_id: str | None) -> str:
    if unique_id is None:
        return uuid.uuid4().hex  # Kafka: a random UUID with the dashes removed
    if not re.fullmatch(r"\S+", unique_id) or "/" in unique_id:
        raise LogDirError(f"unique id {unique_id!r} must be non-empty, without spaces or '/'")
    return unique_id


def _capped_dir_name(topic: str, partition: int, suffix: str, unique_id: str | None) -> str:
    validate_topic_name(topic)
    tail = f"-{_check_partition(partition)}.{_unique_id(unique_id)}{suffix}"
    return topic[: max(0, MAX_DIR_NAME_LENGTH - len(tail))] + tail


def delete_dir_name(topic: str, partition: int, unique_id: str | None = None) -> str:
    """`<topic>-<p>.<uuid>-delete`, topic truncated so the name is <= 255 chars."""
    return _capped_dir_name(topic, partition, DELETE_DIR_SUFFIX, unique_id)


def stray_dir_name(topic: str, partition: int, unique_id: str | None = None) -> str:
    """`<topic>-<p>.<uuid>-stray` (KRaft stray replica), truncated like `-delete`."""
    return _capped_dir_name(topic, partition, STRAY_DIR_SUFFIX, unique_id)


def future_dir_name(topic: str, partition: int, unique_id: str | None = None) -> str:
    """`<topic>-<p>.<uuid>-future` (replica moving between log dirs); never truncated."""
    return f"{partition_dir_name(topic, partition)}.{_unique_id(unique_id)}{FUTURE_DIR_SUFFIX}"


class PartitionDirName(NamedTuple):
    """A parsed partition directory name."""

    topic: str
    partition: int
    suffix: str  # "", "-delete", "-future" or "-stray"
    unique_id: str  # the `.<uuid>` part of a suffixed name, else ""


def parse_partition_dir_name(name: str) -> PartitionDirName:
    """LocalLog.parseTopicPartitionName, also reporting the suffix and unique id.

    Refused (LogDirError): no '-', a suffix without the `.<uuid>` form, an empty topic or
    partition, or a partition that is not a non-negative decimal int (Kafka's parseInt would also
    take a '+' sign; no Kafka-written name has one). The topic is not validated, as in Kafka: a
    `-delete` name may carry a truncated topic.
    """
    dir_name = name.rstrip("/").rsplit("/", 1)[-1]
    if not dir_name or "-" not in dir_name:
        raise LogDirError(
            f"found directory {name!r}, which is not in the form of topic-partition "
            "(or topic-partition.uniqueId-delete/-future/-stray)"
        )
    suffix = next((s for s in DIR_SUFFIXES if dir_name.endswith(s)), "")
    unique_id = ""
    body = dir_name
    if suffix:
        if not _DIR_PATTERNS[suffix].fullmatch(dir_name):
            raise LogDirError(
                f"found directory {name!r}: a {suffix} directory must look like "
                f"topic-partition.uniqueId{suffix}"
            )
        dot = dir_name.rfind(".")
        body = dir_name[:dot]
        unique_id = dir_name[dot + 1 : -len(suffix)]
    dash = body.rfind("-")
    topic, partition_text = body[:dash], body[dash + 1 :]
    if not topic or not partition_text:
        raise LogDirError(f"found directory {name!r}: empty topic or partition")
    if not _DIGITS.fullmatch(partition_text) or int(partition_text) > _INT32_MAX:
        raise LogDirError(f"found directory {name!r}: partition {partition_text!r} is not an int")
    return PartitionDirName(topic, int(partition_text), suffix, unique_id)


def parse_partition_dir(name: str) -> tuple[str, int]:
    """(topic, partition) of a partition directory name, e.g. `a-b.c-12` -> ("a-b.c", 12)."""
    parsed = parse_partition_dir_name(name)
    return parsed.topic, parsed.partition


def live_partition_dirs(root: str | os.PathLike[str]) -> list[tuple[str, int, Path]]:
    """(topic, partition, path) of every partition dir a reader or job of the log dir serves,
    sorted: what a broker's loader loads as a topic's log, less the KRaft metadata log.

    Skipped: hidden entries and files, names that are not `<topic>-<partition>` (a staging
    area), `-delete`/`-future`/`-stray` dirs, tiered storage's `remote-log-index-cache` and
    `__cluster_metadata-0` (the broker's own log, read only for topic settings).
    """
    found = []
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            try:
                parsed = parse_partition_dir_name(entry.name)
            except LogDirError:
                continue
            if parsed.suffix or parsed.topic == CLUSTER_METADATA_TOPIC:
                continue
            found.append((parsed.topic, parsed.partition, Path(entry.path)))
    return sorted(found)


def segment_log_files(partition_dir: str | os.PathLike[str]) -> list[Path]:
    """The live `.log` files of a partition dir by base offset: no `.deleted`/`.cleaned`/
    `.swap`/quarantine names, nothing whose name is not a 20-digit offset."""
    logs = []
    for name in os.listdir(partition_dir):
        if not name.endswith(LOG_FILE_SUFFIX):
            continue
        try:
            parsed = parse_segment_file_name(name)
        except LogDirError:
            continue
        if parsed.extension == LOG_FILE_SUFFIX and not parsed.temporary_suffix:
            logs.append((parsed.base_offset, Path(partition_dir) / name))
    return [path for _, path in sorted(logs)]


def check_quarantine_suffix(suffix: str) -> str:
    """`suffix` if it can name quarantine files: `.` and a word, none of the names a loader
    reads, renames or deletes (a `.log`, index, `.deleted`... suffix would make the quarantined
    bytes look like a segment again, or retention take a segment for a quarantine file)."""
    reserved = (
        LOG_FILE_SUFFIX,
        *INDEX_SUFFIXES,
        *TEMPORARY_FILE_SUFFIXES,
        TMP_FILE_SUFFIX,
        PRODUCER_SNAPSHOT_FILE_SUFFIX,
    )
    if not _QUARANTINE_SUFFIX_SHAPE.fullmatch(suffix) or suffix in reserved:
        raise LogDirError(
            f"quarantine suffix {suffix!r}: expected '.' and a word, not one of {', '.join(reserved)}"
        )
    return suffix


def quarantine_file_name(log_name: str, n: int = 0, suffix: str = QUARANTINE_FILE_SUFFIX) -> str:
    """The n-th free name for a quarantined piece of `log_name`: `<log>.quarantine`, then
    `<log>.1.quarantine`, ... (a segment can be quarantined more than once)."""
    check_quarantine_suffix(suffix)
    return f"{log_name}{suffix}" if n == 0 else f"{log_name}.{n}{suffix}"


def quarantine_files(
    partition_dir: str | os.PathLike[str],
    suffix: str = QUARANTINE_FILE_SUFFIX,
    *,
    unfinished: bool = False,
    log_name: str | None = None,
) -> list[Path]:
    """The quarantine files of a partition dir, by base offset then name; with `unfinished`,
    the `<quarantine name>.tmp` copies a killed rebuild left instead; with `log_name`, only
    those of that segment."""
    check_quarantine_suffix(suffix)
    pattern = re.compile(
        r"([0-9]{20})\.log(?:\.([1-9][0-9]*))?"
        + re.escape(suffix + (TMP_FILE_SUFFIX if unfinished else ""))
    )
    found = []
    for name in os.listdir(partition_dir):
        match = pattern.fullmatch(name)
        if match and (log_name is None or name.startswith(log_name + ".")):
            found.append((int(match.group(1)), int(match.group(2) or 0), name))
    return [Path(partition_dir) / name for _, _, name in sorted(found)]
