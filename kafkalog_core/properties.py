"""java.util.Properties text, read and written as Java reads and writes it.

Two files kafkalog shares with a broker are Properties text: topic configs (`LogConfig`,
`--topic-config`) and a log dir's `meta.properties` (§9.5). One reader serves both, so a file
a broker accepts means the same thing here. The rules are `Properties.load(Reader)` of JDK 9+:

- lines end at `\\r\\n`, `\\r` or `\\n` (nothing else: not `\\v`, `\\x85` or `\\u2028`);
- leading spaces, tabs and form feeds are skipped; a line whose first other character is `#`
  or `!` is a comment, and a comment never continues;
- an odd number of trailing backslashes joins the next line (its leading whitespace skipped);
  an empty line ends the join; a dangling backslash at the end of the text is dropped, and a
  line of only a backslash joins nothing (the line after it starts afresh), except as the
  text's last line, which Java reads as the empty key with the empty value;
- the key ends at the first unescaped `=`, `:` or whitespace; whitespace, then at most one
  `=`/`:`, then whitespace separate it from the value (`k==v` has the value `=v`);
- escapes `\\t \\n \\r \\f \\uXXXX` and `\\<any>` = `<any>`; a `\\u` without four hex digits is
  refused (Java's IllegalArgumentException); UTF-16 surrogate pairs join into one character;
- a key given twice keeps its last value.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

__all__ = [
    "JAVA_LINE_BREAK",
    "format_properties",
    "java_date",
    "parse_properties",
    "read_properties",
]

JAVA_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")  # BufferedReader.readLine, Properties.load
_BLANK: Final = " \t\f"  # what Properties.load skips; not every Unicode space
_SEPARATORS: Final = "=:"
_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_UNESCAPES: Final = {v: k for k, v in _ESCAPES.items()}
_HEX4: Final = re.compile(r"[0-9a-fA-F]{4}")


def _continues(line: str) -> bool:
    """An odd run of trailing backslashes: the last one escapes the line break."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Properties.load's logical lines, each with the number of the line it starts on: comments
    and blank lines dropped, continuations joined."""
    lines = JAVA_LINE_BREAK.split(text)
    # Where the text ends for a continuation: LineReader ends the line at a final `\r` or `\n`
    # (not `\r\n`) before it looks at the backslash, so that line is kept even when empty.
    end = len(lines) - 1 if not lines[-1] and not text.endswith("\r\n") else len(lines)
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(_BLANK)
        i += 1
        start = i
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if i >= end or not line:
                break  # the text ends; or nothing to join: the next line starts afresh
            line += lines[i].lstrip(_BLANK)  # a `#` here is data, not a comment
            i += 1
        if line or i >= end:  # a lone backslash as the last line is a line: key "", value ""
            yield start, line


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if not _HEX4.fullmatch(digits):
                raise ValueError(f"Malformed \\uxxxx encoding in {text!r}")  # Java's words
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    joined = "".join(out)
    # Java strings are UTF-16: `\ud83d\ude00` is one character there, so it is one here too.
    return joined.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _split_key(line: str) -> tuple[str, str]:
    """The raw (still escaped) key and value of one logical line."""
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2  # an escaped character never ends the key
            continue
        if ch in _SEPARATORS or ch in _BLANK:
            break
        i += 1
    key, rest = line[:i], line[i:].lstrip(_BLANK)
    if rest[:1] and rest[0] in _SEPARATORS:  # at most one separator, with blanks either side
        rest = rest[1:].lstrip(_BLANK)
    return key, rest


def parse_properties(text: str) -> dict[str, str]:
    """Key -> value of Properties text; ValueError naming the line of a malformed `\\uXXXX`."""
    props: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split_key(line)
        try:
            props[_unescape(key)] = _unescape(value)
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
    return props


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """A Properties file read through a UTF-8 Reader, its line breaks as written (no newline
    translation: a `\\r\\n` and a `\\n` can end the text differently).

    OSError when it cannot be read; ValueError when it is not UTF-8 or a line holds a malformed
    `\\uXXXX`: the caller words either as its own error, naming the file.
    """
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte {exc.start})") from None
    return parse_properties(text)


def java_date(epoch_seconds: float | None = None) -> str:
    """java.util.Date.toString() in UTC, e.g. `Fri May 24 22:16:18 UTC 2019`."""
    return time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(epoch_seconds))


def _escape(text: str, is_key: bool) -> str:
    """Properties.store's saveConvert (non-ASCII kept as-is: the writer is UTF-8, not a stream)."""
    out = []
    for i, ch in enumerate(text):
        if ch == " " and (i == 0 or is_key):
            out.append("\\ ")
        elif ch in "\\=:#!":
            out.append("\\" + ch)
        elif ch in _UNESCAPES:
            out.append("\\" + _UNESCAPES[ch])
        else:
            out.append(ch)
    return "".join(out)


def format_properties(props: Mapping[str, str], *, date: str | None = None) -> str:
    """Properties.store(writer, ""): `#`, `#<date>`, then `key=value` lines."""
    lines = ["#", "#" + (date if date is not None else java_date())]
    lines.extend(f"{_escape(k, True)}={_escape(v, False)}" for k, v in props.items())
    return "".join(line + "\n" for line in lines)
