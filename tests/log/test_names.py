"""File/dir names and topic validation (§2, §13 case 49)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalog_core.errors import InvalidTopicError, LogDirError
from kafkalog_core.log import names
from kafkalog_core.log.names import (
    delete_dir_name,
    future_dir_name,
    index_file_name,
    log_file_name,
    offset_from_file_name,
    parse_partition_dir,
    parse_partition_dir_name,
    parse_segment_file_name,
    partition_dir_name,
    producer_snapshot_file_name,
    stray_dir_name,
    time_index_file_name,
    txn_index_file_name,
    unfinished_write_of,
    validate_topic_name,
)

UID = "0123456789abcdef0123456789abcdef"


# --- segment file names ------------------------------------------------------------------------
def test_case_49_file_name() -> None:
    assert log_file_name(368769) == "00000000000000368769.log"


def test_all_segment_file_names() -> None:
    assert log_file_name(0) == "00000000000000000000.log"
    assert index_file_name(368769) == "00000000000000368769.index"
    assert time_index_file_name(368769) == "00000000000000368769.timeindex"
    assert txn_index_file_name(368769) == "00000000000000368769.txnindex"
    assert producer_snapshot_file_name(368769) == "00000000000000368769.snapshot"
    assert log_file_name(2**63 - 1) == "09223372036854775807.log"
    assert log_file_name(5, names.DELETED_FILE_SUFFIX) == "00000000000000000005.log.deleted"
    assert index_file_name(5, ".cleaned") == "00000000000000000005.index.cleaned"
    assert time_index_file_name(5, ".swap") == "00000000000000000005.timeindex.swap"
    assert len(log_file_name(123).split(".")[0]) == 20


def test_suffix_constants() -> None:
    assert (
        names.LOG_FILE_SUFFIX,
        names.INDEX_FILE_SUFFIX,
        names.TIME_INDEX_FILE_SUFFIX,
        names.TXN_INDEX_FILE_SUFFIX,
        names.PRODUCER_SNAPSHOT_FILE_SUFFIX,
        names.DELETED_FILE_SUFFIX,
        names.CLEANED_FILE_SUFFIX,
        names.SWAP_FILE_SUFFIX,
    ) == (".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".deleted", ".cleaned", ".swap")
    assert (names.DELETE_DIR_SUFFIX, names.FUTURE_DIR_SUFFIX, names.STRAY_DIR_SUFFIX) == (
        "-delete",
        "-future",
        "-stray",
    )


@pytest.mark.parametrize("bad", [-1, 2**63, 1.5, True, "7"])
def test_bad_base_offsets(bad) -> None:
    with pytest.raises(LogDirError):
        log_file_name(bad)


@pytest.mark.parametrize(
    ("name", "offset"),
    [
        ("00000000000000368769.log", 368769),
        ("00000000000000368769.index.swap", 368769),
        ("00000000000000000000.log.deleted", 0),
        ("09223372036854775807.snapshot", 2**63 - 1),
        ("/tmp/kafka-logs/t-0/00000000000000000042.timeindex", 42),
        ("42.log", 42),  # Kafka parses any digits, not only 20
    ],
)
def test_offset_from_file_name(name: str, offset: int) -> None:
    assert offset_from_file_name(name) == offset


@pytest.mark.parametrize(
    "name",
    [
        "leader-epoch-checkpoint",
        "abc.log",
        ".log",
        "-5.log",
        "+5.log",
        "00000000000000000000",
        "92233720368547758080.log",
    ],
)
def test_offset_from_bad_file_name(name: str) -> None:
    with pytest.raises(LogDirError, match=re.escape(repr(name))):
        offset_from_file_name(name)


def test_parse_segment_file_name() -> None:
    assert parse_segment_file_name("00000000000000000007.index.swap") == (7, ".index", ".swap")
    assert parse_segment_file_name("00000000000000000007.log") == (7, ".log", "")
    assert parse_segment_file_name("00000000000000000007.log.deleted") == (7, ".log", ".deleted")
    assert parse_segment_file_name("00000000000000000007.txnindex.cleaned") == (
        7,
        ".txnindex",
        ".cleaned",
    )
    assert parse_segment_file_name("00000000000000000007.snapshot") == (7, ".snapshot", "")


@given(st.integers(0, 2**63 - 1))
def test_file_name_round_trip(offset: int) -> None:
    for make in (
        log_file_name,
        index_file_name,
        time_index_file_name,
        txn_index_file_name,
        producer_snapshot_file_name,
    ):
        assert offset_from_file_name(make(offset)) == offset
        assert offset_from_file_name(make(offset, ".deleted")) == offset


# --- partition directories ---------------------------------------------------------------------
def test_case_49_partition_dirs() -> None:
    assert parse_partition_dir("a-b.c-12") == ("a-b.c", 12)
    assert parse_partition_dir(f"t-3.{UID}-delete") == ("t", 3)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("orders-3", ("orders", 3, "", "")),
        ("my-topic-with-dashes-0", ("my-topic-with-dashes", 0, "", "")),
        ("__consumer_offsets-49", ("__consumer_offsets", 49, "", "")),
        ("t.v1-2147483647", ("t.v1", 2147483647, "", "")),
        ("a--1", ("a-", 1, "", "")),  # split at the last '-'
        (f"t-3.{UID}-delete", ("t", 3, "-delete", UID)),
        (f"t-3.{UID}-future", ("t", 3, "-future", UID)),
        (f"t-3.{UID}-stray", ("t", 3, "-stray", UID)),
        (f"a-b.c-12.{UID}-future", ("a-b.c", 12, "-future", UID)),
        ("/var/kafka/orders-3/", ("orders", 3, "", "")),
    ],
)
def test_parse_partition_dir_name(name: str, expected) -> None:
    assert tuple(parse_partition_dir_name(name)) == expected
    assert parse_partition_dir(name) == expected[:2]


@pytest.mark.parametrize(
    "name",
    [
        "",
        "orders",  # no '-'
        "-3",  # empty topic
        "orders-",  # empty partition
        "orders-x",
        "orders-1.5",
        "orders-+3",
        "orders-2147483648",
        "t-3-delete",  # suffix without .uuid
        "t-3.-delete",
        f"t.{UID}-delete",  # no partition
        f"t-.{UID}-future",
        f"t-x.{UID}-stray",
        "remote-log-index-cache",
    ],
)
def test_parse_bad_partition_dirs(name: str) -> None:
    with pytest.raises(LogDirError):
        parse_partition_dir(name)


def test_partition_dir_name() -> None:
    assert partition_dir_name("orders", 3) == "orders-3"
    assert partition_dir_name("a-b.c", 12) == "a-b.c-12"
    for bad in (-1, 2**31, True, "3"):
        with pytest.raises(LogDirError):
            partition_dir_name("orders", bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidTopicError):
        partition_dir_name("../etc", 0)


def test_special_dir_names() -> None:
    assert delete_dir_name("t", 3, UID) == f"t-3.{UID}-delete"
    assert future_dir_name("t", 3, UID) == f"t-3.{UID}-future"
    assert stray_dir_name("t", 3, UID) == f"t-3.{UID}-stray"
    random_name = delete_dir_name("orders", 1)
    assert re.fullmatch(r"orders-1\.[0-9a-f]{32}-delete", random_name)
    assert delete_dir_name("orders", 1) != random_name  # a fresh uuid every time
    assert parse_partition_dir(random_name) == ("orders", 1)


def test_delete_and_stray_names_truncate_topic_to_255_chars() -> None:
    topic = "x" * 249
    for make, suffix in ((delete_dir_name, "-delete"), (stray_dir_name, "-stray")):
        name = make(topic, 2147483647, UID)
        tail = f"-2147483647.{UID}{suffix}"
        assert len(name) == 255
        assert name == topic[: 255 - len(tail)] + tail
        assert parse_partition_dir_name(name) == ("x" * (255 - len(tail)), 2147483647, suffix, UID)
    # short topics are untouched
    assert len(delete_dir_name("y" * 200, 0, UID)) == 200 + len(f"-0.{UID}-delete")
    # -future is never truncated
    assert future_dir_name(topic, 0, UID) == f"{topic}-0.{UID}-future"


def test_names_round_trip_through_parse() -> None:
    for topic in ("a", "a-b", "a.b_c-d", "-", "_", "..."):
        for p in (0, 7, 2**31 - 1):
            assert parse_partition_dir(partition_dir_name(topic, p)) == (topic, p)
            for make in (delete_dir_name, future_dir_name, stray_dir_name):
                assert parse_partition_dir(make(topic, p)) == (topic, p)


def test_bad_unique_id() -> None:
    for bad in ("", "a b", "a/b"):
        with pytest.raises(LogDirError):
            delete_dir_name("t", 0, bad)


# --- topic names -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "topic",
    ["a", "orders", "a-b.c", "__consumer_offsets", "A_Z-09.x", "x" * 249, "...", "-", ".a", "a.."],
)
def test_valid_topic_names(topic: str) -> None:
    assert validate_topic_name(topic) == topic


@pytest.mark.parametrize(
    ("topic", "rule"),
    [
        ("", "can't be empty"),
        (".", 'cannot be "." or ".."'),
        ("..", 'cannot be "." or ".."'),
        ("x" * 250, "longer than 249"),
        ("a/b", "other than ASCII alphanumerics"),
        ("../x", "other than ASCII alphanumerics"),
        ("a b", "other than ASCII alphanumerics"),
        ("ünïcode", "other than ASCII alphanumerics"),
        ("a\\b", "other than ASCII alphanumerics"),
        ("a\x00b", "other than ASCII alphanumerics"),
        ("tab\t", "other than ASCII alphanumerics"),
        ("line\n", "other than ASCII alphanumerics"),
        ("a:b", "other than ASCII alphanumerics"),
        ("٣", "other than ASCII alphanumerics"),  # a non-ASCII digit
    ],
)
def test_invalid_topic_names(topic: str, rule: str) -> None:
    with pytest.raises(InvalidTopicError, match=re.escape(rule)) as info:
        validate_topic_name(topic)
    if topic:
        assert repr(topic[:40]) in str(info.value)


def test_non_string_topic() -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(b"abc")  # type: ignore[arg-type]


@given(st.text(max_size=30))
def test_valid_topic_never_escapes_log_dir(topic: str) -> None:
    try:
        validate_topic_name(topic)
    except InvalidTopicError:
        return
    root = Path("/logdir")
    for make in (partition_dir_name, delete_dir_name, future_dir_name, stray_dir_name):
        child = root / make(topic, 0)
        assert child.parent == root
        assert ".." not in child.relative_to(root).parts
        assert "/" not in make(topic, 0)


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("00000000000000000007.index.tmp", ".index"),
        ("00000000000000000007.timeindex.tmp", ".timeindex"),
        ("00000000000000000007.txnindex.tmp", ".txnindex"),
        ("00000000000000000007.snapshot.tmp", ".snapshot"),
        ("leader-epoch-checkpoint.tmp", "leader-epoch-checkpoint"),
        ("partition.metadata.tmp", "partition.metadata"),
        # not a partition's own atomic write: a quarantine copy, a .log, a swap, anything else
        ("00000000000000000007.log.quarantine.tmp", None),
        ("00000000000000000007.log.tmp", None),
        ("00000000000000000007.index.swap.tmp", None),
        ("00000000000000000007.index", None),
        ("notes.tmp", None),
        (".tmp", None),
    ],
)
def test_unfinished_write_of(name: str, target: str | None) -> None:
    """The one recognition the log loader (deletes them all) and rebuild (indexes only) share."""
    assert unfinished_write_of(name) == target


def test_live_partition_dirs_are_the_topic_logs_a_broker_loads(tmp_path):
    for name in (
        "orders-0",
        "orders-10",
        "a-b.c-2",
        "__consumer_offsets-3",
        "__cluster_metadata-0",  # the broker's own metadata log
        "orders-1.0123456789abcdef0123456789abcdef-delete",
        "orders-4.0123456789abcdef0123456789abcdef-future",
        "remote-log-index-cache",
        ".orders-5",
        "staging",
    ):
        (tmp_path / name).mkdir()
    (tmp_path / "orders-6").write_text("a file, not a dir")
    assert [(t, p, path.name) for t, p, path in names.live_partition_dirs(tmp_path)] == [
        ("__consumer_offsets", 3, "__consumer_offsets-3"),
        ("a-b.c", 2, "a-b.c-2"),
        ("orders", 0, "orders-0"),
        ("orders", 10, "orders-10"),
    ]
