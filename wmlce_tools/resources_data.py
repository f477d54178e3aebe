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
    """Directory of bundled data ``name`` (``templates``, ``site_configs`` or ``env_specs``):
    the checkout's own when this code runs from a source checkout (an editable install of
    another checkout maps ``wmlce_tools.templates`` to that one's folder: a worktree on
    PYTHONPATH would render with the other checkout's templates)."""
    own = _REPO_ROOT / name
    if own.is_dir() and (_REPO_ROOT / "setup.py").is_file() and (_REPO_ROOT / "wmlce_tools").is_dir():
        return own
    spec = importlib.util.find_spec(f"wmlce_tools.{name}")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            p = Path(loc)
            if p.is_dir():
                return p
    return _REPO_ROOT / name
