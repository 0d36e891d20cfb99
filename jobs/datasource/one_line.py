"""Our errors in the data source's Python workers as one line, not inside Spark's traceback.

Its own module: the source (planning, on the driver's side) and the readers (in the tasks) both
wrap their work in it, and neither imports the other for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Our errors (a bad option, a record that does not decode) reach the user as their one
    line, not with the Python worker's traceback inside Spark's: the worker formats a failure
    without its traceback when SPARK_HIDE_TRACEBACK is set, which it reads as it formats. A
    worker that failed is never reused, so the setting ends with it; other failures keep their
    tracebacks."""
    try:
        yield
    except Exception as error:
        from kafkalog_core.errors import KafkaLogError  # only on failure: schema() stays light

        if isinstance(error, KafkaLogError):
            os.environ["SPARK_HIDE_TRACEBACK"] = "1"
        raise
