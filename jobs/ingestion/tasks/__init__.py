"""Tasks: the write pass inside Spark tasks.

`planner` says which share of a partition a task writes in place and which it stages as rows,
`writer` turns records into segments (range and direct modes), `record_share` stages a later
share's rows, `arrow_tasks` runs the arrow reader's tasks, and `arrow_range` with
`arrow_range_keys` is the range mode on that reader (sorted runs exchanged through the staging).
Imports every earlier stage and `staging`.
"""
