"""Where environments live, and turning an env name into a prefix.

Envs that wml creates by name live in ``$WML_ENVS_DIR`` or, by default, the platformdirs user
data dir (``~/.local/share/wml/envs/<name>``).  Existing conda envs are found where conda keeps
them: ``$CONDA_ENVS_PATH`` (colon separated), ``~/.conda/envs`` and ``$CONDA_PREFIX/envs`` /
``$CONDA_ROOT/envs``; a read-only site env can be named by path.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from wmlce_tools.errors import WmlError

_NAME_RE = re.compile(r"[A-Za-z0-9._+-]+")


def wml_envs_dir() -> Path:
    override = os.environ.get("WML_ENVS_DIR")
    if override:
        return Path(override).expanduser().absolute()
    from platformdirs import user_data_dir

    return Path(user_data_dir("wml", appauthor=False)) / "envs"


def conda_envs_dirs() -> list[Path]:
    dirs: list[Path] = []
    for item in os.environ.get("CONDA_ENVS_PATH", "").split(os.pathsep):
        if item:
            dirs.append(Path(item).expanduser())
    dirs.append(Path.home() / ".conda" / "envs")
    for var in ("CONDA_ROOT", "CONDA_PREFIX"):
        root = os.environ.get(var)
        if root:
            dirs.append(Path(root) / "envs")
    return dirs


def search_dirs() -> list[Path]:
    out: list[Path] = []
    for d in [wml_envs_dir(), *conda_envs_dirs()]:
        d = d.absolute()
        if d not in out:
            out.append(d)
    return out


def is_env(prefix: Path) -> bool:
    return (prefix / "conda-meta").is_dir()


def looks_like_path(name_or_path: str) -> bool:
    return "/" in name_or_path or name_or_path.startswith(".") or name_or_path.startswith("~")


def check_env_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name) or name in (".", ".."):
        raise WmlError(f"invalid env name {name!r}: use letters, digits and ._+- only")
    return name


def resolve_env(name_or_path: str | os.PathLike[str]) -> Path:
    """The prefix of an existing env given by path or name; WmlError if there is none."""
    text = os.fspath(name_or_path)
    if looks_like_path(text) or Path(text).is_absolute():
        prefix = Path(text).expanduser().absolute()
        if not prefix.exists():
            raise WmlError(f"environment {text} does not exist")
        if not is_env(prefix):
            raise WmlError(f"{text} is not a conda environment (no conda-meta/ directory)")
        return prefix
    check_env_name(text)
    for d in search_dirs():
        prefix = d / text
        if is_env(prefix):
            return prefix
    where = ", ".join(str(d) for d in search_dirs())
    raise WmlError(f"unknown environment {text!r} (looked in {where})")


def target_prefix(name: str | None, prefix: str | os.PathLike[str] | None) -> Path:
    """The prefix a new env goes to, from exactly one of --name / --prefix."""
    if (name is None) == (prefix is None):
        raise WmlError("give exactly one of --name or --prefix")
    if prefix is not None:
        return Path(prefix).expanduser().absolute()
    return wml_envs_dir() / check_env_name(str(name))


def env_name(prefix: Path) -> str:
    """What CONDA_DEFAULT_ENV shows: the name for envs in a known envs dir, else the path."""
    prefix = prefix.absolute()
    if prefix.parent in search_dirs():
        return prefix.name
    return str(prefix)


def list_envs() -> list[Path]:
    out: list[Path] = []
    for d in search_dirs():
        if not d.is_dir():
            continue
        for child in sorted(d.iterdir()):
            if (is_env(child) or is_venv_dir(child)) and child not in out:
                out.append(child)
    return out


def is_venv_dir(prefix: Path) -> bool:
    """A virtualenv (``pyvenv.cfg``, no ``conda-meta/``)."""
    return (prefix / "pyvenv.cfg").is_file() and not (prefix / "conda-meta").is_dir()


def resolve_any_env(name_or_path: str | os.PathLike[str]) -> tuple[Path, bool]:
    """``(prefix, is_venv)`` of an existing conda env or virtualenv, by path or by name (a venv
    made by ``wml env create`` lives in wml's envs dir like a conda env)."""
    text = os.fspath(name_or_path)
    if looks_like_path(text) or Path(text).is_absolute():
        prefix = Path(text).expanduser().absolute()
        if is_venv_dir(prefix):
            return prefix, True
        return resolve_env(text), False
    check_env_name(text)
    for d in search_dirs():
        if is_venv_dir(d / text):
            return d / text, True
        if is_env(d / text):
            return d / text, False
    return resolve_env(text), False
