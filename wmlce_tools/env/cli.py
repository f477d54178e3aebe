"""Typer apps for ``wml env ...`` (``env_app``) and ``wml module ...`` (``module_app``).

Heavy libraries (rattler, conda-lock, conda-pack) are imported inside the commands, so
importing this module (and ``wml --help``) stays fast.  Every user error is a WmlError printed
as one line (``wml: error: ...``); nothing is left half-written.

Standalone: ``python -m wmlce_tools.env.cli env lock SPEC`` / ``... module write ENV``.
"""

import functools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, List, Optional, TypeVar

import typer

from wmlce_tools.errors import WmlError

F = TypeVar("F", bound=Callable[..., Any])

# rich_markup_mode=None, as for wml itself: a docstring's line breaks are not the table's
env_app = typer.Typer(help="Curated, locked environments (conda envs, and PyPI venvs locked in pylock.toml): "
                           "specs, lock, create, clone, verify, list, export, pack.", no_args_is_help=True,
                      rich_markup_mode=None)
module_app = typer.Typer(help="Modulefiles (Lmod / Environment Modules) for wml envs.",
                         no_args_is_help=True, rich_markup_mode=None)


#: top-level modules of the optional 'env' extra (pyproject.toml)
ENV_EXTRA_MODULES = {"rattler", "conda_lock", "conda_pack", "pydantic", "uv", "tomlkit", "packaging"}


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"wml: error: {message}", err=True)
    raise typer.Exit(code)


def _one_line_errors(fn: F) -> F:
    """WmlError -> ``wml: error: ...`` and its exit status, whoever calls the app."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except WmlError as exc:
            _fail(str(exc), exc.exit_code)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] in ENV_EXTRA_MODULES:
                _fail(f"wml env needs the 'env' extra (py-rattler, conda-lock, conda-pack, uv): "
                      f"pip install '.[env]' in the wml checkout (missing: {exc.name})")
            raise
        except OSError as exc:  # disk full, permission denied, ... while doing the work
            where = f"{exc.filename}: " if exc.filename else ""
            _fail(f"{where}{exc.strerror or exc}")
        except KeyboardInterrupt:
            _fail("interrupted", 130)
    return wrapper  # type: ignore[return-value]


def _info(message: str) -> None:
    typer.echo(message, err=True)


def _linked(choice) -> str:
    if choice is None:
        return "linked"
    how = {"hardlink": "hard-linked from the package cache", "reflink": "reflinked (or copied) from the package cache",
           "copy": "copied from the package cache"}[choice.policy.value]
    return f"{how}: {choice.reason}"


def _is_lockfile(path: Path) -> bool:
    """A conda-lock lockfile, by its content."""
    from wmlce_tools.env.lockfiles import lock_kind

    return lock_kind(path) == "conda"


def _dst_prefix(dst: str) -> Path:
    from wmlce_tools.env.locations import looks_like_path, target_prefix

    if looks_like_path(dst) or Path(dst).is_absolute():
        return target_prefix(None, dst)
    return target_prefix(dst, None)


# ------------------------------------------------------------------------------------- lock

@env_app.command("lock")
@_one_line_errors
def lock_cmd(
    spec: str = typer.Argument(..., help="Bundled spec name, wml spec file, conda environment.yml, or requirements.txt (PyPI)."),
    platform: List[str] = typer.Option([], "--platform", "-p", help="Platform(s) to lock (default: the spec's; linux-64, linux-aarch64, linux-ppc64le, ...)."),
    channel: List[str] = typer.Option([], "--channel", "-c", help="Channel URL/path replacing the spec's channels (repeatable; file:// and mirrors work)."),
    index: Optional[str] = typer.Option(None, "--index", help="PyPI specs: the package index (default: the spec's, else PyPI)."),
    lockfile: Optional[Path] = typer.Option(None, "--lockfile", "-f", help="Lockfile to write (default: conda-lock.yml; pylock.toml for a PyPI spec)."),
    force: bool = typer.Option(False, "--force", help="Re-solve even if the content hashes match."),
) -> None:
    """Solve SPEC with py-rattler and write a conda-lock lockfile; a PyPI spec is resolved by uv
    for every platform at once into a PEP 751 pylock.toml."""
    from wmlce_tools.env.spec import find_spec, load_spec

    env_spec = load_spec(find_spec(spec))
    if hasattr(env_spec, "requirements"):
        from wmlce_tools.env.pylock import DEFAULT_PYLOCK, lock_pypi

        if channel:
            raise WmlError(f"{env_spec.name!r} is a PyPI spec: give its index with --index, not --channel")
        presult = lock_pypi(env_spec, lockfile or Path(DEFAULT_PYLOCK), platforms=platform or None, index=index)
        for p in presult.platforms:
            _info(f"{p}: locked {presult.packages[p]} packages")
        typer.echo(str(presult.path))
        return
    from wmlce_tools.env.lock import lock

    if index:
        raise WmlError(f"{env_spec.name!r} is a conda spec: give its channels with --channel, not --index")
    result = lock(env_spec, lockfile or Path("conda-lock.yml"), platforms=platform or None,
                  channels=channel or None, force=force)
    for p in result.up_to_date:
        _info(f"{p}: up to date ({result.packages[p]} packages), not re-solved")
    for p in result.solved:
        _info(f"{p}: locked {result.packages[p]} packages")
    typer.echo(str(result.path))


# ------------------------------------------------------------------------------------- create

@env_app.command("create")
@_one_line_errors
def create_cmd(
    source: str = typer.Argument(..., help="Lockfile (conda-lock or PEP 751, told by its content), bundled spec name, spec file, environment.yml or requirements.txt."),
    prefix: Optional[Path] = typer.Option(None, "--prefix", help="Create the env at this path."),
    name: Optional[str] = typer.Option(None, "--name", "-n", help="Create the env under this name (in wml's envs dir)."),
    platform: Optional[str] = typer.Option(None, "--platform", "-p", help="Platform to install (default: this machine's)."),
    channel: List[str] = typer.Option([], "--channel", "-c", help="Channels replacing the spec's (specs only)."),
    site: Optional[str] = typer.Option(None, "--site", help="Put this site's MPI into the env, as its profile says (mpi_in_env); a GPU stack the site's GPUs do not run (CUDA on AMD's, ROCm on NVIDIA's) is refused."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be done (channels, packages, the site's MPI route); change nothing."),
    python: Optional[str] = typer.Option(None, "--python", help="PyPI envs: the base python (a site module's), default the spec's version."),
    system_site_packages: Optional[bool] = typer.Option(None, "--system-site-packages/--no-system-site-packages",
                                                        help="PyPI envs: see the base python's packages (default: the spec's)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing env at the target."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress display."),
    link: Optional[str] = typer.Option(None, "--link", metavar="auto|hardlink|reflink|copy",
                                       help="How package files reach the env (default: $WML_ENV_LINK, else auto: "
                                       "hard links on a local filesystem, copies on a shared one). See env_specs/README.md."),
) -> None:
    """Install an env from a lock (or solve a spec first), atomically: a conda env, or a
    virtualenv for a PyPI spec / pylock.toml."""
    from wmlce_tools.env.create import create_env, current_platform
    from wmlce_tools.env.linking import link_policy
    from wmlce_tools.env.lock import lock, locked_env
    from wmlce_tools.env.locations import target_prefix
    from wmlce_tools.env.pylock import is_pylock
    from wmlce_tools.env.spec import find_spec, load_spec

    target = target_prefix(name, prefix)
    policy = link_policy(link)
    src_path = Path(source)
    origin = str(src_path.absolute() if src_path.exists() else source)
    env_spec = None if (_is_lockfile(src_path) or is_pylock(src_path)) else load_spec(find_spec(source))
    if site is not None:                 # a CUDA build on AMD GPUs (or ROCm on NVIDIA's) is refused first
        from wmlce_tools.env.site_gpu import check_fits
        from wmlce_tools.site.registry import get_site

        check_fits(get_site(site), env_spec, None if env_spec is not None else src_path)
    plan = _site_plan(site, env_spec, src_path)
    if is_pylock(src_path) or hasattr(env_spec, "requirements"):
        _create_venv(src_path, env_spec, target, platform, channel, python, system_site_packages, force,
                     policy, origin, plan, dry_run)
        return
    if python is not None or system_site_packages is not None:
        raise WmlError("--python and --system-site-packages apply to PyPI envs (a venv), not conda envs")
    plat = platform or current_platform()
    if dry_run:
        _conda_dry_run(env_spec, src_path, target, plat, channel, plan)
        return
    if plan is not None:
        from wmlce_tools.env.site_mpi import check_build_tools

        check_build_tools(plan)
    with tempfile.TemporaryDirectory(prefix="wml-lock-") as tmp:
        if env_spec is None:
            if channel:
                raise WmlError("--channel applies to specs; a lockfile already names its packages' URLs")
            lockfile = src_path
        else:
            env_spec.check_platform(plat)
            if target.exists() and not force:
                raise WmlError(f"{target} already exists (use --force to replace it)")
            lockfile = Path(tmp) / "conda-lock.yml"
            lock(_with_site(env_spec, plan), lockfile, platforms=[plat],
                 channels=(_site_channels(plan) + channel) if channel else None)
        locked = locked_env(lockfile, plat)
        result = create_env(locked, target, lockfile=lockfile, force=force, link=policy,
                            progress=progress and sys.stderr.isatty(), source=origin,
                            extra_pip=plan.pip_steps if plan else None)
    _info(f"created {result.prefix} ({result.platform}: {result.conda_packages} conda packages"
          f"{f', {result.pip_packages} pip packages' if result.pip_packages else ''}; "
          f"files {_linked(result.link)})")
    typer.echo(str(result.prefix))


def _site_plan(site: Optional[str], env_spec: Any, src_path: Path) -> Any:
    """The site's MPI route for this spec (None without --site)."""
    if site is None:
        return None
    from wmlce_tools.env.site_mpi import plan_for
    from wmlce_tools.site.registry import get_site

    from wmlce_tools.env.pylock import is_pylock

    return plan_for(get_site(site), env_spec, pypi=is_pylock(src_path))


def _site_channels(plan: Any) -> list[str]:
    return list(plan.channels) if plan is not None else []


def _with_site(env_spec: Any, plan: Any) -> Any:
    if plan is None:
        return env_spec
    from wmlce_tools.env.site_mpi import apply_to_spec

    return apply_to_spec(plan, env_spec)


def _conda_dry_run(env_spec: Any, src_path: Path, target: Path, plat: str, channel: List[str], plan: Any) -> None:
    lines = [f"would create conda env {target} ({plat})"]
    if env_spec is None:
        lines.append(f"  from lockfile {src_path}")
    else:
        env_spec.check_platform(plat)
        spec = _with_site(env_spec, plan)
        chans = (_site_channels(plan) + channel) if channel else spec.channels
        lines.append(f"  spec {env_spec.name} ({env_spec.source})")
        lines.append(f"  channels: {', '.join(chans)}")
        lines.append(f"  packages: {', '.join(spec.packages_for(plat))}")
        if spec.pip:
            lines.append(f"  pip: {' '.join(spec.pip)}" + (f" --index-url {spec.pip_index}" if spec.pip_index else ""))
    if plan is not None:
        lines += plan.lines()
    typer.echo("\n".join(lines))


def _create_venv(src_path: Path, env_spec: Any, target: Path, platform: Optional[str], channel: List[str],
                 python: Optional[str], ssp: Optional[bool], force: bool, policy: Any, origin: str,
                 plan: Any, dry_run: bool) -> None:
    from wmlce_tools.env.pylock import DEFAULT_PYLOCK, check_lock_platform, lock_pypi, read_pylock, this_platform
    from wmlce_tools.env.venv import create_venv

    if channel:
        raise WmlError("--channel applies to conda specs; a PyPI spec names its index")
    plat = platform or this_platform() or "this machine"
    if dry_run:
        lines = [f"would create venv {target} ({plat})"]
        if env_spec is not None:
            lines.append(f"  spec {env_spec.name} ({env_spec.source}): lock with uv for {plat}, then uv pip sync")
            lines.append(f"  requirements: {', '.join(env_spec.requirements)}")
            base = python or f"python {env_spec.python}"
            use_ssp = env_spec.system_site_packages if ssp is None else ssp
        else:
            lock = read_pylock(src_path)
            check_lock_platform(lock, platform)
            lines.append(f"  from {src_path}: uv pip sync ({len(lock.packages)} packages)")
            base = python or f"python {lock.python}"
            use_ssp = lock.system_site_packages if ssp is None else ssp
        lines.append(f"  base: {base}{' with its system site packages' if use_ssp else ''}")
        if plan is not None:
            lines += plan.lines()
        typer.echo("\n".join(lines))
        return
    if plan is not None:
        from wmlce_tools.env.site_mpi import check_build_tools

        check_build_tools(plan)
    with tempfile.TemporaryDirectory(prefix="wml-lock-") as tmp:
        if env_spec is not None:
            if target.exists() and not force:
                raise WmlError(f"{target} already exists (use --force to replace it)")
            here = this_platform()
            if here is None:
                raise WmlError("a PyPI env is created on a Linux x86_64, aarch64 or ppc64le machine")
            env_spec.check_platform(platform or here)
            lockfile = Path(tmp) / DEFAULT_PYLOCK
            lock_pypi(env_spec, lockfile, platforms=[platform or here])
            if ssp is None:
                ssp = env_spec.system_site_packages
        else:
            lockfile = src_path
        result = create_venv(lockfile, target, python=python, system_site_packages=ssp, force=force,
                             source=origin, link=policy, platform=platform,
                             extra_pip=plan.pip_steps if plan else None)
    for item in result.repaired_cache:
        _info(f"uv's cache copy of {item} was damaged: fetched again")
    _info(f"created venv {result.prefix} ({result.platform}: {result.packages} packages; files {_linked(result.link)})")
    typer.echo(str(result.prefix))


# ------------------------------------------------------------------------------------- clone

@env_app.command("clone")
@_one_line_errors
def clone_cmd(
    src: str = typer.Argument(..., help="Source env: name or path (e.g. a read-only site env)."),
    dst: str = typer.Argument(..., help="New env: name (in wml's envs dir) or path."),
    force: bool = typer.Option(False, "--force", help="Replace DST if it exists."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    link: Optional[str] = typer.Option(None, "--link", metavar="auto|hardlink|reflink|copy",
                                       help="How package files reach the env (default: $WML_ENV_LINK, else auto: "
                                       "hard links on a local filesystem, copies on a shared one). See env_specs/README.md."),
) -> None:
    """Clone SRC into DST: conda packages reinstalled, pip packages rebuilt, prefix rewritten
    (a virtualenv: its packages reinstalled into a new relocatable venv)."""
    from wmlce_tools.env.clone import clone_env
    from wmlce_tools.env.linking import link_policy
    from wmlce_tools.env.locations import resolve_env

    from wmlce_tools.env.locations import resolve_any_env

    policy = link_policy(link)
    src_prefix, venv = resolve_any_env(src)
    dst_prefix = _dst_prefix(dst)
    if venv:
        from wmlce_tools.env.venv import clone_venv

        vres = clone_venv(src_prefix, dst_prefix, force=force, link=policy)
        _info(f"cloned venv {src_prefix} -> {vres.prefix}: {vres.packages} packages reinstalled; files {_linked(vres.link)}")
        typer.echo(str(vres.prefix))
        return
    result = clone_env(src_prefix, dst_prefix, force=force, progress=progress and sys.stderr.isatty(), link=policy)
    _info(f"cloned {result.src} -> {result.dst}: {result.conda_packages} conda packages reinstalled, "
          f"{result.copied_files} other files copied, {len(result.pip_reinstalled)} pip packages reinstalled")
    for item in result.pip_not_reproduced:
        _info(f"warning: pip package {item.requirement} not reproduced: {item.reason}")
    for path in result.binary_with_old_prefix:
        _info(f"warning: binary file {path} still holds the old prefix {result.src}")
    typer.echo(str(result.dst))


# ------------------------------------------------------------------------------------- verify

@env_app.command("verify")
@_one_line_errors
def verify_cmd(
    env: str = typer.Argument(..., help="Env name or path (a conda env or a virtualenv)."),
    imports: List[str] = typer.Option([], "--import", help="Module to import (default: the spec's imports)."),
    site: Optional[str] = typer.Option(None, "--site", help="Also check that mpi4py loads this site's MPI library (its profile's mpi_in_env)."),
) -> None:
    """Check every package file's sha256 and that the spec's imports work (a virtualenv: the
    files pip's RECORD lists, its scripts' python, and --import), and name the MPI library
    mpi4py loads (with --site: that it is the site's)."""
    from wmlce_tools.env.installed import env_python
    from wmlce_tools.env.locations import resolve_any_env
    from wmlce_tools.env.site_mpi import check_site_library, mpi_library
    from wmlce_tools.env.verify import verify_env, verify_venv

    prefix, venv = resolve_any_env(env)
    report = verify_venv(prefix, imports or None) if venv else verify_env(prefix, imports or None)
    for fp in report.file_problems:
        shared = f"; {fp.shared}" if fp.shared else ""
        typer.echo(f"{fp.package}: {fp.path}: {fp.problem}{shared}")
    if any(fp.shared for fp in report.file_problems):
        typer.echo("a hard-linked file edited in place shows the edit in every env sharing it; wml env create "
                   "re-extracts a damaged package cache entry before using it, and --link copy gives an env "
                   "files of its own")
    for pp in report.pip_problems:
        typer.echo(f"{pp.dist} (pip): {pp.path}: {pp.problem}")
    for ip in report.import_problems:
        typer.echo(f"import {ip.module}: {ip.error}")
    if report.note:
        _info(report.note)
    python = env_python(prefix)
    mpi_problem = None
    found = mpi_library(python) if python is not None else None
    if found is not None:
        typer.echo(f"MPI library: {found.main} ({found.version}; mpi4py {found.mpi4py})")
    if site is not None:
        from wmlce_tools.site.registry import get_site

        mpi_problem = check_site_library(found, get_site(site))
        if mpi_problem:
            typer.echo(f"MPI: {mpi_problem}")
    if not report.ok or mpi_problem:
        repair = (f"; to repair: wml env repair {env} (puts the packages' own files back), or re-create the env"
                  if report.file_problems else "")
        if report.file_problems and venv:
            from wmlce_tools.env.venv import repair_command

            repair = f"; to repair: {repair_command(prefix, sorted({fp.package for fp in report.file_problems}))}"
        mpi_text = f", not site {site}'s MPI" if mpi_problem else ""
        _fail(f"{prefix}: {len(report.file_problems)} file problem(s), "
              f"{len(report.pip_problems)} pip script problem(s), "
              f"{len(report.import_problems)} failed import(s){mpi_text}{repair}", 1)
    typer.echo(f"{prefix}: OK ({report.packages} packages, {report.files_checked} files, "
               f"{len(report.imports_checked)} imports{f', the MPI library is {site}' + chr(39) + 's' if site else ''})")


# ------------------------------------------------------------------------------------- repair

@env_app.command("repair")
@_one_line_errors
def repair_cmd(
    env: str = typer.Argument(..., help="Env name or path (a conda env; a virtualenv: what repairs it)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress display."),
    link: Optional[str] = typer.Option(None, "--link", metavar="auto|hardlink|reflink|copy",
                                       help="How the restored files reach the env (default: $WML_ENV_LINK, else auto)."),
) -> None:
    """Reinstall the packages whose files are missing or changed (what verify reports), from the
    checked package cache (a conda env; for a virtualenv it says what repairs it)."""
    from wmlce_tools.env.linking import link_policy
    from wmlce_tools.env.locations import resolve_any_env
    from wmlce_tools.env.repair import repair_env

    policy = link_policy(link)
    prefix, venv = resolve_any_env(env)
    if venv:
        _repair_venv_hint(prefix)
        return
    result = repair_env(prefix, link=policy, progress=progress and sys.stderr.isatty())
    if not result.packages:
        typer.echo(f"{prefix}: nothing to repair ({result.files_checked} files of {result.total_packages} packages intact)")
        return
    for fp in result.fixed:
        _info(f"restored {fp.package}: {fp.path} ({fp.problem})")
    typer.echo(f"{prefix}: repaired {len(result.fixed)} file(s) in {len(result.packages)} package(s) "
               f"({', '.join(result.packages)}); files {_linked(result.link)}")


def _repair_venv_hint(prefix: Path) -> None:
    """A virtualenv has no conda packages to reinstall: nothing to do when its files are intact,
    else one line naming the damaged distributions and the command that puts them back."""
    from wmlce_tools.env.venv import repair_command
    from wmlce_tools.env.verify import verify_venv

    report = verify_venv(prefix, imports=[])
    if not report.file_problems:
        typer.echo(f"{prefix}: nothing to repair ({report.files_checked} files of {report.packages} packages intact)")
        return
    dists = sorted({fp.package for fp in report.file_problems})
    raise WmlError(f"{prefix} is a virtualenv: wml env repair reinstalls conda packages, and a venv has none; "
                   f"{len(report.file_problems)} file(s) of {', '.join(dists)} are missing or changed; to repair: "
                   f"{repair_command(prefix, dists)}")


# ------------------------------------------------------------------------------------- list

def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _spec_rows() -> list[dict[str, Any]]:
    from wmlce_tools.env.spec import bundled_spec_paths, load_spec

    rows: list[dict[str, Any]] = []
    for path in bundled_spec_paths():
        try:
            s = load_spec(path)
        except WmlError as exc:
            rows.append({"name": path.stem, "error": str(exc), "file": str(path)})
            continue
        rows.append({"name": s.name, "kind": "pypi" if hasattr(s, "requirements") else "conda",
                     "version": s.version, "platforms": s.platforms, "purpose": s.description,
                     "source": s.origin, "checked": s.checked, "legacy": s.legacy, "file": str(path)})
    rows.sort(key=lambda r: (bool(r.get("legacy")), r["name"]))    # today's stacks first
    return rows


@env_app.command("specs")
@_one_line_errors
def specs_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """The curated specs: today's stacks first, then the legacy WML CE 1.6.2 ones; each with its
    platforms, purpose, source and the date that was checked."""
    rows = _spec_rows()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title="curated env specs (wml env lock NAME / wml env create NAME)")
    for col in ("name", "kind", "platforms", "purpose", "source (checked)"):
        t.add_column(col, overflow="fold")
    for r in rows:
        if "error" in r:
            t.add_row(r["name"], "", "", f"[red]{r['error']}[/red]", "")
            continue
        purpose = ("LEGACY: " if r["legacy"] else "") + r["purpose"]
        t.add_row(r["name"], r["kind"], ", ".join(r["platforms"]), purpose,
                  f"{r['source']} ({r['checked'] or 'date not given'})")
    Console().print(t)


@env_app.command("list")
@_one_line_errors
def list_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Bundled specs and existing envs (with platform and size)."""
    from wmlce_tools.env.envinfo import EnvInfo
    from wmlce_tools.env.installed import env_size
    from wmlce_tools.env.locations import list_envs

    specs = _spec_rows()
    envs = []
    for prefix in list_envs():
        info = EnvInfo.read(prefix)
        platform = info.platform if info else _platform_of(prefix)
        envs.append({"name": prefix.name, "prefix": str(prefix), "platform": platform,
                     "size": env_size(prefix)})
    if as_json:
        typer.echo(json.dumps({"specs": specs, "envs": envs}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(title="bundled specs (details: wml env specs)")
    for col in ("name", "version", "platforms", "file"):
        t.add_column(col)
    for s in specs:
        t.add_row(s["name"] + (" (legacy)" if s.get("legacy") else ""), str(s.get("version") or ""),
                  ", ".join(s.get("platforms", [])), s["file"])
    console.print(t)
    t = Table(title="environments")
    for col in ("name", "platform", "size", "prefix"):
        t.add_column(col)
    for e in envs:
        t.add_row(e["name"], e["platform"] or "?", _human(e["size"]), e["prefix"])
    console.print(t)


def _platform_of(prefix: Path) -> str | None:
    from wmlce_tools.env.installed import env_platform, conda_records

    try:
        return env_platform(conda_records(prefix))
    except WmlError:
        return None


# ------------------------------------------------------------------------------------- export

@env_app.command("export")
@_one_line_errors
def export_cmd(
    env: str = typer.Argument(..., help="Env name or path."),
    fmt: str = typer.Option("lockfile", "--format", help="lockfile (conda-lock) or explicit (@EXPLICIT list)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="File to write (default: stdout)."),
) -> None:
    """Export what is installed: a conda-lock lockfile or an explicit list."""
    from wmlce_tools.env.export import export_env
    from wmlce_tools.env.locations import resolve_env

    if fmt not in ("lockfile", "explicit"):
        raise WmlError(f"unknown export format {fmt!r} (lockfile or explicit)")
    text = export_env(resolve_env(env), fmt, output)  # type: ignore[arg-type]
    if text is not None:
        sys.stdout.write(text)
    else:
        typer.echo(str(output))


# ------------------------------------------------------------------------------------- pack

@env_app.command("pack")
@_one_line_errors
def pack_cmd(
    env: str = typer.Argument(..., help="Env name or path."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Archive (default: <name>.tar.gz)."),
    fmt: str = typer.Option("infer", "--format", help="tar.gz, tar.bz2, zip, no-archive, ... (default: from --output)."),
    dest_prefix: Optional[str] = typer.Option(None, "--dest-prefix", help="Prefix the env will be unpacked at."),
    force: bool = typer.Option(False, "--force", help="Overwrite OUTPUT."),
) -> None:
    """conda-pack the env (a relocatable virtualenv: a tar.gz of it)."""
    from wmlce_tools.env.locations import resolve_any_env
    from wmlce_tools.env.pack import pack_env

    prefix, venv = resolve_any_env(env)
    out = output or Path(f"{prefix.name}.tar.gz")
    if venv:
        from wmlce_tools.env.venv import pack_venv

        if fmt not in ("infer", "tar.gz", "tgz") or dest_prefix:
            raise WmlError("a venv packs as a relocatable tar.gz: --format and --dest-prefix apply to conda envs")
        typer.echo(str(pack_venv(prefix, out, force)))
        return
    typer.echo(str(pack_env(prefix, out, fmt, dest_prefix, force)))


# ------------------------------------------------------------------------------------- image

@env_app.command("image")
@_one_line_errors
def image_cmd(
    spec: str = typer.Argument(..., help="Bundled spec name, spec file (conda or kind: pypi), requirements.txt, or a conda-lock lockfile."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Directory for the definitions and the env file (default: ./<name>-image)."),
    base: Optional[str] = typer.Option(None, "--base", help="Base image (default: mambaorg/micromamba for conda, python:<version>-slim for PyPI)."),
    name: Optional[str] = typer.Option(None, "--name", help="The env's name in the image (default: the spec's)."),
    do_build: bool = typer.Option(False, "--build", help="Build the image with the builder found on PATH (apptainer, singularity, podman, buildah, ch-image; says which)."),
    builder: Optional[str] = typer.Option(None, "--builder", help="With --build: this builder."),
    tag: Optional[str] = typer.Option(None, "--tag", "-t", help="With --build: the image's tag (default: the env's name; apptainer writes <name>.sif)."),
) -> None:
    """Render an image definition (an Apptainer .def and a Containerfile) from a curated spec or
    a lock, so the curated env and the container hold the same packages; --build builds it."""
    from wmlce_tools.env.image import build, definition, run_hint

    d = definition(spec, base=base, name=name)
    out = output or Path(f"{d.name}-image")
    for path in d.write(out):
        typer.echo(str(path))
    if do_build:
        built = build(d, out, builder, tag)
        _info(f"wml: built {built}")
        _info(run_hint(built))          # the last line: how to run it


# ------------------------------------------------------------------------------------- module

@module_app.command("write")
@_one_line_errors
def module_write_cmd(
    env: str = typer.Argument(..., help="Env name or path."),
    lmod: bool = typer.Option(False, "--lmod", help="Lmod Lua modulefile (default)."),
    tcl: bool = typer.Option(False, "--tcl", help="Tcl modulefile (Environment Modules)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="File to write."),
    modulepath: Optional[Path] = typer.Option(None, "--modulepath", help="Write <DIR>/<name>[.lua]."),
    name: Optional[str] = typer.Option(None, "--name", help="Module / CONDA_DEFAULT_ENV name."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing modulefile."),
) -> None:
    """Write a modulefile that activates ENV (prints it when no --output/--modulepath)."""
    from wmlce_tools.env.locations import resolve_env
    from wmlce_tools.env.modulefile import ModuleEnv, default_filename, render, write_modulefile

    if lmod and tcl:
        raise WmlError("give one of --lmod or --tcl")
    if output is not None and modulepath is not None:
        raise WmlError("give one of --output or --modulepath")
    flavor = "tcl" if tcl else "lmod"
    menv = ModuleEnv.from_prefix(resolve_env(env), name)
    if output is None and modulepath is None:
        sys.stdout.write(render(menv, flavor))
        return
    target = output if output is not None else modulepath / default_filename(menv, flavor)  # type: ignore[operator]
    typer.echo(str(write_modulefile(menv, flavor, target, force)))


# ------------------------------------------------------------------------------------- standalone

def _standalone() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False)
    app.add_typer(env_app, name="env")
    app.add_typer(module_app, name="module")
    return app


if __name__ == "__main__":  # pragma: no cover
    _standalone()(prog_name="wml")
