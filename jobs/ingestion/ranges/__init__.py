"""Ranges: the range mode's task bounds.

`bounds` routes a sample of keys to tasks for Spark's range mode; `cuts` holds the quantile
cuts both range modes use, moved to a partition's end when one is near. Imports `config` and
`mapping`.
"""
