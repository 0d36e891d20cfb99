"""`kafkalog check-logdir DIR`: what a broker's startup would refuse or repair in a log dir.

Read-only. It walks the dir the way `LogManager.loadLogs` and `LogLoader.load` do (§2, §6, §9)
and reports one finding per file:

- `refuse` (exit status 1): the broker would take the log dir offline or not start: an
  unreadable meta.properties, replication-offset or cleaner-offset checkpoint, a directory that
  is not `topic-partition`, an unreadable partition.metadata or leader-epoch-checkpoint, two
  topic ids among one topic's partitions.
- `repair` (exit status 0, a warning): the broker would fix it at load, sometimes by dropping
  data: crash leftovers (`.deleted`/`.cleaned`/`.swap`), an unreadable recovery-point or
  log-start-offset checkpoint (read as empty), a log start offset above the log end (every
  segment deleted), segments and indexes `verify_partition` finds not ok (tails truncated,
  later segments dropped, indexes rebuilt), stale snapshots.
- `note`: worth knowing, nothing is lost (no clean-shutdown marker: recovery runs; no
  partition.metadata: the broker writes its own topic id; leader epochs at the log end).

The checks reuse the engine's readers (`names`, `checkpoints`, `verify.verify_partition`), so
this tool and the broker-side code in kafkalog_core agree by construction.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

from kafkalog_core.errors import KafkaLogError
from kafkalog_core.log.checkpoints import (
    CleanShutdownFile,
    LeaderEpochCheckpointFile,
    MetaProperties,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    topic_id_to_str,
)
from kafkalog_core.log.names import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    CLUSTER_METADATA_TOPIC,
    DELETE_DIR_SUFFIX,
    KRAFT_CHECKPOINT_DELETED,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    META_PROPERTIES_FILE,
    PARTITION_METADATA_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REMOTE_LOG_INDEX_CACHE_DIR,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    TEMPORARY_FILE_SUFFIXES,
    parse_partition_dir_name,
    validate_topic_name,
)
from kafkalog_core.log.segment.scan import DEFAULT_INDEX_INTERVAL_BYTES
from kafkalog_core.maintenance.verify import (
    MISSING,
    NOT_CHECKED,
    OFFSET_OVERFLOW,
    OK,
    ZERO_PADDED,
    verify_partition,
)

REFUSE: Final = "refuse"
REPAIR: Final = "repair"
NOTE: Final = "note"

# Root checkpoints: the broker reads the first two at load and falls back to an empty map; the
# other two are read while it runs, and a failure takes the log dir offline (§6, §9.1).
_LENIENT_CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT_FILE, LOG_START_OFFSET_CHECKPOINT_FILE)
_STRICT_CHECKPOINTS = (REPLICATION_OFFSET_CHECKPOINT_FILE, CLEANER_OFFSET_CHECKPOINT_FILE)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Finding:
    """One thing a broker would refuse, repair or just see, at `path` (relative to the root)."""

    severity: str
    path: str
    message: str

    def line(self) -> str:
        return f"{self.severity}: {self.path}: {self.message}"


@dataclass
class LogDirCheck:
    """Every finding of one log dir, and what was looked at."""

    root: Path
    findings: list[Finding] = field(default_factory=list)
    partitions: int = 0
    segments: int = 0

    @property
    def refused(self) -> bool:
        return any(f.severity == REFUSE for f in self.findings)

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    def add(self, severity: str, path: Path | str, message: str) -> None:
        rel = os.path.relpath(path, self.root) if Path(path).is_absolute() else str(path)
        self.findings.append(Finding(severity, rel, message))


def _read(
    check: LogDirCheck, path: Path, reader: Callable[[], Any], severity: str, why: str
) -> Any:
    """`reader()`, or a finding (None) when the file cannot be parsed."""
    try:
        return reader()
    except (KafkaLogError, OSError, ValueError) as e:
        check.add(severity, path, f"unreadable ({e}): {why}")
        return None


def _check_root_files(check: LogDirCheck) -> dict[str, dict[TopicPartition, int]]:
    root = check.root
    meta = root / META_PROPERTIES_FILE
    if meta.exists():
        _read(check, meta, lambda: MetaProperties.read(meta), REFUSE, "the broker does not start")
    else:
        check.add(
            NOTE,
            meta,
            "missing: a ZooKeeper broker writes one; a KRaft broker needs the dir formatted "
            "(kafka-storage.sh format) or an existing meta.properties copied in",
        )
    if not CleanShutdownFile(root).exists:
        check.add(
            NOTE,
            CleanShutdownFile(root).path,
            "missing: the broker recovers (CRC-checks) every segment from its recovery point",
        )
    checkpoints: dict[str, dict[TopicPartition, int]] = {}
    for name in _LENIENT_CHECKPOINTS + _STRICT_CHECKPOINTS:
        path = root / name
        if not path.exists():
            checkpoints[name] = {}
            continue
        lenient = name in _LENIENT_CHECKPOINTS
        entries = _read(
            check,
            path,
            lambda p=path: OffsetCheckpointFile(p).read(),
            REPAIR if lenient else REFUSE,
            "read as empty (offsets from 0)" if lenient else "the log dir goes offline",
        )
        checkpoints[name] = entries or {}
    return checkpoints


def _check_files(check: LogDirCheck, pdir: Path) -> None:
    """Crash leftovers the load deletes or swaps in (LogLoader passes 1-3)."""
    for p in sorted(pdir.iterdir()):
        name = p.name
        if KRAFT_CHECKPOINT_DELETED.fullmatch(name):
            continue
        suffix = next((s for s in TEMPORARY_FILE_SUFFIXES if name.endswith(s)), None)
        if suffix == ".swap":
            check.add(REPAIR, p, "an unfinished segment swap: the broker completes it")
        elif suffix is not None:
            check.add(REPAIR, p, f"a {suffix} leftover: the broker deletes it")


def _check_metadata(check: LogDirCheck, pdir: Path, topic_ids: dict[str, dict[str, str]]) -> bool:
    """partition.metadata and leader-epoch-checkpoint; False when the latter is unreadable."""
    path = pdir / PARTITION_METADATA_FILE
    if not path.exists():
        check.add(NOTE, path, "missing: the broker writes the topic id it has for the topic")
    else:
        topic_id = _read(
            check,
            path,
            lambda: PartitionMetadataFile(path).read(),
            REFUSE,
            "the broker cannot check the partition's topic id",
        )
        if topic_id is not None:
            topic = parse_partition_dir_name(pdir.name).topic
            topic_ids.setdefault(topic, {})[pdir.name] = topic_id_to_str(topic_id)
    epochs = pdir / LEADER_EPOCH_CHECKPOINT_FILE
    if not epochs.exists():
        return True
    readable = _read(
        check,
        epochs,
        lambda: LeaderEpochCheckpointFile(epochs).read(),
        REFUSE,
        "the log dir goes offline",
    )
    return readable is not None


def _check_segments(
    check: LogDirCheck,
    pdir: Path,
    checkpoints: dict[str, dict[TopicPartition, int]],
    index_interval_bytes: int,
) -> None:
    """Segments and indexes against what recovery builds (`verify_partition`), read as the
    broker's load would act on them."""
    v = verify_partition(pdir, index_interval_bytes)
    check.segments += len(v.segments)
    for s in v.segments:
        if s.after_corrupt_segment:
            check.add(REPAIR, s.log_path, "follows a corrupt segment: recovery deletes it")
            continue
        if s.log_status == OFFSET_OVERFLOW:
            check.add(REPAIR, s.log_path, f"{s.problems[0]}: the broker splits the segment")
        elif s.log_status != OK:
            check.add(REPAIR, s.log_path, f"{s.problems[0]}: recovery truncates the segment")
        for index in s.indexes:
            if index.status == MISSING and index.path.suffix == ".timeindex":
                check.add(
                    REPAIR,
                    index.path,
                    "missing: the broker creates it empty, and retention then ages the segment "
                    "by the .log's mtime",
                )
            elif index.status == MISSING:
                check.add(REPAIR, index.path, "missing: the broker rebuilds it from the .log")
            elif index.status == ZERO_PADDED:
                check.add(NOTE, index.path, f"{index.problem} (preallocated; trimmed on roll)")
            elif index.needs_rebuild and index.status != NOT_CHECKED:
                check.add(
                    REPAIR,
                    index.path,
                    f"{index.problem}: wrong lookups until rebuilt "
                    "(rebuild-index --mode rebuild, or a broker's recovery)",
                )
    for path in v.stale_snapshots:
        check.add(REPAIR, path, f"above the log end offset {v.log_end_offset}: deleted")
    if v.stale_epochs:
        check.add(  # a leader's entry at the end of its log is one of these: harmless
            NOTE,
            pdir / LEADER_EPOCH_CHECKPOINT_FILE,
            f"entries at or after the log end offset {v.log_end_offset} are dropped at load: "
            f"{[(e.epoch, e.start_offset) for e in v.stale_epochs]}",
        )
    for path in v.orphan_index_files:
        check.add(REPAIR, path, "an index without a .log: deleted")
    parsed = parse_partition_dir_name(pdir.name)
    tp = (parsed.topic, parsed.partition)
    log_start = checkpoints[LOG_START_OFFSET_CHECKPOINT_FILE].get(tp)
    if log_start is not None and v.segments and log_start > v.log_end_offset:
        check.add(
            REPAIR,
            LOG_START_OFFSET_CHECKPOINT_FILE,
            f"{pdir.name} starts at {log_start}, above its log end offset {v.log_end_offset}: "
            "the broker deletes every segment of the partition",
        )
    high_watermark = checkpoints[REPLICATION_OFFSET_CHECKPOINT_FILE].get(tp)
    if high_watermark is not None and high_watermark > v.log_end_offset:
        check.add(
            REPAIR,
            REPLICATION_OFFSET_CHECKPOINT_FILE,
            f"{pdir.name} high watermark {high_watermark} is above its log end offset "
            f"{v.log_end_offset}: lowered to it",
        )


def check_log_dir(
    root: str | os.PathLike[str], index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
) -> LogDirCheck:
    """Every finding for the log dir `root` (see the module doc). Never writes."""
    check = LogDirCheck(Path(root))
    if not check.root.is_dir():
        check.add(REFUSE, str(root), "not a directory")
        return check
    checkpoints = _check_root_files(check)
    topic_ids: dict[str, dict[str, str]] = {}
    for child in sorted(check.root.iterdir()):
        if not child.is_dir():
            continue
        name = child.name
        if name == REMOTE_LOG_INDEX_CACHE_DIR or name.startswith(CLUSTER_METADATA_TOPIC + "-"):
            continue
        try:
            parsed = parse_partition_dir_name(name)
            if not parsed.suffix:
                validate_topic_name(parsed.topic)
        except KafkaLogError as e:
            check.add(REFUSE, child, f"{e}: the broker does not load this log dir")
            continue
        if parsed.suffix == DELETE_DIR_SUFFIX:
            check.add(REPAIR, child, "scheduled for deletion: the broker deletes it")
            continue
        if parsed.suffix:
            check.add(NOTE, child, f"a {parsed.suffix} replica: not loaded as a partition")
            continue
        check.partitions += 1
        _check_files(check, child)
        if _check_metadata(check, child, topic_ids):  # verify reads the leader epochs too
            _check_segments(check, child, checkpoints, index_interval_bytes)
    for topic, ids in sorted(topic_ids.items()):
        if len(set(ids.values())) > 1:
            listed = ", ".join(f"{d}={i}" for d, i in sorted(ids.items()))
            check.add(
                REFUSE,
                topic,
                f"partitions carry different topic ids ({listed}): the broker refuses those "
                "not matching the cluster's id (InconsistentTopicIdException)",
            )
    return check


def run_check_logdir(
    root: str, out: TextIO, *, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
) -> int:
    """Print one line per finding and a summary; 1 when a broker would refuse something."""
    check = check_log_dir(root, index_interval_bytes)
    for finding in check.findings:
        out.write(finding.line() + "\n")
    out.write(
        f"check-logdir {root}: {check.partitions} partitions, {check.segments} segments; "
        f"{check.count(REFUSE)} refuse, {check.count(REPAIR)} repair, {check.count(NOTE)} note\n"
    )
    return 1 if check.refused else 0
