"""`df.write.format("kafkalog")`: the Kafka sink's input, the ingest job's bytes and commit.

Input columns as Spark's Kafka sink takes them: `value` (required), `key`, `topic`,
`partition`, `headers`, `timestamp` (optional). The `topic` option overrides the column, as in
Spark. kafkalog's own options mirror the ingest YAML: `topic_defaults.partitions`,
`topic_defaults.config.<Kafka setting>`, `topics.<name>.partitions`,
`topics.<name>.config.<Kafka setting>`, `topics.<name>.topic_id` (the target cluster's id;
else an existing partition's, else derived from the name, as for ingest), and `runId`.

How a write goes. A task cannot know where its records land in a partition (Spark gives no
counting pass before the write), so task 0 stages its share of each partition as segments at
offset 0, with the ingest job's own writer (`write_task_direct`: same encoder, same rolls and
indexes), and every later task stages its share as records (`jobs.ingestion.tasks.record_share`: a
batch of one writer must not end where a task's share ends). The driver's `commit`
(`jobs.ingestion.commit.run`: the ingest job's sequence, under the root's run lock) orders a
partition's shares by task and places them (`commit.place_ranges`: task 0's segments moved by
an 8-byte write per batch and new file names, or continuing the published last segment when
that has room, as the ingest job's), encodes each partition's record shares after its first
share as one writer would (`jobs.ingestion.relayout.shares`: so 8 tasks give the bytes of 1, and a
partition about ceil(bytes / segment.bytes) + 1 new segments) and publishes with the ingest
job's protocol. An aborted or failed job publishes nothing, and a run id already committed is a
no-op. Records of a partition keep the DataFrame's order within each task, tasks follow their
partition index.

Where the encode runs. Spark runs `commit` in a Python worker on the driver, with no
SparkSession, so the relayout runs there on a thread pool (`thread_runner`, a partition per
thread, up to one per core): the driver encodes every later task's rows, about (tasks - 1) /
tasks of a big write (all of a partition task 0 holds none of). The ingest job runs the same
relayout as a Spark stage on the executors (`spark_runner`): for big writes on a cluster,
ingest the data as a table or files rather than through `df.write`.

Modes (Spark hands a Python data source only `overwrite: bool`): `append` continues existing
partitions. `overwrite` replaces the topics the write names (the
`topic` option) or carries rows for: their partition dirs, whatever their count, are retired
inside the same journaled publish that renames the new ones in (`commit/retire.py`), offsets
start at 0 again, the topic id is kept (or `topics.<name>.topic_id`), other topics are untouched.
Either mode leaves every partition of a topic it writes or replaces as a dir, empty where no row
went, in the same publish (`commit.plan_publish`'s `partition_counts`): the next append reads
the count from the dirs.
Spark refuses `errorifexists` (its default) and `ignore` itself for Python data sources
(UNSUPPORTED_DATA_SOURCE_SAVE_MODE) before any of this code runs.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from jobs.datasource.options import is_connection_option, warn_ignored
from jobs.datasource.slices import LOG
from jobs.ingestion.commit.plan import RunInfo, plan_publish
from jobs.ingestion.commit.publish import publish
from jobs.ingestion.commit.run import open_run, place_staged, segments_to_continue
from jobs.ingestion.commit.state import scan_existing_state
from jobs.ingestion.commit.topic_ids import check_configured_topic_ids, topic_ids_for
from jobs.ingestion.mapping.arrow_mapping import (
    HEADERS_TYPE,
    as_bytes,
    checked,
    int32_partitions,
    map_batch,
    mapping_input,
    no_headers,
)
from jobs.ingestion.mapping.rules import MappingRules, TopicRules
from jobs.ingestion.relayout.shares import RelayoutReport, relayout, thread_runner
from jobs.ingestion.staging.task_staging import TaskManifest, staging_root
from jobs.ingestion.tasks.planner import ProvisionalPlan
from jobs.ingestion.tasks.writer import (
    DEFAULT_BATCH_BYTES,
    PerTopic,
    WriterSettings,
    write_task_direct,
)
from jobs.schemas.settings import SchemaSettings, settings_from_options
from kafkalog_core.config import LogConfig
from kafkalog_core.errors import ConfigError, KafkaLogError
from kafkalog_core.log.checkpoints import is_usable_topic_id, topic_id_from_str, topic_id_to_str
from kafkalog_core.log.names import live_partition_dirs, partition_dir_name
from kafkalog_core.log.partition.append import batch_options_for
from kafkalog_core.schema.encoding import Encoding

LEADER_EPOCH = 0  # as the ingest job: a fresh topic's first leader


@dataclass(frozen=True)
class WriteOptions:
    """The parsed options (small and picklable: shipped to every task)."""

    root: str
    run_id: str
    topic: str | None
    defaults: tuple[int, dict[str, Any]] | None  # (partitions, settings) for any topic
    topics: dict[str, tuple[int, dict[str, Any]]]
    started_ms: int
    topic_ids: dict[str, str]  # topics.<name>.topic_id: the target cluster's ids
    # key.* / value.*: columns written in a schema's format (their settings, then, once the
    # driver has resolved them against the DataFrame's types, their encodings)
    formats: tuple[SchemaSettings, ...] = ()
    encodings: dict[str, Encoding] = dataclasses.field(default_factory=dict)
    given_partitions: dict[str, int] = dataclasses.field(default_factory=dict)  # topics.<t>.

    def log_config(self, topic: str) -> LogConfig:
        partitions, settings = self.topics.get(topic) or self.defaults or (1, {})
        return LogConfig.from_dict(settings)

    def partitions(self, topic: str) -> int:
        return (self.topics.get(topic) or self.defaults or (1, {}))[0]


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """The writer's options; an unknown or bad one is a ConfigError naming it."""
    root = options.get("path")
    if not root:
        raise ConfigError('df.write.format("kafkalog") needs a path: .save("/data/kafka-logs")')
    defaults: dict[str, Any] = {}
    topics: dict[str, dict[str, Any]] = {}
    partitions: dict[str | None, int] = {}
    run_id = None
    topic = None
    topic_ids: dict[str, str] = {}
    formats = settings_from_options(options)
    ignored: list[str] = []
    for name, value in options.items():
        lower = name.lower()
        if lower == "path" or lower.split(".", 1)[0] in ("key", "value"):
            continue
        if is_connection_option(name):  # format("kafka")'s producer settings
            ignored.append(name)
            continue
        if lower == "topic":
            topic = value
        elif lower == "runid":
            run_id = value
        elif lower == "topic_defaults.partitions":
            partitions[None] = _count(name, value)
        elif lower.startswith("topic_defaults.config."):
            defaults[name[len("topic_defaults.config.") :]] = value
        elif lower.startswith("topics."):
            rest = name[len("topics.") :]
            if rest.endswith(".partitions"):
                partitions[rest[: -len(".partitions")]] = _count(name, value)
            elif rest.endswith(".topic_id"):
                topic_ids[rest[: -len(".topic_id")]] = _topic_id(name, value)
            elif ".config." in rest:
                topic_name, setting = rest.split(".config.", 1)
                topics.setdefault(topic_name, {})[setting] = value
            else:
                raise ConfigError(f"unknown kafkalog write option {name!r}")
        else:
            raise ConfigError(
                f"unknown kafkalog write option {name!r} (known: topic, runId, "
                "topic_defaults.partitions, topic_defaults.config.<setting>, "
                "topics.<name>.partitions, topics.<name>.config.<setting>, topics.<name>.topic_id, "
                "key.<format setting>, value.<format setting>)"
            )
    warn_ignored(ignored, "they configure a Kafka producer; a log dir is written without one")
    for name, settings in [("topic_defaults", defaults), *topics.items()]:
        try:
            LogConfig.from_dict(settings)
        except ConfigError as e:
            raise ConfigError(f"option {name}.config: {e}") from None
    names = set(topics) | {t for t in partitions if t is not None}
    per_topic = {
        t: (partitions.get(t, partitions.get(None, 1)), {**defaults, **topics.get(t, {})})
        for t in names
    }
    return WriteOptions(
        root=str(Path(root).absolute()),
        run_id=run_id or f"write-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{time.time_ns()}",
        topic=topic,
        defaults=(partitions.get(None, 1), defaults),
        topics=per_topic,
        started_ms=int(time.time() * 1000),
        topic_ids=topic_ids,
        formats=formats,
        given_partitions={t: n for t, n in partitions.items() if t is not None},
    )


def existing_partition_counts(root: str | Path) -> dict[str, int]:
    """Each topic's partition count in a log dir, from its partition dirs (highest + 1): what a
    producer learns from the cluster's metadata."""
    if not Path(root).is_dir():
        return {}
    return _partition_counts(
        (topic, partition) for topic, partition, _ in live_partition_dirs(root)
    )


def _partition_counts(partitions: Iterable[tuple[str, int]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for topic, partition in partitions:
        counts[topic] = max(counts.get(topic, 0), partition + 1)
    return counts


def _count_mismatch(topic: str, given: int, found: int, root: str) -> ConfigError:
    return ConfigError(
        f"option topics.{topic}.partitions={given}: topic {topic!r} has {found} partitions in "
        f"{root}; an append keeps a topic's partition count (leave the option out, or overwrite)"
    )


def with_existing_partitions(options: WriteOptions, overwrite: bool) -> WriteOptions:
    """An existing topic's partition count for the keyed rows, as a producer's default
    partitioner takes it from the cluster: murmur2(key) % the real count. Appending with another
    explicit count is refused (Kafka never shrinks a topic, and growing one moves keys); an
    overwrite replaces the topic and may give it another count."""
    counts = existing_partition_counts(options.root)
    topics = dict(options.topics)
    default_settings = options.defaults[1] if options.defaults else {}
    for topic, found in counts.items():
        given = options.given_partitions.get(topic)
        if given is not None and given != found:
            if overwrite:
                continue
            raise _count_mismatch(topic, given, found, options.root)
        topics[topic] = (found, topics.get(topic, (found, dict(default_settings)))[1])
    return dataclasses.replace(options, topics=topics)


def resolve_encodings(options: WriteOptions, schema: Any) -> WriteOptions:
    """The formats resolved against the DataFrame's column types (driver side: a registry is
    asked here, once per write); the options the tasks get."""
    if not options.formats:
        return options
    from pyspark.sql.pandas.types import to_arrow_type

    from jobs.schemas.resolve import resolve_encoding

    encodings = {}
    for settings in options.formats:
        if settings.field not in schema.fieldNames():
            raise ConfigError(
                f"{settings.field}.format={settings.format}: the DataFrame has no "
                f"{settings.field!r} column"
            )
        arrow_type = to_arrow_type(schema[settings.field].dataType, timezone="UTC")
        encodings[settings.field] = resolve_encoding(
            settings, options.topic, arrow_type, settings.field
        )
    return dataclasses.replace(options, encodings=encodings)


def _topic_id(name: str, value: str) -> str:
    try:
        parsed = topic_id_from_str(value)
    except (KafkaLogError, ValueError) as e:
        raise ConfigError(f"option {name}={value!r}: not a Kafka topic id ({e})") from None
    if not is_usable_topic_id(parsed):
        raise ConfigError(f"option {name}={value!r}: Kafka reserves this topic id")
    return topic_id_to_str(parsed)


def _count(name: str, value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        raise ConfigError(f"option {name}={value!r}: expected a partition count") from None
    if count < 1:
        raise ConfigError(f"option {name}={value!r}: a topic has at least one partition")
    return count


def _rules(options: WriteOptions, by_key: bool) -> MappingRules:
    def rules(partitions: int, settings: dict[str, Any]) -> TopicRules:
        config = LogConfig.from_dict(settings)
        uncompressed = config.codec is None or int(config.codec) == 0
        return TopicRules(
            partitions=partitions,
            compact=bool(config.compact),
            log_append_time=config.message_timestamp_type == "LogAppendTime",
            max_message_bytes=int(config.max_message_bytes) if uncompressed else None,
        )

    return MappingRules(
        topics={t: rules(*spec) for t, spec in options.topics.items()},
        defaults=None if options.defaults is None else rules(*options.defaults),
        by_key=by_key,
        null_keys="round_robin",
        null_partition_by_key=True,
    )


def _mapping_input(
    batch: pa.RecordBatch, options: WriteOptions, task_index: int, first_row: int
) -> pa.RecordBatch:
    """The sink's columns as the mapping's input (topic, key, value, headers, timestamp ms)."""
    n = batch.num_rows
    names = batch.schema.names  # the columns' types were checked on the driver (schema.py)
    if options.topic is not None:
        topic = pa.repeat(pa.scalar(options.topic, pa.string()), n)
    else:
        topic = batch.column("topic").cast(pa.string())
    key = _bytes(batch, "key", options) if "key" in names else pa.nulls(n, pa.binary())
    value = _bytes(batch, "value", options)
    if "timestamp" in names:  # the sink's timestamp column; null means "now", as a producer
        timestamp = _millis(batch.column("timestamp"), options.started_ms)
    else:
        timestamp = pa.array(np.full(n, options.started_ms, dtype=np.int64))
    return mapping_input(
        {
            "topic": topic,
            "key": key,
            "value": value,
            "headers": batch.column("headers").cast(HEADERS_TYPE)
            if "headers" in names
            else no_headers(n),
            "timestamp": timestamp,
            "partition": int32_partitions(batch.column("partition"))
            if "partition" in names
            else pa.nulls(n, pa.int32()),
        },
        task_index,
        first_row,
    )


def _bytes(batch: pa.RecordBatch, name: str, options: WriteOptions) -> pa.Array:
    """A key or value column as record bytes: encoded in its format, else as the Kafka sink
    takes it (binary or string)."""
    encoding = options.encodings.get(name)
    column = batch.column(name)
    if encoding is None:
        return as_bytes(column)
    encoded = encoding.encode(column)
    return encoded if encoded.type == pa.binary() else encoded.cast(pa.binary())


def _millis(column: pa.Array, null_ms: int) -> pa.Array:
    """Epoch ms of Spark's microsecond timestamps, floored (a cast to ms would refuse
    sub-millisecond values), or of a long column of epoch ms; null is `null_ms`."""
    if pa.types.is_integer(column.type):  # epoch milliseconds already
        millis = column.cast(pa.int64())
        return millis.fill_null(null_ms) if millis.null_count else millis
    micros = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    micros = micros.fill_null(null_ms * 1000) if micros.null_count else micros
    return pa.array(np.floor_divide(micros.to_numpy(), 1000))


def _settings(options: WriteOptions) -> WriterSettings:
    configs = PerTopic(options.log_config)
    return WriterSettings(
        output_root=options.root,
        run_id=options.run_id,
        configs=configs,
        batch_options=PerTopic(
            lambda t: batch_options_for(
                configs[t],
                leader_epoch=LEADER_EPOCH,
                now_ms=options.started_ms,
                max_batch_bytes=DEFAULT_BATCH_BYTES,
            )
        ),
        leader_epoch=LEADER_EPOCH,
    )


@dataclass
class KafkaLogCommitMessage(WriterCommitMessage):
    manifests: list[str]  # TaskManifest JSON, one per (topic, partition) this task staged


class KafkaLogWriter(DataSourceArrowWriter):
    """Tasks stage at provisional offsets; `commit` moves them into place and publishes."""

    def __init__(
        self, options: WriteOptions, has_partition_column: bool, overwrite: bool = False
    ) -> None:
        self.options = options
        self.by_key = not has_partition_column
        self.overwrite = overwrite

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaLogCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        task_index = context.partitionId() if context else 0
        attempt = f"{context.stageId()}.{context.attemptNumber()}" if context else "0"
        rules = _rules(self.options, self.by_key)
        cache: dict[str, Any] = {}

        def records() -> Iterator[pa.RecordBatch]:
            row = 0
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                source = _mapping_input(batch, self.options, task_index, row)
                row += batch.num_rows
                mapped = checked(map_batch(source, rules, cache))
                yield mapped.select(["topic", "partition", "key", "value", "timestamp", "headers"])

        settings = _settings(self.options)
        manifests = write_task_direct(records(), task_index, attempt, ProvisionalPlan(), settings)
        return KafkaLogCommitMessage([m.to_json() for m in manifests])

    def commit(self, messages: list[KafkaLogCommitMessage | None]) -> None:
        manifests = [
            TaskManifest.from_json(text) for m in messages if m is not None for text in m.manifests
        ]
        commit_write(self.options, manifests, overwrite=self.overwrite)

    def abort(self, messages: list[KafkaLogCommitMessage | None]) -> None:
        shutil.rmtree(staging_root(self.options.root, self.options.run_id), ignore_errors=True)


def _check_partition_counts(
    options: WriteOptions, manifests: list[TaskManifest], found: Mapping[tuple[str, int], Any]
) -> None:
    """Under the run lock: a topic another write created or grew since this one was planned
    would get keys placed for the wrong count; refused, nothing published."""
    counts = _partition_counts(found)
    for topic in sorted({m.topic for m in manifests}):
        if topic in counts and counts[topic] != options.partitions(topic):
            raise ConfigError(
                f"topic {topic!r} has {counts[topic]} partitions in {options.root} now, this "
                f"write placed its keys for {options.partitions(topic)}: nothing was published "
                "(run it again)"
            )


def commit_write(
    options: WriteOptions, manifests: list[TaskManifest], *, overwrite: bool = False
) -> RelayoutReport | None:
    """Order each partition's staged shares by task, move them into place, lay each partition
    out as one writer would, publish; what the relayout saved (None: the run id was committed).

    With `overwrite` the written topics' existing partitions are left out of the state (the
    shares start at offset 0) and named in the plan as retired: the publish swaps them out.
    """
    with open_run(Path(options.root), options.run_id) as run:
        if run.recovered:
            LOG.warning("kafkalog: an interrupted publish was %s", run.recovered)
        if run.committed:  # a no-op, as for the ingest job; the tasks' staging goes
            shutil.rmtree(staging_root(run.root, options.run_id), ignore_errors=True)
            return None
        found = scan_existing_state(run.root)
        replaced = {m.topic for m in manifests} | ({options.topic} if options.topic else set())
        if not overwrite:
            replaced = set()
            _check_partition_counts(options, manifests, found)
        state = {tp: s for tp, s in found.items() if tp[0] not in replaced}
        retired = tuple(partition_dir_name(*tp) for tp in found if tp[0] in replaced)
        check_configured_topic_ids(options.topic_ids, state)
        settings = dataclasses.replace(
            _settings(options),
            continue_segments=segments_to_continue(
                state, lambda t: options.log_config(t).segment_bytes
            ),
        )
        placed = place_staged(
            manifests, {tp: s.log_end_offset for tp, s in state.items()}, settings
        )
        placed, relaid = relayout(placed, settings, thread_runner(settings))
        topics = {m.topic for m in placed}
        # every partition of a topic written or replaced, empty where no row went (`plan_publish`)
        counts = {t: options.partitions(t) for t in topics | replaced}
        ids = topic_ids_for(counts, found, options.topic_ids)
        info = RunInfo(
            source="dataframe",
            started_at_ms=options.started_ms,
            description='df.write.format("kafkalog")',
            topic_configs={
                t: options.log_config(t).to_dict(non_default=True) for t in sorted(counts)
            },
        )
        plan = plan_publish(
            placed,
            state,
            output_root=run.root,
            run_id=options.run_id,
            run_info=info,
            topic_ids=ids,
            retired=retired,
            partition_counts=counts,
        )
        if options.encodings:  # the schemas the values were framed with stay with the output
            from jobs.schemas.resolve import record_writer_schemas
            from jobs.schemas.store import WriterSchemaStore

            framed = [(t, e) for t in sorted(topics) for e in options.encodings.values()]
            record_writer_schemas(WriterSchemaStore.of_output(run.root), framed)
        publish(plan)
    # The commit runs in a Python worker, whose stderr would be a red block under every write
    # in a notebook: the relayout's summary is a log record, for whoever configures logging.
    LOG.info("kafkalog: run %s: %s", options.run_id, relaid.describe())
    return relaid


# Spark sets these on every task of a streaming query's micro-batch (StreamExecution); the
# query id is kept in the checkpoint, so a restarted query replays a batch with the same ones.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def stream_run_id(prefix: str | None) -> str:
    """The run id of the micro-batch this task writes: `<runId option or stream-<query id>>-
    batch-<batch id>`, the same when Spark replays the batch, so its commit is a no-op then."""
    from pyspark import TaskContext

    context = TaskContext.get()
    query = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
    batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
    if query is None or batch is None:
        raise KafkaLogError(
            'kafkalog: writeStream.format("kafkalog") runs in a streaming query\'s micro-batch '
            f"(no {QUERY_ID_PROPERTY} / {BATCH_ID_PROPERTY} on this task)"
        )
    return f"{prefix or 'stream-' + query}-batch-{batch}"


class KafkaLogStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("kafkalog")`: each micro-batch is one `df.write` (the same tasks,
    the same commit), whose run id is the query's and the batch's: exactly once per batch."""

    def __init__(self, options: WriteOptions, has_partition_column: bool, run_prefix: str | None):
        self.options = options
        self.has_partition_column = has_partition_column
        self.run_prefix = run_prefix

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaLogCommitMessage:
        options = dataclasses.replace(
            self.options,
            run_id=stream_run_id(self.run_prefix),
            started_ms=int(time.time() * 1000),
        )
        return KafkaLogWriter(options, self.has_partition_column).write(iterator)

    def commit(self, messages: list[KafkaLogCommitMessage | None], batchId: int) -> None:  # noqa: N803
        manifests = [
            TaskManifest.from_json(text) for m in messages if m is not None for text in m.manifests
        ]
        runs = {m.run_id for m in manifests}
        if not runs:
            return  # an empty micro-batch: nothing staged, nothing to publish
        if len(runs) > 1:
            raise KafkaLogError(f"kafkalog: micro-batch {batchId} staged as runs {sorted(runs)}")
        commit_write(dataclasses.replace(self.options, run_id=runs.pop()), manifests)

    def abort(self, messages: list[KafkaLogCommitMessage | None], batchId: int) -> None:  # noqa: N803
        for run_id in {
            TaskManifest.from_json(text).run_id
            for m in messages
            if m is not None
            for text in m.manifests
        }:
            shutil.rmtree(staging_root(self.options.root, run_id), ignore_errors=True)
