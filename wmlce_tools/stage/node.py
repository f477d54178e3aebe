"""Staging on one node: ``<place>/wml-env-<name>-<key>`` made from the archive, or reused.

Under a per-node lock (two jobs on one node never race): copies of an older key nobody uses
are removed; a copy with this key is reused when its marker says it is complete and every entry
is still there with its size; else the free space is checked, the archive unpacked into a fresh
hidden directory beside the target (one tar per core, each a byte range of the archive file
from one recorded member header to another), checked against the manifest (one ``lstat`` per
entry), relocated (the shared prefix rewritten in text files, shebangs
and links, and in binary C strings when the new prefix is no longer), and renamed into place.
A half-made copy never has the target's name: a rank can only ever see a complete one.  Nothing
is fsynced (a node-local copy is worth less than the seconds a sync of 1 GiB costs): the rename
makes the copy visible, and a copy whose data a power loss dropped fails the size check and is
made again.
Each job using a copy leaves a marker in it (``.wml-users/<job>``); cleaning up at the end of a
job removes its marker, and the copy once no job uses it.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from wmlce_tools.ddlrun.pdeathsig import KILL_ON_PARENT_DEATH
from wmlce_tools.env.staging import staged_directory
from wmlce_tools.errors import WmlError

from wmlce_tools.locks import file_lock

from .archive import Manifest

MARKER = ".wml-staged.json"
USERS = ".wml-users"


class NodeError(WmlError):
    """Staging failed on one node; the message names it."""


@dataclass(frozen=True)
class NodePlace:
    node: str
    place: Path

    def target(self, m: Manifest) -> Path:
        return self.place / f"wml-env-{m.name}-{m.key}"

    def fail(self, text: str) -> NodeError:
        return NodeError(f"node {self.node}: {text}")


def _complete(target: Path, m: Manifest) -> bool:
    """A copy to reuse: its marker names this key and every entry is still there with its size
    (the copy is made without an fsync: a node that lost power, or a cleaner that deleted
    files, leaves a copy that is made again rather than used)."""
    try:
        if json.loads((target / MARKER).read_text()).get("key") != m.key:
            return False
    except (OSError, ValueError):
        return False
    return _mismatch(target, m, frozenset(m.text)) is None


def _users(copy: Path) -> list:
    try:
        return os.listdir(copy / USERS)
    except OSError:
        return []


def _remove_stale(np: NodePlace, m: Manifest) -> None:
    """Copies of this environment with another key (an older env) that no job uses."""
    keep = np.target(m)
    for d in np.place.glob(f"wml-env-{m.name}-*"):
        if d != keep and d.is_dir() and len(d.name) == len(keep.name) and not _users(d):
            shutil.rmtree(d, ignore_errors=True)


def check_space(np: NodePlace, m: Manifest) -> None:
    free = shutil.disk_usage(np.place).free
    if free < m.bytes_needed:
        raise np.fail(f"{np.place} has {free / 2**30:.2f} GiB free; the environment {m.name} needs "
                      f"{m.bytes_needed / 2**30:.2f} GiB")


def _mismatch(root: Path, m: Manifest, resized: frozenset = frozenset()) -> "str | None":
    """What of the manifest ``root`` lacks, or None: one ``lstat`` per entry (kind and size), the
    contents are not read again (tar reported any read or write error; a short archive lacks
    entries or sizes).  ``resized``: files whose size relocation changed."""
    kinds = {"l": stat.S_ISLNK, "d": stat.S_ISDIR, "f": stat.S_ISREG}
    base = str(root) + "/"
    for rel, kind, size in m.entries:
        try:
            st = os.lstat(base + rel)
        except FileNotFoundError:
            return f"the unpacked environment lacks {rel} (archive incomplete?)"
        if not kinds[kind](st.st_mode) or (kind == "f" and st.st_size != size and rel not in resized):
            return f"the unpacked {rel} does not match the manifest"
    return None


def verify(root: Path, m: Manifest, np: NodePlace) -> None:
    why = _mismatch(root, m)
    if why:
        raise np.fail(why)


def _rewrite_binary(data: bytes, old: bytes, new: bytes) -> bytes:
    """conda's binary mode: each C string naming ``old`` gets ``new`` and is padded with NULs."""
    out, i = bytearray(), 0
    while True:
        j = data.find(old, i)
        if j < 0:
            out += data[i:]
            return bytes(out)
        end = data.find(b"\x00", j)
        end = len(data) if end < 0 else end
        s = data[j:end]
        r = s.replace(old, new)
        out += data[i:j] + r + b"\x00" * (len(s) - len(r))
        i = end


def relocate(root: Path, final: str, m: Manifest) -> None:
    old, new = m.prefix.encode(), final.encode()
    real = os.path.realpath(m.prefix).encode()
    olds = sorted({old, real}, key=len, reverse=True)
    for rel in m.text:
        p = root / rel
        data = p.read_bytes()
        for o in olds:
            data = data.replace(o, new)
        mode = p.stat().st_mode
        tmp = p.with_name(f".{p.name}.wml-reloc")
        tmp.write_bytes(data)
        os.chmod(tmp, mode)
        os.replace(tmp, p)     # a new inode: a hard link never writes through
    for rel in m.binary:
        p = root / rel
        data = p.read_bytes()
        for o in olds:
            if len(new) <= len(o):
                data = _rewrite_binary(data, o, new)
        tmp = p.with_name(f".{p.name}.wml-reloc")
        tmp.write_bytes(data)
        os.chmod(tmp, p.stat().st_mode)
        os.replace(tmp, p)
    for rel in m.links:
        p = root / rel
        target = os.readlink(p)
        for o in olds:
            if target.encode().startswith(o):
                p.unlink()
                os.symlink(final + target[len(o.decode()):], p)
                break


def ranges(size: int, cuts: list, workers: int) -> list:
    """``workers`` byte ranges of the archive, each from one of its ``cuts`` to the next chosen."""
    bounds = [0]
    for i in range(1, workers):
        c = min(cuts, key=lambda c: abs(c - size * i // workers), default=0)
        if c > bounds[-1]:
            bounds.append(c)
    bounds.append(size)
    return list(zip(bounds, bounds[1:]))


def _workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# tar dies with this process: a staging killed half-way leaves no writer behind in its
# temp dir, which the next staging on the node removes.
def _tar(dest: Path, stdin) -> subprocess.Popen:
    err = tempfile.TemporaryFile()     # not a pipe: a tar that says much never blocks on it
    proc = subprocess.Popen(["tar", "-x", "-f", "-", "-C", str(dest)], stdin=stdin, stderr=err,
                            preexec_fn=KILL_ON_PARENT_DEATH)
    proc.err = err
    return proc


def _feed(src: int, start: int, end: int, proc: subprocess.Popen) -> None:
    """``src``'s bytes ``start..end`` into ``proc``'s stdin (``sendfile``: no copy through this process)."""
    out = proc.stdin.fileno()
    try:
        while start < end:
            n = os.sendfile(out, src, start, min(end - start, 1 << 30))
            if not n:
                break
            start += n
    except OSError:
        pass                           # tar failed: its status says why
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()


def unpack(source: "Path | Iterable[bytes]", dest: Path, np: NodePlace, m: "Manifest | None" = None,
           workers: "int | None" = None) -> None:
    """Unpack the archive into ``dest``: from a file, in as many ranges as this node has cores
    (``workers``; at most one per ``m.cuts`` + 1), one tar each; from a stream of chunks, one tar.
    In ranges, every directory is made first: two tars never race to create one."""
    cuts = m.cuts if m is not None else []
    if isinstance(source, Path):
        try:
            f = open(source, "rb")
        except OSError as exc:
            raise np.fail(f"cannot read {source}: {exc.strerror}") from None
        with f:
            size = os.fstat(f.fileno()).st_size
            parts = ranges(size, list(cuts), min(workers or _workers(), len(cuts) + 1))
            if len(parts) == 1:
                procs = [_tar(dest, f)]       # tar reads the file itself
            else:
                for rel, kind, _ in m.entries:
                    if kind == "d":
                        os.makedirs(dest / rel, exist_ok=True)
                procs = [_tar(dest, subprocess.PIPE) for _ in parts]
                feeders = [threading.Thread(target=_feed, args=(f.fileno(), a, b, p), daemon=True)
                           for (a, b), p in zip(parts, procs)]
                for t in feeders:
                    t.start()
                for t in feeders:
                    t.join()
            rcs = [p.wait() for p in procs]
    else:
        procs = [_tar(dest, subprocess.PIPE)]
        proc = procs[0]
        try:
            for chunk in source:
                proc.stdin.write(chunk)
        except BrokenPipeError:
            pass                       # tar failed: its status says why
        finally:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        rcs = [proc.wait()]
    for p, rc in zip(procs, rcs):
        p.err.seek(0)
        err = p.err.read()
        p.err.close()
        if rc:
            why = err.decode(errors="replace").strip().splitlines()
            raise np.fail(f"unpacking failed: {why[-1] if why else f'tar exited {rc}'}")


def stage(np: NodePlace, m: Manifest, source: "Path | Iterable[bytes] | None", job: str) -> Path:
    """Make (or reuse) this node's copy; return its prefix.  ``source=None`` only reuses."""
    try:
        np.place.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise np.fail(f"cannot create {np.place}: {exc.strerror}") from None
    target = np.target(m)
    with file_lock(np.place / f".wml-env-{m.name}.lock", f"node {np.node}: staging {m.name}"):
        _remove_stale(np, m)
        if not _complete(target, m):
            if source is None:
                raise np.fail(f"no complete copy of {m.name} at {target}")
            check_space(np, m)
            try:
                with staged_directory(target, force=True) as tmp:
                    unpack(source, tmp, np, m)
                    verify(tmp, m, np)
                    relocate(tmp, str(target), m)
                    (tmp / MARKER).write_text(json.dumps({"key": m.key, "from": m.prefix}))
            except NodeError:
                raise
            except WmlError as exc:
                raise np.fail(str(exc)) from None
            except OSError as exc:
                raise np.fail(f"staging into {np.place} failed: {exc.strerror or exc}") from None
        (target / USERS).mkdir(exist_ok=True)
        (target / USERS / job).touch()
    return target


def wants(np: NodePlace, m: Manifest) -> bool:
    """Whether this node needs the archive's bytes (no complete copy yet)."""
    return not _complete(np.target(m), m)


def release(np: NodePlace, m: Manifest, job: str, keep: bool) -> None:
    """End of a job: drop its marker; remove the copy once no job uses it (unless ``keep``)."""
    target = np.target(m)
    if not np.place.is_dir():
        return
    with file_lock(np.place / f".wml-env-{m.name}.lock", f"node {np.node}: cleaning up {m.name}"):
        for copy in np.place.glob(f".wml-sbcast-{job}-*"):     # the archive sbcast put here
            copy.unlink()
        with contextlib.suppress(FileNotFoundError):
            (target / USERS / job).unlink()
        if not keep and target.is_dir() and not _users(target):
            shutil.rmtree(target, ignore_errors=True)
