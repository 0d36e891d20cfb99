"""Where an output root's meta area lives and the names of what it holds that more than one
stage reads: the publish journal of an interrupted ingest, the journals of open compaction
rounds. Staging, history and the lock file are the meta area's too; their modules own them.
"""

from __future__ import annotations

import os
from pathlib import Path

from kafkalog_core.errors import LogDirError

__all__ = [
    "COMPACT_JOURNAL_DIR",
    "META_SUFFIX",
    "PUBLISH_JOURNAL_NAME",
    "compact_journal_path",
    "meta_root",
    "publish_journal_path",
]

# The meta area is the hidden sibling `<parent>/.<rootname>.kafkalog/`: beside the root, not in
# it, so a broker or a copy of the root never mistakes it for a partition dir.
META_SUFFIX = ".kafkalog"
PUBLISH_JOURNAL_NAME = "publish-journal.json"  # a publish under way or interrupted
COMPACT_JOURNAL_DIR = "compact"  # one journal per partition with a compaction round open


def meta_root(output_root: str | os.PathLike[str]) -> Path:
    """The hidden sibling dir holding staging, journal, lock and history of `output_root`."""
    root = Path(output_root).absolute()
    if root.name in ("", ".", ".."):
        raise LogDirError(f"output root {output_root} has no usable directory name")
    return root.parent / f".{root.name}{META_SUFFIX}"


def publish_journal_path(output_root: str | os.PathLike[str]) -> Path:
    return meta_root(output_root) / PUBLISH_JOURNAL_NAME


def compact_journal_path(output_root: str | os.PathLike[str], dir_name: str) -> Path:
    """Where a partition's open compaction round keeps its journal."""
    return meta_root(output_root) / COMPACT_JOURNAL_DIR / f"{dir_name}.json"
