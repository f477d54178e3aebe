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


@contextlib.contextmanager
def file_lock(path: Path, what: str, timeout_s: float = 1800.0, every_s: float = 10.0,
              who: str = "wml stage") -> Iterator[None]:
    """An exclusive ``flock`` on ``path``; a line every ``every_s`` while another holds it, an
    error after ``timeout_s``.  The kernel drops the lock when its holder dies."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        start = last = time.monotonic()
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
        yield
    finally:
        os.close(fd)
