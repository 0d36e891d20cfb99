"""A partition directory as a log (KAFKA_LOG_FACTS.md §5, §6): `partition_log.PartitionLog`
holds its segments; appends (`append`), reads (`reads`) and the state they share (`state`)
are its base classes.
"""
