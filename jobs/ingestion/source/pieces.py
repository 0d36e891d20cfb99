"""What an arrow read task reads: a Parquet file, or some of its row groups, and a file's footer.

Its own module because the reader's planning and Spark's splits (`arrow_splits`) both build
pieces, and the splits must not import the reader that consumes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.ingestion.source.fs import open_file_system

__all__ = ["FilePiece", "file_metadata"]


@dataclass(frozen=True)
class FilePiece:
    """A whole Parquet file, or some of its row groups (a large file is split)."""

    path: str  # a plain local path or a URI (`source_fs`): a string, never a file system
    row_groups: tuple[int, ...] | None = None  # None: every row group
    # a table's partition columns the mapping reads: (name, value), the same for every row
    partition_values: tuple[tuple[str, pa.Scalar], ...] = ()


def file_metadata(location: str) -> pq.FileMetaData:
    """A Parquet file's footer, local or through `source_fs`."""
    fs, path = open_file_system(location)
    return pq.read_metadata(path, filesystem=fs)
