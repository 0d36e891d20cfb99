"""Run lock: one run per output root, a clear refusal, and takeover of a dead run's lock."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkalog_core.root.run_lock import ReadLock, RunLock, RunLockedError, pid_alive

REPO = Path(__file__).resolve().parents[2]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_second_lock_is_refused_with_owner_details(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    with RunLock(root, "run-A") as lock:
        assert lock.held
        owner = lock.owner()
        assert owner["run_id"] == "run-A" and owner["pid"] == os.getpid()
        with pytest.raises(RunLockedError) as info:
            RunLock(root, "run-B").acquire()
        message = str(info.value)
        assert message.startswith(f"output root {root} is locked by run run-A (pid {os.getpid()} ")
        assert f"on host {socket.gethostname()} since {owner['since']})" in message
    assert not lock.held
    with RunLock(root, "run-B") as again:  # released: the next run gets it
        assert again.owner()["run_id"] == "run-B"
        assert again.took_over is None


def test_lock_held_by_another_live_process_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from kafkalog_core.root.run_lock import RunLock;"
            "l = RunLock(sys.argv[1], 'other-run').acquire(); print('ready', flush=True);"
            "time.sleep(60)",
            str(root),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout.readline().strip() == b"ready"
        with pytest.raises(RunLockedError, match=rf"locked by run other-run \(pid {child.pid} "):
            RunLock(root, "mine").acquire()
    finally:
        child.kill()
        child.wait()
    # The kernel dropped the dead child's flock: the next run takes over and says from whom.
    with RunLock(root, "mine") as lock:
        assert lock.took_over["run_id"] == "other-run"


def test_stale_owner_info_of_a_dead_pid_is_taken_over(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    lock = RunLock(root, "new-run")
    lock.path.parent.mkdir(parents=True)
    stale = {"run_id": "crashed", "host": socket.gethostname(), "pid": _dead_pid(), "since": "x"}
    lock.path.write_text(json.dumps(stale))
    with lock:
        assert lock.took_over == stale
        assert lock.owner()["run_id"] == "new-run"


def test_lock_kept_alive_by_an_orphaned_child_of_a_dead_run_is_taken_over(tmp_path: Path) -> None:
    """A forked child inherited the locked descriptor and outlived the run that took the lock."""
    root = tmp_path / "logs"
    script = (
        "import os, sys, time\n"
        "from kafkalog_core.root.run_lock import RunLock\n"
        "RunLock(sys.argv[1], 'dead-run').acquire()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    null = os.open(os.devnull, os.O_RDWR)\n"
        "    os.dup2(null, 1); os.dup2(null, 2)\n"  # do not hold the parent's pipes open
        "    time.sleep(60); os._exit(0)\n"
        "print(pid, flush=True)\n"
        "os._exit(0)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(root)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=60,
    )
    orphan = int(proc.stdout.split()[0])
    try:
        assert pid_alive(orphan)
        assert not pid_alive(RunLock(root, "x").owner()["pid"])
        with RunLock(root, "new-run") as lock:
            assert lock.took_over["run_id"] == "dead-run"
            with pytest.raises(RunLockedError, match="locked by run new-run"):
                RunLock(root, "third").acquire()
    finally:
        os.kill(orphan, signal.SIGKILL)
    deadline = time.time() + 5
    while pid_alive(orphan) and time.time() < deadline:
        time.sleep(0.05)


def test_owner_on_another_host_is_never_taken_over(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    with RunLock(root, "A") as holder:
        # Pretend the holder runs elsewhere: we cannot judge its pid, so we must refuse.
        info = holder.owner() | {"host": "elsewhere", "pid": _dead_pid()}
        os.pwrite(holder._fd, json.dumps(info).encode().ljust(512), 0)
        with pytest.raises(RunLockedError, match="on host elsewhere"):
            RunLock(root, "B").acquire()


def test_pid_alive_detects_pid_reuse() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(os.getpid(), start_ticks=-5)
    assert not pid_alive(_dead_pid())


def test_read_locks_share_the_root_and_exclude_writers_both_ways(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    with ReadLock(root, "verify-1") as first, ReadLock(root, "audit-1") as second:
        assert first.held and second.held and first.unlocked_because is None
        with pytest.raises(RunLockedError, match="in use by another run: a read-only run"):
            RunLock(root, "ingest-1").acquire()
    with RunLock(root, "ingest-2"), pytest.raises(RunLockedError, match="locked by run ingest-2"):
        ReadLock(root, "verify-2").acquire()
    with RunLock(root, "ingest-3") as writer:  # released by the readers: writers get it again
        assert writer.took_over is None


def test_a_reader_clears_a_dead_writers_info_so_no_writer_replaces_the_file_under_it(
    tmp_path: Path,
) -> None:
    """Stale owner info of a dead writer would let the next writer judge the readers' flock an
    orphan's and unlink the file they hold."""
    root = tmp_path / "logs"
    dead = {"run_id": "ingest-dead", "host": socket.gethostname(), "pid": _dead_pid()}
    lock = RunLock(root, "probe")
    lock.path.parent.mkdir(parents=True)
    lock.path.write_text(json.dumps(dead))
    with ReadLock(root, "verify-1") as reader:
        assert reader.owner() is None
        inode = os.stat(reader.path).st_ino
        with pytest.raises(RunLockedError, match="in use by another run"):
            RunLock(root, "ingest-2").acquire()
        assert os.stat(reader.path).st_ino == inode


def test_a_read_only_meta_area_is_read_unlocked_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker's log dir on a read-only mount: no lock file can be made (simulated, since
    root ignores permissions): the reader runs unlocked and says why."""
    import errno

    import kafkalog_core.root.run_lock as lock_module

    real_open = os.open

    def read_only_fs(path, flags, *args):
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(lock_module.os, "open", read_only_fs)
    monkeypatch.setattr(Path, "mkdir", lambda *a, **k: None)
    with ReadLock(tmp_path / "logs", "verify-1") as reader:
        assert not reader.held
        assert reader.unlocked_because == (
            f"{reader.path.parent} cannot be written (Read-only file system)"
        )
    with pytest.raises(OSError, match="Read-only"):
        RunLock(tmp_path / "logs", "ingest-1").acquire()  # a writer never runs unlocked
