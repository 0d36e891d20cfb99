"""Closing a notebook ends its Spark quietly: the JVM the kernel started is outside the
kernel's process group, which ipykernel and jupyter_client signal at shutdown, and it ends by
itself once the kernel has exited.

Inside the group, ipykernel sends SIGTERM to every process in it for seconds, Spark is killed in
the middle of its own shutdown, and the terminal shows failed deletions of Spark's scratch dirs
or `ERROR Utils: Process ArraySeq(getconf, PAGESIZE) exited with code 143`.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.notebooks import kernel

CELLS = [
    "import os\n\nfrom pyspark import SparkContext\n\nfrom jobs.spark.session import get_or_create_session",
    # a Python UDF stage: the JVM starts Spark's Python worker daemon as its child
    'spark = get_or_create_session("shutdown")\n'
    'spark.range(1000).mapInArrow(lambda batches: batches, "id long").count()',
    "jvm = SparkContext._gateway.proc.pid\nprint(jvm, os.getpgid(jvm) == os.getpgrp())",
]


@pytest.mark.spark
def test_the_jvm_is_not_in_the_kernels_group_and_ends_with_the_kernel(tmp_path: Path) -> None:
    nb = kernel.execute_cells(CELLS, tmp_path)  # returns once the kernel has shut down
    pid, same_group = kernel.stdout(nb.cells[-1]).split()
    assert same_group == "False"
    deadline = time.monotonic() + 120  # its orderly shutdown takes a second or two
    while _running(int(pid)):
        assert time.monotonic() < deadline, f"the kernel's JVM {pid} outlived it by 120 s"
        time.sleep(0.2)
    trouble = kernel.kernel_stderr(tmp_path)
    assert trouble == [], "\n".join(trouble)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (state Z in /proc: exited, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
