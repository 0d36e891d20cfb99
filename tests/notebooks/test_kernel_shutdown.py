"""Closing a notebook ends its Spark quietly: the JVM the kernel started is outside the
kernel's process group, which ipykernel and jupyter_client signal at shutdown, and it ends by
itself once the kernel has exited.

Inside the group, ipykernel sends SIGTERM to every process in it for seconds, Spark is killed in
the middle of its own shutdown, and the terminal shows failed deletions of Spark's scratch dirs
or `ERROR Utils: Process ArraySeq(getconf, PAGESIZE) exited with code 143`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.killer import wait_session_gone
from tests.notebooks import kernel

CELLS = [
    "import os\n\nfrom pyspark import SparkContext\n\nfrom jobs.spark.session import get_or_create_session",
    # a Python UDF stage: the JVM starts Spark's Python worker daemon as its child
    'spark = get_or_create_session("shutdown")\n'
    'spark.range(1000).mapInArrow(lambda batches: batches, "id long").count()',
    "jvm = SparkContext._gateway.proc.pid\n"
    "print(jvm, os.getpgid(jvm) == os.getpgrp(), os.getsid(jvm) == jvm)",
]


@pytest.mark.spark
def test_the_jvm_is_not_in_the_kernels_group_and_ends_with_the_kernel(tmp_path: Path) -> None:
    nb = kernel.execute_cells(CELLS, tmp_path)  # returns once the kernel has shut down
    pid, same_group, leads_session = kernel.stdout(nb.cells[-1]).split()
    assert (same_group, leads_session) == ("False", "True")
    # the JVM leads a session of its own: it and its Python worker daemon end within 120 s
    # (Spark's orderly shutdown takes a second or two)
    wait_session_gone(int(pid), timeout=120)
    trouble = kernel.kernel_stderr(tmp_path)
    assert trouble == [], "\n".join(trouble)
