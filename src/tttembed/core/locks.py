"""One writer per artifact: ``fcntl.flock`` on ``.<name>.lock`` beside it.

A second writer gets a ConfigError naming the path (or waits, when asked); the lock is
re-entrant within one thread (another thread of the same process is another writer: it
opens its own lock file description, which ``flock`` excludes) and released by the
kernel when its holder is killed.
"""

from __future__ import annotations

import fcntl
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tttembed.core.errors import ConfigError, named
from tttembed.types import PathLike

#: (thread, absolute artifact path) -> [lock fd, depth]
_HELD: dict[tuple[int, str], list[int]] = {}


def lock_path(path: PathLike) -> Path:
    """The lock file of the artifact at ``path``: ``.<name>.lock`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


def _acquire(lock: Path, artifact: Path, wait: bool) -> int:
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 100, 0).decode("utf-8", "replace").strip() or "?"
            os.close(fd)
            raise ConfigError(f"{artifact} is being written by another process ({holder}); "
                              "wait for it to finish or write to another path "
                              f"(lock file {lock})") from None
        try:  # the previous holder may have removed the file after we opened it
            st = os.stat(lock)
            same = (st.st_ino, st.st_dev) == (os.fstat(fd).st_ino, os.fstat(fd).st_dev)
        except FileNotFoundError:
            same = False
        if same:
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"pid {os.getpid()}\n".encode(), 0)
            except OSError as exc:  # a full disk: name the artifact, not nothing
                os.close(fd)
                raise named(exc, [artifact]) from exc
            return fd
        os.close(fd)


@contextmanager
def writer_lock(path: PathLike, *, wait: bool = False) -> Iterator[Path]:
    """Hold the exclusive writer lock of the artifact at ``path`` (re-entrant in one
    thread). Another holder is a ConfigError naming ``path``, or (``wait``) waited for.
    The lock file is removed on release; a killed holder's lock is released by the kernel."""
    path = Path(os.path.abspath(path))
    key = (threading.get_ident(), str(path))
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield path
        finally:
            _HELD[key][1] -= 1
        return
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(lock, path, wait)
    _HELD[key] = [fd, 1]
    try:
        yield path
    finally:
        del _HELD[key]
        lock.unlink(missing_ok=True)
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie, killed and not yet reaped, does
    not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    stat = _stat(pid)
    return stat is None or stat[0] != "Z"


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat``'s fields after the command name (None without /proc)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(") ", 1)[-1].split()
    except OSError:
        return None


def process_name(pid: int | None = None) -> str:
    """This process (or ``pid``), as a text no later process of that pid has:
    ``HOST:PID:START``, START its start time in clock ticks since boot (/proc; empty
    where there is none)."""
    pid = os.getpid() if pid is None else pid
    stat = _stat(pid)
    start = stat[19] if stat is not None and len(stat) > 19 else ""
    return f"{socket.gethostname()}:{pid}:{start}"


def process_alive(name: str) -> bool | None:
    """Whether the process :func:`process_name` named still runs; None when it ran on
    another host (this host cannot tell)."""
    host, pid, start = ([*name.rsplit(":", 2), "", ""])[:3]
    if host != socket.gethostname() or not pid.isdigit():
        return None
    return pid_alive(int(pid)) and (not start or process_name(int(pid)) == name)
