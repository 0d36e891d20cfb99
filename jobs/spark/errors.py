"""One clear line out of a failed Spark job.

A task that raises one of our errors reaches the driver wrapped in a Py4J/Spark exception whose
text holds the Python traceback. The line naming our error is what a user needs; the rest is
noise. Shared by the ingest job, the maintenance jobs and the data source.
"""

from __future__ import annotations

import re

from kafkalog_core.errors import KafkaLogError

_PYTHON_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt): ")

# Modules whose exceptions carry a message meant for the user.
_OUR_MODULES = (
    "kafkalog_core.errors.",
    "jobs.ingestion.",
    "jobs.maintenance.",
    "jobs.datasource.",
)


# Every message of ours that a task raises through Spark SQL (`raise_error`) starts with this,
# e.g. the mapping's "kafkalog: invalid record: ".
DATA_ERROR_PREFIX = "kafkalog: "


# A task whose Python cannot import kafkalog (a Spark Connect server's, a cluster's executors').
_MISSING_PACKAGE = re.compile(
    r"ModuleNotFoundError: No module named '((?:kafkalog_core|jobs|pyspark_kafkalog)[\w.]*)'"
)


def missing_package_line(module: str) -> str:
    """The one line for Spark's Python workers that cannot import kafkalog: what to install
    where."""
    return (
        f"Spark's Python workers cannot import kafkalog (no module named '{module}'): install "
        "the kafkalog package into the Python they run (PYSPARK_PYTHON of the Spark Connect "
        "server or of the cluster's executors), or ship it to them (docs/cluster.md)"
    )


def _our_lines(text: str) -> list[str]:
    lines = [line for line in text.splitlines() if any(m in line for m in _OUR_MODULES)]
    return [line for line in lines if "Error:" in line or "Failure:" in line]


def is_data_error(error: BaseException) -> bool:
    """True for a failure that is one of our errors (raised on the driver, or in a task and
    wrapped by Spark): the job's own error line says it all. False for Spark's own failures."""
    if isinstance(error, KafkaLogError):
        return True
    text = str(error)
    return bool(_our_lines(text)) or DATA_ERROR_PREFIX in text


def task_error(error: BaseException) -> KafkaLogError:
    """The last `<our module>.SomeError: message` line in a Spark failure, as a KafkaLogError.

    Falls back to the failure's first line, so the caller can always print one line.
    """
    text = str(error)
    missing = _MISSING_PACKAGE.search(text)
    if missing is not None:
        return KafkaLogError(missing_package_line(missing[1]))
    lines = _our_lines(text)
    if lines:
        return KafkaLogError(lines[-1].split(": ", 1)[-1].strip())
    # a Python error from elsewhere (a missing module on the executors, ...): its own line
    python_errors = [line for line in text.splitlines() if _PYTHON_ERROR.match(line)]
    if python_errors:
        return KafkaLogError(f"Spark task failed: {python_errors[-1].strip()[:500]}")
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return KafkaLogError(f"Spark job failed: {first[:500]}")
