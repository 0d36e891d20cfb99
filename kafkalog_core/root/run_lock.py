"""One ingest run at a time per output root: an flock on a file in the meta area.

The kernel drops an flock when its last descriptor closes, so a crashed driver normally frees the
lock by itself. Owner info (run id, host, pid, start time) is written into the lock file so that
a refused run can say who holds it. One case survives a crash: a child that inherited the
descriptor (a forked worker) keeps the flock alive after the run died. If the recorded owner is
on this host and its pid is gone (or reused: we also record the process start time), the lock
file is replaced under a small takeover lock, and the new file is locked instead.

Read-only runs (index verify, the compaction audit, a retention dry run) take `ReadLock`, a
shared flock on the same file: any number of them at once, never together with a run that
writes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from kafkalog_core.errors import KafkaLogError
from kafkalog_core.root.meta_area import meta_root

LOCK_NAME = "run.lock"


class RunLockedError(KafkaLogError):
    """Another run holds the output root."""


def _process_start_ticks(pid: int) -> int | None:
    """Start time of a process in clock ticks since boot (Linux), to tell pid reuse apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and ')' - split after its last ')'.
    fields = stat.rpartition(")")[2].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def pid_alive(pid: int, start_ticks: int | None = None) -> bool:
    """True if `pid` runs on this host (and, when known, is the same process as recorded)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if start_ticks is not None:
        current = _process_start_ticks(pid)
        if current is not None and current != start_ticks:
            return False
    return True


class RunLock:
    """Exclusive lock of an output root for one run; a context manager.

    `took_over` holds the owner info of a dead run whose lock was taken over (for the summary).
    """

    def __init__(self, output_root: str | os.PathLike[str], run_id: str) -> None:
        self.output_root = Path(output_root)
        self.run_id = run_id
        self.path = meta_root(output_root) / LOCK_NAME
        self.took_over: dict[str, Any] | None = None
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def owner(self) -> dict[str, Any] | None:
        """Owner info currently recorded in the lock file (None if empty/unreadable)."""
        return _read_owner(self.path)

    def acquire(self) -> RunLock:
        if self._fd is not None:
            raise RunLockedError(f"run {self.run_id} already holds the lock of {self.output_root}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(5):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                owner = _read_fd_owner(fd)
                if owner is not None and _is_dead_local_owner(owner):
                    self._replace_orphaned_lock_file(fd, owner)
                    os.close(fd)
                    continue
                os.close(fd)
                raise RunLockedError(self._locked_message(owner)) from None
            # Under the guard (so a takeover cannot judge stale owner info meanwhile): make sure
            # we locked the live file, not one a takeover just unlinked, and record ourselves.
            with self._guard():
                if not self._is_live(fd):
                    os.close(fd)
                    continue
                previous = _read_fd_owner(fd)
                if previous is not None and previous.get("run_id") and self.took_over is None:
                    # A run that died without releasing: its flock is gone, its info is not.
                    self.took_over = previous
                self._fd = fd
                self._write_owner()
            return self
        raise RunLockedError(f"output root {self.output_root}: could not take the lock {self.path}")

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
            os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def _write_owner(self) -> None:
        assert self._fd is not None
        pid = os.getpid()
        info = {
            "run_id": self.run_id,
            "host": socket.gethostname(),
            "pid": pid,
            "pid_start_ticks": _process_start_ticks(pid),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        data = json.dumps(info, sort_keys=True).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        os.fsync(self._fd)

    def _locked_message(self, owner: dict[str, Any] | None) -> str:
        if owner is None:
            return (
                f"output root {self.output_root} is in use by another run: a read-only run "
                f"(verify, audit, dry run) or one that records no owner (lock file {self.path})"
            )
        return (
            f"output root {self.output_root} is locked by run {owner.get('run_id')} "
            f"(pid {owner.get('pid')} on host {owner.get('host')} since {owner.get('since')})"
        )

    def _replace_orphaned_lock_file(self, fd: int, owner: dict[str, Any]) -> None:
        """Unlink a lock file whose flock only survives in a dead run's inherited descriptor.

        Serialized by a second flock so two runs cannot both replace it; the inode check makes
        sure we unlink the file we judged, not a fresh one another run just locked.
        """
        with self._guard(), contextlib.suppress(FileNotFoundError):
            current = _read_fd_owner(fd)
            if current != owner or not self._is_live(fd):
                return  # changed hands meanwhile: the caller retries and looks again
            os.unlink(self.path)
            self.took_over = owner

    def _is_live(self, fd: int) -> bool:
        """Is `fd` the file at the lock path now (not one a takeover unlinked meanwhile)?"""
        try:
            return os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            return False

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Short-lived second flock serializing owner writes and lock-file takeovers."""
        guard = os.open(self.path.with_name(self.path.name + ".guard"), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(guard, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(guard, fcntl.LOCK_UN)
            os.close(guard)


class ReadLock(RunLock):
    """A shared hold on an output root for a run that changes nothing in it.

    Readers record no owner (the file's owner info stays the writers'), but they clear what a
    writer that died left behind: holding the shared flock proves no writer runs, and stale info
    would let the next writer judge the lock orphaned and replace the file under the readers.
    A root whose meta area cannot be written or even opened (a read-only mount of a broker's
    log dir) is read unlocked, and `unlocked_because` says why, for the summary.
    """

    unlocked_because: str | None = None

    def acquire(self) -> ReadLock:
        if self._fd is not None:
            raise RunLockedError(f"run {self.run_id} already holds the lock of {self.output_root}")
        for _ in range(5):
            fd = self._open()
            if fd is None:
                return self
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as e:
                owner = _read_fd_owner(fd)
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                raise RunLockedError(self._locked_message(owner)) from None
            if self._settle(fd):
                self._fd = fd
                return self
            os.close(fd)  # a writer replaced the file meanwhile: look again
        raise RunLockedError(f"output root {self.output_root}: could not take the lock {self.path}")

    def _open(self) -> int | None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            why = e.strerror
        try:
            return os.open(self.path, os.O_RDONLY)
        except OSError:
            self.unlocked_because = f"{self.path.parent} cannot be written ({why})"
            return None

    def _settle(self, fd: int) -> bool:
        """Under the guard: is `fd` still the live lock file? Then drop a dead writer's info."""
        writable = _writable(fd)  # else the meta area is read-only: no writer can run either
        with self._guard() if writable else contextlib.nullcontext():
            if not self._is_live(fd):
                return False
            if writable and _read_fd_owner(fd) is not None:
                os.ftruncate(fd, 0)
        return True

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _writable(fd: int) -> bool:
    return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY


def _is_dead_local_owner(owner: dict[str, Any]) -> bool:
    if owner.get("host") != socket.gethostname():
        return False  # cannot judge a process on another host
    pid = owner.get("pid")
    if not isinstance(pid, int):
        return False
    return not pid_alive(pid, owner.get("pid_start_ticks"))


def _parse_owner(data: bytes) -> dict[str, Any] | None:
    if not data.strip():
        return None
    try:
        owner = json.loads(data)
    except ValueError:
        return None
    return owner if isinstance(owner, dict) else None


def _read_fd_owner(fd: int) -> dict[str, Any] | None:
    return _parse_owner(os.pread(fd, 65536, 0))


def _read_owner(path: Path) -> dict[str, Any] | None:
    try:
        return _parse_owner(path.read_bytes())
    except OSError:
        return None
