"""Source: which files a source has and how the arrow task reader reads them.

`fs` opens local paths and URIs as pyarrow file systems, `table_files` lists a catalog table's
or Delta table's files with their partition values, `splits` plans Spark's file splits (as the
tasks), `pieces` names what one task reads, and `arrow_reader` plans and reads mapped Arrow
batches. Imports `config` and `mapping`; knows nothing of writing.
"""
