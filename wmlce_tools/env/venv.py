"""PyPI environments: a virtualenv made from a ``pylock.toml``, with the lifecycle of a conda env.

- **create**: ``uv venv --relocatable`` (over the spec's python, or ``--python`` a site
  module's, optionally with its site packages), then ``uv pip sync`` of the lock, in a staging
  directory beside the target that is renamed into place (``staging``): a failure leaves nothing.
  A relocatable venv's scripts find their python relative to themselves, so the staged tree
  works once renamed, after a clone, a pack or ``--stage-env``.
- **package cache**: uv installs from its cache of unpacked wheels and hard-links them into the
  venv where it can, as rattler does for conda packages: an edit made in place in one venv
  changes the cache.  Before an install the cache entries of the lock's packages are checked
  against their wheels' RECORD (sha256 of every file); a damaged entry is removed, so uv fetches
  the wheel again, and when that fails the error names the package and the file.  ``--link``
  chooses hard links, reflinks or copies as for conda envs (``linking``).
- **clone**: the source's installed distributions (``uv pip freeze``) installed into a new
  relocatable venv over the same base python.
- **pack**: a tar.gz of the (relocatable) venv.

wml keeps the lock and what it knows in ``<venv>/share/wml/`` (``pylock.toml``, ``env.json``).
"""
from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from wmlce_tools.errors import WmlError
from wmlce_tools.env.linking import LinkChoice, LinkPolicy, choose
from wmlce_tools.env.pylock import Pylock, check_lock_platform, read_pylock, uv_bin, uv_cache_dir, uv_env, uv_error
from wmlce_tools.env.staging import staged_directory

_UV_LINK = {LinkPolicy.hardlink: "hardlink", LinkPolicy.reflink: "clone", LinkPolicy.copy: "copy"}


def wml_dir(prefix: Path) -> Path:
    return prefix / "share" / "wml"


def is_venv(prefix: Path) -> bool:
    return (prefix / "pyvenv.cfg").is_file() and not (prefix / "conda-meta").is_dir()


def repair_command(prefix: Path, dists: list[str]) -> str:
    """What puts a venv's damaged distributions (``name==version``) back: ``wml env repair``
    reinstalls conda packages from the package cache, which a venv has none of.  A venv wml
    made keeps the lock it came from and is made again from it; another one reinstalls the
    distributions with its own pip, or with uv where it has no pip (``uv venv`` seeds none)."""
    from wmlce_tools.quoting import sh_join

    kept = wml_dir(prefix) / "pylock.toml"
    if kept.is_file():
        return sh_join(["wml", "env", "create", str(kept), "--prefix", str(prefix), "--force"])
    python = str(prefix / "bin" / "python")
    if list(prefix.glob("lib/python*/site-packages/pip/__init__.py")):
        return sh_join([python, "-m", "pip", "install", "--force-reinstall", "--no-deps", *dists])
    return sh_join(["uv", "pip", "install", "--python", python, "--reinstall", "--no-deps", *dists])


@dataclass
class VenvResult:
    prefix: Path
    platform: str
    packages: int
    link: LinkChoice | None = None
    repaired_cache: list[str] = field(default_factory=list)
    not_reproduced: list[str] = field(default_factory=list)


def _run_uv(args: list[str], what: str, extra_env: dict[str, str] | None = None,
            timeout: float = 3600) -> subprocess.CompletedProcess:
    proc = subprocess.run([uv_bin(), *args], capture_output=True, text=True, env=uv_env(extra_env), timeout=timeout)
    if proc.returncode != 0:
        raise WmlError(f"{what} failed: {uv_error(proc.stderr + proc.stdout)}")
    return proc


def _base_python(spec_python: str, python: str | None) -> str:
    """The interpreter the venv is made from: ``--python`` (a site module's), else the spec's
    version as uv finds it on this machine (never downloaded)."""
    if python:
        if not (Path(python).is_file() or shutil.which(python)):
            raise WmlError(f"python {python} not found")
        return python
    return spec_python


# ---------------------------------------------------------------- the package cache

@dataclass
class CacheDamage:
    package: str
    path: str
    problem: str
    entry: Path


def _record_hash(path: Path) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()


def check_uv_cache(names: set[str], cache: Path) -> list[CacheDamage]:
    """Check the unpacked wheels in uv's cache (``archive-v0/<id>/``) of the distributions
    ``names`` (normalized) against their RECORD; remove each damaged entry so that uv fetches
    the wheel again.  Returns what was damaged.  ``WML_CACHE_CHECK`` as for conda packages:
    ``full`` hashes every file, ``fast`` checks that they exist, ``skip`` trusts the cache."""
    from packaging.utils import canonicalize_name

    from wmlce_tools.env.linking import cache_check

    mode = cache_check()
    damaged: list[CacheDamage] = []
    root = cache / "archive-v0"
    if mode == "skip" or not root.is_dir():
        return damaged
    for entry in root.iterdir():
        for dist_info in entry.glob("*.dist-info"):
            name = canonicalize_name(dist_info.name[:-len(".dist-info")].rsplit("-", 1)[0])
            if name not in names:
                continue
            record = dist_info / "RECORD"
            problem = None
            try:
                lines = record.read_text().splitlines()
            except OSError:
                lines, problem = [], CacheDamage(str(name), "RECORD", "missing", entry)
            for line in lines:
                parts = line.rsplit(",", 2)
                if len(parts) != 3 or not parts[1].startswith("sha256="):
                    continue
                f = entry / parts[0]
                if not f.is_file():
                    problem = CacheDamage(dist_info.name[:-10], parts[0], "missing", entry)
                    break
                if mode == "full" and _record_hash(f) != parts[1]:
                    problem = CacheDamage(dist_info.name[:-10], parts[0], "sha256 mismatch", entry)
                    break
            if problem is not None:
                damaged.append(problem)
                shutil.rmtree(entry, ignore_errors=True)
    return damaged


def _lock_names(lock: Pylock) -> set[str]:
    from packaging.utils import canonicalize_name

    return {canonicalize_name(p["name"]) for p in lock.packages if "name" in p}


# ---------------------------------------------------------------- create

def _make_venv(staging: Path, python: str, system_site_packages: bool) -> None:
    args = ["venv", "--quiet", "--relocatable", "--allow-existing", "--python", python]
    if system_site_packages:
        args.append("--system-site-packages")
    _run_uv(args + [str(staging)], f"making a venv with python {python}")


def _sync(staging: Path, lockfile: Path, choice: LinkChoice, what: str) -> None:
    args = ["pip", "sync", "--quiet", "--python", str(staging / "bin" / "python"),
            "--link-mode", _UV_LINK[choice.policy], str(lockfile)]
    _run_uv(args, what)


def write_info(staging: Path, name: str, platform: str, source: str, imports: list[str],
               lockfile: Path | None, cloned_from: str | None = None) -> None:
    from wmlce_tools.env.envinfo import EnvInfo

    d = wml_dir(staging)
    d.mkdir(parents=True, exist_ok=True)
    EnvInfo(name=name, platform=platform, source=source, imports=imports, cloned_from=cloned_from).write(staging)
    if lockfile is not None:
        shutil.copyfile(lockfile, d / "pylock.toml")


def create_venv(lockfile: Path, target: Path, python: str | None = None,
                system_site_packages: bool | None = None, force: bool = False, source: str = "",
                link: LinkPolicy = LinkPolicy.auto, platform: str | None = None,
                extra_pip: list | None = None) -> VenvResult:
    """Install ``lockfile`` (a pylock.toml) into a new relocatable venv at ``target``, atomically."""
    lock = read_pylock(lockfile)
    plat = check_lock_platform(lock, platform)
    target = Path(target).absolute()
    base = _base_python(lock.python, python)
    ssp = lock.system_site_packages if system_site_packages is None else system_site_packages
    cache = uv_cache_dir()
    choice = choose(link, target, cache if cache.exists() else target.parent)
    result = VenvResult(prefix=target, platform=plat, packages=0, link=choice)
    with staged_directory(target, force=force) as staging:
        _make_venv(staging, base, ssp)
        result.repaired_cache = [f"{d.package}: {d.path} ({d.problem})" for d in check_uv_cache(_lock_names(lock), cache)]
        kept = wml_dir(staging) / "pylock.toml"      # PEP 751's file name, as uv wants it
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lockfile, kept)
        try:
            _sync(staging, kept, choice, f"installing {lockfile} into {target}")
        except WmlError as exc:
            if result.repaired_cache:
                raise WmlError(f"installing into {target} failed: uv's cached copy of "
                               f"{result.repaired_cache[0]} was damaged and could not be fetched again ({exc})") from None
            raise
        for step in extra_pip or []:
            args = ["pip", "install", "--quiet", "--python", str(staging / "bin" / "python"),
                    "--link-mode", _UV_LINK[choice.policy], *step.options, *step.requirements]
            _run_uv(args, step.what, extra_env=step.env)
        write_info(staging, lock.name, plat, source, lock.imports, None)
        result.packages = _count_dists(staging)
    return result


def _count_dists(prefix: Path) -> int:
    from wmlce_tools.env.installed import site_packages_dirs

    return sum(len(list(sp.glob("*.dist-info"))) for sp in site_packages_dirs(prefix))


# ---------------------------------------------------------------- clone

def _pyvenv(prefix: Path) -> dict[str, str]:
    out = {}
    for line in (prefix / "pyvenv.cfg").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def clone_venv(src: Path, dst: Path, force: bool = False, link: LinkPolicy = LinkPolicy.auto) -> VenvResult:
    """A new relocatable venv at ``dst`` over ``src``'s base python, with ``src``'s installed
    distributions reinstalled (uv pip freeze), so every script runs ``dst``'s python."""
    from wmlce_tools.env.envinfo import EnvInfo

    src, dst = Path(src).absolute(), Path(dst).absolute()
    cfg = _pyvenv(src)
    home = cfg.get("home", "")
    version = cfg.get("version_info") or cfg.get("version") or ""
    major_minor = ".".join(version.split(".")[:2])
    base = next((str(Path(home) / n) for n in (f"python{major_minor}", "python3", "python")
                 if home and (Path(home) / n).exists()), None)
    if base is None:
        raise WmlError(f"{src}'s base python ({home or 'pyvenv.cfg has no home'}) is not on this machine")
    frozen = _run_uv(["pip", "freeze", "--python", str(src / "bin" / "python")], f"listing {src}'s packages").stdout
    reqs = [ln.strip() for ln in frozen.splitlines() if ln.strip() and not ln.startswith("#")]
    info = EnvInfo.read(src)
    cache = uv_cache_dir()
    choice = choose(link, dst, cache if cache.exists() else dst.parent)
    result = VenvResult(prefix=dst, platform=info.platform if info else "", packages=0, link=choice)
    lockfile = wml_dir(src) / "pylock.toml"
    with staged_directory(dst, force=force) as staging:
        _make_venv(staging, base, cfg.get("include-system-site-packages", "false") == "true")
        if reqs:
            req_file = staging / ".wml-clone-requirements.txt"
            req_file.write_text("\n".join(reqs) + "\n")
            try:
                _run_uv(["pip", "install", "--quiet", "--no-deps", "--python", str(staging / "bin" / "python"),
                         "--link-mode", _UV_LINK[choice.policy], "-r", str(req_file)], f"reinstalling {src}'s packages")
            finally:
                req_file.unlink(missing_ok=True)
        write_info(staging, info.name if info else src.name, result.platform or "", str(src),
                   info.imports if info else [], lockfile if lockfile.is_file() else None, cloned_from=str(src))
        result.packages = _count_dists(staging)
    return result


# ---------------------------------------------------------------- pack

def pack_venv(prefix: Path, output: Path, force: bool = False) -> Path:
    """A tar.gz of a relocatable venv (its scripts find their python relative to themselves);
    written beside ``output`` and renamed into place."""
    if _pyvenv(prefix).get("relocatable") != "true":
        raise WmlError(f"{prefix} is not a relocatable venv (made by wml env create / uv venv --relocatable): "
                       f"clone it with wml env clone first")
    output = Path(output).absolute()
    if output.exists() and not force:
        raise WmlError(f"{output} already exists (use --force to replace it)")
    if not output.parent.is_dir():
        raise WmlError(f"cannot write {output}: {output.parent} does not exist")
    if not output.name.endswith((".tar.gz", ".tgz")):
        raise WmlError(f"a venv packs to .tar.gz, not {output.name}")
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=1) as tar:
            tar.add(prefix, arcname=".")
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    return output

