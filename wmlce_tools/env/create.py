"""``wml env create``: install a locked env with py-rattler, atomically.

The env is built in a staging directory beside the target, with the *target* path patched into
the packages' prefix placeholders (rattler's ``alternative_target_prefix``); the spec's pip
section is then installed with the env's own python and relocated; only then is the directory
renamed into place.  Any failure leaves nothing at the target.
"""
from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmlce_tools.errors import WmlError
from wmlce_tools.env.envinfo import EnvInfo, lockfile_copy
from wmlce_tools.env.lock import LockedEnv
from wmlce_tools.env.staging import staged_directory


@dataclass
class CreateResult:
    prefix: Path
    platform: str
    conda_packages: int
    pip_packages: int


def current_platform() -> str:
    from rattler import Platform

    return str(Platform.current())


def package_cache_dir() -> Path | None:
    value = os.environ.get("WML_PKGS_DIR")
    return Path(value).expanduser().absolute() if value else None


def _short(exc: BaseException) -> str:
    lines = [ln.replace("Caused by:", "").strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    return lines[0] if len(lines) == 1 else f"{lines[0]} ({lines[-1]})"


def install_records(records: list[Any], staging: Path, final_prefix: Path, platform: str,
                    progress: bool, label: str) -> None:
    """rattler install into ``staging``, with ``final_prefix`` written into the files."""
    from rattler import Platform, install

    from wmlce_tools.env.progress import RichInstallReporter, make_progress

    with make_progress(progress) as bar:
        reporter = RichInstallReporter(bar, label)
        try:
            asyncio.run(install(records, target_prefix=staging, cache_dir=package_cache_dir(),
                                installed_packages=[], platform=Platform(platform),
                                execute_link_scripts=False, show_progress=False,
                                reporter=reporter, alternative_target_prefix=final_prefix))
        except Exception as exc:
            raise WmlError(f"installing into {final_prefix} failed: {_short(exc)}") from None


def install_pip_section(staging: Path, final_prefix: Path, requirements: list[str]) -> int:
    """pip-install ``requirements`` with the staged env's python, then relocate them."""
    from wmlce_tools.env.installed import owned_files, conda_records, pip_dists
    from wmlce_tools.env.pip_install import last_error_line, pip_install, require_python
    from wmlce_tools.env.relocate import RelocationReport, relocate_dist

    if not requirements:
        return 0
    python = require_python(staging)
    result = pip_install(python, requirements)
    if not result.ok:
        raise WmlError(f"pip install of the spec's pip section failed: {last_error_line(result.output)}")
    owned = owned_files(conda_records(staging))
    dists = pip_dists(staging, owned)
    report = RelocationReport()
    for dist in dists:
        relocate_dist(staging, dist.dist_info, str(staging), str(final_prefix), report)
    return len(dists)


def create_env(locked: LockedEnv, target: Path, lockfile: Path | None = None,
               force: bool = False, progress: bool = False, source: str = "") -> CreateResult:
    target = Path(target).absolute()
    if locked.pip and locked.platform != current_platform():
        raise WmlError(f"cannot run the pip section of {locked.name!r} for {locked.platform} "
                       f"on this {current_platform()} machine")
    if not locked.records:
        raise WmlError(f"the lock for {locked.name!r} has no packages for {locked.platform}")
    with staged_directory(target, force=force) as staging:
        install_records(locked.records, staging, target, locked.platform, progress,
                        f"creating {target.name}")
        npip = install_pip_section(staging, target, locked.pip)
        EnvInfo(name=locked.name, platform=locked.platform, source=source,
                imports=locked.imports, pip=locked.pip).write(staging)
        if lockfile is not None:
            shutil.copyfile(lockfile, lockfile_copy(staging))
    return CreateResult(target, locked.platform, len(locked.records), npip)
