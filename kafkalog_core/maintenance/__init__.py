"""The rules the maintenance jobs apply to a log dir, on top of the storage engine in `log/`.

Retention (`retention`, over the header-only `segment_facts`), index and segment verification
(`verify`) and repair (`rebuild`), and the log cleaner's view of a partition (`cleaner_audit`,
`cleaner_facts`). Imports `log/` and `record/`; `log/` never imports it.
"""
