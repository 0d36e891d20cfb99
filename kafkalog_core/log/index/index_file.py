"""The file side every index shares: its path, whether it exists, delete and rename.

`AbstractIndex` (offset_index.py: .index and .timeindex) and `TransactionIndex`
(txn_index.py: .txnindex) derive from `IndexFile`, so a segment deletes and renames its three
indexes one way; each index says in `_forget` what its in-memory state becomes when its file
is deleted.
"""

from __future__ import annotations

import os
from pathlib import Path


class IndexFile:
    """An index's file name and base offset; the file need not exist."""

    def __init__(self, path: str | os.PathLike[str], base_offset: int) -> None:
        self._path = Path(path)
        self.base_offset = int(base_offset)

    @property
    def path(self) -> Path:
        return self._path

    def file_exists(self) -> bool:
        return self._path.exists()

    def delete(self) -> bool:
        """Delete the file if it exists (Kafka's deleteIfExists); True if it did."""
        self._forget()
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, new_path: str | os.PathLike[str]) -> None:
        """Move the file (if it exists) and keep using the new name (suffix changes)."""
        target = Path(new_path)
        try:
            if self._path.exists():
                os.replace(self._path, target)
        finally:
            self._path = target

    def _forget(self) -> None:
        """Drop what is held in memory for a file that is being deleted."""
