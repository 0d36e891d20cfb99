"""A kill at a chosen point of a run: the file-system steps of a job counted, and the run stopped
before step `after + 1`.

- `Killer` (this process, pytest's monkeypatch): a KeyboardInterrupt before the step.
- `arm` (a process of its own, e.g. `killed_run`'s child): SIGKILL before the step, as `kill -9`
  stops it there: no `finally` runs, no lock is released, no buffered write is flushed. The
  count can be shared by the processes of one run (Spark's driver and its Python workers append
  their steps to one log), and the kill can take the run's process groups with it.
  `arm_from_environment` arms every Python process started with `ENV_LOG` set (tests/kill_site's
  `sitecustomize` calls it), so a Spark driver's workers count too.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import io
import multiprocessing
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # not imported by the armed processes of a Spark run
    import pytest

# the steps whose order makes a job kill-safe: renames, deletes and truncations
STEPS = ("replace", "rename", "ftruncate", "truncate", "unlink")
# every call that changes what the file system holds; "open" is an open that creates or truncates
# a file. Not fsync: it changes nothing a process sees, only what a power loss keeps.
FS_STEPS = (*STEPS, "rmdir", "mkdir", "link", "utime", "write", "pwrite", "open")

ENV_LOG = "KAFKALOG_TEST_KILL_LOG"  # the step log of one run; arms the processes that see it
ENV_AFTER = "KAFKALOG_TEST_KILL_AFTER"  # SIGKILL before step AFTER + 1 (unset: only count)
ENV_AT = "KAFKALOG_TEST_KILL_AT"  # or before the first step whose "<step> <path>" matches
ENV_UNDER = "KAFKALOG_TEST_KILL_UNDER"  # only steps on paths below this dir count
ENV_GROUP = "KAFKALOG_TEST_KILL_GROUP"  # set: the run is a session; the kill takes all of it
KILL_SITE = Path(__file__).resolve().parent / "kill_site"  # on PYTHONPATH: arms at start-up
REPO = Path(__file__).resolve().parents[1]

_CREATING = os.O_CREAT | os.O_TRUNC
_WRITE_MODES = ("w", "x", "a")


def _wrap(name: str, original: Callable[..., Any], before: Callable[[str, tuple], None]):
    def step(*args: Any, **kwargs: Any) -> Any:
        before(name, (*args, kwargs))
        return original(*args, **kwargs)

    return step


class Killer:
    """Counts the calls of `os.<step>` for each of `steps` and raises before call `after + 1`."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, after: int, steps: Sequence[str] = STEPS
    ) -> None:
        self.calls, self.after = 0, after
        for name in steps:
            monkeypatch.setattr(os, name, _wrap(name, getattr(os, name), self._before))

    def _before(self, name: str, _args: tuple) -> None:
        self.calls += 1
        if self.calls > self.after:
            raise KeyboardInterrupt(f"killed before {name}")


# ---- a real kill -9, in a process of its own ----------------------------------------------------
_real = {name: getattr(os, name) for name in (*FS_STEPS, "readlink", "close", "fsync")}
_real_open = builtins.open


def _fd_path(fd: int) -> str:
    try:
        return _real["readlink"](f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _target(name: str, args: tuple) -> str:
    """The absolute path a step acts on ("" when it names none)."""
    *positional, kwargs = args
    first = positional[0] if positional else kwargs.get("path", kwargs.get("fd"))
    if isinstance(first, int):
        return _fd_path(first)
    if first is None:
        return ""
    path = os.fsdecode(os.fspath(first))
    dir_fd = kwargs.get("dir_fd") if name != "rename" and name != "replace" else None
    if dir_fd is None and name in ("rename", "replace", "link"):
        dir_fd = kwargs.get("src_dir_fd")
    if dir_fd is not None and not os.path.isabs(path):
        return os.path.join(_fd_path(dir_fd), path)
    return os.path.abspath(path)


class _Armed:
    def __init__(
        self,
        log: Path,
        after: int | None,
        at: str | None,
        under: Path,
        group: int | None,
        sync: bool,
    ) -> None:
        self.log, self.after, self.under, self.group = str(log), after, str(under), group
        self.at = None if at is None else re.compile(at)
        self.sync = sync

    def fsync(self, fd: int) -> None:
        if self.sync:
            _real["fsync"](fd)

    def before(self, name: str, args: tuple) -> None:
        path = _target(name, args)
        if not (path == self.under or path.startswith(self.under + os.sep)):
            return
        fd = _real["open"](self.log, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with _real_open(fd, "rb", closefd=False) as f:
                done = f.read().count(b"\n")
            line = f"{name} {path}"
            _real["write"](fd, f"{line}\n".encode())
        finally:
            _real["close"](fd)  # drops the flock
        if (self.after is not None and done >= self.after) or (
            self.at is not None and self.at.search(line)
        ):
            self.kill()

    def kill(self) -> None:
        if self.group is not None:
            # the driver's group first, then this one (Spark's worker daemon's), which ends here
            for group in dict.fromkeys((self.group, os.getpgrp())):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    def open_step(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(m in mode for m in _WRITE_MODES) and not isinstance(file, int):
            self.before("open", (file, {}))
        return _real_open(file, mode, *args, **kwargs)

    def os_open_step(self, path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & _CREATING:
            self.before("open", (path, {"dir_fd": kwargs.get("dir_fd")}))
        return _real["open"](path, flags, *args, **kwargs)


def arm(
    log: Path,
    after: int | None,
    under: Path,
    group: int | None = None,
    *,
    at: str | None = None,
    sync: bool = False,
) -> None:
    """From now on, every step of this process (and of the processes it forks) on a path below
    `under` is appended to `log` ("<step> <path>" lines, shared with the run's other processes);
    before step `after + 1` of the run, or before the first step whose line the regular
    expression `at` finds, the process SIGKILLs itself (and `group`, a process group whose
    members all belong to the run, and its own group then). With neither it only counts.

    fsync is no step, and is skipped unless `sync`: it guards against a power loss, and a killed
    process loses nothing the kernel holds (its page cache outlives it), so a kill before an
    fsync leaves what a kill before the next step leaves. `os.cpu_count()` is 1, as on one core:
    a pool sized by it (the data source commit's relayout) runs one thread, so the steps come in
    the same order in every run."""
    armed = _Armed(log, after, at, Path(under).resolve(), group, sync)
    for name in FS_STEPS:
        if name != "open":
            setattr(os, name, _wrap(name, _real[name], armed.before))
    os.open = armed.os_open_step
    os.fsync = armed.fsync
    os.cpu_count = lambda: 1
    builtins.open = io.open = armed.open_step


def arm_from_environment() -> None:
    """`arm` with the settings of ENV_LOG, ENV_AFTER, ENV_AT, ENV_UNDER and ENV_GROUP, when
    ENV_LOG is set (a no-op otherwise)."""
    log = os.environ.get(ENV_LOG)
    if not log:
        return
    after = os.environ.get(ENV_AFTER)
    arm(
        Path(log),
        None if after is None else int(after),
        Path(os.environ[ENV_UNDER]),
        os.getsid(0) if os.environ.get(ENV_GROUP) else None,  # the session leader's group
        at=os.environ.get(ENV_AT),
    )


def killed_program(
    command: Sequence[str],
    *,
    log: Path,
    under: Path,
    after: int | None = None,
    at: str | None = None,
    timeout: float = 1800,
) -> subprocess.CompletedProcess:
    """Run `command` (a Spark driver: a Python program, ./spark-submit.sh JOB ...) as a session
    of its own, every Python process of it armed with one shared `log` (the driver, the JVM's
    Python workers: `KILL_SITE` on PYTHONPATH); the kill takes the whole session (the driver,
    its JVM) and the killing process's group (Spark's worker daemon and its workers). Its
    return code is -9 when killed."""
    env = {**os.environ, ENV_LOG: str(log), ENV_UNDER: str(Path(under).resolve()), ENV_GROUP: "1"}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(KILL_SITE), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    for name, value in ((ENV_AFTER, after), (ENV_AT, at)):
        env.pop(name, None)
        if value is not None:
            env[name] = str(value)
    with subprocess.Popen(
        list(command),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        finally:
            # The session leader's exit does not end the rest of the session: a killed JVM or
            # driver may still be tearing down (its flock on the run lock still held) for a
            # moment after, as no real rerun would see. Wait until every process of it is gone.
            wait_session_gone(proc.pid, timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _stat_fields(path: str) -> list[str]:
    """A /proc stat file's fields after the command name (state, ppid, pgrp, session, ...)."""
    try:
        return Path(path).read_text().rpartition(")")[2].split()
    except OSError:
        return []


def _session_members(session: int) -> list[int]:
    """The pids of the live processes of `session` (Linux: /proc/<pid>/stat's sixth field). A
    process is live while any of its threads is: a killed process's main thread can be a
    zombie while another thread still finishes a system call (an fsync under load), with the
    process's descriptors, and so its flocks, still open."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(f"/proc/{entry}/stat")
        if len(fields) <= 3 or fields[3] != str(session):
            continue
        try:
            threads = os.listdir(f"/proc/{entry}/task")
        except OSError:
            continue
        states = [(_stat_fields(f"/proc/{entry}/task/{t}/stat") or ["X"])[0] for t in threads]
        if any(state not in ("Z", "X") for state in states):
            members.append(int(entry))
    return members


def wait_session_gone(session: int, timeout: float) -> None:
    """Until no live process of `session` remains; an AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while members := _session_members(session):
        if time.monotonic() > deadline:
            raise AssertionError(f"session {session} still runs {members} after {timeout} s")
        time.sleep(0.05)


def snapshot(root: Path, skip: str | None = None) -> dict[str, bytes]:
    """What a rerun must reproduce: every file of the log dir `root` and of its meta area (name
    relative to their parent -> bytes), but those whose name the regular expression `skip`
    finds."""
    from kafkalog_core.root.meta_area import meta_root

    files = {}
    for base in (root, meta_root(root)):
        for p in sorted(base.rglob("*")) if base.exists() else []:
            name = str(p.relative_to(root.parent))
            if p.is_file() and not (skip and re.search(skip, name)):
                files[name] = p.read_bytes()
    return files


def differences(got: dict[str, bytes], want: dict[str, bytes]) -> list[str]:
    """The files missing, extra or different in `got` (a `snapshot`), one line each."""
    missing = [f"missing {n}" for n in sorted(set(want) - set(got))]
    extra = [f"extra {n}" for n in sorted(set(got) - set(want))]
    changed = [f"differs {n}" for n in sorted(set(got) & set(want)) if got[n] != want[n]]
    return missing + extra + changed


def read_steps(log: Path) -> list[str]:
    """The steps a run's processes logged ("<step> <path>"), in order; after a kill the last
    one is the step the run was killed before."""
    return log.read_text().splitlines() if log.exists() else []


def _armed_call(log: str, after: int | None, under: str, target: Callable[..., Any], args) -> None:
    arm(Path(log), after, Path(under))
    target(*args)


def killed_run(
    target: Callable[..., Any],
    *args: Any,
    log: Path,
    after: int | None,
    under: Path,
    preload: Sequence[str] = (),
    timeout: float = 120,
) -> bool:
    """Run `target(*args)` in a forked child with `arm(log, after, under)`: True when it ran to
    its end, False when the kill stopped it. A forkserver (a fresh interpreter, not this
    process with its threads) forks the children, a few milliseconds each once it has imported
    `target`'s module and `preload` (set before its first use in this process)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([target.__module__, *preload])
    child = context.Process(
        target=_armed_call, args=(str(log), after, str(under), target, args), daemon=True
    )
    child.start()
    child.join(timeout)
    if child.exitcode is None:
        child.kill()
        child.join()
        raise AssertionError(f"{target.__name__} did not end within {timeout} s")
    if child.exitcode == -signal.SIGKILL:
        return False
    assert child.exitcode == 0, f"{target.__name__} failed (exit {child.exitcode})"
    return True
