"""LogConfig: §10's defaults, ranges, parsing, files, cross-field checks and derived values."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kafkalog_core.config import LONG_MAX, LogConfig, parse_properties
from kafkalog_core.errors import ConfigError
from kafkalog_core.record import compression
from kafkalog_core.record.batch import Compression, TimestampType

REPO = Path(__file__).resolve().parents[1]
INT_MAX = 2**31 - 1

# §10, in table order: Kafka name -> (attribute, default)
DEFAULTS = {
    "segment.bytes": ("segment_bytes", 1073741824),
    "segment.ms": ("segment_ms", 604800000),
    "segment.jitter.ms": ("segment_jitter_ms", 0),
    "segment.index.bytes": ("segment_index_bytes", 10485760),
    "index.interval.bytes": ("index_interval_bytes", 4096),
    "flush.messages": ("flush_messages", LONG_MAX),
    "flush.ms": ("flush_ms", LONG_MAX),
    "retention.bytes": ("retention_bytes", -1),
    "retention.ms": ("retention_ms", 604800000),
    "max.message.bytes": ("max_message_bytes", 1048588),
    "delete.retention.ms": ("delete_retention_ms", 86400000),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", 0),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", LONG_MAX),
    "file.delete.delay.ms": ("file_delete_delay_ms", 60000),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", 0.5),
    "cleanup.policy": ("cleanup_policy", ("delete",)),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", False),
    "min.insync.replicas": ("min_insync_replicas", 1),
    "compression.type": ("compression_type", "producer"),
    "compression.gzip.level": ("compression_gzip_level", -1),
    "compression.lz4.level": ("compression_lz4_level", 9),
    "compression.zstd.level": ("compression_zstd_level", 3),
    "preallocate": ("preallocate", False),
    "message.format.version": ("message_format_version", "3.0-IV1"),
    "message.timestamp.type": ("message_timestamp_type", "CreateTime"),
    "message.timestamp.difference.max.ms": ("message_timestamp_difference_max_ms", LONG_MAX),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", LONG_MAX),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", LONG_MAX),
    "message.downconversion.enable": ("message_downconversion_enable", True),
    "leader.replication.throttled.replicas": ("leader_replication_throttled_replicas", ()),
    "follower.replication.throttled.replicas": ("follower_replication_throttled_replicas", ()),
    "remote.storage.enable": ("remote_storage_enable", False),
    "local.retention.ms": ("local_retention_ms", -2),
    "local.retention.bytes": ("local_retention_bytes", -2),
    "remote.log.copy.disable": ("remote_log_copy_disable", False),
    "remote.log.delete.on.disable": ("remote_log_delete_on_disable", False),
}

# name -> (valid boundary values, invalid values, rule text in the error)
RANGES = {
    "segment.bytes": ([14, INT_MAX], [13, 0, -1, INT_MAX + 1], "must be an int >= 14"),
    "segment.ms": ([1, LONG_MAX], [0, -1, LONG_MAX + 1], "must be a long >= 1"),
    "segment.jitter.ms": ([0, LONG_MAX], [-1], "must be a long >= 0"),
    "segment.index.bytes": ([4, INT_MAX], [3, INT_MAX + 1], "must be an int >= 4"),
    "index.interval.bytes": ([0, INT_MAX], [-1], "must be an int >= 0"),
    "flush.messages": ([1, LONG_MAX], [0], "must be a long >= 1"),
    "flush.ms": ([0, LONG_MAX], [-1], "must be a long >= 0"),
    "retention.bytes": (
        [-(2**63), -2, -1, 0, LONG_MAX],
        [LONG_MAX + 1, -(2**63) - 1],
        "must be a long",
    ),
    "retention.ms": ([-1, 0, LONG_MAX], [-2], "must be a long >= -1"),
    "max.message.bytes": ([0, INT_MAX], [-1, INT_MAX + 1], "must be an int >= 0"),
    "delete.retention.ms": ([0], [-1], "must be a long >= 0"),
    "min.compaction.lag.ms": ([0], [-1], "must be a long >= 0"),
    "max.compaction.lag.ms": ([1, LONG_MAX], [0, -1], "must be a long >= 1"),
    "file.delete.delay.ms": ([0], [-1], "must be a long >= 0"),
    "min.cleanable.dirty.ratio": (
        [0, 0.0, 1, 1.0, 0.01],
        [-0.01, 1.01, -1, 2],
        "must be a double in [0.0, 1.0]",
    ),
    "min.insync.replicas": ([1, INT_MAX], [0, -1], "must be an int >= 1"),
    "compression.gzip.level": ([-1, 1, 9], [-2, 0, 10], "must be -1 or an int in [1, 9]"),
    "compression.lz4.level": ([1, 17], [0, 18], "must be an int in [1, 17]"),
    "compression.zstd.level": ([-131072, 22], [-131073, 23], "must be an int in [-131072, 22]"),
    "message.timestamp.difference.max.ms": ([0, LONG_MAX], [-1], "must be a long >= 0"),
    "message.timestamp.before.max.ms": ([0, LONG_MAX], [-1], "must be a long >= 0"),
    "message.timestamp.after.max.ms": ([0, LONG_MAX], [-1], "must be a long >= 0"),
    "local.retention.ms": ([-2, -1, 0], [-3], "must be a long >= -2"),
    "local.retention.bytes": ([-2, -1, 0], [-3], "must be a long >= -2"),
}


# --- defaults ----------------------------------------------------------------------------------
def test_covers_every_topic_setting_of_section_10() -> None:
    assert LogConfig.names() == tuple(DEFAULTS)
    assert [f.name for f in dataclasses.fields(LogConfig)] == [a for a, _ in DEFAULTS.values()]


@pytest.mark.parametrize(("name", "attr_default"), list(DEFAULTS.items()))
def test_each_default(name: str, attr_default: tuple[str, object]) -> None:
    attr, default = attr_default
    config = LogConfig()
    assert getattr(config, attr) == default
    assert type(getattr(config, attr)) is type(default)
    assert LogConfig.from_dict({}) == config


def test_defaults_to_dict() -> None:
    d = LogConfig().to_dict()
    assert list(d) == list(DEFAULTS)
    assert d["cleanup.policy"] == "delete"
    assert d["leader.replication.throttled.replicas"] == ""
    assert LogConfig().to_dict(non_default=True) == {}


# --- ranges ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(RANGES))
def test_range_boundaries(name: str) -> None:
    valid, invalid, rule = RANGES[name]
    attr = DEFAULTS[name][0]
    for value in valid:
        assert getattr(LogConfig.from_dict({name: value}), attr) == value
        assert getattr(LogConfig.from_dict({name: str(value)}), attr) == value  # as text
    for value in invalid:
        message = f"{name}={value} is invalid: {rule}"
        with pytest.raises(ConfigError) as info:
            LogConfig.from_dict({name: value})
        assert str(info.value) == message
        with pytest.raises(ConfigError, match="is invalid"):
            LogConfig.from_dict({name: str(value)})


def test_error_message_example_from_brief() -> None:
    with pytest.raises(ConfigError) as info:
        LogConfig.from_dict({"segment.bytes": "10"})
    assert str(info.value) == "segment.bytes=10 is invalid: must be an int >= 14"
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "codec"),
    [
        ("compression.gzip.level", Compression.GZIP),
        ("compression.lz4.level", Compression.LZ4),
        ("compression.zstd.level", Compression.ZSTD),
    ],
)
def test_levels_agree_with_compression_module(name: str, codec: Compression) -> None:
    """compression.py and LogConfig must refuse exactly the same levels."""
    levels = [*range(-131075, -131068), *range(-3, 30)]
    for level in levels:
        try:
            compression.validate_level(codec, level)
            codec_ok = True
        except ConfigError:
            codec_ok = False
        try:
            LogConfig.from_dict({name: level})
            config_ok = True
        except ConfigError:
            config_ok = False
        assert codec_ok == config_ok, level


# --- value parsing -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1024", 1024),
        (" 1024 ", 1024),
        ("+1024", 1024),
        (1024, 1024),
        (1024.0, 1024),
        ("0001024", 1024),
    ],
)
def test_int_parsing(value, expected: int) -> None:
    assert LogConfig.from_dict({"segment.bytes": value}).segment_bytes == expected


@pytest.mark.parametrize(
    "value",
    ["1_024", "1024.0", "1e3", "0x400", "", "  ", "abc", 1024.5, True, False, None, [1024], "١٠٢٤"],
)
def test_int_parsing_refused(value) -> None:
    with pytest.raises(ConfigError, match=r"^segment\.bytes=.* is invalid: must be an int >= 14$"):
        LogConfig.from_dict({"segment.bytes": value})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0.75", 0.75),
        (" 0.1 ", 0.1),
        ("1e-1", 0.1),
        ("1", 1.0),
        (0, 0.0),
        (1, 1.0),
        ("0.5d", 0.5),
        (".5", 0.5),
        ("0.", 0.0),
    ],
)
def test_double_parsing(value, expected: float) -> None:
    config = LogConfig.from_dict({"min.cleanable.dirty.ratio": value})
    assert config.min_cleanable_dirty_ratio == expected
    assert isinstance(config.min_cleanable_dirty_ratio, float)


@pytest.mark.parametrize("value", ["NaN", float("nan"), "abc", "", "0,5", True, "inf"])
def test_double_parsing_refused(value) -> None:
    with pytest.raises(ConfigError, match=r"^min\.cleanable\.dirty\.ratio="):
        LogConfig.from_dict({"min.cleanable.dirty.ratio": value})


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("TRUE", True), (" False ", False), (True, True), (False, False)],
)
def test_boolean_parsing(value, expected: bool) -> None:
    assert LogConfig.from_dict({"preallocate": value}).preallocate is expected


@pytest.mark.parametrize("value", ["yes", "1", 1, 0, "", "t"])
def test_boolean_parsing_refused(value) -> None:
    with pytest.raises(ConfigError, match=r"^preallocate=.* is invalid: must be true or false$"):
        LogConfig.from_dict({"preallocate": value})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("delete", ("delete",)),
        ("compact", ("compact",)),
        ("compact,delete", ("compact", "delete")),
        ("Compact , DELETE", ("compact", "delete")),
        (["delete", "compact"], ("delete", "compact")),
        (("compact",), ("compact",)),
        ("", ()),  # an empty list passes Kafka's ValidList: neither compaction nor deletion
    ],
)
def test_cleanup_policy(value, expected: tuple[str, ...]) -> None:
    config = LogConfig.from_dict({"cleanup.policy": value})
    assert config.cleanup_policy == expected
    assert config.compact == ("compact" in expected)
    assert config.delete == ("delete" in expected)


@pytest.mark.parametrize(
    "value", ["compact,", ",delete", "compacted", "delete;compact", 1, ["compact", 2]]
)
def test_cleanup_policy_refused(value) -> None:
    with pytest.raises(
        ConfigError,
        match=r"^cleanup\.policy=.* is invalid: must be a comma-separated list of compact, delete$",
    ):
        LogConfig.from_dict({"cleanup.policy": value})


@pytest.mark.parametrize(
    ("value", "codec"),
    [
        ("producer", None),
        ("uncompressed", Compression.NONE),
        ("gzip", Compression.GZIP),
        ("SNAPPY", Compression.SNAPPY),
        (" lz4 ", Compression.LZ4),
        ("Zstd", Compression.ZSTD),
    ],
)
def test_compression_type(value: str, codec: Compression | None) -> None:
    config = LogConfig.from_dict({"compression.type": value})
    assert config.compression_type == value.strip().lower()
    assert config.codec is codec


@pytest.mark.parametrize("value", ["none", "brotli", "", "lz4,gzip", 1])
def test_compression_type_refused(value) -> None:
    with pytest.raises(
        ConfigError, match=r"must be one of uncompressed, zstd, lz4, snappy, gzip, producer$"
    ):
        LogConfig.from_dict({"compression.type": value})


def test_compression_level_for_codec() -> None:
    config = LogConfig.from_dict(
        {
            "compression.type": "zstd",
            "compression.zstd.level": 7,
            "compression.lz4.level": 12,
            "compression.gzip.level": 2,
        }
    )
    assert config.compression_level() == 7
    assert config.compression_level(Compression.LZ4) == 12
    assert config.compression_level(Compression.GZIP) == 2
    assert config.compression_level(Compression.SNAPPY) is None
    assert LogConfig().compression_level() is None  # producer


def test_message_timestamp_type() -> None:
    assert LogConfig().timestamp_type is TimestampType.CREATE_TIME
    config = LogConfig.from_dict({"message.timestamp.type": "LogAppendTime"})
    assert config.timestamp_type is TimestampType.LOG_APPEND_TIME
    for bad in ("logappendtime", "CREATETIME", "NoTimestampType", ""):
        with pytest.raises(ConfigError, match=r"must be one of CreateTime, LogAppendTime$"):
            LogConfig.from_dict({"message.timestamp.type": bad})


@pytest.mark.parametrize("value", ["", "*", "0:1", "0:1,1:2", " 0:1 , 2:3 ", ["0:1", "1:1"]])
def test_throttled_replicas(value) -> None:
    config = LogConfig.from_dict(
        {
            "leader.replication.throttled.replicas": value,
            "follower.replication.throttled.replicas": value,
        }
    )
    assert (
        config.leader_replication_throttled_replicas
        == config.follower_replication_throttled_replicas
    )


@pytest.mark.parametrize("value", ["a:b", "0", "*,0:1", "0:1,", "0-1"])
def test_throttled_replicas_refused(value) -> None:
    with pytest.raises(ConfigError, match=r"^leader\.replication\.throttled\.replicas="):
        LogConfig.from_dict({"leader.replication.throttled.replicas": value})


def test_message_format_version() -> None:
    assert LogConfig.from_dict({"message.format.version": "2.8"}).message_format_version == "2.8"
    assert LogConfig.from_dict({"message.format.version": 3.0}).message_format_version == "3.0"
    with pytest.raises(ConfigError, match="message.format.version"):
        LogConfig.from_dict({"message.format.version": ""})


# --- unknown keys ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("segment.byte", "segment.bytes"),
        ("segmnt.bytes", "segment.bytes"),
        ("retention.msec", "retention.ms"),
        ("cleanup.polcy", "cleanup.policy"),
        ("log.retention.hours", "retention.ms"),
        ("message.max.bytes", "max.message.bytes"),
        ("segment_bytes", "segment.bytes"),
        ("min_cleanable_dirty_ratio", "min.cleanable.dirty.ratio"),
    ],
)
def test_unknown_key_suggests_close_match(key: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as info:
        LogConfig.from_dict({key: 1})
    assert str(info.value) == f"unknown topic config {key!r}; did you mean {suggestion}?"


def test_unknown_key_without_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        LogConfig.from_dict({"zzzz": 1})
    assert str(info.value) == "unknown topic config 'zzzz'"
    with pytest.raises(ConfigError, match="did you mean"):
        LogConfig().with_overrides({"segment.bites": 100})
    with pytest.raises(ConfigError, match="unknown topic config"):
        LogConfig.describe("nope")


# --- cross-field -------------------------------------------------------------------------------
def test_min_compaction_lag_must_not_exceed_max() -> None:
    ok = LogConfig.from_dict({"min.compaction.lag.ms": 100, "max.compaction.lag.ms": 100})
    assert ok.min_compaction_lag_ms == ok.max_compaction_lag_ms == 100
    with pytest.raises(ConfigError) as info:
        LogConfig.from_dict({"min.compaction.lag.ms": 101, "max.compaction.lag.ms": "100"})
    assert (
        str(info.value)
        == "min.compaction.lag.ms=101 is invalid: must be <= max.compaction.lag.ms (100)"
    )
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        ok.with_overrides({"min.compaction.lag.ms": 200})
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        LogConfig(min_compaction_lag_ms=5, max_compaction_lag_ms=4)


def test_remote_storage_cross_checks() -> None:
    base = {"remote.storage.enable": "true", "retention.ms": 1000, "retention.bytes": 500}
    assert LogConfig.from_dict(base).remote_storage_enable
    assert LogConfig.from_dict({**base, "local.retention.ms": 1000, "local.retention.bytes": 500})
    with pytest.raises(
        ConfigError,
        match=r"^local\.retention\.ms=1001 is invalid: must be <= retention\.ms \(1000\)$",
    ):
        LogConfig.from_dict({**base, "local.retention.ms": 1001})
    with pytest.raises(ConfigError, match=r"^local\.retention\.bytes=-1 is invalid"):
        LogConfig.from_dict({**base, "local.retention.bytes": -1})
    with pytest.raises(ConfigError, match="compacted topics"):
        LogConfig.from_dict({**base, "cleanup.policy": "compact,delete"})
    # without remote storage, local.* values are not compared
    assert (
        LogConfig.from_dict({"retention.ms": 10, "local.retention.ms": 20}).local_retention_ms == 20
    )


# --- derived values ----------------------------------------------------------------------------
def test_max_segment_ms() -> None:
    assert LogConfig().max_segment_ms == 604800000
    assert (
        LogConfig.from_dict({"segment.ms": 1000, "max.compaction.lag.ms": 10}).max_segment_ms
        == 1000
    )  # not compacted
    compacted = {"cleanup.policy": "compact", "segment.ms": 1000}
    assert LogConfig.from_dict({**compacted, "max.compaction.lag.ms": 10}).max_segment_ms == 10
    assert LogConfig.from_dict({**compacted, "max.compaction.lag.ms": 5000}).max_segment_ms == 1000
    assert LogConfig.from_dict(compacted).max_segment_ms == 1000  # default lag is Long.MAX
    assert (
        LogConfig.from_dict(
            {"cleanup.policy": "delete,compact", "max.compaction.lag.ms": 7}
        ).max_segment_ms
        == 7
    )


def test_timestamp_limits_fall_back_to_deprecated_difference() -> None:
    assert LogConfig().timestamp_before_max_ms == LONG_MAX
    diff = LogConfig.from_dict({"message.timestamp.difference.max.ms": 1000})
    assert diff.timestamp_before_max_ms == diff.timestamp_after_max_ms == 1000
    both = diff.with_overrides(
        {"message.timestamp.before.max.ms": 5, "message.timestamp.after.max.ms": 7}
    )
    assert (both.timestamp_before_max_ms, both.timestamp_after_max_ms) == (5, 7)


# --- round trips, overrides, immutability -------------------------------------------------------
def test_to_dict_round_trip_and_non_default() -> None:
    config = LogConfig.from_dict(
        {
            "segment.bytes": "1024",
            "cleanup.policy": "compact,delete",
            "preallocate": "true",
            "min.cleanable.dirty.ratio": "0.25",
        }
    )
    assert LogConfig.from_dict(config.to_dict()) == config
    assert config.to_dict(non_default=True) == {
        "segment.bytes": 1024,
        "min.cleanable.dirty.ratio": 0.25,
        "cleanup.policy": "compact,delete",
        "preallocate": True,
    }


def test_with_overrides() -> None:
    base = LogConfig.from_dict({"segment.bytes": 2048})
    changed = base.with_overrides({"segment.ms": "60000", "cleanup.policy": "compact"})
    assert (changed.segment_bytes, changed.segment_ms, changed.cleanup_policy) == (
        2048,
        60000,
        ("compact",),
    )
    assert base.segment_ms == 604800000  # original untouched
    with pytest.raises(ConfigError, match=r"^segment\.ms=0 is invalid"):
        base.with_overrides({"segment.ms": 0})


def test_frozen_and_direct_construction_validates() -> None:
    config = LogConfig(segment_bytes=1024, cleanup_policy="compact, delete")  # type: ignore[arg-type]
    assert config.cleanup_policy == ("compact", "delete")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.segment_bytes = 1  # type: ignore[misc]
    with pytest.raises(ConfigError, match="segment.bytes=13"):
        LogConfig(segment_bytes=13)
    assert hash(config) == hash(LogConfig(segment_bytes=1024, cleanup_policy=("compact", "delete")))


# --- files -------------------------------------------------------------------------------------
def test_parse_properties_syntax() -> None:
    text = (
        "# comment\n"
        "  ! another comment\n"
        "\n"
        "a=1\n"
        "b = 2\n"
        "c:3\n"
        "d : 4\n"
        "e 5\n"
        "   f\t=\t6  \n"
        "g=multi \\\n"
        "    line\n"
        "h=\\u0041\\tb\n"
        "i\\=j=7\n"
        "k==8\n"
        "empty=\n"
        "a=9\n"
    )
    assert parse_properties(text) == {
        "a": "9",
        "b": "2",
        "c": "3",
        "d": "4",
        "e": "5",
        "f": "6  ",
        "g": "multi line",
        "h": "A\tb",
        "i=j": "7",
        "k": "=8",
        "empty": "",
    }


def test_from_properties(tmp_path: Path) -> None:
    path = tmp_path / "topic.properties"
    path.write_text(
        "# orders topic\n"
        "segment.bytes=1048576\n"
        "cleanup.policy : compact,delete\n"
        "compression.type   lz4\n"
        "compression.lz4.level=12\n"
        "! LogAppendTime stamps at append\n"
        "message.timestamp.type=LogAppendTime\n"
        "retention.ms=-1\n"
    )
    config = LogConfig.from_properties(path)
    assert config.segment_bytes == 1048576
    assert config.cleanup_policy == ("compact", "delete")
    assert config.codec is Compression.LZ4 and config.compression_level() == 12
    assert config.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert config.retention_ms == -1
    # to_properties round trip
    again = tmp_path / "again.properties"
    again.write_text(config.to_properties())
    assert LogConfig.from_properties(again) == config
    only = tmp_path / "only.properties"
    only.write_text(config.to_properties(non_default=True))
    assert LogConfig.from_properties(only) == config


def test_from_properties_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("segment.bytes=10\n")
    with pytest.raises(ConfigError) as info:
        LogConfig.from_properties(bad)
    assert str(info.value) == f"{bad}: segment.bytes=10 is invalid: must be an int >= 14"
    unknown = tmp_path / "unknown.properties"
    unknown.write_text("log.segment.bytes=1024\n")
    with pytest.raises(ConfigError, match="did you mean segment.bytes"):
        LogConfig.from_properties(unknown)
    with pytest.raises(ConfigError, match="cannot read log config"):
        LogConfig.from_properties(tmp_path / "missing.properties")


def test_from_yaml_flat_nested_and_config_key(tmp_path: Path) -> None:
    flat = tmp_path / "flat.yaml"
    flat.write_text(
        "segment.bytes: 1024\ncleanup.policy: [compact, delete]\npreallocate: true\nmin.cleanable.dirty.ratio: 0.1\n"
    )
    config = LogConfig.from_yaml(flat)
    assert (config.segment_bytes, config.cleanup_policy, config.preallocate) == (
        1024,
        ("compact", "delete"),
        True,
    )
    assert config.min_cleanable_dirty_ratio == 0.1

    under = tmp_path / "job.yaml"
    under.write_text(
        "topic: orders\npartitions: 12\nconfig:\n  segment.bytes: '1024'\n  cleanup.policy: compact\n"
    )
    assert LogConfig.from_yaml(under).cleanup_policy == ("compact",)
    assert LogConfig.from_yaml(under).segment_bytes == 1024

    nested = tmp_path / "nested.yaml"
    nested.write_text(
        "segment:\n  bytes: 1024\n  ms: 60000\ncompression:\n  type: zstd\n  zstd:\n    level: 10\n"
    )
    config = LogConfig.from_yaml(nested)
    assert (config.segment_bytes, config.segment_ms, config.codec, config.compression_level()) == (
        1024,
        60000,
        Compression.ZSTD,
        10,
    )

    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert LogConfig.from_yaml(empty) == LogConfig()
    empty_config = tmp_path / "empty_config.yaml"
    empty_config.write_text("config:\n")
    assert LogConfig.from_yaml(empty_config) == LogConfig()


def test_from_yaml_errors(tmp_path: Path) -> None:
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        LogConfig.from_yaml(listy)
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        LogConfig.from_yaml(broken)
    bad = tmp_path / "bad.yaml"
    bad.write_text("config:\n  compression.lz4.level: 18\n")
    with pytest.raises(ConfigError) as info:
        LogConfig.from_yaml(bad)
    assert (
        str(info.value) == f"{bad}: compression.lz4.level=18 is invalid: must be an int in [1, 17]"
    )
    typo = tmp_path / "typo.yaml"
    typo.write_text("retention.msec: 5\n")
    with pytest.raises(ConfigError, match="did you mean retention.ms"):
        LogConfig.from_yaml(typo)
    null = tmp_path / "null.yaml"
    null.write_text("segment.bytes: ~\n")
    with pytest.raises(ConfigError, match=r"segment\.bytes=None is invalid"):
        LogConfig.from_yaml(null)
    with pytest.raises(ConfigError, match="cannot read"):
        LogConfig.from_yaml(tmp_path / "missing.yaml")


def test_repo_defaults_file_is_kafkas_defaults() -> None:
    path = REPO / "conf" / "topic-defaults.properties"
    assert LogConfig.from_properties(path) == LogConfig()
    assert set(parse_properties(path.read_text())) == set(DEFAULTS)
