"""The driver's placement of staged shares: each partition's shares chained in task order from
its log end offset, before the relayout and the publish."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

from jobs.ingestion.run.meta import ManifestError, PlanError
from jobs.ingestion.staging.task_staging import TaskManifest, finalize_task_staging
from kafkalog_core.log.rebase import rebase_segments


def rebase_manifest(manifest: TaskManifest, first_offset: int, range_index: int) -> TaskManifest:
    """A range staged at provisional offsets, moved to where it lands in its partition: the
    batches' base offsets and the file names shift (`kafkalog_core.log.rebase`), then the range
    is finalized again (checksums, fsyncs) under its new offsets and range index."""
    if not manifest.provisional or manifest.records is not None:
        raise ManifestError(f"{manifest.describe()}: only a provisional range of segments moves")
    staging = Path(manifest.staging_dir)
    logs = sorted(staging / f.name for f in manifest.files if f.name.endswith(".log"))
    rebase_segments(logs, first_offset)
    return finalize_task_staging(
        staging,
        run_id=manifest.run_id,
        task_key=manifest.task_key,
        attempt_id=manifest.attempt_id,
        topic=manifest.topic,
        partition=manifest.partition,
        range_index=range_index,
        first_offset=first_offset,
        next_offset=first_offset + (manifest.next_offset - manifest.first_offset),
        record_count=manifest.record_count,
        max_timestamp=manifest.max_timestamp,
        leader_epoch=manifest.leader_epoch,
        native=manifest.native,  # written by the task, not by this (driver) process
        sync=manifest.durable,
        carry_at=None if manifest.carry is None else manifest.carry.size,
    )


def place_records(manifest: TaskManifest, first_offset: int, range_index: int) -> TaskManifest:
    """A record share where it lands: only its manifest changes (its rows carry no offsets; the
    relayout encodes them there)."""
    return dataclasses.replace(
        manifest,
        first_offset=first_offset,
        next_offset=first_offset + manifest.record_count,
        range_index=range_index,
        provisional=False,
    )


def place_ranges(
    manifests: list[TaskManifest],
    log_end_offsets: Mapping[tuple[str, int], int],
    continue_first: Callable[[TaskManifest, int], TaskManifest | None] | None = None,
) -> list[TaskManifest]:
    """Each partition's staged ranges in range-index order (task order), chained from its log
    end offset: record shares are placed (`place_records`), provisional segments moved there
    (`rebase_manifest`), ranges written in place checked to start there.
    `continue_first(manifest, offset)` may instead turn a provisional first range of segments
    into the continuation of the published last segment (None: no segment to continue), as
    the range mode's writer continues it when it knows the start."""
    by_partition: dict[tuple[str, int], list[TaskManifest]] = {}
    for m in manifests:
        by_partition.setdefault((m.topic, m.partition), []).append(m)
    placed = []
    for tp, shares in sorted(by_partition.items()):
        offset = int(log_end_offsets.get(tp, 0))
        for index, share in enumerate(sorted(shares, key=lambda m: m.range_index)):
            moved = None
            if share.records is not None:
                moved = place_records(share, offset, index)
            elif not share.provisional:
                if index != 0 or share.first_offset != offset:
                    raise PlanError(
                        f"{share.describe()} was written in place, but the partition's ranges "
                        f"put it at offset {offset}, range {index} (the range partitioner's "
                        "task order broke)"
                    )
                moved = share
            elif index == 0 and continue_first is not None:
                moved = continue_first(share, offset)
            if moved is None:
                moved = rebase_manifest(share, offset, index)
            placed.append(moved)
            offset = moved.next_offset
    return placed
