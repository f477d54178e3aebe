"""One archive per environment, built once and cached beside it, and its manifest.

The archive is an uncompressed tar of the whole prefix: of the formats measured (BENCHMARKS.md,
"Staging an environment to node-local storage") it unpacks fastest, 3x faster than tar +
multi-threaded zstd and 8x faster than conda-pack's tar.gz; decompression, not the copy, is what
a node waits for.  Its name carries the
environment's key: a hash of its lock (``conda-meta/wml/conda-lock.yml``), its package
records (``conda-meta/*.json``), its pip distributions (``*.dist-info/RECORD``) and
``pyvenv.cfg``, so an environment changed by ``conda install`` or ``pip install`` gets a new
archive and every node a fresh copy.

The manifest lists every entry (path, kind, size), the files and links that name the
environment's prefix (relocated on the node, as conda-unpack does), the bytes needed, and
``cuts``: offsets of member headers at about every 1/16 of the archive, where a node splits it
between parallel ``tar -x`` processes (a range of a tar that starts and ends at a header is
itself a tar GNU tar unpacks).
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List, Tuple

from wmlce_tools.errors import WmlError
from wmlce_tools.locks import file_lock

SUFFIX = ".tar"
FORMAT = "3"      # part of every key: a new format gets new archives and copies
BLOCK = 4096
PARTS = 16        # the most tar processes a node may unpack the archive with


@dataclass
class Manifest:
    """What a staged copy must hold, and what to relocate in it."""

    name: str
    key: str
    prefix: str                                   # the shared prefix the archive was made from
    entries: List[Tuple[str, str, int]] = field(default_factory=list)   # (path, f|d|l, size)
    text: List[str] = field(default_factory=list)     # text files naming the prefix
    binary: List[str] = field(default_factory=list)   # binary files naming the prefix
    links: List[str] = field(default_factory=list)    # symlinks into the prefix
    bytes_needed: int = 0
    cuts: List[int] = field(default_factory=list)     # member header offsets a node may split at

    def write(self, path: Path) -> None:
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(self)))
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: Path) -> "Manifest":
        try:
            data = json.loads(Path(path).read_text())
            data["entries"] = [tuple(e) for e in data["entries"]]
            return cls(**data)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise WmlError(f"cannot read the staging manifest {path}: {exc}") from None


@dataclass(frozen=True)
class Archive:
    path: Path
    manifest_path: Path
    manifest: Manifest


def env_key(prefix: Path) -> str:
    """A hash of what makes this environment what it is (cheap: no walk of the tree)."""
    h = hashlib.sha256(f"{FORMAT}\0{prefix}".encode())
    lock = prefix / "conda-meta" / "wml" / "conda-lock.yml"
    for p in [lock, prefix / "pyvenv.cfg"]:
        if p.is_file():
            h.update(p.read_bytes())
    stamps = sorted(glob.glob(str(prefix / "conda-meta" / "*.json"))
                    + glob.glob(str(prefix / "lib" / "python*" / "site-packages" / "*.dist-info" / "RECORD")))
    for s in stamps:
        st = os.stat(s)
        h.update(f"{os.path.relpath(s, prefix)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def cache_location(prefix: Path) -> Path:
    """Beside the environment (``<parent>/.wml-stage/``); wml's cache where that is not writable."""
    beside = prefix.parent / ".wml-stage"
    try:
        beside.mkdir(exist_ok=True)
        if os.access(beside, os.W_OK):
            return beside
    except OSError:
        pass
    from wmlce_tools.cache import cache_dir

    base = cache_dir()
    if base is None:
        raise WmlError(f"cannot write the staging archive of {prefix}: neither {beside} nor wml's cache is writable")
    d = base / "stage"
    d.mkdir(exist_ok=True)
    return d


def _walk(prefix: Path, needles: List[bytes]) -> Manifest:
    m = Manifest(name=prefix.name, key="", prefix=str(prefix))
    total = 0
    for dirpath, dirs, files in os.walk(prefix):
        dirs.sort()
        rel_dir = os.path.relpath(dirpath, prefix)
        for name in dirs + sorted(files):
            full = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(full)
            if os.path.islink(full):
                m.entries.append((rel, "l", 0))
                target = os.readlink(full)
                if any(target.encode().startswith(n) for n in needles):
                    m.links.append(rel)
            elif name in dirs and os.path.isdir(full):
                m.entries.append((rel, "d", 0))
            else:
                m.entries.append((rel, "f", st.st_size))
                total += -(-st.st_size // BLOCK) * BLOCK
                if name.endswith(".pyc"):
                    continue     # the import system sets co_filename from where it loads (_fix_co_filename)
                with open(full, "rb") as f:
                    data = f.read()
                if any(n in data for n in needles):
                    (m.text if b"\x00" not in data else m.binary).append(rel)
        total += BLOCK * len(dirs)
    m.bytes_needed = total
    return m


def build(prefix: Path, out: Path) -> Manifest:
    """Write the archive ``out`` of ``prefix``; return its manifest (key not set)."""
    needles = sorted({str(prefix).encode(), os.path.realpath(prefix).encode()}, key=len, reverse=True)
    manifest = _walk(prefix, needles)
    tar = subprocess.run(["tar", "-C", str(prefix), "-cf", str(out), "."], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    if tar.returncode:
        why = tar.stderr.decode(errors="replace").strip().splitlines()
        raise WmlError(f"cannot archive {prefix}: {why[-1] if why else f'tar exited {tar.returncode}'}")
    manifest.cuts = cuts(out)
    return manifest


def cuts(path: Path, parts: int = PARTS) -> List[int]:
    """The header offsets nearest after each ``1/parts`` of the tar ``path`` (none when it holds a
    hard link: its target could be in another part, not yet unpacked)."""
    import tarfile

    size = os.path.getsize(path)
    want = [size * i // parts for i in range(1, parts)]
    found: List[int] = []
    with tarfile.open(path) as tf:
        for member in tf:
            if member.islnk():
                return []
            while want and member.offset >= want[0]:
                want.pop(0)
                if not found or found[-1] != member.offset:
                    found.append(member.offset)
    return found


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def ensure_archive(prefix: Path) -> Archive:
    """The cached archive of ``prefix`` (built now if missing or out of date)."""
    prefix = Path(prefix).absolute()
    if not prefix.is_dir():
        raise WmlError(f"environment {prefix} does not exist")
    key = env_key(prefix)
    where = cache_location(prefix)
    path = where / f"{prefix.name}-{key}{SUFFIX}"
    mpath = where / f"{prefix.name}-{key}.manifest.json"
    with file_lock(where / f"{prefix.name}.lock", f"building the archive of {prefix}"):
        if not (path.is_file() and mpath.is_file()):
            print(f"wml: building the staging archive of {prefix} in {where} (once per version of the env)",
                  file=sys.stderr, flush=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=where)
            os.close(fd)
            try:
                manifest = build(prefix, Path(tmp))
                manifest.key = key
                os.chmod(tmp, 0o644 & ~_umask())
                os.replace(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            manifest.write(mpath)
            older = re.compile(re.escape(prefix.name) + r"-[0-9a-f]{16}(\.tar|\.manifest\.json)$")
            for old in where.iterdir():     # older archives of this env
                if old not in (path, mpath) and older.match(old.name):
                    with contextlib.suppress(OSError):
                        old.unlink()
    return Archive(path=path, manifest_path=mpath, manifest=Manifest.read(mpath))
