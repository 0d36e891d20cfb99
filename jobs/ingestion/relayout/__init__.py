"""Relayout: the record shares later tasks staged as rows, encoded after the first share as one
writer would, so every split count gives the same bytes (a Spark stage for ingest, the driver's
threads for the data source's commit). Imports `tasks` and `staging`.
"""
