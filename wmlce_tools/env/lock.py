"""Solving a spec with py-rattler and writing conda-lock's unified lockfile (``conda-lock.yml``).

The lockfile is built from conda-lock's own models (``conda_lock.lockfile.v2prelim``) and
written with ``conda_lock.lockfile.write_conda_lock_file``, so conda-lock's parser and
``conda-lock install`` read it.  Each platform's ``content_hash`` is computed by conda-lock's
``compute_content_hashes`` over the spec (channels, conda and pip requirements, virtual
packages); when every requested platform's hash matches the existing lockfile, nothing is
re-solved.

wml keeps what conda-lock's schema has no field for (the pip section, the imports verify
checks, the spec's name) in ``metadata.custom_metadata`` under ``wml.*`` keys.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wmlce_tools.errors import WmlError
from wmlce_tools.env import rattler_async
from wmlce_tools.env.spec import EnvSpec

if TYPE_CHECKING:  # pragma: no cover
    from conda_lock.lockfile.v2prelim.models import Lockfile
    from rattler import RepoDataRecord

DEFAULT_LOCKFILE = "conda-lock.yml"
_META_PREFIX = "wml."


@dataclass
class LockResult:
    path: Path
    solved: list[str] = field(default_factory=list)       # platforms solved this time
    up_to_date: list[str] = field(default_factory=list)   # platforms whose hash matched
    packages: dict[str, int] = field(default_factory=dict)  # platform -> number of conda packages


@dataclass
class LockedEnv:
    """What ``create`` needs from a lockfile for one platform."""

    name: str
    platform: str
    records: list[Any]            # rattler RepoDataRecord
    pip: list[str]
    imports: list[str]
    channels: list[str]
    pip_index: str | None = None


# ---------------------------------------------------------------- channels

def normalize_channel(channel: str, base: Path | None = None) -> str:
    """Local paths (``/...``, ``./...``, ``../...``, ``~...``) become file:// URLs, relative
    ones resolved against ``base`` (the spec's directory) or the working directory; channel
    names (``conda-forge``, ``ibm/label/x``) and URLs stay as they are."""
    if re.match(r"^[a-z][a-z0-9+.-]*://", channel):
        return channel.rstrip("/")
    if channel.startswith(("/", "./", "../", "~")) or channel in (".", ".."):
        local = Path(channel).expanduser()
        if not local.is_absolute():
            local = (base or Path.cwd()) / local
        return Path(os.path.normpath(local.absolute())).as_uri()
    return channel


def _channels(spec: EnvSpec, override: list[str] | None) -> list[str]:
    if override:  # from the command line: relative to the working directory
        return [normalize_channel(c) for c in override]
    base = spec.source.parent if spec.source else None
    return [normalize_channel(c, base) for c in spec.channels]


# ---------------------------------------------------------------- content hash

def content_hashes(spec: EnvSpec, channels: list[str], platforms: list[str]) -> dict[str, str]:
    """conda-lock's content hash of this spec, per platform."""
    from conda_lock.content_hash import compute_content_hashes
    from conda_lock.models.lock_spec import LockSpecification, VersionedDependency
    from conda_lock.src_parser.conda_common import conda_spec_to_versioned_dep
    from conda_lock.virtual_package import FakeRepoData, VirtualPackage

    deps: dict[str, list[Any]] = {}
    for platform in platforms:
        items = []
        for s in spec.packages_for(platform):
            try:
                items.append(conda_spec_to_versioned_dep(s, "main"))
            except Exception:
                raise WmlError(f"cannot parse package spec {s!r}") from None
        items += [VersionedDependency(name=p, version="", manager="pip") for p in spec.pip]
        deps[platform] = items
    lock_spec = LockSpecification(dependencies=deps, channels=list(channels),
                                  sources=[spec.source] if spec.source else [])
    with tempfile.TemporaryDirectory(prefix="wml-vpkgs-") as tmp:
        repo = FakeRepoData(base_path=Path(tmp))
        for platform in platforms:
            for name, value in spec.virtual_packages_for(platform).items():
                version, _, build = value.partition(" ")
                repo.add_package(VirtualPackage(name=name, version=version, build_string=build),
                                 subdirs=[platform])
        repo.write()
        return dict(compute_content_hashes(lock_spec, repo))


# ---------------------------------------------------------------- solving

def _virtual_packages(spec: EnvSpec, platform: str) -> list[Any]:
    from rattler import BuildString, GenericVirtualPackage, PackageName, Version

    out = []
    for name, value in spec.virtual_packages_for(platform).items():
        version, _, build = value.partition(" ")
        try:
            out.append(GenericVirtualPackage(PackageName(name), Version(version), BuildString(build or "0")))
        except Exception:
            raise WmlError(f"invalid virtual package {name}={value!r} in spec {spec.name!r}") from None
    return out


def _first_line(text: str) -> str:
    lines = [ln.strip(" └─│├") for ln in str(text).splitlines() if ln.strip()]
    return lines[0] if lines else str(text)


def _solver_message(exc: Exception, platform: str) -> str:
    """The solver's explanation, shortened to one line."""
    lines = [ln.strip().lstrip("└─│├ ").strip() for ln in str(exc).splitlines() if ln.strip()]
    text = "; ".join(lines)
    text = text.replace("Cannot solve the request because of: ", "")
    if len(text) > 300:
        text = text[:297] + "..."
    return f"cannot solve for {platform}: {text}"


def _channel_message(exc: Exception, channels: list[str]) -> str:
    text = str(exc)
    culprit = next((c for c in channels if c.rstrip("/") in text), None)
    if culprit is None:
        m = re.search(r"(https?|file)://[^\s)'`]+", text)
        culprit = m.group(0) if m else ", ".join(channels)
    causes = [ln.replace("Caused by:", "").strip() for ln in text.splitlines() if ln.strip()]
    reason = causes[-1] if causes else text
    mirror = "" if culprit.startswith("file:") else (
        "; without a network, give a local mirror of the channel: -c file:///path/to/mirror "
        "(a directory holding the channel's <platform>/repodata.json and packages)")
    return f"channel {culprit} is unreachable: {reason}{mirror}"


async def _solve_all(spec: EnvSpec, channels: list[str], platforms: list[str]) -> dict[str, list[Any]]:
    from rattler import Gateway, MatchSpec, solve
    from rattler.exceptions import GatewayError, SolverError

    gateway = Gateway()

    async def one(platform: str) -> list[Any] | str:
        """The records, or the one-line error message for that platform."""
        try:
            # lenient parsing, as conda reads specs: "pytorch 1.3.1" means ==1.3.1
            specs = [MatchSpec(s, strict=False) for s in spec.packages_for(platform)]
            return await solve(channels, specs, gateway=gateway,
                               platforms=[platform, "noarch"],
                               virtual_packages=_virtual_packages(spec, platform),
                               channel_relations="disabled")
        except SolverError as exc:
            return _solver_message(exc, platform)
        except GatewayError as exc:
            return _channel_message(exc, channels)
        except WmlError as exc:
            return str(exc)
        except Exception as exc:  # invalid channel names, match specs, ...
            return f"cannot solve for {platform}: {_first_line(str(exc))}"

    # Every platform's solve finishes before anything is raised (rattler_async: the exit pause).
    results = await asyncio.gather(*(one(p) for p in platforms))
    errors = [r for r in results if isinstance(r, str)]
    if errors:
        raise WmlError(errors[0])
    return dict(zip(platforms, results))


def solve_spec(spec: EnvSpec, platforms: list[str], channels: list[str]) -> dict[str, list[Any]]:
    return rattler_async.run(_solve_all(spec, channels, platforms))


# ---------------------------------------------------------------- lockfile models

def _locked_dependency(record: Any, platform: str) -> Any:
    from conda_lock.lockfile.v2prelim.models import HashModel, LockedDependency
    from rattler import MatchSpec

    deps: dict[str, str] = {}
    for dep in record.depends:
        ms = MatchSpec(dep)
        name = ms.name.normalized if hasattr(ms.name, "normalized") else str(ms.name)
        deps[name] = dep[len(dep.split()[0]):].strip()
    return LockedDependency(
        name=record.name.normalized,
        version=str(record.version),
        manager="conda",
        platform=platform,
        dependencies=deps,
        url=record.url,
        hash=HashModel(md5=record.md5.hex() if record.md5 else None,
                       sha256=record.sha256.hex() if record.sha256 else None),
        categories={"main"},
        build=str(record.build),
    )


def _relative_source(spec: EnvSpec, lockfile: Path) -> list[str]:
    if spec.source is None:
        return []
    try:
        return [os.path.relpath(spec.source.absolute(), lockfile.absolute().parent)]
    except ValueError:
        return [str(spec.source.absolute())]


def read_lockfile(path: Path) -> "Lockfile":
    """Parse with conda-lock's own parser; WmlError on anything it rejects."""
    from conda_lock.lockfile import parse_conda_lock_file

    try:
        return parse_conda_lock_file(Path(path))
    except FileNotFoundError:
        raise WmlError(f"lockfile {path} not found") from None
    except Exception as exc:
        raise WmlError(f"{path} is not a conda-lock lockfile: {_first_line(str(exc))}") from None


def _writable_lockfile_path(path: Path) -> Path:
    """``path`` made absolute; WmlError when its directory is missing or not writable."""
    path = Path(path).absolute()
    if not path.parent.is_dir():
        raise WmlError(f"cannot write lockfile {path}: directory {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK):
        raise WmlError(f"cannot write lockfile {path}: directory {path.parent} is not writable")
    return path


def _atomic_write_lockfile(lockfile: "Lockfile", path: Path) -> None:
    """Write next to ``path`` under the same file name (conda-lock puts the name in the help
    text), then rename into place: readers never see half a lockfile."""
    import shutil

    from conda_lock.lockfile import write_conda_lock_file

    path = _writable_lockfile_path(path)
    tmpdir = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        staged = tmpdir / path.name
        write_conda_lock_file(lockfile, staged, metadata_choices=None)
        os.chmod(staged, 0o644)
        os.replace(staged, path)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def lock(spec: EnvSpec, lockfile: Path, platforms: list[str] | None = None,
         channels: list[str] | None = None, force: bool = False) -> LockResult:
    """Solve ``spec`` for ``platforms`` (default: all of the spec's) and write ``lockfile``."""
    from conda_lock.lockfile.v2prelim.models import LockMeta, Lockfile

    platforms = list(dict.fromkeys(platforms or spec.platforms))
    for p in platforms:
        spec.check_platform(p)
    chans = _channels(spec, channels)
    hashes = content_hashes(spec, chans, platforms)
    lockfile = Path(lockfile)
    _writable_lockfile_path(lockfile)  # before solving: minutes of solve, then this error, helps no one

    existing = None
    if lockfile.exists():
        existing = read_lockfile(lockfile)
    result = LockResult(path=lockfile)
    to_solve = list(platforms)
    if existing is not None and not force:
        same_channels = [c.url for c in existing.metadata.channels] == chans
        to_solve = [p for p in platforms
                    if not (same_channels and existing.metadata.content_hash.get(p) == hashes[p])]
        result.up_to_date = [p for p in platforms if p not in to_solve]
    if not to_solve:
        for p in platforms:
            result.packages[p] = sum(1 for d in existing.package if d.platform == p and d.manager == "conda")
        return result

    solved = solve_spec(spec, to_solve, chans)
    packages = [_locked_dependency(r, p) for p, recs in solved.items() for r in recs]
    custom = {
        f"{_META_PREFIX}name": spec.name,
        f"{_META_PREFIX}pip": json.dumps(spec.pip),
        f"{_META_PREFIX}imports": json.dumps(spec.imports),
    }
    if spec.pip_index:
        custom[f"{_META_PREFIX}pip_index"] = spec.pip_index
    if spec.version:
        custom[f"{_META_PREFIX}spec_version"] = spec.version
    meta = LockMeta(content_hash={p: hashes[p] for p in to_solve}, channels=chans,
                    platforms=to_solve, sources=_relative_source(spec, lockfile),
                    custom_metadata=custom)
    new = Lockfile(package=packages, metadata=meta)
    if existing is not None and not force and [c.url for c in existing.metadata.channels] == chans:
        # keep the platforms we did not re-solve (conda-lock's own merge)
        new = new.merge(existing)
    _atomic_write_lockfile(new, lockfile)
    result.solved = to_solve
    for p in platforms:
        result.packages[p] = sum(1 for d in new.package if d.platform == p and d.manager == "conda")
    return result


# ---------------------------------------------------------------- lockfile -> records

def _rattler_records(lockfile: Path, platform: str) -> tuple[list["RepoDataRecord"], list[str]]:
    """rattler reads conda-lock files itself (and recovers noarch types and build numbers).
    Returns the conda records and the pip packages (``name @ url``) of ``platform``."""
    import rattler

    try:
        lf = rattler.LockFile.from_path(Path(lockfile).absolute())
    except Exception as exc:
        raise WmlError(f"{lockfile} is not a conda-lock lockfile: {_first_line(str(exc))}") from None
    env = lf.default_environment()
    for p in lf.platforms():  # rattler needs the lockfile's own platform objects
        if p.name == platform and env is not None:
            records = list(env.conda_repodata_records_for_platform(p) or [])
            pypi = [f"{pkg.name} @ {pkg.location}" for pkg in env.pypi_packages_for_platform(p) or []]
            return records, pypi
    return [], []


def _lockfile_metadata(lockfile: Path) -> dict[str, Any]:
    """The lockfile's metadata block.  Read with plain YAML, not conda-lock's parser: importing
    conda-lock costs about a second and rattler validates the packages anyway."""
    import yaml

    try:
        data = yaml.safe_load(Path(lockfile).read_text())
    except FileNotFoundError:
        raise WmlError(f"lockfile {lockfile} not found") from None
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise WmlError(f"{lockfile} is not a conda-lock lockfile: {_first_line(str(exc))}") from None
    meta = data.get("metadata") if isinstance(data, dict) else None
    if not isinstance(meta, dict) or data.get("version") not in (1, 2):
        raise WmlError(f"{lockfile} is not a conda-lock lockfile (no version/metadata)")
    return meta


def locked_env(lockfile: Path, platform: str) -> LockedEnv:
    """The records (and wml metadata) of one platform of a conda-lock lockfile."""
    meta = _lockfile_metadata(lockfile)
    platforms = [str(p) for p in meta.get("platforms") or []]
    if platform not in platforms:
        raise WmlError(f"lockfile {lockfile} has no {platform!r} section "
                       f"(it has {', '.join(platforms) or 'none'})")
    channels = [c["url"] if isinstance(c, dict) else str(c) for c in meta.get("channels") or []]
    records, pypi = _rattler_records(lockfile, platform)
    custom = meta.get("custom_metadata") or {}
    try:
        pip = list(json.loads(custom.get(f"{_META_PREFIX}pip", "[]"))) + pypi
        imports = list(json.loads(custom.get(f"{_META_PREFIX}imports", "[]")))
    except (TypeError, ValueError):
        raise WmlError(f"{lockfile}: malformed wml.* custom_metadata") from None
    name = custom.get(f"{_META_PREFIX}name") or Path(lockfile).stem
    return LockedEnv(name=name, platform=platform, records=records, pip=pip,
                     imports=imports, channels=channels, pip_index=custom.get(f"{_META_PREFIX}pip_index"))
