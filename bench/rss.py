"""Peak resident memory of a local-mode Spark run, per timed path, measured from /proc.

Three kinds of process: the Python driver (this process), the JVM (in local mode it is the
driver and every executor) and the Python workers Spark forks under the JVM (`pyspark.daemon`
and the workers it forks: the Python processes among the JVM's descendants; a JVM child caught
between fork and exec shares the JVM's memory and is skipped).

How a peak is measured: at `start` the kernel's high-water mark (VmHWM) of the driver, the JVM
and every live worker is reset (`echo 5 > /proc/<pid>/clear_refs`), so processes that live on
from an earlier path (the JVM, reused workers) do not carry that path's peak. A thread then
reads VmHWM/VmRSS of the known processes every `interval` seconds and looks for new workers
every `scan_every` ticks. A worker's peak is its last VmHWM read (a worker that exits between
two reads loses at most that last interval); `worker_sum` is the largest sum of the workers'
VmRSS seen in one tick, an upper bound of what they held together (forked workers share pages
with the daemon, and RSS counts shared pages in each process).

`worker_anon_max` is the largest RssAnon (heap, Arrow buffers: memory only the process holds)
one worker showed in a tick. VmHWM also counts the file pages a worker maps (memory-mapped
record shares and sorted runs), which are page cache the kernel can drop, so a worker reading a
bigger mapped file shows a bigger VmHWM without holding more memory of its own.
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass, field


def _status_kib(pid: int, names: tuple[str, ...]) -> dict[str, int]:
    """The `names` fields (kB) of /proc/<pid>/status of a Python process; empty otherwise."""
    try:
        with open(f"/proc/{pid}/status") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    fields = {k: v.strip() for k, _, v in (ln.partition(":") for ln in lines) if k in names}
    if not fields.get("Name", "").startswith("python"):  # a JVM child between fork and exec
        return {}  # shares the JVM's memory map, so it would show the JVM's RSS
    return {k: int(v.split()[0]) for k, v in fields.items() if k != "Name"}


def _hwm_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return 0


def _reset_peak(pid: int) -> None:
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")  # 5: reset the peak RSS (VmHWM) to the current RSS
    except OSError:
        pass


def descendants(root: int) -> set[int]:
    """Every live process under `root` (children, their children, ...), from /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])  # comm may hold spaces, ')'
        children.setdefault(ppid, []).append(int(name))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.add(child)
            stack.append(child)
    return found


@dataclass
class RssPeaks:
    """Peaks in MiB over one measured interval."""

    python_driver: float = 0.0
    jvm: float = 0.0
    worker_max: float = 0.0
    worker_sum: float = 0.0
    worker_anon_max: float = 0.0  # sampled RssAnon (no file-backed pages), see the docstring
    workers: int = 0  # processes seen under the JVM (daemon included)
    samples: int = 0

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass
class RssSampler:
    """Samples the driver, the JVM `jvm_pid` and its descendants between `start` and `stop`."""

    jvm_pid: int
    interval: float = 0.1
    scan_every: int = 5
    driver_pid: int = field(default_factory=os.getpid)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._worker_hwm: dict[int, int] = {}
        self._peaks = RssPeaks()

    def start(self) -> None:
        self._stop.clear()
        self._worker_hwm = {pid: 0 for pid in descendants(self.jvm_pid)}
        self._peaks = RssPeaks()
        for pid in (self.driver_pid, self.jvm_pid, *self._worker_hwm):
            _reset_peak(pid)
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> RssPeaks:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        peaks = self._peaks
        peaks.python_driver = _hwm_kib(self.driver_pid) / 1024
        peaks.jvm = _hwm_kib(self.jvm_pid) / 1024
        peaks.worker_max = max(self._worker_hwm.values(), default=0) / 1024
        peaks.workers = sum(1 for hwm in self._worker_hwm.values() if hwm)
        return peaks

    def _run(self) -> None:
        tick = 0
        while not self._stop.wait(self.interval):
            tick += 1
            if tick % self.scan_every == 0:
                for pid in descendants(self.jvm_pid):
                    self._worker_hwm.setdefault(pid, 0)
            self._sample()

    def _sample(self) -> None:
        total = 0
        for pid in list(self._worker_hwm):
            kib = _status_kib(pid, ("Name", "VmHWM", "VmRSS", "RssAnon"))
            if kib:
                self._worker_hwm[pid] = max(self._worker_hwm[pid], kib["VmHWM"])
                total += kib["VmRSS"]
                anon = kib.get("RssAnon", 0) / 1024
                self._peaks.worker_anon_max = max(self._peaks.worker_anon_max, anon)
        self._peaks.worker_sum = max(self._peaks.worker_sum, total / 1024)
        self._peaks.samples += 1
