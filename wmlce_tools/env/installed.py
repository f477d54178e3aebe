"""Reading an installed env: its conda records, the files they own, and what pip added."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from wmlce_tools.errors import WmlError


@dataclass
class PipDist:
    """A distribution pip (or another Python installer) put into the env."""

    name: str
    version: str
    dist_info: Path
    installer: str = ""
    direct_url: str | None = None    # where it came from, when pip recorded it (PEP 610)
    editable: bool = False
    files: list[Path] = field(default_factory=list)  # absolute, from RECORD

    @property
    def requirement(self) -> str:
        """What to hand pip to get the same thing again."""
        if self.direct_url and not self.editable:
            return f"{self.name} @ {self.direct_url}"
        return f"{self.name}=={self.version}"

    def source_available(self) -> bool:
        if self.direct_url and self.direct_url.startswith("file://"):
            return Path(unquote(urlparse(self.direct_url).path)).exists()
        return True


def conda_records(prefix: Path) -> list[Any]:
    """rattler PrefixRecords of every package in ``prefix/conda-meta``."""
    from rattler import PrefixRecord

    meta = prefix / "conda-meta"
    if not meta.is_dir():
        raise WmlError(f"{prefix} is not a conda environment (no conda-meta/ directory)")
    out = []
    for path in sorted(meta.glob("*.json")):
        try:
            out.append(PrefixRecord.from_path(path))
        except Exception as exc:
            raise WmlError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    return out


def owned_files(records: list[Any]) -> set[str]:
    """Relative paths (posix) of every file a conda record owns."""
    owned: set[str] = set()
    for rec in records:
        for f in rec.files:
            owned.add(Path(f).as_posix())
    return owned


def env_platform(records: list[Any]) -> str | None:
    subdirs = {r.subdir for r in records if r.subdir != "noarch"}
    return sorted(subdirs)[0] if subdirs else None


def env_python(prefix: Path) -> Path | None:
    for name in ("bin/python", "bin/python3"):
        p = prefix / name
        if p.exists() and os.access(p, os.X_OK):
            return p
    return None


def site_packages_dirs(prefix: Path) -> list[Path]:
    return sorted(p for p in (prefix / "lib").glob("python*/site-packages") if p.is_dir())


def pip_dists(prefix: Path, owned: set[str]) -> list[PipDist]:
    """``*.dist-info`` directories in site-packages that no conda record owns, read with
    ``importlib.metadata`` (METADATA, RECORD, INSTALLER, PEP 610 direct_url.json)."""
    from importlib.metadata import PathDistribution

    out = []
    for sp in site_packages_dirs(prefix):
        for dist_info in sorted(sp.glob("*.dist-info")):
            meta_file = dist_info / "METADATA"
            if meta_file.relative_to(prefix).as_posix() in owned or not meta_file.is_file():
                continue
            dist = PathDistribution(dist_info)
            direct_url = None
            editable = False
            text = dist.read_text("direct_url.json")
            if text:
                try:
                    info = json.loads(text)
                    direct_url = info.get("url")
                    editable = bool(info.get("dir_info", {}).get("editable"))
                except (ValueError, AttributeError):
                    pass
            files = [Path(f.locate()).resolve() for f in (dist.files or [])]
            out.append(PipDist(name=dist.metadata["Name"] or dist_info.name.split("-")[0],
                               version=dist.version or "", dist_info=dist_info,
                               installer=(dist.read_text("INSTALLER") or "").strip(),
                               direct_url=direct_url, editable=editable, files=files))
    return out


def env_size(prefix: Path) -> int:
    total = 0
    seen: set[tuple[int, int]] = set()
    for root, _dirs, files in os.walk(prefix):
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key in seen:
                continue
            seen.add(key)
            total += st.st_size
    return total
