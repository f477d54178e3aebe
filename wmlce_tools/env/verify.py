"""``wml env verify``: every package file present and intact; the spec's imports work;
pip-installed scripts run this env's python.

For each conda record the installer wrote ``paths_data`` into ``conda-meta``: each file's
sha256 as shipped and, for files whose prefix placeholder was rewritten, its sha256 in the
prefix.  A file is intact when it exists and hashes to the latter (or the former).  Then each
module listed in the spec's ``imports`` is imported by the env's own python.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from wmlce_tools.env.cachecheck import sha256_file
from wmlce_tools.env.envinfo import EnvInfo
from wmlce_tools.env.installed import conda_records, env_python


@dataclass
class FileProblem:
    package: str
    path: str
    problem: str  # "missing" | "sha256 mismatch"
    links: int = 1              # hard links to the file (>1: other envs or the cache see the same bytes)
    cache_copy: str = ""        # the package cache's file, when it is that same file

    @property
    def shared(self) -> str:
        """'' or what else holds this very file (a hard link: the same bytes, edited together)."""
        if self.links <= 1:
            return ""
        others = self.links - 1
        if self.cache_copy:
            rest = f" and {others - 1} other link(s), e.g. envs created from it" if others > 1 else ""
            return f"hard-linked with the package cache ({self.cache_copy}){rest}"
        return f"hard-linked with {others} other file(s) (envs created from the same package cache)"


@dataclass
class PipProblem:
    dist: str
    path: str
    problem: str


@dataclass
class ImportProblem:
    module: str
    error: str


@dataclass
class VerifyReport:
    prefix: Path
    packages: int = 0
    files_checked: int = 0
    imports_checked: list[str] = field(default_factory=list)
    file_problems: list[FileProblem] = field(default_factory=list)
    pip_problems: list[PipProblem] = field(default_factory=list)
    import_problems: list[ImportProblem] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.file_problems and not self.pip_problems and not self.import_problems


def _mismatch(pkg: str, rel: Path, path: Path, rec) -> FileProblem:
    st = os.stat(path)
    cache_copy = ""
    extracted = getattr(rec, "extracted_package_dir", None)
    if extracted and st.st_nlink > 1:
        cached = Path(extracted) / rel
        try:
            cst = os.stat(cached)
            if (cst.st_dev, cst.st_ino) == (st.st_dev, st.st_ino):
                cache_copy = str(cached)
        except OSError:
            pass
    return FileProblem(pkg, rel.as_posix(), "sha256 mismatch", links=st.st_nlink, cache_copy=cache_copy)


def check_files(prefix: Path, report: VerifyReport) -> None:
    for rec in conda_records(prefix):
        report.packages += 1
        pkg = f"{rec.name.normalized}-{rec.version}-{rec.build}"
        for entry in rec.paths_data.paths:
            rel = Path(entry.relative_path)
            path = prefix / rel
            kind = entry.path_type
            if kind.directory:
                continue
            report.files_checked += 1
            if not os.path.lexists(path):
                report.file_problems.append(FileProblem(pkg, rel.as_posix(), "missing"))
                continue
            if kind.softlink or path.is_symlink():
                continue
            expected = entry.sha256_in_prefix or entry.sha256
            if expected is None:
                continue
            if sha256_file(path) != expected.hex():
                report.file_problems.append(_mismatch(pkg, rel, path, rec))


def check_pip_scripts(prefix: Path, report: VerifyReport, owned: set[str] | None = None) -> None:
    """pip-installed scripts must run this env's python.

    This is what ``conda create --clone`` got wrong for WML CE: it copied pip's console
    scripts (horovodrun, ...) whose ``#!`` line still named the original env's python.
    """
    from wmlce_tools.env.installed import owned_files, pip_dists

    root = prefix.resolve()
    owned = owned_files(conda_records(prefix)) if owned is None else owned     # a venv: no conda records
    for dist in pip_dists(prefix, owned):
        for f in dist.files:
            try:
                rel = f.relative_to(root)
            except ValueError:
                continue
            if rel.parts[:1] != ("bin",) or not f.is_file():
                continue
            with f.open("rb") as fh:
                first = fh.readline(4096)
            if not first.startswith(b"#!"):
                continue
            interp = first[2:].strip().split(b" ")[0].decode(errors="replace")
            if "python" in Path(interp).name and not (interp.startswith(str(prefix) + "/")
                                                      or interp.startswith(str(root) + "/")):
                report.pip_problems.append(PipProblem(
                    f"{dist.name}=={dist.version}", rel.as_posix(),
                    f"runs {interp}, not this env's python"))


def check_imports(prefix: Path, modules: list[str], report: VerifyReport) -> None:
    if not modules:
        return
    python = env_python(prefix)
    if python is None:
        report.note = "the env has no python: imports not checked"
        return
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    for module in modules:
        report.imports_checked.append(module)
        proc = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True,
                              text=True, env=env)
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            report.import_problems.append(ImportProblem(module, lines[-1] if lines else f"exit {proc.returncode}"))


def verify_env(prefix: Path, imports: list[str] | None = None) -> VerifyReport:
    report = VerifyReport(prefix=prefix)
    check_files(prefix, report)
    check_pip_scripts(prefix, report)
    if imports is None:
        info = EnvInfo.read(prefix)
        imports = info.imports if info else []
    for module in imports:
        if not all(part.isidentifier() for part in module.split(".")):
            report.import_problems.append(ImportProblem(module, "not a module name"))
    check_imports(prefix, [m for m in imports if all(p.isidentifier() for p in m.split("."))], report)
    return report


def verify_venv(prefix: Path, imports: list[str] | None = None) -> VerifyReport:
    """``wml env verify`` of a virtualenv (what ``--env`` also takes): every file pip's RECORD
    lists with a sha256 present and intact, pip's scripts run this env's python, and the
    ``--import`` modules (default: the spec's, for a venv wml made) import."""
    import base64
    import hashlib

    from importlib.metadata import PathDistribution

    from wmlce_tools.env.installed import site_packages_dirs

    report = VerifyReport(prefix=prefix)
    for sp in site_packages_dirs(prefix):
        for dist_info in sorted(sp.glob("*.dist-info")):
            dist = PathDistribution(dist_info)
            name = f"{dist.metadata['Name']}=={dist.version}"
            report.packages += 1
            for f in dist.files or ():
                if f.hash is None or f.hash.mode != "sha256":
                    continue
                path = Path(dist.locate_file(f))
                report.files_checked += 1
                if not path.is_file():
                    report.file_problems.append(FileProblem(name, str(f), "missing"))
                    continue
                digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
                if digest != f.hash.value:
                    report.file_problems.append(FileProblem(name, str(f), "sha256 mismatch", os.stat(path).st_nlink))
    check_pip_scripts(prefix, report, owned=set())
    if imports is None:            # a venv wml env create made remembers its spec's imports
        info = EnvInfo.read(prefix)
        imports = info.imports if info else []
    for module in imports or []:
        if not all(part.isidentifier() for part in module.split(".")):
            report.import_problems.append(ImportProblem(module, "not a module name"))
    check_imports(prefix, [m for m in imports or [] if all(p.isidentifier() for p in m.split("."))], report)
    return report
