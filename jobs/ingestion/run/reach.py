"""A Spark Connect client and its server's tasks must see the same output root.

The driver stages nothing itself, but it takes the run lock, places the tasks' staged files and
publishes them by renames in the root and its meta area. From a Connect client the driver is
this process, wherever it runs, and the tasks run on the server's cluster: a root that is not
the same directory for both would have tasks stage where the client never looks (or the client
create a root of its own). So before anything is written, the client writes a probe file into
the meta area and one task reads it back; a mismatch, or a root the client cannot create, is one
line, and nothing is published. A classic session is not asked: its driver is on the cluster.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.ingestion.run.meta import IngestError
from jobs.spark.tasks import is_connect, run_tasks
from kafkalog_core.root.meta_area import meta_root

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["require_shared_root"]

PROBE_PREFIX = "reach-"


def _read_probe(path: str) -> str:
    """In a task: the probe's text as this task sees it ("" when absent or unreadable)."""
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except OSError:
        return ""


def require_shared_root(spark: SparkSession, output_root: str | os.PathLike[str]) -> None:
    """On a Spark Connect client, IngestError (one line) unless the client can write the
    root's meta area and the server's tasks see the same files there."""
    if not is_connect(spark):
        return
    root = Path(output_root).absolute()
    meta = meta_root(root)
    token = uuid.uuid4().hex
    probe = meta / f"{PROBE_PREFIX}{token}"
    try:
        meta.mkdir(parents=True, exist_ok=True)
        probe.write_text(token, encoding="ascii")
    except OSError as error:
        raise IngestError(
            f"this Spark Connect client cannot write beside output root {root} "
            f"({error.strerror or error}): the client takes the run's lock and publishes, so it "
            "needs the output root mounted at the path the server's tasks use (docs/cluster.md)"
        ) from None
    try:
        seen = run_tasks(spark, 1, lambda _: [_read_probe(str(probe))])
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    if seen != [token]:
        raise IngestError(
            f"the Spark Connect server's tasks do not see output root {root} as this client "
            "does: mount it at the same path for both (the client publishes what the tasks "
            "stage; docs/cluster.md)"
        )
