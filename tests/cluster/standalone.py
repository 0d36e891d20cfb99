"""A Spark standalone cluster from the installed pyspark: one master, workers of one core each.

Every daemon runs `bin/spark-class` in its own process group, with free ports chosen at start,
its own work dir and log file, and an environment scrubbed of the test venv (no PYSPARK_PYTHON,
PYTHONPATH or venv on PATH): executors get Python only from what a submit ships.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
HOST = "127.0.0.1"
WORKER_MEMORY = "1g"  # per worker: one executor of spark.executor.memory (see SUBMIT_CONF)
DAEMON_MEMORY = "384m"  # master's and workers' own heaps

# The JVM options tests/run.sh gives the tests' JVMs, passed on to the daemons and executors.
JVM_OPTS = os.environ.get("SPARK_SUBMIT_OPTS", "")

# What a submit to this cluster adds: small executors, and the driver reachable on loopback.
SUBMIT_CONF = {
    "spark.executor.memory": "512m",
    "spark.driver.host": HOST,
    "spark.driver.bindAddress": HOST,
    **({"spark.executor.extraJavaOptions": JVM_OPTS} if JVM_OPTS else {}),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def daemon_env(conf_dir: Path) -> dict[str, str]:
    """The environment of master and workers: this one minus anything that names the test venv."""
    venv_bin = str(Path(sys.prefix) / "bin")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK_", "KAFKALOG_", "SPARK_"))
        and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin
    )
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP=HOST,
        SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
        SPARK_DAEMON_JAVA_OPTS=JVM_OPTS,
    )
    return env


@dataclass
class Daemon:
    """One master or worker JVM, the leader of its own process group."""

    name: str
    log: Path
    process: subprocess.Popen
    work_dir: Path | None = None

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else "(no log)"
        return f"--- {self.name} ({self.log}) ---\n" + "\n".join(text.splitlines()[-lines:])


class StandaloneCluster:
    """Start with `start()`, always `stop()` (kills every process it or its workers started)."""

    def __init__(self, base: Path, workers: int = 2) -> None:
        self.base = base
        self.worker_count = workers
        self.conf_dir = base / "conf"  # empty: Spark's own defaults, INFO logs to the log files
        self.port = free_port()
        self.web_port = free_port()
        self.master_url = f"spark://{HOST}:{self.port}"
        self.master: Daemon | None = None
        self.workers: dict[int, Daemon] = {}

    def _spawn(self, name: str, args: list[str], work_dir: Path | None = None) -> Daemon:
        log = self.base / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            process = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=daemon_env(self.conf_dir),
                cwd=self.base,
                start_new_session=True,
            )
        return Daemon(name, log, process, work_dir)

    def start(self, timeout_s: float = 240) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        self.master = self._spawn(
            "master",
            [MASTER_CLASS, "--host", HOST, "--port", str(self.port),
             "--webui-port", str(self.web_port)],
        )  # fmt: skip
        for index in range(self.worker_count):
            self.start_worker(index)
        self.wait_for_workers(self.worker_count, timeout_s)

    def start_worker(self, index: int) -> None:
        generation = sum(1 for d in self.base.glob(f"logs/worker-{index}*.log"))
        name = f"worker-{index}" + (f"-{generation}" if generation else "")
        work_dir = self.base / "work" / name
        work_dir.mkdir(parents=True)
        self.workers[index] = self._spawn(
            name,
            [WORKER_CLASS, "--host", HOST, "--port", str(free_port()),
             "--webui-port", str(free_port()), "--cores", "1", "--memory", WORKER_MEMORY,
             "--work-dir", str(work_dir), self.master_url],
            work_dir,
        )  # fmt: skip

    def state(self) -> dict:
        """The master's JSON view (workers, apps), or {} while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.web_port}/json/", timeout=5) as r:
                return json.load(r)
        except (OSError, ValueError):
            return {}

    def wait_for_workers(self, count: int, timeout_s: float = 240) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [d for d in self.daemons() if not d.alive()]
            if dead:
                raise RuntimeError(self._failure(f"{dead[0].name} exited"))
            if self.state().get("aliveworkers", 0) >= count:
                return
            time.sleep(1)
        raise RuntimeError(self._failure(f"{count} workers not registered in {timeout_s:.0f}s"))

    def _failure(self, what: str) -> str:
        tails = "\n".join(d.tail() for d in self.daemons())
        return f"Spark standalone cluster did not come up: {what}\n{tails}"

    def daemons(self) -> list[Daemon]:
        return ([self.master] if self.master else []) + list(self.workers.values())

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker with its executor and their Python workers, like a lost machine."""
        worker = self.workers[index]
        _kill_group(worker.process, signal.SIGKILL)
        assert worker.work_dir is not None
        for pid in processes_under(worker.work_dir):
            _kill(pid, signal.SIGKILL)

    def stop(self) -> list[str]:
        """Stop everything; returns what was still running afterwards and had to be killed."""
        for daemon in reversed(self.daemons()):
            _kill_group(daemon.process, signal.SIGTERM)
        for daemon in self.daemons():
            try:
                daemon.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _kill_group(daemon.process, signal.SIGKILL)
                daemon.process.wait(timeout=30)
        strays = []
        for pid in processes_under(self.base):
            strays.append(_cmdline(pid))
            _kill(pid, signal.SIGKILL)
        return strays


def _kill_group(process: subprocess.Popen, sig: int) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:300]
    except OSError:
        return f"pid {pid}"


def processes_under(base: Path) -> list[int]:
    """Live processes whose working directory or command line lies under `base` (ours)."""
    found = []
    marker = str(base)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if cwd.startswith(marker) or marker in cmdline:
            found.append(int(entry.name))
    return found
