"""`format("kafkalog")`: Kafka log dirs as a Spark data source with the Kafka source's options.

Spark instantiates the source and calls `schema()` in a fresh Python worker on every `load()`,
and plans in another: the readers and the writer are imported where they are needed, so the
schema call pays only for pyspark's own imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from jobs.datasource.one_line import one_line_errors
from jobs.datasource.schema import (
    SEGMENTS_SCHEMA_DDL,
    SEGMENTS_VIEW,
    decodes,
    kafka_schema_ddl,
    kafka_schema_fields,
    view_of,
)

if TYPE_CHECKING:
    from jobs.datasource.decoded import DecodedColumns

__all__ = ["KafkaLogDataSource"]


class KafkaLogDataSource(DataSource):
    """Reads (batch and streaming) and writes Kafka log dirs; options as Spark's Kafka source.

    `option("view", "segments")` reads a row per segment instead of a row per record.
    """

    @classmethod
    def name(cls) -> str:
        return "kafkalog"

    def schema(self) -> str | StructType:
        with one_line_errors():
            return self._schema()

    def _schema(self) -> str | StructType:
        if view_of(self.options) == SEGMENTS_VIEW:
            return SEGMENTS_SCHEMA_DDL  # (reader() refuses a view it does not know)
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        if not decodes(self.options):
            return kafka_schema_ddl(include)
        # Decoded columns: their types come from the schemas, resolved here once (the registry
        # is asked now); Spark pickles this instance after schema() and plans with it.
        decoded = self._decoded()
        assert decoded is not None
        return StructType(kafka_schema_fields(include) + decoded.spark_fields())

    def _decoded(self) -> DecodedColumns | None:
        """The decoded columns' plan, resolved once per instance (None: nothing decoded)."""
        if not decodes(self.options):
            return None
        if getattr(self, "_decoded_plan", None) is None:
            from jobs.datasource.decoded import plan_decoded
            from jobs.datasource.options import parse_read_options

            self._decoded_plan = plan_decoded(parse_read_options(self.options))
        return self._decoded_plan

    def reader(self, schema: StructType) -> DataSourceReader:
        with one_line_errors():
            return self._reader()

    def _reader(self) -> DataSourceReader:
        from jobs.datasource.options import parse_read_options, parse_segments_options, read_view

        if read_view(self.options) == SEGMENTS_VIEW:
            from jobs.datasource.segments import SegmentsReader

            return SegmentsReader(parse_segments_options(self.options))
        from jobs.datasource.reader import (
            KafkaLogFilteringReader,
            KafkaLogReader,
            planning_filter_pushdown,
        )

        options = parse_read_options(self.options)
        if planning_filter_pushdown():
            return KafkaLogFilteringReader(options, self._decoded())
        return KafkaLogReader(options, self._decoded())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        from jobs.datasource.options import parse_read_options
        from jobs.datasource.stream import KafkaLogStreamReader

        return KafkaLogStreamReader(
            parse_read_options(self.options, streaming=True), self._decoded()
        )

    def _write_options(
        self, schema: StructType, overwrite: bool, given: dict[str, str] | None = None
    ):  # -> WriteOptions
        """The write's options checked against the DataFrame, on the driver, before any task."""
        from jobs.datasource.sink_columns import check_sink_schema
        from jobs.datasource.writer import (
            parse_write_options,
            resolve_encodings,
            with_existing_partitions,
        )

        parsed = parse_write_options(self.options if given is None else given)
        options = with_existing_partitions(parsed, overwrite)
        check_sink_schema(schema, options.topic, {f.field for f in options.formats})
        return resolve_encodings(options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        with one_line_errors():
            return self._writer(schema, overwrite)

    def _writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from jobs.datasource.writer import KafkaLogWriter

        options = self._write_options(schema, overwrite)
        return KafkaLogWriter(options, "partition" in schema.fieldNames(), overwrite=overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        with one_line_errors():
            return self._stream_writer(schema, overwrite)

    def _stream_writer(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from jobs.datasource.writer import KafkaLogStreamWriter
        from kafkalog_core.errors import ConfigError

        if overwrite:
            raise ConfigError(
                'writeStream.format("kafkalog") appends each micro-batch: use outputMode("append")'
                ' (or "update"), as Spark\'s Kafka sink'
            )
        prefix = next((v for k, v in self.options.items() if k.lower() == "runid"), None)
        # Spark hands the sink the query's own options too
        given = {k: v for k, v in self.options.items() if k.lower() != "checkpointlocation"}
        options = self._write_options(schema, False, given)
        return KafkaLogStreamWriter(options, "partition" in schema.fieldNames(), prefix)
