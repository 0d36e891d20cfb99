"""`format("kafkalog")`: Kafka log dirs as a Spark data source with the Kafka source's options."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from jobs.datasource.options import parse_read_options
from jobs.datasource.reader import KafkaLogFilteringReader, KafkaLogReader, planning_filter_pushdown
from jobs.datasource.scan import kafka_schema_ddl
from kafkalog_core.errors import KafkaLogError

__all__ = ["KafkaLogDataSource", "WriteNotSupportedError"]


class WriteNotSupportedError(KafkaLogError):
    """`df.write.format("kafkalog")` is not built yet (the ingest job writes log dirs)."""


class KafkaLogDataSource(DataSource):
    """Reads (batch and streaming) Kafka log dirs; options as Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return "kafkalog"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return kafka_schema_ddl(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_read_options(self.options)
        if planning_filter_pushdown():
            return KafkaLogFilteringReader(options)
        return KafkaLogReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        from jobs.datasource.stream import KafkaLogStreamReader

        return KafkaLogStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from jobs.datasource.writer import KafkaLogWriter, parse_write_options

        if overwrite:
            raise WriteNotSupportedError(
                'kafkalog: mode("overwrite") is not supported: a Kafka log is append-only '
                '(delete the log dir or write to a new one); use mode("append")'
            )
        return KafkaLogWriter(parse_write_options(self.options), "partition" in schema.fieldNames())
