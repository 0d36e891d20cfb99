"""The arrow task reader's file access: a source file's path or URI -> a pyarrow file system.

A plain path is a local file. A URI goes through the pyarrow file system its scheme names
(`pyarrow.fs.FileSystem.from_uri`: file, s3, gs/gcs, abfs/abfss, hdfs, as this pyarrow build
has them); Spark's `s3a://` and `s3n://` spellings are read as `s3://`. URIs come here decoded,
as the planner gets them (Spark's input files unquoted, delta-rs's snapshot files): scheme,
authority, then the path as the store names it, without percent-escapes or a query.

Only the string travels to a task. Each process builds one file system per scheme and
authority (`s3://bucket`, `hdfs://namenode:8020`) and keeps it, so no live file system is ever
pickled, and credentials are whatever pyarrow's default resolution finds where the process
runs (environment variables, the instance's or pod's role, ~/.aws, Google's application
default credentials, Azure's default credential chain, the Hadoop configuration for HDFS).

`RESOLVERS` is the one hook: scheme -> a function like `FileSystem.from_uri`, used in its place.
Tests map a made-up scheme to a file system of their own with it. The read plan carries the
resolvers its files use (`resolvers_for`) and tasks `install` them, so a resolver must be
picklable: a module-level function, or an instance of a module-level (frozen) dataclass.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pyarrow.fs as pafs

__all__ = [
    "RESOLVERS",
    "install",
    "io_map",
    "open_file_system",
    "resolvers_for",
    "split_uri",
    "why_not_open",
]

Resolver = Callable[[str], tuple[pafs.FileSystem, str]]
T = TypeVar("T")
R = TypeVar("R")

RESOLVERS: dict[str, Resolver] = {}
SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}  # Hadoop's S3 connectors, pyarrow's s3
IO_THREADS = 16  # footers and sizes on the driver: latency-bound on an object store

_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):(//[^/]*)?(.*)$")  # 2+ letters: not a drive
_LOCAL = pafs.LocalFileSystem()
_built: dict[tuple[Resolver, str], tuple[pafs.FileSystem, str]] = {}
_lock = threading.Lock()


def split_uri(location: str) -> tuple[str, str, str] | None:
    """(scheme, authority, path) of a URI, the scheme lower-cased and unaliased; None for a
    plain path."""
    m = _URI.match(location)
    if m is None:
        return None
    scheme = m.group(1).lower()
    return SCHEME_ALIASES.get(scheme, scheme), (m.group(2) or "//")[2:], m.group(3)


def open_file_system(location: str) -> tuple[pafs.FileSystem, str]:
    """(file system, path in it) for a source file's plain path or URI. Raises whatever the
    resolver raises when pyarrow cannot open the scheme (unknown, or not in this build)."""
    parts = split_uri(location)
    if parts is None:
        return _LOCAL, location
    scheme, authority, path = parts
    resolver = RESOLVERS.get(scheme, pafs.FileSystem.from_uri)
    root = f"{scheme}://{authority}/"
    with _lock:  # one build per root, even with the driver's count threads racing for it
        built = _built.get((resolver, root))
        if built is None:
            built = _built[(resolver, root)] = resolver(root)
    fs, base = built
    return fs, base.rstrip("/") + "/" + path.lstrip("/")


def why_not_open(locations: Iterable[str]) -> str:
    """ "" when pyarrow opens every location's file system, else why not (the first failure)."""
    tried: set[tuple[str, str]] = set()
    for location in locations:
        parts = split_uri(location)
        if parts is None or parts[:2] in tried:
            continue
        tried.add(parts[:2])
        try:
            open_file_system(location)
        except Exception as error:  # noqa: BLE001 - any failure: Spark's reader reads it
            lines = str(error).strip().splitlines() or [type(error).__name__]
            return f"pyarrow cannot open {parts[0]}://{parts[1]} ({lines[0]})"
    return ""


def resolvers_for(locations: Iterable[str]) -> tuple[tuple[str, Resolver], ...]:
    """The hooked resolvers these locations use, for the tasks to `install`."""
    schemes = {parts[0] for parts in map(split_uri, locations) if parts is not None}
    return tuple(sorted((s, RESOLVERS[s]) for s in schemes if s in RESOLVERS))


def install(resolvers: Sequence[tuple[str, Resolver]]) -> None:
    """In a task: resolve these schemes as the driver did."""
    RESOLVERS.update(resolvers)


def io_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """`fn` over `items` in order, on threads when there are several (remote I/O waits)."""
    if len(items) < 2:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(IO_THREADS, len(items))) as pool:
        return list(pool.map(fn, items))
