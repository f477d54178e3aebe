"""Which cached package is damaged, for error messages.

rattler validates and repairs the package cache itself (``linking.rattler_install_options``);
this module only answers "which package, which file" when an install has failed anyway (a
damaged package whose channel cannot be reached to fetch it again), so the one-line error can
name them.  It reads each cached package's ``info/paths.json`` with rattler's ``PathsJson``.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional


@dataclass(frozen=True)
class Damaged:
    package: str        # name-version-build
    entry: str          # the cache directory's name
    path: str           # relative path inside the package
    problem: str        # "missing" | "sha256 mismatch"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def first_damaged(records: list[Any], cache: Path) -> Optional[Damaged]:
    """The first cached file of ``records`` that disagrees with its package's paths.json."""
    from rattler import PathsJson

    for rec in records:
        package = f"{rec.name.normalized}-{rec.version}-{rec.build}"
        entry = cache / package
        if not (entry / "info" / "paths.json").is_file():
            continue
        try:
            paths = PathsJson.from_package_directory(entry)
        except Exception:
            return Damaged(package, entry.name, "info/paths.json", "unreadable")
        for p in paths.paths:
            if p.path_type.directory or p.path_type.softlink:
                continue
            f = entry / p.relative_path
            if not f.is_file():
                return Damaged(package, entry.name, str(p.relative_path), "missing")
            if p.sha256 is not None and sha256_file(f) != p.sha256.hex():
                return Damaged(package, entry.name, str(p.relative_path), "sha256 mismatch")
    return None
