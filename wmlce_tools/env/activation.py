"""Activating an env in a job script without conda (for ``wml submit --env NAME``).

:func:`activation_lines` returns bash lines, each already quoted with :func:`shlex.quote`,
that do what ``conda activate`` does for a batch job: export CONDA_PREFIX, CONDA_DEFAULT_ENV
and CONDA_SHLVL, put ``$CONDA_PREFIX/bin`` first on PATH, and source the env's
``etc/conda/activate.d/*.sh`` scripts.  :func:`job_env_lines` is what a job script gets for
``--env``: a conda env's lines, or a virtualenv's (``python -m venv``, ``uv venv``: a
``pyvenv.cfg`` at its top) as its ``bin/activate`` sets it up for a script (VIRTUAL_ENV, its
``bin`` first on PATH, no PYTHONHOME); for a path on another machine (``wml render --site
<remote>``), lines that tell the two apart where the job runs.
"""
from __future__ import annotations

import os
import shlex
from pathlib import Path

from wmlce_tools.env.locations import env_name
from wmlce_tools.env.locations import resolve_any_env
from wmlce_tools.env.locations import resolve_env as _resolve_env

__all__ = ["resolve_env", "activation_lines", "job_env_lines", "env_prefix", "is_venv"]


def resolve_env(name_or_path: str | os.PathLike[str]) -> Path:
    """Prefix of an existing env (name or path); raises WmlError naming where it looked."""
    return _resolve_env(name_or_path)


def activation_lines(prefix: str | os.PathLike[str], prefix_shell: str | None = None) -> list[str]:
    """``prefix_shell``: a shell expression CONDA_PREFIX takes instead of ``prefix`` (a staged
    copy's prefix, known only in the job: ``"$wml_env_prefix"``)."""
    prefix = Path(prefix).absolute()
    q = shlex.quote
    return [
        f"export CONDA_PREFIX={prefix_shell or q(str(prefix))}",
        f"export CONDA_DEFAULT_ENV={q(env_name(prefix))}",
        "export CONDA_SHLVL=1",
        'export PATH="$CONDA_PREFIX/bin${PATH:+:$PATH}"',
        'for __wml_script in "$CONDA_PREFIX"/etc/conda/activate.d/*.sh; do',
        '    if [ -f "$__wml_script" ]; then . "$__wml_script"; fi',
        "done",
        "unset __wml_script",
    ]


def is_venv(prefix: Path) -> bool:
    """A virtualenv (``python -m venv``, ``virtualenv``, ``uv venv``): ``pyvenv.cfg`` at its top
    and no ``conda-meta/`` (a conda env with a venv's marker in it is activated as a conda env)."""
    return (prefix / "pyvenv.cfg").is_file() and not (prefix / "conda-meta").is_dir()


def venv_lines(prefix: str | os.PathLike[str], prefix_shell: str | None = None) -> list[str]:
    return [f"export VIRTUAL_ENV={prefix_shell or shlex.quote(str(Path(prefix).absolute()))}",
            'export PATH="$VIRTUAL_ENV/bin${PATH:+:$PATH}"',
            "unset PYTHONHOME"]


def _is_path(text: str) -> bool:
    return "/" in text or text.startswith((".", "~"))


def env_prefix(name_or_path: str, check: bool = True) -> Path:
    """The prefix of ``--env``: a virtualenv by path, else a conda env (:func:`resolve_env`);
    without ``check`` a path as it is on the machine the job runs on."""
    text = os.fspath(name_or_path)
    if _is_path(text):
        prefix = Path(text).expanduser().absolute()
        if not check or is_venv(prefix):
            return prefix
    return resolve_any_env(text)[0]          # by name: a conda env, or a venv wml env create made


def job_env_lines(name_or_path: str, check: bool = True, prefix_shell: str | None = None) -> list[str]:
    """The job script's lines for ``--env``.  ``check``: the env is on this machine (a conda env
    by name or path, or a virtualenv by path); else a path is taken as it is on the machine the
    job runs on, and the job tells a virtualenv from a conda env there (or stops, saying why).
    ``prefix_shell``: the shell expression the prefix takes in the job (a staged copy's)."""
    text = os.fspath(name_or_path)
    is_path = _is_path(text)
    if is_path and check:
        prefix = Path(text).expanduser().absolute()
        if prefix.exists() and is_venv(prefix):
            return venv_lines(prefix, prefix_shell)
        if prefix.exists() and not (prefix / "conda-meta").is_dir():
            from wmlce_tools.errors import WmlError

            raise WmlError(f"--env {text}: neither a conda environment (no conda-meta/) nor a virtualenv "
                           "(no pyvenv.cfg)")
    if not is_path or check:
        prefix, venv = resolve_any_env(text)
        return venv_lines(prefix, prefix_shell) if venv else activation_lines(prefix, prefix_shell)
    prefix = prefix_shell or shlex.quote(str(Path(text).expanduser().absolute()))
    venv = [f"    {line}" for line in venv_lines("X")[1:]]
    conda = [f"    {line}" for line in activation_lines("/X")[2:]]     # after CONDA_PREFIX, CONDA_DEFAULT_ENV
    return [f"wml_env={prefix}",     # conda-meta/ first, as is_venv tells them apart here
            'if [ -d "$wml_env/conda-meta" ]; then',
            '    export CONDA_PREFIX="$wml_env"', '    export CONDA_DEFAULT_ENV="$wml_env"', *conda,
            'elif [ -f "$wml_env/pyvenv.cfg" ]; then',
            '    export VIRTUAL_ENV="$wml_env"', *venv,
            "else",
            '    echo "wml: --env $wml_env is neither a virtualenv nor a conda environment on $(hostname)" >&2',
            "    exit 2",
            "fi"]
