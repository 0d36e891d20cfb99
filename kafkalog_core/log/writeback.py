"""Start the OS's write-back of a file's dirty pages without waiting (Linux `sync_file_range`).

A segment that must be durable later (a staged segment is fsynced before it is published) can
ask for this right after its bytes are written: the disk writes then overlap whatever the
process does next, and the final fsync finds little left to do. It is only a hint. Where the
call does not exist (not Linux) or fails, nothing happens and fsync alone makes the bytes
durable, just later.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

__all__ = ["available", "start_writeback"]

_SYNC_FILE_RANGE_WRITE = 2  # start write-out of dirty pages in the range; do not wait
_call: Callable[[int, int, int, int], int] | None = None
_loaded = False


def _load() -> Callable[[int, int, int, int], int] | None:
    global _call, _loaded
    if not _loaded:
        _loaded = True
        if sys.platform.startswith("linux"):
            try:
                fn = ctypes.CDLL(None, use_errno=True).sync_file_range
            except (OSError, AttributeError):
                fn = None
            if fn is not None:
                fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
                fn.restype = ctypes.c_int
                _call = fn
    return _call


def available() -> bool:
    """Whether this platform can start write-back without waiting."""
    return _load() is not None


def start_writeback(fd: int, offset: int = 0, nbytes: int = 0) -> bool:
    """Start writing the dirty pages of [offset, offset + nbytes) of `fd` (0 bytes: to the end).

    Returns whether the OS accepted the request; False is harmless.
    """
    call = _load()
    return call is not None and call(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE) == 0
