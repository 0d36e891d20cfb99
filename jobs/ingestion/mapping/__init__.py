"""Mapping: source rows -> Kafka records (topic, partition, key, value, headers, timestamp).

Two twins with the same rules and the same error messages: `spark_mapping` as Spark SQL (with
`fields` and `checks`, its two stages) and `arrow_mapping` over Arrow batches in numpy for the
arrow task reader; `rules` holds what both apply. Imports only `config`.
"""
