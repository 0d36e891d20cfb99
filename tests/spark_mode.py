"""A Spark Connect server in a classic session's JVM, its client, and the switch between the two
in one process (tests and bench/)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

MODE = "SPARK_CONNECT_MODE_ENABLED"  # pyspark's functions build Connect columns while set


@contextlib.contextmanager
def spark_mode(kind: str) -> Iterator[None]:
    """pyspark's functions build a Connect or a classic Column by the process's mode
    (`SPARK_CONNECT_MODE_ENABLED`); a client process has one mode, this one switches for the
    block (`kind`: "connect" or "classic")."""
    before = os.environ.pop(MODE, None)
    if kind == "connect":
        os.environ[MODE] = "1"
    try:
        yield
    finally:
        os.environ.pop(MODE, None)
        if before is not None:
            os.environ[MODE] = before


CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"  # pyspark's Connect jar


def connect_server_conf(port: int) -> dict[str, str]:
    """The settings that make a classic session's JVM serve Spark Connect clients on `port`
    (pyspark's own Connect plugin; static: set before the JVM starts)."""
    return {"spark.plugins": CONNECT_PLUGIN, "spark.connect.grpc.binding.port": str(port)}


def connect_client(port: int) -> Any:
    """A Spark Connect client of the server on this host's `port`."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    return ConnectSession.builder.remote(f"sc://localhost:{port}").create()
