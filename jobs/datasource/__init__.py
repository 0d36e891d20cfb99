"""`format("kafkalog")`: options, planning, the task-side decode, batch and streaming readers,
and the writer (`df.write`).

The public entry is the top-level `pyspark_kafkalog` module (`DefaultSource`, `register`).
"""
