"""One way for every job to get its SparkSession, with the repo's Spark settings applied.

A JVM started here (a notebook, a script) logs as `spark-submit.sh`'s does
(`jobs.spark.driver_jvm`).

Precedence, lowest first: `conf/spark-defaults.conf` < what spark-submit already set (its
`--conf`, `--master`, properties file) < `conf_overrides` from the caller. When no master is set
anywhere (a plain `python jobs/x.py` or a notebook), the session runs `local[*]`.

`has_delta_extension` tells the source readers whether Spark's own Delta source is usable; if
not, Delta tables are read through delta-rs (`jobs.spark.delta`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from jobs.spark.driver_jvm import launch_driver_jvm, stop_driver_jvm
from kafkalog_core.errors import ConfigError
from kafkalog_core.properties import read_properties

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULTS_FILE",
    "DELTA_EXTENSION",
    "connect_url",
    "exit_driver",
    "get_or_create_session",
    "has_delta_extension",
    "read_spark_defaults",
    "resolve_session_conf",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULTS_FILE = REPO_ROOT / "conf" / "spark-defaults.conf"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DEFAULT_MASTER = "local[*]"
# local sessions: Spark's worker daemon, quiet when show(n)/limit(n) stops a worker early
DAEMON_MODULE = "spark.python.daemon.module"
QUIET_DAEMON = "jobs.spark.quiet_daemon"
# what Spark trims from a value: String.trim's characters (<= U+0020) but the line breaks
_SPARK_TRIMS = "".join(chr(c) for c in range(0x21) if chr(c) not in "\r\n")


def read_spark_defaults(path: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """A spark-defaults.conf as spark-submit reads it: java.util.Properties text (`key value` or
    `key=value` lines, `#`/`!` comments), each value trimmed of spaces and control characters
    but not of an escaped `\\r`/`\\n` (Spark's getPropertiesFromFile).

    `KAFKALOG_SPARK_DEFAULTS` points at another file; a missing file means no defaults.
    """
    if path is None:
        path = os.environ.get("KAFKALOG_SPARK_DEFAULTS", DEFAULTS_FILE)
    file = Path(path)
    if not file.is_file():
        return {}
    try:
        settings = read_properties(file)
    except (OSError, ValueError) as e:  # unreadable, not UTF-8, a malformed \uXXXX
        raise ConfigError(f"{file}: {e}") from None
    return {key: value.strip(_SPARK_TRIMS) for key, value in settings.items()}


def resolve_session_conf(
    file_defaults: Mapping[str, str],
    submitted: Mapping[str, str],
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The settings the builder must set: defaults not already submitted, then overrides.

    Submitted settings are already in the JVM, so they are not repeated; a master is added only
    when nothing provides one.
    """
    conf = {k: v for k, v in file_defaults.items() if k not in submitted}
    conf.update({k: str(v) for k, v in (overrides or {}).items()})
    if "spark.master" not in submitted and "spark.master" not in conf:
        conf["spark.master"] = DEFAULT_MASTER
    master = conf.get("spark.master") or submitted.get("spark.master", "")
    if master.startswith("local") and DAEMON_MODULE not in submitted and DAEMON_MODULE not in conf:
        # the workers of a local master import kafkalog as the driver does; a cluster's
        # executors may have it only as --py-files, which Spark's daemon cannot start from
        conf[DAEMON_MODULE] = QUIET_DAEMON
    return conf


def _submitted_conf() -> dict[str, str]:
    """Settings spark-submit passed to this driver (empty when started by plain python)."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM; loads its spark.* props
    return dict(SparkConf().getAll())


def get_or_create_session(
    app_name: str, conf_overrides: Mapping[str, str] | None = None
) -> SparkSession:
    """The active session if there is one (overrides applied where Spark allows), else a new one."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        for key, value in (conf_overrides or {}).items():
            try:
                active.conf.set(key, str(value))
            except Exception:  # static configs cannot change on a running session
                if active.conf.get(key, None) != str(value):
                    raise ConfigError(
                        f"spark setting {key}={value} cannot be changed on the running session"
                    ) from None
        return active

    remote = connect_url()
    if remote:
        return _connect_session(app_name, remote, conf_overrides)
    conf = resolve_session_conf(read_spark_defaults(), _submitted_conf(), conf_overrides)
    _local_workers_use_this_python(conf)
    launch_driver_jvm(conf)  # quiet: conf/log4j2.properties, no JVM notice on stderr
    builder = SparkSession.builder.appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    level = conf.get("kafkalog.log.level") or os.environ.get("KAFKALOG_SPARK_LOG_LEVEL")
    if level:
        session.sparkContext.setLogLevel(level)
    return session


def connect_url() -> str:
    """The Spark Connect server to run as a client of (`SPARK_REMOTE`, which
    `./spark-submit.sh --remote URL` sets), or "" for a classic session."""
    return os.environ.get("SPARK_REMOTE", "").strip()


def _connect_session(
    app_name: str, url: str, conf_overrides: Mapping[str, str] | None
) -> SparkSession:
    """A Spark Connect client session on `url`. The server owns its static settings (memory,
    master, plugins); of conf/spark-defaults.conf and the overrides, the SQL settings a session
    may change are set on this one, the rest stay the server's."""
    from pyspark.sql import SparkSession

    try:
        session = SparkSession.builder.remote(url).appName(app_name).getOrCreate()
    except Exception as error:  # noqa: BLE001 - a bad URL or no server there
        lines = str(error).strip().splitlines() or [type(error).__name__]
        raise ConfigError(f"Spark Connect server {url}: {lines[0]}") from None
    settings = {k: v for k, v in read_spark_defaults().items() if k.startswith("spark.sql.")}
    settings.update({k: str(v) for k, v in (conf_overrides or {}).items()})
    for key, value in settings.items():
        with suppress(Exception):  # a static setting: the server's own
            session.conf.set(key, value)
    from jobs.spark.tasks import require_kafkalog_on_workers

    require_kafkalog_on_workers(session)  # one line now, not a task failure mid-run
    return session


def _local_workers_use_this_python(conf: Mapping[str, str]) -> None:
    """A local session started from plain Python (a notebook kernel, a script) runs its Python
    workers with `PYSPARK_PYTHON`, which defaults to whatever `python3` is on PATH: often not
    the venv this driver runs in, and then every task fails on a missing pyarrow. Use this
    interpreter unless the user chose one."""
    master = conf.get("spark.master", "")
    chosen = "PYSPARK_PYTHON" in os.environ or "spark.pyspark.python" in conf
    if master.startswith("local") and not chosen and "PYSPARK_GATEWAY_PORT" not in os.environ:
        os.environ["PYSPARK_PYTHON"] = sys.executable


def has_delta_extension(spark: SparkSession) -> bool:
    """True when Spark's Delta source is usable: the extension is configured AND its class loads.

    Spark ignores (with a warning) an extension class it cannot load, so the setting alone is
    not enough.
    """
    try:
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
    except Exception:
        return False
    if DELTA_EXTENSION not in [e.strip() for e in extensions.split(",")]:
        return False
    from jobs.spark.tasks import is_connect

    if is_connect(spark):  # no JVM at hand: the server has it configured; trust the setting
        return True
    jvm = getattr(getattr(spark, "sparkContext", None), "_jvm", None)
    if jvm is None:
        return True
    try:
        jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(DELTA_EXTENSION)
    except Exception:
        return False
    return True


def exit_driver(code: int) -> NoReturn:
    """The end of a spark-submit entry point (`jobs/<job>.py` run as a script): stop Spark,
    flush what was printed, and leave without Python's interpreter teardown.

    The job's work, its publish and its report are done by then. What the teardown still does
    is destroy native libraries' state while their threads may run; a cluster run once
    aborted there ("terminate called without an active exception", exit 134) after a
    successful publish, and a scheduler would have marked the published run failed.
    """
    import logging

    try:
        with suppress(Exception):  # exiting anyway; the job's own outcome is in `code`
            from pyspark.sql import SparkSession

            active = SparkSession.getActiveSession()
            if active is not None:
                active.stop()
            stop_driver_jvm()  # a JVM this process started: forward its last lines first
    finally:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with suppress(Exception):  # a closed pipe must not change the exit code
                stream.flush()
        os._exit(code)
