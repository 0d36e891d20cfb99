"""Staging: where a task attempt writes and how it tells the driver what it wrote.

The task staging directories in the meta area, the `TaskManifest` each attempt finalizes, and the
file helpers (copy, CRC, fsync) the commit reuses. Shared by `tasks` (which write here) and
`commit` (which publishes from here); imports only `run`.
"""
