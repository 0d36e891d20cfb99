"""java.util.Properties text: the one reader topic configs and meta.properties share."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
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
        # ... but as the text's last line (and no \r\n after it) it is the empty key
        ("k=v\n\\\n", {"k": "v", "": ""}),
        ("k=v\n\\\r\n", {"k": "v"}),
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


# ---- the same files through java.util.Properties.load ------------------------------------------
PROPS_DUMP = Path(__file__).parent / "java" / "PropsDump.java"

# the hand-picked cases: each a file's whole text
NASTY = [
    "",
    "\n\n\r\n\r",
    "a=1\nb:2\nc 3\nd\t=\f4\ne = = 5\nf=:6\ng :7\nh: =8\n",
    "=v\n:w\n x\n  =\n",  # empty keys
    "alone\nv = x  \n\t\f  \n",
    "a\\=b\\ c\\:d = \\t\\n\\r\\f|\\u0041\\u00e9|\\q\\\\",
    "k\\u003dx=1\nk\\u0020y 2\n",  # a separator written as \uXXXX is part of the key
    "smile=\\ud83d\\ude00 \\uD800 \\uDFFF\\ud83d\n",  # pairs join; lone halves stay
    "direct=é😀\u00a0\u2028x\x85y\x0bz\n",  # no line break but \r \n \r\n
    "k = one \\\n    two\\\n\tthree\n",
    "k=a\\\\\nn=b\\\\\\\nc\n",  # even and odd runs of backslashes
    "k=a\\\n  #b\\\n\nm=c\n",
    "k=a\\\r\n  b\\\r  c\\\n\r\nd=1",
    "k\\\n  ey=v\nx\\\n  \\\n  = y",  # a continuation inside the key
    "k=a\\",  # a dangling backslash at the end of the text
    "k=a\\\n",
    "\\",  # a lone backslash as the last line: the empty key
    "  \\\n",
    "\\\r",
    "\\\r\n",  # ... but not when a \r\n ends the text
    "\\\n\\\n",
    "\\\n\n",
    "\\\n# comment\nk=v\n",
    "  \\\n!x\n",
    "# c \\\nk=v\n\t! d\\\nm=w\n",
    "\\#k=v\n\\!m=w\nn=#v\n",
    "a\tb\fc d\n\fk\t\t=\t\tv\n",
    "k=1\nk=2\nk\\\n=3\n",
    "k=\\u12\n",
    "k=\\u12g4\n",
    "k=\\u+123\n",
    "\\u 123=v\n",
    "k=\\u",
    "k=\\u004\\\n1\n",  # the fourth digit arrives by continuation
    "k=fine\nbad\\uzzzz=1\n",
    "# k=\\u12 in a comment\nk=v\n",
    "k=\\\\u12\n",  # an escaped backslash, then plain text
]

_PIECES = [
    "k", "key.name", "v", "é", "😀", "\u00a0", "\u2028", "\x85", "\x0b", "1",
    " ", "  ", "\t", "\f", "=", ":", "#", "!",
    "\n", "\r", "\r\n", "\\", "\\\n", "\\\r\n", "\\\\",
    "\\t", "\\n", "\\=", "\\:", "\\ ", "\\#", "\\q",
    "\\u0041", "\\u00E9", "\\ud83d", "\\ude00",
]  # fmt: skip
_MALFORMED = ["\\u12", "\\u", "\\uzz12"]  # in a quarter of the files, so most files load


def _random_texts(count: int, seed: int = 20260) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        pool = _PIECES + _MALFORMED if rng.random() < 0.25 else _PIECES
        weights = [rng.random() for _ in pool]  # each file its own mix
        pieces = rng.choices(pool, weights, k=rng.randrange(1, 40))
        texts.append("".join(pieces))
    return texts


def _ours(path: Path) -> dict[str, str] | None:
    """The file's keys and values, None when the reader refuses it."""
    try:
        return parse_properties(path.read_bytes().decode("utf-8"))
    except ValueError:
        return None


def test_every_file_reads_as_java_reads_it(tmp_path: Path) -> None:
    """Hand-picked and seeded random files, loaded by Java's Properties.load (one JVM) and by
    parse_properties: the same keys and values, and the same files refused."""
    texts = NASTY + _random_texts(600)
    paths = []
    for n, text in enumerate(texts):
        path = tmp_path / f"{n:04d}.properties"
        path.write_bytes(text.encode("utf-8"))  # newlines as written: no translation
        paths.append(path)
    java = shutil.which("java")
    assert java, "java (17+) is needed to check the reader against java.util.Properties"
    run = subprocess.run(
        [java, str(PROPS_DUMP), *map(str, paths)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-2000:]
    dumped = [json.loads(line) for line in run.stdout.splitlines()]
    assert [d["file"] for d in dumped] == [str(p) for p in paths]
    refused = 0
    for path, text, java_read in zip(paths, texts, dumped, strict=True):
        expected = java_read.get("props")
        if expected is None:
            assert "Malformed \\uxxxx encoding" in java_read["error"]
            refused += 1
        assert _ours(path) == expected, f"{path.name}: {text!r}"
    assert 0 < refused < len(texts) // 2  # both outcomes are exercised


def test_a_malformed_escape_names_its_line() -> None:
    with pytest.raises(ValueError, match=r"line 3: Malformed \\uxxxx encoding in 'x\\\\u12'"):
        parse_properties("a=1\n# c\nk = x\\u12\nz=2\n")
    with pytest.raises(ValueError, match="line 2:"):  # the line the logical line starts on
        parse_properties("a=1\nk = x\\\n  \\u12\n")
