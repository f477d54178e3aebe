"""Activating an env in a job script without conda (for ``wml submit --env NAME``).

:func:`activation_lines` returns bash lines, each already quoted with :func:`shlex.quote`,
that do what ``conda activate`` does for a batch job: export CONDA_PREFIX, CONDA_DEFAULT_ENV
and CONDA_SHLVL, put ``$CONDA_PREFIX/bin`` first on PATH, and source the env's
``etc/conda/activate.d/*.sh`` scripts.
"""
from __future__ import annotations

import os
import shlex
from pathlib import Path

from wmlce_tools.env.locations import env_name
from wmlce_tools.env.locations import resolve_env as _resolve_env

__all__ = ["resolve_env", "activation_lines"]


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
