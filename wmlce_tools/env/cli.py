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
env_app = typer.Typer(help="Curated, locked conda environments: lock, create, clone, verify, "
                           "repair, list, export, pack.", no_args_is_help=True, rich_markup_mode=None)
module_app = typer.Typer(help="Modulefiles (Lmod / Environment Modules) for wml envs.",
                         no_args_is_help=True, rich_markup_mode=None)


#: top-level modules of the optional 'env' extra (pyproject.toml)
ENV_EXTRA_MODULES = {"rattler", "conda_lock", "conda_pack", "pydantic"}


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
                _fail(f"wml env needs the 'env' extra (py-rattler, conda-lock, conda-pack): "
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
    if not path.is_file():
        return False
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, OSError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and "package" in data and "metadata" in data


def _dst_prefix(dst: str) -> Path:
    from wmlce_tools.env.locations import looks_like_path, target_prefix

    if looks_like_path(dst) or Path(dst).is_absolute():
        return target_prefix(None, dst)
    return target_prefix(dst, None)


# ------------------------------------------------------------------------------------- lock

@env_app.command("lock")
@_one_line_errors
def lock_cmd(
    spec: str = typer.Argument(..., help="Bundled spec name, wml spec file, or conda environment.yml."),
    platform: List[str] = typer.Option([], "--platform", "-p", help="Platform(s) to lock (default: the spec's)."),
    channel: List[str] = typer.Option([], "--channel", "-c", help="Channel URL/path replacing the spec's channels (repeatable; file:// and mirrors work)."),
    lockfile: Path = typer.Option(Path("conda-lock.yml"), "--lockfile", "-f", help="Lockfile to write."),
    force: bool = typer.Option(False, "--force", help="Re-solve even if the content hashes match."),
) -> None:
    """Solve SPEC with py-rattler and write a conda-lock lockfile."""
    from wmlce_tools.env.lock import lock
    from wmlce_tools.env.spec import find_spec, load_spec

    env_spec = load_spec(find_spec(spec))
    result = lock(env_spec, lockfile, platforms=platform or None, channels=channel or None, force=force)
    for p in result.up_to_date:
        _info(f"{p}: up to date ({result.packages[p]} packages), not re-solved")
    for p in result.solved:
        _info(f"{p}: locked {result.packages[p]} packages")
    typer.echo(str(result.path))


# ------------------------------------------------------------------------------------- create

@env_app.command("create")
@_one_line_errors
def create_cmd(
    source: str = typer.Argument(..., help="Lockfile, bundled spec name, spec file or environment.yml."),
    prefix: Optional[Path] = typer.Option(None, "--prefix", help="Create the env at this path."),
    name: Optional[str] = typer.Option(None, "--name", "-n", help="Create the env under this name (in wml's envs dir)."),
    platform: Optional[str] = typer.Option(None, "--platform", "-p", help="Platform to install (default: this machine's)."),
    channel: List[str] = typer.Option([], "--channel", "-c", help="Channels replacing the spec's (specs only)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing env at the target."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress display."),
    link: Optional[str] = typer.Option(None, "--link", metavar="auto|hardlink|reflink|copy",
                                       help="How package files reach the env (default: $WML_ENV_LINK, else auto: "
                                       "hard links on a local filesystem, copies on a shared one). See env_specs/README.md."),
) -> None:
    """Install an env from a lock (or solve a spec first), atomically."""
    from wmlce_tools.env.create import create_env, current_platform
    from wmlce_tools.env.linking import link_policy
    from wmlce_tools.env.lock import lock, locked_env
    from wmlce_tools.env.locations import target_prefix
    from wmlce_tools.env.spec import find_spec, load_spec

    target = target_prefix(name, prefix)
    policy = link_policy(link)
    plat = platform or current_platform()
    src_path = Path(source)
    with tempfile.TemporaryDirectory(prefix="wml-lock-") as tmp:
        if _is_lockfile(src_path):
            if channel:
                raise WmlError("--channel applies to specs; a lockfile already names its packages' URLs")
            lockfile = src_path
        else:
            env_spec = load_spec(find_spec(source))
            env_spec.check_platform(plat)
            if target.exists() and not force:
                raise WmlError(f"{target} already exists (use --force to replace it)")
            lockfile = Path(tmp) / "conda-lock.yml"
            lock(env_spec, lockfile, platforms=[plat], channels=channel or None)
        locked = locked_env(lockfile, plat)
        result = create_env(locked, target, lockfile=lockfile, force=force, link=policy,
                            progress=progress and sys.stderr.isatty(), source=str(src_path.absolute()
                                                                               if src_path.exists() else source))
    _info(f"created {result.prefix} ({result.platform}: {result.conda_packages} conda packages"
          f"{f', {result.pip_packages} pip packages' if result.pip_packages else ''}; "
          f"files {_linked(result.link)})")
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
    """Clone SRC into DST: conda packages reinstalled, pip packages rebuilt, prefix rewritten."""
    from wmlce_tools.env.clone import clone_env
    from wmlce_tools.env.linking import link_policy
    from wmlce_tools.env.locations import resolve_env

    policy = link_policy(link)
    src_prefix = resolve_env(src)
    dst_prefix = _dst_prefix(dst)
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
    env: str = typer.Argument(..., help="Env name or path."),
    imports: List[str] = typer.Option([], "--import", help="Module to import (default: the spec's imports)."),
) -> None:
    """Check every package file's sha256 and that the spec's imports work (a virtualenv, by
    path: the files pip's RECORD lists, its scripts' python, and --import)."""
    from wmlce_tools.env.activation import is_venv
    from wmlce_tools.env.locations import looks_like_path, resolve_env
    from wmlce_tools.env.verify import verify_env, verify_venv

    given = Path(env).expanduser().absolute()
    if (looks_like_path(env) or Path(env).is_absolute()) and is_venv(given):
        prefix, report = given, verify_venv(given, imports or None)     # a virtualenv, as --env takes one
    else:
        prefix = resolve_env(env)
        report = verify_env(prefix, imports or None)
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
    if not report.ok:
        repair = (f"; to repair: wml env repair {env} (puts the packages' own files back), or re-create the env"
                  if report.file_problems else "")
        if report.file_problems and is_venv(prefix):
            names = " ".join(sorted({fp.package for fp in report.file_problems}))
            repair = f"; to repair: {prefix}/bin/python -m pip install --force-reinstall --no-deps {names}"
        _fail(f"{prefix}: {len(report.file_problems)} file problem(s), "
              f"{len(report.pip_problems)} pip script problem(s), "
              f"{len(report.import_problems)} failed import(s){repair}", 1)
    typer.echo(f"{prefix}: OK ({report.packages} packages, {report.files_checked} files, "
               f"{len(report.imports_checked)} imports)")


# ------------------------------------------------------------------------------------- repair

@env_app.command("repair")
@_one_line_errors
def repair_cmd(
    env: str = typer.Argument(..., help="Env name or path."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress display."),
    link: Optional[str] = typer.Option(None, "--link", metavar="auto|hardlink|reflink|copy",
                                       help="How the restored files reach the env (default: $WML_ENV_LINK, else auto)."),
) -> None:
    """Reinstall the packages whose files are missing or changed (what verify reports), from the
    checked package cache."""
    from wmlce_tools.env.linking import link_policy
    from wmlce_tools.env.locations import resolve_env
    from wmlce_tools.env.repair import repair_env

    policy = link_policy(link)
    prefix = resolve_env(env)
    result = repair_env(prefix, link=policy, progress=progress and sys.stderr.isatty())
    if not result.packages:
        typer.echo(f"{prefix}: nothing to repair ({result.files_checked} files of {result.total_packages} packages intact)")
        return
    for fp in result.fixed:
        _info(f"restored {fp.package}: {fp.path} ({fp.problem})")
    typer.echo(f"{prefix}: repaired {len(result.fixed)} file(s) in {len(result.packages)} package(s) "
               f"({', '.join(result.packages)}); files {_linked(result.link)}")


# ------------------------------------------------------------------------------------- list

def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


@env_app.command("list")
@_one_line_errors
def list_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Bundled specs and existing envs (with platform and size)."""
    from wmlce_tools.env.envinfo import EnvInfo
    from wmlce_tools.env.installed import env_size
    from wmlce_tools.env.locations import list_envs
    from wmlce_tools.env.spec import bundled_spec_paths, load_spec

    specs = []
    for path in bundled_spec_paths():
        try:
            s = load_spec(path)
        except WmlError as exc:
            specs.append({"name": path.stem, "error": str(exc), "file": str(path)})
            continue
        specs.append({"name": s.name, "version": s.version, "platforms": s.platforms, "file": str(path)})
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
    t = Table(title="bundled specs")
    for col in ("name", "version", "platforms", "file"):
        t.add_column(col)
    for s in specs:
        t.add_row(s["name"], str(s.get("version") or ""), ", ".join(s.get("platforms", [])), s["file"])
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
    """conda-pack the env."""
    from wmlce_tools.env.locations import resolve_env
    from wmlce_tools.env.pack import pack_env

    prefix = resolve_env(env)
    out = output or Path(f"{prefix.name}.tar.gz")
    typer.echo(str(pack_env(prefix, out, fmt, dest_prefix, force)))


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
