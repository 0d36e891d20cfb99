"""The driver JVM that a plain Python process starts (a notebook kernel, a script): as quiet
as the one `spark-submit.sh` starts.

`spark-submit.sh` sets `SPARK_CONF_DIR=conf`, so Spark logs through `conf/log4j2.properties`
(warnings and errors only, known local noise muted). A session built from plain Python gets
Spark's shell profile instead: WARN lines at start-up. `launch_driver_jvm` points log4j2 at the
same file for the JVM it starts (unless the user chose a log4j2 file or a conf dir).

The JVM also prints `WARNING: Using incubator modules: jdk.incubator.vector` when it starts:
Spark's launcher always adds that module and Java offers no switch to silence the notice. In a
notebook every write to stderr is a red block, so the JVM's stderr passes through a thread that
drops that one line and hands on every other byte unchanged (errors must still be seen).

In a Jupyter kernel the JVM gets a process group of its own. ipykernel ends a kernel by
signalling every process in the kernel's group, again and again for seconds, and jupyter_client
then signals the group too: Spark, killed in the middle of its own shutdown, fills the terminal
with failed deletions and killed child processes. Outside the group, the JVM ends as PySpark
designed it to: at the end of its stdin, when the kernel has exited, through Spark's orderly
shutdown. Elsewhere (scripts, Airflow tasks) the JVM stays in the caller's group, so a kill of
the group stops its tasks at once, as a job that is safe to kill expects.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

__all__ = ["LOG4J_CONFIG", "launch_driver_jvm", "stop_driver_jvm"]

LOG4J_CONFIG = Path(__file__).resolve().parents[2] / "conf" / "log4j2.properties"
_LOG4J_ENV = "LOG4J_CONFIGURATION_FILE"  # log4j2's environment name for log4j2.configurationFile
_JVM_NOTICE = b"WARNING: Using incubator modules: "

_forwarder: threading.Thread | None = None


def launch_driver_jvm(conf: Mapping[str, str]) -> None:
    """Start the driver JVM for `conf` with the repo's log4j2 file and a filtered stderr, when
    this process has none yet; spark-submit's driver (PYSPARK_GATEWAY_PORT) is left alone.

    PySpark's builder then finds the gateway and uses it, as it would its own.
    """
    global _forwarder
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    spark_conf = SparkConf(loadDefaults=False).setAll(list(conf.items()))
    with _log4j_config():
        popen = {"stderr": subprocess.PIPE, "start_new_session": _in_jupyter_kernel()}
        gateway = launch_gateway(spark_conf, popen_kwargs=popen)
    _forwarder = threading.Thread(
        target=_forward, args=(gateway.proc.stderr,), name="kafkalog-jvm-stderr", daemon=True
    )
    _forwarder.start()
    SparkContext._ensure_initialized(gateway=gateway)


def stop_driver_jvm(timeout: float = 10.0) -> None:
    """End the JVM `launch_driver_jvm` started and wait until all it wrote is forwarded (before
    an `os._exit`, which would drop what the thread has not passed on yet)."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if _forwarder is None or proc is None or proc.stdin is None:
        return
    with suppress(OSError):
        proc.stdin.close()  # Spark's gateway exits when its stdin ends
    _forwarder.join(timeout)


def _in_jupyter_kernel() -> bool:
    """True in an IPython kernel process (a notebook's), whose shutdown signals its group."""
    kernel_app = sys.modules.get("ipykernel.kernelapp")
    return kernel_app is not None and kernel_app.IPKernelApp.initialized()


@contextmanager
def _log4j_config() -> Iterator[None]:
    """LOG4J_CONFIGURATION_FILE for the JVM's start only: the launcher copies the environment."""
    chosen = _LOG4J_ENV in os.environ or "SPARK_CONF_DIR" in os.environ
    if chosen or not LOG4J_CONFIG.is_file():
        yield
        return
    os.environ[_LOG4J_ENV] = str(LOG4J_CONFIG)
    try:
        yield
    finally:
        os.environ.pop(_LOG4J_ENV, None)


def _forward(stream: IO[bytes]) -> None:
    """Copy the JVM's stderr to this process's, line by line, without the incubator notice."""
    with stream:
        for line in iter(stream.readline, b""):
            if line.startswith(_JVM_NOTICE):
                continue
            view = memoryview(line)
            try:
                while view:  # fd 2 as it is now: a kernel or a test may have redirected it
                    view = view[os.write(2, view) :]
            except OSError:  # stderr closed: keep draining, so the JVM never blocks on it
                continue
