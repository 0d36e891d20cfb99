"""The run's error type and where a root's meta area lives, shared by commit, lock and history.

Kept apart from `commit` so that the history and the run lock, which the commit protocol uses,
do not import the commit protocol back.
"""

from __future__ import annotations

import os
from pathlib import Path

from kafkalog_core.errors import KafkaLogError

# The meta area is the hidden sibling `<parent>/.<rootname>.kafkalog/` (see `commit`'s module doc).
META_SUFFIX = ".kafkalog"


class IngestError(KafkaLogError):
    """An ingest run cannot proceed safely; the message names the run, partition or file."""


def meta_root(output_root: str | os.PathLike[str]) -> Path:
    """The hidden sibling dir holding staging, journal, lock and history of `output_root`."""
    root = Path(output_root).absolute()
    if root.name in ("", ".", ".."):
        raise IngestError(f"output root {output_root} has no usable directory name")
    return root.parent / f".{root.name}{META_SUFFIX}"


class ManifestError(IngestError):
    """A task manifest is malformed or its staged files do not match it."""


class PlanError(IngestError):
    """The manifests of a run do not form contiguous ranges from each partition's log end."""


class PublishError(IngestError):
    """Publishing (or recovering a publish) found the file system in an unexpected state."""
