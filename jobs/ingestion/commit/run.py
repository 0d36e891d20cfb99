"""The commit sequence both committing drivers share (the ingest job, the data source's commit).

1. `open_run`: the root's run lock; a publish a crash interrupted finished or rolled back; other
   runs' stale staging dropped (and this run's, when it is committed); and whether this run id is committed already (then the caller
   does nothing: re-running a run id is a no-op).
2. `place_staged`: provisional shares placed after the partition's log end offset (record
   shares only get their offsets), a first share of segments continuing the published last
   segment when it has room (as a writer that knew its start writes it), by
   `continue_staged_range`.
3. the relayout (`jobs.ingestion.relayout.shares`: record shares encoded as one writer would), then
   `plan_publish` and `publish`.

Not exported from `jobs.ingestion.commit`: this module uses the writer, which uses that package.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from jobs.ingestion.commit.place import place_ranges
from jobs.ingestion.commit.publish import cleanup_stale_staging, recover_interrupted_publish
from jobs.ingestion.commit.state import StateMap
from jobs.ingestion.run.history import IngestHistory
from jobs.ingestion.staging.task_staging import TaskManifest, staging_root
from jobs.ingestion.tasks.writer import WriterSettings, continue_staged_range
from kafkalog_core.root.meta_area import meta_root, publish_journal_path
from kafkalog_core.root.run_lock import RunLock


@dataclass(frozen=True)
class OpenRun:
    """A run holding the root's run lock, before anything of it is published."""

    root: Path
    run_id: str
    history: IngestHistory
    recovered: str | None  # "completed" / "rolled back": an interrupted publish, settled

    @property
    def committed(self) -> bool:
        """This run id is in the history already: committing it again must change nothing."""
        return self.history.find_run(self.run_id) is not None


@contextmanager
def open_run(root: Path, run_id: str) -> Iterator[OpenRun]:
    """Steps every commit starts with, under the run lock held until the block ends.

    A first run on a new output root that fails before it publishes (a missing source table, a
    refused schema) takes back the directories it made: the root and its meta area (staging,
    lock), so the output is as it was, not an empty log dir and a stale lock file.
    """
    made = _missing_dirs(root) + [meta_root(root)] * (not meta_root(root).exists())
    root.mkdir(parents=True, exist_ok=True)
    with RunLock(root, run_id):
        try:
            recovered = recover_interrupted_publish(root)
            opened = OpenRun(root, run_id, IngestHistory(root), recovered)
            # a committed run's own staging too: what a kill after its history row left
            cleanup_stale_staging(root, None if opened.committed else run_id)
            yield opened
        except BaseException:
            _take_back(root, run_id, made)
            raise


def _missing_dirs(path: Path) -> list[Path]:
    """`path` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def _take_back(root: Path, run_id: str, made: list[Path]) -> None:
    """Remove the directories this run made, while nothing is published in the root, no
    publish has begun and the run staged nothing (its staging holds what a rerun reads back,
    such as the recorded start time of `timestamp: now`). Under the run lock: the lock file goes
    with the meta area; a run waiting on it finds the file gone and takes a new one."""
    meta = meta_root(root)
    if not made or publish_journal_path(root).exists() or staging_root(root, run_id).exists():
        return  # a publish began (its journal settles it on the next run) or the run staged
    if root.exists() and any(root.iterdir()):
        return  # something is out
    if meta in made:
        shutil.rmtree(meta, ignore_errors=True)
    for directory in made:
        if directory != meta:
            try:
                directory.rmdir()  # only while empty
            except OSError:
                return


def segments_to_continue(
    state: StateMap, segment_bytes: Callable[[str], int | None]
) -> dict[tuple[str, int], int]:
    """The published last segment each existing partition continues, when it has room
    (`segment_bytes(topic)`: the topic's segment.bytes, None for a topic this run leaves)."""
    continued = {}
    for (topic, partition), s in state.items():
        limit = segment_bytes(topic)
        if limit is not None:
            base = s.segment_to_continue(int(limit))
            if base is not None:
                continued[(topic, partition)] = base
    return continued


def place_staged(
    manifests: list[TaskManifest],
    log_end_offsets: Mapping[tuple[str, int], int],
    settings: WriterSettings,
) -> list[TaskManifest]:
    """Provisional shares in task order after each partition's log end offset; a partition's
    first continues the published segment `settings.continue_segments` names."""
    return place_ranges(
        manifests,
        log_end_offsets,
        lambda m, offset: continue_staged_range(m, offset, settings),
    )
