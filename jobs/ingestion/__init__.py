"""The ingest job's stages, one package each, in the order a run uses them.

    config -> mapping -> source -> ranges -> tasks -> relayout -> commit

`config` reads the YAML, `mapping` turns source rows into records (Spark SQL or Arrow), `source`
finds and reads the source's files, `ranges` plans the range mode's task bounds, `tasks` writes
segments inside Spark tasks, `relayout` encodes the shares a later task staged as rows, and
`commit` publishes what the tasks staged. Two packages sit below them all: `staging` (the task
attempt directories and manifests that carry work from the tasks to the commit) and `run` (the
meta area, run lock and ingest history that ingest, the data source and the maintenance jobs
share). A package imports only the packages before it and those two; `tests/record/
test_import_graph.py` holds the order.
"""
