"""The session's Spark standalone cluster and the helpers that submit to it.

Its tests carry the `cluster` marker (`pytest -m cluster` selects them) and run in the default
suite: the cluster starts once per run, and the packed executor environment is built once per
change of its inputs (`jobs.spark.packed_env`, cached under build/packed-env).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.standalone import SUBMIT_CONF, StandaloneCluster

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "spark-submit.sh"
SUBMIT_TIMEOUT_S = 600


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cluster: runs against the session's standalone cluster")


@pytest.fixture(scope="session")
def packed_env() -> Path:
    """The executors' archive, built here (timed in the output) rather than by the first submit."""
    from jobs.spark.packed_env import ensure_packed_env

    started = time.monotonic()
    archive = ensure_packed_env()
    print(f"\npacked env {archive.name}: {time.monotonic() - started:.1f}s")
    return archive


@pytest.fixture(scope="session")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, packed_env: Path
) -> Iterator[StandaloneCluster]:
    """One master and two one-core workers for the whole run; torn down even on failure."""
    started = time.monotonic()
    standalone = StandaloneCluster(tmp_path_factory.mktemp("standalone"))
    try:
        try:
            standalone.start()
        except RuntimeError as error:
            pytest.fail(str(error), pytrace=False)
        print(
            f"\nstandalone cluster up at {standalone.master_url}: {time.monotonic() - started:.1f}s"
        )
        yield standalone
    finally:
        strays = standalone.stop()
    assert not strays, f"processes left running after the cluster stopped: {strays}"


def submit(
    master: str,
    *args: str,
    conf: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """`./spark-submit.sh --master MASTER [--conf k=v ...] ARGS` from the repo root."""
    settings = dict(SUBMIT_CONF) if master.startswith("spark://") else {}
    settings.update(conf or {})
    conf_args = [a for k, v in settings.items() for a in ("--conf", f"{k}={v}")]
    return subprocess.run(
        [str(SCRIPT), "--master", master, *conf_args, *args],
        capture_output=True,
        text=True,
        timeout=SUBMIT_TIMEOUT_S,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def output_of(result: subprocess.CompletedProcess) -> str:
    """What the job printed (spark-submit's PythonRunner merges the driver's stderr into stdout)."""
    return result.stdout + result.stderr
