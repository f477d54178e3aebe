"""``wml env clone SRC DST``: a correct copy of an env, pip-installed packages included.

``conda create --clone`` copied a WML CE env's files, which broke what pip had put there
(Horovod): its scripts and compiled pieces still pointed at the read-only original.  Here:

1. every conda record in SRC's ``conda-meta`` is installed again into DST by rattler, so the
   packages' prefix placeholders are rewritten for DST;
2. files no record and no pip distribution owns (user additions, config) are copied with SRC's
   prefix rewritten to DST's in text files (binary files holding the old prefix are reported);
3. every pip-installed distribution (``*.dist-info`` no conda record owns) is reinstalled with
   DST's own python from where pip got it (PEP 610 ``direct_url.json``) or by name==version;
   one that cannot be reinstalled is copied as files (prefix rewritten) and reported.

All of it happens in a staging directory; DST appears only when everything is done.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from wmlce_tools.errors import WmlError
from wmlce_tools.env.create import current_platform, install_records
from wmlce_tools.env.envinfo import EnvInfo, lockfile_copy
from wmlce_tools.env.linking import LinkPolicy
from wmlce_tools.env.installed import (PipDist, conda_records, env_platform, owned_files,
                                       pip_dists)
from wmlce_tools.env.relocate import RelocationReport, relocate_dist, relocate_symlink, rewrite_file
from wmlce_tools.env.staging import staged_directory


@dataclass
class NotReproduced:
    requirement: str
    reason: str


@dataclass
class CloneResult:
    src: Path
    dst: Path
    conda_packages: int
    copied_files: int
    pip_reinstalled: list[str] = field(default_factory=list)
    pip_not_reproduced: list[NotReproduced] = field(default_factory=list)
    binary_with_old_prefix: list[Path] = field(default_factory=list)


def _skip_dir(rel: str) -> bool:
    return rel == "conda-meta" or rel.startswith("conda-meta/") or rel.endswith("__pycache__")


def _copy_unowned(src: Path, staging: Path, final: Path, skip: set[str],
                  report: RelocationReport) -> int:
    """Copy files of SRC that nothing owns, rewriting SRC's prefix to DST's."""
    copied = 0
    for root, dirs, files in os.walk(src):
        rel_root = os.path.relpath(root, src)
        rel_root = "" if rel_root == "." else rel_root
        dirs[:] = [d for d in dirs if not _skip_dir(os.path.join(rel_root, d))]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            rel = os.path.join(rel_root, name) if rel_root else name
            if rel in skip or name.endswith((".pyc", ".pyo")):
                continue
            s = src / rel
            d = staging / rel
            if d.exists() or d.is_symlink():
                continue  # a package put it there already
            d.parent.mkdir(parents=True, exist_ok=True)
            if s.is_symlink():
                os.symlink(os.readlink(s), d)
                relocate_symlink(d, str(src), str(final))
            else:
                shutil.copy2(s, d)
                rewrite_file(d, str(src), str(final), report)
            copied += 1
    return copied


def _copy_dist_files(dist: PipDist, src: Path, staging: Path, final: Path,
                     report: RelocationReport) -> None:
    for f in dist.files:
        try:
            rel = f.relative_to(src.resolve())
        except ValueError:
            continue
        s = src / rel
        if not (s.exists() or s.is_symlink()):
            continue
        d = staging / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        if s.is_symlink():
            os.symlink(os.readlink(s), d)
        else:
            shutil.copy2(s, d)
            rewrite_file(d, str(src), str(final), report)


def _reinstall_pip(dists: list[PipDist], src: Path, staging: Path, final: Path,
                   result: CloneResult, report: RelocationReport) -> None:
    from wmlce_tools.env.pip_install import last_error_line, pip_install, require_python

    if not dists:
        return
    python = require_python(staging)
    for dist in sorted(dists, key=lambda d: d.name.lower()):
        if dist.editable:
            reason = "editable install (its source tree is not part of the env)"
            ok = False
        elif not dist.source_available():
            reason = f"its source {dist.direct_url} no longer exists"
            ok = False
        else:
            res = pip_install(python, [dist.requirement], no_deps=True)
            ok, reason = res.ok, last_error_line(res.output)
        if ok:
            result.pip_reinstalled.append(f"{dist.name}=={dist.version}")
        else:
            _copy_dist_files(dist, src, staging, final, report)
            result.pip_not_reproduced.append(
                NotReproduced(f"{dist.name}=={dist.version}", f"copied, not reinstalled: {reason}"))
    owned = owned_files(conda_records(staging))
    for dist in pip_dists(staging, owned):
        relocate_dist(staging, dist.dist_info, str(staging), str(final), report)


def clone_env(src: Path, dst: Path, force: bool = False, progress: bool = False,
              link: LinkPolicy = LinkPolicy.auto) -> CloneResult:
    src = Path(src).absolute()
    dst = Path(dst).absolute()
    if dst == src:
        raise WmlError("clone source and destination are the same env")
    if dst.exists() and not force:
        raise WmlError(f"{dst} already exists (use --force to replace it)")
    try:
        dst.relative_to(src)
        raise WmlError(f"cannot clone {src} into a directory inside it ({dst})")
    except ValueError:
        pass
    records = conda_records(src)
    platform = env_platform(records) or current_platform()
    owned = owned_files(records)
    dists = pip_dists(src, owned)
    if dists and platform != current_platform():
        raise WmlError(f"{src} is a {platform} env with pip packages; they can only be "
                       f"reinstalled on a {platform} machine")
    skip = set(owned)
    for dist in dists:
        for f in dist.files:
            try:
                skip.add(f.relative_to(src.resolve()).as_posix())
            except ValueError:
                pass
    result = CloneResult(src=src, dst=dst, conda_packages=len(records), copied_files=0)
    report = RelocationReport()
    with staged_directory(dst, force=force) as staging:
        if records:
            install_records(records, staging, dst, platform, progress, f"cloning into {dst.name}", link=link)
        result.copied_files = _copy_unowned(src, staging, dst, skip, report)
        _reinstall_pip(dists, src, staging, dst, result, report)
        info = EnvInfo.read(src) or EnvInfo(name=src.name, platform=platform)
        info = info.model_copy(update={
            "name": dst.name, "cloned_from": str(src),
            "pip_not_reproduced": [n.requirement for n in result.pip_not_reproduced]})
        info.write(staging)
        if lockfile_copy(src).is_file():
            shutil.copyfile(lockfile_copy(src), lockfile_copy(staging))
    result.binary_with_old_prefix = [dst / p.relative_to(staging) for p in report.binary_with_prefix]
    return result
