"""encode_json against Spark's own to_json (the `format: json` of a column list on Spark's
path) on one small DataFrame of every type it writes: the same bytes, row for row, with and
without the C module."""

from __future__ import annotations

import decimal
import math

import pyarrow as pa
import pytest

from kafkalog_core.schema import encode_json
from tests.schema.helpers import both_paths

pytestmark = pytest.mark.spark

D = decimal.Decimal
DOUBLES = [
    0.1,
    1 / 3,
    1e-3,
    9.99e-4,
    1e7,
    9999999.0,
    123456.789,
    1e-7,
    1e300,
    -2.5,
    5e-324,
    1e-320,
    1.7976931348623157e308,
    100.0,
    -0.0,
    0.0,
    math.nan,
    math.inf,
    -math.inf,
    4.35,
    1e22,
    1e15,
]
FLOATS = [0.1, 3.4e38, 1.4e-45, 1e-3, 16777216.0, 0.3, -7.25, 1e10, 1e-40, math.nan, -math.inf]
STRINGS = [
    "plain",
    'q"uote',
    "back\\slash",
    "ctl\b\t\n\f\r\x01\x1f\x7f",
    "é ü 中文 😀",
    "</script>",
    "",
]
SQL = """
select id, b, tiny, small, i, l, d, f, dec, small_dec, s, bin, dt, ts, ntz, arr, m, im, st, nothing
from (
  select id,
    id % 2 = 0 as b,
    cast(id - 3 as tinyint) as tiny,
    cast(id * -600 as smallint) as small,
    cast(id * 100000 as int) as i,
    id * 1000000000000 - 5 as l,
    element_at(array({doubles}), cast(id % {nd} + 1 as int)) as d,
    cast(element_at(array({floats}), cast(id % {nf} + 1 as int)) as float) as f,
    cast(element_at(array(0, 0.00000001, -0.0000001, 12345.5, 1e-6, -99999999.99), cast(id % 6 + 1 as int)) as decimal(20, 10)) as dec,
    cast(id * 3 - 7 as decimal(5, 0)) as small_dec,
    element_at(array({strings}), cast(id % {ns} + 1 as int)) as s,
    cast(element_at(array({strings}), cast(id % {ns} + 1 as int)) as binary) as bin,
    date_add(date'1970-01-01', cast(element_at(array(0, -1, 19723, -719162, 2932896, -800000, 3000000), cast(id % 7 + 1 as int)) as int)) as dt,
    timestamp_micros(element_at(array(0, -1, 1714564800123456, -62135596800000000, 253402300799999999, -70000000000000000, 1500), cast(id % 7 + 1 as int))) as ts,
    cast(timestamp_micros(element_at(array(0, -1, 1714564800123456, 1500), cast(id % 4 + 1 as int))) as timestamp_ntz) as ntz,
    if(id % 5 = 0, null, array(id, null, id + 1)) as arr,
    if(id % 4 = 1, null, map('k', id, 'n"ull', cast(null as bigint))) as m,
    map(cast(id as int), 'v') as im,
    if(id % 3 = 0, null, named_struct('x', if(id % 2 = 0, null, id), 'y', if(id < 0, null, array(named_struct('z', if(id < 0, null, 'q')))))) as st,
    cast(null as string) as nothing
  from range(0, {rows})
)
"""


def _literal(x: float) -> str:
    if math.isnan(x):
        return "double('NaN')"
    if math.isinf(x):
        return "double('Infinity')" if x > 0 else "double('-Infinity')"
    return f"double({x!r})" if x != 0 or math.copysign(1, x) > 0 else "double('-0.0')"


def _string(s: str) -> str:
    return "unhex('" + s.encode().hex() + "')"


def _frame(spark, rows: int = 48):
    sql = SQL.format(
        doubles=", ".join(map(_literal, DOUBLES)),
        nd=len(DOUBLES),
        floats=", ".join(map(_literal, FLOATS)),
        nf=len(FLOATS),
        strings=", ".join(f"cast({_string(s)} as string)" for s in STRINGS),
        ns=len(STRINGS),
        rows=rows,
    )
    return spark.sql(sql)


def _struct(table: pa.Table) -> pa.StructArray:
    """The table's columns as one struct array (Spark's batches may hold nulls under a null
    struct in fields it declares non-null, which Table.to_struct_array refuses to view)."""
    return pa.StructArray.from_arrays(
        [c.combine_chunks() for c in table.columns], table.column_names
    )


def _in_zone(t: pa.DataType, zone: str) -> pa.DataType:
    if pa.types.is_timestamp(t) and t.tz is not None:
        return pa.timestamp(t.unit, zone)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_in_zone(f.type, zone)) for f in t])
    return t


def _compare(spark, monkeypatch, df, zone: str | None = None):
    from pyspark.sql import functions as F

    expected = [r.j for r in df.select(F.to_json(F.struct(*df.columns)).alias("j")).collect()]
    table = df.toArrow()
    values = _struct(table)
    if zone is not None:  # the instants are the same; the type's zone is the one written
        values = values.cast(_in_zone(values.type, zone))
    with_c, without_c = both_paths(monkeypatch, lambda: encode_json(values))
    got = [v.decode() for v in with_c.to_pylist()]
    for i, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
        assert ours == theirs, f"row {i}"
    assert with_c.equals(without_c)


def test_every_type_as_spark_writes_it(spark, monkeypatch):
    _compare(spark, monkeypatch, _frame(spark))


def test_timestamps_in_a_session_zone_with_an_offset(spark, monkeypatch):
    """Spark writes timestamps in its session zone; the caller gives the Arrow type that zone
    (DataFrame.toArrow hands UTC), and the text follows it, historical offsets included."""
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    try:
        df = spark.sql(
            "select named_struct('t', timestamp_micros(x)) as v, timestamp_micros(x) as t from "
            "values (0L), (1719792000000000L), (-2240524800000000L), (-1L) as r(x)"
        )
        _compare(spark, monkeypatch, df, zone="Asia/Kolkata")
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)


def test_doubles_are_the_shortest_that_read_back(spark):
    """Java's Double.toString prints the shortest decimal that reads back (JDK 19 on, which
    we write); older JVMs print a longer one for some doubles (JDK-4511638: 2.0E23 as
    1.9999999999999998E23, integers between 1e16 and 1e19 in full). Either way both name the
    same double, and ours is never longer."""
    from pyspark.sql import functions as F

    values = [2e23, 1e17 + 8, 4.6339927102834509e17, 3.4787077052583516e25, 1.0e-5, 0.1, 123.456]
    df = spark.createDataFrame([(v,) for v in values], "d double")
    theirs = [r.j for r in df.select(F.to_json(F.struct("d")).alias("j")).collect()]
    ours = [v.decode() for v in encode_json(_struct(df.toArrow())).to_pylist()]
    version = int(spark.sparkContext._jvm.System.getProperty("java.specification.version"))
    for mine, spark_text in zip(ours, theirs, strict=True):
        a, b = mine[5:-1], spark_text[5:-1]
        assert float(a) == float(b)
        assert len(a) <= len(b)
        if version >= 19:
            assert a == b
