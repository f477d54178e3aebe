"""A PyPI environment spec: pip requirements, locked into a PEP 751 ``pylock.toml``, installed
into a virtualenv.

In wml's YAML (``kind: pypi``)::

    name: pypi-torch
    kind: pypi
    python: "3.11"                      # the interpreter the venv is made from (and the lock is for)
    platforms: [linux-64, linux-aarch64]
    index: https://pypi.org/simple      # default: uv's (PyPI)
    requirements: [torch, numpy, mpi4py]
    requirements_file: requirements.txt # instead of / besides requirements (relative to the spec)
    system_site_packages: false         # the venv sees the base python's packages (a site module's)
    imports: [torch, mpi4py]

A plain ``requirements.txt`` (or ``.in``) is read as a PyPI spec named after the file.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from wmlce_tools.errors import WmlError

#: Linux platforms a PyPI lock can name, and the ``platform_machine`` of each
PYPI_PLATFORMS = {"linux-64": "x86_64", "linux-aarch64": "aarch64", "linux-ppc64le": "ppc64le"}
DEFAULT_PYPI_PLATFORMS = ["linux-64", "linux-aarch64"]


@dataclass
class PypiSpec:
    name: str
    requirements: list[str]
    platforms: list[str] = field(default_factory=lambda: list(DEFAULT_PYPI_PLATFORMS))
    python: str = f"{sys.version_info[0]}.{sys.version_info[1]}"
    index: str | None = None
    system_site_packages: bool = False
    imports: list[str] = field(default_factory=list)
    description: str = ""
    version: str | None = None
    source: Path | None = None
    origin: str = ""
    checked: str = ""
    legacy: bool = False

    def check_platform(self, platform: str) -> None:
        if platform not in self.platforms:
            raise WmlError(f"platform {platform!r} is not one of spec {self.name!r}'s platforms "
                           f"({', '.join(self.platforms)})")


def check_pypi_platforms(platforms: list[str], where: str) -> None:
    for p in platforms:
        if p not in PYPI_PLATFORMS:
            raise WmlError(f"{where}: a PyPI environment locks Linux platforms ({', '.join(PYPI_PLATFORMS)}), "
                           f"not {p!r}")


def from_requirements_file(path: Path) -> PypiSpec:
    """A ``requirements.txt``: every line but comments and blank ones is a requirement
    (options such as ``--index-url`` are passed on to uv as they are written)."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise WmlError(f"cannot read {path}: {exc.strerror}") from None
    reqs = [ln.split(" #")[0].strip() for ln in lines]
    reqs = [r for r in reqs if r and not r.startswith("#")]
    if not reqs:
        raise WmlError(f"{path}: no requirements")
    from wmlce_tools.env.spec_fields import check_cuda_builds

    name = re.sub(r"[^A-Za-z0-9._+-]", "-", path.stem)
    spec = PypiSpec(name=name, requirements=reqs, source=path)
    check_cuda_builds(spec, str(path))
    return spec


def from_wml_yaml(data, where) -> PypiSpec:
    """``data``/``where``: spec.py's line-numbered mapping and its error helper."""
    from wmlce_tools.env.spec_fields import check_cuda_builds, provenance, str_list

    name = data.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._+-]+", name):
        raise where.error(data.lines.get("name"), f"missing or invalid 'name' {name!r}")
    if data.get("channels") or data.get("packages"):
        line = data.lines.get("channels") or data.lines.get("packages")
        raise where.error(line, "a PyPI spec (kind: pypi) has requirements, not channels or packages")
    reqs = str_list(data, "requirements", where)
    req_file = data.get("requirements_file")
    if req_file is not None:
        rf = Path(str(req_file))
        if not rf.is_absolute():
            rf = where.path.parent / rf
        reqs += from_requirements_file(rf).requirements
    if not reqs:
        raise where.error(data.lines.get("requirements"), "a PyPI spec needs 'requirements' or 'requirements_file'")
    platforms = str_list(data, "platforms", where) or list(DEFAULT_PYPI_PLATFORMS)
    try:
        check_pypi_platforms(platforms, str(where.path))
    except WmlError as exc:
        raise where.error(data.lines.get("platforms"), str(exc).split(": ", 1)[1]) from None
    python = str(data.get("python") or f"{sys.version_info[0]}.{sys.version_info[1]}")
    if not re.fullmatch(r"3\.\d+", python):
        raise where.error(data.lines.get("python"), f"'python' must be a version like 3.11, got {python!r}")
    index = data.get("index")
    if index is not None and not (isinstance(index, str) and re.match(r"^(https?|file)://", index)):
        raise where.error(data.lines.get("index"), f"'index' must be an http(s):// or file:// URL, got {index!r}")
    ssp = data.get("system_site_packages", False)
    if not isinstance(ssp, bool):
        raise where.error(data.lines.get("system_site_packages"), "'system_site_packages' must be true or false")
    version = data.get("version")
    spec = PypiSpec(name=name, requirements=reqs, platforms=platforms, python=python, index=index,
                    system_site_packages=ssp, imports=str_list(data, "imports", where),
                    description=str(data.get("description") or ""),
                    version=None if version is None else str(version), source=where.path,
                    **provenance(data, where))
    check_cuda_builds(spec, f"{where.path}:{data.lines.get('requirements', 1)}")
    return spec
