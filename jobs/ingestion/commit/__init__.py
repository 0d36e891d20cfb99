"""The commit: the driver turns the tasks' staged manifests into one atomic publish.

Owns the existing output's state (`state`), the placement of staged shares (`place`), the publish
plan (`plan`), the publish itself with its journal (`publish`, `retire`), the commit sequence
(`run`) and topic ids (`topic_ids`). It may import every earlier stage (`tasks` for a continued
range) and the shared `staging` and `run`; nothing imports it but the jobs.

Who calls what (the driver holds a `RunLock` for all of it):

1. driver: `recover_interrupted_publish(root)`, `cleanup_stale_staging(root, run_id)`,
   `scan_existing_state(root)`.
2. task attempt: `task_staging_dir(...)` -> write segment files there (for a continued last
   segment first `copy_segment_for_continuation(...)`) -> `finalize_task_staging(...)` returns a
   `TaskManifest`; or a record share's rows (`jobs.ingestion.tasks.record_share`); ship
   `manifest.to_json()` back to the driver.
3. driver: the shares placed (`place_ranges`) and laid out (`jobs.ingestion.relayout.shares`; the
   sequence is `commit.run`), then `plan_publish(manifests, state, ...)` -> `publish(plan)`.

Where the staging lives. A Kafka broker treats *every* subdirectory of a log dir as a partition
dir and fails on a name it cannot parse as `<topic>-<partition>` (§2, §6); the only name it skips,
`remote-log-index-cache`, belongs to tiered storage, which manages and deletes its contents. So
nothing of ours may live inside the output root. The meta area is a hidden *sibling*
`<parent>/.<rootname>.kafkalog/` (staging, publish journal, run lock, ingest history): the root
stays a pure Kafka log dir, and the sibling is on the same file system (checked), so publishing
is a rename, never a copy.

Publish and crash safety. Inside an existing partition dir we use Kafka's own swap protocol
(§8.8): staged files are moved in as `*.cleaned`, renamed to `*.swap` in descending offset order,
then renamed to their final names (`.log` first per segment). After a crash a broker's loader
(§6 passes 1-3) rolls back while any `.cleaned` remains and completes the swap otherwise, so it
only ever sees the old or the new complete segments; a continued (copy-on-write) last segment is
replaced by a same-named swap. A new partition is assembled complete in the meta area and renamed
into the root as one directory. Partition metadata, then root checkpoints, then the ingest
history record come last. A journal (the serialized plan) is written before the first rename;
`recover_interrupted_publish` replays it: every step is idempotent, so it completes the publish,
or rolls it back if another process already undid it.
"""
