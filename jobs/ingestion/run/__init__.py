"""Run: what a run keeps beside the output root and shares with every job that writes it.

The ingest errors (`meta`), the ingest history (`history`: one Delta row per run, the source of
each topic's settings) and where the tasks can reach the root (`reach`); the meta area's layout
and the run lock are the core's (`kafkalog_core.root`), which `kafkalog place` takes too. The
bottom of the ingest job: imports nothing of it, and the data source and maintenance jobs use it.
"""
