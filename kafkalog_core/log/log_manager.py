"""LogManager: one or more log dir roots and every partition in them (Kafka's LogManager, §2, §6, §9).

Loading reads the clean-shutdown marker (deleting it first, so a crash while loading counts as
unclean) and the recovery-point / log-start-offset checkpoints, then opens every partition
directory in parallel. `checkpoint()` and `close()` write the files a broker reads at startup.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kafkalog_core.errors import KafkaLogError, LogDirError
from kafkalog_core.log.checkpoints import (
    CleanShutdownFile,
    MetaProperties,
    OffsetCheckpointFile,
)
from kafkalog_core.log.log_loader import LoadReport
from kafkalog_core.log.names import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    CLUSTER_METADATA_TOPIC,
    DELETE_DIR_SUFFIX,
    FUTURE_DIR_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    META_PROPERTIES_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REMOTE_LOG_INDEX_CACHE_DIR,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    STRAY_DIR_SUFFIX,
    parse_partition_dir_name,
    partition_dir_name,
    validate_topic_name,
)
from kafkalog_core.log.partition.partition_log import PartitionLog

if TYPE_CHECKING:
    from kafkalog_core.config import LogConfig

TopicPartition = tuple[str, int]


@dataclass
class LogDirLoadReport:
    """What loading one log dir root found: checkpoints, skipped dirs, per-partition reports."""

    root: Path
    had_clean_shutdown: bool = False
    warnings: list[str] = field(default_factory=list)
    skipped_dirs: list[str] = field(default_factory=list)
    scheduled_for_deletion: list[str] = field(default_factory=list)
    partitions: dict[TopicPartition, LoadReport] = field(default_factory=dict)


class LogManager:
    """The partitions of a set of log dir roots, keyed by (topic, partition)."""

    def __init__(
        self,
        log_dirs: Iterable[str | os.PathLike[str]],
        default_config: LogConfig,
        topic_configs: dict[str, LogConfig] | None = None,
    ) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        if not self.log_dirs:
            raise LogDirError("LogManager needs at least one log dir")
        self.default_config = default_config
        self.topic_configs = dict(topic_configs or {})
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._root_of: dict[TopicPartition, Path] = {}
        self._lock = threading.RLock()
        self.load_reports: dict[Path, LogDirLoadReport] = {}
        self._clean: dict[Path, bool] = {}

    def config_for(self, topic: str) -> LogConfig:
        return self.topic_configs.get(topic, self.default_config)

    # ---- loading -------------------------------------------------------------------------------
    def load(self, threads: int | None = None) -> dict[Path, LogDirLoadReport]:
        """Open every partition of every root (in parallel); returns a report per root."""
        jobs: list[tuple[Path, Path, str, int, int, int | None, bool]] = []
        for root in self.log_dirs:
            root.mkdir(parents=True, exist_ok=True)
            report = LogDirLoadReport(root)
            self.load_reports[root] = report
            marker = CleanShutdownFile(root)
            clean = marker.exists
            if clean:
                marker.delete()  # a crash while loading must count as unclean
            report.had_clean_shutdown = clean
            self._clean[root] = clean
            recovery_points = self._read_checkpoint(root / RECOVERY_POINT_CHECKPOINT_FILE, report)
            log_starts = self._read_checkpoint(root / LOG_START_OFFSET_CHECKPOINT_FILE, report)
            for child in sorted(root.iterdir()):
                if not child.is_dir():
                    continue
                name = child.name
                if name == REMOTE_LOG_INDEX_CACHE_DIR or name.startswith(
                    CLUSTER_METADATA_TOPIC + "-"
                ):
                    report.skipped_dirs.append(name)
                    continue
                try:
                    parsed = parse_partition_dir_name(name)
                except KafkaLogError as e:
                    report.skipped_dirs.append(name)
                    report.warnings.append(str(e))
                    continue
                if parsed.suffix == DELETE_DIR_SUFFIX:
                    report.scheduled_for_deletion.append(name)
                    continue
                if parsed.suffix in (FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX):
                    report.skipped_dirs.append(name)
                    continue
                tp = (parsed.topic, parsed.partition)
                jobs.append(
                    (root, child, parsed.topic, parsed.partition, recovery_points.get(tp, 0),
                     log_starts.get(tp), clean)
                )  # fmt: skip
        workers = threads or min(32, (os.cpu_count() or 1) * 2)

        def open_one(job: tuple[Path, Path, str, int, int, int | None, bool]) -> tuple:
            root, path, topic, partition, rp, lso, clean = job
            log = PartitionLog.open(
                path,
                self.config_for(topic),
                recovery_point=rp,
                log_start_offset=lso,
                had_clean_shutdown=clean,
            )
            return root, (topic, partition), log

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            results = list(pool.map(open_one, jobs))
        for root, tp, log in results:
            if tp in self._logs:
                raise LogDirError(
                    f"duplicate log directories for {tp[0]}-{tp[1]}: {self._logs[tp].dir} and {log.dir}"
                )
            self._logs[tp] = log
            self._root_of[tp] = root
            self.load_reports[root].partitions[tp] = log.load_report
        return self.load_reports

    @staticmethod
    def _read_checkpoint(path: Path, report: LogDirLoadReport) -> dict[TopicPartition, int]:
        """An unreadable checkpoint means an empty map and a warning (LogManager.loadLogs)."""
        try:
            return OffsetCheckpointFile(path).read()
        except (KafkaLogError, OSError, ValueError) as e:
            report.warnings.append(
                f"unreadable {path.name} in {path.parent}, using an empty map: {e}"
            )
            return {}

    def delete_scheduled_dirs(self) -> list[Path]:
        """Remove the `-delete` partition dirs found by `load()` (Kafka deletes them async)."""
        import shutil

        removed = []
        for root, report in self.load_reports.items():
            for name in report.scheduled_for_deletion:
                path = root / name
                if path.is_dir():
                    shutil.rmtree(path)
                    removed.append(path)
        return removed

    # ---- access ----------------------------------------------------------------------------------
    @property
    def logs(self) -> dict[TopicPartition, PartitionLog]:
        return dict(self._logs)

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def get_or_create_log(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        topic_id: uuid.UUID | None = None,
        *,
        leader_epoch: int | None = None,
    ) -> PartitionLog:
        """The partition's log, created in the root holding the fewest partitions if absent."""
        validate_topic_name(topic)
        dir_name = partition_dir_name(topic, partition)
        with self._lock:
            tp = (topic, partition)
            existing = self._logs.get(tp)
            if existing is not None:
                return existing
            counts = {root: 0 for root in self.log_dirs}
            for root in self._root_of.values():
                counts[root] = counts.get(root, 0) + 1
            root = min(self.log_dirs, key=lambda r: (counts[r], self.log_dirs.index(r)))
            root.mkdir(parents=True, exist_ok=True)
            path = root / dir_name
            if path.resolve().parent != root.resolve():
                raise LogDirError(f"partition directory {path} would escape the log dir {root}")
            if config is not None:
                self.topic_configs.setdefault(topic, config)
            log = PartitionLog.create(
                path, config or self.config_for(topic), topic_id=topic_id, leader_epoch=leader_epoch
            )
            self._logs[tp] = log
            self._root_of[tp] = root
            return log

    # ---- checkpoints -------------------------------------------------------------------------------
    def checkpoint(self, *, sync: bool = True) -> None:
        """Write recovery-point, log-start-offset, replication-offset (HW = LEO) and
        cleaner-offset checkpoints per root (keeping other partitions' existing entries), and
        meta.properties when the root has none."""
        with self._lock:
            for root in self.log_dirs:
                root.mkdir(parents=True, exist_ok=True)
                mine = {tp: log for tp, log in self._logs.items() if self._root_of[tp] == root}
                recovery = {tp: log.recovery_point for tp, log in mine.items()}
                starts = {
                    tp: log.log_start_offset
                    for tp, log in mine.items()
                    if log.log_start_offset > log.segments[0].base_offset
                }
                hws = {tp: log.high_watermark for tp, log in mine.items()}
                OffsetCheckpointFile(root / RECOVERY_POINT_CHECKPOINT_FILE).write(
                    recovery, sync=sync
                )
                OffsetCheckpointFile(root / LOG_START_OFFSET_CHECKPOINT_FILE).write(
                    starts, sync=sync
                )
                self._merge_write(root / REPLICATION_OFFSET_CHECKPOINT_FILE, hws, sync)
                self._merge_write(root / CLEANER_OFFSET_CHECKPOINT_FILE, {}, sync, keep=set(mine))
                meta = root / META_PROPERTIES_FILE
                if not meta.exists():
                    MetaProperties(version=0, node_id=0).write(meta, sync=sync)

    def _merge_write(
        self,
        path: Path,
        updates: dict[TopicPartition, int],
        sync: bool,
        keep: set[TopicPartition] | None = None,
    ) -> None:
        """Update entries of a checkpoint we share with other tools, preserving the rest."""
        try:
            current = OffsetCheckpointFile(path).read()
        except (KafkaLogError, OSError, ValueError):
            current = {}
        merged = dict(current)
        merged.update(updates)
        if keep is not None:
            # cleaner offsets: keep entries of live partitions and of partitions we don't manage
            merged = {tp: off for tp, off in merged.items() if tp in keep or tp not in self._logs}
        OffsetCheckpointFile(path).write(merged, sync=sync)

    # ---- shutdown ------------------------------------------------------------------------------------
    def close(self, *, fsync: bool = True) -> None:
        """Close every log, write the checkpoints, then the clean-shutdown marker per root."""
        with self._lock:
            for log in self._logs.values():
                log.close(fsync=fsync)
            self.checkpoint(sync=fsync)
            for root in self.log_dirs:
                CleanShutdownFile(root).write(sync=fsync)
