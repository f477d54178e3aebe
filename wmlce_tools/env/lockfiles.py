"""Which kind of lock a file is, told by its content, whatever its name (``wml env lock SPEC -f
arm.toml`` then ``wml env create arm.toml``): a PEP 751 lock (TOML with ``lock-version``), a
conda-lock lockfile (YAML with ``package`` and ``metadata``), or neither (a spec)."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Optional


def lock_kind(path: Path) -> Optional[str]:
    """``"pylock"``, ``"conda"`` or None (not a file, unreadable, or not a lock)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        data = None
    if isinstance(data, dict) and "lock-version" in data:
        return "pylock"
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if isinstance(data, dict) and "package" in data and "metadata" in data:
        return "conda"
    return None
