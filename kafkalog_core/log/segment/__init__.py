"""A log segment: one `.log` file and its indexes (KAFKA_LOG_FACTS.md §3, §5).

`log_segment.LogSegment` holds its files and state; its jobs live in base classes: `append`
(Kafka's index rule), `reads` (offset and time lookups), `recovery` (rebuild the indexes from the
log), `state` (the attributes they share). `scan` is the read-only batch walk recovery uses.
"""
