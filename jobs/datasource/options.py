"""The options of `format("kafkalog")` reads, with the names and meanings of Spark's Kafka source.

Why one module: every option is checked once, on the driver, before any file is touched, and a
bad one is one `DataSourceOptionError` naming the option. Names are matched without regard to
case (Spark hands a data source its options lower-cased), but an unknown name is refused:
a misspelt `startingOffset` must not silently read the whole log.

Code copied from `format("kafka")` carries the broker's connection and the consumer's or
producer's settings (`kafka.bootstrap.servers`, `kafka.security.protocol`, `groupIdPrefix`...):
they mean nothing for files, so they are taken and named in one warning. `kafka.isolation.level`
keeps its meaning, and the `kafka.` settings Spark's connector itself refuses are refused here
too, with its reason.
"""

from __future__ import annotations

import json
import logging
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jobs.datasource.schema import RECORDS_VIEW, SEGMENTS_VIEW, VIEW_OPTION, view_of
from jobs.schemas.settings import SchemaSettings, settings_from_options
from kafkalog_core.errors import ConfigError

__all__ = [
    "EARLIEST",
    "LATEST",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "RECORDS_VIEW",
    "SEGMENTS_VIEW",
    "DataSourceOptionError",
    "OffsetBound",
    "ReadOptions",
    "SegmentsOptions",
    "Subscription",
    "offsets_from_json",
    "offsets_json",
    "parse_read_options",
    "parse_segments_options",
    "read_view",
]

TopicPartition = tuple[str, int]

EARLIEST = -2  # Kafka's ListOffsets EARLIEST_TIMESTAMP, the -2 of Spark's offset JSON
LATEST = -1  # LATEST_TIMESTAMP, the -1 of Spark's offset JSON
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"

# canonical names, as Spark's Kafka source spells them
PATH = "path"
SUBSCRIBE = "subscribe"
SUBSCRIBE_PATTERN = "subscribePattern"
ASSIGN = "assign"
STARTING_OFFSETS = "startingOffsets"
ENDING_OFFSETS = "endingOffsets"
STARTING_TIMESTAMP = "startingTimestamp"
ENDING_TIMESTAMP = "endingTimestamp"
STARTING_BY_TIMESTAMP = "startingOffsetsByTimestamp"
ENDING_BY_TIMESTAMP = "endingOffsetsByTimestamp"
STARTING_STRATEGY = "startingOffsetsByTimestampStrategy"
ISOLATION_LEVEL = "isolation.level"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
INCLUDE_HEADERS = "includeHeaders"
MAX_OFFSETS_PER_TRIGGER = "maxOffsetsPerTrigger"
MIN_OFFSETS_PER_TRIGGER = "minOffsetsPerTrigger"
MAX_TRIGGER_DELAY = "maxTriggerDelay"
MAX_RECORDS_PER_PARTITION = "maxRecordsPerPartition"
MIN_PARTITIONS = "minPartitions"
VIEW = VIEW_OPTION  # kafkalog's own: what a row is (RECORDS_VIEW, SEGMENTS_VIEW)
# kafkalog's own: decoded key/value columns (`key.format`, `value.schema_registry.url`, ...)
DECODE_ON_ERROR = "decode.onError"
DECODED_FIELDS = ("key", "value")

_KNOWN = {
    name.lower(): name
    for name in (
        PATH,
        SUBSCRIBE,
        SUBSCRIBE_PATTERN,
        ASSIGN,
        STARTING_OFFSETS,
        ENDING_OFFSETS,
        STARTING_TIMESTAMP,
        ENDING_TIMESTAMP,
        STARTING_BY_TIMESTAMP,
        ENDING_BY_TIMESTAMP,
        STARTING_STRATEGY,
        ISOLATION_LEVEL,
        FAIL_ON_DATA_LOSS,
        INCLUDE_HEADERS,
        MAX_OFFSETS_PER_TRIGGER,
        MIN_OFFSETS_PER_TRIGGER,
        MAX_TRIGGER_DELAY,
        MAX_RECORDS_PER_PARTITION,
        MIN_PARTITIONS,
        VIEW,
        DECODE_ON_ERROR,
    )
}
# Spark's Kafka source passes consumer settings as `kafka.<name>`; this one has a meaning here.
_ALIASES = {"kafka.isolation.level": ISOLATION_LEVEL}
# Spark's rule: on a batch read these are ignored with a warning
_STREAM_ONLY = (MAX_OFFSETS_PER_TRIGGER, MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY)
# Spark's Kafka source options about talking to a broker: nothing to do for files
_BROKER_ONLY = {
    name.lower(): name
    for name in (
        "kafkaConsumer.pollTimeoutMs",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
        "groupIdPrefix",
    )
}
# `kafka.` settings Spark's connector refuses, and why (KafkaSourceProvider's checks)
_SPARK_REFUSES = {
    "kafka.auto.offset.reset": "set the source option startingOffsets instead",
    "kafka.key.deserializer": "keys are bytes; deserialize them with DataFrame operations",
    "kafka.value.deserializer": "values are bytes; deserialize them with DataFrame operations",
    "kafka.enable.auto.commit": "offsets are kept in the streaming query's checkpoint",
    "kafka.interceptor.classes": "not supported by Spark's Kafka connector either",
    "kafka.key.serializer": "keys are written as bytes; serialize them with DataFrame operations",
    "kafka.value.serializer": "values are written as bytes; serialize them with DataFrame "
    "operations",
}
LOG = logging.getLogger("kafkalog.datasource")


class DataSourceOptionError(ConfigError):
    """An unknown option or a value `format("kafkalog")` cannot use; the message names the option."""


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: exactly one of Spark's subscribe / subscribePattern / assign."""

    kind: str  # SUBSCRIBE, SUBSCRIBE_PATTERN or ASSIGN
    topics: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str, partition: int) -> bool:
        if self.kind == SUBSCRIBE:
            return topic in self.topics
        if self.kind == SUBSCRIBE_PATTERN:
            assert self.pattern is not None
            return self.pattern.fullmatch(topic) is not None
        return (topic, partition) in self.assigned


@dataclass(frozen=True)
class OffsetBound:
    """One end of the offset range: earliest/latest, per-partition offsets, or timestamps.

    kind: "earliest", "latest", "offsets" (per_partition: offset, -2 earliest, -1 latest),
    "timestamp" (one timestamp for every partition) or "timestamps" (per_partition).
    """

    kind: str
    timestamp: int | None = None
    per_partition: Mapping[TopicPartition, int] = field(default_factory=dict)
    option: str = ""  # the option it came from, for messages


@dataclass(frozen=True)
class ReadOptions:
    path: str
    subscription: Subscription
    starting: OffsetBound
    ending: OffsetBound
    isolation_level: str = READ_UNCOMMITTED
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None  # with max_trigger_delay_ms: Spark's ReadMinRows
    max_trigger_delay_ms: int = 15 * 60 * 1000  # Spark's default, 15m
    max_records_per_partition: int | None = None  # an input partition reads at most this many
    min_partitions: int | None = None
    starting_timestamp_strategy: str = "error"  # or "latest"
    decoded: tuple[SchemaSettings, ...] = ()  # key / value columns to decode, in that order
    decode_on_error: str = "fail"  # or "null": null decoded value, the reason in decode_error

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED


def _bad(option: str, value: object, why: str) -> DataSourceOptionError:
    return DataSourceOptionError(f"kafkalog option {option}={value!r}: {why}")


def is_connection_option(name: str) -> bool:
    """A `format("kafka")` option about the broker or its clients, with no meaning for files
    (taken and named in a warning); one Spark's connector refuses raises here."""
    lowered = name.lower()
    if lowered in _SPARK_REFUSES:
        raise DataSourceOptionError(
            f"kafkalog: option {name!r} is not supported (as in Spark's Kafka connector): "
            f"{_SPARK_REFUSES[lowered]}"
        )
    return lowered.startswith("kafka.") or lowered in _BROKER_ONLY


def warn_ignored(names: list[str], why: str) -> None:
    """One warning naming every option taken but not used."""
    if names:
        message = f"kafkalog: ignoring options {', '.join(sorted(names))}: {why}"
        LOG.warning("%s", message)
        warnings.warn(message, stacklevel=3)


def _canonical(options: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    ignored: list[str] = []
    for raw, value in options.items():
        lowered = raw.lower()
        if lowered.split(".", 1)[0] in DECODED_FIELDS and "." in lowered:
            continue  # key.* / value.*: the decoded columns' settings (_decoded)
        name = _ALIASES.get(lowered) or _KNOWN.get(lowered)
        if name is None and is_connection_option(raw):
            ignored.append(raw)
            continue
        if name is None:
            known = ", ".join(sorted(_KNOWN.values()))
            raise DataSourceOptionError(
                f"kafkalog: unknown option {raw!r} (options are matched without case; known: "
                f"{known})"
            )
        out[name] = value
    warn_ignored(ignored, "they configure a Kafka client; a log dir is read without one")
    return out


def _bool(options: dict[str, str], name: str, default: bool) -> bool:
    if name not in options:
        return default
    value = options[name].strip().lower()
    if value not in ("true", "false"):
        raise _bad(name, options[name], "must be true or false")
    return value == "true"


def _positive_int(options: dict[str, str], name: str) -> int | None:
    if name not in options:
        return None
    try:
        value = int(options[name])
    except ValueError:
        raise _bad(name, options[name], "must be a positive integer") from None
    if value <= 0:
        raise _bad(name, options[name], "must be a positive integer")
    return value


_TIME_UNITS_MS = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}


def _duration_ms(options: dict[str, str], name: str, default: int) -> int:
    """Spark's time strings (`timeStringAsMs`): "15m", "30s", "100ms", a bare number in ms."""
    if name not in options:
        return default
    text = options[name].strip().lower()
    found = re.fullmatch(r"(\d+)\s*([a-z]*)", text)
    if found is None or found.group(2) not in ("", *_TIME_UNITS_MS):
        raise _bad(name, options[name], "expected a duration such as 15m, 30s or 500ms")
    return int(found.group(1)) * _TIME_UNITS_MS.get(found.group(2), 1)


def _json(options: dict[str, str], name: str) -> Any:
    try:
        return json.loads(options[name])
    except json.JSONDecodeError as error:
        raise _bad(name, options[name], f"is not JSON ({error})") from None


def _per_partition(options: dict[str, str], name: str) -> dict[TopicPartition, int]:
    """Spark's `{"topic": {"0": 23, "1": -1}}` form."""
    parsed = _json(options, name)
    if not isinstance(parsed, dict) or not parsed:
        raise _bad(name, options[name], 'expected {"topic": {"partition": value, ...}}')
    out: dict[TopicPartition, int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise _bad(name, options[name], f"topic {topic!r}: expected an object of partitions")
        for partition, value in partitions.items():
            try:
                p = int(partition)
            except ValueError:
                raise _bad(
                    name, options[name], f"partition {partition!r} is not a number"
                ) from None
            if not isinstance(value, int) or isinstance(value, bool):
                raise _bad(name, options[name], f"{topic}-{p}: {value!r} is not an integer")
            out[(topic, p)] = value
    return out


def _subscription(options: dict[str, str]) -> Subscription:
    given = [n for n in (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN) if n in options]
    if len(given) != 1:
        raise DataSourceOptionError(
            "kafkalog: exactly one of the options subscribe, subscribePattern, assign must be "
            f"given (got {', '.join(given) or 'none'})"
        )
    name = given[0]
    value = options[name]
    if name == SUBSCRIBE:
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise _bad(name, value, "no topic named")
        return Subscription(SUBSCRIBE, topics=topics)
    if name == SUBSCRIBE_PATTERN:
        if not value.strip():
            raise _bad(name, value, "no pattern given")
        try:  # trimmed, as Spark trims it
            return Subscription(SUBSCRIBE_PATTERN, pattern=re.compile(value.strip()))
        except re.error as error:
            raise _bad(name, value, f"not a regular expression ({error})") from None
    parsed = _json(options, name)
    if not isinstance(parsed, dict) or not parsed:
        raise _bad(name, value, 'expected {"topic": [0, 1], ...}')
    assigned: list[TopicPartition] = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise _bad(name, value, f"topic {topic!r}: expected a list of partition numbers")
        assigned.extend((topic, p) for p in partitions)
    return Subscription(ASSIGN, assigned=tuple(assigned))


def _offsets_bound(
    options: dict[str, str], name: str, default: str, streaming: bool
) -> OffsetBound:
    value = options.get(name, default).strip()
    if value.lower() in ("earliest", "latest"):
        kind = value.lower()
        if not streaming and name == STARTING_OFFSETS and kind == "latest":
            raise _bad(name, value, "latest is not allowed for a batch query (Spark's rule)")
        if name == ENDING_OFFSETS and kind == "earliest":
            raise _bad(name, value, "earliest is not allowed as an ending offset")
        return OffsetBound(kind, option=name)
    offsets = _per_partition(options, name)
    for (topic, p), offset in offsets.items():
        if offset < EARLIEST:
            raise _bad(name, value, f"{topic}-{p}: offset {offset} is below -2")
        if name == ENDING_OFFSETS and offset == EARLIEST:
            raise _bad(
                name, value, f"{topic}-{p}: -2 (earliest) is not allowed as an ending offset"
            )
        if not streaming and name == STARTING_OFFSETS and offset == LATEST:
            raise _bad(name, value, f"{topic}-{p}: -1 (latest) is not allowed for a batch query")
    return OffsetBound("offsets", per_partition=offsets, option=name)


def _timestamp_bound(options: dict[str, str], single: str, by_partition: str) -> OffsetBound | None:
    """Spark's precedence: the single timestamp wins over the per-partition one."""
    if single in options:
        try:
            ts = int(options[single])
        except ValueError:
            raise _bad(single, options[single], "must be epoch milliseconds") from None
        if ts < 0:
            raise _bad(single, options[single], "must not be negative")
        return OffsetBound("timestamp", timestamp=ts, option=single)
    if by_partition in options:
        stamps = _per_partition(options, by_partition)
        for (topic, p), ts in stamps.items():
            if ts < 0:
                raise _bad(by_partition, options[by_partition], f"{topic}-{p}: negative timestamp")
        return OffsetBound("timestamps", per_partition=stamps, option=by_partition)
    return None


def read_view(options: Mapping[str, str]) -> str:
    """The `view` option: RECORDS_VIEW (the default) or SEGMENTS_VIEW."""
    view = view_of(options)
    if view not in (RECORDS_VIEW, SEGMENTS_VIEW):
        raise _bad(VIEW, view, f"must be {RECORDS_VIEW} or {SEGMENTS_VIEW}")
    return view


def _path(opts: dict[str, str]) -> str:
    path = opts.get(PATH)
    if not path:
        raise DataSourceOptionError(
            "kafkalog: no log dir given: use load(<log dir>) or option('path', <log dir>)"
        )
    return path


def _decoded(options: Mapping[str, str]) -> tuple[tuple[SchemaSettings, ...], str]:
    """The `key.` / `value.` settings of decoded columns (their format named), and what a record
    that cannot be decoded does."""
    try:
        decoded = settings_from_options(options, reading=True)
    except ConfigError as e:
        raise DataSourceOptionError(f"kafkalog option {e}") from None
    on_error = (
        next((v for k, v in options.items() if k.lower() == DECODE_ON_ERROR.lower()), "fail")
        .strip()
        .lower()
    )
    if on_error not in ("fail", "null"):
        raise _bad(DECODE_ON_ERROR, on_error, "must be fail or null")
    return decoded, on_error


def parse_read_options(options: Mapping[str, str], *, streaming: bool = False) -> ReadOptions:
    """Check every option once and return them typed (DataSourceOptionError otherwise)."""
    opts = _canonical(options)
    decoded, on_error = _decoded(options)
    path = _path(opts)
    if streaming:
        if read_view(opts) != RECORDS_VIEW:
            raise _bad(
                VIEW, opts[VIEW], "a stream reads records; read the segments view with spark.read"
            )
        if ENDING_OFFSETS in opts or ENDING_TIMESTAMP in opts or ENDING_BY_TIMESTAMP in opts:
            ending_given = next(
                n for n in (ENDING_OFFSETS, ENDING_TIMESTAMP, ENDING_BY_TIMESTAMP) if n in opts
            )
            raise _bad(ending_given, opts[ending_given], "not allowed for a streaming query")
    else:
        # Spark's rule: a batch query warns and ignores them
        given = [name for name in _STREAM_ONLY if name in opts]
        warn_ignored(given, "they apply to streaming queries (readStream) only")
        for name in given:
            del opts[name]
    isolation = opts.get(ISOLATION_LEVEL, READ_UNCOMMITTED).strip().lower()
    if isolation not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise _bad(
            ISOLATION_LEVEL, opts[ISOLATION_LEVEL], "must be read_uncommitted or read_committed"
        )
    strategy = opts.get(STARTING_STRATEGY, "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise _bad(STARTING_STRATEGY, opts[STARTING_STRATEGY], "must be error or latest")
    starting = _timestamp_bound(opts, STARTING_TIMESTAMP, STARTING_BY_TIMESTAMP) or _offsets_bound(
        opts, STARTING_OFFSETS, "earliest" if not streaming else "latest", streaming
    )
    ending = (
        OffsetBound("latest", option=ENDING_OFFSETS)
        if streaming
        else _timestamp_bound(opts, ENDING_TIMESTAMP, ENDING_BY_TIMESTAMP)
        or _offsets_bound(opts, ENDING_OFFSETS, "latest", streaming)
    )
    return ReadOptions(
        path=path,
        subscription=_subscription(opts),
        starting=starting,
        ending=ending,
        isolation_level=isolation,
        fail_on_data_loss=_bool(opts, FAIL_ON_DATA_LOSS, True),
        include_headers=_bool(opts, INCLUDE_HEADERS, False),
        max_offsets_per_trigger=_positive_int(opts, MAX_OFFSETS_PER_TRIGGER),
        min_offsets_per_trigger=_positive_int(opts, MIN_OFFSETS_PER_TRIGGER),
        max_trigger_delay_ms=_duration_ms(opts, MAX_TRIGGER_DELAY, 15 * 60 * 1000),
        max_records_per_partition=_positive_int(opts, MAX_RECORDS_PER_PARTITION),
        min_partitions=_positive_int(opts, MIN_PARTITIONS),
        starting_timestamp_strategy=strategy,
        decoded=decoded,
        decode_on_error=on_error,
    )


@dataclass(frozen=True)
class SegmentsOptions:
    path: str
    subscription: Subscription


def parse_segments_options(options: Mapping[str, str]) -> SegmentsOptions:
    """The segments view's options: the path and which partitions (every one when no
    subscribe / subscribePattern / assign is given); the offset and record options do not apply."""
    opts = _canonical(options)
    path = _path(opts)
    if read_view(opts) != SEGMENTS_VIEW:
        raise _bad(VIEW, opts.get(VIEW, RECORDS_VIEW), f"expected {SEGMENTS_VIEW}")
    allowed = {PATH, VIEW, SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN}
    extra = sorted(set(opts) - allowed)
    if extra:
        raise _bad(extra[0], opts[extra[0]], f"does not apply to the {SEGMENTS_VIEW} view")
    if not {SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN} & set(opts):
        return SegmentsOptions(path, Subscription(SUBSCRIBE_PATTERN, pattern=re.compile(".*")))
    return SegmentsOptions(path, _subscription(opts))


def offsets_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka source offset form, `{"topic": {"0": 42}}` (a dict, JSON-ready)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(value: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    """The inverse of `offsets_json` (a streaming checkpoint's offsets)."""
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in value.items()
        for partition, offset in partitions.items()
    }
