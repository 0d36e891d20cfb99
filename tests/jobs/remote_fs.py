"""A stand-in object store for the arrow reader's tests: `kltest://<bucket>/<key>` is
`<base>/<bucket>/<key>` behind a `pyarrow.fs.PyFileSystem`, and every file it opens is logged
with the opening process's id, so a test sees that (and where) a task read through it.

It lives outside the test modules so Spark's Python workers import the resolver by name
(`source_fs` resolvers travel to the tasks pickled).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

SCHEME = "kltest"


class RecordingHandler(pafs.FileSystemHandler):
    """Read-only: a sub-tree of the local file system that logs every file opened."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.fs = pafs.SubTreeFileSystem(base, pafs.LocalFileSystem())

    def _opened(self, path: str) -> None:
        with open(Path(self.base) / "opens.log", "a") as log:
            log.write(f"{os.getpid()} {path}\n")

    def get_type_name(self) -> str:
        return SCHEME

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths):
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.fs.get_file_info(selector)

    def open_input_file(self, path: str):
        self._opened(path)
        return self.fs.open_input_file(path)

    def open_input_stream(self, path: str):
        self._opened(path)
        return self.fs.open_input_stream(path)

    def __eq__(self, other) -> bool:
        return isinstance(other, RecordingHandler) and other.base == self.base

    def __ne__(self, other) -> bool:
        return not self == other

    def _read_only(self, *args, **kwargs):
        raise OSError(f"{SCHEME}:// is read-only")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _read_only
    delete_file = move = copy_file = open_output_stream = open_append_stream = _read_only


@dataclass(frozen=True)
class StoreResolver:
    """The `source_fs` resolver for `kltest://`: picklable, equal by its base directory."""

    base: str

    def __call__(self, root: str) -> tuple[pafs.FileSystem, str]:
        bucket = root.split("://", 1)[1].strip("/")
        return pafs.PyFileSystem(RecordingHandler(self.base)), bucket

    def opens(self) -> list[tuple[int, str]]:
        """(process id, path in the store) of every file opened so far."""
        log = Path(self.base) / "opens.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [(int(pid), path) for pid, path in (line.split(" ", 1) for line in lines)]
