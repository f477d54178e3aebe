"""``wml env export``: what is installed in an env, as a conda-lock lockfile or an explicit list.

The lockfile is built from the env's own conda records (conda-lock models), so it describes
the env as it is, not the spec it came from; pip-installed distributions are listed as
requirements in ``custom_metadata['wml.pip']`` (``wml env create`` reinstalls them).  The
explicit list (``@EXPLICIT``, one URL#md5 a line) is rendered by conda-lock itself.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from wmlce_tools.errors import WmlError
from wmlce_tools.env.create import current_platform
from wmlce_tools.env.envinfo import EnvInfo
from wmlce_tools.env.installed import conda_records, env_platform, owned_files, pip_dists
from wmlce_tools.env.lock import _META_PREFIX, _atomic_write_lockfile, _locked_dependency

ExportFormat = Literal["lockfile", "explicit"]


def env_lockfile(prefix: Path) -> Any:
    from conda_lock.lockfile.v2prelim.models import LockMeta, Lockfile

    records = conda_records(prefix)
    if not records:
        raise WmlError(f"{prefix} has no conda packages to export")
    platform = env_platform(records) or current_platform()
    packages = [_locked_dependency(r, platform) for r in records]
    channels = sorted({str(r.channel).rstrip("/") for r in records if r.channel})
    if not channels:
        channels = sorted({r.url.rsplit("/", 2)[0] for r in records})
    digest = hashlib.sha256("\n".join(sorted(r.url for r in records)).encode()).hexdigest()
    info = EnvInfo.read(prefix)
    pip = [d.requirement for d in pip_dists(prefix, owned_files(records))]
    custom = {f"{_META_PREFIX}name": info.name if info else prefix.name,
              f"{_META_PREFIX}pip": json.dumps(pip),
              f"{_META_PREFIX}imports": json.dumps(info.imports if info else []),
              f"{_META_PREFIX}exported_from": str(prefix)}
    meta = LockMeta(content_hash={platform: digest}, channels=channels, platforms=[platform],
                    sources=[], custom_metadata=custom)
    return Lockfile(package=packages, metadata=meta)


def explicit_list(prefix: Path) -> str:
    from conda_lock.conda_lock import render_lockfile_for_platform

    lockfile = env_lockfile(prefix)
    lines = render_lockfile_for_platform(lockfile=lockfile, include_dev_dependencies=False,
                                         extras=None, kind="explicit",
                                         platform=lockfile.metadata.platforms[0],
                                         suppress_warning_for_pip_and_explicit=True)
    return "\n".join(lines) + "\n"


def export_env(prefix: Path, fmt: ExportFormat, output: Path | None) -> str | None:
    """Write the export to ``output`` (atomically) or return it as text when output is None."""
    if fmt == "lockfile":
        lockfile = env_lockfile(prefix)
        if output is None:
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                p = Path(tmp) / "conda-lock.yml"
                _atomic_write_lockfile(lockfile, p)
                return p.read_text()
        _atomic_write_lockfile(lockfile, output)
        return None
    if fmt == "explicit":
        text = explicit_list(prefix)
        if output is None:
            return text
        output = output.absolute()
        if not output.parent.is_dir() or not os.access(output.parent, os.W_OK):
            raise WmlError(f"cannot write {output}: {output.parent} is not a writable directory")
        tmp = output.with_name(f".{output.name}.wml-tmp")
        tmp.write_text(text)
        os.replace(tmp, output)
        return None
    raise WmlError(f"unknown export format {fmt!r} (lockfile or explicit)")
