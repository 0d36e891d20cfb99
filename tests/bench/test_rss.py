"""bench/rss.py: peaks come from the processes under the given root, reset per interval."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench.rss import RssSampler, descendants

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# A child that holds `mb` MiB (touched, so resident) until its stdin closes.
HOLD = "import sys; b = bytearray({mb} << 20); b[::4096] = b'1' * len(b[::4096]); sys.stdin.read()"


def _hold(mb: int, parent: str | None = None) -> subprocess.Popen:
    code = HOLD.format(mb=mb)
    if (
        parent is not None
    ):  # an intermediate process, as pyspark.daemon sits between JVM and workers
        code = parent.format(code=code)
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS"))


def _wait_rss_pid(pid: int, kib: int) -> None:
    deadline = time.monotonic() + 20
    while _rss_kib(pid) < kib and time.monotonic() < deadline:
        time.sleep(0.02)


def _held_by_grandchild(child: subprocess.Popen, kib: int) -> int:
    """The pid of `child`'s own child (a worker under the sampler's "JVM"), once it holds
    `kib` KiB resident."""
    deadline = time.monotonic() + 20
    while not descendants(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    (holder,) = descendants(child.pid)
    _wait_rss_pid(holder, kib)
    return holder


def test_descendants_finds_grandchildren():
    wrapper = "import subprocess, sys; subprocess.run([sys.executable, '-c', {code!r}])"
    proc = _hold(1, parent=wrapper)
    try:
        deadline = time.monotonic() + 20
        while not descendants(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        (holder,) = descendants(proc.pid)
        assert {proc.pid, holder} <= descendants(os.getpid())
        assert os.getpid() not in descendants(os.getpid())
    finally:
        proc.stdin.close()
        proc.wait()


def test_worker_peak_and_reset():
    # The sampler's "JVM" is a wrapper process of its own (this test process may have a Spark
    # JVM and its workers under it); the wrapper's child stands for a Python worker.
    wrapper = "import subprocess, sys; subprocess.run([sys.executable, '-c', {code!r}])"
    base_mib = _rss_kib(os.getpid()) / 1024
    spike = bytearray(200 << 20)
    spike[::4096] = b"1" * len(spike[::4096])
    del spike  # this process's VmHWM now holds the spike; start() must forget it
    child = _hold(120, parent=wrapper)
    sampler = RssSampler(jvm_pid=child.pid, interval=0.02, scan_every=1)
    try:
        _held_by_grandchild(child, 120 << 10)
        sampler.start()
        time.sleep(0.2)
        peaks = sampler.stop()
        assert peaks.workers == 1
        assert peaks.worker_max >= 120
        assert peaks.worker_sum >= 120
        assert peaks.worker_anon_max >= 120  # a bytearray: anonymous memory
        assert peaks.samples >= 2
        assert peaks.python_driver < base_mib + 100
    finally:
        child.stdin.close()
        child.wait()
    # A new interval counts only the processes alive in it: the child is gone.
    sampler.start()
    peaks = sampler.stop()
    assert peaks.workers == 0 and peaks.worker_max == 0


# A child that maps `mb` MiB of a file and reads every page (file-backed resident pages, as a
# worker reading a memory-mapped record share) until its stdin closes.
MAP = (
    "import mmap, sys; f = open({path!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ);"
    " s = sum(m[i] for i in range(0, len(m), 4096)); sys.stdin.read()"
)


def test_mapped_file_pages_are_not_anonymous(tmp_path):
    data = tmp_path / "share.arrow"
    data.write_bytes(os.urandom(1 << 20) * 150)  # 150 MiB, in the page cache
    wrapper = "import subprocess, sys; subprocess.run([sys.executable, '-c', {code!r}])"
    code = wrapper.format(code=MAP.format(path=str(data)))
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    sampler = RssSampler(jvm_pid=child.pid, interval=0.02, scan_every=1)
    try:
        _held_by_grandchild(child, 150 << 10)
        sampler.start()
        time.sleep(0.2)
        peaks = sampler.stop()
        assert peaks.worker_max >= 150  # VmHWM counts the mapped file's pages
        assert peaks.worker_anon_max < 60  # the interpreter alone, not the file
    finally:
        child.stdin.close()
        child.wait()
