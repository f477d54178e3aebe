"""A lock one job holds on a node-local directory while it stages something there (an env's
copy, an image's): ``flock``, so the kernel drops it when its holder dies; a progress line while
another job holds it, and an error after a timeout (never a silent wait)."""
from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from pathlib import Path
from typing import Iterator

from .errors import WmlError


class HeldLock:
    """The lock while held; ``remove_file = True`` removes its file before the lock is let go
    (the last user of a node-local place leaves no lock file behind).  Safe: a waiter that then
    gets the lock on the removed file sees that the path is no longer that file and locks anew."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.remove_file = False


@contextlib.contextmanager
def file_lock(path: Path, what: str, timeout_s: float = 1800.0, every_s: float = 10.0,
              who: str = "wml stage") -> Iterator[HeldLock]:
    """An exclusive ``flock`` on ``path``; a line every ``every_s`` while another holds it, an
    error after ``timeout_s``.  The kernel drops the lock when its holder dies."""
    start = last = time.monotonic()
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    now = time.monotonic()
                    if now - start > timeout_s:
                        raise WmlError(f"{what}: another job held {path} for {timeout_s:.0f} s; gave up") from None
                    if now - last >= every_s:
                        print(f"{who}: {what}: waiting for another job that holds {path} ({now - start:.0f} s)",
                              flush=True, file=sys.stderr)
                        last = now
                    time.sleep(0.2)
            if _same_file(fd, path):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)             # its holder removed the file while we waited: lock the one there now
    held = HeldLock(path)
    try:
        yield held
    finally:
        if held.remove_file:
            with contextlib.suppress(OSError):
                path.unlink()
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this node still runs (one we may not signal does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:            # a zombie (its parent has not reaped it) is gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True
