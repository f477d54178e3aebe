"""Atomic creation of a directory: build it beside the target, rename it into place.

An interrupted or failed build leaves nothing at the target: the half-built tree sits in a
hidden ``.<name>.wml-staging-<pid>-<random>`` directory next to it, which is removed on any
Python-level failure (exceptions, Ctrl-C, SIGTERM) and, after a SIGKILL, by the next create
in the same directory once the owning process is gone.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from wmlce_tools.errors import WmlError
from wmlce_tools.locks import pid_alive

_MARK = ".wml-staging-"


def clean_stale(parent: Path, name: str) -> None:
    for d in parent.glob(f".{name}{_MARK}*"):
        pid_text = d.name[len(f".{name}{_MARK}"):].split("-", 1)[0]
        if pid_text.isdigit() and not pid_alive(int(pid_text)):
            shutil.rmtree(d, ignore_errors=True)


def _check_parent(target: Path) -> list[Path]:
    """Create missing parents (returned, to undo on failure); the parent must be writable."""
    created: list[Path] = []
    parent = target.parent
    missing = []
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    if not parent.is_dir():
        raise WmlError(f"cannot create {target}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise WmlError(f"cannot create {target}: {parent} is not writable")
    for d in reversed(missing):
        try:
            d.mkdir()
        except OSError as exc:
            for c in reversed(created):
                c.rmdir()
            raise WmlError(f"cannot create {d}: {exc.strerror}") from None
        created.append(d)
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise WmlError(f"cannot create {target}: {target.parent} is not writable")
    return created


def remove_settled(path: Path, quiet_s: float = 0.3, attempts: int = 20) -> None:
    """Remove ``path`` and make sure it stays gone.

    When rattler's install() raises, link tasks it had already spawned may still write
    (conda-meta records) for a moment; a single rmtree can lose that race.
    """
    for _ in range(attempts):
        shutil.rmtree(path, ignore_errors=True)
        time.sleep(quiet_s)
        if not os.path.lexists(path):
            return


class _Terminated(BaseException):
    pass


@contextlib.contextmanager
def _sigterm_as_exception() -> Iterator[None]:
    """Turn SIGTERM into an exception so ``finally`` blocks clean up (main thread only)."""
    def handler(signum: int, frame: object) -> None:
        raise _Terminated()

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def staged_directory(target: Path, force: bool = False) -> Iterator[Path]:
    """Yield an empty staging directory; on normal exit it becomes ``target``."""
    target = Path(target).absolute()
    if target.exists() or target.is_symlink():
        if not force:
            raise WmlError(f"{target} already exists (use --force to replace it)")
        if not target.is_dir():
            raise WmlError(f"{target} exists and is not a directory")
    created = _check_parent(target)
    clean_stale(target.parent, target.name)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}{_MARK}{os.getpid()}-",
                                        dir=target.parent))
    except OSError as exc:
        raise WmlError(f"cannot create {target}: {exc.strerror}") from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes it 0700
    ok = False
    try:
        with _sigterm_as_exception():
            yield staging
            old = None
            if target.exists():
                old = target.parent / f".{target.name}{_MARK}{os.getpid()}-old-{os.urandom(4).hex()}"
                os.rename(target, old)
            try:
                os.rename(staging, target)
            except BaseException:
                if old is not None:
                    os.rename(old, target)  # put the previous env back
                raise
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            ok = True
    except _Terminated:
        raise WmlError(f"interrupted: {target} was not created") from None
    finally:
        if not ok:
            remove_settled(staging)
            for c in reversed(created):
                with contextlib.suppress(OSError):
                    c.rmdir()
