"""The driver's publish plan: the winning manifests per partition, checked to chain."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jobs.ingestion.commit.state import PartitionState, StateMap
from jobs.ingestion.run.meta import ManifestError, PlanError, PublishError
from jobs.ingestion.staging.task_staging import (
    SEGMENT_FILE_ORDER,
    StagedFile,
    TaskManifest,
    verify_manifest,
)
from kafkalog_core.log.names import partition_dir_name


# --- planning ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunInfo:
    """What the ingest history records about the run besides the published ranges."""

    source: str = ""
    source_version: str = ""
    started_at_ms: int = 0
    config_hash: str = ""
    description: str = ""
    timings_ms: Mapping[str, int] = field(default_factory=dict)
    # {topic: non-default topic configs}: the maintenance jobs' source of topic settings
    topic_configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionPlan:
    """The winning manifests of one partition, in offset order, and what they change."""

    topic: str
    partition: int
    is_new: bool
    old_log_end_offset: int
    new_log_end_offset: int
    replaces: int | None
    manifests: tuple[TaskManifest, ...]
    topic_id: str | None = None
    leader_epoch: int = -1

    @property
    def dir_name(self) -> str:
        return partition_dir_name(self.topic, self.partition)

    @property
    def record_count(self) -> int:
        return sum(m.record_count for m in self.manifests)

    def files(self) -> list[tuple[TaskManifest, StagedFile]]:
        """All staged files in publish order: ascending base offset, .log first per segment."""
        pairs = [(m, f) for m in self.manifests for f in m.files]
        return sorted(pairs, key=lambda mf: (mf[1].base_offset, SEGMENT_FILE_ORDER[mf[1].ext]))


@dataclass(frozen=True)
class PublishPlan:
    run_id: str
    output_root: str
    partitions: tuple[PartitionPlan, ...]
    discarded: tuple[TaskManifest, ...] = ()
    run_info: RunInfo = field(default_factory=RunInfo)
    meta_properties: Mapping[str, str] | None = None
    # partition dirs an overwrite replaces (moved out before the new dirs go in; `retire.py`)
    retired: tuple[str, ...] = ()

    @property
    def record_count(self) -> int:
        return sum(p.record_count for p in self.partitions)

    def ranges(self) -> dict[str, list[int]]:
        """`{"topic-p": [first, next)}` of what this run adds, for the history and the summary."""
        return {
            p.dir_name: [p.old_log_end_offset, p.new_log_end_offset]
            for p in self.partitions
            if p.new_log_end_offset > p.old_log_end_offset
        }

    def to_json(self) -> str:
        data = asdict(self)
        data["partitions"] = [
            {**asdict(p), "manifests": [m.to_dict() for m in p.manifests]} for p in self.partitions
        ]
        data["discarded"] = [m.to_dict() for m in self.discarded]
        data["run_info"] = {**asdict(self.run_info), "timings_ms": dict(self.run_info.timings_ms)}
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> PublishPlan:
        try:
            data = json.loads(text)
            partitions = tuple(
                PartitionPlan(
                    **{
                        **p,
                        "manifests": tuple(TaskManifest.from_dict(m) for m in p["manifests"]),
                    }
                )
                for p in data["partitions"]
            )
            return cls(
                run_id=data["run_id"],
                output_root=data["output_root"],
                partitions=partitions,
                discarded=tuple(TaskManifest.from_dict(m) for m in data["discarded"]),
                run_info=RunInfo(**data["run_info"]),
                meta_properties=data["meta_properties"],
                retired=tuple(data.get("retired", ())),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise PublishError(f"malformed publish plan/journal: {e}") from None


def _attempt_order(m: TaskManifest) -> tuple[int, int, str]:
    a = m.attempt_id
    return (0, int(a), a) if a.isdigit() else (1, 0, a)


def plan_publish(
    manifests: Iterable[TaskManifest],
    existing_state: StateMap,
    *,
    output_root: str | os.PathLike[str],
    run_id: str,
    run_info: RunInfo | None = None,
    topic_ids: Mapping[str, str] | None = None,
    meta_properties: Mapping[str, str] | None = None,
    verify: bool = True,
    retired: tuple[str, ...] = (),
    partition_counts: Mapping[str, int] | None = None,
) -> PublishPlan:
    """Pick one attempt per (partition, range) and check the ranges chain from the log end.

    Duplicates (retried/speculative attempts) must agree on their offsets; the lowest attempt id
    whose staged files verify wins, so the choice is the same on every re-plan. A partition with
    no existing state is new and must start at offset 0. `retired` names the partition dirs an
    overwrite replaces: `existing_state` must then leave them out (they are new again).

    `partition_counts` gives the topics the run writes (or replaces) with their partition
    counts: a partition of such a topic that neither exists nor gets records is published as an
    empty partition dir, as Kafka creates every partition of a topic. The dirs are how the next
    append learns the count (murmur2 of a key modulo it), so they go in with the same journaled
    publish as the records: a kill leaves the old topic or the new one, whole.
    """
    by_key: dict[tuple[str, int, int], list[TaskManifest]] = {}
    for m in manifests:
        if m.run_id != run_id:
            raise PlanError(f"{m.describe()}: manifest of run {m.run_id}, expected run {run_id}")
        if m.records is not None:  # rows, not segments: only the relayout's encode publishes
            raise PlanError(f"{m.describe()}: staged as records (it must be relaid out first)")
        if not m.durable:  # everything published is durable before the journal is written
            raise PlanError(f"{m.describe()}: staged without fsync (it must be relaid out first)")
        by_key.setdefault(m.key, []).append(m)

    winners: dict[tuple[str, int], list[TaskManifest]] = {}
    discarded: list[TaskManifest] = []
    for key in sorted(by_key):
        candidates = sorted(by_key[key], key=_attempt_order)
        spans = {(c.first_offset, c.next_offset, c.record_count) for c in candidates}
        if len(spans) > 1:
            raise PlanError(
                f"{key[0]}-{key[1]} range {key[2]}: attempts disagree on the offsets "
                f"({', '.join(c.describe() for c in candidates)})"
            )
        winner = None
        for c in candidates:
            if winner is None:
                try:
                    if verify:
                        verify_manifest(c)
                    winner = c
                    continue
                except ManifestError:
                    pass
            discarded.append(c)
        if winner is None:
            raise PlanError(f"{candidates[0].describe()}: no attempt has intact staged files")
        winners.setdefault(key[:2], []).append(winner)

    plans = []
    for (topic, partition), ms in sorted(winners.items()):
        state = existing_state.get((topic, partition))
        plans.append(_plan_partition(topic, partition, ms, state, topic_ids or {}))
    epoch = max((m.leader_epoch for ms in winners.values() for m in ms), default=-1)
    counts = partition_counts or {}
    plans.extend(_empty_partitions(counts, winners, existing_state, topic_ids, epoch))
    plans.sort(key=lambda p: (p.topic, p.partition))
    return PublishPlan(
        run_id=run_id,
        output_root=str(Path(output_root).absolute()),
        partitions=tuple(plans),
        discarded=tuple(discarded),
        run_info=run_info or RunInfo(),
        meta_properties=dict(meta_properties) if meta_properties else None,
        retired=tuple(sorted(retired)),
    )


def _empty_partitions(
    counts: Mapping[str, int],
    written: Mapping[tuple[str, int], Any],
    existing_state: StateMap,
    topic_ids: Mapping[str, str] | None,
    leader_epoch: int,
) -> list[PartitionPlan]:
    """A new, empty partition for each partition below its topic's count that has no dir and
    no records of this run; its leader epoch starts at offset 0, as a broker's leader of an
    empty partition assigns it (`maybeAssignEpochStartOffset`)."""
    return [
        PartitionPlan(
            topic=topic,
            partition=partition,
            is_new=True,
            old_log_end_offset=0,
            new_log_end_offset=0,
            replaces=None,
            manifests=(),
            topic_id=(topic_ids or {}).get(topic),
            leader_epoch=leader_epoch,
        )
        for topic, count in sorted(counts.items())
        for partition in range(count)
        if (topic, partition) not in written and (topic, partition) not in existing_state
    ]


def _plan_partition(
    topic: str,
    partition: int,
    manifests: list[TaskManifest],
    state: PartitionState | None,
    topic_ids: Mapping[str, str],
) -> PartitionPlan:
    name = partition_dir_name(topic, partition)
    ordered = sorted(manifests, key=lambda m: (m.first_offset, m.next_offset, m.range_index))
    if [m.range_index for m in ordered] != sorted(m.range_index for m in ordered):
        raise PlanError(f"{name}: range indexes are not in offset order")
    expected = state.log_end_offset if state else 0
    start = expected
    replaces = None
    for i, m in enumerate(ordered):
        if m.first_offset != expected:
            what = "gap" if m.first_offset > expected else "overlap"
            if i == 0:
                raise PlanError(
                    f"{name}: first range starts at {m.first_offset}, but the log end offset is "
                    f"{expected}"
                )
            raise PlanError(f"{name}: {what} between offset {expected} and {m.describe()}")
        if m.replaces is not None:
            last = state.last_segment_base if state else None
            if i != 0 or last is None or m.replaces != last:
                raise PlanError(
                    f"{m.describe()}: continues segment {m.replaces}, but only the existing last "
                    f"segment ({last}) can be continued, by the first range"
                )
            replaces = m.replaces
        elif state is not None and any(b in state.segment_bases for b in m.segment_bases):
            raise PlanError(f"{m.describe()}: would overwrite an existing segment of {name}")
        expected = m.next_offset
    names = [f.name for m in ordered for f in m.files]
    if len(set(names)) != len(names):
        dup = sorted(n for n in set(names) if names.count(n) > 1)[0]
        raise PlanError(f"{name}: two ranges stage the same file {dup}")
    epochs = {m.leader_epoch for m in ordered}
    return PartitionPlan(
        topic=topic,
        partition=partition,
        is_new=state is None,
        old_log_end_offset=start,
        new_log_end_offset=expected,
        replaces=replaces,
        manifests=tuple(ordered),
        topic_id=(state.topic_id if state and state.topic_id else topic_ids.get(topic)),
        leader_epoch=max(epochs) if epochs else -1,
    )
