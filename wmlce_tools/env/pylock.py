"""Locking a PyPI spec into a PEP 751 ``pylock.toml`` with uv, and reading one back.

uv (``uv pip compile --universal --format pylock.toml``) resolves once for every platform
(a universal resolution: each package carries the marker of the platforms that need it) and
writes the standard lock; pip's own ``pip lock`` (pip >= 25.1) resolves for the running
machine only, so it cannot lock linux-aarch64 from an x86_64 login node.  wml adds to the file
what PEP 751 has fields for: ``environments`` (the platforms the lock is for: an installer on
another platform refuses it) and a ``[tool.wml]`` table (the spec's name, platforms, imports,
python and whether the venv sees the base python's site packages).

After the resolution every package that applies to a platform must have a wheel for it (or an
sdist): an index that lacks, say, aarch64 wheels of a package is named in one line.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wmlce_tools.errors import WmlError
from wmlce_tools.env.pypi_spec import PYPI_PLATFORMS, PypiSpec, check_pypi_platforms

DEFAULT_PYLOCK = "pylock.toml"


def uv_bin() -> str:
    """uv's executable, from the ``uv`` package on PyPI (the 'env' extra)."""
    try:
        from uv import find_uv_bin
    except ModuleNotFoundError:
        raise WmlError("wml env needs uv for PyPI environments: pip install '.[env]' in the wml checkout") from None
    return find_uv_bin()


def uv_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment uv runs in: no python downloads (a cluster's python is a module, not a
    download), its cache where wml keeps packages (``$WML_PKGS_DIR/uv``) unless UV_CACHE_DIR
    says otherwise."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    env.pop("VIRTUAL_ENV", None)
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env.setdefault("UV_NO_PROGRESS", "1")
    if "UV_CACHE_DIR" not in env and os.environ.get("WML_PKGS_DIR"):
        env["UV_CACHE_DIR"] = str(Path(os.environ["WML_PKGS_DIR"]) / "uv")
    env.update(extra or {})
    return env


def uv_cache_dir() -> Path:
    proc = subprocess.run([uv_bin(), "cache", "dir"], capture_output=True, text=True, env=uv_env(), timeout=60)
    return Path(proc.stdout.strip())


def uv_error(output: str) -> str:
    """uv's own error, in one line: the first ``error:`` line and its last cause."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [i for i, ln in enumerate(lines) if ln.startswith("error:")]
    if not errors:
        return lines[-1] if lines else "uv failed"
    first = lines[errors[0]][len("error:"):].strip()
    causes = [ln.split(":", 1)[1].strip() for ln in lines[errors[0] + 1:]
              if ln.startswith(("Caused by:", "cause:"))]
    causes += [ln.lstrip("╰─▶ ").strip() for ln in lines[errors[0] + 1:] if ln.startswith("╰─▶")]
    tail = causes[-1] if causes else ""
    return f"{first} ({tail})" if tail and tail not in first else first


# ---------------------------------------------------------------- platform markers

def marker_environment(platform: str, python: str) -> dict[str, str]:
    """PEP 508 marker values of a Linux platform with CPython ``python`` (e.g. ``3.11``)."""
    return {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
            "platform_machine": PYPI_PLATFORMS[platform], "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "python_version": python,
            "python_full_version": f"{python}.0", "platform_release": "", "platform_version": "",
            "implementation_version": f"{python}.0"}


def environment_marker(platform: str) -> str:
    return f"sys_platform == 'linux' and platform_machine == '{PYPI_PLATFORMS[platform]}'"


def this_platform() -> str | None:
    import platform as _platform

    machine = _platform.machine()
    return next((p for p, m in PYPI_PLATFORMS.items() if m == machine), None)


def _wheel_fits(filename: str, platform: str, python: str) -> bool:
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        _, _, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    arch = PYPI_PLATFORMS[platform]
    xy = python.replace(".", "")
    minor = int(python.split(".")[1])
    for tag in tags:
        plat_ok = tag.platform == "any" or (
            (tag.platform.startswith("manylinux") or tag.platform.startswith("linux_")) and tag.platform.endswith(arch))
        interp = tag.interpreter
        if tag.abi == "abi3" and interp.startswith("cp3"):
            interp_ok = int(interp[3:]) <= minor
        else:
            interp_ok = interp in (f"cp{xy}", "py3", f"py{xy}") and tag.abi in ("none", f"cp{xy}", "abi3")
        if plat_ok and interp_ok:
            return True
    return False


def _for_platforms(filename: str, platforms: list[str]) -> bool:
    """Whether a wheel installs on one of ``platforms`` (any python): a pure wheel, or a Linux
    one for one of their machines.  A file name that is not a wheel's is kept."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return True
    machines = tuple(PYPI_PLATFORMS[p] for p in platforms)
    return any(t.platform == "any" or (t.platform.startswith(("manylinux", "musllinux", "linux_"))
                                       and t.platform.endswith(machines)) for t in tags)


def keep_platforms(doc: Any, platforms: list[str], python: str) -> None:
    """Drop from a parsed pylock (tomlkit) what none of ``platforms`` installs: macOS and Windows
    wheels, those of other machines, and packages whose marker no platform meets (uv's universal
    resolution keeps every platform's).  Other pythons' wheels stay: a venv may be made from a
    site module's newer python (--python)."""
    minor = int(python.split(".")[1])
    packages = doc.get("packages") or []
    for i in reversed(range(len(packages))):
        pkg = packages[i]
        if not any(applies(pkg, p, f"3.{m}") for p in platforms for m in range(minor, minor + 10)):
            del packages[i]
            continue
        wheels = pkg.get("wheels")
        if wheels is None:
            continue
        for j in reversed(range(len(wheels))):
            w = wheels[j]
            if not _for_platforms(w.get("name") or Path(str(w.get("url", w.get("path", "")))).name, platforms):
                del wheels[j]


def applies(package: dict[str, Any], platform: str, python: str) -> bool:
    from packaging.markers import Marker

    marker = package.get("marker")
    return not marker or Marker(marker).evaluate(marker_environment(platform, python))


def missing_wheels(packages: list[dict[str, Any]], platform: str, python: str) -> list[str]:
    """``name version`` of each package that applies to ``platform`` but has neither a wheel
    for it nor an sdist."""
    out = []
    for pkg in packages:
        if not applies(pkg, platform, python):
            continue
        if pkg.get("sdist") or pkg.get("directory") or pkg.get("archive") or pkg.get("vcs"):
            continue
        wheels = pkg.get("wheels") or []
        if not any(_wheel_fits(w.get("name") or Path(w.get("url", w.get("path", ""))).name, platform, python)
                   for w in wheels):
            out.append(f"{pkg['name']} {pkg.get('version', '')}".strip())
    return out


# ---------------------------------------------------------------- locking

@dataclass
class PylockResult:
    path: Path
    platforms: list[str]
    packages: dict[str, int] = field(default_factory=dict)   # platform -> packages that apply


def _requirements_file(spec: PypiSpec, tmp: Path) -> Path:
    path = tmp / "requirements.in"
    path.write_text("\n".join(spec.requirements) + "\n")
    return path


def lock_pypi(spec: PypiSpec, lockfile: Path, platforms: list[str] | None = None,
              index: str | None = None) -> PylockResult:
    """Resolve ``spec`` for ``platforms`` (default: the spec's) and write ``lockfile``."""
    import tomlkit

    platforms = list(dict.fromkeys(platforms or spec.platforms))
    check_pypi_platforms(platforms, spec.name)
    for p in platforms:
        spec.check_platform(p)
    lockfile = Path(lockfile).absolute()
    if not lockfile.parent.is_dir():
        raise WmlError(f"cannot write lockfile {lockfile}: directory {lockfile.parent} does not exist")
    index = index or spec.index
    with tempfile.TemporaryDirectory(prefix=f".{lockfile.name}.", dir=lockfile.parent) as tmpdir:
        tmp = Path(tmpdir)
        out = tmp / "pylock.toml"
        cmd = [uv_bin(), "pip", "compile", "--universal", "--format", "pylock.toml", "--quiet",
               "--python-version", spec.python, "--no-header", "-o", str(out), str(_requirements_file(spec, tmp))]
        if index:
            cmd[4:4] = ["--default-index", index]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=uv_env({"UV_HTTP_RETRIES": "1"}),
                              timeout=1800)
        if proc.returncode != 0:
            where = index or "PyPI"
            output = proc.stderr + proc.stdout
            text = uv_error(output)
            if "error sending request" in output or "Request failed after" in output:
                raise WmlError(f"index {where} is unreachable: {text}")
            raise WmlError(f"cannot lock {spec.name!r} from {where}: {text}")
        doc = tomlkit.parse(out.read_text())
        packages = tomllib.loads(out.read_text()).get("packages", [])
        result = PylockResult(path=lockfile, platforms=platforms)
        for p in platforms:
            lacking = missing_wheels(packages, p, spec.python)
            if lacking:
                raise WmlError(f"index {index or 'PyPI'} has no {p} wheel (and no sdist) of "
                               f"{', '.join(lacking[:5])}{' ...' if len(lacking) > 5 else ''} for python {spec.python}")
            result.packages[p] = sum(1 for pkg in packages if applies(pkg, p, spec.python))
        keep_platforms(doc, platforms, spec.python)
        doc["environments"] = [environment_marker(p) for p in platforms]
        wml = tomlkit.table()
        wml.update({"name": spec.name, "platforms": platforms, "python": spec.python,
                    "system-site-packages": spec.system_site_packages, "imports": spec.imports,
                    "requirements": spec.requirements})
        if index:
            wml["index"] = index
        if spec.version:
            wml["spec-version"] = spec.version
        tool = doc.get("tool") or tomlkit.table()
        tool["wml"] = wml
        doc["tool"] = tool
        staged = tmp / lockfile.name
        staged.write_text(tomlkit.dumps(doc))
        os.chmod(staged, 0o644)
        os.replace(staged, lockfile)
    return result


# ---------------------------------------------------------------- reading

@dataclass
class Pylock:
    path: Path
    name: str
    platforms: list[str]
    python: str
    system_site_packages: bool
    imports: list[str]
    packages: list[dict[str, Any]]
    index: str | None = None


def is_pylock(path: Path) -> bool:
    """A PEP 751 lock: named as the PEP names one, or any file whose content is one."""
    from wmlce_tools.env.lockfiles import lock_kind

    name = Path(path).name
    return name == "pylock.toml" or (name.startswith("pylock.") and name.endswith(".toml")) or \
        lock_kind(path) == "pylock"


def read_pylock(path: Path) -> Pylock:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise WmlError(f"lockfile {path} not found") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise WmlError(f"{path} is not a pylock.toml: {exc}") from None
    if str(data.get("lock-version", "")).split(".")[0] != "1":
        raise WmlError(f"{path} is not a PEP 751 lock (lock-version {data.get('lock-version')!r}, expected 1.x)")
    wml = (data.get("tool") or {}).get("wml") or {}
    platforms = list(wml.get("platforms") or [])
    if not platforms:    # a pylock.toml wml did not write: its environments say where it runs
        for marker in data.get("environments") or []:
            platforms += [p for p, m in PYPI_PLATFORMS.items() if f"'{m}'" in marker or f'"{m}"' in marker]
    python = str(wml.get("python") or "")
    if not python:
        rp = str(data.get("requires-python", ""))
        python = rp.lstrip(">=~= ").split(",")[0] or "3"
    return Pylock(path=path, name=str(wml.get("name") or path.parent.name or "venv"), platforms=platforms,
                  python=python, system_site_packages=bool(wml.get("system-site-packages", False)),
                  imports=list(wml.get("imports") or []), packages=list(data.get("packages") or []),
                  index=wml.get("index"))


def check_lock_platform(lock: Pylock, platform: str | None = None) -> str:
    """The platform to install: this machine's, which the lock must have been made for."""
    here = this_platform()
    platform = platform or here
    if platform is None or platform != here:
        raise WmlError(f"a venv is created on the machine it runs on ({here or 'this machine'}), not {platform}")
    if lock.platforms and platform not in lock.platforms:
        raise WmlError(f"{lock.path} was locked for {', '.join(lock.platforms)}, not this {platform} machine: "
                       f"lock it for {platform} too (wml env lock SPEC -p {platform})")
    return platform
