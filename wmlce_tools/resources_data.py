"""Where the bundled data lives: ``templates/``, ``site_configs/``, ``env_specs/``.

Installed (``pip install .``) they are the sub-packages ``wmlce_tools.templates`` etc. (see
setup.py); in a source checkout run without installing they are the top-level folders.
"""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent


@lru_cache(maxsize=None)
def data_dir(name: str) -> Path:
    """Directory of bundled data ``name`` (``templates``, ``site_configs`` or ``env_specs``).
    A source checkout's own folders come first: with an editable install of another checkout
    on the path (a git worktree run with PYTHONPATH), the installed mapping names that one."""
    if (_REPO_ROOT / "pyproject.toml").is_file() and (_REPO_ROOT / name).is_dir():
        return _REPO_ROOT / name
    spec = importlib.util.find_spec(f"wmlce_tools.{name}")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            p = Path(loc)
            if p.is_dir():
                return p
    return _REPO_ROOT / name
