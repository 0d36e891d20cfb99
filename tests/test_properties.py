"""java.util.Properties text: the one reader topic configs and meta.properties share."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog_core import config
from kafkalog_core.errors import ConfigError
from kafkalog_core.log import checkpoints
from kafkalog_core.log.checkpoints import meta_properties
from kafkalog_core.properties import format_properties, parse_properties


def test_one_reader_behind_every_import_path() -> None:
    assert config.parse_properties is parse_properties
    assert meta_properties.parse_properties is parse_properties
    assert checkpoints.parse_properties is parse_properties
    assert checkpoints.format_properties is format_properties


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # comments: `#` or `!` after blanks; a comment line never continues
        ("  # c \\\nk=v\n\t! d\n", {"k": "v"}),
        # separators: `=`, `:`, blanks; at most one `=`/`:` and blanks around it
        ("a=1\nb:2\nc 3\nd \t = \f 4\ne = = 5\nf=:6\ng :7\n", None),
        # a key alone has the empty value; trailing blanks of a value are kept
        ("alone\nv = x  \n", {"alone": "", "v": "x  "}),
        # escapes: separators and blanks inside a key, \t \n \r \f, \uXXXX, any other char
        ("a\\=b\\ c\\:d = \\t\\n\\r\\f|\\u0041\\u00e9|\\q\\\\", {"a=b c:d": "\t\n\r\f|Aé|q\\"}),
        # a surrogate pair written as two \u escapes is one character, as in a Java string
        ("smile=\\ud83d\\ude00\n", {"smile": "\U0001f600"}),
        # continuation: odd trailing backslashes join, the next line's blanks are skipped
        ("k = one \\\n    two\\\n\tthree\n", {"k": "one twothree"}),
        # an even run of trailing backslashes is an escaped backslash, not a continuation
        ("k=a\\\\\nn=b\n", {"k": "a\\", "n": "b"}),
        # a continued line starting with `#` is data; an empty line ends the join
        ("k=a\\\n  #b\\\n\nm=c\n", {"k": "a#b", "m": "c"}),
        # a dangling backslash at the end of the text is dropped
        ("k=a\\", {"k": "a"}),
        # a line of only a backslash joins nothing: the next line is read afresh
        ("\\\n# comment\nk=v\n", {"k": "v"}),
        # Java's three line breaks, and only those (a vertical tab is data)
        ("a=1\r\nb=2\rc=3\x0bstill c\n", {"a": "1", "b": "2", "c": "3\x0bstill c"}),
        # a key given twice keeps its last value
        ("k=1\nk=2\n", {"k": "2"}),
    ],
)
def test_parse_properties_edge_cases(text: str, expected: dict[str, str] | None) -> None:
    if expected is None:
        expected = {"a": "1", "b": "2", "c": "3", "d": "4", "e": "= 5", "f": ":6", "g": "7"}
    assert parse_properties(text) == expected


@pytest.mark.parametrize("bad", ["k=\\u12", "k=\\u12g4", "k=\\u+123", "\\u 123=v"])
def test_malformed_unicode_escape_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="Malformed"):
        parse_properties(bad)


def test_log_config_file_with_a_malformed_escape_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "t.properties"
    path.write_text("retention.ms=\\u12\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="t.properties.*Malformed"):
        config.LogConfig.from_properties(path)


def test_format_then_parse_round_trips() -> None:
    props = {" lead": " x", "k=:#!": "v=:#!", "tabs\t": "a\tb\nc\\", "é": "ü"}
    text = format_properties(props, date="Thu Jan 01 00:00:00 UTC 1970")
    assert text.startswith("#\n#Thu Jan 01 00:00:00 UTC 1970\n")
    assert parse_properties(text) == props


def test_topic_config_file_with_a_malformed_escape_is_a_config_error(tmp_path: Path) -> None:
    from jobs.maintenance.topic_configs import load_topic_config_file

    path = tmp_path / "orders.properties"
    path.write_text("retention.ms=\\u00zz\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="orders.properties.*Malformed"):
        load_topic_config_file(path)
