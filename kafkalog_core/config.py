"""LogConfig: every topic-level log setting with Kafka's names, defaults and validation (§10).

Kafka rejects a bad topic config when the topic is created or altered; kafkalog has no broker in
front of it, so it must reject the same values itself, before a segment is written with them.
Attributes are snake_case (`segment_bytes`); keys of every mapping and file are Kafka's names
(`segment.bytes`). Values may be given typed (int/float/bool/list) or as strings, which are
parsed the way Kafka's ConfigDef parses them: decimal ints/longs, doubles, and the booleans
"true"/"false" (any case); lists are comma-separated.

Every invalid value raises `ConfigError` with one line naming the setting, the value and what is
allowed, e.g. `segment.bytes=10 is invalid: must be an int >= 14`.

Sources of values:
- `LogConfig.from_dict({"segment.bytes": "1024"})`
- `LogConfig.from_properties(path)`: a Java .properties file (`#`/`!` comments, `key=value`,
  `key: value` or `key value`, backslash continuations and escapes)
- `LogConfig.from_yaml(path)`: a mapping of Kafka names. If the top-level mapping has a `config`
  key, only that sub-mapping is read (so a topic/job YAML can carry its log config next to other
  things). Nested mappings are flattened with '.', so `segment: {bytes: 1024}` means
  `segment.bytes: 1024`.

Deliberate differences from Kafka: NaN is refused for min.cleanable.dirty.ratio (Kafka's range
check lets it through), and a YAML/JSON null is refused rather than meaning "default".
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kafkalog_core.errors import ConfigError
from kafkalog_core.properties import parse_properties, read_properties
from kafkalog_core.record.batch import Compression, TimestampType

__all__ = ["LONG_MAX", "LogConfig", "parse_properties"]

INT_MAX: Final = 2**31 - 1
INT_MIN: Final = -(2**31)
LONG_MAX: Final = 2**63 - 1
LONG_MIN: Final = -(2**63)

CLEANUP_POLICY_COMPACT: Final = "compact"
CLEANUP_POLICY_DELETE: Final = "delete"
COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES: Final = ("CreateTime", "LogAppendTime")

_INT_TEXT = re.compile(r"[+-]?[0-9]+")
# Java's Double.parseDouble accepts a trailing d/D/f/F and Infinity/NaN; underscores never.
_DOUBLE_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[dDfF]?")
_THROTTLED_ENTRY = re.compile(r"[0-9]+:[0-9]+")


# ---------------------------------------------------------------------------------------------
# the spec of one setting
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Spec:
    name: str  # Kafka's topic config name
    kind: str  # "int" | "long" | "double" | "boolean" | "string" | "list"
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    case_insensitive: bool = False
    also: tuple[int, ...] = ()  # extra single allowed values (gzip level -1)
    doc: str = ""

    def rule(self) -> str:
        """The allowed range in words, for error messages."""
        noun = {"int": "an int", "long": "a long", "double": "a double"}.get(self.kind)
        if self.kind == "boolean":
            return "must be true or false"
        if self.kind == "list" and self.choices:
            return "must be a comma-separated list of " + ", ".join(self.choices)
        if self.kind == "list":
            return "must be '*' or a comma-separated list of partition:brokerId"
        if self.choices:
            return "must be one of " + ", ".join(self.choices)
        if self.kind == "string":
            return "must be a non-empty string"
        prefix = "".join(f"{v} or " for v in self.also)
        if self.kind == "double" and self.lo is not None and self.hi is not None:
            return f"must be {noun} in [{float(self.lo)}, {float(self.hi)}]"
        if self.lo is not None and self.hi is not None:
            return f"must be {prefix}{noun} in [{_fmt(self.lo)}, {_fmt(self.hi)}]"
        if self.lo is not None:
            return f"must be {prefix}{noun} >= {_fmt(self.lo)}"
        return f"must be {noun}"


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 2**63 else str(x)


def _setting(name: str, kind: str, default: Any, **spec: Any) -> Any:
    return field(default=default, metadata={"spec": _Spec(name, kind, **spec)})


# ---------------------------------------------------------------------------------------------
# parsing one value the way ConfigDef.parseType does
# ---------------------------------------------------------------------------------------------
def _invalid(spec: _Spec, value: Any, why: str | None = None) -> ConfigError:
    shown = _show(value)
    return ConfigError(f"{spec.name}={shown} is invalid: {why or spec.rule()}")


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _parse_integer(spec: _Spec, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool):
        raise _invalid(spec, value)
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        number = int(value.strip())
    else:
        raise _invalid(spec, value)
    if not lo <= number <= hi:
        raise _invalid(spec, value)
    return number


def _parse_double(spec: _Spec, value: Any) -> float:
    if isinstance(value, bool):
        raise _invalid(spec, value)
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str) and _DOUBLE_TEXT.fullmatch(value.strip()):
        number = float(value.strip().rstrip("dDfF"))
    else:
        raise _invalid(spec, value)
    if math.isnan(number):
        raise _invalid(spec, value)
    return number


def _parse_boolean(spec: _Spec, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("true", "false"):
            return text == "true"
    raise _invalid(spec, value)


def _parse_list(spec: _Spec, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        text = value.strip()
        items = [] if not text else [item.strip() for item in text.split(",")]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise _invalid(spec, value)
    return tuple(items)


def _parse(spec: _Spec, value: Any) -> Any:
    """Typed, normalized value of one setting, range-checked; ConfigError otherwise."""
    if spec.kind in ("int", "long"):
        lo, hi = (INT_MIN, INT_MAX) if spec.kind == "int" else (LONG_MIN, LONG_MAX)
        number = _parse_integer(spec, value, lo, hi)
        if number in spec.also:
            return number
        if (spec.lo is not None and number < spec.lo) or (spec.hi is not None and number > spec.hi):
            raise _invalid(spec, value)
        return number
    if spec.kind == "double":
        number = _parse_double(spec, value)
        if (spec.lo is not None and number < spec.lo) or (spec.hi is not None and number > spec.hi):
            raise _invalid(spec, value)
        return number
    if spec.kind == "boolean":
        return _parse_boolean(spec, value)
    if spec.kind == "list":
        items = _parse_list(spec, value)
        if spec.choices:
            lowered = tuple(item.lower() for item in items)
            if any(item not in spec.choices for item in lowered):
                raise _invalid(spec, value)
            return lowered
        # throttled replicas: "*" alone, or partition:brokerId entries
        if items == ("*",) or all(_THROTTLED_ENTRY.fullmatch(i) for i in items):
            return items
        raise _invalid(spec, value)
    # string
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _invalid(spec, value)
    text = str(value).strip()
    if spec.choices:
        if spec.case_insensitive:
            text = text.lower()
        if text not in spec.choices:
            raise _invalid(spec, value)
    elif not text:
        raise _invalid(spec, value)
    return text


# ---------------------------------------------------------------------------------------------
# LogConfig
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LogConfig:
    """The topic-level log settings of one topic (Kafka's `LogConfig`), validated on creation."""

    segment_bytes: int = _setting("segment.bytes", "int", 1073741824, lo=14)
    segment_ms: int = _setting("segment.ms", "long", 604800000, lo=1)
    segment_jitter_ms: int = _setting("segment.jitter.ms", "long", 0, lo=0)
    segment_index_bytes: int = _setting("segment.index.bytes", "int", 10485760, lo=4)
    index_interval_bytes: int = _setting("index.interval.bytes", "int", 4096, lo=0)
    flush_messages: int = _setting("flush.messages", "long", LONG_MAX, lo=1)
    flush_ms: int = _setting("flush.ms", "long", LONG_MAX, lo=0)
    retention_bytes: int = _setting("retention.bytes", "long", -1)
    retention_ms: int = _setting("retention.ms", "long", 604800000, lo=-1)
    max_message_bytes: int = _setting("max.message.bytes", "int", 1048588, lo=0)
    delete_retention_ms: int = _setting("delete.retention.ms", "long", 86400000, lo=0)
    min_compaction_lag_ms: int = _setting("min.compaction.lag.ms", "long", 0, lo=0)
    max_compaction_lag_ms: int = _setting("max.compaction.lag.ms", "long", LONG_MAX, lo=1)
    file_delete_delay_ms: int = _setting("file.delete.delay.ms", "long", 60000, lo=0)
    min_cleanable_dirty_ratio: float = _setting(
        "min.cleanable.dirty.ratio", "double", 0.5, lo=0.0, hi=1.0
    )
    cleanup_policy: tuple[str, ...] = _setting(
        "cleanup.policy",
        "list",
        (CLEANUP_POLICY_DELETE,),
        choices=(CLEANUP_POLICY_COMPACT, CLEANUP_POLICY_DELETE),
        case_insensitive=True,
    )
    unclean_leader_election_enable: bool = _setting(
        "unclean.leader.election.enable", "boolean", False
    )
    min_insync_replicas: int = _setting("min.insync.replicas", "int", 1, lo=1)
    compression_type: str = _setting(
        "compression.type", "string", "producer", choices=COMPRESSION_TYPES, case_insensitive=True
    )
    compression_gzip_level: int = _setting(
        "compression.gzip.level", "int", -1, lo=1, hi=9, also=(-1,)
    )
    compression_lz4_level: int = _setting("compression.lz4.level", "int", 9, lo=1, hi=17)
    compression_zstd_level: int = _setting("compression.zstd.level", "int", 3, lo=-131072, hi=22)
    preallocate: bool = _setting("preallocate", "boolean", False)
    message_format_version: str = _setting("message.format.version", "string", "3.0-IV1")
    message_timestamp_type: str = _setting(
        "message.timestamp.type", "string", "CreateTime", choices=TIMESTAMP_TYPES
    )
    message_timestamp_difference_max_ms: int = _setting(
        "message.timestamp.difference.max.ms", "long", LONG_MAX, lo=0
    )
    message_timestamp_before_max_ms: int = _setting(
        "message.timestamp.before.max.ms", "long", LONG_MAX, lo=0
    )
    message_timestamp_after_max_ms: int = _setting(
        "message.timestamp.after.max.ms", "long", LONG_MAX, lo=0
    )
    message_downconversion_enable: bool = _setting("message.downconversion.enable", "boolean", True)
    leader_replication_throttled_replicas: tuple[str, ...] = _setting(
        "leader.replication.throttled.replicas", "list", ()
    )
    follower_replication_throttled_replicas: tuple[str, ...] = _setting(
        "follower.replication.throttled.replicas", "list", ()
    )
    remote_storage_enable: bool = _setting("remote.storage.enable", "boolean", False)
    local_retention_ms: int = _setting("local.retention.ms", "long", -2, lo=-2)
    local_retention_bytes: int = _setting("local.retention.bytes", "long", -2, lo=-2)
    remote_log_copy_disable: bool = _setting("remote.log.copy.disable", "boolean", False)
    remote_log_delete_on_disable: bool = _setting("remote.log.delete.on.disable", "boolean", False)

    def __post_init__(self) -> None:
        # Parse and normalize every field, so direct construction is checked like from_dict.
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _parse(f.metadata["spec"], getattr(self, f.name)))
        self._validate_cross_fields()

    def _validate_cross_fields(self) -> None:
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise ConfigError(
                f"min.compaction.lag.ms={self.min_compaction_lag_ms} is invalid: must be <= "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})"
            )
        if not self.remote_storage_enable:
            return
        if self.compact:
            raise ConfigError(
                f"remote.storage.enable=true is invalid: remote log storage is unsupported for "
                f"compacted topics (cleanup.policy={','.join(self.cleanup_policy)})"
            )
        for kind, local, total in (
            ("ms", self.local_retention_ms, self.retention_ms),
            ("bytes", self.local_retention_bytes, self.retention_bytes),
        ):
            if total == -1 or local == -2:
                continue
            if local == -1:
                raise ConfigError(
                    f"local.retention.{kind}=-1 is invalid: must not be -1 when "
                    f"retention.{kind} is {total}"
                )
            if local > total:
                raise ConfigError(
                    f"local.retention.{kind}={local} is invalid: must be <= retention.{kind} "
                    f"({total})"
                )

    # ---- construction --------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> LogConfig:
        """Settings by Kafka name; anything not given keeps Kafka's default."""
        kwargs: dict[str, Any] = {}
        for key, value in mapping.items():
            attr = _ATTR_BY_NAME.get(key.strip() if isinstance(key, str) else key)
            if attr is None:
                raise _unknown_key(key)
            kwargs[attr] = value
        return cls(**kwargs)

    @classmethod
    def from_properties(cls, path: str | Path) -> LogConfig:
        """Read a Java .properties file of topic settings."""
        path = Path(path)
        try:
            return cls.from_dict(read_properties(path))
        except OSError as e:
            raise ConfigError(f"cannot read log config {path}: {e.strerror or e}") from None
        except (ConfigError, ValueError) as e:  # ValueError: not UTF-8, a malformed \uXXXX
            raise ConfigError(f"{path}: {e}") from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> LogConfig:
        """Read a YAML mapping of topic settings (or the mapping under its `config` key)."""
        import yaml

        path = Path(path)
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as e:
            raise ConfigError(f"cannot read log config {path}: {e.strerror or e}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
        if doc is None:
            doc = {}
        if isinstance(doc, Mapping) and "config" in doc:
            doc = doc["config"] if doc["config"] is not None else {}
        if not isinstance(doc, Mapping):
            raise ConfigError(f"{path}: a log config must be a mapping of Kafka setting names")
        try:
            return cls.from_dict(flatten_settings(doc))
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None

    def with_overrides(self, mapping: Mapping[str, Any]) -> LogConfig:
        """A copy with some settings replaced (by Kafka name), re-validated as a whole."""
        merged: dict[str, Any] = self.to_dict()
        for key, value in mapping.items():
            if key not in _ATTR_BY_NAME:
                raise _unknown_key(key)
            merged[key] = value
        return LogConfig.from_dict(merged)

    # ---- output --------------------------------------------------------------------------------
    def to_dict(self, *, non_default: bool = False) -> dict[str, Any]:
        """Kafka name -> value (lists as comma-joined strings, like `kafka-configs --describe`).

        With `non_default`, only settings that differ from Kafka's defaults: a topic's overrides.
        """
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if non_default and value == f.default:
                continue
            out[f.metadata["spec"].name] = ",".join(value) if isinstance(value, tuple) else value
        return out

    def to_properties(self, *, non_default: bool = False) -> str:
        """The settings as .properties text (`key=value` lines) that from_properties reads back."""
        lines = []
        for key, value in self.to_dict(non_default=non_default).items():
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            lines.append(f"{key}={shown}")
        return "\n".join(lines) + ("\n" if lines else "")

    # ---- derived values (Kafka LogConfig's getters) --------------------------------------------
    @property
    def compact(self) -> bool:
        """cleanup.policy contains compact: the cleaner compacts this log."""
        return CLEANUP_POLICY_COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """cleanup.policy contains delete: time/size retention deletes old segments."""
        return CLEANUP_POLICY_DELETE in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """LogConfig.maxSegmentMs (§5): compacted logs roll by max.compaction.lag.ms too."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def codec(self) -> Compression | None:
        """The codec the broker writes with; None for `producer` (keep the producer's codec)."""
        if self.compression_type == "producer":
            return None
        return Compression.from_name(self.compression_type)

    def compression_level(self, codec: Compression | None = None) -> int | None:
        """This topic's compression.<codec>.level (codec defaults to `.codec`); None if levelless."""
        codec = self.codec if codec is None else Compression(codec)
        if codec is Compression.GZIP:
            return self.compression_gzip_level
        if codec is Compression.LZ4:
            return self.compression_lz4_level
        if codec is Compression.ZSTD:
            return self.compression_zstd_level
        return None

    @property
    def timestamp_type(self) -> TimestampType:
        """message.timestamp.type as the batch attribute enum."""
        if self.message_timestamp_type == "LogAppendTime":
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def timestamp_before_max_ms(self) -> int:
        """message.timestamp.before.max.ms, falling back to the deprecated difference setting."""
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """message.timestamp.after.max.ms, falling back to the deprecated difference setting."""
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    @staticmethod
    def names() -> tuple[str, ...]:
        """Every Kafka topic-config name this class knows, in table order."""
        return tuple(_ATTR_BY_NAME)

    @staticmethod
    def describe(name: str) -> str:
        """The allowed values of a setting in words (for docs and error messages)."""
        if name not in _SPEC_BY_NAME:
            raise _unknown_key(name)
        return _SPEC_BY_NAME[name].rule()


_SPEC_BY_NAME: Final[dict[str, _Spec]] = {
    f.metadata["spec"].name: f.metadata["spec"] for f in dataclasses.fields(LogConfig)
}
_ATTR_BY_NAME: Final[dict[str, str]] = {
    f.metadata["spec"].name: f.name for f in dataclasses.fields(LogConfig)
}
# Kafka's broker-level names of the topic settings (ServerTopicConfigSynonyms), the one a broker
# prefers first. A broker's default for a topic setting comes from them; only the first can be
# a dynamic broker config (`kafka-configs --entity-type brokers`), the others are static
# server.properties spellings. Also used to suggest the topic name for a broker name.
SERVER_SYNONYMS: Final[dict[str, tuple[str, ...]]] = {
    "segment.bytes": ("log.segment.bytes",),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "segment.index.bytes": ("log.index.size.max.bytes",),
    "flush.messages": ("log.flush.interval.messages",),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "retention.bytes": ("log.retention.bytes",),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "max.message.bytes": ("message.max.bytes",),
    "index.interval.bytes": ("log.index.interval.bytes",),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms",),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms",),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms",),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio",),
    "cleanup.policy": ("log.cleanup.policy",),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",),
    "min.insync.replicas": ("min.insync.replicas",),
    "compression.type": ("compression.type",),
    "compression.gzip.level": ("compression.gzip.level",),
    "compression.lz4.level": ("compression.lz4.level",),
    "compression.zstd.level": ("compression.zstd.level",),
    "preallocate": ("log.preallocate",),
    "message.format.version": ("log.message.format.version",),
    "message.timestamp.type": ("log.message.timestamp.type",),
    "message.timestamp.difference.max.ms": ("log.message.timestamp.difference.max.ms",),
    "message.timestamp.before.max.ms": ("log.message.timestamp.before.max.ms",),
    "message.timestamp.after.max.ms": ("log.message.timestamp.after.max.ms",),
    "message.downconversion.enable": ("log.message.downconversion.enable",),
    "local.retention.ms": ("log.local.retention.ms",),
    "local.retention.bytes": ("log.local.retention.bytes",),
}
_BROKER_SYNONYMS: Final[dict[str, str]] = {
    broker: topic for topic, names in SERVER_SYNONYMS.items() for broker in names if broker != topic
}


def dynamic_broker_defaults(broker_configs: Mapping[str, str]) -> dict[str, str]:
    """The topic settings a broker's dynamic configs (`log.retention.ms`, ...) give every topic
    that does not set its own, by topic name."""
    return {
        topic: broker_configs[names[0]]
        for topic, names in SERVER_SYNONYMS.items()
        if names[0] in broker_configs
    }


def _unknown_key(key: Any) -> ConfigError:
    text = str(key)
    suggestion = _BROKER_SYNONYMS.get(text)
    if suggestion is None and text.replace("_", ".") in _ATTR_BY_NAME:
        suggestion = text.replace("_", ".")  # snake_case attribute name given
    if suggestion is None:
        matches = difflib.get_close_matches(text, list(_ATTR_BY_NAME), n=1, cutoff=0.6)
        suggestion = matches[0] if matches else None
    hint = f"; did you mean {suggestion}?" if suggestion else ""
    return ConfigError(f"unknown topic config {text!r}{hint}")


def flatten_settings(mapping: Mapping[Any, Any], prefix: str = "") -> dict[str, Any]:
    """Nested YAML keys joined with dots: {"cleanup": {"policy": x}} -> {"cleanup.policy": x}."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_settings(value, name + "."))
        else:
            out[name] = value
    return out
