"""The run's error types, shared by commit, staging and history (the meta area's layout and the
run lock are the core's: `kafkalog_core.root`).

Kept apart from `commit` so that the history, which the commit protocol uses, does not import
the commit protocol back.
"""

from __future__ import annotations

from kafkalog_core.errors import KafkaLogError


class IngestError(KafkaLogError):
    """An ingest run cannot proceed safely; the message names the run, partition or file."""


class ManifestError(IngestError):
    """A task manifest is malformed or its staged files do not match it."""


class PlanError(IngestError):
    """The manifests of a run do not form contiguous ranges from each partition's log end."""


class PublishError(IngestError):
    """Publishing (or recovering a publish) found the file system in an unexpected state."""
