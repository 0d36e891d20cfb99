"""The pieces of Spark's JSON that are the same whichever encoder assembles the rows: Jackson's
string escapes, and the shortest digits of floats and doubles in Java's layout.

Java's `Double.toString`/`Float.toString` (JDK 19 and later) print the shortest decimal that
reads back as the same value, which is what Arrow's float-to-string cast finds; only the layout
differs (plain with at least one fraction digit for 1e-3 <= |x| < 1e7, else d.dddE<n>; NaN and
the infinities are quoted strings in JSON). One exception: where the shortest decimal has one
digit, Java picks the closest of two digits, which differs only for the few smallest
subnormals (4.9E-324, not 5E-324); `float_texts` corrects those from a table made with exact
arithmetic.
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["cat", "escape_key", "float_texts", "java_float_text", "lit"]


def lit(text: str) -> pa.Scalar:
    """A large_string scalar (the JSON texts are large_string throughout)."""
    return pa.scalar(text, pa.large_string())


def cat(*parts: pa.Array | str) -> pa.Array:
    """Row i of each part (or the text itself), concatenated."""
    items = [lit(p) if isinstance(p, str) else p.cast(pa.large_string()) for p in parts]
    return pc.binary_join_element_wise(*items, lit(""))


_SHORT_ESCAPES = {
    0x08: "\\b",
    0x09: "\\t",
    0x0A: "\\n",
    0x0C: "\\f",
    0x0D: "\\r",
    0x22: '\\"',
    0x5C: "\\\\",
}


def escape_char(code: int) -> str:
    """How Jackson writes one character that needs an escape (" \\ and codes below 0x20)."""
    return _SHORT_ESCAPES.get(code, f"\\u{code:04X}")


def escape_key(name: str) -> bytes:
    """A struct field's name as the JSON text before its value: "name": (escaped, UTF-8)."""
    text = "".join(escape_char(ord(c)) if ord(c) < 0x20 or c in '"\\' else c for c in name)
    return f'"{text}":'.encode()


# subnormals whose shortest decimal may have one digit: |x| below these (doubles, floats)
_TINY = {8: 1e-322, 4: 1e-44}
_MIN_SUBNORMAL = {8: Fraction(1, 2**1074), 4: Fraction(1, 2**149)}


def _digits_closest(x: Fraction, ulp: Fraction, even: bool) -> str:
    """Java's pick for a subnormal x = m * ulp: the shortest decimals (at least two digits)
    that round to x, the closest of them; as Arrow-style text "d.de<exp>"."""
    half = ulp / 2
    lo, hi = x - half, x + half
    exp = 0
    while Fraction(10) ** exp > x:
        exp -= 1
    while Fraction(10) ** (exp + 1) <= x:
        exp += 1
    for length in range(2, 20):
        step = Fraction(10) ** (exp - length + 1)
        base = (x / step).__floor__()
        best = None
        for k in (base - 1, base, base + 1, base + 2):
            d = k * step
            inside = lo < d < hi or (even and d in (lo, hi))
            if inside and k > 0 and (best is None or abs(d - x) < abs(best - x)):
                best = d
        if best is not None:
            k = int(best / step)
            text = str(k)
            exp10 = exp - length + 1 + len(text) - 1
            return f"{text[0]}.{text[1:]}e{exp10}"
    raise AssertionError("no decimal found")  # pragma: no cover


@cache
def _subnormal_table(width: int) -> dict[float, str]:
    ulp = _MIN_SUBNORMAL[width]
    table = {}
    m = 1
    while float(m * ulp) < _TINY[width]:
        x = m * ulp
        table[float(x)] = _digits_closest(x, ulp, m % 2 == 0)
        m += 1
    return table


def java_float_text(array: pa.Array) -> pa.Array:
    """Arrow's shortest text of each float/double (large_string), with the smallest subnormals
    as Java writes them; the encoders lay the digits out as Java does."""
    width = array.type.byte_width
    text = pc.cast(array.cast(pa.float64()) if width == 2 else array, pa.large_string())
    values = np.asarray(array.fill_null(0), dtype=np.float64)
    tiny = (np.abs(values) < _TINY.get(width, 0)) & (values != 0)
    if tiny.any():
        table = _subnormal_table(width)
        rows = np.flatnonzero(tiny)
        fixed = [("-" if values[i] < 0 else "") + table[float(abs(values[i]))] for i in rows]
        mask = np.zeros(len(array), dtype=bool)
        mask[rows] = True
        text = pc.replace_with_mask(text, pa.array(mask), pa.array(fixed, pa.large_string()))
    return text


def float_texts(text: pa.Array) -> pa.Array:
    """Arrow's shortest texts (see `java_float_text`) in Java's layout, as JSON (NaN and the
    infinities quoted): the Arrow-compute twin of json_double in _native_schema.c."""
    n = len(text)
    parts = pc.extract_regex(
        text, r"^(?P<sign>-?)(?P<whole>\d+)(?:\.(?P<frac>\d+))?(?:e\+?(?P<exp>-?\d+))?$"
    )
    sign = pc.fill_null(parts.field("sign"), "").cast(pa.large_string())
    whole = pc.fill_null(parts.field("whole"), "0")
    frac = pc.fill_null(parts.field("frac"), "")
    exp_text = pc.fill_null(parts.field("exp"), "")
    exp = np.asarray(pc.cast(pc.if_else(pc.equal(exp_text, ""), lit("0"), exp_text), pa.int64()))
    digits = cat(whole, frac)
    trimmed = pc.utf8_ltrim(digits, "0")
    lead = np.asarray(pc.utf8_length(digits)) - np.asarray(pc.utf8_length(trimmed))
    mant = pc.utf8_rtrim(trimmed, "0")
    size = np.asarray(pc.utf8_length(mant))
    sci = exp + np.asarray(pc.utf8_length(whole)) - lead - 1
    zero = size == 0
    size = np.where(zero, 1, size)
    mant = pc.if_else(pa.array(zero), lit("0"), mant)
    sci = np.where(zero, 0, sci)
    # d.dddE<n>
    rest = pc.utf8_slice_codeunits(mant, 1)
    rest = pc.if_else(pc.equal(rest, ""), lit("0"), rest)
    out = cat(
        pc.utf8_slice_codeunits(mant, 0, 1),
        ".",
        rest,
        "E",
        pc.cast(pa.array(sci), pa.large_string()),
    )
    plain = (sci >= -3) & (sci < 7)
    for s in range(-3, 7):
        mask = plain & (sci == s)
        if not mask.any():
            continue
        m = pc.filter(mant, pa.array(mask))
        sz = size[mask]
        if s < 0:
            piece = cat("0." + "0" * (-s - 1), m)
        else:
            w = s + 1
            short = sz <= w
            pad = pc.utf8_rpad(m, w, "0")
            padded = cat(pad, ".0")
            split = cat(pc.utf8_slice_codeunits(m, 0, w), ".", pc.utf8_slice_codeunits(m, w))
            piece = pc.if_else(pa.array(short), padded, split)
        out = pc.replace_with_mask(out, pa.array(mask), piece.cast(pa.large_string()))
    zero_text = pc.if_else(pa.array(zero), lit("0.0"), out)
    out = cat(sign, zero_text)
    special = {"nan": '"NaN"', "inf": '"Infinity"', "-inf": '"-Infinity"'}
    for raw, written in special.items():
        out = pc.if_else(pc.equal(text, raw), lit(written), out)
    assert len(out) == n
    return out.cast(pa.large_string())
