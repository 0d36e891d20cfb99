"""Config: an ingest YAML file -> a checked, frozen `IngestConfig`.

Owns the file's sections (`topics`, `mapping`, `values`) and their validation, so every later
stage reads settings that are already known to be good. Imports nothing of the ingest job.
"""
