"""Run: what a run keeps beside the output root and shares with every job that writes it.

The meta area and the ingest errors (`meta`), the run lock (`lock`) and the ingest history
(`history`: one Delta row per run, the source of each topic's settings). The bottom of the
ingest job: imports nothing of it, and the data source and maintenance jobs use it too.
"""
