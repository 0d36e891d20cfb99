"""The three indexes of a segment (KAFKA_LOG_FACTS.md §3, §4): `offset_index` (.index),
`time_index` (.timeindex), `txn_index` (.txnindex), and the file handling they share
(`index_file`).
"""
