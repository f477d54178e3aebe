"""``wml env create``: install a locked env with py-rattler, atomically.

The env is built in a staging directory beside the target, with the *target* path patched into
the packages' prefix placeholders (rattler's ``alternative_target_prefix``); the spec's pip
section is then installed with the env's own python and relocated; only then is the directory
renamed into place.  Any failure leaves nothing at the target.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wmlce_tools.errors import WmlError
from wmlce_tools.env import rattler_async
from wmlce_tools.env.cachecheck import first_damaged
from wmlce_tools.env.envinfo import EnvInfo, lockfile_copy
from wmlce_tools.env.linking import (LinkChoice, LinkPolicy, choose, package_cache_dir,
                                     rattler_install_options)
from wmlce_tools.env.lock import LockedEnv
from wmlce_tools.env.staging import staged_directory


@dataclass
class PipStep:
    """One more pip install after the spec's own packages (e.g. mpi4py built against the site's
    MPI compiler wrapper: ``MPICC="cc -shared" pip install --no-binary=mpi4py mpi4py``)."""

    what: str
    requirements: list[str]
    env: dict[str, str] = field(default_factory=dict)
    options: list[str] = field(default_factory=list)


@dataclass
class CreateResult:
    prefix: Path
    platform: str
    conda_packages: int
    pip_packages: int
    link: LinkChoice | None = None


def current_platform() -> str:
    from rattler import Subdir

    return str(Subdir.current())




def _short(exc: BaseException) -> str:
    lines = [ln.replace("Caused by:", "").strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    return lines[0] if len(lines) == 1 else f"{lines[0]} ({lines[-1]})"


def install_records(records: list[Any], staging: Path, final_prefix: Path, platform: str,
                    progress: bool, label: str, link: LinkPolicy = LinkPolicy.auto,
                    installed: list[Any] | None = None, reinstall: set[str] | None = None) -> LinkChoice:
    """rattler install into ``staging``, with ``final_prefix`` written into the files.

    The package cache is validated first (``WML_CACHE_CHECK``, default full: a cached package
    whose files no longer match its paths.json, e.g. edited through a hard link in another
    env, is re-extracted); files are linked by ``link`` (see ``linking``).  When the install
    fails, the error names a damaged cached package and file if there is one."""
    from rattler import Subdir, install

    from wmlce_tools.env.progress import RichInstallReporter, make_progress

    cache = package_cache_dir()
    choice = choose(link, final_prefix, cache)
    with make_progress(progress) as bar:
        reporter = RichInstallReporter(bar, label)
        try:
            rattler_async.run(install(records, target_prefix=staging, installed_packages=installed or [],
                                reinstall_packages=reinstall, platform=Subdir(platform),
                                execute_link_scripts=False, show_progress=False,
                                reporter=reporter, alternative_target_prefix=final_prefix,
                                **rattler_install_options(choice, cache)))
        except Exception as exc:
            damaged = first_damaged(records, cache)
            if damaged is not None:
                raise WmlError(f"installing into {final_prefix} failed: the package cache's copy of "
                               f"{damaged.package} is damaged ({damaged.path}: {damaged.problem}) and could not be "
                               f"fetched again ({_short(exc)}); remove {cache / damaged.entry} or make its channel "
                               f"reachable") from None
            raise WmlError(f"installing into {final_prefix} failed: {_short(exc)}") from None
    return choice


def install_pip_section(staging: Path, final_prefix: Path, requirements: list[str],
                        index_url: str | None = None, extra: list["PipStep"] | None = None) -> int:
    """pip-install ``requirements`` (from ``index_url``, default pip's) with the staged env's
    python, then each ``extra`` step (the site's mpi4py build), then relocate them all."""
    from wmlce_tools.env.installed import owned_files, conda_records, pip_dists
    from wmlce_tools.env.pip_install import last_error_line, pip_install, require_python
    from wmlce_tools.env.relocate import RelocationReport, relocate_dist

    if not requirements and not extra:
        return 0
    python = require_python(staging)
    result = pip_install(python, requirements, index_url=index_url)
    if not result.ok:
        where = f" from {index_url}" if index_url else ""
        raise WmlError(f"pip install of the spec's pip section{where} failed: {last_error_line(result.output)}")
    for step in extra or []:
        result = pip_install(python, step.requirements, extra_env=step.env, options=step.options)
        if not result.ok:
            raise WmlError(f"{step.what} failed: {last_error_line(result.output)}")
    owned = owned_files(conda_records(staging))
    dists = pip_dists(staging, owned)
    report = RelocationReport()
    for dist in dists:
        relocate_dist(staging, dist.dist_info, str(staging), str(final_prefix), report)
    return len(dists)


def create_env(locked: LockedEnv, target: Path, lockfile: Path | None = None,
               force: bool = False, progress: bool = False, source: str = "",
               link: LinkPolicy = LinkPolicy.auto, extra_pip: list[PipStep] | None = None) -> CreateResult:
    target = Path(target).absolute()
    if (locked.pip or extra_pip) and locked.platform != current_platform():
        raise WmlError(f"cannot run the pip section of {locked.name!r} for {locked.platform} "
                       f"on this {current_platform()} machine")
    if not locked.records:
        raise WmlError(f"the lock for {locked.name!r} has no packages for {locked.platform}")
    with staged_directory(target, force=force) as staging:
        choice = install_records(locked.records, staging, target, locked.platform, progress,
                                 f"creating {target.name}", link=link)
        npip = install_pip_section(staging, target, locked.pip, locked.pip_index, extra_pip)
        EnvInfo(name=locked.name, platform=locked.platform, source=source,
                imports=locked.imports, pip=locked.pip).write(staging)
        if lockfile is not None:
            shutil.copyfile(lockfile, lockfile_copy(staging))
    return CreateResult(target, locked.platform, len(locked.records), npip, choice)
