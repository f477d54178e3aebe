"""Rewriting one prefix into another inside files that no conda package describes.

Conda packages carry their own placeholders (``info/has_prefix``) and rattler rewrites them.
Files written after the conda step (pip installs, files users added to a site env) carry the
absolute prefix they were made in; this module rewrites it in text files, as conda does in
text mode.  Binary files are left alone and reported, because rewriting a C string in place is
only safe when the new prefix is not longer than the old one.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class RelocationReport:
    rewritten: list[Path] = field(default_factory=list)
    binary_with_prefix: list[Path] = field(default_factory=list)


def is_text(data: bytes) -> bool:
    return b"\x00" not in data[:65536] and b"\x00" not in data[-65536:]


def rewrite_file(path: Path, old: str, new: str, report: RelocationReport) -> bool:
    """Replace ``old`` by ``new`` in one file (text only); True if it changed."""
    if path.is_symlink() or not path.is_file():
        return False
    data = path.read_bytes()
    old_b = old.encode()
    if old_b not in data:
        return False
    if not is_text(data):
        report.binary_with_prefix.append(path)
        return False
    mode = path.stat().st_mode
    tmp = path.with_name(f".{path.name}.wml-reloc")
    tmp.write_bytes(data.replace(old_b, new.encode()))
    os.chmod(tmp, mode)
    os.replace(tmp, path)  # a new inode: never writes through a hard link into a package cache
    report.rewritten.append(path)
    return True


def relocate_symlink(path: Path, old: str, new: str) -> None:
    target = os.readlink(path)
    if target.startswith(old + "/") or target == old:
        path.unlink()
        os.symlink(new + target[len(old):], path)


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def relocate_dist(prefix: Path, dist_info: Path, old: str, new: str,
                  report: RelocationReport) -> None:
    """Rewrite ``old`` -> ``new`` in the files a pip-installed distribution lists in its RECORD
    (found under ``prefix``), and update RECORD's hashes and sizes for the files it changed."""
    record = dist_info / "RECORD"
    if not record.is_file():
        return
    site_packages = dist_info.parent
    rows = list(csv.reader(io.StringIO(record.read_text())))
    changed = False
    for row in rows:
        if not row:
            continue
        target = (site_packages / row[0]).resolve() if not os.path.isabs(row[0]) else Path(row[0])
        try:
            target.relative_to(prefix.resolve())
        except ValueError:
            continue
        if target.name == "RECORD" and target.parent == dist_info.resolve():
            continue
        if rewrite_file(target, old, new, report):
            data = target.read_bytes()
            if len(row) >= 3:
                row[1], row[2] = _record_hash(data), str(len(data))
            changed = True
    if changed:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        record.write_text(out.getvalue())
