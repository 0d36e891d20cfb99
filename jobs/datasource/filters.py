"""Spark filters pushed down to `format("kafkalog")`, turned into bounds the indexes can apply.

Only what can be answered exactly is taken: EqualTo/In on topic and partition choose partition
dirs; comparisons on offset narrow the offset range (then the offset index finds the bytes);
comparisons on timestamp become inclusive microsecond bounds (the time index skips what is
provably older, every row is still checked). Everything else is left to Spark.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

__all__ = ["PushedBounds", "push_filters"]

_INF = float("inf")


@dataclass(frozen=True)
class PushedBounds:
    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    min_offset: int | None = None  # inclusive
    max_offset: int | None = None  # inclusive
    min_timestamp_us: int | None = None  # inclusive
    max_timestamp_us: int | None = None  # inclusive
    empty: bool = False  # contradictory filters: nothing can match

    def allows(self, topic: str, partition: int) -> bool:
        if self.empty:
            return False
        if self.topics is not None and topic not in self.topics:
            return False
        return self.partitions is None or partition in self.partitions


def _micros(value: Any) -> int | None:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:  # Spark hands naive datetimes in the local time zone
            value = value.astimezone()
        delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _lower(current: int | None, new: int) -> int:
    return new if current is None else max(current, new)


def _upper(current: int | None, new: int) -> int:
    return new if current is None else min(current, new)


def _range(bounds: PushedBounds, column: str, op: type, value: int) -> PushedBounds:
    lo_name, hi_name = (
        ("min_offset", "max_offset")
        if column == "offset"
        else ("min_timestamp_us", "max_timestamp_us")
    )
    lo, hi = getattr(bounds, lo_name), getattr(bounds, hi_name)
    if op is EqualTo:
        lo, hi = _lower(lo, value), _upper(hi, value)
    elif op is GreaterThan:
        lo = _lower(lo, value + 1)
    elif op is GreaterThanOrEqual:
        lo = _lower(lo, value)
    elif op is LessThan:
        hi = _upper(hi, value - 1)
    else:
        hi = _upper(hi, value)
    return replace(bounds, **{lo_name: lo, hi_name: hi})


def _one(bounds: PushedBounds, f: Filter) -> PushedBounds | None:
    """The bounds with `f` applied, or None when `f` is not one we answer exactly."""
    column = f.attribute[0] if len(f.attribute) == 1 else None
    if isinstance(f, In) and column in ("topic", "partition"):
        values = f.value
        if column == "topic" and all(isinstance(v, str) for v in values):
            topics = frozenset(values)
            merged = topics if bounds.topics is None else bounds.topics & topics
            return replace(bounds, topics=merged)
        if column == "partition" and all(_int(v) is not None for v in values):
            parts = frozenset(values)
            merged = parts if bounds.partitions is None else bounds.partitions & parts
            return replace(bounds, partitions=merged)
        return None
    if isinstance(f, EqualTo) and column == "topic" and isinstance(f.value, str):
        return _one(bounds, In(f.attribute, (f.value,)))
    if isinstance(f, EqualTo) and column == "partition" and _int(f.value) is not None:
        return _one(bounds, In(f.attribute, (f.value,)))
    ops = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
    if type(f) not in ops:
        return None
    if column == "offset" and _int(f.value) is not None:
        return _range(bounds, "offset", type(f), f.value)
    if column == "timestamp" and _micros(f.value) is not None:
        return _range(bounds, "timestamp", type(f), _micros(f.value))
    return None


def push_filters(filters: list[Filter]) -> tuple[PushedBounds, list[Filter]]:
    """(bounds of the filters taken, the filters left for Spark, by reference)."""
    bounds = PushedBounds()
    rest: list[Filter] = []
    for f in filters:
        updated = _one(bounds, f)
        if updated is None:
            rest.append(f)
        else:
            bounds = updated
    empty = (
        (bounds.topics is not None and not bounds.topics)
        or (bounds.partitions is not None and not bounds.partitions)
        or (bounds.min_offset or 0) > (_INF if bounds.max_offset is None else bounds.max_offset)
        or (
            bounds.min_timestamp_us is not None
            and bounds.max_timestamp_us is not None
            and bounds.min_timestamp_us > bounds.max_timestamp_us
        )
    )
    return replace(bounds, empty=bool(empty)), rest
