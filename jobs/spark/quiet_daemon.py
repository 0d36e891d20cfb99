"""PySpark's worker daemon, quiet when Spark stops reading a worker early.

`df.show(n)`, `limit(n)` and `take(n)` end a task as soon as enough rows have arrived: Spark
closes the socket of the Python worker that is still sending Arrow batches (a `format("kafkalog")`
read, a `mapInArrow`) and kills it. Since Spark 4.2 (SPARK-54344) the worker's last flush into
that closed socket raises, and the daemon prints `BrokenPipeError: [Errno 32] Broken pipe` with
a traceback under a successful result. The JVM already knows why it closed the socket (a limit
reached, a task cancelled or failed, and it reports the latter two itself), so a worker whose
output the JVM no longer reads ends quietly here, not reused. Everything else is Spark's daemon
unchanged. `get_or_create_session` selects it for local masters (`spark.python.daemon.module`;
a setting of the user's own wins): a cluster's executors may have kafkalog only as --py-files,
from which Spark's daemon cannot start.

With faulthandler on (`spark.python.worker.faulthandler.enabled`), Spark's own behaviour stays:
the failed flush raises and the thread dump is written, for whoever is chasing a hang.
"""

from __future__ import annotations

import os
import socket

from pyspark import daemon as _spark_daemon

__all__ = ["worker"]

_spark_worker = _spark_daemon.worker


def worker(sock: socket.socket, authenticated: bool) -> int:
    """Spark's worker; a closed socket on its last flush ends it with code 1 (never reused)."""
    try:
        return _spark_worker(sock, authenticated)
    except (BrokenPipeError, ConnectionResetError):
        if os.environ.get("PYTHON_FAULTHANDLER_DIR"):
            raise
        return 1


if __name__ == "__main__":
    _spark_daemon.worker = worker  # manager() looks the worker up in its module at each fork
    _spark_daemon.manager()
